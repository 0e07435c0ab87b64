//! The command line: `capsule serve` and friends.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::idle_poll::IdlePoll;
use crate::loader::Sources;
use crate::mcp::StateCodec;
use crate::policy::{LimitOverrides, MAX_INSTANCES, MAX_MEMORY_MIB, MAX_MILLIS, MAX_OUTPUT_KIB};
use crate::runtime::{CompileCache, PluginRuntime, RuntimeConfig};
use crate::scaffold::{self, Language};
use crate::tenants::{Configuration, Tenants, TenantsConfig};
use crate::transport::http::HttpOptions;
use crate::workers::{ExtraWorkers, Placement, Workers};

/// Serve the Model Context Protocol from sandboxed WebAssembly plugins.
#[derive(Debug, Parser)]
#[command(name = "capsule", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// How log records are written to stderr: `text` for people, `json` (one object per
    /// line) for log shippers.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "CAPSULE_LOG_FORMAT")]
    log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve MCP over Streamable HTTP (default 127.0.0.1:3000) or stdio.
    Serve(Box<ServeArgs>),
    /// Compile every plugin `serve` with the same arguments would load into the compile
    /// cache, then exit (for images and CI: a server then starts without compiling).
    /// Exit status: 0 all compiled or already cached, 1 some could not be compiled.
    Compile(Box<ServeArgs>),
    /// Print what a plugin exports, what it asks for, what the policy would let it do and
    /// whether `serve` would load it (its list functions run in the same sandbox `serve`
    /// gives it). Exit status: 0 it loads, 1 `serve` would refuse it, 2 the check could not run.
    Check(CheckArgs),
    /// Plugin projects.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Watch a running server: per plugin, calls a second, p50/p99 call time, failures by
    /// kind and memory high-water mark, from its `/metrics` (refreshed every interval).
    Top(TopArgs),
}

#[derive(Debug, Args)]
struct TopArgs {
    /// The server's metrics: `http://HOST:PORT/metrics` of its `--metrics` listener, or of
    /// its admin listener (with `--token-file`).
    #[arg(value_name = "URL")]
    url: String,
    /// The admin token file (`serve --admin-token-file`), for the admin listener.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Seconds between scrapes.
    #[arg(long, value_name = "SECONDS", default_value_t = 2.0, value_parser = interval)]
    interval: f64,
    /// Print one view, over one interval, and exit (for scripts).
    #[arg(long)]
    once: bool,
}

fn interval(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if (0.1..=3600.0).contains(&seconds) => Ok(seconds),
        _ => Err("an interval from 0.1 to 3600 seconds".into()),
    }
}

#[derive(Debug, Subcommand)]
enum PluginCommand {
    /// Make a plugin project that builds with the one command its README.md gives and
    /// passes `capsule check` as made.
    New(NewArgs),
}

