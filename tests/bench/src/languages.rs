//! Plugins written with the non-Rust SDKs beside the Rust one, served over stdio: the time
//! from starting `capsule serve` to the first `tools/list` that lists the plugin (with an
//! empty and with a warm compile cache), and the p50 latency of a call in a fresh instance.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::report::{self, stat_line};

/// One language's example plugin and a trivial tool of it.
pub struct Example {
    pub language: &'static str,
    file: PathBuf,
    tool: &'static str,
    arguments: Value,
}

/// The examples measured: Rust's `calc` (its `add`), and the Python, TypeScript, C, Go and Zig
/// examples (their `convert`), built by plugins/build-examples.sh.
pub fn examples(plugins: &Path) -> anyhow::Result<Vec<Example>> {
    let convert = json!({"value": 1.609344, "unit": "km"});
    let all = vec![
        Example { language: "rust", file: plugins.join("calc.wasm"), tool: "add", arguments: json!({"a": 1, "b": 2}) },
        Example {
            language: "python",
            file: plugins.join("lang/python.wasm"),
            tool: "convert",
            arguments: convert.clone(),
        },
        Example { language: "js", file: plugins.join("lang/js.wasm"), tool: "convert", arguments: convert.clone() },
        Example { language: "c", file: plugins.join("lang/c.wasm"), tool: "convert", arguments: convert.clone() },
        Example { language: "go", file: plugins.join("lang/go.wasm"), tool: "convert", arguments: convert.clone() },
        Example { language: "zig", file: plugins.join("lang/zig.wasm"), tool: "convert", arguments: convert },
    ];
    for example in &all {
        anyhow::ensure!(
            example.file.is_file(),
            "{} is missing: run plugins/build-examples.sh before the benchmark",
            example.file.display()
        );
    }
    Ok(all)
}

/// `capsule serve --stdio` over a folder holding only the example, with its own cache.
struct Session {
    _child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Session {
    async fn start(example: &Example, dir: &Path, cache: &Path) -> anyhow::Result<Session> {
        let plugins = dir.join("plugins");
        std::fs::create_dir_all(&plugins)?;
        std::fs::copy(&example.file, plugins.join(format!("{}.wasm", example.language)))?;
        let mut child = tokio::process::Command::new(crate::servers::capsule_exe()?)
            .args(["serve", "--stdio", "--no-watch", "--plugins"])
            .arg(&plugins)
            .arg("--cache-dir")
            .arg(cache)
            .env("CAPSULE_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().expect("piped stdin");
        let lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let mut session = Session { _child: child, stdin, lines };
        let init = session
            .request(
                0,
                "initialize",
                json!({"protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "capsule-bench", "version": "1"}}),
            )
            .await?;
        anyhow::ensure!(init.get("result").is_some(), "initialize failed: {init}");
        session.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await?;
        Ok(session)
    }

    async fn send(&mut self, message: &Value) -> anyhow::Result<()> {
        self.stdin.write_all(format!("{message}\n").as_bytes()).await?;
        Ok(())
    }

    /// Send a request and read until its answer (notifications in between are skipped).
    async fn request(&mut self, id: u64, method: &str, params: Value) -> anyhow::Result<Value> {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await?;
        loop {
            let line = tokio::time::timeout(Duration::from_secs(120), self.lines.next_line())
                .await
                .map_err(|_| anyhow::anyhow!("no answer to {method} in 120 s"))??
                .ok_or_else(|| anyhow::anyhow!("the server exited before answering {method}"))?;
            let message: Value = serde_json::from_str(&line)?;
            if message.get("id") == Some(&json!(id)) {
                return Ok(message);
            }
        }
    }

    /// `tools/list` until it lists `tool` (lists wait for the first load, up to 30 s).
    async fn list_until(&mut self, tool: &str) -> anyhow::Result<()> {
        for id in 1..=100 {
            let tools = self.request(id, "tools/list", json!({})).await?;
            let listed = tools["result"]["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["name"] == tool));
            if listed {
                return Ok(());
            }
        }
        anyhow::bail!("{tool} was never listed")
    }
}

fn scratch(label: &str) -> anyhow::Result<tempfile::TempDir> {
    Ok(tempfile::Builder::new().prefix(&format!("capsule-bench-{label}-")).tempdir()?)
}

/// Milliseconds from starting the server to a `tools/list` that lists the example, with the
/// compile cache `cache` (empty or warm).
pub async fn startup_ms(example: &Example, cache: &Path) -> anyhow::Result<f64> {
    let dir = scratch(example.language)?;
    let started = Instant::now();
    let mut session = Session::start(example, dir.path(), cache).await?;
    session.list_until(example.tool).await?;
    Ok(started.elapsed().as_secs_f64() * 1e3)
}

/// The p50 latency, in µs, of `calls` calls one after another (each in a fresh instance),
/// with a warm compile cache.
pub async fn call_p50_us(example: &Example, cache: &Path, calls: usize) -> anyhow::Result<f64> {
    let dir = scratch(example.language)?;
    let mut session = Session::start(example, dir.path(), cache).await?;
    session.list_until(example.tool).await?;
    let mut latencies = Vec::with_capacity(calls);
    for id in 0..calls as u64 {
        let started = Instant::now();
        let params = json!({"name": example.tool, "arguments": example.arguments});
        let answer = session.request(1000 + id, "tools/call", params).await?;
        latencies.push(started.elapsed().as_secs_f64() * 1e6);
        anyhow::ensure!(
            answer["result"]["isError"] != json!(true) && answer.get("error").is_none(),
            "{} call failed: {answer}",
            example.language
        );
    }
    latencies.sort_by(f64::total_cmp);
    Ok(latencies[latencies.len() / 2])
}

/// A fresh, empty compile cache directory.
pub fn empty_cache() -> anyhow::Result<tempfile::TempDir> {
    scratch("cache")
}

/// The section's rows: for each example, start-up with an empty and a warm cache and the call
/// p50 over `calls` calls, `reps` times. Returns each language's median call p50 in µs.
pub async fn section(plugins: &Path, reps: usize, calls: usize) -> anyhow::Result<Vec<(&'static str, f64)>> {
    println!("\n## Plugins in other languages (stdio, one call at a time)\n");
    println!("{}", report::STAT_HEADER);
    let mut call_p50 = Vec::new();
    for example in examples(plugins)? {
        let (mut cold, mut warm, mut p50) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..reps {
            let cache = empty_cache()?;
            cold.push(startup_ms(&example, cache.path()).await?);
            warm.push(startup_ms(&example, cache.path()).await?);
            p50.push(call_p50_us(&example, cache.path(), calls).await?);
        }
        let name = example.language;
        println!("{}", stat_line(&format!("{name}: start to first tools/list, empty cache"), "ms", cold));
        println!("{}", stat_line(&format!("{name}: start to first tools/list, warm cache"), "ms", warm));
        println!("{}", stat_line(&format!("{name}: call p50, fresh instance ({calls} calls)"), "µs", p50.clone()));
        call_p50.push((name, report::min_median_max(p50).1));
    }
    Ok(call_p50)
}

/// The summary line: each language's call p50 as a multiple of Rust's.
pub fn summary(call_p50: &[(&'static str, f64)]) -> String {
    let rust = call_p50.iter().find(|(l, _)| *l == "rust").map_or(f64::NAN, |(_, p)| *p);
    let others: Vec<String> =
        call_p50.iter().filter(|(l, _)| *l != "rust").map(|(l, p)| format!("{l}/rust {:.1}", p / rust)).collect();
    format!("languages: fresh-instance call p50 {}", others.join(", "))
}
