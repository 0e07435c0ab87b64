//! Holes a hostile plugin or client could reach, each closed at its mechanism: mounts opened
//! beneath grant handles, linear URI matching and capped URIs, `check` judging by `serve`'s
//! own admission, crash causes in tool errors, and everything a call produces bounded and
//! charged (the `misfit` test plugin attacks through raw WIT calls).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Client, Server, SseStream, StdioServer, first_text, plugins, scratch_dir};

/// A secret beside a granted tree: `outside/secret.txt` is under no grant.
struct Tree {
    base: PathBuf,
}

impl Tree {
    fn new(name: &str) -> Tree {
        let base = scratch_dir(name).canonicalize().unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        std::fs::write(base.join("outside/secret.txt"), "MOUNT-SECRET").unwrap();
        Tree { base }
    }

    fn dir(&self, relative: &str, file: &str) -> PathBuf {
        let dir = self.base.join(relative);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(file), "granted").unwrap();
        dir
    }

    fn serve(&self, policy: &str) -> Server {
        let file = self.base.join("capsule.toml");
        std::fs::write(&file, policy).unwrap();
        let hostile = plugins().join("testing/hostile.wasm");
        Server::http(&["--plugin", hostile.to_str().unwrap(), "--config", file.to_str().unwrap(), "--no-watch"])
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn path(p: &Path) -> String {
    p.to_str().unwrap().to_owned()
}

/// Call a tool on a legacy session, answering the host's `roots/list` with `roots`.
pub async fn call_with_roots(client: &Client, id: i64, tool: &str, arguments: Value, roots: &[&Path]) -> Value {
    let call =
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}});
    let mut stream = client.stream(&call).await;
    loop {
        let message = stream.next_message().await.expect("a message on the call's stream");
        if message["method"] == "roots/list" {
            let roots: Vec<Value> = roots.iter().map(|r| json!({"uri": format!("file://{}", r.display())})).collect();
            let answer = client.post(&json!({"jsonrpc": "2.0", "id": message["id"], "result": {"roots": roots}})).await;
            assert!(answer.status < 300, "roots answer: {} {}", answer.status, answer.body);
        } else if message["id"] == id {
            return message["result"].clone();
        }
    }
}

/// A plugin with a writable grant that contains a second grant swaps the inner directory for
/// `inner -> ../outside`; the next call must still see the directory that was granted.
#[tokio::test]
async fn a_nested_grant_cannot_be_swapped_for_a_symlink() {
    let tree = Tree::new("nested-grant");
    let outer = tree.dir("outer", "outer.txt");
    let inner = tree.dir("outer/inner", "inner.txt");
    let server = tree.serve(&format!(
        "[plugins.hostile]\ndirs = [{{ path = {:?}, write = true }}, {{ path = {:?} }}]\n",
        outer.display(),
        inner.display()
    ));
    let mut client = Client::new(&server.url);
    client.initialize("2025-06-18", json!({})).await;
    let call = async |id, tool: &str, arguments: Value| {
        client.request(id, "tools/call", json!({"name": tool, "arguments": arguments})).await["result"].clone()
    };
    let planted = call(1, "plant_symlink", json!({"dir": path(&outer), "name": "inner", "target": "../outside"})).await;
    assert_eq!(planted["isError"], false, "the swap itself is allowed inside a writable mount: {planted}");
    let listing = call(2, "list_path", json!({"path": path(&inner)})).await;
    assert!(!first_text(&listing).contains("secret.txt"), "the inner mount followed the planted symlink: {listing}");
    assert!(first_text(&listing).contains("inner.txt"), "the inner grant is the directory granted: {listing}");
    let read = call(3, "read_path", json!({"path": format!("{}/secret.txt", inner.display())})).await;
    assert!(!read.to_string().contains("MOUNT-SECRET"), "{read}");
    // Nor does the next reading of the policy (a restart, a reload, `check`) resolve the
    // grant through the link: a link Capsule's own user owns on the way is refused.
    let hostile = plugins().join("testing/hostile.wasm");
    let policy = tree.base.join("capsule.toml");
    let checked =
        Command::new(env!("CARGO_BIN_EXE_capsule")).args(["check", "--config"]).arg(&policy).arg(&hostile).output();
    let checked = checked.unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&checked.stdout), String::from_utf8_lossy(&checked.stderr));
    assert!(
        !checked.status.success() && said.contains("is a symbolic link owned by the user Capsule runs as"),
        "{said}"
    );
    assert!(!said.contains("outside"), "{said}");
}

