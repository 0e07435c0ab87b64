//! `capsule-bench`: Capsule against a native rmcp server and the HTTP floor, in one run.
//!
//! Every figure is min/median/max over repetitions, and every comparison is a ratio against
//! baselines measured in the same run on the same machine. A run in which any call failed is
//! reported as failed. `--quick` finishes in a few minutes on two cores.

mod auth;
mod battery;
mod languages;
mod load;
mod micro;
mod report;
mod servers;
mod telemetry;
mod tenants;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use load::Mode;
use report::{Row, ratio, stat_line};
use tokio::io::{AsyncBufReadExt, BufReader};

#[derive(Parser)]
#[command(about = "Benchmark Capsule against a native rmcp server and a bare axum floor")]
struct Args {
    /// Short runs (a few minutes on two cores) for a quick signal.
    #[arg(long)]
    quick: bool,
    /// Repetitions of every measurement (at least 3).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Seconds per HTTP and stdio measurement (default 5, or 0.6 with --quick).
    #[arg(long)]
    seconds: Option<f64>,
    /// Directory holding the built plugins.
    #[arg(long, default_value_os_t = default_plugins())]
    plugins: PathBuf,
    #[command(subcommand)]
    serve: Option<Serve>,
}

/// The baselines run in child processes of this same binary, Capsule in its own
/// ([`servers::capsule_exe`]).
#[derive(Subcommand)]
enum Serve {
    /// The native rmcp server with the same `add` tool.
    #[command(hide = true)]
    Native {
        #[arg(long)]
        listen: Option<SocketAddr>,
    },
    /// The floor: a bare axum JSON-RPC handler.
    #[command(hide = true)]
    Floor {
        #[arg(long)]
        listen: SocketAddr,
    },
    /// Only the tenant-flood section, for working on it.
    #[command(hide = true)]
    Tenants,
    /// Only the other-languages section, for working on it.
    #[command(hide = true)]
    Languages,
    /// Only the cost of tracing and metrics, for working on it.
    #[command(hide = true)]
    Watching,
    /// Only the fresh instance + `add` call cost, for working on it.
    #[command(hide = true)]
    Instance,
    /// Only the stdio section, for working on it.
    #[command(hide = true)]
    Stdio,
    /// The OTLP sink the watching section exports to.
    #[command(hide = true)]
    Sink,
    /// Only generate load against a running server (for profiling it).
    #[command(hide = true)]
    Load {
        #[arg(long)]
        addr: SocketAddr,
        #[arg(long, default_value_t = 8)]
        clients: usize,
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        #[arg(long)]
        stateless: bool,
        /// Stateless calls whose arguments the schema refuses: no plugin runs.
        #[arg(long, conflicts_with = "stateless")]
        refused: bool,
    },
}

fn default_plugins() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/plugins")
}

