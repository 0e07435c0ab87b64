//! `capsule check`: what a plugin exports, what it asks for, what the policy would let it do,
//! and whether `serve` would load it. The verdict comes from the loader's own admission path
//! ([`crate::loader::admit`]): the plugin is compiled, linked and its list functions run in
//! the sandbox `serve` would give it, and its offerings pass the same checks, so `check` and
//! `serve` cannot disagree.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::loader::{admit, read_component};
use crate::policy::{Grants, Needs, Policy};
use crate::runtime::{PluginRuntime, RuntimeConfig};

/// Whether `serve` would load the plugin under the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// It would load.
    Loads,
    /// It would load, and its declared needs go beyond its grants (warned about).
    LoadsWithWarnings,
    /// It would not load.
    Refused,
}

/// What `check` found, as printed (text) or serialized (`--json`).
#[derive(Debug, Serialize)]
pub struct Report {
    pub plugin: String,
    pub path: String,
    pub sha256: Option<String>,
    pub exports: Vec<String>,
    /// Imported interfaces, each with what the sandbox does with it.
    pub imports: Vec<Import>,
    /// The plugin's needs declaration (TOML), if it has one.
    pub needs: Option<String>,
    pub grants: GrantsReport,
    pub needs_beyond_grants: Vec<String>,
    /// Granted directories and secrets this machine does not have: `serve` would not start
    /// here until they exist (the check goes on without them).
    pub not_on_this_machine: Vec<String>,
    /// What it offers, when its lists could be read.
    pub offers: Option<Offers>,
    pub verdict: Verdict,
    /// Why `serve` would refuse it.
    pub reason: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Import {
    pub name: String,
    pub sandbox: Option<&'static str>,
}

#[derive(Debug, Default, Serialize)]
pub struct Offers {
    pub tools: Vec<String>,
    pub resources: Vec<String>,
    pub templates: Vec<String>,
    pub prompts: Vec<String>,
    pub completion: bool,
}

#[derive(Debug, Serialize)]
pub struct GrantsReport {
    pub policy: Option<String>,
    pub dirs: Vec<DirReport>,
    pub roots: bool,
    pub network: Vec<String>,
    pub tcp: Vec<String>,
    /// Names only: values are never printed.
    pub env: Vec<String>,
    /// Names only: values are never printed.
    pub secrets: Vec<String>,
    pub limits: LimitsReport,
}

#[derive(Debug, Serialize)]
pub struct DirReport {
    pub path: String,
    pub guest: String,
    pub write: bool,
}

#[derive(Debug, Serialize)]
pub struct LimitsReport {
    pub memory_mib: usize,
    pub cpu_ms: u128,
    pub timeout_ms: u128,
    pub concurrency: u32,
    pub reserved_instances: u32,
    pub output_kib: usize,
}

impl GrantsReport {
    fn of(grants: &Grants, policy: &Policy) -> GrantsReport {
        let l = grants.limits;
        GrantsReport {
            policy: policy.source().map(|p| p.display().to_string()),
            dirs: grants
                .dirs
                .iter()
                .map(|d| DirReport { path: d.path.display().to_string(), guest: d.guest.clone(), write: d.write })
                .collect(),
            roots: grants.roots,
            network: grants.network.iter().map(ToString::to_string).collect(),
            tcp: grants.tcp.iter().map(ToString::to_string).collect(),
            env: grants.env.iter().map(|(n, _)| n.clone()).collect(),
            secrets: grants.secrets.iter().map(|(n, _)| n.clone()).collect(),
            limits: LimitsReport {
                memory_mib: l.memory >> 20,
                cpu_ms: l.cpu.as_millis(),
                timeout_ms: l.timeout.as_millis(),
                concurrency: l.concurrency,
                reserved_instances: l.reserved_instances(),
                output_kib: l.output >> 10,
            },
        }
    }
}

/// Check `path` under `policy`. `Err` only when the check itself cannot run (the file cannot
/// be read, the engine cannot start); a plugin `serve` would refuse is a `Refused` report.
/// `runtime` is the sandbox configuration `serve` would run with (slot size, instances).
pub async fn check(
    path: &Path,
    policy: &Policy,
    not_on_this_machine: Vec<String>,
    runtime: RuntimeConfig,
) -> Result<Report> {
    let bytes: Arc<[u8]> = read_component(path).with_context(|| format!("cannot read {}", path.display()))?.into();
    let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let grants = policy.grants(&name);
    let runtime = PluginRuntime::new(runtime)?;
    let mut report = Report {
        plugin: name.clone(),
        path: path.display().to_string(),
        sha256: None,
        exports: Vec::new(),
        imports: Vec::new(),
        needs: None,
        grants: GrantsReport::of(&grants, policy),
        needs_beyond_grants: Vec::new(),
        not_on_this_machine,
        offers: None,
        verdict: Verdict::Refused,
        reason: None,
    };
    let inspection = match runtime.inspect(&name, &bytes) {
        Ok(inspection) => inspection,
        Err(e) => {
            report.reason = Some(e.to_string());
            return Ok(report);
        }
    };
    let needs = match crate::loader::read_sidecar(path)
        .and_then(|sidecar| Needs::declared(&bytes, sidecar.as_deref()).map_err(|e| e.to_string()))
    {
        Ok(needs) => needs,
        Err(e) => {
            report.reason = Some(format!("{name}: {e}"));
            return Ok(report);
        }
    };
    report.sha256 = Some(inspection.sha256);
    report.exports = inspection.exports;
    report.imports = inspection.imports.into_iter().map(|name| Import { sandbox: import_note(&name), name }).collect();
    report.needs = needs.as_ref().map(ToString::to_string);
    report.needs_beyond_grants = needs.as_ref().map(|n| n.beyond(&grants)).unwrap_or_default();
    match admit(&runtime, &policy.present(), &name, (bytes, needs)).await {
        Ok((offered, _)) => {
            let plugin = offered.plugin();
            let m = plugin.manifest();
            report.offers = Some(Offers {
                tools: m.tools.iter().map(|t| t.name.clone()).collect(),
                resources: m.resources.iter().map(|r| r.uri.clone()).collect(),
                templates: m.templates.iter().map(|t| t.uri_template.clone()).collect(),
                prompts: m.prompts.iter().map(|p| p.name.clone()).collect(),
                completion: m.completion,
            });
            let clean = report.needs_beyond_grants.is_empty() && report.not_on_this_machine.is_empty();
            report.verdict = if clean { Verdict::Loads } else { Verdict::LoadsWithWarnings };
        }
        Err(reason) => report.reason = Some(reason),
    }
    Ok(report)
}

/// What the sandbox does with an imported interface.
fn import_note(import: &str) -> Option<&'static str> {
    let interface = import.split('@').next().unwrap_or(import);
    Some(match interface {
        "wasi:filesystem/preopens" | "wasi:filesystem/types" => "only the granted directories exist",
        "wasi:cli/environment" => "only granted env values and secrets",
        "wasi:cli/stdin" => "always empty",
        "wasi:cli/stdout" => "discarded",
        "wasi:cli/stderr" => "to the server log, size-capped",
        "wasi:random/random" | "wasi:random/insecure" => "at most 1 MiB per call",
        "wasi:sockets/tcp"
        | "wasi:sockets/tcp-create-socket"
        | "wasi:sockets/network"
        | "wasi:sockets/instance-network" => "TCP connections to granted addresses only",
        "wasi:sockets/udp" | "wasi:sockets/udp-create-socket" | "wasi:sockets/ip-name-lookup" => "always denied",
        "wasi:http/outgoing-handler" => "HTTP to granted hosts only",
        "capsule:plugin/host" if import.split_once('@').is_none_or(|(_, version)| version.starts_with("0.1.")) => {
            "logs, progress and mounts of the current request"
        }
        _ => return None,
    })
}