/// A link planted above a nested grant rather than in its place: `outer/mid -> ../lure`
/// makes the inner grant's path `outer/mid/inner` lead to `lure/inner`. The policy read then
/// refuses the link, and the reload that follows (it keeps the policy in force) must not open
/// the grant again through it: the plugin keeps the directory it was granted.
#[tokio::test]
async fn a_link_planted_above_a_nested_grant_is_not_followed_by_a_reload() {
    let tree = Tree::new("nested-above");
    let outer = tree.dir("outer", "outer.txt");
    let inner = tree.dir("outer/mid/inner", "inner.txt");
    std::fs::create_dir_all(tree.base.join("lure/inner")).unwrap();
    std::fs::write(tree.base.join("lure/inner/secret.txt"), "LURE-SECRET").unwrap();
    let policy = tree.base.join("capsule.toml");
    let text = format!(
        "[plugins.hostile]\ndirs = [{{ path = {:?}, write = true }}, {{ path = {:?} }}]\n",
        outer.display(),
        inner.display()
    );
    std::fs::write(&policy, &text).unwrap();
    let hostile = plugins().join("testing/hostile.wasm");
    let server = Server::http(&["--plugin", hostile.to_str().unwrap(), "--config", policy.to_str().unwrap()]);
    let mut client = Client::new(&server.url);
    client.initialize("2025-06-18", json!({})).await;
    let call = async |id, tool: &str, arguments: Value| {
        client.request(id, "tools/call", json!({"name": tool, "arguments": arguments})).await["result"].clone()
    };
    let planted = call(1, "plant_symlink", json!({"dir": path(&outer), "name": "mid", "target": "../lure"})).await;
    assert_eq!(planted["isError"], false, "{planted}");
    // The policy is written again: its reading refuses the link, and a reload follows.
    std::fs::write(&policy, &text).unwrap();
    let log = server.wait_for_log("symbolic link owned by the user Capsule runs as");
    assert!(log.contains("symbolic link owned by the user Capsule runs as"), "{log}");
    std::thread::sleep(Duration::from_millis(300));
    let listing = call(2, "list_path", json!({"path": path(&inner)})).await;
    assert!(!first_text(&listing).contains("secret.txt"), "the grant was opened again through the link: {listing}");
    assert!(first_text(&listing).contains("inner.txt"), "the grant is the directory granted: {listing}");
    let read = call(3, "read_path", json!({"path": format!("{}/secret.txt", inner.display())})).await;
    assert!(!read.to_string().contains("LURE-SECRET"), "{read}");
}

/// The same swap between nested client roots: a legacy session's roots are resolved once, so
/// the host must open a root beneath its grant without following symlinks on every call.
#[tokio::test]
async fn a_nested_root_cannot_be_swapped_for_a_symlink() {
    let tree = Tree::new("nested-roots");
    let grant = tree.dir("g", "g.txt");
    let a = tree.dir("g/a", "a.txt");
    let b = tree.dir("g/a/b", "b.txt");
    let server = tree.serve(&format!(
        "[plugins.hostile]\nroots = true\ndirs = [{{ path = {:?}, write = true }}]\n",
        grant.display()
    ));
    let mut client = Client::new(&server.url);
    client.initialize("2025-06-18", json!({"roots": {"listChanged": true}})).await;
    let roots = [a.as_path(), b.as_path()];
    let before = call_with_roots(&client, 1, "list_path", json!({"path": path(&b)}), &roots).await;
    assert!(first_text(&before).contains("b.txt"), "the nested root is visible: {before}");
    let planted = call_with_roots(
        &client,
        2,
        "plant_symlink",
        json!({"dir": path(&a), "name": "b", "target": "../../outside"}),
        &roots,
    )
    .await;
    assert_eq!(planted["isError"], false, "{planted}");
    let after = call_with_roots(&client, 3, "list_path", json!({"path": path(&b)}), &roots).await;
    assert!(!first_text(&after).contains("secret.txt"), "the nested root followed the planted symlink: {after}");
    let read =
        call_with_roots(&client, 4, "read_path", json!({"path": format!("{}/secret.txt", b.display())}), &roots).await;
    assert!(!read.to_string().contains("MOUNT-SECRET"), "{read}");
}

