//! The server's metrics, in the Prometheus text format.
//!
//! Names follow the OpenTelemetry semantic conventions for MCP where they exist
//! (`mcp_server_operation_duration_seconds`, `mcp_server_session_duration_seconds`, with
//! `mcp_method_name`, `gen_ai_tool_name`, `error_type`, `network_transport` and
//! `mcp_protocol_version` labels); Capsule's own are `capsule_*`. Every label value comes from
//! the catalog, the configuration or a fixed set, never from what a client wrote, so the
//! number of series stays bounded whatever clients send: a method Capsule does not serve is
//! `other`, a tool not in the catalog has no name, a protocol revision Capsule does not speak
//! is `unsupported`.

use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge as SetGauge;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::registry::{Registry, Unit};

use super::labels::{
    self, CallLabels, LoadLabels, OperationLabels, PluginLabels, ReasonLabels, ResultLabels, SessionLabels,
    TenantLabels, ToolLabels, TrafficLabels,
};
use super::sharded::{Counter, Gauge, Histogram};

/// How a plugin call ended, as the calls counter labels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// A result the tool meant.
    Ok,
    /// A result with `isError`: bad arguments, the tool's own failure, an output that does
    /// not match its schema.
    ToolError,
    /// The call stopped to ask the client for input (2026-07-28).
    InputRequired,
    Deadline,
    WallClock,
    Memory,
    Stack,
    Trap,
    OutputCap,
    /// No instance, plugin concurrency or a tenant quota was free within the wait.
    Busy,
    Cancelled,
    HostError,
}

impl Outcome {
    /// How many outcomes there are (`HostError` is the last).
    const COUNT: usize = Outcome::HostError as usize + 1;

    fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ToolError => "tool_error",
            Outcome::InputRequired => "input_required",
            Outcome::Deadline => "deadline",
            Outcome::WallClock => "wall_clock",
            Outcome::Memory => "memory",
            Outcome::Stack => "stack",
            Outcome::Trap => "trap",
            Outcome::OutputCap => "output_cap",
            Outcome::Busy => "busy",
            Outcome::Cancelled => "cancelled",
            Outcome::HostError => "host_error",
        }
    }
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn latencies() -> Histogram {
    // 50 µs to ~1.6 s, doubling.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

fn reload_times() -> Histogram {
    // 1 ms to ~65 s (an interpreter plugin compiles for many seconds), doubling.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

fn lifetimes() -> Histogram {
    // 1 s to ~3 days, by fours.
    Histogram::new(exponential_buckets(1.0, 4.0, 10))
}

/// How many operation series each thread keeps at hand.
const RECENT_SERIES: usize = 8;

thread_local! {
    /// The operation series this thread recorded into last (with their server's id): a
    /// request finds its series among them without hashing its labels or taking the
    /// family's lock, whose line every worker would write.
    static RECENT: RefCell<Vec<(u64, OperationLabels, Histogram)>> = const { RefCell::new(Vec::new()) };
}

/// A request being served, as the operation-duration histogram will record it.
pub struct Operation<'a> {
    /// The method (any string: it is bounded when recorded).
    pub method: &'a str,
    /// `pipe` (stdio) or `tcp` (HTTP), as the conventions name transports.
    pub transport: &'static str,
    /// The revision in force, if known (bounded when recorded).
    pub version: Option<&'a str>,
    /// The tool called, if the catalog has it.
    pub tool: Option<Arc<str>>,
    /// Empty when it succeeded; else a JSON-RPC error code, or `tool_error`.
    pub error: Option<Cow<'static, str>>,
}

/// Every series the server exports. One per server, shared by its tenants, handed down to
/// each layer that records into it: not a process-wide singleton.
pub struct Metrics {
    /// Tells this server's series apart from another's in [`RECENT`].
    id: u64,
    registry: Registry,
    operations: Histograms<OperationLabels>,
    sessions_ended: Histograms<SessionLabels>,
    sessions_open: Family<TenantLabels, Gauge>,
    calls: Family<CallLabels, Counter>,
    call_durations: Histograms<ToolLabels>,
    in_flight: Family<TenantLabels, Gauge>,
    instantiate: Histograms<PluginLabels>,
    guest: Histograms<PluginLabels>,
    memory_high_water: Family<PluginLabels, SetGauge>,
    prebuilt: Family<PluginLabels, Counter>,
    live_instances: SetGauge,
    instance_capacity: SetGauge,
    compile_cache: Family<ResultLabels, Counter>,
    reloads: Histograms<TenantLabels>,
    loads: Family<LoadLabels, Counter>,
    traffic: Family<TrafficLabels, Counter>,
    refusals: Family<ReasonLabels, Counter>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let operations = Histograms::<OperationLabels>::new_with_constructor(latencies as fn() -> Histogram);
        registry.register_with_unit(
            "mcp_server_operation_duration",
            "Time to answer an MCP request, from its arrival to its answer",
            Unit::Seconds,
            operations.clone(),
        );
        let sessions_ended = Histograms::<SessionLabels>::new_with_constructor(lifetimes as fn() -> Histogram);
        registry.register_with_unit(
            "mcp_server_session_duration",
            "How long HTTP sessions lasted, from initialize to their end (DELETE, expiry, eviction)",
            Unit::Seconds,
            sessions_ended.clone(),
        );
        let sessions_open = Family::<TenantLabels, Gauge>::default();
        registry.register("capsule_sessions_open", "HTTP sessions open now", sessions_open.clone());
        let calls = Family::<CallLabels, Counter>::default();
        registry.register(
            "capsule_plugin_calls",
            "Tool calls by tenant, plugin, tool and how they ended",
            calls.clone(),
        );
        let call_durations = Histograms::<ToolLabels>::new_with_constructor(latencies as fn() -> Histogram);
        registry.register_with_unit(
            "capsule_plugin_call_duration",
            "Time a tool call took in the host, from its arguments' check to its result (waits for quotas, the sandbox, the guest, input rounds)",
            Unit::Seconds,
            call_durations.clone(),
        );
        let in_flight = Family::<TenantLabels, Gauge>::default();
        registry.register("capsule_calls_in_flight", "Plugin calls running now", in_flight.clone());
        let instantiate = Histograms::<PluginLabels>::new_with_constructor(latencies as fn() -> Histogram);
        registry.register_with_unit(
            "capsule_sandbox_instantiate_duration",
            "Time to build a call's fresh sandbox and instantiate the plugin in it",
            Unit::Seconds,
            instantiate.clone(),
        );
        let guest = Histograms::<PluginLabels>::new_with_constructor(latencies as fn() -> Histogram);
        registry.register_with_unit(
            "capsule_guest_duration",
            "Time a call spent in the plugin once instantiated",
            Unit::Seconds,
            guest.clone(),
        );
        let memory_high_water = Family::<PluginLabels, SetGauge>::default();
        registry.register_with_unit(
            "capsule_plugin_memory_high_water",
            "The most linear memory one call of the plugin has used",
            Unit::Bytes,
            memory_high_water.clone(),
        );
        let prebuilt = Family::<PluginLabels, Counter>::default();
        registry.register(
            "capsule_sandbox_prebuilt",
            "Calls that ran in an instance an idle worker built ahead (--spare-instances)",
            prebuilt.clone(),
        );
        let live_instances = SetGauge::default();
        registry.register(
            "capsule_instances_live",
            "Plugin instances alive now (one per running call)",
            live_instances.clone(),
        );
        let instance_capacity = SetGauge::default();
        registry.register(
            "capsule_instances_capacity",
            "Plugin instances the engine's pool can hold at once",
            instance_capacity.clone(),
        );
        let compile_cache = Family::<ResultLabels, Counter>::default();
        registry.register(
            "capsule_compile_cache_lookups",
            "Compile cache lookups, by hit or miss",
            compile_cache.clone(),
        );
        let refusals = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "capsule_http_refusals",
            "HTTP requests refused before they were served: a Host or Origin not allowed, a session limit reached",
            refusals.clone(),
        );
        let reloads = Histograms::<TenantLabels>::new_with_constructor(reload_times as fn() -> Histogram);
        registry.register_with_unit(
            "capsule_reload_duration",
            "Time a reload of a tenant's plugins took (its count is the number of reloads)",
            Unit::Seconds,
            reloads.clone(),
        );
        let loads = Family::<LoadLabels, Counter>::default();
        registry.register(
            "capsule_plugin_loads",
            "What reloads made of each plugin: loaded (a new version serves), kept (the new version \
             failed, the previous one still serves), failed (not served), removed",
            loads.clone(),
        );
        let traffic = Family::<TrafficLabels, Counter>::default();
        registry.register_with_unit(
            "capsule_network_io",
            "Bytes of MCP traffic: request bodies and lines received, response bodies, streams and lines sent",
            Unit::Bytes,
            traffic.clone(),
        );
        static IDS: AtomicU64 = AtomicU64::new(0);
        Metrics {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            registry,
            operations,
            sessions_ended,
            sessions_open,
            calls,
            in_flight,
            instantiate,
            guest,
            memory_high_water,
            prebuilt,
            live_instances,
            instance_capacity,
            compile_cache,
            call_durations,
            reloads,
            loads,
            traffic,
            refusals,
        }
    }

    /// Record one answered request.
    pub fn operation(&self, op: &Operation<'_>, took: Duration) {
        let labels = OperationLabels {
            mcp_method_name: labels::method_name(op.method),
            gen_ai_tool_name: op.tool.clone(),
            error_type: op.error.clone(),
            network_transport: op.transport,
            mcp_protocol_version: op.version.map_or("", labels::version_name),
        };
        RECENT.with_borrow_mut(|recent| {
            let found = recent.iter().position(|(id, seen, _)| *id == self.id && *seen == labels);
            let index = found.unwrap_or_else(|| {
                let histogram = self.operations.get_or_create(&labels).clone();
                recent.truncate(RECENT_SERIES - 1);
                recent.insert(0, (self.id, labels, histogram));
                0
            });
            recent[index].2.observe(took.as_secs_f64());
        });
    }

    /// A session of `tenant`'s opened.
    pub fn session_opened(&self, tenant: &str) {
        self.sessions_open.get_or_create(&TenantLabels { tenant: tenant.to_owned() }).inc();
    }

    /// A session of `tenant`'s over `transport` ended after `lasted`, at `version`.
    pub fn session_ended(&self, tenant: &str, transport: &'static str, version: Option<&str>, lasted: Duration) {
        self.sessions_open.get_or_create(&TenantLabels { tenant: tenant.to_owned() }).dec();
        let labels = SessionLabels {
            network_transport: transport,
            mcp_protocol_version: version.map_or("", labels::version_name),
        };
        self.sessions_ended.get_or_create(&labels).observe(lasted.as_secs_f64());
    }

    /// The series the calls of `tenant`'s tool `tool` (of `plugin`) record into, to be kept
    /// with the tool: resolved once, a call records without building labels or looking them
    /// up. A series appears when first recorded into, as one looked up by label would.
    pub fn tool(&self, tenant: &str, plugin: &str, tool: &str) -> ToolMeters {
        let labels = ToolLabels { tenant: tenant.to_owned(), plugin: plugin.to_owned(), tool: tool.to_owned() };
        ToolMeters {
            calls: self.calls.clone(),
            outcomes: Default::default(),
            durations: self.call_durations.clone(),
            duration: OnceLock::new(),
            in_flight: self.in_flight.get_or_create(&TenantLabels { tenant: tenant.to_owned() }).clone(),
            labels,
        }
    }

    /// A reload of `tenant`'s plugins took `took`.
    pub fn reload(&self, tenant: &str, took: Duration) {
        self.reloads.get_or_create(&TenantLabels { tenant: tenant.to_owned() }).observe(took.as_secs_f64());
    }

    /// What a reload made of `tenant`'s plugin `plugin`.
    pub fn plugin_load(&self, tenant: &str, plugin: &str, result: Load) {
        let labels = LoadLabels { tenant: tenant.to_owned(), plugin: plugin.to_owned(), result: result.label() };
        self.loads.get_or_create(&labels).inc();
    }

    /// The counters of `tenant`'s traffic over `transport`, resolved once for a connection or
    /// an endpoint rather than per message.
    pub fn traffic(&self, tenant: &str, transport: &'static str) -> Traffic {
        let counter = |direction| {
            let labels = TrafficLabels {
                tenant: tenant.to_owned(),
                network_transport: transport,
                network_io_direction: direction,
            };
            self.traffic.get_or_create(&labels).clone()
        };
        Traffic { received: counter("receive"), sent: counter("transmit") }
    }

    /// The series the sandboxes of `tenant`'s plugin `plugin` record into, to be kept with
    /// the plugin (see [`Metrics::tool`]).
    pub fn plugin(&self, tenant: &str, plugin: &str) -> PluginMeters {
        let labels = PluginLabels { tenant: tenant.to_owned(), plugin: plugin.to_owned() };
        PluginMeters {
            instantiate: self.instantiate.get_or_create(&labels).clone(),
            guest: self.guest.get_or_create(&labels).clone(),
            memory_high_water: self.memory_high_water.get_or_create(&labels).clone(),
            prebuilt: self.prebuilt.get_or_create(&labels).clone(),
        }
    }

    /// The engine's instances: alive now, and how many the pool holds.
    pub fn instances(&self, live: usize, capacity: u32) {
        self.live_instances.set(i64::try_from(live).unwrap_or(i64::MAX));
        self.instance_capacity.set(i64::from(capacity));
    }

    /// Count a compile cache lookup.
    pub fn compile_cache(&self, hit: bool) {
        self.compile_cache.get_or_create(&ResultLabels { result: if hit { "hit" } else { "miss" } }).inc();
    }

    /// Count an HTTP request refused before it was served.
    pub fn refused(&self, refusal: Refusal) {
        self.refusals.get_or_create(&ReasonLabels { reason: refusal.label() }).inc();
    }

    /// Everything, in the Prometheus text exposition format (OpenMetrics flavour).
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Why an HTTP request was refused before it was served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A Host (or request target) that names no allowed host, or is no host at all.
    Host,
    /// An Origin that is not allowed.
    Origin,
    /// A new session over its client address's limit (`--sessions-per-address`).
    SessionsAddress,
    /// A new session over its tenant's quota.
    SessionsTenant,
    /// A new session over the server's limit (`--max-sessions`).
    SessionsServer,
}

