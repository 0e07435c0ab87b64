//! Bad input of every kind gets the protocol's proper answer with a message a person can act
//! on, and the server keeps serving everyone else.

use serde_json::{Value, json};

use crate::support::{
    Client, Server, StdioServer, all_plugins, first_text, plugins, raw_connection, read_until_closed, scratch_dir,
};

fn server() -> Server {
    let mut args = all_plugins();
    args.extend([
        "--cpu-deadline".into(),
        "1000".into(),
        "--call-timeout".into(),
        "4000".into(),
        "--max-body-bytes".into(),
        "65536".into(),
    ]);
    Server::http(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

async fn session(server: &Server) -> Client {
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    client
}

#[tokio::test]
async fn malformed_json_is_a_parse_error() {
    let server = server();
    let reply = Client::new(&server.url).post_raw("{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ", &[]).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.messages[0]["error"]["code"], -32700, "{}", reply.body);
}

/// RFC 8259 lets a parser ignore a UTF-8 byte order mark before a JSON text; some writers
/// (Windows tools, editors) put one first without being asked.
#[tokio::test]
async fn a_leading_byte_order_mark_is_ignored() {
    let server = server();
    let mut client = Client::new(&server.url);
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bom", "version": "1"}}});
    let reply = client.post_raw(format!("\u{feff}{initialize}"), &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.messages[0]["result"]["protocolVersion"], "2025-11-25", "{}", reply.body);
    client.session = reply.headers.get("mcp-session-id").map(|v| v.to_str().unwrap().to_owned());
    client.version = "2025-11-25".into();
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "add", "arguments": {"a": 2, "b": 3}}});
    let reply = client.post_raw(format!("\u{feff}{call}"), &[]).await;
    assert_eq!(first_text(&reply.response(2)["result"]), "5", "{}", reply.body);
    // Only first: a mark after leading white space is not a JSON text's start.
    let reply = client.post_raw(format!(" \u{feff}{call}"), &[]).await;
    assert_eq!((reply.status, reply.messages[0]["error"]["code"].clone()), (400, json!(-32700)), "{}", reply.body);
}

#[tokio::test]
async fn request_without_method_is_an_invalid_request() {
    let server = server();
    let reply = Client::new(&server.url).post(&json!({"jsonrpc": "2.0", "id": 7, "params": {}})).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.messages[0]["error"]["code"], -32600);
    assert_eq!(reply.messages[0]["id"], 7, "the error must echo the request id");
    assert!(reply.messages[0]["error"]["message"].as_str().unwrap().contains("method"));
}

#[tokio::test]
async fn undecodable_params_are_an_invalid_request() {
    let server = server();
    let client = session(&server).await;
    let reply = client.post(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": 7})).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.messages[0]["error"]["code"], -32600, "{}", reply.body);
    assert_eq!(reply.messages[0]["id"], 5, "the error must echo the request id");
    let after = client.request(6, "tools/call", json!({"name": "echo", "arguments": {"text": "fine"}})).await;
    assert_eq!(first_text(&after["result"]), "fine");
}

/// JSON-RPC allows params by position; MCP's are always an object, and an array is refused as
/// such rather than read field by field into whatever the method takes.
#[tokio::test]
async fn params_by_position_are_invalid_params() {
    let server = server();
    let client = session(&server).await;
    for (id, method, params) in [
        (1, "tools/call", json!(["add", {"a": 1, "b": 2}])),
        (2, "tools/list", json!([])),
        (3, "resources/read", json!(["calc://x"])),
        (4, "prompts/get", json!([{"_meta": {}}, "x"])),
    ] {
        let response = client.request(id, method, params).await;
        assert_eq!(response["error"]["code"], -32602, "{method}: {response}");
        assert!(response["error"]["message"].as_str().unwrap().contains("not an array"), "{response}");
        assert!(response["error"].get("data").is_none(), "a legacy session is not told about _meta: {response}");
    }
    // Without a session, an array is no self-describing 2026-07-28 request.
    let reply =
        Client::new(&server.url).post(&json!({"jsonrpc": "2.0", "id": 5, "method": "ping", "params": [[1]]})).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert!(reply.body.contains("Session ID is required"), "{}", reply.body);
    // A stateless 2026-07-28 request by position holds no `_meta`: 400, naming what it lacks.
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}});
    let body = json!({"jsonrpc": "2.0", "id": 6, "method": "tools/list", "params": [{"_meta": meta}]});
    let headers = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/list")];
    let reply = Client::new(&server.url).post_raw(body.to_string(), &headers).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    let error = &reply.response(6)["error"];
    assert_eq!(error["code"], -32602, "{}", reply.body);
    assert!(error["data"]["missingMetadata"].is_array(), "{}", reply.body);
    let after = client.request(7, "tools/call", json!({"name": "add", "arguments": {"a": 1, "b": 2}})).await;
    assert_eq!(first_text(&after["result"]), "3");
}