/// `notifications/roots/list_changed` holds the very next message: a stdio client that
/// narrows its roots and calls in one write is asked for its roots again and held to the new
/// ones (the call used to run with the roots cached before the change, the notification
/// taking effect on a task of its own).
#[test]
fn a_roots_change_holds_the_call_written_right_after_it() {
    let tree = Tree::new("roots-change");
    let wide = tree.dir("g", "g.txt");
    std::fs::write(wide.join("wide.txt"), "WIDE-ONLY").unwrap();
    let narrow = tree.dir("g/narrow", "narrow.txt");
    let policy = tree.base.join("capsule.toml");
    std::fs::write(&policy, format!("[plugins.hostile]\nroots = true\ndirs = [{{ path = {:?} }}]\n", wide.display()))
        .unwrap();
    let hostile = plugins().join("testing/hostile.wasm");
    let mut stdio =
        StdioServer::start_with(&["--plugin", hostile.to_str().unwrap(), "--config", policy.to_str().unwrap()]);
    stdio.initialize_offering("2025-06-18", json!({"roots": {"listChanged": true}}));
    let changed = json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"});
    // Writes `ahead` and the call in one write, answers every roots/list with `root`; the
    // call's text and how often the roots were asked for.
    let mut call = |id: i64, ahead: &str, root: &Path| {
        let read = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "read_path", "arguments": {"path": path(&wide.join("wide.txt"))}}});
        stdio.send_bytes(format!("{ahead}{read}\n").as_bytes());
        let mut asked = 0;
        loop {
            let message = stdio.read();
            if message["method"] == "roots/list" {
                asked += 1;
                let roots = json!([{"uri": format!("file://{}", root.display())}]);
                stdio.send(&json!({"jsonrpc": "2.0", "id": message["id"], "result": {"roots": roots}}));
            } else if message["id"] == id {
                return (first_text(&message["result"]), asked);
            }
        }
    };
    assert_eq!(call(2, "", &wide), ("WIDE-ONLY".to_owned(), 1));
    assert_eq!(call(3, "", &narrow), ("WIDE-ONLY".to_owned(), 0), "the answer is kept until a change");
    for round in 0..5 {
        let ahead = format!("{changed}\n");
        let (text, asked) = call(10 + 2 * round, &ahead, &narrow);
        assert_eq!(asked, 1, "round {round}: the roots are asked for again");
        assert!(!text.contains("WIDE-ONLY"), "round {round}: a file outside the new roots was read: {text}");
        let (text, asked) = call(11 + 2 * round, &ahead, &wide);
        assert_eq!((text.as_str(), asked), ("WIDE-ONLY", 1), "round {round}: widened again");
    }
    stdio.finish();
}

/// A FIFO in a granted directory is refused at once rather than opened: opening one blocks
/// until something opens its other end, on a blocking thread no call limit stops, and each
/// such call used to hold a thread for good and keep the server from exiting at the end of
/// its input.
#[test]
fn a_fifo_in_a_granted_directory_is_refused_without_opening_it() {
    let tree = Tree::new("fifo");
    let granted = tree.dir("g", "g.txt");
    let fifo = granted.join("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let policy = tree.base.join("capsule.toml");
    let grant = format!("dirs = [{{ path = {:?}, write = true }}]\n", granted.display());
    std::fs::write(&policy, format!("[plugins.hostile]\n{grant}[plugins.files]\n{grant}")).unwrap();
    std::fs::write(granted.join("binary"), b"\xff\xfe").unwrap();
    let (hostile, files) = (plugins().join("testing/hostile.wasm"), plugins().join("files.wasm"));
    let mut stdio = StdioServer::start_with(&[
        "--plugin",
        hostile.to_str().unwrap(),
        "--plugin",
        files.to_str().unwrap(),
        "--config",
        policy.to_str().unwrap(),
        "--call-timeout",
        "600000",
    ]);
    stdio.initialize("2025-06-18");
    let calls = [
        ("read_path", json!({"path": path(&fifo)})),
        ("write_path", json!({"path": path(&fifo), "content": "x"})),
        ("read_path", json!({"path": path(&fifo)})),
        ("read_path", json!({"path": path(&granted.join("g.txt"))})),
    ];
    for (id, (tool, arguments)) in calls.iter().enumerate() {
        stdio.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}));
    }
    let mut answers = std::collections::BTreeMap::new();
    while answers.len() < calls.len() {
        let message = stdio.read();
        if let Some(id) = message["id"].as_u64() {
            answers.insert(id, message["result"].clone());
        }
    }
    for id in 0..3 {
        let text = first_text(&answers[&id]).to_lowercase();
        assert!(answers[&id]["isError"] == true && text.contains("not permitted"), "call {id}: {}", answers[&id]);
    }
    assert_eq!(first_text(&answers[&3]), "granted");
    // Read as `files`' resources, the FIFO, the directory and a binary file name no
    // resource it serves: not found, with the reason (never an internal error).
    for (id, (target, reason)) in
        [(&fifo, "not permitted"), (&granted, "directory"), (&granted.join("binary"), "not utf-8")].iter().enumerate()
    {
        let id = 10 + id as u64;
        let uri = format!("file://{}", target.display());
        stdio.send(&json!({"jsonrpc": "2.0", "id": id, "method": "resources/read", "params": {"uri": uri}}));
        let answer = std::iter::repeat_with(|| stdio.read()).find(|m| m["id"] == id).unwrap();
        let error = &answer["error"];
        assert_eq!(error["code"], -32002, "{uri}: {answer}");
        assert!(error["message"].as_str().unwrap().to_lowercase().contains(reason), "{uri}: {answer}");
    }
    stdio.finish();
}