#[derive(Debug, Args)]
struct NewArgs {
    /// The plugin's name (lowercase letters, digits, '-', '_'); its component is NAME.wasm.
    name: String,
    /// The language it is written in.
    #[arg(long, value_enum)]
    lang: Language,
    /// Where to make it (default: ./NAME); must not exist or be empty.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// The Capsule checkout whose SDK the project builds with (default: the one this binary
    /// was built from).
    #[arg(long, value_name = "DIR")]
    capsule: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct CheckArgs {
    /// The plugin component.
    #[arg(value_name = "PLUGIN.wasm")]
    plugin: PathBuf,
    /// The policy file to judge it by (default: none, so nothing is granted).
    #[arg(long, value_name = "FILE", env = "CAPSULE_CONFIG")]
    config: Option<PathBuf>,
    /// A tenants directory (as `serve --tenants`).
    #[arg(long, value_name = "DIR", env = "CAPSULE_TENANTS")]
    tenants: Option<PathBuf>,
    /// The tenant whose policy judges the plugin (default: the only one).
    #[arg(long, value_name = "ID")]
    tenant: Option<String>,
    /// Print the report as JSON (for scripts).
    #[arg(long)]
    json: bool,
    /// The limits `serve` would run with, so the verdict is the one `serve` would give.
    #[command(flatten)]
    limits: LimitArgs,
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Speak MCP on stdin/stdout (for clients that launch the server, e.g. Claude Desktop).
    #[arg(long, conflicts_with = "listen")]
    stdio: bool,
    /// Longest stdio line (one JSON-RPC message), in bytes; a longer one is answered with an error.
    #[arg(long, value_name = "BYTES", default_value_t = 4 << 20, value_parser = body_bytes, requires = "stdio")]
    max_line_bytes: usize,
    /// Most requests one client may have in flight: with --stdio, before the next line waits
    /// (a batch counts once, a request waiting on the client's answer counts apart, up to as
    /// many again); per legacy HTTP session, before more are refused.
    #[arg(long, value_name = "N", default_value_t = crate::transport::MAX_IN_FLIGHT, value_parser = up_to_10k)]
    max_in_flight: usize,
    /// Address for Streamable HTTP; MCP is served at /mcp.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:3000")]
    listen: SocketAddr,
    /// Load every .wasm component in this directory (repeatable).
    #[arg(long = "plugins", value_name = "DIR")]
    plugin_dirs: Vec<PathBuf>,
    /// Load this .wasm component (repeatable).
    #[arg(long = "plugin", value_name = "FILE.wasm")]
    plugin_files: Vec<PathBuf>,
    /// The policy file: what each plugin is granted, and the tenants (see the README).
    /// Without one, plugins get nothing but the default limits.
    #[arg(long, value_name = "FILE", env = "CAPSULE_CONFIG")]
    config: Option<PathBuf>,
    /// A directory with one folder per tenant: its plugins, and optionally a `tenant.toml`.
    #[arg(long, value_name = "DIR", env = "CAPSULE_TENANTS")]
    tenants: Option<PathBuf>,
    /// The tenant the stdio transport serves (default: the only one).
    #[arg(long, value_name = "ID", requires = "stdio")]
    tenant: Option<String>,
    /// Do not watch the plugin directories and the policy file; changes then take effect
    /// on restart or through the admin endpoint.
    #[arg(long)]
    no_watch: bool,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    http: HttpArgs,
    #[command(flatten)]
    admin: AdminArgs,
    /// Request workers [default: twice the machine's cores]: each is a thread with an async runtime
    /// of its own, and each HTTP connection is served on one of them (see --worker-fill for
    /// which). A call that computes past half a millisecond moves to a
    /// thread of its own, so the workers only carry short work.
    #[arg(long, value_name = "N", env = "CAPSULE_WORKERS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    workers: Option<u16>,
    /// Connections each of the first workers, one a core, takes before the other workers get
    /// any; past that, a new connection goes to the worker with the fewest. Fewer busier
    /// workers park and wake less at moderate load; 0 spreads from the first connection on.
    #[arg(long, value_name = "N", env = "CAPSULE_WORKER_FILL", default_value_t = DEFAULT_WORKER_FILL,
        value_parser = clap::value_parser!(u16).range(0..=1024))]
    worker_fill: u16,
    /// Microseconds a worker that has just served something keeps polling for more before it
    /// sleeps (0, the default: sleep at once). Lower latency when requests follow each other
    /// closely and nothing else needs the CPUs, for at most this much CPU per pause in the
    /// traffic; while long calls compute, it delays other threads (see the README).
    #[arg(long, value_name = "MICROSECONDS", env = "CAPSULE_IDLE_POLL", default_value_t = 0,
        value_parser = clap::value_parser!(u64).range(0..=1_000))]
    idle_poll: u64,
    /// The time slice, in microseconds, each request worker asks the kernel's scheduler for
    /// (0, the default: the kernel's own, 1.4 ms on a 2-core Linux 6.x). On a machine whose
    /// CPUs are busy, a short slice (100-400) lets a worker that wakes with a request preempt
    /// a thread that has run longer, instead of waiting out that thread's slice: a lower p99,
    /// for some throughput under heavy load (see the README). Linux 6.12 and later honour it,
    /// holding it to 100 µs at least; other kernels ignore it.
    #[arg(long, value_name = "MICROSECONDS", env = "CAPSULE_WORKER_SLICE", default_value_t = 0,
        value_parser = clap::value_parser!(u64).range(0..=100_000))]
    worker_slice: u64,
    /// File holding the key (32+ bytes) that seals request state for 2026-07-28 clients.
    /// Replicas behind one load balancer must share it; default: a random per-process key.
    #[arg(long, value_name = "FILE", env = "CAPSULE_STATE_KEY_FILE")]
    state_key_file: Option<PathBuf>,
}

/// The request workers `serve` starts unless told: two per core.
///
/// Each worker is a runtime of its own (see `workers`), so no request is handed between
/// them and a worker costs no wake-ups of the others. A connection stays on its worker, so
/// while the kernel lets another thread (a busy neighbour, the clients on the same machine)
/// hold that worker's CPU, the connection waits out the other thread's time slice (1.4 ms on
/// two cores). With two workers a core, the kernel runs another worker meanwhile and only
/// that worker's share of the connections waits: on two cores at 8 clients, 4 workers
/// against 2 took p99 from 0.7-1.57 ms to 0.47-0.59 ms and calls a second up 5-15%; 6 or 8
/// cost more CPU a call in switches (BENCHMARKS.md, "Two workers a core"). The workers
/// carry short work only: a call computing past half a millisecond leaves them
/// (`runtime::offload`).
pub fn default_workers() -> usize {
    2 * cores()
}

/// The machine's cores, as the OS lets this process use them.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Connections each worker of the first tier takes before the rest get any (see
/// `workers::Placement`): on two cores at 8 clients, two workers of four connections each
/// parked a third as often as four of two (BENCHMARKS.md, "Filling one worker a core first").
pub const DEFAULT_WORKER_FILL: u16 = 4;

