//! The capability sandbox: the operator's policy, the filesystem narrowed to the client's
//! roots, and `capsule check`.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::hardening::call_with_roots;
use crate::support::{Client, Listener, Server, first_text, root, run_script, scratch_dir};

/// A base directory holding the client's root and a sibling the client did not offer, both
/// inside the operator's grant, with symlinks planted in the root that lead out of it.
struct RootsFixture {
    base: PathBuf,
    root: PathBuf,
    outside: PathBuf,
    policy: PathBuf,
}

impl RootsFixture {
    fn new(name: &str, write: bool) -> RootsFixture {
        let base = scratch_dir(name).canonicalize().unwrap();
        let (root, outside) = (base.join("root"), base.join("outside"));
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(root.join("inside.txt"), "hello from inside").unwrap();
        std::fs::write(outside.join("secret.txt"), "top secret").unwrap();
        std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("link-file")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link-dir")).unwrap();
        let policy = base.join("capsule.toml");
        std::fs::write(
            &policy,
            format!("[plugins.files]\nroots = true\ndirs = [{{ path = {:?}, write = {write} }}]\n", base.display()),
        )
        .unwrap();
        RootsFixture { base, root, outside, policy }
    }

    fn run_client(&self, server: &Server, mode: &str, read_only: bool) {
        let script = root().join("tests/clients/py.sh");
        let (root_dir, outside) = (self.root.display().to_string(), self.outside.display().to_string());
        let mut args = vec!["py_roots.py", "--mode", mode, "--root", &root_dir, "--outside", &outside];
        if read_only {
            args.push("--read-only");
        }
        args.push(&server.url);
        let (ok, output) = run_script(&script, &args, &[]);
        eprintln!("{output}");
        assert!(ok && output.lines().any(|l| l.ends_with(" 0 failed")), "roots run failed:\n{output}");
    }
}

impl Drop for RootsFixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn serve_with_policy(policy: &Path) -> Server {
    Server::http(&["--config", policy.to_str().unwrap()])
}

#[test]
fn python_client_roots_scope_the_files_plugin() {
    let _lock = crate::clients::PYTHON.lock().unwrap_or_else(|e| e.into_inner());
    let fixture = RootsFixture::new("roots-rw", true);
    let server = serve_with_policy(&fixture.policy);
    // Legacy sessions get a real roots/list request; 2026-07-28 requests get the roots
    // request inside input_required, answered by the SDK's input-required driver.
    fixture.run_client(&server, "legacy", false);
    fixture.run_client(&server, "auto", false);
}

#[test]
fn read_only_grants_refuse_writes() {
    let _lock = crate::clients::PYTHON.lock().unwrap_or_else(|e| e.into_inner());
    let fixture = RootsFixture::new("roots-ro", false);
    let server = serve_with_policy(&fixture.policy);
    fixture.run_client(&server, "legacy", true);
    fixture.run_client(&server, "auto", true);
}

/// Per-plugin limits from the policy: an output-size cap and a concurrency limit, each
/// answered with a tool error that names it, after which the plugin serves again.
#[tokio::test]
async fn per_plugin_output_and_concurrency_limits_hold() {
    let dir = scratch_dir("limits");
    let policy = dir.join("capsule.toml");
    std::fs::write(&policy, "[plugins.hostile]\nlimits = { concurrency = 1, output_kib = 1, timeout_ms = 2000 }\n")
        .unwrap();
    let hostile = crate::support::plugins().join("testing/hostile.wasm");
    let server = Server::http(&["--config", policy.to_str().unwrap(), "--plugin", hostile.to_str().unwrap()]);
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    let echo = async |id, text: &str| {
        client.request(id, "tools/call", json!({"name": "echo", "arguments": {"text": text}})).await
    };

    let big = echo(1, &"x".repeat(2048)).await;
    assert_eq!(big["result"]["isError"], true, "{big}");
    assert!(first_text(&big["result"]).contains("exceeds its output limit of 1024 bytes"), "{big}");
    assert_eq!(first_text(&echo(2, "small").await["result"]), "small");
    // Far past the limit, the result is not even copied out of the sandbox whole: what one
    // call may hand the host is 16 times its output limit and a MiB.
    let huge = client.request(9, "tools/call", json!({"name": "big", "arguments": {"mib": 4}})).await;
    let said = first_text(&huge["result"]);
    assert!(huge["result"]["isError"] == true && said.contains("more than 1064960 bytes at once"), "{huge}");

    let staller = client.clone();
    let stall =
        tokio::spawn(async move { staller.request(3, "tools/call", json!({"name": "stall", "arguments": {}})).await });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let refused = echo(4, "too many").await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert!(first_text(&refused["result"]).contains("limit of 1 concurrent calls"), "{refused}");
    let stalled = stall.await.unwrap();
    assert!(first_text(&stalled["result"]).contains("did not finish within 2s"), "{stalled}");
    assert_eq!(first_text(&echo(5, "free again").await["result"]), "free again");
    let _ = std::fs::remove_dir_all(dir);
}