#[tokio::test]
async fn unknown_method_is_method_not_found() {
    let server = server();
    let client = session(&server).await;
    let response = client.request(1, "tools/frobnicate", json!({})).await;
    assert_eq!(response["error"]["code"], -32601, "{response}");
    // Stateless 2026-07-28: 404 with the same JSON-RPC error.
    let reply = Client::new(&server.url).modern(2, "tools/frobnicate", json!({}), json!({})).await;
    assert_eq!(reply.status, 404, "{}", reply.body);
    assert_eq!(reply.response(2)["error"]["code"], -32601);
}

#[tokio::test]
async fn unknown_tool_is_a_jsonrpc_error() {
    let server = server();
    let client = session(&server).await;
    let response = client.request(1, "tools/call", json!({"name": "no_such_tool", "arguments": {}})).await;
    assert_eq!(response["error"]["code"], -32602, "{response}");
    assert!(response["error"]["message"].as_str().unwrap().contains("no_such_tool"));
    // A long name is quoted in part: the message does not grow with what the client sent.
    let long = "n".repeat(20_000);
    let response = client.request(2, "tools/call", json!({"name": long, "arguments": {}})).await;
    assert_eq!(response["error"]["code"], -32602, "{response}");
    let message = response["error"]["message"].as_str().unwrap();
    assert!(message.len() < 200 && message.ends_with("n…"), "{message}");
    let response = client.request(3, &"m".repeat(20_000), json!({})).await;
    assert_eq!(response["error"]["code"], -32601);
    assert!(response["error"]["message"].as_str().unwrap().len() < 200, "{response}");
}

#[tokio::test]
async fn arguments_failing_the_schema_are_a_tool_error() {
    let server = server();
    let client = session(&server).await;
    let response = client.request(1, "tools/call", json!({"name": "add", "arguments": {"a": "one", "b": 2}})).await;
    let result = &response["result"];
    assert_eq!(result["isError"], true, "{response}");
    let text = first_text(result);
    assert!(text.contains("Invalid arguments for tool add") && text.contains("/a"), "{text}");
    let missing = client.request(2, "tools/call", json!({"name": "add", "arguments": {"a": 1}})).await;
    assert!(first_text(&missing["result"]).contains("\"b\" is a required property"), "{missing}");
    // A large offending value is named, not echoed back.
    let big = "x".repeat(50_000);
    let huge = client.request(3, "tools/call", json!({"name": "add", "arguments": {"a": big, "b": 2}})).await;
    let text = first_text(&huge["result"]);
    assert!(text.len() < 1_000 && text.contains("/a: the value is not of type"), "{text}");
    let long_key = "k".repeat(50_000);
    let keyed =
        client.request(4, "tools/call", json!({"name": "add", "arguments": {"a": {long_key: 1}, "b": 2}})).await;
    let text = first_text(&keyed["result"]);
    assert!(text.len() < 1_000 && text.contains("/a: the value is not of type"), "{text}");
}

