//! The store data of one call: a deny-by-default WASI context, the call's limits, and the
//! host functions of `capsule:plugin/host`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::sockets::SocketAddrUse;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::CallEvents;
use super::bindings::capsule::plugin::{host, types};
use super::limits::Limiter;
use super::net::NetworkGate;
use crate::policy::{Grants, Mount};

/// Everything a call's store holds.
pub(crate) struct CallState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    network: NetworkGate,
    table: ResourceTable,
    pub limiter: Limiter,
    events: Arc<dyn CallEvents>,
    events_left: u32,
    plugin: Arc<str>,
    mounts: Vec<Mount>,
    _live: LiveStore,
}

/// What a call's sandbox is built from.
pub(crate) struct Sandbox<'a> {
    pub plugin: Arc<str>,
    pub grants: &'a Grants,
    pub mounts: Vec<Mount>,
    pub events: Arc<dyn CallEvents>,
    pub event_limit: u32,
    pub stderr_limit: usize,
    pub table_elements: usize,
    pub live: &'a Arc<AtomicUsize>,
}

impl CallState {
    /// Build a call's store data. Fails only if a granted directory cannot be opened.
    pub fn new(sandbox: Sandbox<'_>) -> Result<Self, String> {
        // Deny by default: no arguments, stdin, DNS, UDP or listening sockets; the
        // environment, directories, HTTP destinations and TCP peers are exactly what the
        // grants name. A plugin always gets clocks and
        // randomness, and its stderr goes to our log.
        let mut wasi = WasiCtxBuilder::new();
        wasi.stderr(StderrToLog::new(sandbox.plugin.clone(), sandbox.stderr_limit))
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
        for mount in &sandbox.mounts {
            let perms = if mount.write { FsPerms::ReadWrite } else { FsPerms::ReadOnly };
            wasi.preopened_dir(&mount.host, &mount.guest, perms)
                .map_err(|e| format!("cannot open granted directory {}: {e:#}", mount.host.display()))?;
        }
        let limiter = Limiter { memory: sandbox.grants.limits.memory, table_elements: sandbox.table_elements };
        Ok(CallState {
            wasi: wasi.build(),
            http: WasiHttpCtx::new(),
            network: NetworkGate::new(sandbox.plugin.clone(), sandbox.grants.network.clone()),
            table: ResourceTable::new(),
            limiter,
            events: sandbox.events,
            events_left: sandbox.event_limit,
            plugin: sandbox.plugin,
            mounts: sandbox.mounts,
            _live: LiveStore::new(sandbox.live),
        })
    }

    /// Count one event against the call's budget; false once it is spent.
    fn take_event(&mut self) -> bool {
        match self.events_left {
            0 => false,
            1 => {
                self.events_left = 0;
                tracing::warn!(plugin = %self.plugin, "plugin exceeded its log/progress budget for this call; further messages are dropped");
                false
            }
            _ => {
                self.events_left -= 1;
                true
            }
        }
    }
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
        if self.take_event() {
            self.events.log(level, logger, message);
        }
        Ok(())
    }

    async fn progress(&mut self, progress: f64, total: Option<f64>, message: Option<String>) -> wasmtime::Result<()> {
        if self.take_event() {
            self.events.progress(progress, total, message);
        }
        Ok(())
    }

    async fn cancelled(&mut self) -> wasmtime::Result<bool> {
        Ok(self.events.is_cancelled())
    }

    async fn list_changed(&mut self, kind: host::ListKind) -> wasmtime::Result<()> {
        if self.take_event() {
            self.events.list_changed(kind);
        }
        Ok(())
    }

    async fn mounts(&mut self) -> wasmtime::Result<Vec<host::Mount>> {
        Ok(self
            .mounts
            .iter()
            .map(|m| host::Mount { path: m.guest.clone(), name: m.name.clone(), writable: m.write })
            .collect())
    }
}

/// Counts itself in the runtime's live instances while its store exists.
struct LiveStore(Arc<AtomicUsize>);

impl LiveStore {
    fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        LiveStore(count.clone())
    }
}

impl Drop for LiveStore {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Plugin stderr, forwarded line by line to the host log up to a byte budget.
#[derive(Clone)]
struct StderrToLog {
    plugin: Arc<str>,
    budget: Arc<AtomicUsize>,
    line: Arc<std::sync::Mutex<Vec<u8>>>,
}

impl StderrToLog {
    fn new(plugin: Arc<str>, limit: usize) -> Self {
        StderrToLog { plugin, budget: Arc::new(AtomicUsize::new(limit)), line: Arc::default() }
    }

    fn push(&self, data: &[u8]) {
        let allowed = self
            .budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| Some(left.saturating_sub(data.len())))
            .unwrap_or(0)
            .min(data.len());
        let mut line = self.line.lock().unwrap_or_else(|e| e.into_inner());
        line.extend_from_slice(&data[..allowed]);
        while let Some(end) = line.iter().position(|&b| b == b'\n') {
            let text: Vec<u8> = line.drain(..=end).collect();
            tracing::info!(target: "capsule::plugin", plugin = %self.plugin, "{}", String::from_utf8_lossy(&text).trim_end());
        }
        if line.len() >= 4096 || (allowed < data.len() && !line.is_empty()) {
            tracing::info!(target: "capsule::plugin", plugin = %self.plugin, "{}", String::from_utf8_lossy(&line));
            line.clear();
        }
    }
}

impl IsTerminal for StderrToLog {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for StderrToLog {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for StderrToLog {
    async fn ready(&mut self) {}
}

impl OutputStream for StderrToLog {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 << 10)
    }
}

impl tokio::io::AsyncWrite for StderrToLog {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.push(data);
        std::task::Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}