impl Refusal {
    fn label(self) -> &'static str {
        match self {
            Refusal::Host => "host",
            Refusal::Origin => "origin",
            Refusal::SessionsAddress => "session_limit_address",
            Refusal::SessionsTenant => "session_limit_tenant",
            Refusal::SessionsServer => "session_limit_server",
        }
    }
}

/// What a reload made of one plugin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Load {
    /// A new version was accepted and serves.
    Loaded,
    /// The new version failed; the previous one still serves.
    Kept,
    /// The plugin failed and is not served.
    Failed,
    /// The plugin is no longer served (its file went, or an operator unloaded it).
    Removed,
}

impl Load {
    fn label(self) -> &'static str {
        match self {
            Load::Loaded => "loaded",
            Load::Kept => "kept",
            Load::Failed => "failed",
            Load::Removed => "removed",
        }
    }
}

/// One tenant's bytes over one transport.
#[derive(Clone, Debug, Default)]
pub struct Traffic {
    received: Counter,
    sent: Counter,
}

impl Traffic {
    pub fn received(&self, bytes: usize) {
        self.received.inc_by(bytes as u64);
    }

    pub fn sent(&self, bytes: usize) {
        self.sent.inc_by(bytes as u64);
    }
}

/// One tool's series (see [`Metrics::tool`]).
pub struct ToolMeters {
    calls: Family<CallLabels, Counter>,
    /// The calls counter for each outcome, found when first counted.
    outcomes: [OnceLock<Counter>; Outcome::COUNT],
    durations: Histograms<ToolLabels>,
    duration: OnceLock<Histogram>,
    in_flight: Gauge,
    labels: ToolLabels,
}

