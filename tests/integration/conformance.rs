//! The official MCP conformance suite against `capsule serve --plugins target/plugins`.

use std::sync::Mutex;

use crate::support::{Scratch, Server, plugins, run_script, shared_tool};

/// The suite runs install into shared caches and load both cores: one at a time.
static SUITE: Mutex<()> = Mutex::new(());

fn run(env: &[(&str, &str)], args: &[&str]) -> String {
    let _one_at_a_time = SUITE.lock().unwrap_or_else(|e| e.into_inner());
    // The conformance plugin's list-change triggers toggle markers in a granted directory,
    // so its lists really change (the host tells clients only of real changes).
    let scratch = Scratch::new("conformance-state");
    let state: &std::path::Path = &scratch;
    let policy = state.join("capsule.toml");
    std::fs::write(
        &policy,
        format!("[plugins.conformance]\ndirs = [{{ path = {state:?}, guest = \"/state\", write = true }}]\n"),
    )
    .unwrap();
    let server = Server::http(&["--plugins", &plugins().display().to_string(), "--config", policy.to_str().unwrap()]);
    let mut all = vec![server.url.as_str()];
    all.extend_from_slice(args);
    let (_, output) = run_script(&shared_tool("conformance.sh"), &all, env);
    eprintln!("{output}");
    output
}

#[test]
fn conformance_0_1_16_active_suite() {
    let output =
        run(&[("CONFORMANCE_VERSION", "0.1.16"), ("CONFORMANCE_CACHE", "/tmp/capsule-conformance-0.1.16")], &[]);
    assert!(output.contains("conformance: 30 passed, 0 failed"), "conformance 0.1.16 failed:\n{output}");
}

const ALPHA: &[(&str, &str)] =
    &[("CONFORMANCE_VERSION", "0.2.0-alpha.12"), ("CONFORMANCE_CACHE", "/tmp/capsule-conformance-alpha")];

#[test]
fn conformance_alpha_2025_11_25() {
    let output = run(ALPHA, &["--requirements", "2025-11-25"]);
    assert!(output.contains("suite exit 0"), "a scored 2025-11-25 scenario failed:\n{output}");
    assert!(output.contains("conformance: 33 passed, 0 failed"), "a 2025-11-25 scenario failed:\n{output}");
}

#[test]
fn conformance_alpha_2026_07_28() {
    let output = run(ALPHA, &["--requirements", "2026-07-28"]);
    assert!(output.contains("suite exit 0"), "a scored 2026-07-28 scenario failed:\n{output}");
    // The suite also runs unscored scenarios; the only ones allowed to fail are those of the
    // optional tasks extension (SEP-2663), which Capsule does not advertise.
    let failing: Vec<&str> = output.lines().filter(|l| l.starts_with("FAIL ")).collect();
    assert!(
        failing.iter().all(|l| l.starts_with("FAIL tasks-")),
        "unexpected failing 2026-07-28 scenarios: {failing:#?}\n{output}"
    );
}
