//! A well-behaved caller's latency while hostile plugins attack: the same `add` load is
//! measured on a quiet server and while clients fire the hostile test plugin's battery
//! (CPU spin, memory bomb, recursion, panic, an oversized result, a log flood, filesystem
//! escapes and denied network requests) at the same server. Every attack must come back as
//! a tool result; one that does not is a containment failure and fails the run.

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

fn attacks() -> Vec<(&'static str, Value)> {
    vec![
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
    ]
}

/// Attacks made, and attacks that did not come back as a tool result.
#[derive(Default)]
pub struct Tally {
    pub made: AtomicU64,
    pub uncontained: AtomicU64,
}

/// `add` at one call in flight for `duration`, while `ATTACKERS` clients loop over the
/// battery if `attack` is set.
pub async fn bystander(
    addr: SocketAddr,
    duration: Duration,
    attack: bool,
    tally: &Arc<Tally>,
) -> anyhow::Result<Sample> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut attackers = Vec::new();
    if attack {
        for offset in 0..ATTACKERS {
            let mut prober = Prober::open(addr).await?;
            let (stop, tally) = (stop.clone(), tally.clone());
            attackers.push(tokio::spawn(async move {
                let attacks = attacks();
                let mut next = offset * attacks.len() / ATTACKERS;
                while !stop.load(Ordering::Relaxed) {
                    let (tool, arguments) = &attacks[next % attacks.len()];
                    next += 1;
                    tally.made.fetch_add(1, Ordering::Relaxed);
                    if prober.result(tool, arguments.clone()).await.is_none() {
                        tally.uncontained.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        // Let the attacks get going before measuring.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let sample = load::http(addr, Mode::Stateless, 1, duration).await;
    stop.store(true, Ordering::Relaxed);
    for attacker in attackers {
        attacker.await?;
    }
    sample
}
