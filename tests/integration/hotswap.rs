//! Hot swap under load, and the admin endpoint.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Admin, Client, Server, SseStream, StdioServer, first_text, plugins, scratch_dir};

/// Count the tool-list notifications arriving on a stream until it ends or `stop` is set.
fn count_list_changes(mut stream: SseStream, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let mut seen = 0;
        while !stop.load(Ordering::Relaxed) {
            match tokio::time::timeout(Duration::from_millis(500), stream.next_message()).await {
                Ok(Some(message)) if message["method"] == "notifications/tools/list_changed" => seen += 1,
                Ok(Some(_)) | Err(_) => {}
                Ok(None) => break,
            }
        }
        seen
    })
}

fn swap_to(dir: &std::path::Path, bytes: &[u8], n: usize) {
    // How deployments replace a file: write beside it, then rename over it.
    let staging = dir.join(format!(".staging-{n}"));
    std::fs::write(&staging, bytes).unwrap();
    std::fs::rename(&staging, dir.join("swapped.wasm")).unwrap();
}

/// Several clients call a tool without pause while its plugin file is replaced 100 times,
/// alternating two versions and, every tenth time, a broken file first. No call may fail,
/// every client hears every tool-list change, and each new version answers new calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plugin_replaced_100_times_under_load_fails_no_call() {
    let dir = scratch_dir("swap-load");
    let versions = [
        std::fs::read(plugins().join("testing/swap-a.wasm")).unwrap(),
        std::fs::read(plugins().join("testing/swap-b.wasm")).unwrap(),
    ];
    swap_to(&dir, &versions[0], 0);
    let (server, admin) = Admin::serve(&dir, &["--plugins", dir.to_str().unwrap()]);

    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let failures: Arc<Mutex<Vec<Value>>> = Arc::default();
    let mut listeners = Vec::new();
    let mut callers = Vec::new();
    for i in 0..4 {
        let mut client = Client::new(&server.url);
        let legacy = i % 2 == 0;
        if legacy {
            client.initialize("2025-11-25", json!({})).await;
            listeners.push(count_list_changes(client.listen_legacy().await, stop.clone()));
        } else {
            let stream = client.stream_modern(json!({"notifications": {"toolsListChanged": true}})).await;
            listeners.push(count_list_changes(stream, stop.clone()));
        }
        let (stop, calls, failures) = (stop.clone(), calls.clone(), failures.clone());
        callers.push(tokio::spawn(async move {
            let mut id = 1;
            while !stop.load(Ordering::Relaxed) {
                id += 1;
                let result = if legacy {
                    client.request(id, "tools/call", json!({"name": "whoami", "arguments": {}})).await["result"].clone()
                } else {
                    let reply =
                        client.modern(id, "tools/call", json!({"name": "whoami", "arguments": {}}), json!({})).await;
                    reply.response(id)["result"].clone()
                };
                calls.fetch_add(1, Ordering::Relaxed);
                let text = first_text(&result);
                if result["isError"] != false || !(text == "a" || text == "b") {
                    failures.lock().unwrap().push(result);
                }
            }
        }));
    }

    let probe = Client::new(&server.url);
    let whoami = async |id: i64| {
        let reply = probe.modern(id, "tools/call", json!({"name": "whoami", "arguments": {}}), json!({})).await;
        first_text(&reply.response(id)["result"])
    };
    let mut latencies = Vec::new();
    let mut version_changes = 0;
    for n in 1..=100 {
        if n % 10 == 0 {
            std::fs::write(dir.join("swapped.wasm"), b"\0asm\x0d\0\x01\0 a broken build").unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            while admin.plugin("swapped").await["last_error"].is_null() {
                assert!(Instant::now() < deadline, "the broken file never showed in the status");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let status = admin.plugin("swapped").await;
            assert!(!status["serving"].is_null(), "a broken file replaced a working version: {status}");
        }
        let want = if n % 2 == 1 { "b" } else { "a" };
        let start = Instant::now();
        swap_to(&dir, &versions[n % 2], n);
        let mut probes = 0;
        while whoami(1000 + n as i64).await != want {
            probes += 1;
            assert!(start.elapsed() < Duration::from_secs(10), "swap {n}: version {want} never answered");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if probes > 0 {
            version_changes += 1;
        }
        latencies.push(start.elapsed());
        assert!(admin.plugin("swapped").await["last_error"].is_null(), "swap {n} left an error in the status");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for caller in callers {
        caller.await.unwrap();
    }
    let failures = failures.lock().unwrap().clone();
    let total = calls.load(Ordering::Relaxed);
    assert!(failures.is_empty(), "{} of {total} calls failed, e.g. {}", failures.len(), failures[0]);
    assert!(total > 400, "the callers made only {total} calls");
    for (i, listener) in listeners.into_iter().enumerate() {
        let heard = listener.await.unwrap();
        assert!(heard >= 100, "client {i} heard {heard} tool-list changes for 100 swaps");
    }
    latencies.sort();
    eprintln!(
        "{total} calls, 0 failed; {version_changes} swaps observed; file rename to new version answering: median {:?}, max {:?}",
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1]
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The admin endpoint: status, reload, load and unload, behind a token, never in MCP.
#[tokio::test]
async fn admin_endpoint_lists_loads_and_unloads_behind_a_token() {
    let dir = scratch_dir("admin");
    std::fs::copy(plugins().join("calc.wasm"), dir.join("calc.wasm")).unwrap();
    let (server, admin) = Admin::serve(&dir, &["--plugins", dir.to_str().unwrap(), "--no-watch"]);
    let token_file = dir.join("admin-token");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777, 0o600);
    }
    let (status, _) = admin.send(reqwest::Method::GET, "/plugins", None, None).await;
    assert_eq!(status, 401);
    let (status, _) = admin.send(reqwest::Method::GET, "/plugins", None, Some("wrong-token-wrong-token")).await;
    assert_eq!(status, 401);
    // The scheme is case-insensitive (RFC 9110); a second Authorization, a web page's Origin
    // or a foreign Host is refused whatever the token.
    let status = async |headers: &[(&str, String)]| {
        let mut request = reqwest::Client::new().get(format!("{}/plugins", admin.base));
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        request.send().await.unwrap().status().as_u16()
    };
    let bearer = ("authorization", format!("Bearer {}", admin.token));
    assert_eq!(status(&[("authorization", format!("bearer {}", admin.token))]).await, 200);
    assert_eq!(status(&[bearer.clone(), ("authorization", "Bearer other".into())]).await, 401);
    assert_eq!(status(&[bearer.clone(), ("origin", "https://evil.example".into())]).await, 403);
    assert_eq!(status(&[bearer.clone(), ("origin", "http://localhost:8080".into())]).await, 200);
    assert_eq!(status(&[bearer.clone(), ("host", "evil.example".into())]).await, 403);
    let calc = admin.plugin("calc").await;
    assert_eq!(calc["serving"]["sha256"].as_str().unwrap().len(), 64, "{calc}");
    assert_eq!(calc["serving"]["tools"], 4, "{calc}");

    // Load: a new plugin from anywhere on disk; a broken one is refused with the reason.
    let textkit = plugins().join("textkit.wasm");
    let (status, body) = admin.call(reqwest::Method::POST, "/plugins", Some(json!({"path": textkit}))).await;
    assert_eq!(status, 200, "{body}");
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    let hash = client.request(1, "tools/call", json!({"name": "hash", "arguments": {"text": "x"}})).await;
    assert_eq!(hash["result"]["isError"], false, "{hash}");
    // Loading a file already served, or another file of a served plugin's name, replaces it:
    // one plugin of that name, served from the file loaded last.
    let named = async |name: &str| {
        let (_, status) = admin.call(reqwest::Method::GET, "/plugins", None).await;
        status["plugins"].as_array().unwrap().iter().filter(|p| p["name"] == name).cloned().collect::<Vec<_>>()
    };
    let (status, body) =
        admin.call(reqwest::Method::POST, "/plugins", Some(json!({"path": dir.join("calc.wasm")}))).await;
    assert_eq!(status, 200, "{body}");
    let calcs = named("calc").await;
    assert!(calcs.len() == 1 && calcs[0]["last_error"].is_null(), "{calcs:?}");
    let elsewhere = scratch_dir("admin-elsewhere");
    std::fs::copy(plugins().join("calc.wasm"), elsewhere.join("calc.wasm")).unwrap();
    let (status, body) =
        admin.call(reqwest::Method::POST, "/plugins", Some(json!({"path": elsewhere.join("calc.wasm")}))).await;
    assert_eq!(status, 200, "{body}");
    let calcs = named("calc").await;
    let source = std::fs::canonicalize(elsewhere.join("calc.wasm")).unwrap();
    assert!(calcs.len() == 1 && calcs[0]["source"] == source.to_str().unwrap(), "{calcs:?}");
    let add = client.request(4, "tools/call", json!({"name": "add", "arguments": {"a": 1, "b": 1}})).await;
    assert_eq!(add["result"]["isError"], false, "{add}");
    std::fs::write(dir.join("broken.wasm"), b"not wasm").unwrap();
    let (status, body) =
        admin.call(reqwest::Method::POST, "/plugins", Some(json!({"path": dir.join("broken.wasm")}))).await;
    assert_eq!(status, 422, "{body}");
    assert!(body["error"].as_str().unwrap().contains("not a valid WebAssembly component"), "{body}");
    // A load that fails changes nothing: the new name is not kept to be tried at each
    // reload, and a served plugin stays served from where it was.
    let broken_calc = scratch_dir("admin-broken");
    std::fs::write(broken_calc.join("fresh.wasm"), b"not wasm").unwrap();
    let (status, body) =
        admin.call(reqwest::Method::POST, "/plugins", Some(json!({"path": broken_calc.join("fresh.wasm")}))).await;
    assert_eq!(status, 422, "{body}");
    assert!(named("fresh").await.is_empty(), "{:?}", named("fresh").await);
    std::fs::write(broken_calc.join("calc.wasm"), b"not wasm either").unwrap();
    let (status, body) =
        admin.call(reqwest::Method::POST, "/plugins", Some(json!({"path": broken_calc.join("calc.wasm")}))).await;
    assert_eq!(status, 422, "{body}");
    let calcs = named("calc").await;
    assert!(calcs.len() == 1 && calcs[0]["source"] == source.to_str().unwrap(), "{calcs:?}");
    assert!(calcs[0]["last_error"].is_null(), "{calcs:?}");
    let _ = std::fs::remove_dir_all(broken_calc);
    let (status, _) = admin.call(reqwest::Method::POST, "/plugins", Some(json!({"path": "/etc/passwd"}))).await;
    assert_eq!(status, 400);
    // A name that is not a plain word (here one a `plugins.calc` scope would cover) is refused.
    std::fs::copy(plugins().join("textkit.wasm"), dir.join("calc.evil.wasm")).unwrap();
    let (status, body) =
        admin.call(reqwest::Method::POST, "/plugins", Some(json!({"path": dir.join("calc.evil.wasm")}))).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("is not a plugin name"), "{body}");

    // Unload: its tools go; unknown names are 404.
    let (status, body) = admin.call(reqwest::Method::DELETE, "/plugins/calc", None).await;
    assert_eq!(status, 200, "{body}");
    let gone = client.request(2, "tools/call", json!({"name": "add", "arguments": {"a": 1, "b": 1}})).await;
    assert_eq!(gone["error"]["code"], -32602, "{gone}");
    let (status, _) = admin.call(reqwest::Method::DELETE, "/plugins/nonesuch", None).await;
    assert_eq!(status, 404);
    // Reload keeps the unload (calc stays out) and reports the status.
    let (status, body) = admin.call(reqwest::Method::POST, "/reload", None).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["plugins"].as_array().unwrap().iter().all(|p| p["name"] != "calc"), "{body}");
    // Never reachable as MCP.
    let tools = client.request(3, "tools/list", json!({})).await;
    assert!(!tools.to_string().contains("reload"), "{tools}");
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(elsewhere);
}

