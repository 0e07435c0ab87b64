//! A well-behaved caller's latency while others attack: the same `add` load is measured on
//! a quiet server and while clients loop hostile calls at it (or at another tenant of it).
//!
//! The hostile battery: CPU spin, memory bomb, recursion, panic, an oversized result, a log
//! flood, filesystem escapes and denied network requests, fired at the test-only `hostile`
//! plugin. Every attack must come back as a tool result; one that does not is a containment
//! failure and fails the run.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::load::{self, Mode, Prober, Sample};

/// The policy the battery server runs the hostile plugin under: tight limits so attacks end
/// quickly, and no grants at all.
pub const POLICY: &str = "[plugins.hostile]\nlimits = { cpu_ms = 500, timeout_ms = 2000, output_kib = 1024 }\n";

/// Attacker connections running at once.
pub const ATTACKERS: usize = 2;

/// Clients looping calls at an endpoint.
pub struct Attack {
    /// The endpoint they call.
    pub path: &'static str,
    /// How many loop at once.
    pub clients: usize,
    /// The calls, cycled through; each client starts at its own point.
    pub calls: Vec<(&'static str, Value)>,
}

/// The hostile battery at `/mcp`.
pub fn battery() -> Attack {
    let calls = vec![
        ("spin", json!({})),
        ("hog", json!({})),
        ("recurse", json!({})),
        ("crash", json!({})),
        ("big", json!({"mib": 4})),
        ("flood", json!({"count": 20_000})),
        ("read_path", json!({"path": "/etc/passwd"})),
        ("write_path", json!({"path": "../escape.txt", "content": "x"})),
        ("environment", json!({})),
        ("http_get", json!({"url": "http://127.0.0.1:9/"})),
        ("connect", json!({"address": "127.0.0.1:9"})),
    ];
    Attack { path: "/mcp", clients: ATTACKERS, calls }
}

/// Attacks made, attacks that did not come back as a tool result, and attacks a quota
/// refused.
#[derive(Default)]
pub struct Tally {
    pub made: AtomicU64,
    pub uncontained: AtomicU64,
    pub refused: AtomicU64,
}

/// `add` at `measured`, one call in flight for `duration`, while `attack` runs if given.
///
/// The attackers run on a runtime and OS thread of their own, as clients elsewhere would: on
/// the measuring runtime, the measured client would wait behind them in its own process's
/// queue, and that wait is not the server's doing.
pub async fn bystander(
    (addr, measured): (SocketAddr, &'static str),
    duration: Duration,
    attack: Option<&Attack>,
    tally: &Arc<Tally>,
) -> anyhow::Result<Sample> {
    let stop = Arc::new(AtomicBool::new(false));
    let attackers = match attack {
        Some(attack) => {
            let (path, clients, calls) = (attack.path, attack.clients, attack.calls.clone());
            let (stop, tally) = (stop.clone(), tally.clone());
            let (started, ready) = tokio::sync::oneshot::channel();
            let thread = std::thread::Builder::new().name("attackers".into()).spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                runtime.block_on(attackers((addr, path), clients, calls, (stop, tally), started))
            })?;
            ready.await??;
            // Let the attacks get going before measuring.
            tokio::time::sleep(Duration::from_millis(200)).await;
            Some(thread)
        }
        None => None,
    };
    let sample = load::http_at((addr, measured, None), Mode::Stateless, 1, duration).await;
    stop.store(true, Ordering::Relaxed);
    if let Some(thread) = attackers {
        tokio::task::spawn_blocking(move || thread.join())
            .await?
            .map_err(|_| anyhow::anyhow!("the attackers' thread panicked"))??;
    }
    sample
}

/// `clients` connections to `path` cycling through `calls` until `stop`; `started` says
/// when they are connected.
async fn attackers(
    (addr, path): (SocketAddr, &'static str),
    clients: usize,
    calls: Vec<(&'static str, Value)>,
    (stop, tally): (Arc<AtomicBool>, Arc<Tally>),
    started: tokio::sync::oneshot::Sender<anyhow::Result<()>>,
) -> anyhow::Result<()> {
    let mut probers = Vec::new();
    for _ in 0..clients {
        match Prober::open_at(addr, path).await {
            Ok(prober) => probers.push(prober),
            Err(e) => {
                let _ = started.send(Err(anyhow::anyhow!("an attacker could not connect: {e}")));
                return Ok(());
            }
        }
    }
    let _ = started.send(Ok(()));
    let mut running = Vec::new();
    for (offset, mut prober) in probers.into_iter().enumerate() {
        let (stop, tally, calls) = (stop.clone(), tally.clone(), calls.clone());
        let mut next = offset * calls.len() / clients;
        running.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let (tool, arguments) = &calls[next % calls.len()];
                next += 1;
                tally.made.fetch_add(1, Ordering::Relaxed);
                match prober.result(tool, arguments.clone()).await {
                    None => tally.uncontained.fetch_add(1, Ordering::Relaxed),
                    Some(result) if result["content"][0]["text"].to_string().contains("quota") => {
                        tally.refused.fetch_add(1, Ordering::Relaxed)
                    }
                    Some(_) => 0,
                };
            }
        }));
    }
    for task in running {
        task.await?;
    }
    Ok(())
}