impl Report {
    /// The report for people.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "plugin {} ({})", self.plugin, self.path);
        if let Some(sha256) = &self.sha256 {
            let _ = writeln!(out, "sha256 {sha256}\n\nexports:");
            for export in &self.exports {
                let _ = writeln!(out, "  {export}");
            }
            let _ = writeln!(out, "imports (what it could ask the host for):");
            for import in &self.imports {
                let note = import.sandbox.map(|n| format!("  ({n})")).unwrap_or_default();
                let _ = writeln!(out, "  {}{note}", import.name);
            }
            let _ = writeln!(out, "\nneeds (declared by the plugin):");
            for line in self.needs.as_deref().unwrap_or("nothing declared").lines() {
                let _ = writeln!(out, "  {line}");
            }
        }
        let g = &self.grants;
        let _ = writeln!(out, "\ngranted by {}:", g.policy.as_deref().unwrap_or("no policy file (nothing is granted)"));
        if g.dirs.is_empty() {
            let _ = writeln!(out, "  directories: none");
        }
        for dir in &g.dirs {
            let mode = if dir.write { "read-write" } else { "read-only" };
            let narrowed = if g.roots { ", narrowed to the client's roots" } else { "" };
            let _ = writeln!(out, "  directory {} as {} ({mode}{narrowed})", dir.path, dir.guest);
        }
        let list = |items: &[String]| if items.is_empty() { "none".to_owned() } else { items.join(", ") };
        let _ = writeln!(out, "  network (HTTP): {}", list(&g.network));
        let _ = writeln!(out, "  tcp: {}", list(&g.tcp));
        let _ = writeln!(out, "  env: {}", list(&g.env));
        let _ = writeln!(out, "  secrets: {}", list(&g.secrets));
        let l = &g.limits;
        let _ = writeln!(
            out,
            "  limits: memory {} MiB, CPU {} ms, timeout {} ms, {} concurrent calls ({} instances reserved), output {} KiB",
            l.memory_mib, l.cpu_ms, l.timeout_ms, l.concurrency, l.reserved_instances, l.output_kib
        );
        if !self.needs_beyond_grants.is_empty() {
            let _ = writeln!(out, "\nneeds beyond the grants:");
            for line in &self.needs_beyond_grants {
                let _ = writeln!(out, "  - {line}");
            }
        }
        if !self.not_on_this_machine.is_empty() {
            let _ = writeln!(out, "\nnot on this machine (serve needs them; checked without):");
            for line in &self.not_on_this_machine {
                let _ = writeln!(out, "  - {line}");
            }
        }
        if let Some(offers) = &self.offers {
            let _ = writeln!(out, "\noffers:");
            let _ = writeln!(out, "  tools: {}", list(&offers.tools));
            let _ = writeln!(out, "  resources: {}", list(&offers.resources));
            let _ = writeln!(out, "  resource templates: {}", list(&offers.templates));
            let _ = writeln!(out, "  prompts: {}", list(&offers.prompts));
            let _ = writeln!(out, "  completion: {}", if offers.completion { "yes" } else { "no" });
        }
        let verdict = match self.verdict {
            Verdict::Loads => "loads".to_owned(),
            Verdict::LoadsWithWarnings => "loads, with warnings".to_owned(),
            Verdict::Refused => format!("refused: {}", self.reason.as_deref().unwrap_or("unknown reason")),
        };
        let _ = writeln!(out, "\nverdict: {verdict}");
        out
    }
}
