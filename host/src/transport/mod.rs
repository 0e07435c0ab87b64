//! Transports: stdio and Streamable HTTP. Both hand every message to rmcp; what rmcp leaves
//! to us (batches, malformed bodies, limits, Origin policy) is handled in [`http`].

pub mod http;
pub mod stdio;
