//! Protocol shapes across revisions: golden fixtures, 2025-03-26 batches, 2026-07-28
//! input-required round trips with sealed state, legacy bridging, sessions.

use serde_json::{Value, json};

use crate::support::{Client, Server, StdioServer, all_plugins, first_text, root};

fn server() -> Server {
    let args = all_plugins();
    Server::http(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// Compare with `tests/fixtures/<name>.json`; set CAPSULE_BLESS=1 to rewrite the fixture.
fn golden(name: &str, actual: &Value) {
    let path = root().join("tests").join("fixtures").join(format!("{name}.json"));
    let pretty = serde_json::to_string_pretty(actual).unwrap() + "\n";
    if std::env::var_os("CAPSULE_BLESS").is_some() {
        std::fs::write(&path, &pretty).unwrap();
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (CAPSULE_BLESS=1 writes it)", path.display()));
    assert_eq!(
        serde_json::from_str::<Value>(&expected).unwrap(),
        *actual,
        "{name} differs from its golden fixture {}; actual:\n{pretty}",
        path.display()
    );
}

/// Fields arrive with revisions, and clients (the conformance suite too) check the wire
/// against their revision's schema: an older session is sent none of a later one's fields.
#[tokio::test]
async fn each_revision_gets_only_the_fields_its_schema_has() {
    let server = server();
    let keys = |value: &Value| -> Vec<String> {
        let mut keys: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    };
    for (version, annotations, since_06_18, since_11_25) in [
        ("2024-11-05", false, false, false),
        ("2025-03-26", true, false, false),
        ("2025-06-18", true, true, false),
        ("2025-11-25", true, true, true),
    ] {
        let mut client = Client::new(&server.url);
        let init = client.initialize(version, json!({})).await;
        assert_eq!(init["capabilities"].get("completions").is_some(), annotations, "{version}: {init}");
        let info = &init["serverInfo"];
        assert_eq!(info.get("title").is_some(), since_06_18, "{version}: {info}");
        assert_eq!(info.get("description").is_some(), since_11_25, "{version}: {info}");
        let tools = client.request(1, "tools/list", json!({})).await;
        let evaluate = tools["result"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == "evaluate").unwrap();
        let mut expected = vec!["description", "inputSchema", "name"];
        if annotations {
            expected.push("annotations");
        }
        if since_06_18 {
            expected.extend(["outputSchema", "title"]);
        }
        expected.sort();
        assert_eq!(keys(evaluate), expected, "{version}: {evaluate}");
        let call =
            client.request(2, "tools/call", json!({"name": "evaluate", "arguments": {"expression": "1+2"}})).await;
        let result = &call["result"];
        assert_eq!(result.get("structuredContent").is_some(), since_06_18, "{version}: {call}");
        assert_eq!(result["isError"], false, "{version}: {call}");
        // A progress report's message arrived in 2025-03-26.
        let progress = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
            "name": "test_tool_with_progress", "arguments": {}, "_meta": {"progressToken": "p"}}});
        let mut stream = client.stream(&progress).await;
        let mut reports = 0;
        while let Some(message) = stream.next_message().await {
            if message["method"] == "notifications/progress" {
                assert_eq!(message["params"].get("message").is_some(), annotations, "{version}: {message}");
                reports += 1;
            }
            if message["id"] == 4 {
                break;
            }
        }
        assert!(reports > 0, "{version}: no progress reported");
    }
}

#[tokio::test]
async fn initialize_and_lists_match_golden_fixtures() {
    let server = Server::http(&[]);
    let mut client = Client::new(&server.url);
    let init = client.initialize("2025-11-25", json!({})).await;
    golden("initialize-2025-11-25", &init);
    golden("tools-list-bundled", &client.request(1, "tools/list", json!({})).await["result"]);
    golden("prompts-list-bundled", &client.request(2, "prompts/list", json!({})).await["result"]);
    golden("templates-list-bundled", &client.request(3, "resources/templates/list", json!({})).await["result"]);
    let reply = Client::new(&server.url).modern(4, "server/discover", json!({}), json!({})).await;
    golden("discover-2026-07-28", &reply.response(4)["result"]);
}