/// The guest gets the client's own bytes, so a key given twice would be checked against the
/// schema as one value and read by the plugin's parser (many keep the first) as another.
#[tokio::test]
async fn a_key_given_twice_in_arguments_is_a_tool_error() {
    let server = server();
    let client = session(&server).await;
    for (id, arguments) in [(1, r#"{"a":"one","b":2,"a":1}"#), (2, r#"{"a":1,"b":{"x":1,"x":2}}"#)] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"add","arguments":{arguments}}}}}"#
        );
        let reply = client.post_raw(body, &[]).await;
        let result = &reply.messages[0]["result"];
        assert_eq!(result["isError"], true, "{}", reply.body);
        let text = first_text(result);
        assert!(text.contains("Invalid arguments for tool add") && text.contains("appears twice"), "{text}");
    }
    let fine = client.request(3, "tools/call", json!({"name": "add", "arguments": {"a": 1, "b": 2}})).await;
    assert_eq!(first_text(&fine["result"]), "3", "{fine}");
}

#[tokio::test]
async fn oversized_body_is_rejected() {
    let server = server();
    let client = session(&server).await;
    let big = "x".repeat(100_000);
    let reply = client.post(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": big}}})).await;
    assert_eq!(reply.status, 413, "{}", reply.body);
    let after = client.request(2, "tools/call", json!({"name": "echo", "arguments": {"text": "small"}})).await;
    assert_eq!(first_text(&after["result"]), "small");
}

#[tokio::test]
async fn foreign_origin_and_host_are_forbidden() {
    let server = server();
    let client = Client::new(&server.url);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let origin = client.post_raw(init.to_string(), &[("origin", "http://evil.example.com")]).await;
    assert_eq!(origin.status, 403, "foreign Origin: {}", origin.body);
    let host = client.post_raw(init.to_string(), &[("host", "evil.example.com")]).await;
    assert_eq!(host.status, 403, "foreign Host: {}", host.body);
    let local = format!("http://{}", server.authority());
    let ok = client.post_raw(init.to_string(), &[("origin", local.as_str())]).await;
    assert_eq!(ok.status, 200, "local Origin: {}", ok.body);
    // Over a raw socket: a second Host header, and a foreign host in an absolute-form target
    // (which RFC 9112 says outranks the Host header).
    let twice = raw_post(&server, "/mcp", "Host: evil.example.com\r\n", &init).await;
    assert!(twice.starts_with("HTTP/1.1 400") && twice.contains("more than one Host"), "{twice}");
    let absolute = raw_post(&server, "http://evil.example.com/mcp", "", &init).await;
    assert!(absolute.starts_with("HTTP/1.1 403"), "{absolute}");
    let own = raw_post(&server, &format!("http://{}/mcp", server.authority()), "", &init).await;
    assert!(own.starts_with("HTTP/1.1 200"), "{own}");
}

/// A browser client on an allowed origin can use the endpoint: its preflight is answered and
/// it may read the answers and `Mcp-Session-Id`. Any other origin gets no CORS header.
#[tokio::test]
async fn browsers_on_allowed_origins_get_cors_and_others_do_not() {
    let app = "https://app.example.com";
    let server = Server::http(&["--allow-origin", app]);
    let http = reqwest::Client::new();
    let preflight = |origin: &'static str| {
        http.request(reqwest::Method::OPTIONS, &server.url)
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "content-type, mcp-protocol-version, mcp-param-region")
            .send()
    };
    let allowed = preflight(app).await.unwrap();
    assert_eq!(allowed.status(), 204);
    let header = |response: &reqwest::Response, name: &str| {
        response.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
    };
    assert_eq!(header(&allowed, "access-control-allow-origin"), app);
    assert!(header(&allowed, "access-control-allow-methods").contains("POST"));
    assert!(header(&allowed, "access-control-allow-headers").contains("mcp-param-region"));
    // An origin is its port too: the allowed one's default port, not any.
    for foreign in ["https://evil.example", "https://app.example.com:8443"] {
        let refused = preflight(foreign).await.unwrap();
        assert_eq!(refused.status(), 403, "{foreign}");
        assert!(refused.headers().get("access-control-allow-origin").is_none());
    }
    assert_eq!(preflight("https://[::1]:5173").await.unwrap().status(), 204, "a loopback origin over https");
    // An entry that is no origin (or no host) stops the server rather than match nothing.
    for (flag, entry) in [("--allow-origin", "https://app.example.com/mcp"), ("--allow-host", "https://mcp.example")] {
        let refused = std::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
            .args(["serve", "--listen", "127.0.0.1:0", flag, entry])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success() && said.contains(entry), "{flag} {entry}: {said}");
    }

    let client = Client::new(&server.url);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let opened = client.post_raw(init.to_string(), &[("origin", app)]).await;
    assert_eq!(opened.status, 200, "{}", opened.body);
    let read = |name: &str| opened.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    assert_eq!(read("access-control-allow-origin"), app);
    assert!(read("access-control-expose-headers").contains("Mcp-Session-Id"), "{:?}", opened.headers);
    assert!(read("vary").contains("Origin"));
    // Without Origin (every client but a browser), nothing changes.
    let plain = client.post_raw(init.to_string(), &[]).await;
    assert_eq!(plain.status, 200);
    assert!(plain.headers.get("access-control-allow-origin").is_none(), "{:?}", plain.headers);
    // An OPTIONS that is no preflight is what it was: a method the endpoint does not serve.
    let options = http.request(reqwest::Method::OPTIONS, &server.url).send().await.unwrap();
    assert_eq!(options.status(), 405);
}