pub fn misfit() -> PathBuf {
    plugins().join("testing/misfit.wasm")
}

/// A policy for `misfit` in `dir`: its `MISFIT` mode and extra entries.
pub fn misfit_policy(dir: &Path, mode: &str, extra: &str) -> PathBuf {
    let policy = dir.join("capsule.toml");
    std::fs::write(&policy, format!("[plugins.misfit]\nenv = {{ MISFIT = {mode:?} }}\n{extra}")).unwrap();
    policy
}

pub fn serve_misfit(policy: &Path) -> Server {
    Server::http(&["--plugin", misfit().to_str().unwrap(), "--config", policy.to_str().unwrap()])
}

/// `capsule check` refuses exactly what `serve` refuses, for every shape of misfit, saying
/// why and exiting 1; a plugin that loads exits 0. `--json` says the same.
#[tokio::test]
async fn check_and_serve_agree() {
    let dir = scratch_dir("check-agrees");
    let cases: [(&str, &str, &[&str], Option<&str>); 13] = [
        ("", "", &[], None),
        ("not-json", "", &[], Some("not JSON")),
        ("bad-schema", "", &[], Some("input schema is invalid")),
        ("backtracking-pattern", "", &[], Some("input schema is invalid")),
        ("bad-name", "", &[], Some("tool name \"bad name!\" is invalid")),
        ("duplicate", "", &[], Some("tool \"x\" is provided by both plugin misfit and plugin misfit")),
        ("trap", "", &[], Some("listing fails on purpose")),
        ("level3-template", "", &[], Some("operator `?`")),
        ("doubling-schema", "", &[], Some("more than 100000 schema objects")),
        ("many-templates", "", &[], Some("at most 256 are served")),
        ("", "limits = { memory_mib = 1 }\n", &[], Some("memory limit")),
        // Serve's limit flags count too: sandbox slots smaller than the plugin's memory
        // limit, and more reserved instances than the server has.
        ("", "", &["--max-memory", "16"], Some("exceeds the server's maximum of 16 MiB")),
        ("", "", &["--max-instances", "2", "--reserve", "3"], Some("reserves 3 plugin instances")),
    ];
    for (mode, extra, flags, refusal) in cases {
        let policy = misfit_policy(&dir, mode, extra);
        let check = |json: bool| {
            let mut command = Command::new(env!("CARGO_BIN_EXE_capsule"));
            command.args(["check", "--config", policy.to_str().unwrap(), misfit().to_str().unwrap()]).args(flags);
            if json {
                command.arg("--json");
            }
            command.output().unwrap()
        };
        let (text, json) = (check(false), check(true));
        let report = String::from_utf8_lossy(&text.stdout);
        let parsed: Value = serde_json::from_slice(&json.stdout).expect("--json prints JSON");
        let server = Server::http(
            &[&["--plugin", misfit().to_str().unwrap(), "--config", policy.to_str().unwrap()][..], flags].concat(),
        );
        let mut client = Client::new(&server.url);
        client.initialize("2025-11-25", json!({})).await;
        let tools = client.request(1, "tools/list", json!({})).await["result"]["tools"].clone();
        let served = tools.as_array().is_some_and(|t| !t.is_empty());
        match refusal {
            None => {
                assert_eq!((text.status.code(), json.status.code()), (Some(0), Some(0)), "{mode}: {report}");
                assert!(report.contains("verdict: loads") && report.contains("empty_items"), "{report}");
                assert_eq!(parsed["verdict"], "loads", "{parsed}");
                assert!(served, "{mode}: check says it loads, so serve must serve it: {tools}");
            }
            Some(reason) => {
                assert_eq!((text.status.code(), json.status.code()), (Some(1), Some(1)), "{mode}: {report}");
                assert!(report.contains("verdict: refused") && report.contains(reason), "{mode} {extra}: {report}");
                assert_eq!(parsed["verdict"], "refused", "{parsed}");
                assert!(parsed["reason"].as_str().unwrap().contains(reason), "{parsed}");
                assert!(!served, "{mode} {extra}: check refuses it, so serve must not serve it: {tools}");
                assert!(server.wait_for_log(reason).contains(reason), "serve's log says why: {}", server.log());
            }
        }
    }
    let missing = Command::new(env!("CARGO_BIN_EXE_capsule")).args(["check", "/nonexistent.wasm"]).output().unwrap();
    assert_eq!(missing.status.code(), Some(2), "a check that cannot run exits 2");
    // A FIFO (which would block the read) or a link to a device (which would fill memory)
    // is not a plugin file: refused at once.
    let fifo = dir.join("fifo.wasm");
    rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::RUSR, 0).unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.join("zero.wasm")).unwrap();
    for special in [fifo, dir.join("zero.wasm")] {
        let checked = Command::new(env!("CARGO_BIN_EXE_capsule")).arg("check").arg(&special).output().unwrap();
        let said = String::from_utf8_lossy(&checked.stderr);
        assert!(checked.status.code() == Some(2) && said.contains("not a regular file"), "{said}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Matching a URI against a template with 32 reserved variables, at the URI cap, takes
/// milliseconds (a backtracking matcher never finishes); a 4 MiB URI is refused before any
/// matching, on every request that carries one.
#[tokio::test]
async fn uri_matching_is_linear_and_uris_are_capped() {
    let dir = scratch_dir("uri-cap");
    let server = serve_misfit(&misfit_policy(&dir, "", ""));
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    let near_miss = format!("misfit://{}", "a-".repeat(8 << 10 >> 1));
    let started = Instant::now();
    let missed = client.request(1, "resources/read", json!({"uri": near_miss})).await;
    assert_eq!(missed["error"]["code"], -32002, "{missed}");
    let matched = format!("misfit://{}!", vec!["a"; 32].join("-"));
    let read = client.request(2, "resources/read", json!({"uri": matched})).await;
    assert_eq!(read["error"]["code"], -32002, "the template matched and the plugin said not found: {read}");
    assert!(started.elapsed() < Duration::from_secs(2), "matching took {:?}", started.elapsed());

    // As long as the 4 MiB body limit lets through.
    let huge = format!("misfit://{}", "a".repeat((4 << 20) - 4096));
    let requests = [
        ("resources/read", json!({"uri": huge})),
        ("resources/subscribe", json!({"uri": huge})),
        ("resources/unsubscribe", json!({"uri": huge})),
        (
            "completion/complete",
            json!({"ref": {"type": "ref/resource", "uri": huge}, "argument": {"name": "a", "value": ""}}),
        ),
    ];
    for (id, (method, params)) in (3..).zip(requests) {
        let started = Instant::now();
        let refused = client.request(id, method, params).await;
        assert_eq!(refused["error"]["code"], -32602, "{method}: {}", &refused.to_string()[..200]);
        assert!(refused["error"]["message"].as_str().unwrap().contains("the limit is 16384 bytes"), "{method}");
        assert!(started.elapsed() < Duration::from_secs(2), "{method} took {:?}", started.elapsed());
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// What a plugin reports goes out as MCP has it: progress only while it rises and is a number,
/// structured content only when a client's parser would take it.
#[test]
fn progress_and_structured_content_are_held_to_json_and_mcp() {
    let dir = scratch_dir("odd-output");
    let policy = misfit_policy(&dir, "", "");
    let mut stdio =
        StdioServer::start_with(&["--plugin", misfit().to_str().unwrap(), "--config", policy.to_str().unwrap()]);
    stdio.initialize("2025-11-25");
    stdio.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "odd_progress",
        "arguments": {}, "_meta": {"progressToken": "p"}}}));
    let mut reported = Vec::new();
    loop {
        let message = stdio.read();
        if message["method"] == "notifications/progress" {
            reported.push((message["params"]["progress"].clone(), message["params"]["total"].clone()));
        } else if message["id"] == 2 {
            assert_eq!(first_text(&message["result"]), "reported", "{message}");
            break;
        }
    }
    assert_eq!(reported, [(json!(1.0), Value::Null), (json!(2.0), Value::Null), (json!(3.0), json!(3.0))]);
    for (id, tool, expected) in [(3, "deep_output", "recursion limit"), (4, "huge_number", "number out of range")] {
        stdio.send(
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": {}}}),
        );
        let answer = loop {
            let message = stdio.read();
            if message["id"] == id {
                break message;
            }
        };
        let result = &answer["result"];
        assert!(result["isError"] == true && first_text(result).contains(expected), "{tool}: {answer}");
        assert!(result.get("structuredContent").is_none(), "{tool}: {answer}");
    }
    stdio.finish();
    let _ = std::fs::remove_dir_all(dir);
}