/// A body limit from 1 KiB to 1 GiB.
fn body_bytes(text: &str) -> Result<usize, String> {
    let value: usize = text.parse().map_err(|e| format!("{e}"))?;
    (1 << 10..=1 << 30).contains(&value).then_some(value).ok_or_else(|| "must be from 1024 to 1073741824".into())
}

/// A budget for resumable streams, up to 64 GiB (0 keeps only what readers have yet to read).
fn resume_bytes(text: &str) -> Result<usize, String> {
    let value: usize = text.parse().map_err(|e| format!("{e}"))?;
    (value <= 64 << 30).then_some(value).ok_or_else(|| "must be from 0 to 68719476736".into())
}

/// A request head limit from 8 KiB (hyper's least read buffer) to 16 MiB.
fn header_bytes(text: &str) -> Result<usize, String> {
    let value: usize = text.parse().map_err(|e| format!("{e}"))?;
    (8 << 10..=16 << 20).contains(&value).then_some(value).ok_or_else(|| "must be from 8192 to 16777216".into())
}

/// A time limit from 1 second to an hour.
fn seconds(text: &str) -> Result<u64, String> {
    let value: u64 = text.parse().map_err(|e| format!("{e}"))?;
    (1..=3600).contains(&value).then_some(value).ok_or_else(|| "must be from 1 to 3600".into())
}

/// An idle time from 1 second to a day.
fn idle_seconds(text: &str) -> Result<u64, String> {
    let value: u64 = text.parse().map_err(|e| format!("{e}"))?;
    (1..=86_400).contains(&value).then_some(value).ok_or_else(|| "must be from 1 to 86400".into())
}

// `--max-batch` may not pass the elements of a batch that are kept for reading.
const _: () = assert!(crate::transport::BATCH_CEILING == 10_000);

/// A count from 1 to 10,000 (messages in a batch, requests in flight).
fn up_to_10k(text: &str) -> Result<usize, String> {
    let value: usize = text.parse().map_err(|e| format!("{e}"))?;
    (1..=10_000).contains(&value).then_some(value).ok_or_else(|| "must be from 1 to 10000".into())
}

/// A session cap from 1 to a million.
fn sessions(text: &str) -> Result<usize, String> {
    let value: usize = text.parse().map_err(|e| format!("{e}"))?;
    (1..=1_000_000).contains(&value).then_some(value).ok_or_else(|| "must be from 1 to 1000000".into())
}

#[derive(Debug, Args)]
struct LimitArgs {
    /// Default linear memory per plugin call, in MiB [default: 64].
    #[arg(long, value_name = "MiB", value_parser = clap::value_parser!(u64).range(1..=MAX_MEMORY_MIB))]
    memory_limit: Option<u64>,
    /// Default CPU time per plugin call, in milliseconds [default: 5000].
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=MAX_MILLIS))]
    cpu_deadline: Option<u64>,
    /// Default wall-clock time per plugin call, in milliseconds [default: 30000].
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=MAX_MILLIS))]
    call_timeout: Option<u64>,
    /// Default number of calls one plugin may run at once [default: 32].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    concurrency: Option<u32>,
    /// Default number of plugin instances kept for each plugin alone, so busy neighbours
    /// cannot take them all; 0 keeps none [default: 2].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=MAX_INSTANCES as i64))]
    reserve: Option<u32>,
    /// Default size of one call's result, in KiB [default: 4096].
    #[arg(long, value_name = "KiB", value_parser = clap::value_parser!(u64).range(1..=MAX_OUTPUT_KIB))]
    max_output: Option<u64>,
    /// The most memory any plugin may be granted, in MiB; fixed for the server's lifetime
    /// [default: the largest limit in the policy at start].
    #[arg(long, value_name = "MiB", value_parser = clap::value_parser!(u64).range(1..=MAX_MEMORY_MIB))]
    max_memory: Option<u64>,
    /// Plugin instances alive at once, across all plugins.
    #[arg(long, value_name = "N", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=MAX_INSTANCES as i64))]
    max_instances: u32,
    /// Instances idle request workers build ahead, beyond --max-instances: a worker with
    /// nothing to do builds the fresh instance the next call to the plugin it last served
    /// will take, off that call's path. At most one per worker; 0 builds none.
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u32).range(0..=1_024))]
    spare_instances: u32,
    /// Keep compiled plugins here, keyed by content hash (default: $XDG_CACHE_HOME/capsule or
    /// ~/.cache/capsule). The directory is made private to this user.
    #[arg(long, value_name = "DIR", env = "CAPSULE_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Compile every plugin at every start instead of using the compile cache.
    #[arg(long, conflicts_with = "cache_dir")]
    no_compile_cache: bool,
}

impl LimitArgs {
    /// The compile cache these flags name, unless turned off or unusable.
    fn compile_cache(&self) -> Option<CompileCache> {
        if self.no_compile_cache {
            return None;
        }
        match self.cache_dir.clone().or_else(CompileCache::default_dir).map(CompileCache::open) {
            Some(Ok(cache)) => Some(cache),
            Some(Err(e)) => {
                tracing::warn!("compile cache unavailable, compiling every plugin: {e}");
                None
            }
            None => None,
        }
    }

