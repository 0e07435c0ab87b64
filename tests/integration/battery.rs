//! The hostile-plugin battery: every way the `hostile` test plugin tries to escape or exhaust
//! its sandbox, all at once, while a well-behaved client keeps calling another plugin. Each
//! attempt must end contained with a message that says what happened; nothing outside the
//! grants may be read, written or reached; and no instance may outlive its call.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Admin, Client, Listener, first_text, plugins, scratch_dir};

/// A granted read-only directory with symlinks planted in it that lead outside, a granted
/// writable scratch directory, and a secret next to them that no grant covers.
struct Layout {
    base: PathBuf,
    granted: PathBuf,
    scratch: PathBuf,
    outside: PathBuf,
}

impl Layout {
    fn new() -> Layout {
        let base = scratch_dir("battery").canonicalize().unwrap();
        let (granted, scratch, outside) = (base.join("granted"), base.join("scratch"), base.join("outside"));
        for dir in [&granted, &scratch, &outside] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(granted.join("inside.txt"), "granted content").unwrap();
        std::fs::write(outside.join("secret.txt"), "TOP-SECRET").unwrap();
        std::os::unix::fs::symlink(outside.join("secret.txt"), granted.join("link-file")).unwrap();
        std::os::unix::fs::symlink(&outside, granted.join("link-dir")).unwrap();
        std::os::unix::fs::symlink("/etc", granted.join("link-etc")).unwrap();
        Layout { base, granted, scratch, outside }
    }

    fn policy(&self, allowed_port: u16, tcp_port: u16) -> PathBuf {
        let policy = self.base.join("capsule.toml");
        let text = format!(
            "[plugins.hostile]\n\
             dirs = [{{ path = {:?}, guest = \"/data\" }}, {{ path = {:?}, guest = \"/scratch\", write = true }}]\n\
             network = [\"127.0.0.1:{allowed_port}\"]\n\
             tcp = [\"127.0.0.1:{tcp_port}\"]\n\
             env = {{ VISIBLE = \"yes\" }}\n\
             limits = {{ output_kib = 1024, cpu_ms = 1000, timeout_ms = 4000 }}\n",
            self.granted.display(),
            self.scratch.display(),
        );
        std::fs::write(&policy, text).unwrap();
        policy
    }
}

