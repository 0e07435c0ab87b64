//! Capsule's own wire: stdio framing, batches and revision rules, over real pipes.

use serde_json::json;

use crate::support::{StdioServer, first_text};

fn call(id: serde_json::Value, a: i64, b: i64) -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "add", "arguments": {"a": a, "b": b}}})
}

#[test]
fn stdio_answers_garbage_with_null_id_errors_and_goes_on() {
    let mut stdio = StdioServer::start();
    // Before initialize, a line that is not UTF-8, one that is not JSON, and an empty batch.
    stdio.send_bytes(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\xfe\"}\n");
    let not_utf8 = stdio.read();
    assert_eq!((not_utf8["id"].clone(), not_utf8["error"]["code"].clone()), (json!(null), json!(-32700)));
    stdio.send_line("{\"jsonrpc\": \"2.0\", \"id\": 2, \"method\": \"ping\"");
    assert_eq!(stdio.read()["error"]["code"], -32700);
    stdio.send_line("[]");
    assert_eq!(stdio.read()["error"]["code"], -32600);
    stdio.send_line("{\"jsonrpc\": \"2.0\", \"id\": null, \"method\": \"ping\"}");
    assert_eq!(stdio.read()["error"]["code"], -32600, "a null id is not an id");
    // The connection still works.
    stdio.initialize("2025-06-18");
    stdio.send(&call(json!(3), 2, 3));
    assert_eq!(first_text(&stdio.read()["result"]), "5");
    stdio.finish();
}

#[test]
fn stdio_refuses_lines_over_the_limit_and_goes_on() {
    let mut stdio = StdioServer::start_with(&["--max-line-bytes", "2048"]);
    stdio.initialize("2025-06-18");
    let long =
        format!("{{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\",\"params\":{{\"pad\":\"{}\"}}}}", "x".repeat(5000));
    stdio.send_line(&long);
    let refused = stdio.read();
    assert_eq!((refused["id"].clone(), refused["error"]["code"].clone()), (json!(null), json!(-32600)));
    assert!(refused["error"]["message"].as_str().unwrap().contains("2048"), "{refused}");
    stdio.send(&call(json!(8), 1, 1));
    let answer = stdio.read();
    assert_eq!((answer["id"].clone(), first_text(&answer["result"])), (json!(8), "2".to_owned()));
    stdio.finish();
}

#[test]
fn stdio_batches_that_reuse_ids_are_answered_apart() {
    let mut stdio = StdioServer::start();
    stdio.initialize("2025-03-26");
    // Two batches in flight at once, with the same ids.
    stdio.send(&json!([call(json!(1), 1, 2), call(json!(2), 3, 4)]));
    stdio.send(&json!([call(json!(1), 10, 20), call(json!(2), 30, 40), {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}}]));
    let mut sums = Vec::new();
    for _ in 0..2 {
        let batch = stdio.read();
        let answers = batch.as_array().unwrap_or_else(|| panic!("a batch is answered with an array: {batch}"));
        assert_eq!(answers.len(), 2, "{batch}");
        let text = |id: i64| first_text(&answers.iter().find(|a| a["id"] == id).expect("each id answered")["result"]);
        sums.push((text(1), text(2)));
    }
    sums.sort();
    assert_eq!(sums, vec![("3".to_owned(), "7".to_owned()), ("30".to_owned(), "70".to_owned())]);
    stdio.finish();
}

#[test]
fn stdio_exits_cleanly_at_end_of_input_whenever_it_comes() {
    // Before anything at all.
    StdioServer::start().finish();
    // In the middle of a line: the partial line is answered, then the server exits.
    let mut stdio = StdioServer::start();
    stdio.send_bytes(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"met");
    stdio.close_input();
    assert_eq!(stdio.read()["error"]["code"], -32700);
    stdio.finish();
    // With a request still running: it is answered first.
    let mut stdio = StdioServer::start();
    stdio.initialize("2025-11-25");
    stdio.send(&call(json!(9), 4, 5));
    stdio.close_input();
    assert_eq!(first_text(&stdio.read()["result"]), "9");
    stdio.finish();
}

#[test]
fn stdio_serves_2026_requests_without_a_session() {
    let mut stdio = StdioServer::start();
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    stdio.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}}));
    let discovered = stdio.read();
    assert!(discovered["result"]["supportedVersions"].as_array().is_some_and(|v| v.contains(&json!("2026-07-28"))));
    let mut modern = call(json!(2), 6, 7);
    modern["params"]["_meta"] = meta.clone();
    stdio.send(&modern);
    let answer = stdio.read();
    assert_eq!(
        (first_text(&answer["result"]), answer["result"]["resultType"].clone()),
        ("13".into(), json!("complete"))
    );
    // Without _meta, and without initialize, a request has no revision to go by.
    stdio.send(&call(json!(3), 1, 1));
    assert_eq!(stdio.read()["error"]["code"], -32602);
    // Methods of the other era do not exist for a 2026-07-28 request.
    stdio.send(&json!({"jsonrpc": "2.0", "id": 4, "method": "ping", "params": {"_meta": meta}}));
    assert_eq!(stdio.read()["error"]["code"], -32601);
    stdio.send(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01", "io.modelcontextprotocol/clientCapabilities": {}}}}));
    assert_eq!(stdio.read()["error"]["code"], -32022);
    stdio.finish();
}