/// A plugin whose lists take their time holds up neither the operator's status nor a reload
/// when it asks for them to be read again (they are read without the loader's lock).
#[tokio::test]
async fn a_slow_relist_holds_up_no_status() {
    let dir = scratch_dir("slow-relist");
    let policy = misfit_policy(&dir, "slow-list", "");
    let plugin = misfit();
    let args = ["--plugin", plugin.to_str().unwrap(), "--config", policy.to_str().unwrap()];
    let (server, admin) = crate::support::Admin::serve(&dir, &args);
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    let storm = client.request(1, "tools/call", json!({"name": "list_storm", "arguments": {}})).await;
    assert_eq!(first_text(&storm["result"]), "changed 1000 times", "{storm}");
    // The relist is reading the lists now, for two seconds.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let (status, body) = admin.call(reqwest::Method::GET, "/plugins", None).await;
    assert_eq!(status, 200, "{body}");
    assert!(started.elapsed() < Duration::from_secs(1), "the status waited {:?} for the relist", started.elapsed());
    let _ = std::fs::remove_dir_all(dir);
}

/// The next message on `stream`, or `None` once it has been quiet for `quiet`.
async fn next_within(stream: &mut SseStream, quiet: Duration) -> Option<Value> {
    tokio::time::timeout(quiet, stream.next_message()).await.ok().flatten()
}

