//! The official Python (`mcp`, modes auto and legacy) and TypeScript SDK clients against
//! the bundled example plugins, over HTTP and over stdio.

use std::sync::Mutex;

use crate::support::{Server, root, run_script, scratch_dir, shared_tool};

/// The smoke scripts install into shared caches (a venv, node_modules) on first use.
pub static PYTHON: Mutex<()> = Mutex::new(());
pub static TYPESCRIPT: Mutex<()> = Mutex::new(());

/// The bundled plugins have no argument-free tool, so name one and its arguments.
const TOOL: &[&str] = &["--tool", "evaluate", "--args", r#"{"expression":"6*7"}"#];

fn check(output: &str, ok: bool) {
    eprintln!("{output}");
    assert!(ok && output.lines().any(|l| l.ends_with(" 0 failed")), "smoke run failed:\n{output}");
    assert!(output.contains("42"), "the tool result did not come back:\n{output}");
}

#[test]
fn python_client_over_http() {
    let _lock = PYTHON.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::http(&[]);
    let mut args = vec!["--modes", "auto,legacy"];
    args.extend_from_slice(TOOL);
    args.push(&server.url);
    let (ok, output) = run_script(&shared_tool("clients/py-smoke.sh"), &args, &[]);
    check(&output, ok);
    assert!(
        output.contains("[py/auto] connect: protocolVersion=2026-07-28"),
        "auto mode did not use 2026-07-28:\n{output}"
    );
    assert!(
        output.contains("[py/legacy] connect: protocolVersion=2025-11-25"),
        "legacy mode did not negotiate:\n{output}"
    );
}

#[test]
fn python_client_over_stdio() {
    let _lock = PYTHON.lock().unwrap_or_else(|e| e.into_inner());
    let mut args = vec!["--modes", "auto,legacy"];
    args.extend_from_slice(TOOL);
    args.extend_from_slice(&["--stdio", "--", env!("CARGO_BIN_EXE_capsule"), "serve", "--stdio"]);
    let (ok, output) = run_script(&shared_tool("clients/py-smoke.sh"), &args, &[]);
    check(&output, ok);
}

#[test]
fn typescript_client_over_http() {
    let _lock = TYPESCRIPT.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::http(&[]);
    let mut args = TOOL.to_vec();
    args.push(&server.url);
    let (ok, output) = run_script(&shared_tool("clients/ts-smoke.sh"), &args, &[]);
    check(&output, ok);
    assert!(output.contains("PASS [ts] DELETE session"), "session DELETE did not pass:\n{output}");
}

#[test]
fn typescript_client_over_stdio() {
    let _lock = TYPESCRIPT.lock().unwrap_or_else(|e| e.into_inner());
    let mut args = TOOL.to_vec();
    args.extend_from_slice(&["--stdio", "--", env!("CARGO_BIN_EXE_capsule"), "serve", "--stdio"]);
    let (ok, output) = run_script(&shared_tool("clients/ts-smoke.sh"), &args, &[]);
    check(&output, ok);
}

/// Python SDK 1.x (what langchain-mcp-adapters and others still run on) fails a stdio session
/// that is sent a message while it closes (python-sdk#1960). A client that asks for its tools
/// while the first load runs (compiled afresh, so that it does) and closes at once ends
/// cleanly: the load's end announces no list it did not ask for.
#[test]
fn python_sdk_1_x_lists_tools_over_stdio_and_closes_cleanly() {
    let _lock = PYTHON.lock().unwrap_or_else(|e| e.into_inner());
    let env = [("MCP_PY_VERSION", "1.30.0"), ("MCP_PY_SMOKE_CACHE", "/tmp/mcp-smoke-py-1.x")];
    let server = [env!("CARGO_BIN_EXE_capsule"), "serve", "--stdio", "--no-compile-cache", "--no-watch"];
    let args = [&["py_stdio_close.py"][..], &server].concat();
    for _ in 0..2 {
        let (ok, output) = run_script(&root().join("tests/clients/py.sh"), &args, &env);
        assert!(ok && output.contains("tools, closed cleanly"), "the session did not end cleanly:\n{output}");
    }
}

/// A scratch directory granted writable to the `files` plugin, and a server with that policy.
fn files_granted(name: &str) -> (std::path::PathBuf, Server) {
    let dir = scratch_dir(name).canonicalize().unwrap();
    let policy = dir.join("capsule.toml");
    std::fs::write(&policy, format!("[plugins.files]\ndirs = [{{ path = {:?}, write = true }}]\n", dir.display()))
        .unwrap();
    let server = Server::http(&["--config", policy.to_str().unwrap()]);
    (dir, server)
}

/// Subscribed clients hear of a file the `files` plugin writes: the Python SDK over a legacy
/// session (`resources/subscribe`, also through a directory) and a 2026-07-28
/// `subscriptions/listen` stream.
#[test]
fn python_client_hears_resource_updates() {
    let _lock = PYTHON.lock().unwrap_or_else(|e| e.into_inner());
    let (dir, server) = files_granted("updates-py");
    let args = ["py_updates.py", "--root", dir.to_str().unwrap(), &server.url];
    let (ok, output) = run_script(&root().join("tests/clients/py.sh"), &args, &[]);
    eprintln!("{output}");
    assert!(ok && output.lines().any(|l| l == "9 passed, 0 failed"), "updates run failed:\n{output}");
    let _ = std::fs::remove_dir_all(dir);
}

/// The same through the TypeScript SDK's `subscribeResource`.
#[test]
fn typescript_client_hears_resource_updates() {
    let _lock = TYPESCRIPT.lock().unwrap_or_else(|e| e.into_inner());
    let (dir, server) = files_granted("updates-ts");
    let args = ["ts_updates.mjs", dir.to_str().unwrap(), &server.url];
    let (ok, output) = run_script(&root().join("tests/clients/ts.sh"), &args, &[]);
    eprintln!("{output}");
    assert!(ok && output.lines().any(|l| l == "4 passed, 0 failed"), "updates run failed:\n{output}");
    let _ = std::fs::remove_dir_all(dir);
}
