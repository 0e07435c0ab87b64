//! Transports: stdio and Streamable HTTP, on Capsule's own wire. Both read each message once
//! with `jsonrpc` and hand it to the MCP dispatcher; server-to-client requests await their
//! answers in `pending`. A new binding (HTTP over a Unix socket, say) is one more module.

pub mod http;
mod jsonrpc;
mod pending;
pub mod stdio;

pub use jsonrpc::{BATCH_CEILING, MAX_BATCH};

/// Requests one client may have in flight (a stdio connection, a legacy HTTP session),
/// unless the operator says otherwise: far beyond what a client runs at once, and a bound
/// on what one can make the server hold.
pub const MAX_IN_FLIGHT: usize = 256;