/// Raw WIT attacks: empty items, huge log messages, CPU burnt inside host calls, thousands of
/// input requests in one round, a list-change storm, and a pattern built to backtrack. Each
/// is bounded and charged to the call that made it.
#[tokio::test]
async fn everything_a_call_produces_is_bounded_and_charged() {
    let dir = scratch_dir("charged");
    let server = serve_misfit(&misfit_policy(&dir, "", "limits = { cpu_ms = 500, timeout_ms = 20000 }\n"));
    let mut client = Client::new(&server.url);
    client.initialize("2025-06-18", json!({"elicitation": {}})).await;
    let call = async |id, tool: &str, arguments: Value| {
        client.request(id, "tools/call", json!({"name": tool, "arguments": arguments})).await["result"].clone()
    };

    let empty = call(1, "empty_items", json!({})).await;
    assert!(empty["isError"] == true && first_text(&empty).contains("exceeds its output limit"), "{empty}");

    let started = Instant::now();
    let burnt = call(2, "random_loop", json!({})).await;
    assert!(burnt["isError"] == true && first_text(&burnt).contains("CPU deadline of 500ms"), "{burnt}");
    assert!(started.elapsed() < Duration::from_secs(10), "stopped by the wall clock, not the CPU deadline");
    let oversized = call(3, "oversized_random", json!({})).await;
    assert!(oversized["isError"] == true && first_text(&oversized).contains("exceeds limit"), "{oversized}");

    let flood = call(4, "ask_flood", json!({})).await;
    assert!(flood["isError"] == true && first_text(&flood).contains("at most 16 are allowed"), "{flood}");

    // Resources held at once (each open file is also a descriptor of the whole server).
    let storm = call(41, "resource_storm", json!({})).await;
    assert_eq!(storm["isError"], true, "{storm}");
    assert!(!first_text(&storm).contains("held 100000"), "{storm}");

    let started = Instant::now();
    let pattern = call(5, "pattern", json!({"word": format!("{}!", "a".repeat(30_000))})).await;
    assert!(pattern["isError"] == true && first_text(&pattern).contains("Invalid arguments"), "{pattern}");
    assert!(started.elapsed() < Duration::from_secs(2), "validation took {:?}", started.elapsed());

    // Log messages: each capped, all of them together charged against the output limit.
    let level = client.request(6, "logging/setLevel", json!({"level": "debug"})).await;
    assert!(level.get("result").is_some(), "{level}");
    // They travel on the stream of the call that logged them.
    let logs = client
        .post(
            &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "big_log", "arguments": {}}}),
        )
        .await;
    assert_eq!(first_text(&logs.response(7)["result"]), "logged 64 MiB");
    let (mut logged, mut bytes) = (0, 0);
    for message in logs.messages.iter().filter(|m| m["method"] == "notifications/message") {
        let size = message["params"]["data"].as_str().map_or(0, str::len);
        assert!(size <= (64 << 10) + 8, "a log message of {size} bytes");
        (logged, bytes) = (logged + 1, bytes + size);
    }
    assert!(logged >= 1 && bytes <= 4 << 20, "{logged} messages, {bytes} bytes");

    // A thousand list-changed calls from one call, and no list really changed: the plugin's
    // lists are read again once, and no session hears anything.
    let mut other = Client::new(&server.url);
    other.initialize("2025-06-18", json!({})).await;
    let mut listening = other.listen_legacy().await;
    let storm = call(8, "list_storm", json!({})).await;
    assert_eq!(first_text(&storm), "changed 1000 times");
    let mut heard = 0;
    while let Some(message) = next_within(&mut listening, Duration::from_millis(1500)).await {
        heard += usize::from(message["method"] == "notifications/tools/list_changed");
    }
    assert_eq!(heard, 0, "one call's storm reached another session {heard} times");
    let _ = std::fs::remove_dir_all(dir);
}