    fn overrides(&self) -> LimitOverrides {
        LimitOverrides {
            memory_mib: self.memory_limit,
            cpu_ms: self.cpu_deadline,
            timeout_ms: self.call_timeout,
            concurrency: self.concurrency,
            reserve: self.reserve,
            output_kib: self.max_output,
        }
    }
}

#[derive(Debug, Args)]
struct AdminArgs {
    /// Serve the admin endpoint (plugin status, reload, load, unload) on this loopback
    /// address. It is never part of MCP.
    #[arg(long = "admin", value_name = "HOST:PORT", requires = "admin_token_file")]
    admin_listen: Option<SocketAddr>,
    /// The admin endpoint's bearer token; created with a random token (mode 0600) if missing.
    #[arg(long, value_name = "FILE", env = "CAPSULE_ADMIN_TOKEN_FILE")]
    admin_token_file: Option<PathBuf>,
    /// Serve Prometheus metrics at http://HOST:PORT/metrics, without a token (the admin
    /// endpoint serves them too, behind its token). Label values come only from the
    /// configuration and the catalog, never from clients.
    #[arg(long = "metrics", value_name = "HOST:PORT")]
    metrics_listen: Option<SocketAddr>,
}

#[derive(Debug, Args)]
struct HttpArgs {
    /// Largest HTTP request body, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 4 << 20, value_parser = body_bytes)]
    max_body_bytes: usize,
    /// Most messages in one JSON-RPC batch (2025-03-26 clients, over HTTP and stdio); a longer
    /// batch is refused whole with -32600.
    #[arg(long, value_name = "N", default_value_t = crate::transport::MAX_BATCH, value_parser = up_to_10k)]
    max_batch: usize,
    /// Live legacy (initialize-based) sessions allowed at once.
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = sessions)]
    max_sessions: usize,
    /// Seconds a legacy session may sit idle (no request, no open stream) before it ends.
    #[arg(long, value_name = "SECONDS", default_value_t = 1800, value_parser = idle_seconds)]
    session_idle: u64,
    /// Live legacy sessions one client address may hold.
    #[arg(long, value_name = "N", default_value_t = 1_000, value_parser = sessions)]
    sessions_per_address: usize,
    /// Bytes that resumable POST streams (sessions of 2025-11-25 and later) keep for clients
    /// that reconnect, all sessions together. Past it, a stream nobody is reading keeps
    /// nothing and cannot be resumed; one being read keeps what its reader has yet to read.
    #[arg(long, value_name = "BYTES", default_value_t = 256 << 20, value_parser = resume_bytes)]
    max_resume_bytes: usize,
    /// HTTP connections open at once; more wait to be accepted.
    #[arg(long, value_name = "N", default_value_t = 1_024, value_parser = sessions)]
    max_connections: usize,
    /// Seconds allowed for a request's headers, counted from when the connection is ready for
    /// one (a slowloris client, or a keep-alive connection idle that long, is closed).
    #[arg(long, value_name = "SECONDS", default_value_t = 30, value_parser = seconds)]
    header_timeout: u64,
    /// Largest request head (request line and headers), in bytes (431 beyond): it bounds the
    /// memory each open connection may hold.
    #[arg(long, value_name = "BYTES", default_value_t = 64 << 10, value_parser = header_bytes)]
    max_header_bytes: usize,
    /// Seconds allowed to receive a request's body (408 beyond).
    #[arg(long, value_name = "SECONDS", default_value_t = 30, value_parser = seconds)]
    body_timeout: u64,
    /// Accept this Host header value too (repeatable; loopback names are always accepted).
    #[arg(long = "allow-host", value_name = "HOST", value_parser = crate::transport::http::host_entry)]
    allowed_hosts: Vec<String>,
    /// Accept requests from this Origin too (repeatable; loopback origins are always accepted).
    #[arg(long = "allow-origin", value_name = "ORIGIN", value_parser = crate::transport::http::origin_entry)]
    allowed_origins: Vec<String>,
}

/// Logs to stderr as `format` says, filtered by `CAPSULE_LOG`; with `traces`, Capsule's spans
/// (debug level and up, whatever the log filter) and its info events go to OTLP as well.
fn init_logs(format: LogFormat, traces: Option<&crate::telemetry::Traces>) {
    use crate::telemetry::{LogFilter, LogStyle};
    use tracing_log::AsLog;
    let style = match format {
        LogFormat::Text => LogStyle::Text { ansi: std::io::IsTerminal::is_terminal(&std::io::stderr()) },
        LogFormat::Json => LogStyle::Json,
    };
    let filter = LogFilter::new(std::env::var("CAPSULE_LOG").ok());
    let logs_level = filter.max_level();
    let recorder = traces.map(crate::telemetry::Traces::recorder);
    let dispatch = crate::telemetry::dispatch(filter, style, recorder, crate::telemetry::stderr());
    if tracing::dispatcher::set_global_default(dispatch).is_ok() {
        // The dependencies' `log` records become events, up to the level the log wants (the
        // recorder takes no `log` record: they are not Capsule's). Not the subscriber's own
        // hint, which is debug for the recorder's spans whenever traces are exported: a
        // debug record of every dependency would be built and offered to a filter that
        // refuses it.
        let level = logs_level.as_log();
        let _ = tracing_log::LogTracer::builder().with_max_level(level).init();
    }
}

