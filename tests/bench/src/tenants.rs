//! One tenant floods, another is measured: the quiet tenant's `add` latency on a quiet
//! server and while clients loop CPU-bound and memory-hungry calls at the noisy tenant,
//! whose quotas hold it to one call at a time. The quiet tenant must never see an error.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::json;

use crate::load::{self, Mode, Prober, Sample};

/// Flooding connections running at once.
pub const FLOODERS: usize = 4;

/// Lay out the two tenants under `dir` (plugins from `plugins`); returns the policy file.
pub fn layout(dir: &Path, plugins: &Path) -> anyhow::Result<std::path::PathBuf> {
    for (tenant, plugin) in [("noisy", "testing/hostile.wasm"), ("quiet", "calc.wasm")] {
        let folder = dir.join(tenant);
        std::fs::create_dir_all(&folder)?;
        let name = Path::new(plugin).file_name().unwrap_or_default();
        std::fs::copy(plugins.join(plugin), folder.join(name))?;
    }
    let policy = dir.join("capsule.toml");
    std::fs::write(
        &policy,
        "[tenants.noisy]\nsources = [\"noisy\"]\n[tenants.noisy.quotas]\nconcurrent_calls = 1\n\
         [tenants.noisy.plugins.hostile]\nlimits = { cpu_ms = 100, memory_mib = 32 }\n\
         [tenants.quiet]\nsources = [\"quiet\"]\n",
    )?;
    Ok(policy)
}

/// Flooding calls made, and those refused by the noisy tenant's quota.
#[derive(Default)]
pub struct Tally {
    pub made: AtomicU64,
    pub refused: AtomicU64,
}

/// The quiet tenant's `add` at one call in flight for `duration`, while `FLOODERS` clients
/// loop `spin` and `hog` at the noisy tenant if `flood` is set.
pub async fn quiet_tenant(
    addr: SocketAddr,
    duration: Duration,
    flood: bool,
    tally: &Arc<Tally>,
) -> anyhow::Result<Sample> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut flooders = Vec::new();
    if flood {
        for n in 0..FLOODERS {
            let mut prober = Prober::open_at(addr, "/t/noisy/mcp").await?;
            let (stop, tally) = (stop.clone(), tally.clone());
            flooders.push(tokio::spawn(async move {
                let tool = if n % 2 == 0 { "spin" } else { "hog" };
                while !stop.load(Ordering::Relaxed) {
                    tally.made.fetch_add(1, Ordering::Relaxed);
                    let result = prober.result(tool, json!({})).await;
                    let text = result.as_ref().map(|r| r["content"][0]["text"].to_string()).unwrap_or_default();
                    if text.contains("quota") {
                        tally.refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let sample = load::http_at((addr, "/t/quiet/mcp", None), Mode::Stateless, 1, duration).await;
    stop.store(true, Ordering::Relaxed);
    for flooder in flooders {
        flooder.await?;
    }
    sample
}
