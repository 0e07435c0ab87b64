//! Errors of the plugin runtime: why a plugin could not load, why a call failed.

use std::time::Duration;

use thiserror::Error;

use super::quota::QuotaExceeded;
use crate::telemetry::Outcome;

/// A plugin could not be loaded.
#[derive(Debug, Error)]
pub enum LoadError {
    /// The bytes are not a valid WebAssembly component.
    #[error("{plugin}: not a valid WebAssembly component: {reason}")]
    Compile { plugin: String, reason: String },
    /// The component needs imports the host does not provide.
    #[error("{plugin}: cannot be linked: {reason}")]
    Link { plugin: String, reason: String },
    /// The component exports none of the Capsule interfaces; `why` guesses at the reason.
    #[error("{plugin}: exports none of capsule:plugin/{{tools,resources,prompts,completion}}@0.1.0; {why}")]
    NoExports { plugin: String, why: String },
    /// An export has the right name but the wrong shape.
    #[error("{plugin}: export {export} does not match the Capsule WIT package: {reason}")]
    BadExport { plugin: String, export: &'static str, reason: String },
    /// Listing the plugin's tools, resources or prompts failed.
    #[error("{plugin}: listing its {what} failed: {source}")]
    Listing { plugin: String, what: &'static str, source: CallError },
    /// The policy forbids loading the plugin as it is.
    #[error("{plugin}: {reason}")]
    Policy { plugin: String, reason: String },
    /// The engine could not be configured.
    #[error("the WebAssembly engine could not be configured: {0}")]
    Engine(String),
}

/// A call into a plugin failed. Each variant names the limit or fault, so the message is
/// something a person can act on.
#[derive(Debug, Error)]
pub enum CallError {
    /// The plugin used more CPU time than its deadline.
    #[error("the plugin exceeded its CPU deadline of {0:?} and was stopped")]
    Deadline(Duration),
    /// The call took longer than its wall-clock limit (e.g. waiting forever).
    #[error("the plugin did not finish within {0:?} and was stopped")]
    WallClock(Duration),
    /// The plugin tried to grow its memory beyond its cap.
    #[error("the plugin exceeded its memory limit of {limit} bytes (it asked for {desired} bytes) and was stopped")]
    Memory { limit: usize, desired: usize },
    /// The plugin overflowed its stack (e.g. unbounded recursion).
    #[error("the plugin overflowed its stack and was stopped")]
    StackOverflow,
    /// The plugin trapped (a Rust panic shows up as `unreachable`).
    #[error("the plugin crashed: {0}")]
    Trap(String),
    /// The result is larger than the plugin's output limit.
    #[error("the plugin's result of {size} bytes exceeds its output limit of {limit} bytes and was discarded")]
    Output { limit: usize, size: usize },
    /// The plugin handed the host more at once (a result, or a host call's arguments) than a
    /// call within its output limit could.
    #[error(
        "the plugin handed the host more than {0} bytes at once, beyond what its output limit allows, and was stopped"
    )]
    Copied(usize),
    /// The plugin already runs as many calls as its concurrency limit allows.
    #[error("the plugin is already running its limit of {0} concurrent calls; try again shortly")]
    PluginBusy(u32),
    /// A granted directory could not be opened for the call.
    #[error("the plugin's sandbox could not be set up: {0}")]
    Sandbox(String),
    /// No instance is free for this plugin: its reserve and the shared instances are in use.
    #[error(
        "no plugin instance is free for this plugin (its reserved instances and the shared ones are in use); try again shortly"
    )]
    Busy,
    /// One of the tenant's quotas is used up.
    #[error(transparent)]
    Quota(#[from] QuotaExceeded),
    /// The request was cancelled; the plugin was stopped.
    #[error("the request was cancelled")]
    Cancelled,
    /// The plugin does not export the interface this call needs.
    #[error("the plugin does not provide {0}")]
    Unsupported(&'static str),
    /// An export has the right name but not the Capsule WIT package's types (found when its
    /// functions are looked up, before any of its code runs).
    #[error("export {export} does not match the Capsule WIT package: {reason}")]
    Mismatch { export: &'static str, reason: String },
    /// Something else in the host failed.
    #[error("internal error running the plugin: {0}")]
    Host(String),
}

/// The error of looking up an export's functions with the Capsule WIT package's types, as it
/// travels out of a sandbox run to become [`CallError::Mismatch`].
#[derive(Debug, Error)]
#[error("export {export} does not match the Capsule WIT package: {reason}")]
pub(super) struct ExportMismatch {
    pub export: &'static str,
    pub reason: String,
}

impl ExportMismatch {
    /// Wrap a lookup's error as a mismatch of `export`.
    pub fn of(export: &'static str) -> impl Fn(wasmtime::Error) -> wasmtime::Error {
        move |e| wasmtime::Error::new(ExportMismatch { export, reason: format!("{e:#}") })
    }
}

impl CallError {
    /// How the metrics count a call that failed this way.
    pub fn outcome(&self) -> Outcome {
        match self {
            CallError::Deadline(_) => Outcome::Deadline,
            CallError::WallClock(_) => Outcome::WallClock,
            CallError::Memory { .. } => Outcome::Memory,
            CallError::StackOverflow => Outcome::Stack,
            CallError::Trap(_) => Outcome::Trap,
            CallError::Output { .. } | CallError::Copied(_) => Outcome::OutputCap,
            CallError::PluginBusy(_) | CallError::Busy | CallError::Quota(_) => Outcome::Busy,
            CallError::Cancelled => Outcome::Cancelled,
            CallError::Sandbox(_) | CallError::Unsupported(_) | CallError::Mismatch { .. } | CallError::Host(_) => {
                Outcome::HostError
            }
        }
    }
}