/// Run the command line; logs go to stderr, stdout belongs to the stdio transport.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let traces = match crate::telemetry::Traces::from_env() {
        Ok(traces) => traces,
        Err(e) => {
            eprintln!("capsule: {e}");
            return ExitCode::FAILURE;
        }
    };
    init_logs(cli.log_format, traces.as_ref());
    // Only HTTP has connections to spread; stdio is one, and the other commands serve none.
    let (workers, fill, idle_poll) = match &cli.command {
        Command::Serve(args) if !args.stdio => (
            args.workers.map_or_else(default_workers, usize::from),
            usize::from(args.worker_fill),
            Duration::from_micros(args.idle_poll),
        ),
        Command::Serve(args) => (1, 0, Duration::from_micros(args.idle_poll)),
        _ => (1, 0, Duration::ZERO),
    };
    let slice = match &cli.command {
        Command::Serve(args) if args.worker_slice > 0 => Some(Duration::from_micros(args.worker_slice)),
        _ => None,
    };
    let idle_poll = IdlePoll::new(idle_poll);
    let woke = idle_poll.clone();
    // The first worker is the runtime everything starts on; `serve` spreads connections
    // over it and the others (see `workers`).
    let on_unpark = move || woke.worker_woke();
    // Every thread of the workers' runtimes may become a worker (`block_in_place` hands a
    // worker's duties to a fresh thread), so each asks for the workers' slice as it starts.
    let on_start = move || {
        if let Some(slice) = slice
            && let Err(e) = crate::sched::set_slice(Some(slice))
        {
            tracing::debug!("the kernel refused a worker's time slice: {e}");
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("capsule-wk-0")
        .on_thread_start(on_start)
        .on_thread_unpark(on_unpark.clone())
        .on_thread_park(crate::runtime::worker_idle)
        .on_thread_stop(crate::runtime::worker_stopped)
        .enable_all()
        .build()
        .and_then(|runtime| Ok((runtime, ExtraWorkers::start(workers - 1, on_start, on_unpark)?)));
    let (runtime, extra) = match runtime {
        Ok(runtimes) => runtimes,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            crate::telemetry::flush_logs(LAST_RECORDS);
            return ExitCode::FAILURE;
        }
    };
    for handle in extra.handles() {
        let _entered = handle.enter();
        idle_poll.start(1);
    }
    let workers = Workers::new(extra.handles(), Placement { cores: cores(), depth: fill });
    let mut at_once = false;
    let result = runtime.block_on(async {
        idle_poll.start(1);
        match cli.command {
            Command::Serve(args) => serve(*args, workers).await.map(|ended| {
                at_once = ended == Ended::AtOnce;
                ExitCode::SUCCESS
            }),
            Command::Compile(args) => compile(*args).await,
            Command::Check(args) => Ok(check(args).await),
            Command::Plugin(PluginCommand::New(args)) => plugin_new(args),
            Command::Top(args) => crate::top::run(crate::top::TopArgs {
                url: args.url,
                token_file: args.token_file,
                interval: Duration::from_secs_f64(args.interval),
                once: args.once,
            })
            .await
            .map(|()| ExitCode::SUCCESS),
        }
    });
    let code = match result {
        Ok(code) => code,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    };
    // The spans and log records still queued go out (each wait is bounded) while the
    // runtime still hears signals: one now exits at once, as a second one does while serving.
    runtime.block_on(async move {
        let flushed = tokio::task::spawn_blocking(move || {
            drop(traces);
            crate::telemetry::flush_logs(LAST_RECORDS);
        });
        let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let terminated = async {
            match terminate.as_mut() {
                Some(terminate) => terminate.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = flushed => {}
            _ = tokio::signal::ctrl_c() => std::process::exit(130),
            _ = terminated => std::process::exit(143),
        }
    });
    if at_once {
        std::process::exit(0);
    }
    drop(extra);
    drop(runtime);
    code
}

/// How `serve` ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// Its work is done: the runtime ends with the process.
    Done,
    /// A signal stopped a stdio server: a read or write of a terminal or a socket may still
    /// hold a blocking thread, which ending the runtime would wait for, so the process exits
    /// without ending it (once the spans and the log are flushed).
    AtOnce,
}

/// How long an exiting process waits for its last log records to reach stderr: a stderr
/// nobody reads would never take them.
const LAST_RECORDS: Duration = Duration::from_secs(1);