fn main() -> ExitCode {
    let mut args = Args::parse();
    match args.serve.take() {
        Some(Serve::Native { listen: Some(addr) }) => {
            run(async move { servers::native_http(addr).await.map(|()| true) })
        }
        Some(Serve::Native { listen: None }) => run(async { servers::native_stdio().await.map(|()| true) }),
        Some(Serve::Sink) => run(async { telemetry::sink().await.map(|()| true) }),
        Some(Serve::Floor { listen }) => run(async move { servers::floor_http(listen).await.map(|()| true) }),
        Some(Serve::Load { addr, clients, seconds, stateless, refused }) => run(async move {
            let mode = match (stateless, refused) {
                (_, true) => Mode::Refused,
                (true, false) => Mode::Stateless,
                (false, false) => Mode::Legacy,
            };
            let sample = load::http(addr, mode, clients, Duration::from_secs_f64(seconds)).await?;
            println!(
                "{:.0} calls/s, p50 {:.0} µs, p99 {:.0} µs, {} errors (p90 {:.0}, p95 {:.0}, p98 {:.0}, p99.9 {:.0} µs, max {:.0} µs, {} stalls)",
                sample.throughput(),
                sample.percentile(50.0),
                sample.percentile(99.0),
                sample.errors,
                sample.percentile(90.0),
                sample.percentile(95.0),
                sample.percentile(98.0),
                sample.percentile(99.9),
                sample.percentile(100.0),
                sample.stalls(),
            );
            Ok(sample.errors == 0)
        }),
        Some(Serve::Tenants) => run(async move {
            let (reps, duration) = (args.reps.max(3), Duration::from_secs_f64(args.seconds.unwrap_or(5.0)));
            let (calm, flooded, uncontained) = tenant_flood(&args, duration / 5, duration, reps).await?;
            println!(
                "tenants: flooded/alone p50 latency {:.2}, p99 latency {:.2}",
                quiet_ratio(&flooded, &calm, 50.0),
                quiet_ratio(&flooded, &calm, 99.0)
            );
            Ok(calm.errors() + flooded.errors() + uncontained == 0)
        }),
        Some(Serve::Watching) => run(async move {
            let (reps, duration) = (args.reps.max(3), Duration::from_secs_f64(args.seconds.unwrap_or(5.0)));
            let (plain, observed) = observed_cost(&args, duration / 5, duration, reps).await?;
            println!("telemetry: traced and scraped/plain throughput {:.2} (c=8, stateless)", ratio(&observed, &plain));
            Ok(plain.errors() + observed.errors() == 0)
        }),
        Some(Serve::Instance) => run(async move {
            let calc = micro::plugin_bytes(&args.plugins, "calc")?;
            let runtime = capsule::runtime::PluginRuntime::new(capsule::runtime::RuntimeConfig::default())?;
            let calls = if args.quick { 2_000 } else { 20_000 };
            let us = micro::instance_call_us(&runtime, &calc, calls, args.reps.max(3)).await?;
            println!("{}", stat_line("fresh instance + add call + drop", "µs", us));
            Ok(true)
        }),
        Some(Serve::Stdio) => run(async move {
            let (reps, duration) = (args.reps.max(3), Duration::from_secs_f64(args.seconds.unwrap_or(5.0)));
            let stdio_rows = stdio_section(reps, duration).await?;
            println!("{}", report::HEADER);
            for (in_flight, rows) in &stdio_rows {
                for row in rows {
                    println!("{}", row.line());
                }
                let (legacy, stateless) = stdio_ratios(rows);
                println!(
                    "stdio, {in_flight:<2} in flight: capsule/native legacy {legacy:.2}, stateless {stateless:.2}"
                );
            }
            Ok(stdio_rows.iter().flat_map(|(_, rows)| rows).map(Row::errors).sum::<u64>() == 0)
        }),
        Some(Serve::Languages) => run(async move {
            let calls = if args.quick { 50 } else { 300 };
            let call_p50 = languages::section(&args.plugins, args.reps.max(3), calls).await?;
            println!("{}", languages::summary(&call_p50));
            Ok(true)
        }),
        None => run(bench(args)),
    }
}

/// Run `work` on a multi-threaded runtime; `Ok(false)` and errors are failures.
fn run(work: impl std::future::Future<Output = anyhow::Result<bool>>) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    match runtime.block_on(work) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// stdio: one call at a time, and 64 in flight; per count of calls in flight, Capsule's rows
/// (legacy, stateless), then native rmcp's.
async fn stdio_section(reps: usize, duration: Duration) -> anyhow::Result<Vec<(usize, Vec<Row>)>> {
    let exe = std::env::current_exe()?.display().to_string();
    let capsule_stdio = vec![servers::capsule_exe()?.display().to_string(), "serve".into(), "--stdio".into()];
    let native_stdio = vec![exe, "native".into()];
    let stdio_configs = [
        ("capsule stdio", &capsule_stdio, Mode::Legacy),
        ("capsule stdio, stateless 2026-07-28", &capsule_stdio, Mode::Stateless),
        ("native rmcp stdio", &native_stdio, Mode::Legacy),
        ("native rmcp stdio, stateless 2026-07-28", &native_stdio, Mode::Stateless),
    ];
    let mut stdio_rows: Vec<(usize, Vec<Row>)> = Vec::new();
    for in_flight in [1, 64] {
        let mut rows: Vec<Row> = stdio_configs
            .iter()
            .map(|(name, _, _)| Row { name: format!("{name}, {in_flight} in flight"), samples: Vec::new() })
            .collect();
        for _ in 0..reps {
            for (row, (_, command, mode)) in rows.iter_mut().zip(&stdio_configs) {
                row.samples.push(load::stdio(command, *mode, in_flight, duration).await?);
            }
        }
        stdio_rows.push((in_flight, rows));
    }
    Ok(stdio_rows)
}