/// A crash explains itself to the caller: the guest's panic message is in the tool error,
/// and the call's whole stderr is one record, one line, in the server's log.
#[tokio::test]
async fn a_crash_tells_the_caller_why() {
    let hostile = plugins().join("testing/hostile.wasm");
    let server = Server::http(&["--plugin", hostile.to_str().unwrap(), "--no-watch"]);
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    let crashed = client.request(1, "tools/call", json!({"name": "crash", "arguments": {}})).await["result"].clone();
    assert_eq!(crashed["isError"], true, "{crashed}");
    let text = first_text(&crashed);
    assert!(text.contains("it aborted") && text.contains("this plugin panics on purpose"), "{text}");
    // One record on one line: it names the failure, then the backtrace and the stderr with
    // their line breaks escaped, so nothing the guest printed starts a line of its own.
    let log = server.wait_for_log("its stderr:");
    let record = log.lines().find(|line| line.contains("plugin call failed")).expect("the failure is logged");
    assert!(record.contains(r"\nits stderr:\n") && record.contains("panics on purpose"), "one line: {log}");
    for line in log.lines() {
        assert!(line.starts_with("20") && line.as_bytes().get(4) == Some(&b'-'), "a line that is no record: {line:?}");
    }
}

/// A new file whose tool collides with a serving plugin's (and sorts first) is refused; the
/// incumbent keeps answering.
#[tokio::test]
async fn a_new_plugin_cannot_take_over_a_serving_one() {
    let dir = scratch_dir("no-hijack");
    std::fs::copy(plugins().join("testing/swap-a.wasm"), dir.join("zz.wasm")).unwrap();
    let server = Server::http(&["--plugins", dir.to_str().unwrap()]);
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    let whoami = async |id| {
        first_text(&client.request(id, "tools/call", json!({"name": "whoami", "arguments": {}})).await["result"])
    };
    assert_eq!(whoami(1).await, "a");
    std::fs::copy(plugins().join("testing/swap-b.wasm"), dir.join("aa.wasm")).unwrap();
    let log = server.wait_for_log("plugin aa (sha256");
    assert!(log.contains("tool \"whoami\" is provided by both plugin zz and plugin aa"), "{log}");
    assert_eq!(whoami(2).await, "a", "the newcomer took over the serving plugin's tool");
    let _ = std::fs::remove_dir_all(dir);
}

/// Concurrent `initialize`s cannot all slip past the session cap.
#[tokio::test]
async fn concurrent_initializes_respect_the_session_cap() {
    let server = Server::http(&["--max-sessions", "3", "--no-watch"]);
    let attempts = (0..40).map(|_| {
        let client = Client::new(&server.url);
        tokio::spawn(async move { client.try_initialize("2025-11-25", json!({})).await.status })
    });
    let statuses: Vec<u16> = futures::future::join_all(attempts).await.into_iter().map(Result::unwrap).collect();
    let admitted = statuses.iter().filter(|&&s| s == 200).count();
    assert!(admitted <= 3, "{admitted} sessions admitted under a cap of 3: {statuses:?}");
    assert!(admitted >= 1 && statuses.iter().all(|&s| s == 200 || s == 503), "{statuses:?}");
}

/// Operator numbers that would overflow once converted to bytes are configuration errors.
#[test]
fn out_of_range_limits_are_refused() {
    for flags in [
        ["--memory-limit", "18014398509481984"],
        ["--max-memory", "4097"],
        ["--max-output", "18014398509481984"],
        ["--max-instances", "4294967295"],
        ["--cpu-deadline", "0"],
        ["--max-header-bytes", "4096"],
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_capsule")).arg("serve").args(flags).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{flags:?} must be refused");
        assert!(String::from_utf8_lossy(&output.stderr).contains("invalid value"), "{flags:?}");
    }
}

/// `host.list-changed` makes the host read the plugin's lists again: a tool the plugin added
/// is served, and other sessions hear of it once.
#[tokio::test]
async fn list_changed_reads_the_lists_again() {
    let dir = scratch_dir("relist");
    std::fs::create_dir_all(dir.join("state")).unwrap();
    let grant = format!("dirs = [{{ path = {:?}, guest = \"/state\", write = true }}]\n", dir.join("state"));
    let server = serve_misfit(&misfit_policy(&dir, "", &grant));
    let mut client = Client::new(&server.url);
    client.initialize("2025-06-18", json!({})).await;
    let mut other = Client::new(&server.url);
    other.initialize("2025-06-18", json!({})).await;
    let mut listening = other.listen_legacy().await;
    let names = async |id| -> Vec<String> {
        let tools = client.request(id, "tools/list", json!({})).await["result"]["tools"].clone();
        tools.as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
    };
    assert!(!names(1).await.contains(&"added".to_owned()));
    let added = client.request(2, "tools/call", json!({"name": "add_tool", "arguments": {}})).await;
    assert_eq!(first_text(&added["result"]), "added a tool", "{added}");
    let mut heard = 0;
    while let Some(message) = next_within(&mut listening, Duration::from_millis(1500)).await {
        heard += usize::from(message["method"] == "notifications/tools/list_changed");
    }
    assert_eq!(heard, 1, "the other session hears of the change once");
    assert!(names(3).await.contains(&"added".to_owned()), "the added tool is served");
    let _ = std::fs::remove_dir_all(dir);
}