/// `capsule check`: the report is the command's output, so it goes to stdout. Exit status 0
/// when `serve` would load the plugin, 1 when it would refuse it, 2 when the check could not
/// run at all (an unreadable file or policy).
async fn check(args: CheckArgs) -> ExitCode {
    let report = async {
        let flags = args.limits.overrides();
        let config = TenantsConfig { policy: args.config, dir: args.tenants, flags, ..TenantsConfig::default() };
        let configuration = Configuration::read(&config)?;
        let runtime = RuntimeConfig {
            compile_cache: args.limits.compile_cache(),
            max_memory: max_memory(&args.limits, &configuration, &flags)?,
            max_instances: args.limits.max_instances,
            spare_instances: 0,
            ..RuntimeConfig::default()
        };
        let (policy, unavailable) = configuration.policy_of(args.tenant.as_deref(), &flags)?;
        crate::check::check(&args.plugin, &policy, unavailable, runtime).await
    };
    match report.await {
        Ok(report) => {
            if args.json {
                println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
            } else {
                print!("{}", report.text());
            }
            match report.verdict {
                crate::check::Verdict::Refused => ExitCode::from(1),
                _ => ExitCode::SUCCESS,
            }
        }
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::from(2)
        }
    }
}

/// The most bytes a state key file may hold: a key, not a file that never ends.
const MAX_STATE_KEY_BYTES: u64 = 64 << 10;

fn state_codec(path: Option<&Path>) -> Result<StateCodec> {
    match path {
        None => Ok(StateCodec::random()),
        Some(path) => {
            // A regular file, as every file Capsule is told to read: a FIFO would hold the
            // start, `/dev/zero` fill memory.
            let key = crate::files::read_regular(path, MAX_STATE_KEY_BYTES)
                .with_context(|| format!("cannot read the state key {}", path.display()))?;
            // Whoever reads the key can seal state for any tool and caller.
            if crate::files::open_to_others(path) {
                tracing::warn!(
                    "the state key file {} can be read by other users than its owner; `chmod 600` it",
                    path.display()
                );
            }
            // Replicas must read the same bytes (a trailing newline counts): the fingerprint
            // lets their logs be compared. A digest of the key alone would not do: HMAC
            // signs with the SHA-256 of a key longer than its block, so that digest's first
            // bytes would be the signing key's. Domain-separated, it tells nothing of it.
            let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
            sha2::Digest::update(&mut hasher, b"capsule requestState key fingerprint\0");
            sha2::Digest::update(&mut hasher, &key);
            let digest = sha2::Digest::finalize(hasher);
            let fingerprint: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
            let codec = StateCodec::new(key).map_err(|e| anyhow::anyhow!("state key {}: {e}", path.display()))?;
            tracing::info!("requestState is sealed with the key in {} (fingerprint {fingerprint})", path.display());
            Ok(codec)
        }
    }
}

/// The plugin runtime `serve` with these arguments runs, the configuration it reads, and
/// the tenants' configuration to start them with.
fn prepare(args: &ServeArgs) -> Result<(PluginRuntime, TenantsConfig, Configuration)> {
    let compile_cache = args.limits.compile_cache();
    let flags = args.limits.overrides();
    let sources = Sources {
        bundled: args.plugin_dirs.is_empty() && args.plugin_files.is_empty(),
        dirs: args.plugin_dirs.clone(),
        files: args.plugin_files.clone(),
        loaded: Vec::new(),
    };
    let config =
        TenantsConfig { policy: args.config.clone(), dir: args.tenants.clone(), flags, sources, watch: !args.no_watch };
    let configuration = Configuration::read(&config)?;
    let runtime_config = RuntimeConfig {
        compile_cache,
        max_memory: max_memory(&args.limits, &configuration, &flags)?,
        max_instances: args.limits.max_instances,
        spare_instances: args.limits.spare_instances,
        ..RuntimeConfig::default()
    };
    Ok((PluginRuntime::new(runtime_config)?, config, configuration))
}

/// The size of every sandbox slot, fixed at start: `--max-memory`, or the largest memory
/// limit the configuration grants.
fn max_memory(limits: &LimitArgs, configuration: &Configuration, flags: &LimitOverrides) -> Result<usize> {
    Ok(match limits.max_memory {
        Some(mib) => (mib as usize) << 20,
        None => configuration.max_memory(flags)?,
    })
}

