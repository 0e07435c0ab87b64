//! Tenants: each with its own plugins, policy, catalog and sessions, routed by path or host
//! name, and added, changed and removed while the server runs.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Admin, Client, StdioServer, first_text, plugins, scratch_dir};

/// The names of the tools a client sees.
async fn tool_names(client: &Client) -> Vec<String> {
    let reply = client.modern(1, "tools/list", json!({}), json!({})).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let tools = reply.response(1)["result"]["tools"].as_array().cloned().unwrap_or_default();
    tools.iter().filter_map(|t| t["name"].as_str().map(str::to_owned)).collect()
}

/// The HTTP status of a stateless `tools/list` at the client's URL.
async fn list_status(client: &Client) -> u16 {
    client.modern(1, "tools/list", json!({}), json!({})).await.status
}

/// A raw POST to `url` with `host` as its Host header.
async fn post_as(url: &str, host: &str, body: &Value) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(url)
        .header("host", host)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", body["method"].as_str().unwrap_or_default())
        .body(body.to_string())
        .send()
        .await
        .expect("send");
    (response.status().as_u16(), response.text().await.unwrap_or_default())
}

fn tools_list() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}}})
}

/// Two tenants' folders, one plugin each, and a policy file naming them.
pub fn two_tenants(dir: &Path) -> std::path::PathBuf {
    for (tenant, plugin) in [("acme", "calc"), ("globex", "textkit")] {
        std::fs::create_dir_all(dir.join(tenant)).unwrap();
        std::fs::copy(plugins().join(format!("{plugin}.wasm")), dir.join(tenant).join(format!("{plugin}.wasm")))
            .unwrap();
    }
    let policy = dir.join("capsule.toml");
    std::fs::write(
        &policy,
        "[tenants.acme]\nsources = [\"acme\"]\n[tenants.globex]\nsources = [\"globex\"]\nhosts = [\"globex.test\"]\n",
    )
    .unwrap();
    policy
}