impl Drop for Layout {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// What a battery call must end in.
enum Expect {
    /// An `isError` result containing this text (and never the secret).
    Refused(&'static str),
    /// A normal result containing this text: the controls that show the grants do work.
    Allowed(&'static str),
}

struct Case {
    tool: &'static str,
    arguments: Value,
    expect: Expect,
}

fn case(tool: &'static str, arguments: Value, expect: Expect) -> Case {
    Case { tool, arguments, expect }
}

/// How WASI reports a path the preopen refuses to follow (`..` or a symlink out of it).
const DENIED: &str = "Operation not permitted";
/// How WASI reports a path outside every granted directory: there is nothing there.
const ABSENT: &str = "No such file or directory";

fn cases(layout: &Layout, allowed: u16, forbidden: u16, tcp: u16) -> Vec<Case> {
    use Expect::{Allowed, Refused};
    let outside_secret = layout.outside.join("secret.txt").display().to_string();
    let host_path = |p: &Path| p.display().to_string();
    vec![
        // Limits.
        case("spin", json!({}), Refused("exceeded its CPU deadline of 1s")),
        case("hog", json!({}), Refused("exceeded its memory limit")),
        case("recurse", json!({}), Refused("overflowed its stack")),
        case("crash", json!({}), Refused("crashed")),
        case("stall", json!({}), Refused("did not finish within 4s")),
        case("big", json!({"mib": 8}), Refused("exceeds its output limit of 1048576 bytes")),
        case("flood", json!({"count": 100_000}), Allowed("sent 100000 messages")),
        // Filesystem: the controls, then every escape. `..` and symlinks out of a granted
        // directory are refused by the preopen; paths outside every grant do not exist.
        case("read_path", json!({"path": "/data/inside.txt"}), Allowed("granted content")),
        case("write_path", json!({"path": "/scratch/note.txt", "content": "ok"}), Allowed("wrote /scratch/note.txt")),
        case("read_path", json!({"path": "/data/../outside/secret.txt"}), Refused(DENIED)),
        case("read_path", json!({"path": "../outside/secret.txt"}), Refused(ABSENT)),
        case("read_path", json!({"path": "/data/link-file"}), Refused(DENIED)),
        case("read_path", json!({"path": "/data/link-dir/secret.txt"}), Refused(DENIED)),
        case("read_path", json!({"path": "/data/link-etc/passwd"}), Refused(DENIED)),
        case("read_path", json!({"path": outside_secret}), Refused(ABSENT)),
        case("read_path", json!({"path": "/etc/passwd"}), Refused(ABSENT)),
        case("list_path", json!({"path": "/"}), Refused(ABSENT)),
        case("list_path", json!({"path": "/data/.."}), Refused(DENIED)),
        case("list_path", json!({"path": host_path(&layout.base)}), Refused(ABSENT)),
        case("write_path", json!({"path": "/data/planted.txt", "content": "x"}), Refused(DENIED)),
        case("write_path", json!({"path": "/data/link-dir/planted.txt", "content": "x"}), Refused(DENIED)),
        case("write_path", json!({"path": "/scratch/../outside/planted.txt", "content": "x"}), Refused(DENIED)),
        // Environment: exactly the granted value, nothing of the server's own.
        case("environment", json!({}), Allowed("VISIBLE=yes")),
        // Network: the granted listener answers; nothing else is reached.
        case("http_get", json!({"url": format!("http://127.0.0.1:{allowed}/")}), Allowed("200 allowed-body")),
        case(
            "http_get",
            json!({"url": format!("http://127.0.0.1:{forbidden}/")}),
            Refused("not in this plugin's network grants"),
        ),
        case(
            "http_get",
            json!({"url": format!("http://localhost:{allowed}/")}),
            Refused("not in this plugin's network grants"),
        ),
        case("http_get", json!({"url": "https://example.com/"}), Refused("not in this plugin's network grants")),
        // Raw TCP reaches only the granted address: not another port, not a host HTTP may
        // reach, and not a name (plugins get no DNS).
        case("connect", json!({"address": format!("127.0.0.1:{tcp}")}), Allowed("tcp-body")),
        case("connect", json!({"address": format!("127.0.0.1:{forbidden}")}), Refused("Permission denied")),
        case("connect", json!({"address": format!("127.0.0.1:{allowed}")}), Refused("Permission denied")),
        case("connect", json!({"address": format!("localhost:{tcp}")}), Refused("connect localhost")),
    ]
}

fn check(case: &Case, response: &Value) {
    let result = &response["result"];
    let text = first_text(result);
    assert!(!text.contains("TOP-SECRET") && !text.contains("root:"), "{}: leaked {text:?}", case.tool);
    match case.expect {
        Expect::Refused(needle) => {
            assert_eq!(result["isError"], true, "{} {}: not refused: {response}", case.tool, case.arguments);
            assert!(text.contains(needle), "{} {}: expected {needle:?} in {text:?}", case.tool, case.arguments);
        }
        Expect::Allowed(needle) => {
            assert_ne!(result["isError"], true, "{} {}: refused: {response}", case.tool, case.arguments);
            assert!(text.contains(needle), "{} {}: expected {needle:?} in {text:?}", case.tool, case.arguments);
        }
    }
}

#[tokio::test]
async fn hostile_battery_is_contained_while_others_are_served() {
    let layout = Layout::new();
    let allowed = Listener::start("allowed-body").await;
    let forbidden = Listener::start("forbidden-body").await;
    let tcp = Listener::start("tcp-body").await;
    let policy = layout.policy(allowed.port, tcp.port);
    let (hostile, calc) = (plugins().join("testing/hostile.wasm"), plugins().join("calc.wasm"));
    let (server, admin) = Admin::serve(
        &layout.base,
        &[
            "--config",
            policy.to_str().unwrap(),
            "--plugin",
            hostile.to_str().unwrap(),
            "--plugin",
            calc.to_str().unwrap(),
        ],
    );
    let mut attacker = Client::new(&server.url);
    attacker.initialize("2025-11-25", json!({})).await;
    let mut bystander = Client::new(&server.url);
    bystander.initialize("2025-11-25", json!({})).await;

    let cases = cases(&layout, allowed.port, forbidden.port, tcp.port);
    let done = AtomicBool::new(false);
    let battery = async {
        let calls = cases.iter().enumerate().map(|(i, c)| {
            attacker.request(i as i64 + 1, "tools/call", json!({"name": c.tool, "arguments": c.arguments}))
        });
        let results = futures::future::join_all(calls).await;
        done.store(true, Ordering::SeqCst);
        results
    };
    // The well-behaved client calls `add` back to back for as long as the battery runs.
    let steady = async {
        let mut latencies = Vec::new();
        let mut id = 1000;
        while !done.load(Ordering::SeqCst) {
            let started = Instant::now();
            let response =
                bystander.request(id, "tools/call", json!({"name": "add", "arguments": {"a": id, "b": 1}})).await;
            latencies.push(started.elapsed());
            assert_eq!(first_text(&response["result"]), (id + 1).to_string(), "bystander call {id}: {response}");
            id += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        latencies
    };
    let (results, mut latencies) = tokio::join!(battery, steady);
    for (case, response) in cases.iter().zip(&results) {
        check(case, response);
    }
    latencies.sort();
    assert!(latencies.len() >= 10, "the bystander made only {} calls", latencies.len());
    eprintln!(
        "bystander: {} calls during the battery, median {:?}, max {:?} (the benchmark holds the numbers)",
        latencies.len(),
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1]
    );

    // Nothing was written where the grants do not allow it, and nothing reached the listener
    // that is not granted; the granted one was reached once.
    assert!(!layout.granted.join("planted.txt").exists() && !layout.outside.join("planted.txt").exists());
    assert_eq!(std::fs::read_to_string(layout.scratch.join("note.txt")).unwrap(), "ok");
    assert_eq!(forbidden.connections.load(Ordering::SeqCst), 0, "a denied request reached the network");
    assert_eq!(allowed.connections.load(Ordering::SeqCst), 1);
    assert_eq!(tcp.connections.load(Ordering::SeqCst), 1);
    // The environment holds only the granted value, none of the server's own (PATH, HOME).
    let env = cases.iter().zip(&results).find(|(c, _)| c.tool == "environment").unwrap().1;
    assert_eq!(first_text(&env["result"]), "VISIBLE=yes\n");
    // The flood was cut at the per-call budget; the panic's message and the denial are in the
    // operator's log.
    assert!(server.wait_for_log("exceeded its log/progress budget").contains("exceeded its log/progress budget"));
    assert!(server.wait_for_log("this plugin panics on purpose").contains("this plugin panics on purpose"));
    assert!(server.wait_for_log("outbound request denied").contains(&format!("127.0.0.1:{}", forbidden.port)));

    // Every instance is gone, the plugin that misbehaved still serves, and so does the server.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, body) = admin.call(reqwest::Method::GET, "/plugins", None).await;
        assert_eq!(status, 200, "{body}");
        if body["live_instances"] == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "instances outlived their calls: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = attacker.request(900, "tools/call", json!({"name": "echo", "arguments": {"text": "still here"}})).await;
    assert_eq!(first_text(&after["result"]), "still here");
}

/// A call that computes for long runs on a thread of its own (see `runtime::offload`): a
/// cancellation still stops it at its next tick, a 2026-07-28 client that closes its stream
/// stops it too (that second spin starts on its own thread, its plugin's last call having
/// been long), a call on its own thread that waits rather than computes is stopped too, and
/// other requests are answered meanwhile. The admin status's live instance
/// count says when the spin runs and when it is gone.
#[tokio::test]
async fn long_computations_stop_when_cancelled() {
    let dir = scratch_dir("cancel-long");
    let policy = dir.join("capsule.toml");
    std::fs::write(&policy, "[plugins.hostile]\nlimits = { cpu_ms = 60000, timeout_ms = 60000 }\n").unwrap();
    let (hostile, calc) = (plugins().join("testing").join("hostile.wasm"), plugins().join("calc.wasm"));
    let args = ["--config", policy.to_str().unwrap(), "--plugin", hostile.to_str().unwrap()];
    let (server, admin) = Admin::serve(&dir, &[&args[..], &["--plugin", calc.to_str().unwrap()]].concat());
    let live = async || admin.call(reqwest::Method::GET, "/plugins", None).await.1["live_instances"].as_u64();
    let wait_for = async |wanted: u64, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(15);
        while live().await != Some(wanted) {
            assert!(Instant::now() < deadline, "{what}:\n{}", server.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let mut session = Client::new(&server.url);
    session.initialize("2025-11-25", json!({})).await;

    let spinning = session.spawn_call(5, "spin", json!({}));
    wait_for(1, "the spin never started").await;
    let sum = session.request(6, "tools/call", json!({"name": "add", "arguments": {"a": 2, "b": 2}})).await;
    assert_eq!(first_text(&sum["result"]), "4", "{sum}");
    session.post(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}})).await;
    wait_for(0, "the cancelled spin went on").await;
    let spun = tokio::time::timeout(Duration::from_secs(5), spinning).await.expect("the cancelled POST ended");
    assert!(spun.expect("the POST").messages.is_empty(), "a cancelled request was answered");

    // A 2026-07-28 request whose client goes away is stopped as well.
    let modern = Client::new(&server.url);
    let abandoned = async {
        let call = modern.modern(1, "tools/call", json!({"name": "spin", "arguments": {}}), json!({}));
        tokio::select! {
            _ = call => panic!("spin answered"),
            () = wait_for(1, "the second spin never started") => {}
        }
    };
    abandoned.await;
    wait_for(0, "the abandoned spin was not stopped").await;

    // The plugin's last calls were long, so the next starts on a thread of its own. One
    // that waits in a host call (`stall` sleeps) reaches no tick, and is stopped by its
    // cancellation all the same, within the 60 s its limits would let it run.
    let stalled = session.spawn_call(7, "stall", json!({}));
    wait_for(1, "the stall never started").await;
    session.post(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}})).await;
    wait_for(0, "the cancelled stall went on").await;
    let stalled = tokio::time::timeout(Duration::from_secs(5), stalled).await.expect("the cancelled POST ended");
    // A cancelled request is not answered: its POST is an SSE stream that ends empty.
    let stalled = stalled.expect("the POST");
    assert_eq!(stalled.status, 200, "{}", stalled.body);
    assert_eq!(stalled.headers["content-type"], "text/event-stream", "{}", stalled.body);
    assert!(stalled.messages.is_empty(), "a cancelled request was answered: {:?}", stalled.messages);
    let _ = std::fs::remove_dir_all(dir);
}
