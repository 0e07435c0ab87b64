//! The store data of one call: a deny-by-default WASI context, the call's limits, and the
//! host functions of `capsule:plugin/host`.

use std::os::fd::BorrowedFd;
use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream};
use wasmtime_wasi::sockets::SocketAddrUse;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::CallEvents;
use super::bindings::capsule::plugin::{host, types};
use super::clock::{EpochClock, StoreHold};
use super::fs::{GrantDirs, preopen_vanished};
use super::limits::Limiter;
use super::net::NetworkGate;
use super::stderr::CallStderr;
use crate::policy::{Grants, Mount};

/// The most WASI resources (open files and directories, streams, pollables, HTTP requests)
/// one call may hold at once. Each open file is a descriptor of the whole process, outside
/// the call's memory cap: wasmtime's default of a million per call let one plugin opening
/// files in a loop take every descriptor the server has (connections, other calls' mounts,
/// the compile cache) until its deadline. One more traps the call.
pub(crate) const MAX_RESOURCES: usize = 4096;

/// Everything a call's store holds.
pub(crate) struct CallState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    network: NetworkGate,
    table: ResourceTable,
    pub limiter: Limiter,
    events: Arc<dyn CallEvents>,
    events_left: u32,
    /// Bytes of log and progress text the call may still send: they count against its output
    /// limit like its result does.
    event_bytes_left: usize,
    /// The resources the call said changed, each reported once.
    updated: std::collections::HashSet<String>,
    /// The last progress forwarded: each must be above it.
    progress: Option<f64>,
    plugin: Arc<str>,
    tenant: Arc<str>,
    mounts: Vec<Mount>,
    pub stderr: CallStderr,
    /// Whether the guest has called a function of Capsule's host interface, all of which
    /// answer for a call (see `untouched`).
    host_called: bool,
    /// Counts the store with the epoch clock while a call may run in it (see `spare`).
    live: Option<StoreHold>,
}

/// The longest log or progress message forwarded; longer ones are cut.
const MESSAGE_LIMIT: usize = 64 << 10;
/// What a notification costs beyond its text (its JSON-RPC framing).
const EVENT_OVERHEAD: usize = 128;
/// The most distinct resources one call may say changed, and the longest URI it may name
/// (the longest a client may send).
const UPDATED_LIMIT: usize = 64;
const URI_LIMIT: usize = 16 << 10;
/// The most random bytes one `get-random-bytes` call may ask for: a host call is bounded work.
const RANDOM_LIMIT: u64 = 1 << 20;

/// What a call's sandbox is built from.
pub(crate) struct Sandbox<'a> {
    pub plugin: Arc<str>,
    pub tenant: Arc<str>,
    pub grants: &'a Grants,
    /// The grants' directories, open.
    pub dirs: &'a GrantDirs,
    pub mounts: Vec<Mount>,
    pub events: Arc<dyn CallEvents>,
    pub event_limit: u32,
    /// Where its stderr goes: a new buffer of `stderr_limit` bytes, or the one a prebuilt
    /// instance's streams already write to.
    pub stderr: Option<CallStderr>,
    pub stderr_limit: usize,
    /// For a prebuilt instance's placeholder state: an empty directory to preopen in place
    /// of the mounts a call will have (see `spare`).
    pub placeholder_dir: Option<BorrowedFd<'a>>,
    pub table_elements: usize,
    pub clock: &'a EpochClock,
}

impl CallState {
    /// Build a call's store data. Fails only if a granted directory cannot be opened.
    pub fn new(sandbox: Sandbox<'_>) -> Result<Self, String> {
        // Deny by default: no arguments, stdin, DNS, UDP or listening sockets; the
        // environment, directories, HTTP destinations and TCP peers are exactly what the
        // grants name. A plugin always gets clocks and
        // randomness, and its stderr goes to our log.
        let stderr = sandbox.stderr.unwrap_or_else(|| CallStderr::new(sandbox.stderr_limit));
        let mut wasi = WasiCtxBuilder::new();
        wasi.stderr(stderr.clone())
            .max_random_size(RANDOM_LIMIT)
            .allow_tcp(!sandbox.grants.tcp.is_empty())
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        let tcp = sandbox.grants.tcp.clone();
        wasi.socket_addr_check(move |addr, usage| {
            let allowed = match usage {
                // Connecting binds the socket to the wildcard address first.
                SocketAddrUse::TcpBind => addr.ip().is_unspecified() && addr.port() == 0,
                SocketAddrUse::TcpConnect => tcp.contains(&addr),
                _ => false,
            };
            Box::pin(async move { allowed })
        });
        for (name, value) in &sandbox.grants.env {
            wasi.env(name, value);
        }
        for (name, secret) in &sandbox.grants.secrets {
            wasi.env(name, secret.expose());
        }
        let mounts = sandbox.dirs.preopen(&sandbox.plugin, &mut wasi, sandbox.mounts)?;
        if let Some(dir) = sandbox.placeholder_dir {
            preopen_vanished(&mut wasi, dir)?;
        }
        let limiter = Limiter { memory: sandbox.grants.limits.memory, table_elements: sandbox.table_elements, peak: 0 };
        Ok(CallState {
            wasi: wasi.build(),
            http: WasiHttpCtx::new(),
            network: NetworkGate::new(sandbox.plugin.clone(), sandbox.grants.network.clone()),
            table: {
                let mut table = ResourceTable::new();
                table.set_max_capacity(MAX_RESOURCES);
                table
            },
            limiter,
            events: sandbox.events,
            events_left: sandbox.event_limit,
            event_bytes_left: sandbox.grants.limits.output,
            updated: std::collections::HashSet::new(),
            progress: None,
            plugin: sandbox.plugin,
            tenant: sandbox.tenant,
            mounts,
            stderr,
            host_called: false,
            live: Some(sandbox.clock.hold()),
        })
    }

