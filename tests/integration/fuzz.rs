//! The structure-aware fuzzer (`tests/clients/fuzz.py`) against the real binary and the bundled
//! plugins, over a socket and over a pipe: mutated requests of every revision (trees, bytes,
//! headers, batches, session ends and GET streams) and mutated answers to what the server
//! asks the client each get a proper answer in time, and the server keeps serving.
//! `CAPSULE_FUZZ_SEED` and `CAPSULE_FUZZ_SECONDS` vary a run; a failure prints its seed.

use std::process::Command;

use crate::support::{Server, plugins, root};

/// A request may wait behind the rest of the suite on two cores, but never on a plugin for
/// longer than the servers' four-second call timeout.
const ANSWER_WITHIN: &str = "30";

fn fuzz(target: &[&str]) -> String {
    let seed = std::env::var("CAPSULE_FUZZ_SEED").unwrap_or_else(|_| "1".into());
    let seconds = std::env::var("CAPSULE_FUZZ_SECONDS").unwrap_or_else(|_| "20".into());
    let output = Command::new("python3")
        .arg(root().join("tests").join("clients").join("fuzz.py"))
        .args(["--seed", &seed, "--seconds", &seconds, "--answer-within", ANSWER_WITHIN])
        .args(target)
        .output()
        .expect("run python3 tests/clients/fuzz.py");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "the fuzzer found something (seed {seed}):\n{text}");
    assert!(!text.contains("panicked"), "the server panicked (seed {seed}):\n{text}");
    text
}

/// The servers' limits: a runaway call ends well within [`ANSWER_WITHIN`].
const LIMITS: [&str; 4] = ["--cpu-deadline", "1000", "--call-timeout", "4000"];

#[test]
fn fuzzed_http_requests_get_proper_answers_and_the_server_keeps_serving() {
    let plugins = plugins().display().to_string();
    let server = Server::http(&[&["--plugins", plugins.as_str()][..], &LIMITS].concat());
    let report = fuzz(&["--http", &server.url]);
    assert!(report.contains(" 0 findings"), "{report}");
    // The answers to what the server asks were fuzzed too, both ways it asks.
    assert!(!report.contains(" 0 input rounds") && !report.contains(" 0 server requests"), "{report}");
    assert!(!server.log().contains("panicked"), "the server panicked:\n{}", server.log());
}

#[test]
fn fuzzed_stdio_lines_get_proper_answers_and_eof_ends_the_server() {
    let plugins = plugins().display().to_string();
    let command = ["--stdio", "--", env!("CARGO_BIN_EXE_capsule"), "serve", "--stdio", "--plugins", &plugins];
    let report = fuzz(&[&command[..], &LIMITS].concat());
    assert!(report.contains(" 0 findings"), "{report}");
}