#[tokio::test]
async fn every_revision_negotiates() {
    let server = Server::http(&[]);
    for version in ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"] {
        let mut client = Client::new(&server.url);
        let init = client.initialize(version, json!({})).await;
        assert_eq!(init["protocolVersion"], version);
        let result = client.request(1, "tools/call", json!({"name": "add", "arguments": {"a": 1, "b": 1}})).await;
        assert_eq!(first_text(&result["result"]), "2", "{version}: {result}");
        let result = &result["result"];
        let new_fields = ["resultType", "_meta"].iter().any(|field| result.get(field).is_some());
        assert!(!new_fields, "{version} must not see 2026 fields: {result}");
    }
    // A client asking for an unknown version gets the newest one with a handshake.
    let mut client = Client::new(&server.url);
    let init = client.initialize("1999-01-01", json!({})).await;
    assert_eq!(init["protocolVersion"], "2025-11-25");
}

#[tokio::test]
async fn batches_are_served_on_2025_03_26_only() {
    let server = Server::http(&[]);
    let mut client = Client::new(&server.url);
    client.initialize("2025-03-26", json!({})).await;
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 20, "b": 22}}},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}},
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
        {"jsonrpc": "2.0", "id": 3}
    ]);
    let reply = client.post(&batch).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.messages.len(), 3, "one response per request: {:?}", reply.messages);
    assert_eq!(first_text(&reply.response(1)["result"]), "42");
    assert_eq!(reply.response(2)["result"], json!({}));
    assert_eq!(reply.response(3)["error"]["code"], -32600);

    // A batch is served whole, so its length is capped (256 by default): one over is refused
    // whole, with one error, and the session goes on.
    let pings =
        |n: u64| json!((1..=n).map(|id| json!({"jsonrpc": "2.0", "id": id, "method": "ping"})).collect::<Vec<_>>());
    let long = client.post(&pings(257)).await;
    assert_eq!(long.status, 400, "{}", long.body);
    assert_eq!(long.messages.len(), 1, "{}", long.body);
    assert_eq!(long.messages[0]["error"]["code"], -32600);
    let message = long.messages[0]["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("at most 256 messages; this one holds 257"), "{message}");
    assert_eq!(client.post(&pings(256)).await.messages.len(), 256);

    let mut newer = Client::new(&server.url);
    newer.initialize("2025-06-18", json!({})).await;
    let rejected = newer.post(&batch).await;
    assert_eq!(rejected.status, 400, "{}", rejected.body);
    assert_eq!(rejected.messages[0]["error"]["code"], -32600);

    // Without a session there is nothing a batch could belong to; the error says what to do.
    let sessionless = Client::new(&server.url).post(&batch).await;
    assert_eq!(sessionless.status, 400, "{}", sessionless.body);
    let message = sessionless.messages[0]["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("send initialize"), "{message}");
}

#[test]
fn stdio_batches_on_2025_03_26() {
    let mut stdio = StdioServer::start();
    stdio.initialize("2025-03-26");
    stdio.send(&json!([
        {"jsonrpc": "2.0", "id": "a", "method": "tools/call", "params": {"name": "add", "arguments": {"a": 1, "b": 2}}},
        {"jsonrpc": "2.0", "id": "b", "method": "ping"},
        {"jsonrpc": "2.0", "id": "c"}
    ]));
    let answers = stdio.read();
    let answers = answers.as_array().expect("a batch is answered with an array");
    assert_eq!(answers.len(), 3, "{answers:?}");
    let by_id =
        |id: &str| answers.iter().find(|m| m["id"] == json!(id)).unwrap_or_else(|| panic!("no answer for {id}"));
    assert_eq!(first_text(&by_id("a")["result"]), "3");
    assert_eq!(by_id("b")["result"], json!({}));
    assert_eq!(by_id("c")["error"]["code"], -32600);
    stdio.finish();

    let mut stdio = StdioServer::start_with(&["--max-batch", "2"]);
    stdio.initialize("2025-03-26");
    let ping = |id: u64| json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
    stdio.send(&json!([ping(1), ping(2), ping(3)]));
    let refused = stdio.read();
    assert_eq!(refused["error"]["code"], -32600, "one error for the whole batch: {refused}");
    assert_eq!(refused["id"], json!(null));
    stdio.send(&json!([ping(4), ping(5)]));
    assert_eq!(stdio.read().as_array().map(Vec::len), Some(2), "the connection goes on");
    stdio.finish();
}

#[tokio::test]
async fn tools_only_components_without_the_sdk_load() {
    let plugin = crate::support::plugins().join("testing").join("tools-only.wasm");
    let server = Server::http(&["--plugin", &plugin.display().to_string()]);
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    let tools = client.request(1, "tools/list", json!({})).await;
    assert_eq!(tools["result"]["tools"][0]["name"], "shout", "{tools}");
    let shout = client.request(2, "tools/call", json!({"name": "shout", "arguments": {"text": "hi"}})).await;
    assert_eq!(first_text(&shout["result"]), "HI");
    let resources = client.request(3, "resources/list", json!({})).await;
    assert_eq!(resources["result"]["resources"], json!([]), "{resources}");
    let prompts = client.request(4, "prompts/list", json!({})).await;
    assert_eq!(prompts["result"]["prompts"], json!([]), "{prompts}");
}

#[tokio::test]
async fn resources_only_and_prompts_only_components_load() {
    let testing = crate::support::plugins().join("testing");
    let resources = testing.join("resources-only.wasm").display().to_string();
    let prompts = testing.join("prompts-only.wasm").display().to_string();
    let server = Server::http(&["--plugin", &resources, "--plugin", &prompts]);
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;

    let tools = client.request(1, "tools/list", json!({})).await;
    assert_eq!(tools["result"]["tools"], json!([]), "{tools}");
    let call = client.request(2, "tools/call", json!({"name": "shout", "arguments": {}})).await;
    assert_eq!(call["error"]["code"], -32602, "an unknown tool is a protocol error: {call}");

    let listed = client.request(3, "resources/list", json!({})).await;
    assert_eq!(listed["result"]["resources"][0]["uri"], "memo://today", "{listed}");
    let templates = client.request(4, "resources/templates/list", json!({})).await;
    assert_eq!(templates["result"]["resourceTemplates"][0]["uriTemplate"], "memo://day/{day}", "{templates}");
    let today = client.request(5, "resources/read", json!({"uri": "memo://today"})).await;
    assert_eq!(today["result"]["contents"][0]["text"], "water the plants", "{today}");
    let monday = client.request(6, "resources/read", json!({"uri": "memo://day/monday"})).await;
    assert_eq!(monday["result"]["contents"][0]["text"], "nothing planned for monday", "{monday}");

    let prompts = client.request(7, "prompts/list", json!({})).await;
    assert_eq!(prompts["result"]["prompts"][0]["name"], "greet", "{prompts}");
    let greet = client.request(8, "prompts/get", json!({"name": "greet", "arguments": {"name": "Ada"}})).await;
    assert_eq!(greet["result"]["messages"][0]["content"]["text"], "Say hello to Ada.", "{greet}");
    // Neither exports completion: the host answers with no suggestions rather than failing.
    for (id, reference, argument) in [
        (9, json!({"type": "ref/prompt", "name": "greet"}), "name"),
        (10, json!({"type": "ref/resource", "uri": "memo://day/{day}"}), "day"),
    ] {
        let complete = client
            .request(id, "completion/complete", json!({"ref": reference, "argument": {"name": argument, "value": "m"}}))
            .await;
        assert_eq!(complete["result"]["completion"]["values"], json!([]), "{complete}");
    }
}

#[tokio::test]
async fn deleted_sessions_are_gone() {
    let server = Server::http(&[]);
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    let session = client.session.clone().unwrap();
    assert!(session.bytes().all(|b| (0x21..=0x7e).contains(&b)), "session ids are visible ASCII");
    let delete = async |session: &[u8]| {
        reqwest::Client::new()
            .delete(&server.url)
            .header("mcp-session-id", reqwest::header::HeaderValue::from_bytes(session).unwrap())
            .header("mcp-protocol-version", "2025-11-25")
            .send()
            .await
            .unwrap()
            .status()
    };
    // Two session ids name no one session, whatever a proxy in front made of them: 400 for
    // POST, GET and DELETE alike, and the session named first lives on.
    let other = [("mcp-session-id", "0123456789abcdef0123456789abcdef")];
    let twice = client.post_raw(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string(), &other).await;
    assert!(twice.status == 400 && twice.body.contains("more than one Mcp-Session-Id"), "{}", twice.body);
    let http = reqwest::Client::new();
    let get = http.get(&server.url).header("accept", "text/event-stream").header("mcp-session-id", &session);
    assert_eq!(get.header("mcp-session-id", other[0].1).send().await.unwrap().status(), 400, "GET");
    let end = http.delete(&server.url).header("mcp-session-id", &session).header("mcp-session-id", other[0].1);
    assert_eq!(end.send().await.unwrap().status(), 400, "DELETE");
    assert_eq!(client.post(&json!({"jsonrpc": "2.0", "id": 2, "method": "ping"})).await.status, 200);
    assert_eq!(delete(session.as_bytes()).await, 204);
    let after = client.post(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).await;
    assert_eq!(after.status, 404, "{}", after.body);
    // An ended or never-issued session cannot be ended again.
    assert_eq!(delete(session.as_bytes()).await, 404, "a second DELETE of an ended session");
    assert_eq!(delete(b"no-such-session").await, 404, "DELETE of a session never issued");
    assert_eq!(delete(b"\xff\xfe").await, 404, "a session id that is not text names no session there is");
}

const ALL_CAPS: fn() -> Value = || json!({"elicitation": {"form": {}}, "sampling": {}, "roots": {}});

/// Replicas behind a load balancer share the key that seals `requestState`
/// (`--state-key-file`): a round one replica asked for is answered at another, and a replica
/// with another key refuses it. Each logs the key's fingerprint, the same for the same bytes,
/// and warns of a key file other users can read.
#[tokio::test]
async fn replicas_sharing_a_state_key_continue_each_other_s_rounds() {
    use std::os::unix::fs::PermissionsExt;
    let dir = crate::support::Scratch::new("state-key");
    let conformance = crate::support::plugins().join("conformance.wasm");
    let conformance = conformance.to_str().unwrap();
    let key = |name: &str, bytes: &[u8], mode: u32| {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let (shared, readable, other) =
        (key("shared.key", &[7; 32], 0o600), key("readable.key", &[7; 32], 0o644), key("other.key", &[8; 32], 0o600));
    let replica = |key: &str| Server::http(&["--plugin", conformance, "--state-key-file", key]);
    let (a, b, c) = (replica(&shared), replica(&readable), replica(&other));
    let fingerprint = |server: &Server| {
        let log = server.wait_for_log("requestState is sealed with the key");
        let at = log.find("(fingerprint ").unwrap_or_else(|| panic!("no fingerprint logged:\n{log}"));
        log[at..].split_whitespace().nth(1).unwrap().to_owned()
    };
    assert_eq!(fingerprint(&a), fingerprint(&b), "the same bytes");
    assert_ne!(fingerprint(&a), fingerprint(&c), "other bytes");
    // Not the key's own digest, which is HMAC's signing key for a key past 64 bytes.
    let digest = <sha2::Sha256 as sha2::Digest>::digest([7u8; 32]);
    let plain: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    assert!(!fingerprint(&a).starts_with(&plain), "{plain}");
    assert!(!a.log().contains("can be read by other users"), "{}", a.log());
    assert!(b.log().contains("the state key file") && b.log().contains("`chmod 600` it"), "{}", b.log());
    for secret in ["\u{7}\u{7}\u{7}", "0707070707"] {
        assert!(!b.log().contains(secret), "the key itself is never logged");
    }

    let tool = "test_input_required_result_multi_round";
    let first = Client::new(&a.url).modern(1, "tools/call", json!({"name": tool, "arguments": {}}), ALL_CAPS()).await;
    let state = first.response(1)["result"]["requestState"].as_str().expect("input_required state").to_owned();
    let retry = json!({"name": tool, "arguments": {}, "requestState": state,
        "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Alice"}}}});
    let elsewhere = Client::new(&c.url).modern(2, "tools/call", retry.clone(), ALL_CAPS()).await;
    assert_eq!(elsewhere.response(2)["error"]["code"], -32602, "another key: {}", elsewhere.body);
    let second = Client::new(&b.url).modern(3, "tools/call", retry, ALL_CAPS()).await;
    let second = &second.response(3)["result"];
    assert_eq!(second["resultType"], "input_required", "the same key, another replica: {second}");
    let state = second["requestState"].as_str().unwrap();
    let last = json!({"name": tool, "arguments": {}, "requestState": state,
        "inputResponses": {"favorite_color": {"action": "accept", "content": {"color": "blue"}}}});
    let third = Client::new(&a.url).modern(4, "tools/call", last, ALL_CAPS()).await;
    assert_eq!(first_text(&third.response(4)["result"]), "Alice likes blue", "{}", third.body);

    // A key file that cannot be one stops the start, saying why.
    let short = key("short.key", &[7; 16], 0o600);
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["serve", "--listen", "127.0.0.1:0", "--plugin", conformance, "--state-key-file", &short])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && log.contains("state key") && log.contains("short.key"), "{log}");
}