    /// Stop counting the store with the epoch clock: it waits for a call (see `spare`), and
    /// an idle server's clock sleeps.
    pub fn detach_clock(&mut self) {
        self.live = None;
    }

    /// Whether nothing happened while this store's instance was built that would make it
    /// differ from one built for a call: no stderr written, no call to Capsule's host
    /// interface (its answers and messages are a call's), and no WASI resource opened but
    /// the standard streams, which are alike for every call (a closed stdin, a discarding
    /// stdout, and stderr, whose buffer the call is given). Another stream would be the
    /// child of a resource (a file, a socket) still in the table, and a start function that
    /// asked for its directories holds the placeholder's descriptor (see `spare`).
    pub fn untouched(&mut self) -> bool {
        !self.host_called
            && self.stderr.is_empty()
            && self.table.iter_mut().all(|entry| entry.is::<DynInputStream>() || entry.is::<DynOutputStream>())
    }

    /// Take the resources a prebuilt instance opened while it was built: they are its own.
    pub fn adopt_resources(&mut self, built: &mut CallState) {
        self.table = std::mem::take(&mut built.table);
    }

    /// Whether the request this call serves was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.events.is_cancelled()
    }

    /// Count one event of `bytes` of text against the call's budgets; false once either is
    /// spent.
    fn take_event(&mut self, bytes: usize) -> bool {
        let cost = bytes.saturating_add(EVENT_OVERHEAD);
        if self.events_left > 0 && cost <= self.event_bytes_left {
            self.events_left -= 1;
            self.event_bytes_left -= cost;
            return true;
        }
        if self.events_left > 0 || self.event_bytes_left > 0 {
            tracing::warn!(plugin = %self.plugin, "plugin exceeded its log/progress budget for this call (messages, or bytes against its output limit); further messages are dropped");
            // Warn once: nothing more is sent for this call.
            self.events_left = 0;
            self.event_bytes_left = 0;
        }
        false
    }
}

/// `text` cut to [`MESSAGE_LIMIT`] bytes, on a character boundary.
fn capped(mut text: String) -> String {
    if text.len() > MESSAGE_LIMIT {
        text.truncate(text.floor_char_boundary(MESSAGE_LIMIT));
        text.push_str(" […]");
    }
    text
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl WasiHttpView for CallState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.network }
    }
}

impl types::Host for CallState {}

impl host::Host for CallState {
    async fn log(&mut self, level: host::LogLevel, logger: Option<String>, message: String) -> wasmtime::Result<()> {
        self.host_called = true;
        let (logger, message) = (logger.map(capped), capped(message));
        if self.take_event(message.len() + logger.as_ref().map_or(0, String::len)) {
            self.events.log(level, logger, message);
        }
        Ok(())
    }

    async fn progress(&mut self, progress: f64, total: Option<f64>, message: Option<String>) -> wasmtime::Result<()> {
        self.host_called = true;
        // MCP's progress is a number that rises with every notification; NaN and the
        // infinities would go out as `null`, which clients reject. Such a report is dropped.
        let rises = self.progress.is_none_or(|last| progress > last);
        if !progress.is_finite() || !total.is_none_or(f64::is_finite) || !rises {
            return Ok(());
        }
        let message = message.map(capped);
        if self.take_event(message.as_ref().map_or(0, String::len)) {
            self.progress = Some(progress);
            self.events.progress(progress, total, message);
        }
        Ok(())
    }

    async fn cancelled(&mut self) -> wasmtime::Result<bool> {
        self.host_called = true;
        Ok(self.events.is_cancelled())
    }

    async fn list_changed(&mut self, kind: host::ListKind) -> wasmtime::Result<()> {
        self.host_called = true;
        if self.take_event(0) {
            self.events.list_changed(kind);
        }
        Ok(())
    }

    async fn resource_updated(&mut self, uri: String) -> wasmtime::Result<()> {
        self.host_called = true;
        if !self.take_event(uri.len()) || self.updated.contains(&uri) {
            return Ok(());
        }
        if uri.len() > URI_LIMIT || self.updated.len() >= UPDATED_LIMIT {
            tracing::debug!(plugin = %self.plugin, "resource-updated ignored: URI over 16 KiB or over 64 in one call");
            return Ok(());
        }
        self.updated.insert(uri.clone());
        self.events.resource_updated(uri);
        Ok(())
    }

    async fn mounts(&mut self) -> wasmtime::Result<Vec<host::Mount>> {
        self.host_called = true;
        Ok(self
            .mounts
            .iter()
            .map(|m| host::Mount { path: m.guest.clone(), name: m.name.clone(), writable: m.write })
            .collect())
    }

    async fn caller(&mut self) -> wasmtime::Result<host::Identity> {
        self.host_called = true;
        let principal = self.events.caller().map(|caller| host::Principal {
            subject: caller.subject,
            client: caller.client,
            scopes: caller.scopes,
        });
        Ok(host::Identity { tenant: self.tenant.to_string(), principal })
    }
}