/// The bundled `fetch` plugin reaches the hosts its grant names, pages long text, follows
/// redirects only as far as the grant reaches, and refuses every other destination without a
/// connection being made.
#[tokio::test]
async fn fetch_reaches_only_granted_hosts() {
    let allowed = Listener::start("0123456789abcdefghij").await;
    let other = Listener::start("never").await;
    let hop = Listener::redirect(&format!("http://127.0.0.1:{}/moved", allowed.port)).await;
    let escape = Listener::redirect(&format!("http://127.0.0.1:{}/", other.port)).await;
    let looping = Listener::redirect("/again").await;
    let dir = scratch_dir("fetch");
    let policy = dir.join("capsule.toml");
    let granted =
        [allowed.port, hop.port, escape.port, looping.port].map(|port| format!("\"127.0.0.1:{port}\"")).join(", ");
    std::fs::write(&policy, format!("[plugins.fetch]\nnetwork = [{granted}]\n")).unwrap();
    let server = serve_with_policy(&policy);
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    let fetch = async |id, arguments: serde_json::Value| {
        client.request(id, "tools/call", json!({"name": "fetch", "arguments": arguments})).await["result"].clone()
    };

    let url = format!("http://127.0.0.1:{}/page", allowed.port);
    let whole = fetch(1, json!({"url": url})).await;
    assert_eq!(first_text(&whole), "0123456789abcdefghij", "{whole}");
    let first = fetch(2, json!({"url": url, "max_length": 8})).await;
    assert!(first_text(&first).starts_with("01234567\n\n(content truncated at character 8 of 20"), "{first}");
    let rest = fetch(3, json!({"url": url, "start_index": 8})).await;
    assert_eq!(first_text(&rest), "89abcdefghij");
    // Another spelling of the same URL is no redirect.
    let shouted = fetch(13, json!({"url": format!("HTTP://127.0.0.1:{}/page", allowed.port)})).await;
    assert_eq!(first_text(&shouted), "0123456789abcdefghij", "{shouted}");

    for (id, url) in [
        (4, format!("http://127.0.0.1:{}/", other.port)),
        (5, format!("http://localhost:{}/", allowed.port)),
        (6, "https://example.com/".to_owned()),
    ] {
        let denied = fetch(id, json!({"url": url})).await;
        assert_eq!(denied["isError"], true, "{denied}");
        assert!(first_text(&denied).contains("does not allow this tool to reach"), "{denied}");
    }
    let moved = fetch(10, json!({"url": format!("http://127.0.0.1:{}/", hop.port)})).await;
    let expected = format!("(redirected to http://127.0.0.1:{}/moved)\n\n0123456789abcdefghij", allowed.port);
    assert_eq!(first_text(&moved), expected, "{moved}");
    let escaped = fetch(11, json!({"url": format!("http://127.0.0.1:{}/", escape.port)})).await;
    assert!(
        escaped["isError"] == true && first_text(&escaped).contains("does not allow this tool to reach"),
        "{escaped}"
    );
    // A redirect loop ends in an error, not in the empty body of its last 302.
    let looped = fetch(12, json!({"url": format!("http://127.0.0.1:{}/", looping.port)})).await;
    assert!(looped["isError"] == true && first_text(&looped).contains("redirected more than 5 times"), "{looped}");
    let bad = fetch(7, json!({"url": "file:///etc/passwd"})).await;
    assert!(bad["isError"] == true && first_text(&bad).contains("not http or https"), "{bad}");
    assert_eq!(other.connections.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert_eq!(allowed.connections.load(std::sync::atomic::Ordering::SeqCst), 5);
    let _ = std::fs::remove_dir_all(dir);
}

/// Idle workers build the next call's instance ahead (`--spare-instances`), and every call
/// still runs in a fresh one: a counter in the plugin's memory reads 1 at every call, calls
/// with other roots see only their own, and `/metrics` counts the prebuilt instances. A call
/// computing meanwhile (which makes the epoch clock tick) does not stop the prebuilding.
#[tokio::test(flavor = "multi_thread")]
async fn prebuilt_instances_serve_one_call_each() {
    let fixture = RootsFixture::new("prebuilt", false);
    std::fs::write(
        &fixture.policy,
        format!(
            "[plugins.hostile]\nroots = true\ndirs = [{{ path = {:?} }}]\nlimits = {{ cpu_ms = 300, timeout_ms = 5000 }}\n",
            fixture.base.display()
        ),
    )
    .unwrap();
    let hostile = crate::support::plugins().join("testing/hostile.wasm");
    let server = Server::http(&[
        "--config",
        fixture.policy.to_str().unwrap(),
        "--plugin",
        hostile.to_str().unwrap(),
        "--metrics",
        "127.0.0.1:0",
        "--workers",
        "1",
    ]);
    let metrics = crate::telemetry::address_in_log(&server, "metrics on ");
    let prebuilt = async || {
        let scraped = reqwest::get(&metrics).await.unwrap().text().await.unwrap();
        scraped
            .lines()
            .find_map(|line| line.strip_prefix(r#"capsule_sandbox_prebuilt_total{tenant="default",plugin="hostile"} "#))
            .map_or(0, |count| count.parse::<u64>().unwrap())
    };
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    let spinner = client.clone();
    let spin =
        tokio::spawn(async move { spinner.request(1, "tools/call", json!({"name": "spin", "arguments": {}})).await });
    let remember = async |id| {
        let counted = client.request(id, "tools/call", json!({"name": "remember", "arguments": {}})).await;
        assert_eq!(first_text(&counted["result"]), "1", "call {id} ran in a used instance: {counted}");
    };
    // Calls one after another: the worker goes idle between them, and builds a spare each
    // time while the spin makes the clock tick.
    let mut id = 2;
    while !spin.is_finished() {
        remember(id).await;
        id += 1;
    }
    let spun = spin.await.unwrap();
    assert!(first_text(&spun["result"]).contains("CPU"), "the spin was not stopped by its CPU deadline: {spun}");
    let before = prebuilt().await;
    for id in id..id + 20 {
        remember(id).await;
        // Time for the worker to go idle and build the next one.
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    let after = prebuilt().await;
    assert!(
        after >= before + 10,
        "only {} of 20 calls after a computing call ran in a prebuilt instance",
        after - before
    );

    // Two sessions with other roots, served on the one worker: each call sees its own
    // session's roots, whichever session's call its instance was built after.
    let (mut own, mut other) = (Client::new(&server.url), Client::new(&server.url));
    own.initialize("2025-06-18", json!({"roots": {}})).await;
    other.initialize("2025-06-18", json!({"roots": {}})).await;
    let inside = json!({"path": fixture.root.join("inside.txt")});
    for id in 0..4 {
        let read = call_with_roots(&own, 100 + id, "read_path", inside.clone(), &[&fixture.root]).await;
        assert_eq!(first_text(&read), "hello from inside", "{read}");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let refused = call_with_roots(&other, 200 + id, "read_path", inside.clone(), &[&fixture.outside]).await;
        assert!(!first_text(&refused).contains("hello from inside"), "another session's roots leaked: {refused}");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let _ = std::fs::remove_dir_all(&fixture.base);
}