#[tokio::test]
async fn input_required_round_trip_with_sealed_state() {
    let server = server();
    let client = Client::new(&server.url);
    let tool = "test_input_required_result_multi_round";
    let first = client.modern(1, "tools/call", json!({"name": tool, "arguments": {}}), ALL_CAPS()).await;
    let first = first.response(1)["result"].clone();
    assert_eq!(first["resultType"], "input_required", "{first}");
    assert_eq!(first["inputRequests"]["user_name"]["method"], "elicitation/create", "{first}");
    let state = first["requestState"].as_str().unwrap().to_owned();

    // Tampering is detected: the plugin never sees forged state.
    let tampered = client
        .modern(
            2,
            "tools/call",
            json!({"name": tool, "arguments": {}, "requestState": format!("{state}x"),
            "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Mallory"}}}}),
            ALL_CAPS(),
        )
        .await;
    assert_eq!(tampered.response(2)["error"]["code"], -32602, "{}", tampered.body);

    // State is bound to the tool it was issued for.
    let elsewhere = client
        .modern(
            3,
            "tools/call",
            json!({"name": "test_input_required_result_request_state", "arguments": {},
            "requestState": state, "inputResponses": {}}),
            ALL_CAPS(),
        )
        .await;
    assert_eq!(elsewhere.response(3)["error"]["code"], -32602, "{}", elsewhere.body);

    // And to its arguments (SEP-2322's digest of the salient params): a retry is the same
    // request, spelled however the client likes, not another one.
    let reargued = client
        .modern(
            31,
            "tools/call",
            json!({"name": tool, "arguments": {"target": "/etc"}, "requestState": state,
            "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Alice"}}}}),
            ALL_CAPS(),
        )
        .await;
    assert_eq!(reargued.response(31)["error"]["code"], -32602, "{}", reargued.body);

    let second = client
        .modern(
            4,
            "tools/call",
            json!({"name": tool, "arguments": {}, "requestState": state,
            "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Alice"}}}}),
            ALL_CAPS(),
        )
        .await;
    let second = second.response(4)["result"].clone();
    assert_eq!(second["resultType"], "input_required", "{second}");
    let state2 = second["requestState"].as_str().unwrap().to_owned();
    assert_ne!(state2, state);
    let third = client
        .modern(
            5,
            "tools/call",
            json!({"name": tool, "arguments": {}, "requestState": state2,
            "inputResponses": {"favorite_color": {"action": "accept", "content": {"color": "blue"}}}}),
            ALL_CAPS(),
        )
        .await;
    let third = third.response(5)["result"].clone();
    assert_eq!(third["resultType"], "complete", "{third}");
    assert_eq!(first_text(&third), "Alice likes blue");

    // Each state is good for one retry: replayed, even by its own caller with the same
    // request, it is refused (SEP-2322's single use), and the refusal says why.
    for (id, state, key, answer) in
        [(6, &state, "user_name", json!({"name": "Alice"})), (7, &state2, "favorite_color", json!({"color": "red"}))]
    {
        let replayed = client
            .modern(
                id,
                "tools/call",
                json!({"name": tool, "arguments": {}, "requestState": state,
                "inputResponses": {key: {"action": "accept", "content": answer}}}),
                ALL_CAPS(),
            )
            .await;
        let error = &replayed.response(id)["error"];
        assert_eq!(error["code"], -32602, "{}", replayed.body);
        assert!(error["message"].as_str().unwrap().contains("used already"), "{error}");
    }
}

