//! # Capsule: MCP served from sandboxed WebAssembly component plugins
//!
//! The layers, each depending only on the ones below it:
//!
//! - [`transport`]: stdio and Streamable HTTP (axum), Capsule's own wire: each message is
//!   read once into a borrowed envelope, with the checks that belong to the wire (Origin/Host,
//!   SEP-2243 headers, body and line limits, JSON-RPC batches), legacy sessions and their
//!   event streams. It hands the MCP layer a method, raw params and a `Front` (the request
//!   id, a `ClientLink` back to the client, its cancellation).
//! - [`mcp`]: the MCP server. Its dispatcher parses params once into the type each method
//!   takes and applies the revision rules, 2024-11-05 to 2026-07-28, in one place; it bridges
//!   plugin input requests (elicitation, sampling, roots) to whatever the client's revision
//!   supports, and maps plugin faults to proper protocol answers. rmcp provides the protocol
//!   model types and stops here.
//! - [`catalog`]: every loaded plugin's tools, resources, templates and prompts, with tool
//!   arguments validated against their JSON Schemas and name collisions rejected.
//! - [`runtime`]: wasmtime. Compiles each component once and runs every call in a fresh,
//!   deny-by-default sandbox built from the plugin's grants: its limits, and the directories,
//!   environment and hosts the [`policy`] allows; every call leases one of the engine's
//!   instances from its plugin's reserve or the shared rest; a worker going idle builds the
//!   next call's instance ahead, still one instance per call. Knows nothing of MCP.
//! - [`policy`]: the operator's policy file, plain data and checks, also MCP-free.
//!
//! Beside them, the [`loader`] keeps a catalog in step with the plugin sources and the
//! policy (initial load, hot swap through `watch`, which also follows a plugin directory
//! made again or swapped in by a rename, the operator's controls) and *publishes* each new one on a
//! watch channel ([`catalog::Publisher`]); the MCP layer subscribes, serves whatever catalog
//! is current when a request starts, and tells clients which lists changed. Neither knows
//! the other.
//!
//! [`tenants`] composes them per tenant: each has its own loader (sources, policy, catalog)
//! and its own MCP state (sessions, subscriptions), and the registry publishes the set of
//! tenants on a watch channel the HTTP transport routes by (`/t/{tenant}/mcp`, or a tenant's
//! host name at `/mcp`). All tenants share one engine, so a component is compiled once.
//! [`admin`] drives the registry and the loaders only. [`auth`] is a tenant's OAuth resource
//! server: the HTTP transport authenticates each request with it before reading the body,
//! and the MCP layer holds the resulting principal to its scopes.
//!
//! [`check`] and [`scaffold`] serve plugin authors: `capsule check` runs a plugin through
//! exactly what `serve` would do, and `capsule plugin new` makes a project in any SDK's
//! language.
//!
//! [`telemetry`] is a leaf every layer records into (metrics, the spans exported over OTLP,
//! and the log, through Capsule's own `tracing` subscriber); [`top`] is its reader for operators, `capsule top`, a client of `/metrics`.
//! [`listener`] is the accept loop of every HTTP listener, with its connection limits.
//! [`workers`] are the async runtimes `serve` runs on, one thread each, with every HTTP
//! connection served by one of them so that no request is handed between threads;
//! [`idle_poll`] tunes them: a worker that has just served something polls briefly for more
//! before its CPU halts.

pub mod admin;
pub mod auth;
mod bounded;
pub mod catalog;
pub mod check;
pub mod cli;
pub mod files;
pub mod idle_poll;
pub mod listener;
pub mod loader;
pub mod mcp;
pub mod policy;
pub mod runtime;
pub mod scaffold;
pub mod sched;
pub mod telemetry;
pub mod tenants;
pub mod top;
pub mod transport;
mod watch;
pub mod workers;

/// Example plugins compiled into the binary.
pub mod bundled {
    include!(concat!(env!("OUT_DIR"), "/bundled.rs"));
}