impl ToolMeters {
    /// A call is running until the guard drops (`capsule_calls_in_flight` of its tenant).
    pub fn running(&self) -> InFlight {
        self.in_flight.inc();
        InFlight(self.in_flight.clone())
    }

    /// Count a call that ended as `outcome` after `took`.
    pub fn call(&self, outcome: Outcome, took: Duration) {
        let counter = self.outcomes[outcome as usize].get_or_init(|| {
            let ToolLabels { tenant, plugin, tool } = self.labels.clone();
            self.calls.get_or_create(&CallLabels { tenant, plugin, tool, outcome: outcome.label() }).clone()
        });
        counter.inc();
        let duration = self.duration.get_or_init(|| self.durations.get_or_create(&self.labels).clone());
        duration.observe(took.as_secs_f64());
    }
}

/// One plugin's sandbox series (see [`Metrics::plugin`]).
pub struct PluginMeters {
    instantiate: Histogram,
    guest: Histogram,
    memory_high_water: SetGauge,
    prebuilt: Counter,
}

impl PluginMeters {
    /// Record one call's sandbox: how long instantiating took, how long the guest ran, the
    /// most memory it used, and whether an idle worker had built it ahead.
    pub fn sandbox(&self, instantiate: Duration, guest: Duration, memory: usize, prebuilt: bool) {
        if prebuilt {
            self.prebuilt.inc();
        }
        self.instantiate.observe(instantiate.as_secs_f64());
        self.guest.observe(guest.as_secs_f64());
        let memory = i64::try_from(memory).unwrap_or(i64::MAX);
        // Read first: a call that sets no new high writes nothing the other CPUs read.
        let high = self.memory_high_water.inner();
        if memory > high.load(Ordering::Relaxed) {
            high.fetch_max(memory, Ordering::Relaxed);
        }
    }
}