#[tokio::test]
async fn plugins_learn_the_tenant_and_that_nobody_was_authenticated() {
    let server = server();
    let reply =
        Client::new(&server.url).modern(1, "tools/call", json!({"name": "whoami", "arguments": {}}), json!({})).await;
    assert_eq!(
        reply.response(1)["result"]["structuredContent"],
        json!({"tenant": "default", "principal": null}),
        "{}",
        reply.body
    );
}

#[tokio::test]
async fn missing_client_capability_is_reported() {
    let server = server();
    let reply = Client::new(&server.url)
        .modern(1, "tools/call", json!({"name": "test_missing_capability", "arguments": {}}), json!({}))
        .await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    let error = &reply.response(1)["error"];
    assert_eq!(error["code"], -32021, "{error}");
    assert_eq!(error["data"]["requiredCapabilities"], json!({"sampling": {}}));
}

/// Elicitation arrived in 2025-06-18: an older session that declares it anyway is sent no
/// `elicitation/create` (its revision has no such request), and the plugin sees no such
/// capability.
#[tokio::test]
async fn sessions_before_2025_06_18_are_never_asked_to_elicit() {
    let server = server();
    for version in ["2024-11-05", "2025-03-26"] {
        let mut client = Client::new(&server.url);
        client.initialize(version, json!({"elicitation": {}, "sampling": {}, "roots": {}})).await;
        let reply = client
            .post(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "test_elicitation", "arguments": {"message": "m"}}}))
            .await;
        assert!(!reply.body.contains("elicitation/create"), "{version}: {}", reply.body);
        let error = &reply.response(2)["error"];
        assert_eq!(error["code"], -32021, "{version}: {}", reply.body);
        assert_eq!(error["data"]["requiredCapabilities"], json!({"elicitation": {"form": {}}}), "{version}");
    }
}

