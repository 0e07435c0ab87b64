//! Transports: stdio and Streamable HTTP. Both hand every message to rmcp; what rmcp leaves
//! to us (batches, malformed messages, limits, Origin policy) is handled in [`http`] and
//! [`stdio`], with the message checks they share in `jsonrpc`.

pub mod http;
mod jsonrpc;
mod pending;
pub mod stdio;
