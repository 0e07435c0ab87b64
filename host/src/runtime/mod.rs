//! The plugin runtime: compiles WebAssembly components once and runs every call in a fresh,
//! deny-by-default sandbox with a CPU deadline and a memory cap.
//!
//! This layer knows nothing about MCP. It speaks the WIT package in `wit/` (its types are
//! re-exported from [`types`]) and reports what a running call does through [`CallEvents`].

mod bindings;
mod cache;
mod clock;
mod engine;
mod error;
mod fs;
mod limits;
mod net;
mod offload;
mod output;
mod plugin;
mod pool;
mod quota;
mod sandbox;
mod spare;
mod stderr;

pub use bindings::types;
pub use cache::{CompileCache, digest};
pub use engine::{Inspection, PluginRuntime, RuntimeConfig};
pub use error::{CallError, LoadError};
pub(crate) use limits::thread_cpu;
pub use plugin::{Manifest, Plugin};
pub use quota::{Account, Held, InstanceHeld, QuotaExceeded, Usage};
pub use spare::{worker_idle, worker_stopped};

/// Which plugin list a `list-changed` call names.
pub use bindings::ListKind;
/// Severity of a plugin log message.
pub use bindings::LogLevel;

/// Someone the host authenticated, as a call may learn it: never the credential itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's subject, or the API key's.
    pub subject: String,
    /// The OAuth client the token was issued to, when it says.
    pub client: Option<String>,
    /// The scopes the credential grants.
    pub scopes: Vec<String>,
}

/// What a running call reports to whoever started it, and what it may ask them.
/// Implementations must not block: they are called from inside the plugin's execution.
pub trait CallEvents: Send + Sync {
    /// Who the request comes from; `None` when nobody was authenticated.
    fn caller(&self) -> Option<Caller>;
    /// The plugin logged a message.
    fn log(&self, level: LogLevel, logger: Option<String>, message: String);
    /// The plugin reported progress.
    fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>);
    /// Whether the request this call serves was cancelled.
    fn is_cancelled(&self) -> bool;
    /// Cancelled when the request this call serves is. A call moved off the request
    /// workers blocks the task that awaits it, so the call watches this itself.
    fn cancellation(&self) -> tokio_util::sync::CancellationToken;
    /// The plugin says one of its lists changed.
    fn list_changed(&self, kind: ListKind);
    /// The plugin says a resource changed: each URI once per call, at most 64, none over
    /// 16 KiB (the sandbox sees to that). Whether the plugin serves it is for the caller to check.
    fn resource_updated(&self, uri: String);
}

/// How a call's events are passed around.
pub type Events = std::sync::Arc<dyn CallEvents + 'static>;

/// Events of a call nobody listens to (loading, listing).
pub struct NoEvents;

impl CallEvents for NoEvents {
    fn caller(&self) -> Option<Caller> {
        None
    }
    fn log(&self, level: LogLevel, logger: Option<String>, message: String) {
        tracing::debug!(?level, ?logger, "plugin log outside a request: {message}");
    }
    fn progress(&self, _: f64, _: Option<f64>, _: Option<String>) {}
    fn is_cancelled(&self) -> bool {
        false
    }
    fn cancellation(&self) -> tokio_util::sync::CancellationToken {
        tokio_util::sync::CancellationToken::new()
    }
    fn list_changed(&self, _: ListKind) {}
    fn resource_updated(&self, _: String) {}
}