/// A 2025-06-18 client is sent forms its revision defines: a titled single choice as `enum`
/// and `enumNames`, and a form with a multi-select (2025-11-25's) not at all: the plugin
/// hears why (a strict 2025-06-18 client refused the whole request, and could not have
/// answered a list). A 2025-11-25 client gets the form as written.
#[tokio::test]
async fn elicitation_forms_are_sent_as_the_client_s_revision_defines_them() {
    let server = server();
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "test_elicitation_sep1330_enums", "arguments": {}}});
    let mut older = Client::new(&server.url);
    older.initialize("2025-06-18", json!({"elicitation": {}})).await;
    let reply = older.post(&call).await;
    assert!(!reply.body.contains("elicitation/create"), "{}", reply.body);
    let text = first_text(&reply.response(2)["result"]);
    assert!(text.contains("is a multi-select, which this client's revision (2025-06-18) cannot show"), "{text}");
    let mut newer = Client::new(&server.url);
    newer.initialize("2025-11-25", json!({"elicitation": {}})).await;
    let mut stream = newer.stream(&call).await;
    let request = stream.next_message().await.expect("the elicitation request");
    assert_eq!(request["method"], "elicitation/create", "{request}");
    let properties = &request["params"]["requestedSchema"]["properties"];
    assert_eq!(properties["titledMulti"]["type"], "array", "{request}");
    assert!(properties["titledSingle"]["oneOf"].is_array(), "{request}");
}

