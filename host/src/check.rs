//! `capsule check`: what a plugin exports, what it asks for, and what the policy would let
//! it do, without running any of its code.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

use crate::policy::{Grants, NeedsMode, Policy};
use crate::runtime::{Inspection, PluginRuntime, RuntimeConfig};

/// Whether `check` found the plugin loadable under the policy.
pub enum Verdict {
    /// It would load (possibly with warnings about needs beyond its grants).
    Loads,
    /// It would not load.
    Refused,
}

/// Inspect `path` under `policy` and write the report to `out`.
pub fn check(path: &Path, policy: &Policy, out: &mut String) -> Result<Verdict> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let grants = policy.grants(&name);
    let runtime = PluginRuntime::new(RuntimeConfig { max_memory: policy.max_memory(), ..RuntimeConfig::default() })?;
    let inspection = match runtime.inspect(&name, &bytes) {
        Ok(inspection) => inspection,
        Err(e) => {
            let _ = writeln!(out, "plugin {name} ({}): cannot load: {e}", path.display());
            return Ok(Verdict::Refused);
        }
    };
    let _ = writeln!(out, "plugin {name} ({})\nsha256 {}\n", path.display(), inspection.sha256);
    report_interfaces(&inspection, out);
    let _ = writeln!(out, "\nneeds (declared by the plugin):");
    match &inspection.needs {
        Some(needs) => {
            for line in needs.to_string().lines() {
                let _ = writeln!(out, "  {line}");
            }
        }
        None => {
            let _ = writeln!(out, "  nothing declared");
        }
    }
    let _ = writeln!(
        out,
        "\ngranted by {}:",
        policy.source().map_or("no policy file (nothing is granted)".into(), |p| p.display().to_string())
    );
    report_grants(&grants, out);
    let beyond = inspection.needs.as_ref().map(|n| n.beyond(&grants)).unwrap_or_default();
    let mut verdict = Verdict::Loads;
    if !beyond.is_empty() {
        let _ = writeln!(out, "\nneeds beyond the grants:");
        for line in &beyond {
            let _ = writeln!(out, "  - {line}");
        }
        if policy.needs_mode() == NeedsMode::Refuse {
            verdict = Verdict::Refused;
        }
    }
    if let Some(e) = &inspection.link_error {
        let _ = writeln!(out, "\ncannot be linked by this host: {e}");
        verdict = Verdict::Refused;
    }
    if let Err(e) = runtime.check_grants(&name, &grants) {
        let _ = writeln!(out, "\n{e}");
        verdict = Verdict::Refused;
    }
    let _ = writeln!(
        out,
        "\nverdict: {}",
        match verdict {
            Verdict::Loads if beyond.is_empty() => "loads",
            Verdict::Loads => "loads, with warnings",
            Verdict::Refused => "refused",
        }
    );
    Ok(verdict)
}

fn report_interfaces(inspection: &Inspection, out: &mut String) {
    let _ = writeln!(out, "exports:");
    for export in &inspection.exports {
        let _ = writeln!(out, "  {export}");
    }
    let _ = writeln!(out, "imports (what it could ask the host for):");
    for import in &inspection.imports {
        let _ = writeln!(out, "  {import}{}", import_note(import));
    }
}

/// What the sandbox does with an imported interface.
fn import_note(import: &str) -> &'static str {
    let interface = import.split('@').next().unwrap_or(import);
    match interface {
        "wasi:filesystem/preopens" | "wasi:filesystem/types" => "  (only the granted directories exist)",
        "wasi:cli/environment" => "  (only granted env values and secrets)",
        "wasi:cli/stdin" => "  (always empty)",
        "wasi:cli/stdout" => "  (discarded)",
        "wasi:cli/stderr" => "  (to the server log, size-capped)",
        "wasi:sockets/tcp"
        | "wasi:sockets/tcp-create-socket"
        | "wasi:sockets/network"
        | "wasi:sockets/instance-network" => "  (TCP connections to granted addresses only)",
        "wasi:sockets/udp" | "wasi:sockets/udp-create-socket" | "wasi:sockets/ip-name-lookup" => "  (always denied)",
        "wasi:http/outgoing-handler" => "  (HTTP to granted hosts only)",
        "capsule:plugin/host" => "  (logs, progress and mounts of the current request)",
        _ => "",
    }
}

fn report_grants(grants: &Grants, out: &mut String) {
    if grants.dirs.is_empty() {
        let _ = writeln!(out, "  directories: none");
    }
    for dir in &grants.dirs {
        let mode = if dir.write { "read-write" } else { "read-only" };
        let narrowed = if grants.roots { ", narrowed to the client's roots" } else { "" };
        let _ = writeln!(out, "  directory {} as {} ({mode}{narrowed})", dir.path.display(), dir.guest);
    }
    let hosts: Vec<String> = grants.network.iter().map(ToString::to_string).collect();
    let _ = writeln!(out, "  network (HTTP): {}", if hosts.is_empty() { "none".into() } else { hosts.join(", ") });
    let tcp: Vec<String> = grants.tcp.iter().map(ToString::to_string).collect();
    let _ = writeln!(out, "  tcp: {}", if tcp.is_empty() { "none".into() } else { tcp.join(", ") });
    let env: Vec<&str> = grants.env.iter().map(|(n, _)| n.as_str()).collect();
    let _ = writeln!(out, "  env: {}", if env.is_empty() { "none".into() } else { env.join(", ") });
    let secrets: Vec<&str> = grants.secrets.iter().map(|(n, _)| n.as_str()).collect();
    let _ = writeln!(out, "  secrets: {}", if secrets.is_empty() { "none".into() } else { secrets.join(", ") });
    let l = grants.limits;
    let _ = writeln!(
        out,
        "  limits: memory {} MiB, CPU {} ms, timeout {} ms, {} concurrent calls, output {} KiB",
        l.memory >> 20,
        l.cpu.as_millis(),
        l.timeout.as_millis(),
        l.concurrency,
        l.output >> 10
    );
}