/// The endpoint is HTTP/1.1: an h2c upgrade is answered over HTTP/1.1 as if not asked, and
/// an HTTP/2 prior-knowledge connection is closed; neither disturbs anyone else.
#[tokio::test]
async fn http2_is_not_served_and_http1_goes_on() {
    use tokio::io::AsyncWriteExt;
    let server = server();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let upgrade = "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n";
    let answer = raw_post(&server, "/mcp", upgrade, &init).await;
    assert!(answer.starts_with("HTTP/1.1 200") && answer.contains("\"protocolVersion\""), "{answer}");
    let mut h2 = raw_connection(&server).await;
    h2.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0").await.unwrap();
    let closed = read_until_closed(&mut h2, std::time::Duration::from_secs(5)).await;
    assert!(closed.is_some_and(|sent| !sent.contains("HTTP/2")), "an HTTP/2 connection was kept open");
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
}

/// POST `body` to `target` over a raw socket, with the server's Host and `extra` headers:
/// the whole answer.
async fn raw_post(server: &Server, target: &str, extra: &str, body: &Value) -> String {
    use tokio::io::AsyncWriteExt;
    let body = body.to_string();
    let request = format!(
        "POST {target} HTTP/1.1\r\nHost: {}\r\n{extra}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        server.authority(),
        body.len()
    );
    let mut stream = raw_connection(server).await;
    stream.write_all(request.as_bytes()).await.unwrap();
    read_until_closed(&mut stream, std::time::Duration::from_secs(5)).await.expect("the server closes the connection")
}