/// Capsule/native median throughput of one count of [`stdio_section`]'s rows: legacy,
/// stateless.
fn stdio_ratios(rows: &[Row]) -> (f64, f64) {
    (ratio(&rows[0], &rows[2]), ratio(&rows[1], &rows[3]))
}

/// A server child process, killed on drop.
struct Server {
    child: tokio::process::Child,
    addr: SocketAddr,
}

impl Server {
    /// Start `capsule <args…>` for `["capsule", args…]`, else `capsule-bench <args>`, and
    /// wait for the address it listens on.
    async fn start(args: &[&str]) -> anyhow::Result<Server> {
        Server::start_with_env(args, &[]).await
    }

    /// [`Server::start`] with more environment variables.
    async fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Server> {
        let (program, args) = match args.split_first() {
            Some((&"capsule", rest)) => (servers::capsule_exe()?, rest),
            _ => (std::env::current_exe()?, args),
        };
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .env("CAPSULE_LOG", "warn,capsule::transport=info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let mut lines = BufReader::new(child.stderr.take().expect("piped stderr")).lines();
        let addr = loop {
            let line = tokio::time::timeout(Duration::from_secs(120), lines.next_line())
                .await
                .map_err(|_| anyhow::anyhow!("{args:?} did not start"))??
                .ok_or_else(|| anyhow::anyhow!("{args:?} exited before listening"))?;
            let found = line
                .split("listening on ")
                .nth(1)
                .or_else(|| line.split("serving MCP at http://").nth(1).map(|r| r.trim_end_matches("/mcp")));
            if let Some(addr) = found.and_then(|a| a.trim().parse().ok()) {
                break addr;
            }
        };
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Server { child, addr })
    }

    fn pid(&self) -> u32 {
        self.child.id().unwrap_or_default()
    }
}

const CAPSULE_HTTP: &[&str] =
    &["capsule", "serve", "--listen", "127.0.0.1:0", "--max-sessions", "20000", "--sessions-per-address", "20000"];

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name").map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned()))
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .next()
                .map(|l| l.split_whitespace().nth(1).unwrap_or("0").parse::<u64>().unwrap_or(0) / 1024 / 1024)
        })
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let reset = if capsule::runtime::PluginRuntime::fast_memory_reset() { "available" } else { "unavailable" };
    let workers = capsule::cli::default_workers();
    let wake =
        wake_round_trip().map_or_else(|e| format!("unmeasured ({e})"), |t| format!("{:.1} µs", t.as_secs_f64() * 1e6));
    format!(
        "{cores} cores ({cpu}), {memory} GiB RAM, Linux {}, PAGEMAP_SCAN memory reset {reset}, capsule serves with {workers} worker(s), thread wake-up round trip {wake}",
        kernel.trim()
    )
}

/// The mean time for one thread to wake another through a pipe and be woken back, each
/// sleeping in between: what every request pays at least twice (the server woken by the
/// client's write, the client by the answer). A guest whose idle vCPUs are halted can take
/// tens of microseconds here against a few elsewhere, and it shows in every row's latency,
/// the floor's included (BENCHMARKS.md, "A slow guest").
fn wake_round_trip() -> std::io::Result<Duration> {
    use std::io::{Read, Write};
    const ROUNDS: u32 = 2000;
    let (mut ping_rx, mut ping_tx) = std::io::pipe()?;
    let (mut pong_rx, mut pong_tx) = std::io::pipe()?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let mut byte = [0u8];
        for _ in 0..ROUNDS {
            ping_rx.read_exact(&mut byte)?;
            pong_tx.write_all(&byte)?;
        }
        Ok(())
    });
    let mut byte = [0u8];
    let started = Instant::now();
    for _ in 0..ROUNDS {
        ping_tx.write_all(&byte)?;
        pong_rx.read_exact(&mut byte)?;
    }
    let took = started.elapsed();
    echo.join().map_err(|_| std::io::Error::other("the echo thread panicked"))??;
    Ok(took / ROUNDS)
}

