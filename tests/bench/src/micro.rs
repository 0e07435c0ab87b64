//! Plugin runtime micro-costs, measured in process through Capsule's own library, and server
//! process costs (cold start, memory per idle session) measured on child processes.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use capsule::runtime::{NoEvents, PluginRuntime, RuntimeConfig, types};

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
pub async fn instance_call_us(
    runtime: &PluginRuntime,
    bytes: &[u8],
    calls: usize,
    reps: usize,
) -> anyhow::Result<Vec<f64>> {
    let plugin = runtime.load("calc", Arc::from(bytes)).await?;
    let context = types::RequestContext {
        client: types::ClientCapabilities {
            elicitation_form: false,
            elicitation_url: false,
            sampling: false,
            roots: false,
        },
        responses: Vec::new(),
        state: None,
    };
    let events: capsule::runtime::Events = Arc::new(NoEvents);
    let mut results = Vec::new();
    for _ in 0..reps {
        let start = Instant::now();
        for _ in 0..calls {
            let outcome = plugin.call_tool("add", r#"{"a":1,"b":2}"#, &context, events.clone()).await?;
            anyhow::ensure!(matches!(outcome, Ok(types::CallOutcome::Complete(_))), "add did not complete");
        }
        results.push(start.elapsed().as_secs_f64() * 1e6 / calls as f64);
    }
    Ok(results)
}

/// Milliseconds to load `count` plugins (compile, link, read their lists) into a fresh runtime.
pub async fn load_many_ms(bytes: &[u8], count: usize, reps: usize) -> anyhow::Result<Vec<f64>> {
    let mut results = Vec::new();
    for _ in 0..reps {
        let runtime = PluginRuntime::new(RuntimeConfig::default())?;
        let start = Instant::now();
        for i in 0..count {
            runtime.load(&format!("plugin{i}"), Arc::from(bytes)).await?;
        }
        results.push(start.elapsed().as_secs_f64() * 1e3);
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