#[tokio::test]
async fn legacy_sessions_get_real_server_requests() {
    let server = server();
    let mut client = Client::new(&server.url);
    client.initialize("2025-06-18", json!({"roots": {"listChanged": true}})).await;
    // The tool asks for roots: the host must send roots/list on the call's own SSE stream,
    // take the answer the client POSTs back, and call the plugin again.
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "test_input_required_result_list_roots", "arguments": {}}});
    let mut stream = client.stream(&call).await;
    let request = stream.next_message().await.expect("a roots/list request before the result");
    assert_eq!(request["method"], "roots/list", "{request}");
    let answer = client
        .post(&json!({"jsonrpc": "2.0", "id": request["id"],
        "result": {"roots": [{"uri": "file:///tmp/project", "name": "project"}]}}))
        .await;
    assert!(answer.status < 300, "answer: {} {}", answer.status, answer.body);
    let response = stream.next_message().await.expect("the tool result");
    assert_eq!(first_text(&response["result"]), "Roots: file:///tmp/project", "{response}");
}

/// A plugin that really changes its tool list (misfit's `add_tool`) is heard on
/// `subscriptions/listen` streams.
#[tokio::test]
async fn plugin_list_changes_reach_listen_streams() {
    let dir = crate::support::scratch_dir("listen-relist");
    std::fs::create_dir_all(dir.join("state")).unwrap();
    let grant = format!("dirs = [{{ path = {:?}, guest = \"/state\", write = true }}]\n", dir.join("state"));
    let server = crate::hardening::serve_misfit(&crate::hardening::misfit_policy(&dir, "", &grant));
    let client = Client::new(&server.url);
    let listen = {
        let client = client.clone();
        tokio::spawn(async move {
            let mut params = json!({"notifications": {"toolsListChanged": true}});
            params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}});
            let response = reqwest::Client::new()
                .post(&client.url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2026-07-28")
                .header("mcp-method", "subscriptions/listen")
                .body(
                    json!({"jsonrpc": "2.0", "id": 77, "method": "subscriptions/listen", "params": params}).to_string(),
                )
                .send()
                .await
                .unwrap();
            let mut body = response.bytes_stream();
            let mut seen = String::new();
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
            use futures::StreamExt;
            while let Ok(Some(Ok(chunk))) = tokio::time::timeout_at(deadline, body.next()).await {
                seen.push_str(&String::from_utf8_lossy(&chunk));
                if seen.contains("notifications/tools/list_changed") {
                    break;
                }
            }
            seen
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let trigger = client.modern(1, "tools/call", json!({"name": "add_tool", "arguments": {}}), json!({})).await;
    assert_eq!(first_text(&trigger.response(1)["result"]), "added a tool");
    let seen = listen.await.unwrap();
    assert!(seen.contains("notifications/subscriptions/acknowledged"), "{seen}");
    assert!(seen.contains("notifications/tools/list_changed"), "{seen}");
    assert!(seen.contains("io.modelcontextprotocol/subscriptionId"), "{seen}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Hot swap: a watched directory gains, breaks and loses plugins while the server runs.
#[tokio::test]
async fn watched_plugins_are_swapped_in_place() {
    let dir = std::env::temp_dir().join(format!("capsule-test-watch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let plugins = crate::support::plugins();
    std::fs::copy(plugins.join("calc.wasm"), dir.join("calc.wasm")).unwrap();
    let server = Server::http(&["--plugins", dir.to_str().unwrap()]);
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    let tool_names = async |client: &Client| -> Vec<String> {
        let list = client.request(90, "tools/list", json!({})).await;
        list["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
    };
    let eventually = async |client: &Client, pred: &dyn Fn(&[String]) -> bool| {
        for _ in 0..100 {
            if pred(&tool_names(client).await) {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        false
    };
    // Added: its tools appear, and a listen stream hears about it.
    let mut listen = Client::new(&server.url).stream_modern(json!({"notifications": {"toolsListChanged": true}})).await;
    assert_eq!(listen.next_message().await.unwrap()["method"], "notifications/subscriptions/acknowledged");
    std::fs::copy(plugins.join("textkit.wasm"), dir.join("textkit.wasm")).unwrap();
    assert!(eventually(&client, &|names| names.iter().any(|n| n == "json_query")).await, "textkit was not swapped in");
    let heard = listen.next_message().await.unwrap();
    assert_eq!(heard["method"], "notifications/tools/list_changed", "{heard}");
    // Broken: the working version keeps serving.
    std::fs::write(dir.join("textkit.wasm"), b"\0asm garbage").unwrap();
    assert!(server.wait_for_log("still serving the previous version").contains("still serving the previous version"));
    let hash = client.request(2, "tools/call", json!({"name": "hash", "arguments": {"text": "x"}})).await;
    assert_eq!(hash["result"]["isError"], false, "{hash}");
    // Removed: its tools go.
    std::fs::remove_file(dir.join("calc.wasm")).unwrap();
    assert!(eventually(&client, &|names| !names.iter().any(|n| n == "add")).await, "calc was not removed");
    let gone = client.request(3, "tools/call", json!({"name": "add", "arguments": {"a": 1, "b": 1}})).await;
    assert_eq!(gone["error"]["code"], -32602, "{gone}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Ending a session stops what it has running: a call stalled in its plugin is cancelled by
/// the DELETE rather than left to its wall-clock limit, holding its instance and its slot,
/// and, like any cancelled request, is not answered.
#[tokio::test]
async fn deleting_a_session_cancels_its_running_calls() {
    let args = crate::support::all_plugins();
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.extend(["--call-timeout", "600000"]);
    let server = Server::http(&args);
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    let stalled = client.spawn_call(2, "stall", json!({}));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(client.end_session().await, 204);
    let reply = tokio::time::timeout(std::time::Duration::from_secs(20), stalled)
        .await
        .expect("the call ends with its session")
        .unwrap();
    // Its POST ends, answering nothing: the client ended the session it belonged to.
    assert!(reply.messages.is_empty(), "{}", reply.body);
    assert_eq!(reply.headers["content-type"], "text/event-stream", "{}", reply.body);
}
