//! Plugin runtime micro-costs, measured in process through Capsule's own library, and server
//! process costs (cold start, memory per idle session) measured on child processes.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use capsule::policy::{ClientRoots, Grants, Quotas};
use capsule::runtime::{Account, CompileCache, NoEvents, PluginRuntime, RuntimeConfig, types};

/// Milliseconds to compile `bytes` once, `reps` times.
pub fn compile_ms(runtime: &PluginRuntime, bytes: &[u8], reps: usize) -> anyhow::Result<Vec<f64>> {
    (0..reps)
        .map(|_| {
            let start = Instant::now();
            runtime.compile("bench", bytes)?;
            Ok(start.elapsed().as_secs_f64() * 1e3)
        })
        .collect()
}

/// Microseconds per fresh instance + `add` call + drop, averaged over `calls`, `reps` times.
/// The calls run on a runtime of one thread of their own: an instance is dropped after its
/// call returns (once the caller has had its turn), and on a one-thread runtime that drop
/// is still inside the timed loop rather than overlapped on another core.
pub async fn instance_call_us(
    runtime: &PluginRuntime,
    bytes: &[u8],
    calls: usize,
    reps: usize,
) -> anyhow::Result<Vec<f64>> {
    let (runtime, bytes) = (runtime.clone(), Arc::<[u8]>::from(bytes));
    let thread = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(instance_calls(&runtime, &bytes, calls, reps))
    });
    tokio::task::spawn_blocking(move || thread.join())
        .await?
        .map_err(|_| anyhow::anyhow!("the instance benchmark's thread panicked"))?
}

async fn instance_calls(runtime: &PluginRuntime, bytes: &[u8], calls: usize, reps: usize) -> anyhow::Result<Vec<f64>> {
    let account = Account::new("bench", Quotas::default());
    let plugin = runtime.load(&account, "calc", (Arc::from(bytes), None), Arc::new(Grants::default())).await?;
    let context = types::RequestContext::first(types::ClientCapabilities::NONE);
    let events: capsule::runtime::Events = Arc::new(NoEvents);
    let mut results = Vec::new();
    for _ in 0..reps {
        let start = Instant::now();
        for _ in 0..calls {
            let outcome =
                plugin.call_tool("add", r#"{"a":1,"b":2}"#, &context, &ClientRoots::NotOffered, events.clone()).await?;
            anyhow::ensure!(matches!(outcome, Ok(types::CallOutcome::Complete(_))), "add did not complete");
        }
        results.push(start.elapsed().as_secs_f64() * 1e6 / calls as f64);
    }
    Ok(results)
}

/// Milliseconds to load `count` distinct plugins (compile or take from the cache, link, read
/// their lists) into a fresh runtime: with an empty compile cache, then with the warm one.
pub async fn load_many_ms(bytes: &[u8], count: usize, reps: usize) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    // Distinct contents, so each plugin has its own cache entry: custom sections other than
    // `capsule:needs` mean nothing to the host.
    let plugins: Vec<Arc<[u8]>> = (0..count).map(|i| Arc::from(with_custom_section(bytes, i))).collect();
    let (mut empty, mut warm) = (Vec::new(), Vec::new());
    let account = Account::new("bench", Quotas::default());
    for _ in 0..reps {
        let dir = std::env::temp_dir().join(format!("capsule-bench-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for results in [&mut empty, &mut warm] {
            let config = RuntimeConfig { compile_cache: Some(CompileCache::open(&dir)?), ..RuntimeConfig::default() };
            let runtime = PluginRuntime::new(config)?;
            let start = Instant::now();
            for (i, plugin) in plugins.iter().enumerate() {
                runtime
                    .load(&account, &format!("plugin{i}"), (plugin.clone(), None), Arc::new(Grants::default()))
                    .await?;
            }
            results.push(start.elapsed().as_secs_f64() * 1e3);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok((empty, warm))
}

/// A copy of a component with one more custom section (`capsule-bench` = `n`).
fn with_custom_section(component: &[u8], n: usize) -> Vec<u8> {
    let name = b"capsule-bench";
    let payload = n.to_le_bytes();
    let mut out = component.to_vec();
    out.push(0); // custom section id
    out.push((1 + name.len() + payload.len()) as u8); // section size (fits one LEB128 byte)
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out.extend_from_slice(&payload);
    out
}

/// Milliseconds from renaming a new plugin version into a watched directory to the first
/// call served by it. Versions alternate between two plugins under one file name; each is
/// recognised by a tool only it has.
pub async fn swap_latency_ms(
    addr: std::net::SocketAddr,
    dir: &Path,
    versions: &[(Vec<u8>, &str, serde_json::Value); 2],
    swaps: usize,
) -> anyhow::Result<Vec<f64>> {
    let mut prober = crate::load::Prober::open(addr).await?;
    let mut results = Vec::new();
    // Two unmeasured swaps first: they fill the compile cache, as in steady operation.
    for i in 0..swaps + 2 {
        let (bytes, tool, arguments) = &versions[i % 2];
        let staging = dir.join(".staging");
        std::fs::write(&staging, bytes)?;
        let start = Instant::now();
        std::fs::rename(&staging, dir.join("swapped.wasm"))?;
        while !prober.succeeds(tool, arguments.clone()).await {
            anyhow::ensure!(start.elapsed() < Duration::from_secs(30), "version {i} was never served");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if i >= 2 {
            results.push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    Ok(results)
}

/// Resident set size of a process, in KiB.
pub fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no VmRSS for pid {pid}"))
}

/// Read a plugin component from `target/plugins`.
pub fn plugin_bytes(dir: &Path, name: &str) -> anyhow::Result<Vec<u8>> {
    let path = dir.join(format!("{name}.wasm"));
    std::fs::read(&path).map_err(|e| anyhow::anyhow!("{}: {e} (build the workspace first)", path.display()))
}

/// Let a server settle after load before reading its memory.
pub async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}
