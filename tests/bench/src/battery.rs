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
pub async fn bystander(
    (addr, measured): (SocketAddr, &'static str),
    duration: Duration,
    attack: Option<&Attack>,
    tally: &Arc<Tally>,
) -> anyhow::Result<Sample> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut attackers = Vec::new();
    if let Some(attack) = attack {
        for offset in 0..attack.clients {
            let mut prober = Prober::open_at(addr, attack.path).await?;
            let (stop, tally, calls) = (stop.clone(), tally.clone(), attack.calls.clone());
            let mut next = offset * calls.len() / attack.clients;
            attackers.push(tokio::spawn(async move {
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
        // Let the attacks get going before measuring.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let sample = load::http_at((addr, measured, None), Mode::Stateless, 1, duration).await;
    stop.store(true, Ordering::Relaxed);
    for attacker in attackers {
        attacker.await?;
    }
    sample
}