/// The policy file is watched too: a change re-sandboxes plugins without recompiling them,
/// and a file that does not parse keeps the policy in force, with the error in the status.
#[tokio::test]
async fn policy_changes_apply_live_and_a_broken_policy_is_kept_out() {
    let dir = scratch_dir("policy-watch");
    let (first, second) = (dir.join("first"), dir.join("second"));
    std::fs::create_dir_all(&first).unwrap();
    std::fs::create_dir_all(&second).unwrap();
    let policy = dir.join("capsule.toml");
    let grant = |path: &std::path::Path| format!("[plugins.files]\ndirs = [{{ path = {:?} }}]\n", path.display());
    std::fs::write(&policy, grant(&first)).unwrap();
    let (server, admin) = Admin::serve(&dir, &["--config", policy.to_str().unwrap()]);
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    let roots = async |id| {
        first_text(&client.request(id, "tools/call", json!({"name": "list_roots", "arguments": {}})).await["result"])
    };
    assert!(roots(1).await.contains("first"), "{}", roots(1).await);
    std::fs::write(&policy, grant(&second)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !roots(2).await.contains("second") {
        assert!(Instant::now() < deadline, "the new policy never applied");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    std::fs::write(&policy, "[plugins.files]\ndirectories = []\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, status) = admin.call(reqwest::Method::GET, "/plugins", None).await;
        if let Some(error) = status["policy_error"].as_str() {
            assert!(error.contains("unknown field"), "{error}");
            break;
        }
        assert!(Instant::now() < deadline, "the broken policy never showed in the status");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(roots(3).await.contains("second"), "a broken policy replaced the one in force");
    // A file truncated to be rewritten in place is empty for a moment: not "no policy".
    std::fs::write(&policy, "").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, status) = admin.call(reqwest::Method::GET, "/plugins", None).await;
        if status["policy_error"].as_str().is_some_and(|e| e.contains("the file is empty")) {
            break;
        }
        assert!(Instant::now() < deadline, "the empty policy never showed in the status: {status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(roots(4).await.contains("second"), "an empty policy file replaced the one in force");
    let _ = std::fs::remove_dir_all(dir);
}

/// A release flipped in by two renames (`mv plugins old && mv release plugins`) leaves the
/// directory missing for a moment; a reload in that moment keeps its plugins serving, with
/// the reason in their status, and the release is served once it is in place.
#[tokio::test]
async fn a_plugin_directory_missing_between_two_renames_keeps_its_plugins() {
    let dir = scratch_dir("dir-flip");
    let (served, release) = (dir.join("plugins"), dir.join("release"));
    std::fs::create_dir_all(&served).unwrap();
    std::fs::create_dir_all(&release).unwrap();
    swap_to(&served, &std::fs::read(plugins().join("testing/swap-a.wasm")).unwrap(), 0);
    swap_to(&release, &std::fs::read(plugins().join("testing/swap-b.wasm")).unwrap(), 0);
    let (server, admin) = Admin::serve(&dir, &["--plugins", served.to_str().unwrap()]);
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    let mut id = 1;
    let mut whoami = async || {
        id += 1;
        client.request(id, "tools/call", json!({"name": "whoami", "arguments": {}})).await
    };
    assert_eq!(first_text(&whoami().await["result"]), "a");
    std::fs::rename(&served, dir.join("old")).unwrap();
    // The gap lasts until the reload has seen the directory gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, status) = admin.call(reqwest::Method::GET, "/plugins", None).await;
        let error = status["plugins"][0]["last_error"].as_str().unwrap_or_default().to_owned();
        if error.contains("cannot read plugin directory") {
            assert!(status["plugins"][0]["serving"].is_object(), "{status}");
            break;
        }
        assert!(Instant::now() < deadline, "no reload saw the directory gone: {status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let during = whoami().await;
    assert_eq!(first_text(&during["result"]), "a", "the plugin went while its directory was away: {during}");
    std::fs::rename(&release, &served).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = whoami().await;
        if first_text(&answer["result"]) == "b" {
            break;
        }
        assert!(answer["error"].is_null(), "a call failed across the flip: {answer}");
        assert!(Instant::now() < deadline, "the release never served: {answer}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A swap that lands while every instance is in use is not dropped: reading the new
/// version's lists takes a pool slot kept for loads, and the new version answers once an
/// instance is free again.
#[tokio::test]
async fn a_swap_while_every_instance_is_busy_is_not_dropped() {
    let dir = scratch_dir("swap-busy");
    let served = dir.join("plugins");
    std::fs::create_dir_all(&served).unwrap();
    std::fs::copy(plugins().join("testing/hostile.wasm"), served.join("hostile.wasm")).unwrap();
    swap_to(&served, &std::fs::read(plugins().join("testing/swap-a.wasm")).unwrap(), 0);
    let policy = dir.join("capsule.toml");
    std::fs::write(&policy, "[plugins.hostile.limits]\ntimeout_ms = 3000\n").unwrap();
    let args = ["--plugins", served.to_str().unwrap(), "--config", policy.to_str().unwrap()];
    let limits = ["--max-instances", "1", "--reserve", "0", "--spare-instances", "0"];
    let server = Server::http_in(&dir, &[&args[..], &limits[..]].concat());
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    let stall = client.spawn_call(1, "stall", json!({}));
    tokio::time::sleep(Duration::from_millis(300)).await;
    swap_to(&served, &std::fs::read(plugins().join("testing/swap-b.wasm")).unwrap(), 1);
    // Loaded while the stall still holds the only instance.
    let deadline = Instant::now() + Duration::from_secs(2);
    while server.log().matches("loaded plugin swapped").count() < 2 {
        assert!(Instant::now() < deadline, "the swap was dropped:\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stall.await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = client.request(2, "tools/call", json!({"name": "whoami", "arguments": {}})).await;
        if first_text(&answer["result"]).contains('b') {
            break;
        }
        assert!(Instant::now() < deadline, "the new version never answered: {answer}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A grant taken away applies at once even when the plugin's newest file does not load: the
/// version kept serving is sandboxed again under what the policy grants now, not left with
/// the grants it was loaded with.
#[tokio::test]
async fn a_grant_taken_away_applies_while_the_plugin_file_is_broken() {
    let dir = scratch_dir("policy-revoke-broken");
    let (served, data) = (dir.join("plugins"), dir.join("data"));
    std::fs::create_dir_all(&served).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("secret.txt"), "the secret").unwrap();
    std::fs::copy(plugins().join("files.wasm"), served.join("files.wasm")).unwrap();
    let policy = dir.join("capsule.toml");
    std::fs::write(&policy, format!("[plugins.files]\ndirs = [{{ path = {:?} }}]\n", data.display())).unwrap();
    let args = ["--config", policy.to_str().unwrap(), "--plugins", served.to_str().unwrap()];
    let (server, admin) = Admin::serve(&dir, &args);
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    let mut id = 0;
    let mut read = async || {
        id += 1;
        let arguments = json!({"path": data.join("secret.txt")});
        first_text(
            &client.request(id, "tools/call", json!({"name": "read_file", "arguments": arguments})).await["result"],
        )
    };
    assert_eq!(read().await, "the secret");
    // A broken build lands first (renamed in whole), then the grant goes.
    std::fs::write(dir.join("broken.wasm"), b"\0asm\x0d\0\x01\0not a component").unwrap();
    std::fs::rename(dir.join("broken.wasm"), served.join("files.wasm")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, status) = admin.call(reqwest::Method::GET, "/plugins", None).await;
        let files = status["plugins"].as_array().and_then(|all| all.iter().find(|p| p["name"] == "files")).cloned();
        if files.is_some_and(|p| p["last_error"].is_string()) {
            break;
        }
        assert!(Instant::now() < deadline, "the broken file never showed in the status: {status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(read().await, "the secret", "the version serving went on");
    std::fs::write(&policy, "[plugins.files]\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = read().await;
        if !text.contains("the secret") {
            break;
        }
        assert!(Instant::now() < deadline, "the grant taken away still applied: {text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A policy entry that no plugin answers to (a typo, most likely) is said in the log: its
/// plugin would otherwise run with nothing granted, without a word.
#[tokio::test]
async fn a_policy_entry_for_no_plugin_is_warned_of() {
    let dir = scratch_dir("policy-typo");
    let policy = dir.join("capsule.toml");
    std::fs::write(&policy, "[plugins.calcc.limits]\nmemory_mib = 8\n[plugins.calc.limits]\nmemory_mib = 16\n")
        .unwrap();
    let calc = plugins().join("calc.wasm");
    let server = Server::http_in(&dir, &["--plugin", calc.to_str().unwrap(), "--config", policy.to_str().unwrap()]);
    let log = server.wait_for_log("which no plugin source provides");
    assert!(log.contains("the policy has entries for calcc, which no plugin source provides"), "{log}");
    let _ = std::fs::remove_dir_all(dir);
}

/// An admin token file others may read gives them the server: the operator is told.
#[tokio::test]
async fn an_admin_token_others_may_read_is_warned_of() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch_dir("admin-token-mode");
    let token = dir.join("admin-token");
    std::fs::write(&token, "an-operator-token-0123456789").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (server, _admin) = Admin::serve(&dir, &[]);
    let log = server.wait_for_log("can be read by other users");
    assert!(log.contains("can be read by other users than its owner"), "{log}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A policy mounted the way Kubernetes mounts a ConfigMap: `capsule.toml -> ..data/capsule.toml`,
/// `..data -> ..<timestamp>`, updated by renaming a new `..data` link into place. The file's
/// own name never changes; the flip beside it is the change.
#[tokio::test]
async fn a_policy_mounted_from_a_configmap_follows_its_link_flips() {
    let dir = scratch_dir("policy-configmap");
    let (map, first, second, third) = (dir.join("map"), dir.join("first"), dir.join("second"), dir.join("third"));
    for d in [&map, &first, &second, &third] {
        std::fs::create_dir_all(d).unwrap();
    }
    let grant = |path: &std::path::Path| format!("[plugins.files]\ndirs = [{{ path = {:?} }}]\n", path.display());
    let release = |n: u32, grants: &std::path::Path| {
        let data = map.join(format!("..2026_12_06_{n}"));
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("capsule.toml"), grant(grants)).unwrap();
        std::os::unix::fs::symlink(data.file_name().unwrap(), map.join("..data_tmp")).unwrap();
        std::fs::rename(map.join("..data_tmp"), map.join("..data")).unwrap();
        if n > 1 {
            std::fs::remove_dir_all(map.join(format!("..2026_12_06_{}", n - 1))).unwrap();
        }
    };
    release(1, &first);
    std::os::unix::fs::symlink("..data/capsule.toml", map.join("capsule.toml")).unwrap();
    let (server, _admin) = Admin::serve(&dir, &["--config", map.join("capsule.toml").to_str().unwrap()]);
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    let mut id = 0;
    let mut roots = async || {
        id += 1;
        first_text(&client.request(id, "tools/call", json!({"name": "list_roots", "arguments": {}})).await["result"])
    };
    assert!(roots().await.contains("first"));
    // Twice, so that the second flip is seen through the links as they are after the first.
    for (n, grants, name) in [(2, &second, "second"), (3, &third, "third")] {
        release(n, grants);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !roots().await.contains(name) {
            assert!(Instant::now() < deadline, "the policy of release {n} never applied");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_server_answers_at_once_and_plugins_join_as_they_load() {
    // No compile cache: every plugin compiles, which takes seconds on two cores.
    let mut args = crate::support::all_plugins();
    args.push("--no-compile-cache".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = crate::support::Server::starting(&std::env::current_dir().unwrap(), &args);
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    assert!(!server.log().contains(" ready: "), "initialize waited for the plugins:\n{}", server.log());
    let mut stream = client.listen_legacy().await;

    // A call to a plugin that may still be compiling waits for it instead of failing.
    let reply = Client::new(&server.url)
        .modern(1, "tools/call", json!({"name": "evaluate", "arguments": {"expression": "6*7"}}), json!({}))
        .await;
    assert_eq!(reply.response(1)["result"]["structuredContent"]["result"], 42.0, "{}", reply.body);

    // Once loading ends the session lists them all; it never asked for a list before, so it
    // is not told of the load (whether it would be would depend on when it connected).
    let deadline = Instant::now() + Duration::from_secs(120);
    while !server.log().contains(" ready: ") {
        assert!(Instant::now() < deadline, "the first load never ended:\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(server.log().contains("plugins loaded: "), "{}", server.log());
    let told = tokio::time::timeout(Duration::from_millis(500), stream.next_message()).await;
    assert!(told.is_err(), "told of the first load: {told:?}");
    let tools = client.request(2, "tools/list", json!({})).await;
    let names: Vec<&str> =
        tools["result"]["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    for name in ["evaluate", "spin"] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
}

#[test]
fn capsule_compile_fills_the_cache_serve_uses() {
    let dir = scratch_dir("compile");
    let (cache, plugins_dir) = (dir.join("cache"), dir.join("plugins"));
    std::fs::create_dir_all(&plugins_dir).unwrap();
    for name in ["calc", "textkit"] {
        std::fs::copy(plugins().join(format!("{name}.wasm")), plugins_dir.join(format!("{name}.wasm"))).unwrap();
    }
    let compile = |extra: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
            .args(["compile", "--cache-dir", cache.to_str().unwrap(), "--plugins", plugins_dir.to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap();
        assert!(output.stdout.is_empty(), "compile wrote to stdout");
        (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
    };
    let (code, log) = compile(&[]);
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("2 compiled, 0 already there, 0 failed"), "{log}");
    let entries = || {
        std::fs::read_dir(&cache)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "cwasm"))
            .count()
    };
    assert_eq!(entries(), 2);
    let (code, log) = compile(&[]);
    assert_eq!((code, log.contains("0 compiled, 2 already there")), (Some(0), true), "{log}");

    // Another memory ceiling is another engine: its cache entries are its own.
    let (code, log) = compile(&["--max-memory", "256"]);
    assert_eq!((code, log.contains("2 compiled")), (Some(0), true), "{log}");
    assert_eq!(entries(), 4);

    // A file that is not a component is reported, and the exit status says so.
    std::fs::write(plugins_dir.join("broken.wasm"), b"not wasm").unwrap();
    let (code, log) = compile(&[]);
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("broken.wasm") && log.contains("0 compiled, 2 already there, 1 failed"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_plugin_added_while_the_first_load_runs_is_not_missed() {
    let dir = scratch_dir("first-load-change");
    for name in ["calc", "textkit"] {
        std::fs::copy(plugins().join(format!("{name}.wasm")), dir.join(format!("{name}.wasm"))).unwrap();
    }
    let args = ["--plugins", dir.to_str().unwrap(), "--no-compile-cache"];
    let server = crate::support::Server::starting(&dir, &args);
    // Compiling two plugins takes far longer than this copy: the first load is still running.
    std::fs::copy(plugins().join("testing/hostile.wasm"), dir.join("hostile.wasm")).unwrap();
    assert!(!server.log().contains(" ready: "), "the first load ended before the change:\n{}", server.log());
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    let started = Instant::now();
    loop {
        let tools = client.request(1, "tools/list", json!({})).await;
        if tools["result"]["tools"].as_array().unwrap().iter().any(|t| t["name"] == "spin") {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the added plugin never joined:\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A client that connects while the first load runs and has asked for no list hears nothing
/// of the load's end: each list is whole when it asks (and whether it heard would otherwise
/// depend on whether it connected before the load ended).
#[test]
fn a_client_that_listed_nothing_hears_nothing_of_the_first_load() {
    let dir = scratch_dir("first-load-announced");
    for name in ["calc", "textkit", "testing/hostile"] {
        let file = format!("{name}.wasm");
        std::fs::copy(plugins().join(&file), dir.join(Path::new(&file).file_name().unwrap())).unwrap();
    }
    let (mut stdio, loaded) =
        StdioServer::starting(&["--plugins", dir.to_str().unwrap(), "--no-compile-cache", "--no-watch"], &[]);
    stdio.initialize("2025-11-25");
    assert!(loaded.try_recv().is_err(), "the first load ended before the client connected");
    loaded.recv_timeout(Duration::from_secs(120)).expect("the first load ends");
    // Time for any notification the end of the load sends to arrive before the answer.
    std::thread::sleep(Duration::from_millis(500));
    stdio.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let tools = stdio.read();
    assert_eq!(tools["id"], 2, "told of the first load before its list: {tools}");
    let names: Vec<&str> =
        tools["result"]["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(["add", "hash", "spin"].iter().all(|name| names.contains(name)), "{names:?}");
    stdio.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A client whose lists were asked for while the first load ran is answered the loaded lists
/// (they wait for it), so it is not told afterwards that they changed, nor that the lists it
/// did not ask for did (the prompts here): a Python SDK 1.x client that asks for its tools
/// and closes fails its whole session on news arriving as it closes (python-sdk#1960).
#[test]
fn lists_that_waited_for_the_first_load_are_not_announced_again() {
    let dir = scratch_dir("first-load-listed");
    for name in ["calc", "conformance"] {
        std::fs::copy(plugins().join(format!("{name}.wasm")), dir.join(format!("{name}.wasm"))).unwrap();
    }
    let (mut stdio, loaded) =
        StdioServer::starting(&["--plugins", dir.to_str().unwrap(), "--no-compile-cache", "--no-watch"], &[]);
    stdio.initialize("2025-11-25");
    stdio.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    stdio.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "resources/list"}));
    assert!(loaded.try_recv().is_err(), "the first load ended before the lists were asked for");
    loaded.recv_timeout(Duration::from_secs(120)).expect("the first load ends");
    // Time for any notification the end of the load sends to arrive before the ping's answer.
    std::thread::sleep(Duration::from_millis(500));
    stdio.send(&json!({"jsonrpc": "2.0", "id": 4, "method": "ping"}));
    let mut answers = std::collections::BTreeMap::new();
    let mut announced = Vec::new();
    while answers.len() < 3 {
        let message = stdio.read();
        match message["id"].as_i64() {
            Some(id) => drop(answers.insert(id, message)),
            None => announced.push(message["method"].as_str().unwrap_or_default().to_owned()),
        }
    }
    let names: Vec<&str> =
        answers[&2]["result"]["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"add") && names.len() > 5, "not the loaded list: {names:?}");
    assert!(!answers[&3]["result"]["resources"].as_array().unwrap().is_empty(), "{}", answers[&3]);
    assert!(announced.is_empty(), "told of lists already answered or never asked for: {announced:?}");
    stdio.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

/// SIGHUP reads every plugin source again, as the admin reload does: a server that does not
/// watch picks up a plugin added since, and goes on serving rather than ending (SIGHUP's
/// default).
#[tokio::test]
async fn sighup_reads_the_plugins_again() {
    let dir = scratch_dir("sighup");
    std::fs::copy(plugins().join("calc.wasm"), dir.join("calc.wasm")).unwrap();
    let server = Server::http(&["--plugins", dir.to_str().unwrap(), "--no-watch"]);
    let names = async || {
        let tools = Client::new(&server.url).modern(1, "tools/list", json!({}), json!({})).await;
        let tools = tools.response(1)["result"]["tools"].as_array().cloned().unwrap_or_default();
        tools.iter().filter_map(|t| t["name"].as_str().map(str::to_owned)).collect::<Vec<_>>()
    };
    assert!(names().await.contains(&"add".to_owned()));
    std::fs::copy(plugins().join("textkit.wasm"), dir.join("textkit.wasm")).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!names().await.iter().any(|n| n == "text_stats"), "the server watched after all");

    let sent = std::process::Command::new("kill").args(["-HUP", &server.pid().to_string()]).status().unwrap();
    assert!(sent.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    while !names().await.iter().any(|n| n == "text_stats") {
        assert!(Instant::now() < deadline, "SIGHUP did not load textkit:\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let reply = Client::new(&server.url)
        .modern(2, "tools/call", json!({"name": "add", "arguments": {"a": 2, "b": 3}}), json!({}))
        .await;
    assert_eq!(first_text(&reply.response(2)["result"]), "5", "{}", reply.body);
    // Logged once the reload returns, through the log's own thread: after the catalog.
    server.wait_for_log("reloaded: 1 tenants, 2 plugins served");
}

/// A server started with SIGHUP ignored (`nohup`, so that closing the terminal leaves it be)
/// keeps it ignored: a hang-up neither ends it nor reloads it.
#[tokio::test]
async fn a_server_started_under_nohup_ignores_sighup() {
    let dir = scratch_dir("nohup");
    std::fs::copy(plugins().join("calc.wasm"), dir.join("calc.wasm")).unwrap();
    let server = Server::http_ignoring_hangups(&["--plugins", dir.to_str().unwrap(), "--no-watch"]);
    std::fs::copy(plugins().join("textkit.wasm"), dir.join("textkit.wasm")).unwrap();
    let sent = std::process::Command::new("kill").args(["-HUP", &server.pid().to_string()]).status().unwrap();
    assert!(sent.success());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let tools = Client::new(&server.url).modern(1, "tools/list", json!({}), json!({})).await;
    let names: Vec<&str> =
        tools.response(1)["result"]["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"add") && !names.contains(&"text_stats"), "{names:?}");
    assert!(!server.log().contains("SIGHUP"), "{}", server.log());
}