/// `capsule compile`: fill the compile cache with every plugin `serve` with the same
/// arguments would load (the same arguments make the same engine, whose settings key the
/// cache), so that a server starts without compiling.
async fn compile(args: ServeArgs) -> Result<ExitCode> {
    if args.limits.no_compile_cache {
        bail!("`capsule compile` fills the compile cache: leave out --no-compile-cache");
    }
    let (runtime, _, configuration) = prepare(&args)?;
    let mut seen = std::collections::BTreeSet::new();
    let (mut compiled, mut cached, mut failed) = (0, 0, 0);
    for sources in configuration.sources() {
        let read = crate::loader::read_sources(&sources, &std::collections::BTreeSet::new(), &[])
            .await
            .context("reading the plugin sources failed")?;
        for crate::loader::Candidate { name, source, bytes } in read {
            let (bytes, sha256, _) = match bytes {
                Ok(read) => read,
                Err(e) => {
                    tracing::error!("{e}");
                    failed += 1;
                    continue;
                }
            };
            if !seen.insert(sha256.clone()) {
                continue;
            }
            let runtime = runtime.clone();
            let started = std::time::Instant::now();
            match tokio::task::spawn_blocking(move || runtime.precompile(&name, &sha256, &bytes)).await? {
                Ok(true) => {
                    compiled += 1;
                    tracing::info!("compiled {source} in {} ms", started.elapsed().as_millis());
                }
                Ok(false) => cached += 1,
                Err(e) => {
                    tracing::error!("{source}: {e}");
                    failed += 1;
                }
            }
        }
    }
    tracing::info!("compile cache: {compiled} compiled, {cached} already there, {failed} failed");
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Raise the soft limit on open files to the hard one, as Go's runtime does for every
/// server: the default soft limit (often 1024) is the `--max-connections` default alone,
/// before any call opens its granted directories.
fn raise_open_file_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    // `None` is unlimited; an unlimited hard limit is taken as a generous finite one.
    let hard = limit.maximum.unwrap_or(1 << 20);
    if let Some(soft) = limit.current.filter(|soft| *soft < hard) {
        limit.current = Some(hard);
        match setrlimit(Resource::Nofile, limit) {
            Ok(()) => tracing::debug!("open file limit raised from {soft} to {hard}"),
            Err(e) => tracing::debug!("open file limit stays {soft}: {e}"),
        }
    }
}

async fn serve(args: ServeArgs, workers: Workers) -> Result<Ended> {
    // Taken first: a SIGHUP sent while the server starts waits for the reload loop rather
    // than ending the process.
    let hangups = hangups()?;
    raise_open_file_limit();
    let (runtime, config, configuration) = prepare(&args)?;
    let codec = state_codec(args.state_key_file.as_deref())?;
    let shutdown = CancellationToken::new();
    let scrape: crate::telemetry::Scrape = {
        let runtime = runtime.clone();
        std::sync::Arc::new(move || {
            let metrics = &runtime.config().metrics;
            metrics.instances(runtime.live_instances(), runtime.config().max_instances);
            metrics.render()
        })
    };
    let cache = runtime.config().compile_cache.clone();
    let tenants = Tenants::start(runtime, codec, config, configuration, shutdown.clone())?;
    let set = tenants.current();
    if set.default_tenant().is_none() && !(args.plugin_dirs.is_empty() && args.plugin_files.is_empty()) {
        bail!(
            "--plugins and --plugin name the default tenant's plugins; with tenants configured, each names its own sources"
        );
    }
    // Serving starts at once; plugins join as they load. Without watching, a server that
    // loads nothing can never serve anything: it stops.
    let loaded = {
        let tenants = tenants.clone();
        async move {
            let served = tenants.first_load().await;
            // Every plugin served now has marked its entry used: what is left unused goes.
            if let Some(cache) = cache {
                tokio::task::spawn_blocking(move || cache.prune());
            }
            if args.no_watch && served == 0 {
                return anyhow::Error::msg("no plugin could be loaded");
            }
            tracing::info!("ready: {served} plugins loaded");
            std::future::pending().await
        }
    };
    if !args.no_watch {
        tenants.watch().context("cannot watch the configuration")?;
    }
    if let Some(addr) = args.admin.admin_listen {
        let token_file = args.admin.admin_token_file.as_deref().context("--admin needs --admin-token-file")?;
        let token = crate::admin::token(token_file)?;
        let timeouts = (Duration::from_secs(args.http.header_timeout), Duration::from_secs(args.http.body_timeout));
        crate::admin::serve(tenants.clone(), addr, token, scrape.clone(), timeouts, shutdown.clone()).await?;
    }
    if let Some(addr) = args.admin.metrics_listen {
        // The MCP endpoint's host names and origins, without the tenants' own names.
        let allowed = crate::transport::http::Allowed::new(&args.http.allowed_hosts, &args.http.allowed_origins);
        let hosts: crate::telemetry::HostCheck =
            std::sync::Arc::new(move |uri, headers| allowed.check(uri, headers, |_| false));
        let app = crate::telemetry::app(scrape, hosts);
        let header_timeout = Duration::from_secs(args.http.header_timeout);
        crate::listener::side(addr, app, ("metrics", "/metrics"), header_timeout, shutdown.clone())
            .await
            .with_context(|| format!("cannot listen for metrics on {addr}"))?;
    }
    let on_signal = shutdown.clone();
    // SIGTERM too: it is what systemd, Kubernetes and `docker stop` send.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot listen for SIGTERM")?;
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
        // Acted on before it is logged: a stderr nobody reads blocks the log's writes.
        on_signal.cancel();
        tracing::info!("shutting down (a second signal exits at once)");
        // The operator who asks twice does not wait for open connections (nor for a log).
        let code = tokio::select! {
            _ = tokio::signal::ctrl_c() => 130,
            _ = terminate.recv() => 143,
        };
        std::process::exit(code);
    });
    if let Some(hangups) = hangups {
        reload_on_hangup(hangups, tenants.clone(), &shutdown);
    }
    if args.stdio {
        let tenant = match args.tenant.as_deref() {
            Some(id) => tenants.get(id)?,
            None => tenants.only().context("this server has several tenants: name one with --tenant")?,
        };
        let options = crate::transport::stdio::StdioOptions {
            max_line_bytes: args.max_line_bytes,
            max_batch: args.http.max_batch,
            max_in_flight: args.max_in_flight,
            traffic: tenant.shared.metrics().traffic(&tenant.id, "pipe"),
        };
        // On the worker, not on this thread (the runtime's `block_on`): the worker drives the
        // reactor and runs the requests' tasks, so a line read there is served without
        // waking another thread.
        let served = tokio::spawn(crate::transport::stdio::serve(tenant.shared.clone(), options, shutdown.clone()));
        let served = tokio::select! {
            served = served => served.context("the stdio transport failed")?,
            failed = loaded => Err(failed),
        };
        // Stopped by a signal, with the pipes put back.
        if shutdown.is_cancelled() {
            return Ok(Ended::AtOnce);
        }
        return served.map(|()| Ended::Done);
    }
    let options = HttpOptions {
        max_body_bytes: args.http.max_body_bytes,
        max_resume_bytes: args.http.max_resume_bytes,
        max_batch: args.http.max_batch,
        max_sessions: args.http.max_sessions,
        allowed_hosts: args.http.allowed_hosts,
        allowed_origins: args.http.allowed_origins,
        sessions_per_address: args.http.sessions_per_address,
        max_in_flight: args.max_in_flight,
        session_idle: Duration::from_secs(args.http.session_idle),
        body_timeout: Duration::from_secs(args.http.body_timeout),
        connections: crate::transport::http::ConnectionLimits {
            max_connections: args.http.max_connections,
            header_timeout: Duration::from_secs(args.http.header_timeout),
            max_header_bytes: args.http.max_header_bytes,
        },
        workers,
    };
    tokio::select! {
        served = crate::transport::http::serve(tenants, args.listen, options, shutdown) => served.map(|()| Ended::Done),
        failed = loaded => Err(failed),
    }
}