#[tokio::test]
async fn corrupt_wasm_and_collisions_are_load_errors_and_the_rest_is_served() {
    let dir = scratch_dir("load");
    std::fs::write(dir.join("broken.wasm"), b"\0asm\x0d\0\x01\0 definitely not a component").unwrap();
    std::fs::write(dir.join("empty.wasm"), b"").unwrap();
    std::fs::copy(plugins().join("calc.wasm"), dir.join("calc.wasm")).unwrap();
    std::fs::copy(plugins().join("calc.wasm"), dir.join("calc2.wasm")).unwrap();
    let server = Server::http(&["--plugins", &dir.display().to_string()]);
    let log = server.log();
    assert!(log.contains("broken: not a valid WebAssembly component"), "{log}");
    assert!(log.contains("empty: not a valid WebAssembly component"), "{log}");
    assert!(log.contains("tool \"add\" is provided by both plugin calc and plugin calc2"), "{log}");
    let client = session(&server).await;
    let response = client.request(1, "tools/call", json!({"name": "add", "arguments": {"a": 2, "b": 3}})).await;
    assert_eq!(first_text(&response["result"]), "5");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn stdio_answers_bad_lines_and_keeps_going() {
    let mut stdio = StdioServer::start();
    // A byte order mark at the start of the stream, as a Windows writer may send, is ignored
    // (so is a line holding nothing else).
    stdio.send_bytes("\u{feff}\n\u{feff}".as_bytes());
    stdio.initialize("2025-06-18");
    stdio.send_line("{\"jsonrpc\": \"2.0\", \"id\": 9, \"method\":");
    let parse_error = stdio.read();
    assert_eq!((parse_error["error"]["code"].clone(), parse_error["id"].clone()), (json!(-32700), Value::Null));
    stdio.send(&json!({"jsonrpc": "2.0", "id": 8}));
    let invalid = stdio.read();
    assert_eq!((invalid["error"]["code"].clone(), invalid["id"].clone()), (json!(-32600), json!(8)), "{invalid}");
    stdio.send(&json!([{"jsonrpc": "2.0", "id": 7, "method": "ping"}]));
    let batch = stdio.read();
    assert_eq!(batch["error"]["code"], -32600, "batches belong to 2025-03-26 only: {batch}");
    stdio.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "no/such/method"}));
    assert_eq!(stdio.read()["error"]["code"], -32601);
    stdio.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "evaluate", "arguments": {"expression": "1/0"}}}));
    let response = stdio.read();
    assert_eq!(response["result"]["isError"], true, "{response}");
    assert!(first_text(&response["result"]).contains("division by zero"));
    stdio.send(&json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 1, "b": 2}}}));
    assert_eq!(first_text(&stdio.read()["result"]), "3");
    stdio.finish();
}

/// A legacy request written ahead of `initialize` is refused, though `initialize` is answered
/// before that request's task runs, and whether or not the plugins had loaded when it came.
#[test]
fn stdio_requests_sent_before_initialize_are_refused() {
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let ahead = |stdio: &mut StdioServer| {
        let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
        let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "add", "arguments": {"a": 1, "b": 2}}});
        let ping = json!({"jsonrpc": "2.0", "id": 4, "method": "ping"});
        stdio.send_bytes(format!("{list}\n{call}\n{ping}\n{initialize}\n").as_bytes());
        // While plugins load, list changes may be announced between the answers.
        let mut answers = Vec::new();
        while answers.len() < 4 {
            let message = stdio.read();
            if message.get("id").is_some() {
                answers.push(message);
            }
        }
        let by_id = |id: i64| answers.iter().find(|a| a["id"] == id).unwrap_or_else(|| panic!("{answers:?}"));
        assert_eq!(by_id(1)["result"]["protocolVersion"], "2025-06-18", "{answers:?}");
        for id in [2, 3] {
            let error = &by_id(id)["error"];
            assert_eq!(error["code"], -32602, "{answers:?}");
            assert!(error["message"].as_str().unwrap().contains("send initialize first"), "{error}");
        }
        assert_eq!(by_id(4)["result"], json!({}), "ping needs no initialize");
        // Once answered, the same request is served.
        stdio.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        stdio.send(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}));
        let listed = std::iter::repeat_with(|| stdio.read()).find(|m| m.get("id").is_some()).unwrap();
        assert!(listed["result"]["tools"].is_array(), "{listed}");
    };
    let mut loaded = StdioServer::start();
    ahead(&mut loaded);
    loaded.finish();
    let all = all_plugins();
    let args: Vec<&str> = all.iter().map(String::as_str).collect();
    let (mut loading, _loaded) = StdioServer::starting(&args, &[]);
    ahead(&mut loading);
    loading.finish();
}