/// A running call, counted in `capsule_calls_in_flight` until dropped.
pub struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::labels::METHODS;

    #[test]
    fn client_chosen_strings_never_become_label_values() {
        let metrics = Metrics::new();
        for (i, method) in ["tools/call", "evil/method-1", "evil/method-2"].iter().enumerate() {
            let version = format!("1999-01-0{i}");
            let op = Operation {
                method,
                transport: "tcp",
                version: Some(&version),
                tool: None,
                error: Some("-32601".into()),
            };
            metrics.operation(&op, Duration::from_millis(2));
        }
        let text = metrics.render();
        assert!(!text.contains("evil") && !text.contains("1999"), "{text}");
        assert!(text.contains(r#"mcp_method_name="other""#) && text.contains(r#"mcp_protocol_version="unsupported""#));
        assert!(text.contains(r#"mcp_method_name="tools/call""#), "{text}");
        assert!(text.contains("mcp_server_operation_duration_seconds_count"), "{text}");
    }

    #[test]
    fn each_server_s_operations_go_to_its_own_series_however_many_there_are() {
        let (a, b) = (Metrics::new(), Metrics::new());
        let op = |method| Operation { method, transport: "tcp", version: None, tool: None, error: None };
        // More label sets than a thread keeps at hand, each recorded twice, in turn.
        for _ in 0..2 {
            for method in METHODS {
                a.operation(&op(method), Duration::from_millis(1));
            }
            b.operation(&op("ping"), Duration::from_millis(1));
        }
        let (a, b) = (a.render(), b.render());
        for method in METHODS {
            let count = format!(
                r#"_count{{mcp_method_name="{method}",gen_ai_tool_name="",error_type="",network_transport="tcp",mcp_protocol_version=""}} 2"#
            );
            assert!(a.contains(&count), "{count} in {a}");
        }
        let ping = r#"_count{mcp_method_name="ping",gen_ai_tool_name="",error_type="",network_transport="tcp",mcp_protocol_version=""} 2"#;
        assert!(b.contains(ping), "{b}");
        assert!(!b.contains("tools/call"), "{b}");
    }

    #[test]
    fn calls_in_flight_and_memory_high_water() {
        let metrics = Metrics::new();
        let add = metrics.tool("acme", "calc", "add");
        let running = add.running();
        assert!(metrics.render().contains(r#"capsule_calls_in_flight{tenant="acme"} 1"#));
        drop(running);
        assert!(metrics.render().contains(r#"capsule_calls_in_flight{tenant="acme"} 0"#));
        let calc = metrics.plugin("acme", "calc");
        calc.sandbox(Duration::from_micros(9), Duration::from_micros(3), 2 << 20, true);
        calc.sandbox(Duration::from_micros(9), Duration::from_micros(3), 1 << 20, false);
        let text = metrics.render();
        assert!(text.contains(r#"capsule_sandbox_prebuilt_total{tenant="acme",plugin="calc"} 1"#), "{text}");
        assert!(
            text.contains(r#"capsule_plugin_memory_high_water_bytes{tenant="acme",plugin="calc"} 2097152"#),
            "{text}"
        );
        // Outcomes not yet seen have no series, as when each call looked its labels up.
        assert!(!text.contains("capsule_plugin_calls_total"), "{text}");
        add.call(Outcome::Deadline, Duration::from_millis(50));
        add.call(Outcome::Deadline, Duration::from_millis(50));
        let text = metrics.render();
        let deadline = r#"capsule_plugin_calls_total{tenant="acme",plugin="calc",tool="add",outcome="deadline"} 2"#;
        assert!(text.contains(deadline), "{text}");
        assert!(!text.contains(r#"outcome="ok""#), "{text}");
        // Meters resolved again (a reloaded catalog's) record into the same series.
        metrics.tool("acme", "calc", "add").call(Outcome::Deadline, Duration::from_millis(50));
        assert!(metrics.render().contains(&deadline.replace("} 2", "} 3")));
    }
}
