//! # Capsule: MCP served from sandboxed WebAssembly component plugins
//!
//! The layers, each depending only on the ones below it:
//!
//! - [`transport`]: stdio and Streamable HTTP (axum), with the checks that belong to the
//!   wire: Origin/Host, body size, JSON-RPC batches, session limits.
//! - [`mcp`]: the MCP server on top of `rmcp`. It speaks every revision from 2024-11-05 to
//!   2026-07-28, bridges plugin input requests (elicitation, sampling, roots) to whatever the
//!   client's revision supports, and maps plugin faults to proper protocol answers. rmcp's
//!   types stop here. A request reaches the code that calls plugins as a `RequestCx` with a
//!   `ClientLink` back to its client, whatever front dispatched it.
//! - [`catalog`]: every loaded plugin's tools, resources, templates and prompts, with tool
//!   arguments validated against their JSON Schemas and name collisions rejected.
//! - [`runtime`]: wasmtime. Compiles each component once and runs every call in a fresh,
//!   deny-by-default sandbox built from the plugin's grants: its limits, and the directories,
//!   environment and hosts the [`policy`] allows; every call leases one of the engine's
//!   instances from its plugin's reserve or the shared rest. Knows nothing of MCP.
//! - [`policy`]: the operator's policy file, plain data and checks, also MCP-free.

pub mod admin;
pub mod catalog;
pub mod check;
pub mod cli;
pub mod loader;
pub mod mcp;
pub mod policy;
pub mod runtime;
pub mod transport;

/// Example plugins compiled into the binary.
pub mod bundled {
    include!(concat!(env!("OUT_DIR"), "/bundled.rs"));
}
