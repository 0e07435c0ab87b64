//! What operators see of the server: metrics in the Prometheus text format, served on the
//! admin listener and on `--metrics HOST:PORT`; traces exported over OTLP.
//!
//! A leaf: every layer may record into [`Metrics`], and it imports none of them. The layers
//! hand it down (the runtime's configuration carries it, the MCP layer reaches it through
//! its shared state), so a server's metrics are its own, not the process's.

mod labels;
mod metrics;
mod serve;
mod traces;

pub use metrics::{CONTENT_TYPE, InFlight, Load, Metrics, Operation, Outcome, Traffic};
pub use serve::{Scrape, respond, serve};
pub use traces::{TraceSetupError, Traces, start_trace};