/// A plugin that holds every instance its own concurrency allows cannot take the instances
/// the server keeps for its neighbours: `add` still answers while `hostile` stalls, and the
/// stalls beyond `hostile`'s share are refused at once with a clear error.
#[tokio::test]
async fn a_plugin_cannot_starve_its_neighbours_of_instances() {
    let dir = scratch_dir("instance-reserve");
    let policy = dir.join("capsule.toml");
    std::fs::write(&policy, "[plugins.hostile.limits]\nconcurrency = 4\ntimeout_ms = 20000\n").unwrap();
    let hostile = plugins().join("testing/hostile.wasm");
    let calc = plugins().join("calc.wasm");
    let server = Server::http(&[
        "--plugin",
        hostile.to_str().unwrap(),
        "--plugin",
        calc.to_str().unwrap(),
        "--config",
        policy.to_str().unwrap(),
        "--max-instances",
        "4",
        "--no-watch",
    ]);
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    let stalls: Vec<_> = (0..4)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                client.request(10 + i, "tools/call", json!({"name": "stall", "arguments": {}})).await["result"].clone()
            })
        })
        .collect();
    // Let every stall reach the runtime before the neighbour asks.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let add = client.request(2, "tools/call", json!({"name": "add", "arguments": {"a": 2, "b": 3}})).await;
    assert_eq!(add["result"]["isError"], false, "the neighbour was starved: {add}");
    assert_eq!(first_text(&add["result"]), "5", "{add}");
    // `hostile` got what was not reserved for `calc`; its other stalls were refused at once.
    let mut refused = 0;
    for stall in stalls {
        if let Ok(Ok(result)) = tokio::time::timeout(Duration::from_millis(100), stall).await {
            assert_eq!(result["isError"], true, "{result}");
            assert!(first_text(&result).contains("are in use"), "{result}");
            refused += 1;
        }
    }
    assert_eq!(refused, 2, "hostile may hold the 2 unreserved instances, no more");
    let _ = std::fs::remove_dir_all(dir);
}

/// A plugin speaks only for the resources it serves, and a call's updates are bounded: a
/// subscriber hears `misfit`'s own resource once however often it was announced, nothing for
/// another plugin's or nobody's resources, and nothing past the first 64 distinct URIs.
#[tokio::test]
async fn a_plugin_announces_only_its_own_resources_each_once() {
    let dir = scratch_dir("announce");
    let policy = misfit_policy(&dir, "", "");
    let (files, calc) = (plugins().join("files.wasm"), plugins().join("calc.wasm"));
    let server = Server::http(&[
        "--plugin",
        misfit().to_str().unwrap(),
        "--plugin",
        files.to_str().unwrap(),
        "--plugin",
        calc.to_str().unwrap(),
        "--config",
        policy.to_str().unwrap(),
        "--no-watch",
    ]);
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    let tail = "-a".repeat(31);
    let (first, late) = (format!("misfit://0{tail}!"), format!("misfit://150{tail}!"));
    let subscribed = ["file:///tmp/owned-by-files.txt", "calc://units/length", first.as_str(), late.as_str()];
    for (id, uri) in subscribed.iter().enumerate() {
        let reply = client.request(id as i64 + 1, "resources/subscribe", json!({"uri": uri})).await;
        assert!(reply.get("result").is_some(), "subscribe {uri}: {reply}");
    }
    let unknown = client.request(9, "resources/subscribe", json!({"uri": "nobody://x"})).await;
    assert_eq!(unknown["error"]["code"], -32002, "{unknown}");
    let mut stream = client.listen_legacy().await;
    let announced = client.request(10, "tools/call", json!({"name": "announce", "arguments": {}})).await;
    assert_eq!(first_text(&announced["result"]), "announced", "{announced}");
    let mut heard = Vec::new();
    while let Some(message) = next_within(&mut stream, Duration::from_millis(1500)).await {
        if message["method"] == "notifications/resources/updated" {
            heard.push(message["params"]["uri"].as_str().unwrap_or_default().to_owned());
        }
    }
    assert_eq!(heard, vec![first], "only its own resource, once, within the first 64");
    let _ = std::fs::remove_dir_all(dir);
}