#[tokio::test]
async fn compiled_plugins_are_cached_and_bad_entries_are_replaced() {
    let cache = scratch_dir("cache");
    let calc = plugins().join("calc.wasm");
    let args = ["--plugin", calc.to_str().unwrap(), "--cache-dir", cache.to_str().unwrap()];
    let entries = || std::fs::read_dir(&cache).unwrap().filter_map(Result::ok).map(|e| e.path()).collect::<Vec<_>>();
    let add = async |server: &Server| {
        let client = session(server).await;
        first_text(
            &client.request(1, "tools/call", json!({"name": "add", "arguments": {"a": 2, "b": 2}})).await["result"],
        )
    };
    let first = Server::http(&args);
    assert_eq!(add(&first).await, "4");
    drop(first);
    let stored = entries();
    assert_eq!(stored.len(), 1, "one artifact per component: {stored:?}");
    let modified = std::fs::metadata(&stored[0]).unwrap().modified().unwrap();
    let second = Server::http(&args);
    assert_eq!(add(&second).await, "4");
    drop(second);
    assert_eq!(std::fs::metadata(&stored[0]).unwrap().modified().unwrap(), modified, "a warm start must not recompile");
    // A damaged artifact is discarded and the plugin compiled again.
    std::fs::write(&stored[0], b"not machine code").unwrap();
    let third = Server::http(&args);
    assert_eq!(add(&third).await, "4");
    assert!(third.log().contains("discarding unusable compile cache entry"), "{}", third.log());
    drop(third);
    assert!(std::fs::read(&stored[0]).unwrap().len() > 1000, "the entry was rewritten");
    let _ = std::fs::remove_dir_all(cache);
}

#[tokio::test]
async fn live_sessions_are_capped() {
    let server = Server::http(&["--max-sessions", "2"]);
    let mut first = Client::new(&server.url);
    first.initialize("2025-11-25", json!({})).await;
    let mut second = Client::new(&server.url);
    second.initialize("2025-11-25", json!({})).await;
    let third = Client::new(&server.url).try_initialize("2025-11-25", json!({})).await;
    assert_eq!(third.status, 503, "{}", third.body);
    assert!(third.messages[0]["error"]["message"].as_str().unwrap().contains("limit"), "{}", third.body);
    // Existing sessions and stateless clients are unaffected.
    let list = first.request(2, "tools/list", json!({})).await;
    assert!(list["result"]["tools"].as_array().is_some_and(|t| !t.is_empty()));
    let modern = Client::new(&server.url).modern(3, "tools/list", json!({}), json!({})).await;
    assert_eq!(modern.status, 200, "{}", modern.body);
}

/// A self-describing 2026-07-28 request sent inside a legacy HTTP session is refused with
/// -32020 and does not run: served there, it escaped its revision's header checks, so a
/// gateway reading `Mcp-Name` saw one tool while another ran. Alone or in a 2025-03-26 batch.
#[tokio::test]
async fn a_2026_request_inside_a_session_is_refused() {
    let server = server();
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}});
    let call = |id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "add", "arguments": {"a": 1, "b": 2}, "_meta": meta}})
    };
    let mismatched = [("mcp-method", "tools/list"), ("mcp-name", "upper")];
    let mut client = Client::new(&server.url);
    client.initialize("2025-06-18", json!({})).await;
    let reply = client.post_raw(call(2).to_string(), &mismatched).await;
    let error = &reply.response(2)["error"];
    assert_eq!(error["code"], -32020, "{}", reply.body);
    assert!(error["message"].as_str().unwrap().contains("belongs to no session"), "{error}");
    // Without the 2026-07-28 `_meta` it is the session's own call.
    let own = client.request(3, "tools/call", json!({"name": "add", "arguments": {"a": 1, "b": 2}})).await;
    assert_eq!(first_text(&own["result"]), "3", "{own}");

    let mut batching = Client::new(&server.url);
    batching.initialize("2025-03-26", json!({})).await;
    let reply = batching.post_raw(json!([call(4)]).to_string(), &mismatched).await;
    assert_eq!(reply.response(4)["error"]["code"], -32020, "{}", reply.body);
    // Sent as what it is, without a session, the same mismatch is caught by the headers.
    let stateless = Client::new(&server.url);
    let reply = stateless
        .post_raw(call(5).to_string(), &[("mcp-protocol-version", "2026-07-28"), mismatched[0], mismatched[1]])
        .await;
    assert_eq!((reply.status, &reply.response(5)["error"]["code"]), (400, &json!(-32020)), "{}", reply.body);
}
