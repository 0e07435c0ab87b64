//! One tenant floods, another is measured: the quiet tenant's `add` latency on a quiet
//! server and while clients loop CPU-bound and memory-hungry calls at the noisy tenant,
//! whose quotas hold it to one call at a time (measured by [`crate::battery::bystander`]).
//! The quiet tenant must never see an error.

use std::path::Path;

use serde_json::json;

use crate::battery::Attack;

/// Flooding connections running at once.
pub const FLOODERS: usize = 64;

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

/// Clients looping `spin` and `hog` at the noisy tenant.
pub fn flood() -> Attack {
    Attack { path: "/t/noisy/mcp", clients: FLOODERS, calls: vec![("spin", json!({})), ("hog", json!({}))] }
}
