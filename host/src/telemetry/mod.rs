//! What operators see of the server: metrics in the Prometheus text format, served on the
//! admin listener and on `--metrics HOST:PORT`; traces exported over OTLP; logs.
//!
//! Capsule's own `tracing` subscriber (`subscriber`) writes the log (`logs` lays out each
//! line; `fields` writes text fields) and records Capsule's spans (`spans`), which are
//! encoded straight into OTLP protobuf (`otlp`) as each span ends and posted in batches by
//! one thread (`export`); log lines go to stderr through a thread of their own (`stderr`);
//! the client's W3C trace context is parsed in `w3c`, and `traces` reads the standard
//! `OTEL_*` variables and ties them together.
//!
//! A leaf: every layer may record into [`Metrics`], and it imports none of them. The layers
//! hand it down (the runtime's configuration carries it, the MCP layer reaches it through
//! its shared state), so a server's metrics are its own, not the process's.

mod export;
mod fields;
mod labels;
mod logs;
mod metrics;
mod otlp;
mod serve;
mod sharded;
mod spans;
mod stderr;
mod subscriber;
mod traces;
mod w3c;

/// The log target of plugins' own messages (`host.log`): their level is theirs, so an
/// error among them says nothing of the request's outcome.
pub const PLUGIN_LOG: &str = "capsule::plugin";

pub use fields::TextFields;
pub use labels::{method_name, version_name};
pub use logs::LogStyle;
pub use metrics::{
    CONTENT_TYPE, InFlight, Load, Metrics, Operation, Outcome, PluginMeters, Refusal, ToolMeters, Traffic,
};
pub use serve::{HostCheck, Scrape, app, respond};
pub use spans::{SetAttribute, SpanRecorder, TraceContext, export_attributes, trace_context};
pub use stderr::{flush as flush_logs, stderr};
pub use subscriber::{LogFilter, LogOut, Telemetry, dispatch};
pub use traces::{TraceSetupError, Traces};