async fn bench(args: Args) -> anyhow::Result<bool> {
    let reps = args.reps.max(3);
    let duration = Duration::from_secs_f64(args.seconds.unwrap_or(if args.quick { 0.6 } else { 5.0 }));
    let warmup = duration / 5;
    let started = Instant::now();
    println!("# capsule-bench: {}", machine());
    println!("# capsule under test: {}", servers::capsule_exe()?.display());
    println!(
        "# {reps} repetitions of {:.1} s each; every figure is min / median / max over repetitions\n",
        duration.as_secs_f64()
    );

    // HTTP: the servers run side by side and the configurations take turns of a second
    // within each repetition, so that drift on a shared machine hits all of them alike
    // (BENCHMARKS.md, "Turns"). Each repetition starts the servers afresh, so a row's median
    // is over processes too.
    let names = [
        "capsule, legacy session (SSE)",
        "capsule, stateless 2026-07-28",
        "native rmcp, legacy session (SSE)",
        "native rmcp, stateless 2026-07-28",
        "floor (bare axum JSON-RPC)",
        "capsule, stateless, arguments refused (no plugin runs)",
    ];
    let modes = [Mode::Legacy, Mode::Stateless, Mode::Legacy, Mode::Stateless, Mode::Stateless, Mode::Refused];
    let mut http_rows: Vec<(usize, Vec<Row>)> = Vec::new();
    for clients in [1, 8, 64] {
        let mut rows: Vec<Row> =
            names.iter().map(|name| Row { name: format!("{name}, c={clients}"), samples: Vec::new() }).collect();
        for _ in 0..reps {
            let capsule = Server::start(CAPSULE_HTTP).await?;
            let native = Server::start(&["native", "--listen", "127.0.0.1:0"]).await?;
            let floor = Server::start(&["floor", "--listen", "127.0.0.1:0"]).await?;
            let servers = [&capsule, &capsule, &native, &native, &floor, &capsule];
            let targets: Vec<_> =
                servers.iter().zip(modes).map(|(server, mode)| (server.addr, server.pid(), mode)).collect();
            for &(addr, _, mode) in &targets {
                load::http(addr, mode, clients, warmup).await?;
            }
            let samples = in_turns(targets.len(), duration, |i, time| {
                let (addr, pid, mode) = targets[i];
                load::with_server_cpu(pid, load::http(addr, mode, clients, time))
            })
            .await?;
            for (row, sample) in rows.iter_mut().zip(samples) {
                row.samples.push(sample);
            }
        }
        http_rows.push((clients, rows));
    }

    println!("## tools/call `add` over Streamable HTTP (loopback)\n");
    println!("{}", report::HEADER);
    for (_, rows) in &http_rows {
        for row in rows {
            println!("{}", row.line());
        }
    }
    println!("\nstalls = calls slower than 30 ms (a Nagle/delayed-ACK stall shows up here, not in the averages)\n");

    let stdio_rows = stdio_section(reps, duration).await?;
    println!("## tools/call `add` over stdio\n");
    println!("{}", report::HEADER);
    for (_, rows) in &stdio_rows {
        for row in rows {
            println!("{}", row.line());
        }
    }

    // The plugin runtime, in process.
    let calc = micro::plugin_bytes(&args.plugins, "calc")?;
    let runtime = capsule::runtime::PluginRuntime::new(capsule::runtime::RuntimeConfig::default())?;
    let calls = if args.quick { 2_000 } else { 20_000 };
    println!("\n## Plugin runtime and server costs\n");
    println!("{}", report::STAT_HEADER);
    println!(
        "{}",
        stat_line(
            &format!("compile calc.wasm ({} KiB)", calc.len() / 1024),
            "ms",
            micro::compile_ms(&runtime, &calc, reps)?
        )
    );
    println!(
        "{}",
        stat_line(
            "fresh instance + add call + drop",
            "µs",
            micro::instance_call_us(&runtime, &calc, calls, reps).await?
        )
    );
    let (empty, warm) = micro::load_many_ms(&calc, 20, reps).await?;
    println!("{}", stat_line("load 20 plugins, empty compile cache", "ms", empty));
    println!("{}", stat_line("load 20 plugins, warm compile cache", "ms", warm));
    for sessions in [1_000, 10_000] {
        for (name, args) in [("capsule", CAPSULE_HTTP), ("native rmcp", &["native", "--listen", "127.0.0.1:0"][..])] {
            let (mut per_session, mut total) = (Vec::new(), Vec::new());
            for _ in 0..reps {
                let server = Server::start(args).await?;
                micro::settle().await;
                let before = micro::rss_kib(server.pid())?;
                load::idle_sessions(server.addr, sessions).await?;
                micro::settle().await;
                let after = micro::rss_kib(server.pid())?;
                per_session.push(after.saturating_sub(before) as f64 / sessions as f64);
                total.push(after as f64 / 1024.0);
            }
            println!("{}", stat_line(&format!("{name}: memory per idle session ({sessions})"), "KiB", per_session));
            println!("{}", stat_line(&format!("{name}: RSS with {sessions} idle sessions"), "MiB", total));
        }
    }
    let swap_dir = std::env::temp_dir().join(format!("capsule-bench-swap-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&swap_dir);
    std::fs::create_dir_all(&swap_dir)?;
    let textkit = micro::plugin_bytes(&args.plugins, "textkit")?;
    std::fs::write(swap_dir.join("swapped.wasm"), &calc)?;
    let swap_server = Server::start(&[
        "capsule",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--plugins",
        swap_dir.to_str().unwrap_or_default(),
    ])
    .await?;
    let versions = [
        (textkit, "hash", serde_json::json!({"text": "x"})),
        (calc.clone(), "add", serde_json::json!({"a": 1, "b": 2})),
    ];
    let swaps = if args.quick { 5 } else { 20 };
    let latency = micro::swap_latency_ms(swap_server.addr, &swap_dir, &versions, swaps).await?;
    println!("{}", stat_line(&format!("hot swap: file rename to first call on it ({swaps} swaps)"), "ms", latency));
    drop(swap_server);
    let _ = std::fs::remove_dir_all(&swap_dir);

    // Plugins written with the other SDKs, beside Rust's, over stdio.
    let call_p50 = languages::section(&args.plugins, reps, if args.quick { 50 } else { 300 }).await?;

    // A well-behaved caller while the hostile battery runs against the same server.
    let battery_dir = std::env::temp_dir().join(format!("capsule-bench-battery-{}", std::process::id()));
    std::fs::create_dir_all(&battery_dir)?;
    let policy = battery_dir.join("capsule.toml");
    std::fs::write(&policy, battery::POLICY)?;
    let (calc_path, hostile_path) = (args.plugins.join("calc.wasm"), args.plugins.join("testing/hostile.wasm"));
    let battery_server = Server::start(&[
        "capsule",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--config",
        policy.to_str().unwrap_or_default(),
        "--plugin",
        calc_path.to_str().unwrap_or_default(),
        "--plugin",
        hostile_path.to_str().unwrap_or_default(),
    ])
    .await?;
    let tally = std::sync::Arc::new(battery::Tally::default());
    let names = ("add, c=1, quiet".into(), format!("add, c=1, {} clients attacking", battery::ATTACKERS));
    let attack = battery::battery();
    let (quiet, attacked) = alone_and_disturbed(names, (warmup, duration, reps), |time, attacking| {
        battery::bystander((battery_server.addr, "/mcp"), time, attacking.then_some(&attack), &tally)
    })
    .await?;
    drop(battery_server);
    let _ = std::fs::remove_dir_all(&battery_dir);
    let (made, uncontained) = (tally.made.load(Ordering::Relaxed), tally.uncontained.load(Ordering::Relaxed));
    print_pair("A well-behaved caller during the hostile-plugin battery (same server)", &quiet, &attacked);
    println!(
        "\nattacks made: {made}, not contained: {uncontained} (spin, hog, recurse, crash, 4 MiB result, log flood, \
         file escapes, denied HTTP and TCP; hostile limited to 500 ms CPU, 2 s, 1 MiB output)"
    );

    // One tenant floods while another is measured.
    let (calm, flooded, flood_uncontained) = tenant_flood(&args, warmup, duration, reps).await?;
    // What checking a JWT on every request costs.
    let (open, secured) = auth_cost(&args, warmup, duration, reps).await?;
    let (plain, observed) = observed_cost(&args, warmup, duration, reps).await?;

    // Ratios against the baselines of this run.
    println!("\n## Ratios of median throughput (same run)\n");
    let mut http_ratios = Vec::new();
    for (clients, rows) in &http_rows {
        let (c_legacy, c_stateless, n_legacy, n_stateless, floor) = (&rows[0], &rows[1], &rows[2], &rows[3], &rows[4]);
        let (legacy, stateless) = (ratio(c_legacy, n_legacy), ratio(c_stateless, n_stateless));
        http_ratios.extend([legacy, stateless]);
        println!(
            "c={clients:<3} capsule/native: legacy {legacy:.2}, stateless {stateless:.2};  capsule/floor: legacy {:.2}, stateless {:.2}",
            ratio(c_legacy, floor),
            ratio(c_stateless, floor)
        );
    }
    let mut stdio_ratios = Vec::new();
    for (in_flight, rows) in &stdio_rows {
        let (legacy, stateless) = self::stdio_ratios(rows);
        stdio_ratios.extend([legacy, stateless]);
        println!("stdio, {in_flight:<2} in flight: capsule/native legacy {legacy:.2}, stateless {stateless:.2}");
    }
    // Server CPU per call is the steadier comparison on a shared machine.
    println!("\n## Server CPU per call, capsule/native (same run; lower is cheaper)\n");
    let cpu = |a: &Row, b: &Row| match (a.cpu_per_call(), b.cpu_per_call()) {
        (Some(a), Some(b)) => format!("{:.2}", a / b),
        _ => "-".to_owned(),
    };
    for (clients, rows) in &http_rows {
        println!("c={clients:<3} legacy {}, stateless {}", cpu(&rows[0], &rows[2]), cpu(&rows[1], &rows[3]));
    }
    // The same server's calls with and without a plugin run: what the wire costs against
    // native's whole call, and what the sandbox adds.
    for (clients, rows) in &http_rows {
        let (wire, call) = (rows[5].cpu_per_call(), rows[1].cpu_per_call());
        let sandbox = wire.zip(call).map_or_else(|| "-".to_owned(), |(wire, call)| format!("{:.1}", call - wire));
        println!(
            "c={clients:<3} stateless, capsule's wire alone/native {}; the sandbox adds {sandbox} µs a call",
            cpu(&rows[5], &rows[3])
        );
    }
    for (in_flight, rows) in &stdio_rows {
        println!(
            "stdio, {in_flight:<2} in flight: legacy {}, stateless {}",
            cpu(&rows[0], &rows[2]),
            cpu(&rows[1], &rows[3])
        );
    }
    println!();
    println!(
        "battery: attacked/quiet p50 latency {:.2}, p99 latency {:.2}",
        quiet_ratio(&attacked, &quiet, 50.0),
        quiet_ratio(&attacked, &quiet, 99.0)
    );
    println!(
        "tenants: flooded/alone p50 latency {:.2}, p99 latency {:.2}",
        quiet_ratio(&flooded, &calm, 50.0),
        quiet_ratio(&flooded, &calm, 99.0)
    );
    println!("auth: JWT-secured/open throughput {:.2} (c=8, stateless)", ratio(&secured, &open));
    println!("telemetry: traced and scraped/plain throughput {:.2} (c=8, stateless)", ratio(&observed, &plain));
    println!("{}", languages::summary(&call_p50));
    let errors: u64 = http_rows.iter().chain(&stdio_rows).flat_map(|(_, rows)| rows).map(Row::errors).sum::<u64>()
        + quiet.errors()
        + attacked.errors()
        + calm.errors()
        + flooded.errors()
        + open.errors()
        + plain.errors()
        + observed.errors()
        + secured.errors()
        + flood_uncontained
        + uncontained;
    println!("\n# finished in {:.0} s", started.elapsed().as_secs_f64());
    if errors > 0 {
        println!("bench: FAILED: {errors} calls failed; figures from a run with errors are not valid");
        return Ok(false);
    }
    println!(
        "bench: capsule/native http throughput {:.2}, capsule/native stdio throughput {:.2}",
        geometric_mean(&http_ratios),
        geometric_mean(&stdio_ratios)
    );
    Ok(true)
}

/// A quiet tenant's latency alone and while another tenant floods the same server; prints
/// both rows and returns them, with the flooding calls not answered as tool results.
async fn tenant_flood(
    args: &Args,
    warmup: Duration,
    duration: Duration,
    reps: usize,
) -> anyhow::Result<(Row, Row, u64)> {
    let dir = std::env::temp_dir().join(format!("capsule-bench-tenants-{}", std::process::id()));
    let policy = tenants::layout(&dir, &args.plugins)?;
    let server = Server::start(&[
        "capsule",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--config",
        policy.to_str().unwrap_or_default(),
    ])
    .await?;
    let tally = std::sync::Arc::new(battery::Tally::default());
    let names = (
        "quiet tenant add, c=1, alone".into(),
        format!("quiet tenant add, c=1, {} clients flooding", tenants::FLOODERS),
    );
    let flood = tenants::flood();
    let (calm, flooded) = alone_and_disturbed(names, (warmup, duration, reps), |time, flooding| {
        battery::bystander((server.addr, "/t/quiet/mcp"), time, flooding.then_some(&flood), &tally)
    })
    .await?;
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    print_pair("A quiet tenant while another tenant floods (same server)", &calm, &flooded);
    let uncontained = tally.uncontained.load(Ordering::Relaxed);
    println!(
        "\nflooding calls: {}, refused by the noisy tenant's quota: {}, not contained: {uncontained} (spin and hog; \
         noisy limited to 1 concurrent call, 100 ms CPU and 32 MiB per call)",
        tally.made.load(Ordering::Relaxed),
        tally.refused.load(Ordering::Relaxed)
    );
    Ok((calm, flooded, uncontained))
}

/// A section of two rows measured side by side.
fn print_pair(title: &str, a: &Row, b: &Row) {
    println!("\n## {title}\n");
    println!("{}", report::HEADER);
    println!("{}\n{}", a.line(), b.line());
}

/// Throughput at 8 clients of an open tenant and of an OAuth-secured one (real JWTs from
/// oidc-provider, checked against the cached JWKS on every request) on the same server,
/// taking turns; prints both rows and returns them.
async fn auth_cost(args: &Args, warmup: Duration, duration: Duration, reps: usize) -> anyhow::Result<(Row, Row)> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let provider = auth::Provider::start(&repo).await?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let dir = std::env::temp_dir().join(format!("capsule-bench-auth-{}", std::process::id()));
    let policy = auth::layout(&dir, &args.plugins, port, &provider.issuer)?;
    let listen = format!("127.0.0.1:{port}");
    let server =
        Server::start(&["capsule", "serve", "--listen", &listen, "--config", policy.to_str().unwrap_or_default()])
            .await?;
    let token = provider.token(&auth::resource(port)).await?;
    let targets = [(server.addr, "/t/open/mcp", None), (server.addr, "/t/secured/mcp", Some(token))];
    let names = ["open tenant, stateless, c=8", "JWT-secured tenant, stateless, c=8"];
    let (open, secured) = stateless_pair(names, targets, [server.pid(); 2], (warmup, duration, reps)).await?;
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    print_pair("Authentication: an open tenant and a JWT-secured one (same server)", &open, &secured);
    Ok((open, secured))
}

/// Throughput at 8 clients of `calc` on a plain server and on one exporting every span over
/// OTLP (to a sink) while a scraper reads its `/metrics` every second, taking turns; prints
/// both rows and returns them. Each repetition starts both servers afresh, so that the median
/// is over processes as well.
async fn observed_cost(args: &Args, warmup: Duration, duration: Duration, reps: usize) -> anyhow::Result<(Row, Row)> {
    let calc = args.plugins.join("calc.wasm");
    let calc = calc.to_str().unwrap_or_default();
    let sink = Server::start(&["sink"]).await?;
    let endpoint = format!("http://{}", sink.addr);
    let env = [("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())];
    let names = ["plain, stateless, c=8", "traced (OTLP) and scraped, stateless, c=8"];
    let mut rows = names.map(|name| Row { name: name.into(), samples: Vec::new() });
    let mut scrapes = 0;
    for _ in 0..reps {
        let plain = Server::start(&[CAPSULE_HTTP, &["--plugin", calc]].concat()).await?;
        let metrics = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let metrics_arg = metrics.to_string();
        let observed =
            Server::start_with_env(&[CAPSULE_HTTP, &["--plugin", calc, "--metrics", &metrics_arg]].concat(), &env)
                .await?;
        let scraper = telemetry::Scraper::start(metrics);
        let targets = [(plain.addr, "/mcp", None), (observed.addr, "/mcp", None)];
        let pids = [plain.pid(), observed.pid()];
        let [a, b] = stateless_pair(names, targets, pids, (warmup, duration, 1)).await?.into();
        scrapes += scraper.scrapes.load(std::sync::atomic::Ordering::Relaxed);
        drop((scraper, plain, observed));
        rows[0].samples.extend(a.samples);
        rows[1].samples.extend(b.samples);
    }
    let [plain, observed] = rows;
    print_pair("Watching: a plain server and one traced over OTLP and scraped every second", &plain, &observed);
    println!("\nOTLP bytes received: {}, scrapes: {scrapes}", telemetry::received(sink.addr).await?);
    Ok((plain, observed))
}

/// Stateless throughput at 8 clients of two targets, each warmed up first, then taking turns
/// ([`in_turns`]) in each of `reps` repetitions, as two rows named by `names`; `pids` are
/// the servers' processes, for their CPU time.
async fn stateless_pair(
    names: [&str; 2],
    targets: [(std::net::SocketAddr, &'static str, Option<std::sync::Arc<str>>); 2],
    pids: [u32; 2],
    (warmup, duration, reps): (Duration, Duration, usize),
) -> anyhow::Result<(Row, Row)> {
    for target in &targets {
        load::http_at(target.clone(), Mode::Stateless, 8, warmup).await?;
    }
    let mut rows = names.map(|name| Row { name: name.into(), samples: Vec::new() });
    for _ in 0..reps {
        let samples = in_turns(2, duration, |i, time| {
            load::with_server_cpu(pids[i], load::http_at(targets[i].clone(), Mode::Stateless, 8, time))
        })
        .await?;
        for (row, sample) in rows.iter_mut().zip(samples) {
            row.samples.push(sample);
        }
    }
    let [a, b] = rows;
    Ok((a, b))
}

/// How long each configuration is measured at a time by [`in_turns`]. This machine's speed
/// drifts over seconds, for every process on it alike (BENCHMARKS "Turns"): measured a
/// second at a time and in turn, configurations see the same machine.
const TURN: Duration = Duration::from_secs(1);

/// One sample for each of `count` configurations, each measured for `duration` in all, in
/// turns of about [`TURN`]: `measure(i, time)` measures configuration `i` for `time`.
async fn in_turns<F, Fut>(count: usize, duration: Duration, mut measure: F) -> anyhow::Result<Vec<load::Sample>>
where
    F: FnMut(usize, Duration) -> Fut,
    Fut: Future<Output = anyhow::Result<load::Sample>>,
{
    let turns = (duration.as_secs_f64() / TURN.as_secs_f64()).round().max(1.0) as u32;
    let mut samples: Vec<Option<load::Sample>> = (0..count).map(|_| None).collect();
    for _ in 0..turns {
        for (i, sample) in samples.iter_mut().enumerate() {
            let slice = measure(i, duration / turns).await?;
            match sample {
                Some(sample) => sample.absorb(slice),
                None => *sample = Some(slice),
            }
        }
    }
    Ok(samples.into_iter().flatten().collect())
}

/// A measurement taken alone and disturbed (`measure(time, disturbed)`), interleaved over
/// `reps` repetitions after a warm-up, as two rows named by `names`.
async fn alone_and_disturbed<F: Future<Output = anyhow::Result<load::Sample>>>(
    names: (String, String),
    (warmup, duration, reps): (Duration, Duration, usize),
    measure: impl Fn(Duration, bool) -> F,
) -> anyhow::Result<(Row, Row)> {
    let (mut alone, mut disturbed) =
        (Row { name: names.0, samples: Vec::new() }, Row { name: names.1, samples: Vec::new() });
    measure(warmup, false).await?;
    for _ in 0..reps {
        alone.samples.push(measure(duration, false).await?);
        disturbed.samples.push(measure(duration, true).await?);
    }
    Ok((alone, disturbed))
}

/// Ratio of median percentile-`p` latencies, `a / b`.
fn quiet_ratio(a: &Row, b: &Row, p: f64) -> f64 {
    a.latency(p).1 / b.latency(p).1
}

/// The geometric mean: the right average for ratios.
fn geometric_mean(values: &[f64]) -> f64 {
    (values.iter().map(|v| v.ln()).sum::<f64>() / values.len() as f64).exp()
}