/// The SIGHUPs the server is sent, unless it was started with SIGHUP ignored (`nohup`, so
/// that a closed terminal leaves it be): a handler would override that wish.
fn hangups() -> Result<Option<tokio::signal::unix::Signal>> {
    // SAFETY: with no new action, `sigaction` only reads the current one into `current`.
    let ignored = unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGHUP, std::ptr::null(), &raw mut current) == 0 && current.sa_sigaction == libc::SIG_IGN
    };
    if ignored {
        tracing::debug!("SIGHUP is ignored (nohup): it does not reload");
        return Ok(None);
    }
    let hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
    hangups.map(Some).context("cannot listen for SIGHUP")
}

/// SIGHUP reads the configuration and every plugin source again, as `POST
/// /admin/tenants/reload` does (what an operator running `--no-watch` has, and what daemons
/// do on it), rather than ending the process, which is its default.
fn reload_on_hangup(
    mut hangups: tokio::signal::unix::Signal,
    tenants: std::sync::Arc<Tenants>,
    shutdown: &CancellationToken,
) {
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        while shutdown.run_until_cancelled(hangups.recv()).await.flatten().is_some() {
            tracing::info!("SIGHUP: reading the configuration and every plugin source again");
            let statuses = tenants.reload().await;
            let plugins = statuses.iter().flat_map(|status| &status.plugins);
            let (served, failed) = plugins.fold((0, 0), |(served, failed), plugin| {
                (served + usize::from(plugin.serving.is_some()), failed + usize::from(plugin.last_error.is_some()))
            });
            let refused = statuses.iter().filter(|status| status.policy_error.is_some()).count();
            tracing::info!(
                "reloaded: {} tenants, {served} plugins served, {failed} with an error, {refused} policies refused",
                statuses.len()
            );
        }
    });
}

/// `capsule plugin new`.
fn plugin_new(args: NewArgs) -> Result<ExitCode> {
    let capsule = match args.capsule {
        Some(dir) => scaffold::check_checkout(&dir)?,
        None => scaffold::own_checkout()
            .context("this binary was not built from a Capsule checkout that still exists: pass --capsule DIR")?,
    };
    let files = scaffold::render(args.lang, &args.name, &capsule)?;
    let dir = args.dir.unwrap_or_else(|| PathBuf::from(&args.name));
    scaffold::write(&dir, &files)?;
    tracing::info!(
        "made {} ({} files); {} says how to build it",
        dir.display(),
        files.len(),
        dir.join("README.md").display()
    );
    Ok(ExitCode::SUCCESS)
}