#[tokio::test]
async fn tenants_see_only_their_own_plugins_and_sessions() {
    let dir = scratch_dir("tenants-isolation");
    let policy = two_tenants(&dir);
    let (server, _admin) = Admin::serve(&dir, &["--config", policy.to_str().unwrap()]);
    let base = format!("http://{}", server.authority());
    let acme = Client::new(&format!("{base}/t/acme/mcp"));
    let globex = Client::new(&format!("{base}/t/globex/mcp"));
    let (acme_tools, globex_tools) = (tool_names(&acme).await, tool_names(&globex).await);
    assert!(acme_tools.contains(&"add".to_owned()) && !acme_tools.iter().any(|t| globex_tools.contains(t)));
    assert!(!globex_tools.is_empty() && !globex_tools.contains(&"add".to_owned()), "{globex_tools:?}");

    // Another tenant's tool is unknown, not merely refused.
    let call = acme.modern(2, "tools/call", json!({"name": globex_tools[0], "arguments": {}}), json!({})).await;
    assert_eq!(call.response(2)["error"]["code"], -32602, "{}", call.body);

    // An unknown tenant is 404; so is /mcp when no host name picks a tenant.
    let nobody = Client::new(&format!("{base}/t/initech/mcp")).post(&tools_list()).await;
    assert_eq!(nobody.status, 404, "{}", nobody.body);
    assert_eq!(Client::new(&format!("{base}/mcp")).post(&tools_list()).await.status, 404);

    // A tenant's host name routes /mcp to it, and is allowed without --allow-host.
    let (status, body) = post_as(&format!("{base}/mcp"), "globex.test", &tools_list()).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(&globex_tools[0]) && !body.contains("\"add\""), "{body}");
    let (status, _) = post_as(&format!("{base}/mcp"), "acme.test", &tools_list()).await;
    assert_eq!(status, 403, "an unknown host name is still refused");

    // A session belongs to the tenant that made it.
    let mut legacy = Client::new(&format!("{base}/t/acme/mcp"));
    legacy.initialize("2025-11-25", json!({})).await;
    let sum = legacy.request(3, "tools/call", json!({"name": "add", "arguments": {"a": 2, "b": 3}})).await;
    assert_eq!(sum["result"]["isError"], false, "{sum}");
    let mut stolen = Client::new(&format!("{base}/t/globex/mcp"));
    stolen.session = legacy.session.clone();
    stolen.version = legacy.version.clone();
    let reply = stolen.post(&json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"})).await;
    assert_eq!(reply.status, 404, "another tenant's session: {}", reply.body);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn tenants_come_and_go_with_the_policy_file() {
    let dir = scratch_dir("tenants-reload");
    let policy = two_tenants(&dir);
    // A relative path, as an operator types it: changes to it are still noticed.
    let (server, admin) = Admin::serve(&dir, &["--config", "capsule.toml"]);
    let base = format!("http://{}", server.authority());
    let acme = Client::new(&format!("{base}/t/acme/mcp"));
    let mut session = Client::new(&format!("{base}/t/acme/mcp"));
    session.initialize("2025-11-25", json!({})).await;

    // Several tenants: the unscoped admin routes ask which one.
    let (status, _) = admin.call(reqwest::Method::GET, "/plugins", None).await;
    assert_eq!(status, 409);
    let (status, body) = admin.call(reqwest::Method::GET, "/t/globex/plugins", None).await;
    assert_eq!((status, body["tenant"].as_str()), (200, Some("globex")), "{body}");

    // globex leaves, initech arrives (sharing acme's plugin folder), acme is untouched.
    std::fs::write(
        &policy,
        "[tenants.acme]\nsources = [\"acme\"]\n[tenants.initech]\nsources = [\"acme\"]\n\
         [tenants.initech.limits]\nconcurrency = 4\n",
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let initech = Client::new(&format!("{base}/t/initech/mcp"));
    loop {
        let gone = list_status(&Client::new(&format!("{base}/t/globex/mcp"))).await == 404;
        let arrived = list_status(&initech).await == 200;
        if gone && arrived {
            break;
        }
        assert!(Instant::now() < deadline, "the tenants never changed; log:\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(tool_names(&initech).await.contains(&"add".to_owned()));
    let (_, tenants) = admin.call(reqwest::Method::GET, "/tenants", None).await;
    let ids: Vec<&str> = tenants["tenants"].as_array().unwrap().iter().filter_map(|t| t["tenant"].as_str()).collect();
    assert_eq!(ids, ["acme", "initech"], "{tenants}");
    // acme's session survived the reconfiguration.
    let sum = session.request(5, "tools/call", json!({"name": "add", "arguments": {"a": 1, "b": 1}})).await;
    assert_eq!(sum["result"]["isError"], false, "{sum}");
    assert!(tool_names(&acme).await.contains(&"add".to_owned()));

    // A broken file changes nothing, and says why.
    std::fs::write(&policy, "[tenants.acme]\nsources = [\"acme\"]\ncolour = 1\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, tenants) = admin.call(reqwest::Method::GET, "/tenants", None).await;
        if tenants["error"].as_str().is_some_and(|e| e.contains("unknown field")) {
            break;
        }
        assert!(Instant::now() < deadline, "the broken file never showed: {tenants}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(list_status(&initech).await, 200);
    let _ = std::fs::remove_dir_all(dir);
}

/// A tenant taken out of the policy takes no new requests, but what it has running finishes
/// and is answered (a legacy call got an empty stream, a 2026-07-28 call "cancelled").
#[tokio::test]
async fn a_removed_tenants_running_calls_finish_and_are_answered() {
    let dir = scratch_dir("tenants-remove-running");
    let policy = two_tenants(&dir);
    std::fs::copy(plugins().join("testing/hostile.wasm"), dir.join("globex/hostile.wasm")).unwrap();
    std::fs::copy(plugins().join("conformance.wasm"), dir.join("globex/conformance.wasm")).unwrap();
    let (server, _admin) = Admin::serve(&dir, &["--config", policy.to_str().unwrap(), "--call-timeout", "1500"]);
    let base = format!("http://{}", server.authority());
    let mut session = Client::new(&format!("{base}/t/globex/mcp"));
    session.initialize("2025-11-25", json!({"elicitation": {"form": {}}})).await;
    let legacy = session.spawn_call(2, "stall", json!({}));
    // A call waiting on its client, whose answer could no longer reach a removed tenant:
    // it is told there is none, rather than waiting minutes for it.
    let asking = session.spawn_call(4, "test_elicitation", json!({"message": "m"}));
    let stateless = Client::new(&format!("{base}/t/globex/mcp"));
    let modern =
        tokio::spawn(async move { stateless.modern(3, "tools/call", json!({"name": "stall"}), json!({})).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::write(&policy, "[tenants.acme]\nsources = [\"acme\"]\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while list_status(&Client::new(&format!("{base}/t/globex/mcp"))).await != 404 {
        assert!(Instant::now() < deadline, "globex never left; log:\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Each ran to its wall-clock limit, as it would have without the change.
    let (legacy, modern) = (legacy.await.unwrap(), modern.await.unwrap());
    for (reply, id) in [(&legacy, 2), (&modern, 3)] {
        let text = first_text(&reply.response(id)["result"]);
        assert!(text.contains("did not finish within 1.5s"), "{}", reply.body);
    }
    let asked = tokio::time::timeout(Duration::from_secs(20), asking).await.expect("the asking call ends").unwrap();
    assert!(asked.body.contains("elicitation/create"), "{}", asked.body);
    assert!(asked.response(4)["result"]["content"].is_array(), "{}", asked.body);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_tenants_directory_serves_one_tenant_per_folder() {
    let dir = scratch_dir("tenants-dir");
    let tenants = dir.join("tenants");
    for (tenant, plugin) in [("north", "calc"), ("south", "textkit")] {
        std::fs::create_dir_all(tenants.join(tenant)).unwrap();
        std::fs::copy(plugins().join(format!("{plugin}.wasm")), tenants.join(tenant).join(format!("{plugin}.wasm")))
            .unwrap();
    }
    std::fs::write(tenants.join("south").join("tenant.toml"), "hosts = [\"south.test\"]\n").unwrap();
    let (server, _admin) = Admin::serve(&dir, &["--tenants", tenants.to_str().unwrap()]);
    let base = format!("http://{}", server.authority());
    assert!(tool_names(&Client::new(&format!("{base}/t/north/mcp"))).await.contains(&"add".to_owned()));
    let (status, body) = post_as(&format!("{base}/mcp"), "south.test", &tools_list()).await;
    assert!(status == 200 && !body.contains("\"add\""), "{status} {body}");

    // A new folder is a new tenant (made beside, then moved in whole, as operators should).
    std::fs::create_dir_all(dir.join("east")).unwrap();
    std::fs::copy(plugins().join("calc.wasm"), dir.join("east").join("calc.wasm")).unwrap();
    std::fs::rename(dir.join("east"), tenants.join("east")).unwrap();
    let east = Client::new(&format!("{base}/t/east/mcp"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while list_status(&east).await != 200 || !tool_names(&east).await.contains(&"add".to_owned()) {
        assert!(Instant::now() < deadline, "the new tenant never appeared; log:\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A tenant.toml gone for a moment (an editor saving it: renamed away, then written) is not
    // a tenant without one: south keeps its configuration until the file is back.
    let south_file = tenants.join("south").join("tenant.toml");
    std::fs::rename(&south_file, dir.join("south-backup.toml")).unwrap();
    let log = server.wait_for_log("tenant.toml is gone");
    assert!(log.contains("tenant.toml is gone"), "no reload saw the file gone; log:\n{log}");
    let (status, body) = post_as(&format!("{base}/mcp"), "south.test", &tools_list()).await;
    assert!(status == 200 && !body.contains("\"add\""), "south lost its host name: {status} {body}");
    std::fs::rename(dir.join("south-backup.toml"), &south_file).unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

/// A `tenants` folder under `dir` with the tenants north and south, each serving calc.
fn north_and_south(dir: &Path) -> std::path::PathBuf {
    let tenants = dir.join("tenants");
    for tenant in ["north", "south"] {
        std::fs::create_dir_all(tenants.join(tenant)).unwrap();
        std::fs::copy(plugins().join("calc.wasm"), tenants.join(tenant).join("calc.wasm")).unwrap();
    }
    tenants
}

/// One tenant's broken `tenant.toml` (unknown keys, or a FIFO) holds up no other tenant: a
/// host name another tenant rotates applies at once, and the broken one keeps serving as it
/// was, its error in its own status alone.
#[tokio::test]
async fn a_broken_tenant_file_holds_up_no_other_tenant() {
    let dir = scratch_dir("tenants-isolated");
    let tenants = north_and_south(&dir);
    std::fs::write(tenants.join("south").join("tenant.toml"), "hosts = [\"south-1.test\"]\n").unwrap();
    std::fs::write(tenants.join("north").join("tenant.toml"), "hosts = [\"north.test\"]\n").unwrap();
    let (server, admin) = Admin::serve(&dir, &["--tenants", tenants.to_str().unwrap()]);
    let base = format!("http://{}", server.authority());
    let answers = async |host: &str| post_as(&format!("{base}/mcp"), host, &tools_list()).await.0;
    assert_eq!(answers("south-1.test").await, 200);
    for broken in ["colour = 1\n", "fifo"] {
        let file = tenants.join("north").join("tenant.toml");
        let _ = std::fs::remove_file(&file);
        if broken == "fifo" {
            assert!(std::process::Command::new("mkfifo").arg(&file).status().unwrap().success());
        } else {
            std::fs::write(&file, broken).unwrap();
        }
        let (from, to) =
            if broken == "fifo" { ("south-2.test", "south-3.test") } else { ("south-1.test", "south-2.test") };
        std::fs::write(tenants.join("south").join("tenant.toml"), format!("hosts = [\"{to}\"]\n")).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while answers(to).await != 200 {
            assert!(Instant::now() < deadline, "{broken}: south's change waited for north; log:\n{}", server.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_ne!(answers(from).await, 200, "{broken}: south's old host name");
        let north = Client::new(&format!("{base}/t/north/mcp"));
        assert!(tool_names(&north).await.contains(&"add".to_owned()), "{broken}: north stopped serving");
        let (_, south) = admin.call(reqwest::Method::GET, "/t/south/plugins", None).await;
        assert!(south["policy_error"].is_null(), "{broken}: north's error in south's status: {south}");
        let (_, north) = admin.call(reqwest::Method::GET, "/t/north/plugins", None).await;
        assert!(north["policy_error"].is_string(), "{broken}: {north}");
    }
    // North, kept as it was, keeps its host name: south may not take it meanwhile.
    std::fs::write(tenants.join("south").join("tenant.toml"), "hosts = [\"north.test\"]\n").unwrap();
    let log = server.wait_for_log("host north.test is still tenant north's");
    assert!(log.contains("host north.test is still tenant north's"), "{log}");
    assert_eq!(answers("south-3.test").await, 200, "south is not changed");
    assert_eq!(answers("north.test").await, 200, "north keeps its name");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn stdio_serves_the_tenant_it_is_told_to() {
    let dir = scratch_dir("tenants-stdio");
    let policy = two_tenants(&dir);
    let mut server =
        StdioServer::start_with(&["--config", policy.to_str().unwrap(), "--tenant", "globex", "--no-watch"]);
    server.initialize("2025-11-25");
    server.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let tools = server.read();
    assert!(!tools["result"]["tools"].as_array().unwrap().is_empty() && !tools.to_string().contains("\"add\""));
    server.finish();
    // Several tenants and none named: refused at start, never a guess.
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["serve", "--stdio", "--no-watch", "--config", policy.to_str().unwrap()])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success());
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_tenants_admin_token_opens_that_tenant_alone() {
    use sha2::{Digest, Sha256};
    let dir = scratch_dir("tenants-admin");
    let policy = two_tenants(&dir);
    let own_token = "acme-operator-token-0123456789";
    let digest: String = Sha256::digest(own_token).iter().map(|b| format!("{b:02x}")).collect();
    let text = std::fs::read_to_string(&policy)
        .unwrap()
        .replace("[tenants.acme]\n", &format!("[tenants.acme]\nadmin_token_sha256 = \"{digest}\"\n"));
    std::fs::write(&policy, text).unwrap();
    let (_server, admin) = Admin::serve(&dir, &["--config", policy.to_str().unwrap(), "--body-timeout", "1"]);
    let get = reqwest::Method::GET;
    let as_acme = |path: &'static str, method: reqwest::Method| {
        let admin = &admin;
        async move { admin.send(method, path, None, Some(own_token)).await.0 }
    };
    assert_eq!(as_acme("/t/acme/plugins", get.clone()).await, 200);
    assert_eq!(as_acme("/t/acme/reload", reqwest::Method::POST).await, 200);
    for (path, method) in [
        ("/t/globex/plugins", get.clone()),
        ("/t/globex/reload", reqwest::Method::POST),
        ("/plugins", get.clone()),
        ("/tenants", get.clone()),
        ("/tenants/reload", reqwest::Method::POST),
    ] {
        assert_eq!(as_acme(path, method.clone()).await, 403, "{method} {path}");
    }
    let (status, _) = admin.send(get.clone(), "/t/acme/plugins", None, Some("acme-operator-token-0123456788")).await;
    assert_eq!(status, 401);
    // Its token loads plugins from its own directories alone: not another tenant's file, not
    // through `..` or a symbolic link, and it does not learn whether a file outside exists.
    let post = reqwest::Method::POST;
    let load = async |path: std::path::PathBuf| {
        admin.send(post.clone(), "/t/acme/plugins", Some(json!({"path": path})), Some(own_token)).await
    };
    let (status, body) = load(dir.join("acme").join("calc.wasm")).await;
    assert_eq!(status, 200, "{body}");
    std::os::unix::fs::symlink(dir.join("globex").join("textkit.wasm"), dir.join("acme").join("linked.wasm")).unwrap();
    for outside in [
        dir.join("globex").join("textkit.wasm"),
        dir.join("acme").join("..").join("globex").join("textkit.wasm"),
        dir.join("acme").join("linked.wasm"),
        "/nonexistent/x.wasm".into(),
    ] {
        let (status, body) = load(outside.clone()).await;
        assert_eq!(status, 403, "{}: {body}", outside.display());
        assert!(body["error"].as_str().unwrap().contains("plugin directories"), "{body}");
    }
    // A body that never arrives is cut off (--body-timeout), token or not.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let address = admin.base.trim_start_matches("http://").split('/').next().unwrap().to_owned();
        let mut stalled = tokio::net::TcpStream::connect(address).await.unwrap();
        let head = format!(
            "POST /admin/t/acme/plugins HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {own_token}\r\n\
             Content-Length: 1000\r\n\r\n{{"
        );
        stalled.write_all(head.as_bytes()).await.unwrap();
        let mut answer = vec![0; 1024];
        let read = tokio::time::timeout(std::time::Duration::from_secs(10), stalled.read(&mut answer)).await;
        let read = read.expect("answered in time").unwrap();
        let answer = String::from_utf8_lossy(&answer[..read]);
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    }
    // The server's token still opens everything.
    assert_eq!(admin.call(get.clone(), "/t/globex/plugins", None).await.0, 200);
    assert_eq!(admin.call(get, "/tenants", None).await.0, 200);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn check_judges_a_plugin_by_the_tenant_it_names() {
    let dir = scratch_dir("tenants-check");
    let policy = two_tenants(&dir);
    let text = std::fs::read_to_string(&policy).unwrap() + "[tenants.globex.plugins.calc.limits]\ncpu_ms = 250\n";
    std::fs::write(&policy, text).unwrap();
    let calc = plugins().join("calc.wasm");
    let check = |tenant: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_capsule"));
        command.args(["check", "--json", "--config", policy.to_str().unwrap(), calc.to_str().unwrap()]);
        if let Some(tenant) = tenant {
            command.args(["--tenant", tenant]);
        }
        command.output().unwrap()
    };
    let limits = |output: &std::process::Output| -> Value {
        assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
        serde_json::from_slice::<Value>(&output.stdout).unwrap()["grants"]["limits"].clone()
    };
    assert_eq!(limits(&check(Some("globex")))["cpu_ms"], 250);
    assert_eq!(limits(&check(Some("acme")))["cpu_ms"], 5000);
    // A policy is checked on a machine that lacks its directories and secrets: they are
    // reported, and the plugin is judged without them.
    let text = std::fs::read_to_string(&policy).unwrap()
        + "[tenants.acme.plugins.calc]\ndirs = [{ path = \"/nonexistent/acme-docs\", guest = \"/docs\" }]\n\
           secrets = { KEY = { env = \"CAPSULE_TEST_SURELY_UNSET\" } }\n";
    std::fs::write(&policy, text).unwrap();
    let output = check(Some("acme"));
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["verdict"], "loads-with-warnings", "{report}");
    assert_eq!(report["grants"]["dirs"][0]["guest"], "/docs", "{report}");
    let missing = report["not_on_this_machine"].as_array().unwrap();
    assert!(missing.len() == 2 && missing[0].as_str().unwrap().contains("/nonexistent/acme-docs"), "{report}");
    assert!(report["offers"]["tools"].as_array().is_some_and(|t| !t.is_empty()), "{report}");
    for (tenant, expected) in [(None, "name one with --tenant"), (Some("initech"), "no tenant initech")] {
        let output = check(tenant);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A tenant kept as it was (its file refused) keeps its `[auth]` resource as it keeps its
/// host names: another tenant may not take it meanwhile, or one's tokens would be taken by
/// the other and the other's metadata would name a resource not its own.
#[tokio::test]
async fn a_kept_tenant_keeps_its_resource() {
    let dir = scratch_dir("tenants-resource");
    let tenants = north_and_south(&dir);
    let auth = |resource: &str| {
        format!(
            "[auth]\nresource = \"{resource}\"\napi_keys = [{{ subject = \"ci\", sha256 = \"{}\", scopes = [] }}]\n",
            "ab".repeat(32)
        )
    };
    let north = "https://mcp.example/t/north/mcp";
    std::fs::write(tenants.join("north").join("tenant.toml"), auth(north)).unwrap();
    let (server, _admin) = Admin::serve(&dir, &["--tenants", tenants.to_str().unwrap()]);
    std::fs::write(tenants.join("north").join("tenant.toml"), "colour = 1\n").unwrap();
    server.wait_for_log("keeping the tenant's configuration in force");
    std::fs::write(tenants.join("south").join("tenant.toml"), auth(north)).unwrap();
    server.wait_for_log(&format!("resource {north} is still tenant north's"));
    let base = format!("http://{}", server.authority());
    let south: Value = reqwest::get(format!("{base}/.well-known/oauth-protected-resource/t/south/mcp"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap_or_default();
    assert_ne!(south["resource"], north, "south took north's resource: {south}");
    let _ = std::fs::remove_dir_all(dir);
}
