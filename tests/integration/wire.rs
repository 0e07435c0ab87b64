//! Capsule's own wire: stdio framing, batches and revision rules over real pipes, and the
//! 2026-07-28 HTTP path over real sockets.

use serde_json::{Value, json};

use crate::support::{Client, META_2026, Server, StdioServer, first_text, raw_connection, read_until_closed};

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

/// A client that sends `initialize`, `notifications/initialized` and a batch without waiting
/// for the first answer: the batch meets the revision `initialize` agreed on.
#[test]
fn stdio_a_batch_sent_right_after_initialize_is_served() {
    let mut stdio = StdioServer::start();
    stdio.send(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}));
    stdio.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    stdio.send(&json!([call(json!(1), 1, 2), call(json!(2), 3, 4)]));
    assert_eq!(stdio.read()["result"]["protocolVersion"], "2025-03-26");
    let batch = loop {
        let message = stdio.read();
        // Plugins still loading announce themselves with list_changed notifications.
        if message.get("method").is_none() {
            break message;
        }
    };
    let answers = batch.as_array().unwrap_or_else(|| panic!("a batch is answered with an array: {batch}"));
    let text = |id: i64| first_text(&answers.iter().find(|a| a["id"] == id).expect("each id answered")["result"]);
    assert_eq!((text(1), text(2)), ("3".to_owned(), "7".to_owned()));
    stdio.finish();
}

/// A batch far larger than a plugin's concurrency (32 by default) runs a few elements at a
/// time, so none of them is refused as "busy" by its own batch (here one an operator allowed
/// beyond the default cap of 256).
#[test]
fn a_big_batch_does_not_find_its_own_plugin_busy() {
    let mut stdio = StdioServer::start_with(&["--max-batch", "2000"]);
    stdio.initialize("2025-03-26");
    let batch: Vec<_> = (0..2000).map(|i| call(json!(i), i, 1)).collect();
    stdio.send(&json!(batch));
    let answers = stdio.read();
    let answers = answers.as_array().expect("an array");
    assert_eq!(answers.len(), 2000);
    for (i, answer) in answers.iter().enumerate() {
        assert_eq!(answer["id"], i, "answers keep the batch's order");
        assert_eq!(first_text(&answer["result"]), (i + 1).to_string(), "{answer}");
    }
    stdio.finish();
}

/// A client that writes requests and never reads the answers is stopped being read once
/// `--max-in-flight` requests wait to be answered, instead of the server holding every
/// answer (200,000 unread `tools/list` answers once took it past 3 GB); reading them lets it
/// go on, and every request is answered.
#[test]
fn stdio_stops_reading_a_client_that_reads_no_answers() {
    use std::io::{BufRead, Write};
    let mut stdio = StdioServer::start_with(&["--max-in-flight", "4"]);
    stdio.initialize("2025-11-25");
    let mut input = stdio.take_input();
    let count = 20_000;
    let (done, written) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let pings: String =
            (0..count).map(|id| format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"ping\"}}\n")).collect();
        let _ = done.send(input.write_all(pings.as_bytes()).is_ok());
    });
    // Pipes and queues hold a few thousand of them; the rest wait for the answers to be read.
    let stalled = written.recv_timeout(std::time::Duration::from_secs(2));
    assert!(stalled.is_err(), "the server read every request although none of its answers was read");
    let mut answered = 0;
    let mut line = String::new();
    while answered < count {
        line.clear();
        assert!(stdio.stdout_mut().read_line(&mut line).expect("read") > 0, "stdout ended after {answered} answers");
        assert!(line.contains("\"result\":{}"), "{line}");
        answered += 1;
    }
    assert_eq!(written.recv_timeout(std::time::Duration::from_secs(30)), Ok(true), "the rest was read");
    stdio.finish();
}

/// The answers waiting for a client that reads none are bounded in bytes, not only in
/// number: 300 answers of 2 MiB, never read, were all held (the writer's queue took 1,024
/// answers whatever their size); now the server stops reading with a few MiB queued, and
/// every answer still arrives once the client reads.
#[test]
fn stdio_holds_few_bytes_of_answers_for_a_client_that_reads_none() {
    use std::io::{BufRead, Write};
    let hostile = crate::support::plugins().join("testing/hostile.wasm");
    let mut stdio = StdioServer::start_with(&["--plugin", hostile.to_str().unwrap(), "--max-in-flight", "4"]);
    stdio.initialize("2025-11-25");
    let rss_mib = |pid: u32| crate::support::status_mib(pid, "VmRSS");
    let before = rss_mib(stdio.pid());
    let mut input = stdio.take_input();
    let count = 300;
    std::thread::spawn(move || {
        let calls: String = (0..count)
            .map(|id| format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"big\",\"arguments\":{{\"mib\":2}}}}}}\n"))
            .collect();
        let _ = input.write_all(calls.as_bytes());
    });
    let mut peak = 0;
    for _ in 0..30 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        peak = peak.max(rss_mib(stdio.pid()));
    }
    assert!(peak < before + 250, "{peak} MiB held for a client that reads nothing (from {before} MiB)");
    let mut answered = 0;
    let mut line = String::new();
    while answered < count {
        line.clear();
        assert!(stdio.stdout_mut().read_line(&mut line).expect("read") > 0, "stdout ended after {answered} answers");
        if line.contains("\"result\"") {
            assert!(line.len() > 2 << 20, "{}", &line[..200.min(line.len())]);
            answered += 1;
        }
    }
    stdio.finish();
}

/// Every log and progress message within a call's budget reaches a client that reads them:
/// a call that logs faster than its messages are forwarded lost all but 256 of them to a full
/// queue. Past the budget (1,000 messages a call) the rest are dropped.
#[test]
fn stdio_a_chatty_call_s_messages_arrive_up_to_its_budget() {
    let hostile = crate::support::plugins().join("testing/hostile.wasm");
    let mut stdio = StdioServer::start_with(&["--plugin", hostile.to_str().unwrap()]);
    stdio.initialize("2025-11-25");
    stdio.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": {"level": "debug"}}));
    while stdio.read()["id"] != 2 {}
    for (id, count, expected) in [(3, 450, (450, 450)), (4, 700, (500, 500))] {
        let token = format!("flood-{id}");
        stdio.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "flood",
            "arguments": {"count": count}, "_meta": {"progressToken": token}}}));
        let (mut logs, mut progress) = (0, 0);
        loop {
            let message = stdio.read();
            match message["method"].as_str() {
                Some("notifications/message") => logs += 1,
                Some("notifications/progress") if message["params"]["progressToken"] == token.as_str() => progress += 1,
                _ if message["id"] == id => break,
                _ => {}
            }
        }
        assert_eq!((logs, progress), expected, "flood of {count}");
    }
    stdio.finish();
}

/// Once a request is cancelled nothing more goes out for it (a MUST on 2026-07-28 stdio): its
/// progress notifications already queued behind a backed-up output used to follow the
/// cancellation, a hundred of them after an answer the server wrote later.
#[test]
fn stdio_a_cancelled_request_sends_nothing_more() {
    let hostile = crate::support::plugins().join("testing/hostile.wasm");
    let mut stdio = StdioServer::start_with(&["--no-watch", "--plugin", hostile.to_str().unwrap()]);
    let meta = |token: Option<&str>| {
        let mut meta = json!({"io.modelcontextprotocol/protocolVersion": META_2026,
            "io.modelcontextprotocol/clientCapabilities": {}});
        if let Some(token) = token {
            meta["progressToken"] = json!(token);
        }
        meta
    };
    let flood = |id: &str, token: &str| {
        let mut meta = meta(Some(token));
        meta["io.modelcontextprotocol/logLevel"] = json!("debug");
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "flood",
            "arguments": {"count": 1000}, "_meta": meta}})
    };
    // Three floods fill the output's queue (1,024 messages), so the fourth's notifications
    // wait to be queued; then the one to cancel starts.
    for k in 0..3 {
        stdio.send(&flood(&format!("f{k}"), &format!("f{k}")));
    }
    stdio.send(&flood("c", "tok"));
    while stdio.read()["params"]["progressToken"] != "tok" {}
    std::thread::sleep(std::time::Duration::from_millis(500));
    // The cancellation is taken before the probe that follows it on the line: anything for
    // the cancelled request after the probe's answer went out after the cancellation.
    stdio.send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "c"}}));
    stdio.send(&json!({"jsonrpc": "2.0", "id": "probe", "method": "server/discover", "params": {"_meta": meta(None)}}));
    // The input stays open a while: at its end what is still queued may go unsent.
    let input = stdio.take_input();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(3));
        drop(input);
    });
    let (mut probed, mut after, mut answered) = (false, 0, false);
    let mut line = String::new();
    while {
        line.clear();
        std::io::BufRead::read_line(stdio.stdout_mut(), &mut line).unwrap() > 0
    } {
        let message: Value = serde_json::from_str(&line).unwrap();
        probed |= message["id"] == "probe";
        answered |= message["id"] == "c";
        if probed && message["params"]["progressToken"] == "tok" {
            after += 1;
        }
    }
    assert!(probed && !answered, "the probe is answered, the cancelled request not");
    // One notification may have been on its way out when the cancellation came.
    assert!(after <= 1, "{after} progress notifications of the cancelled request followed the probe's answer");
}

/// At the end of input what runs finishes and is answered, its notifications first: the
/// client may read on after closing its side.
#[test]
fn stdio_at_the_end_of_input_running_requests_send_every_notification_and_answer() {
    let hostile = crate::support::plugins().join("testing/hostile.wasm");
    let mut stdio = StdioServer::start_with(&["--no-watch", "--plugin", hostile.to_str().unwrap()]);
    const COUNT: usize = 400;
    for k in 0..3 {
        stdio.send(&json!({"jsonrpc": "2.0", "id": k, "method": "tools/call", "params": {"name": "flood",
            "arguments": {"count": COUNT}, "_meta": {"progressToken": k,
            "io.modelcontextprotocol/protocolVersion": META_2026,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/logLevel": "debug"}}}));
    }
    // 2,400 notifications are more than the output queue holds, so most are still to be
    // queued when the input ends.
    stdio.close_input();
    let (mut progress, mut logs, mut answered) = ([0; 3], 0, [false; 3]);
    let mut line = String::new();
    while {
        line.clear();
        std::io::BufRead::read_line(stdio.stdout_mut(), &mut line).unwrap() > 0
    } {
        let message: Value = serde_json::from_str(&line).unwrap();
        match message["method"].as_str() {
            Some("notifications/progress") => {
                let k = message["params"]["progressToken"].as_u64().unwrap() as usize;
                assert!(!answered[k], "progress after its request's answer: {message}");
                progress[k] += 1;
            }
            Some("notifications/message") => logs += 1,
            _ => answered[message["id"].as_u64().unwrap() as usize] = true,
        }
    }
    assert_eq!(answered, [true; 3]);
    assert_eq!(progress, [COUNT; 3], "every progress notification of every request");
    assert_eq!(logs, 3 * COUNT, "every log message of every request");
    stdio.finish();
}

/// A stdio server with the conformance plugin and one place in flight.
fn one_place_with_conformance() -> StdioServer {
    let conformance = crate::support::plugins().join("conformance.wasm");
    StdioServer::start_with(&["--no-watch", "--plugin", conformance.to_str().unwrap(), "--max-in-flight", "1"])
}

/// A request waiting on the client's answer holds no place in flight: with one place, the
/// client can still be asked something and send a request before it answers.
#[test]
fn stdio_a_request_waiting_on_the_client_holds_no_place() {
    let mut stdio = one_place_with_conformance();
    stdio.initialize_offering("2025-11-25", json!({"elicitation": {"form": {}}}));
    stdio.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "test_elicitation", "arguments": {"message": "who are you?"}}}));
    let asked = stdio.read();
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    stdio.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}));
    assert_eq!(stdio.read()["id"], 3, "the ping is served while the call waits on the client");
    stdio.send(&json!({"jsonrpc": "2.0", "id": asked["id"], "result": {
        "action": "accept", "content": {"username": "ada", "email": "ada@example.com"}}}));
    let answered = stdio.read();
    assert_eq!(answered["id"], 2, "{answered}");
    assert!(answered["result"].is_object(), "{answered}");
    stdio.finish();
}

/// A batch holds one place in flight, and gives it up while any of its elements waits on the
/// client: with one place, two elements asking the client (sampling, on 2025-03-26) and a
/// request sent before the answers are all served.
#[test]
fn stdio_a_batch_waiting_on_the_client_holds_no_place() {
    let mut stdio = one_place_with_conformance();
    stdio.initialize_offering("2025-03-26", json!({"sampling": {}}));
    let sample = |id: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "test_sampling", "arguments": {"prompt": id}}})
    };
    stdio.send(&json!([sample("a"), sample("b")]));
    let asked: Vec<Value> = (0..2).map(|_| stdio.read()).collect();
    assert!(asked.iter().all(|m| m["method"] == "sampling/createMessage"), "{asked:?}");
    stdio.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}));
    assert_eq!(stdio.read()["id"], 3, "the ping is served while the batch waits on the client");
    // The first answer lets one element go on; the batch takes its place back only once the
    // other has its answer too, so a second ping still gets through before that.
    let answer = |asked: &Value| {
        json!({"jsonrpc": "2.0", "id": asked["id"], "result": {
        "role": "assistant", "content": {"type": "text", "text": "fine"}, "model": "m"}})
    };
    stdio.send(&answer(&asked[0]));
    stdio.send(&json!({"jsonrpc": "2.0", "id": 4, "method": "ping"}));
    assert_eq!(stdio.read()["id"], 4, "the batch took its place back while an element still waited");
    stdio.send(&answer(&asked[1]));
    let answers = stdio.read();
    let answers = answers.as_array().unwrap_or_else(|| panic!("a batch is answered with an array: {answers}"));
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert!(answers.iter().all(|a| first_text(&a["result"]) == "LLM response: fine"), "{answers:?}");
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

/// stdin and stdout pipes are served through the reactor, which makes them non-blocking
/// while Capsule runs; whoever shares the pipe finds it blocking again once Capsule exits.
#[test]
fn stdio_serves_pipes_non_blocking_and_leaves_them_blocking() {
    use std::io::{BufRead, Write};
    use std::os::fd::AsFd;
    let nonblocking = |fd: std::os::fd::BorrowedFd<'_>| {
        rustix::fs::fcntl_getfl(fd).expect("fcntl").contains(rustix::fs::OFlags::NONBLOCK)
    };
    let (input, mut to_server) = std::io::pipe().expect("pipe");
    let (from_server, output) = std::io::pipe().expect("pipe");
    let shared = input.try_clone().expect("dup");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["serve", "--stdio"])
        .stdin(input)
        .stdout(output)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start capsule --stdio");
    assert!(!nonblocking(shared.as_fd()));
    to_server.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n").expect("write");
    let mut answer = String::new();
    std::io::BufReader::new(from_server).read_line(&mut answer).expect("read");
    assert!(answer.contains(r#""result""#), "{answer}");
    assert!(nonblocking(shared.as_fd()), "stdin is served through the reactor");
    drop(to_server);
    assert!(child.wait().expect("wait").success());
    assert!(!nonblocking(shared.as_fd()), "stdin is blocking again after exit");
}

fn modern_body(id: i64, method: &str, mut params: serde_json::Value) -> String {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": META_2026,
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

#[tokio::test]
async fn stateless_requests_are_answered_with_json() {
    let server = Server::http(&[]);
    let client = Client::new(&server.url);
    let reply = client.modern(1, "tools/call", json!({"name": "add", "arguments": {"a": 2, "b": 40}}), json!({})).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.headers["content-type"], "application/json");
    assert!(reply.headers.get("mcp-session-id").is_none(), "a 2026-07-28 request has no session");
    let result = &reply.response(1)["result"];
    assert_eq!((first_text(result), result["resultType"].clone()), ("42".into(), json!("complete")));
    // Every 2026-07-28 result names the server in its `_meta` (a SHOULD of the revision).
    let listed = client.modern(5, "tools/list", json!({}), json!({})).await;
    for result in [result, &listed.response(5)["result"]] {
        assert_eq!(result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "capsule", "{result}");
    }
    // Removed and unknown methods: 404 with -32601, echoing the id.
    for (id, method) in [(2, "initialize"), (3, "ping"), (4, "no/such/method")] {
        let reply = client.modern(id, method, json!({}), json!({})).await;
        assert_eq!((reply.status, reply.response(id)["error"]["code"].clone()), (404, json!(-32601)), "{method}");
    }
    // A notification is accepted and needs no answer.
    let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}});
    let headers = [("mcp-protocol-version", META_2026), ("mcp-method", "notifications/cancelled")];
    assert_eq!(client.post_raw(note.to_string(), &headers).await.status, 202);
    // Its headers are undefined in 2026-07-28: without Mcp-Method it is taken too, with a
    // wrong one it is not.
    assert_eq!(client.post_raw(note.to_string(), &headers[..1]).await.status, 202);
    let wrong = client.post_raw(note.to_string(), &[headers[0], ("mcp-method", "tools/list")]).await;
    assert_eq!(wrong.status, 400, "{}", wrong.body);
}

#[tokio::test]
async fn stateless_requests_are_refused_when_headers_or_framing_are_wrong() {
    let server = Server::http(&[]);
    let client = Client::new(&server.url);
    let call = modern_body(5, "tools/call", json!({"name": "add", "arguments": {"a": 1, "b": 1}}));
    let post = |extra: Vec<(&'static str, &'static str)>, body: String| {
        let client = client.clone();
        async move {
            let mut headers = vec![("mcp-protocol-version", META_2026)];
            headers.extend(extra);
            client.post_raw(body, &headers).await
        }
    };
    let code = |reply: &crate::support::Reply| {
        (reply.status, reply.messages[0]["error"]["code"].clone(), reply.messages[0]["id"].clone())
    };
    // SEP-2243: the standard headers must be there and agree with the body.
    let no_method = post(vec![("mcp-name", "add")], call.clone()).await;
    assert_eq!(code(&no_method), (400, json!(-32020), json!(5)));
    let wrong_name = post(vec![("mcp-method", "tools/call"), ("mcp-name", "sub")], call.clone()).await;
    assert_eq!(code(&wrong_name), (400, json!(-32020), json!(5)));
    let base64_name = post(vec![("mcp-method", "tools/call"), ("mcp-name", "=?base64?YWRk?=")], call.clone()).await;
    assert_eq!(first_text(&base64_name.response(5)["result"]), "2", "{}", base64_name.body);
    // The header and _meta name the same revision.
    let mut mismatched: serde_json::Value = serde_json::from_str(&modern_body(6, "tools/list", json!({}))).unwrap();
    mismatched["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2025-11-25");
    let mismatch = post(vec![("mcp-method", "tools/list")], mismatched.to_string()).await;
    assert_eq!(code(&mismatch), (400, json!(-32020), json!(6)));
    // _meta is required.
    let bare = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}).to_string();
    assert_eq!(code(&post(vec![("mcp-method", "tools/list")], bare).await), (400, json!(-32602), json!(7)));
    // A _meta that is no object lacks its required fields just the same, for any method.
    // An array is not read as the fields in order either.
    let listed = json!({"name": "add", "arguments": {"a": 1, "b": 2}, "_meta": ["2026-07-28", {}]});
    for (method, params) in [
        ("tools/list", json!({"_meta": 5})),
        ("tools/call", json!({"name": "add", "_meta": []})),
        ("tools/call", listed),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).to_string();
        let refused = post(vec![("mcp-method", method), ("mcp-name", "add")], body).await;
        assert_eq!(code(&refused), (400, json!(-32602), json!(7)), "{}", refused.body);
    }
    // A log level that is none is invalid params.
    let mut bogus: serde_json::Value = serde_json::from_str(&modern_body(9, "tools/list", json!({}))).unwrap();
    bogus["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!("bogus");
    let bogus = post(vec![("mcp-method", "tools/list")], bogus.to_string()).await;
    assert_eq!(code(&bogus).1, json!(-32602), "{}", bogus.body);
    // A method 2026-07-28 removed is unknown, with or without the name it used to mirror.
    let subscribe = modern_body(10, "resources/subscribe", json!({"uri": "calc://x"}));
    for extra in [
        vec![("mcp-method", "resources/subscribe")],
        vec![("mcp-method", "resources/subscribe"), ("mcp-name", "calc://x")],
    ] {
        assert_eq!(code(&post(extra, subscribe.clone()).await), (404, json!(-32601), json!(10)));
    }
    // A field of the wrong type is an invalid request, answered with the id it could read.
    let odd = json!({"jsonrpc": "2.0", "id": 13, "method": 5}).to_string();
    assert_eq!(code(&post(vec![("mcp-method", "tools/call")], odd).await), (400, json!(-32600), json!(13)));
    // No batches and no responses in this revision; garbage is a parse error. An error whose
    // request's id could not be read has none: 2026-07-28 types it a string or an integer,
    // never null (JSON-RPC 2.0's null is for the earlier revisions).
    let batch = format!("[{call}]");
    let response = json!({"jsonrpc": "2.0", "id": 8, "result": {}}).to_string();
    for (body, want) in [("{\"jsonrpc\":".to_owned(), -32700), (batch, -32600), (response, -32600)] {
        let refused = post(vec![("mcp-method", "tools/call")], body).await;
        assert_eq!(code(&refused), (400, json!(want), json!(null)));
        assert!(refused.messages[0].get("id").is_none(), "{}", refused.body);
    }
    // The transport's own checks.
    let plain =
        post(vec![("mcp-method", "tools/call"), ("mcp-name", "add"), ("content-type", "text/plain")], call.clone());
    assert_eq!(plain.await.status, 415);
    let http = reqwest::Client::new();
    let json_only = http
        .post(&server.url)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .header("mcp-protocol-version", META_2026)
        .body(call.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(json_only.status(), 406);
    // What curl and Postman send covers both types (RFC 9110); a type refused by name is not.
    for (accept, status) in [("*/*", 200), ("application/*, text/*", 200), ("application/json;q=0, */*", 406)] {
        let answered = http
            .post(&server.url)
            .header("content-type", "application/json")
            .header("accept", accept)
            .header("mcp-protocol-version", META_2026)
            .header("mcp-method", "tools/call")
            .header("mcp-name", "add")
            .body(call.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(answered.status(), status, "{accept}");
    }
    let rebound = http
        .post(&server.url)
        .header("host", "attacker.example")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", META_2026)
        .body(call.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status(), 403);
    let foreign = http
        .post(&server.url)
        .header("origin", "https://attacker.example")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", META_2026)
        .body(call)
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);
}

/// SEP-2243: a tool's `x-mcp-header` arguments travel as `Mcp-Param-*` headers too, and the
/// server holds them to the body. A mismatch is answered before anything else the call gets
/// wrong, and only the tool's own annotations are expected.
#[tokio::test]
async fn a_tool_calls_mirrored_headers_must_agree_with_its_arguments() {
    let conformance = crate::support::plugins().join("conformance.wasm");
    let server = Server::http(&["--no-watch", "--plugin", conformance.to_str().unwrap()]);
    let client = Client::new(&server.url);
    let call = |params: Value| modern_body(3, "tools/call", params);
    let echo = call(json!({"name": "test_header_param", "arguments": {"region": "eu west"}}));
    let post = |extra: Vec<(&'static str, &'static str)>, body: String| {
        let client = client.clone();
        async move {
            let mut headers = vec![("mcp-protocol-version", META_2026), ("mcp-method", "tools/call")];
            headers.extend(extra);
            client.post_raw(body, &headers).await
        }
    };
    let code = |reply: &crate::support::Reply| (reply.status, reply.messages[0]["error"]["code"].clone());
    let name = ("mcp-name", "test_header_param");
    let agreed = post(vec![name, ("mcp-param-region", "=?base64?ZXUgd2VzdA==?=")], echo.clone()).await;
    assert_eq!(first_text(&agreed.response(3)["result"]), "Region: eu west", "{}", agreed.body);
    for region in ["eu", "=?base64?ZXUgd2VzdA?=", "=?base64?!!!?="] {
        let refused = post(vec![name, ("mcp-param-region", region)], echo.clone()).await;
        assert_eq!(code(&refused), (400, json!(-32020)), "{region}: {}", refused.body);
    }
    let missing = post(vec![name], echo.clone()).await;
    assert_eq!(code(&missing), (400, json!(-32020)), "{}", missing.body);
    assert!(missing.body.contains("missing Mcp-Param-Region"), "{}", missing.body);
    let twice = post(vec![name, ("mcp-param-region", "eu west"), ("mcp-param-region", "eu west")], echo).await;
    assert_eq!(code(&twice), (400, json!(-32020)), "{}", twice.body);
    // Before the missing _meta, and before params that are not a tool call's.
    let bare = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "test_header_param", "arguments": {"region": "eu"}}});
    assert_eq!(code(&post(vec![name], bare.to_string()).await), (400, json!(-32020)));
    let odd = call(json!({"name": "test_header_param", "arguments": {"region": "eu"}, "inputResponses": 5}));
    assert_eq!(code(&post(vec![name, ("mcp-param-region", "us")], odd.clone()).await), (400, json!(-32020)));
    assert_eq!(code(&post(vec![name, ("mcp-param-region", "eu")], odd).await), (200, json!(-32602)));
    // A tool without annotations expects no such header, and an unknown tool is unknown.
    let text = call(json!({"name": "test_simple_text", "arguments": {}}));
    let plain = post(vec![("mcp-name", "test_simple_text"), ("mcp-param-region", "eu")], text).await;
    assert_eq!(plain.status, 200, "{}", plain.body);
    let unknown = call(json!({"name": "nope", "arguments": {"region": "eu"}}));
    let unknown = post(vec![("mcp-name", "nope")], unknown).await;
    assert_eq!(code(&unknown), (200, json!(-32602)), "{}", unknown.body);

    // A prompt's or resource's Mcp-Name is checked whatever else the params hold: a stray
    // field of another type beside the name once hid it, and the request was served.
    let prompt = json!({"name": "test_simple_prompt", "uri": 42});
    let read = json!({"uri": "test://static-text", "name": 42});
    for (method, params, own, other) in [
        ("prompts/get", prompt, "test_simple_prompt", "some_other_prompt"),
        ("resources/read", read, "test://static-text", "test://other"),
    ] {
        let send = |name: Option<&'static str>| {
            let (client, body) = (client.clone(), modern_body(7, method, params.clone()));
            async move {
                let mut headers = vec![("mcp-protocol-version", META_2026), ("mcp-method", method)];
                headers.extend(name.map(|name| ("mcp-name", name)));
                client.post_raw(body, &headers).await
            }
        };
        for name in [Some(other), None] {
            let refused = send(name).await;
            assert_eq!(code(&refused), (400, json!(-32020)), "{method} {name:?}: {}", refused.body);
        }
        let served = send(Some(own)).await;
        assert!(served.status == 200 && served.body.contains("\"result\""), "{method}: {}", served.body);
    }
}

/// A request that describes itself in `_meta` but names a revision that begins with
/// `initialize` is refused with -32022 naming the revisions a request can describe itself
/// with, on stdio and HTTP alike (stdio used to answer `server/discover` as 2026-07-28 and
/// `tools/list` with -32602; HTTP, with matching headers, a -32020 header mismatch).
#[tokio::test]
async fn a_self_described_request_naming_a_legacy_revision_is_told_which_it_can_name() {
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2025-11-25", "io.modelcontextprotocol/clientCapabilities": {}});
    let check = |error: &serde_json::Value| {
        assert_eq!(error["code"], -32022, "{error}");
        assert_eq!(error["data"]["requested"], "2025-11-25", "{error}");
        assert_eq!(error["data"]["supported"], json!([META_2026]), "{error}");
    };
    let mut stdio = StdioServer::start();
    for (id, method) in [(1, "server/discover"), (2, "tools/list")] {
        stdio.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"_meta": meta}}));
        check(&stdio.read()["error"]);
    }
    // A ping is answered before initialize, whatever its _meta says.
    stdio.send(&json!({"jsonrpc": "2.0", "id": 9, "method": "ping", "params": {"_meta": meta}}));
    assert_eq!(stdio.read()["result"], json!({}));
    stdio.finish();
    let server = Server::http(&[]);
    let client = Client::new(&server.url);
    for (id, method) in [(3, "server/discover"), (4, "tools/list")] {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"_meta": meta}});
        for headers in [vec![("mcp-protocol-version", "2025-11-25")], vec![]] {
            let reply = client.post_raw(body.to_string(), &headers).await;
            assert_eq!(reply.status, 400, "{}", reply.body);
            check(&reply.response(id)["error"]);
        }
    }
    // A revision none serves is answered as everywhere, with every one served.
    let mut unknown = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {"_meta": meta}});
    unknown["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let reply = client.post_raw(unknown.to_string(), &[]).await;
    let supported = &reply.response(5)["error"]["data"]["supported"];
    assert!(supported.as_array().is_some_and(|s| s.contains(&json!("2025-11-25"))), "{}", reply.body);
}

/// A revision the server does not know, earlier or later than the ones it does, is refused
/// with -32022 naming the supported ones and the request's id, whatever else the request
/// carries; GET and DELETE, which have no body to answer in, get a plain 400.
#[tokio::test]
async fn unknown_revisions_are_refused_with_the_supported_ones() {
    let server = Server::http(&[]);
    let client = Client::new(&server.url);
    for (id, version) in [(1, "2024-01-01"), (2, "2099-01-01"), (3, "draft")] {
        let mut body: serde_json::Value = serde_json::from_str(&modern_body(id, "tools/list", json!({}))).unwrap();
        body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!(version);
        let reply = client.post_raw(body.to_string(), &[("mcp-protocol-version", version)]).await;
        assert_eq!(reply.status, 400, "{version}: {}", reply.body);
        let error = &reply.response(id)["error"];
        assert_eq!(error["code"], -32022, "{version}: {}", reply.body);
        assert_eq!(error["data"]["requested"], version);
        assert!(error["data"]["supported"].as_array().unwrap().contains(&json!(META_2026)), "{}", reply.body);
    }
    // A legacy session's request with a revision it never negotiated.
    let mut legacy = Client::new(&server.url);
    legacy.initialize("2025-06-18", json!({})).await;
    legacy.version = "1999-01-01".into();
    let reply = legacy.post(&json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"})).await;
    assert_eq!((reply.status, reply.response(4)["error"]["code"].clone()), (400, json!(-32022)), "{}", reply.body);
    // Such a request is no 2026-07-28 one: an id that cannot be read is null (JSON-RPC), not
    // left out, and an answer to a server's request is refused for its revision.
    let broken = legacy.post_raw(r#"{"jsonrpc":"2.0","id":5,"method":"ping""#, &[]).await;
    assert_eq!(broken.status, 400, "{}", broken.body);
    assert_eq!(
        (&broken.messages[0]["error"]["code"], broken.messages[0].get("id")),
        (&json!(-32700), Some(&json!(null)))
    );
    let answer = legacy.post(&json!({"jsonrpc": "2.0", "id": "x", "result": {}})).await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert_eq!(
        (&answer.messages[0]["error"]["code"], answer.messages[0].get("id")),
        (&json!(-32022), Some(&json!(null)))
    );
    // The revision is refused before whatever else the request gets wrong.
    let old = legacy.post(&json!({"jsonrpc": "1.0", "id": 5, "method": "ping"})).await;
    assert_eq!(
        (&old.messages[0]["error"]["code"], &old.messages[0]["id"]),
        (&json!(-32022), &json!(5)),
        "{}",
        old.body
    );
    // A revision dated after 2026-07-28 most likely keeps its rule: an unread id is left out.
    let later =
        client.post_raw(r#"{"jsonrpc":"2.0","id":5,"method":"ping""#, &[("mcp-protocol-version", "2099-01-01")]);
    let later = later.await;
    assert_eq!((later.status, &later.messages[0]["error"]["code"]), (400, &json!(-32700)), "{}", later.body);
    assert!(later.messages[0].get("id").is_none(), "{}", later.body);
    let get = |version: &'static str| {
        let (session, url) = (legacy.session.clone().unwrap(), server.url.clone());
        async move {
            let request = reqwest::Client::new().get(url).header("accept", "text/event-stream");
            let request = request.header("mcp-session-id", session).header("mcp-protocol-version", version);
            request.send().await.unwrap().status()
        }
    };
    assert_eq!(get("2099-01-01").await, 400);
    // A revision Capsule knows, other than the session's, is let be: the official conformance
    // suite sends 2025-03-26 in its 2025-11-25 sessions.
    legacy.version = "2025-03-26".into();
    assert_eq!(legacy.post(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"})).await.status, 200);
    // Two revisions at once name none: 400.
    let body = modern_body(6, "tools/list", json!({}));
    let twice = [("mcp-protocol-version", META_2026), ("mcp-protocol-version", "2025-06-18")];
    let reply = client.post_raw(body.clone(), &twice).await;
    assert!(reply.status == 400 && reply.body.contains("more than one"), "{}: {}", reply.status, reply.body);
    // A compressed body is refused for what it is, not read as broken JSON.
    let reply = client.post_raw(body, &[("mcp-protocol-version", META_2026), ("content-encoding", "gzip")]).await;
    assert!(reply.status == 415 && reply.body.contains("Content-Encoding"), "{}: {}", reply.status, reply.body);
}

/// One SSE event, as sent: its id and its data.
struct RawEvent {
    id: Option<String>,
    data: String,
    /// Whether it had a `data` field at all: without one, parsers dispatch nothing.
    data_field: bool,
    retry: bool,
}

/// Read SSE events off a response body as they come.
struct RawEvents {
    body: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: String,
}

impl RawEvents {
    /// The session's GET, before it is sent.
    fn request(client: &Client) -> reqwest::RequestBuilder {
        reqwest::Client::new()
            .get(&client.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", client.session.as_deref().unwrap())
            .header("mcp-protocol-version", &client.version)
    }

    /// The session's GET, resuming after `last_event` if given.
    async fn get(client: &Client, last_event: Option<&str>) -> reqwest::Response {
        let mut request = RawEvents::request(client);
        if let Some(id) = last_event {
            request = request.header("last-event-id", id);
        }
        request.send().await.unwrap()
    }

    async fn open(client: &Client, last_event: Option<&str>) -> RawEvents {
        RawEvents::of(RawEvents::get(client, last_event).await)
    }

    /// POST `message` on the client's session and read its SSE answer.
    async fn post(client: &Client, message: &serde_json::Value) -> RawEvents {
        let response = reqwest::Client::new()
            .post(&client.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", client.session.as_deref().unwrap())
            .header("mcp-protocol-version", &client.version)
            .body(message.to_string())
            .send()
            .await
            .unwrap();
        let sse =
            response.headers().get("content-type").is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        assert!(sse, "an SSE answer");
        RawEvents::of(response)
    }

    fn of(response: reqwest::Response) -> RawEvents {
        assert_eq!(response.status(), 200);
        RawEvents { body: Box::pin(response.bytes_stream()), buffer: String::new() }
    }

    /// The next event (keep-alive comments skipped), or `None` if the stream ends or stays
    /// quiet for `quiet`.
    async fn next(&mut self, quiet: std::time::Duration) -> Option<RawEvent> {
        use futures::StreamExt;
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let field =
                    |name: &str| block.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim_start().to_owned());
                if block.lines().all(|l| l.starts_with(':') || l.is_empty()) {
                    continue;
                }
                return Some(RawEvent {
                    id: field("id:"),
                    data: field("data:").unwrap_or_default(),
                    data_field: field("data:").is_some(),
                    retry: field("retry:").is_some(),
                });
            }
            let chunk = tokio::time::timeout(quiet, self.body.next()).await.ok()??.ok()?;
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

/// Answer the elicitation request `asked` (the data of an event carrying the conformance
/// plugin's `test_elicitation` question) with an accepted form, as its client.
async fn accept_elicitation(client: &Client, asked: &str) {
    let request: serde_json::Value = serde_json::from_str(asked).unwrap();
    let answer = client
        .post(&json!({"jsonrpc": "2.0", "id": request["id"], "result": {
            "action": "accept", "content": {"username": "ada", "email": "ada@example.com"}}}))
        .await;
    assert_eq!(answer.status, 202, "{}", answer.body);
}

/// A server with the conformance plugin, and a 2025-11-25 session offering form elicitation.
async fn eliciting_session() -> (Server, Client) {
    let conformance = crate::support::plugins().join("conformance.wasm");
    let server = Server::http(&["--no-watch", "--plugin", conformance.to_str().unwrap()]);
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({"elicitation": {"form": {}}})).await;
    (server, client)
}

/// JSON-RPC allows a `null` result: a client's answer with one (or with a `null` error) is
/// taken as the answer to the request it names, which goes on at once, rather than refused
/// as a message without a method while the request waits on for minutes.
#[tokio::test]
async fn a_client_answer_with_a_null_result_or_error_reaches_its_request() {
    let quiet = std::time::Duration::from_secs(5);
    let (_server, client) = eliciting_session().await;
    for (id, answer) in [(7, json!({"result": null})), (8, json!({"error": null}))] {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "test_elicitation", "arguments": {"message": "who are you?"}}});
        let mut post = RawEvents::post(&client, &call).await;
        post.next(quiet).await.expect("a priming event");
        let asked = post.next(quiet).await.expect("the elicitation request");
        let asked: Value = serde_json::from_str(&asked.data).unwrap();
        let mut reply = json!({"jsonrpc": "2.0", "id": asked["id"]});
        reply.as_object_mut().unwrap().extend(answer.as_object().unwrap().clone());
        let taken = client.post(&reply).await;
        assert_eq!(taken.status, 202, "{reply} was refused: {}", taken.body);
        let result = post.next(quiet).await.expect("the call's answer, without waiting on the client");
        let result: Value = serde_json::from_str(&result.data).unwrap();
        assert_eq!(result["id"], id, "{result}");
        // The plugin is told its answer was unusable.
        assert!(first_text(&result["result"]).starts_with("Unexpected answer: Invalid("), "{result}");
    }
}

/// A call cancelled while its plugin waits for the client's answer to a server-to-client
/// request cancels that request with the client too (the spec's timeouts: "the sender SHOULD
/// issue a cancellation notification for that request and stop waiting").
#[tokio::test]
async fn a_call_cancelled_while_it_waits_for_the_client_cancels_its_request_to_the_client() {
    let quiet = std::time::Duration::from_secs(5);
    let (_server, client) = eliciting_session().await;
    let call = json!({"jsonrpc": "2.0", "id": 31, "method": "tools/call",
        "params": {"name": "test_elicitation", "arguments": {"message": "who are you?"}}});
    let mut post = RawEvents::post(&client, &call).await;
    post.next(quiet).await.expect("a priming event");
    let asked: Value = serde_json::from_str(&post.next(quiet).await.expect("the elicitation request").data).unwrap();
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 31}});
    assert_eq!(client.post(&cancel).await.status, 202);
    let note: Value = serde_json::from_str(&post.next(quiet).await.expect("a cancellation").data).unwrap();
    assert_eq!(note["method"], "notifications/cancelled", "{note}");
    assert_eq!(note["params"]["requestId"], asked["id"], "{note}");
    // The cancelled call itself is not answered: its stream ends.
    let waited = std::time::Instant::now();
    assert!(post.next(quiet).await.is_none(), "the cancelled call was answered");
    assert!(waited.elapsed() < quiet, "the cancelled call's stream did not end");
    // Answered late, the request is simply forgotten; the session goes on.
    let late = json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "decline"}});
    assert_eq!(client.post(&late).await.status, 202);
    assert!(client.request(32, "ping", json!({})).await.get("result").is_some());
}

/// A session with misfit, subscribed to the URI its `announce` tool announces.
async fn announcing_session(server: &Server) -> Client {
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    let uri = format!("misfit://0{}!", "-a".repeat(31));
    let reply = client.request(1, "resources/subscribe", json!({"uri": uri})).await;
    assert!(reply.get("result").is_some(), "{reply}");
    client
}

async fn announce(client: &Client, id: i64) {
    let announced = client.request(id, "tools/call", json!({"name": "announce", "arguments": {}})).await;
    assert_eq!(first_text(&announced["result"]), "announced", "{announced}");
}

#[tokio::test]
async fn a_session_stream_has_unique_rising_ids_and_resumes_after_the_last_one_seen() {
    let quiet = std::time::Duration::from_millis(800);
    let dir = crate::support::scratch_dir("session-stream");
    let policy = crate::hardening::misfit_policy(&dir, "", "");
    let server = crate::hardening::serve_misfit(&policy);
    let client = announcing_session(&server).await;

    // Two events before any stream is open: the first stream gets them.
    announce(&client, 2).await;
    announce(&client, 3).await;
    let mut first = RawEvents::open(&client, None).await;
    let priming = first.next(quiet).await.expect("a priming event");
    assert!(
        priming.retry && priming.data_field && priming.data.is_empty(),
        "priming: {:?} {:?}",
        priming.id,
        priming.data
    );
    let mut ids = vec![priming.id.clone().expect("the priming event has an id")];
    for _ in 0..2 {
        let event = first.next(quiet).await.expect("an event queued before the stream opened");
        assert!(event.data.contains("notifications/resources/updated"), "{}", event.data);
        ids.push(event.id.expect("every event has an id"));
    }
    announce(&client, 4).await;
    ids.push(first.next(quiet).await.expect("a live event").id.unwrap());
    let numbers: Vec<u64> = ids[1..].iter().map(|id| id.parse().expect("numeric ids")).collect();
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "ids must rise and never repeat: {ids:?}");
    assert!(!ids[1..].contains(&ids[0]), "the priming id is unique too: {ids:?}");

    // Resuming after the second event replays only what came after it, and the new stream
    // takes over: the old one ends.
    let mut second = RawEvents::open(&client, Some(&ids[2])).await;
    let replayed = second.next(quiet).await.expect("the event after the one named");
    assert_eq!(replayed.id.as_deref(), Some(ids[3].as_str()));
    assert!(second.next(quiet).await.is_none(), "nothing seen before Last-Event-ID is sent again");
    assert!(first.next(quiet).await.is_none(), "the replaced stream ends");
    announce(&client, 5).await;
    let live = second.next(quiet).await.expect("the new stream is live");
    let newest: u64 = live.id.unwrap().parse().unwrap();
    assert!(newest > numbers[2]);

    // An id the session never issued would silence the stream; it is refused.
    for never in [newest + 1, u64::MAX] {
        let refused = RawEvents::get(&client, Some(&never.to_string())).await;
        assert_eq!(refused.status(), 400, "Last-Event-ID {never}");
    }
    // Nor does it take another spelling of an id it issued, or a priming id it did not
    // write: a stream it never primed, or one it did with another start.
    let (stream, start) = ids[0].strip_prefix('g').and_then(|p| p.split_once('.')).expect("g{stream}.{start}");
    let (stream, start): (u64, u64) = (stream.parse().unwrap(), start.parse().unwrap());
    let made_up = [
        "0".to_owned(),
        format!("0{}", ids[1]),
        format!("+{}", ids[1]),
        format!("g{stream}.{}", start + 1),
        format!("g0.{start}"),
        format!("g{}.{start}", stream + 50),
        format!("g0{stream}.{start}"),
    ];
    for never in made_up {
        assert_eq!(RawEvents::get(&client, Some(&never)).await.status(), 400, "Last-Event-ID {never}");
    }
    let not_text = RawEvents::request(&client)
        .header("last-event-id", reqwest::header::HeaderValue::from_bytes(b"\xff7").unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(not_text.status(), 400, "a Last-Event-ID that is not text");
    let twice = RawEvents::request(&client)
        .header("last-event-id", &ids[1])
        .header("last-event-id", &ids[2])
        .send()
        .await
        .unwrap();
    assert_eq!(twice.status(), 400, "two Last-Event-IDs name no one resume point");
    // An empty one names nothing: a fresh stream, whose priming id is new in the session
    // though no event came since the last stream's.
    let mut fresh = RawEvents::open(&client, Some("")).await;
    let primed = fresh.next(quiet).await.expect("a priming event");
    let primed_id = primed.id.expect("an id");
    assert!(primed.retry && primed_id != ids[0] && primed_id != newest.to_string(), "{primed_id} after {ids:?}");
    // Resuming from a priming id starts where its stream started: from the first stream's,
    // every event still kept.
    drop(fresh);
    let mut from_start = RawEvents::open(&client, Some(&ids[0])).await;
    assert_eq!(from_start.next(quiet).await.and_then(|e| e.id).as_deref(), Some(ids[1].as_str()));
    drop(from_start);
    let mut from_fresh = RawEvents::open(&client, Some(&primed_id)).await;
    assert!(from_fresh.next(quiet).await.is_none(), "nothing came after the fresh stream opened");
    let _ = std::fs::remove_dir_all(dir);
}

/// SEP-1699: a 2025-11-25 session's POST answered with SSE opens with a priming event, and
/// every event has an id naming the stream. When the connection breaks before the answer,
/// the request goes on, and a GET with the last id seen delivers the rest through the
/// answer, then ends. Older revisions' POST streams are as they were: no ids.
#[tokio::test]
async fn a_broken_post_stream_is_resumed_through_its_answer() {
    let quiet = std::time::Duration::from_millis(800);
    let (server, client) = eliciting_session().await;
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "test_elicitation", "arguments": {"message": "who are you?"}}});
    let mut post = RawEvents::post(&client, &call).await;
    let priming = post.next(quiet).await.expect("a priming event");
    assert!(priming.retry && priming.data_field && priming.data.is_empty(), "{:?} {:?}", priming.id, priming.data);
    let asked = post.next(quiet).await.expect("the elicitation request");
    assert!(asked.data.contains("elicitation/create"), "{}", asked.data);
    let (first, asked_id) = (priming.id.expect("an id"), asked.id.expect("an id"));
    assert_ne!(first, asked_id);
    // The connection breaks; the client answers the question and resumes after it.
    drop(post);
    accept_elicitation(&client, &asked.data).await;
    // From the priming id, the stream again from its start; that connection breaks too.
    let mut again = RawEvents::open(&client, Some(&first)).await;
    assert_eq!(again.next(quiet).await.and_then(|e| e.id), Some(asked_id.clone()));
    drop(again);
    let mut resumed = RawEvents::open(&client, Some(&asked_id)).await;
    let result = resumed.next(quiet).await.expect("the answer, after the event named");
    assert!(result.data.contains("\"id\":7") && result.data.contains("\"result\""), "{}", result.data);
    assert!(resumed.next(quiet).await.is_none(), "the resumed stream ends after the answer");
    // A stream the session never had is refused, and so is a place its stream never
    // reached (nothing would come after it, not even the answer) or another spelling.
    let (number, place) = asked_id.strip_prefix('p').and_then(|p| p.split_once('.')).expect("p{stream}.{place}");
    let place: u64 = place.parse().unwrap();
    for never in ["p99.1".to_owned(), format!("p{number}.{}", place + 50), format!("p0{number}.{place}")] {
        assert_eq!(RawEvents::get(&client, Some(&never)).await.status(), 400, "Last-Event-ID {never}");
    }

    // Resumed while its first connection is still open, the stream moves to the new one:
    // the answer goes to one stream, never to both.
    let call = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
        "params": {"name": "test_elicitation", "arguments": {"message": "and now?"}}});
    let mut post = RawEvents::post(&client, &call).await;
    assert!(post.next(quiet).await.expect("a priming event").retry);
    let asked = post.next(quiet).await.expect("the elicitation request");
    let mut resumed = RawEvents::open(&client, Some(&asked.id.expect("an id"))).await;
    accept_elicitation(&client, &asked.data).await;
    let result = resumed.next(quiet).await.expect("the answer, on the stream that took over");
    assert!(result.data.contains("\"id\":8") && result.data.contains("\"result\""), "{}", result.data);
    assert!(post.next(quiet).await.is_none(), "the stream taken over ends without the answer");

    // A 2025-06-18 session's SSE answer carries no ids, so there is nothing to resume.
    let mut older = Client::new(&server.url);
    older.initialize("2025-06-18", json!({"elicitation": {}})).await;
    let mut post = RawEvents::post(&older, &call).await;
    let asked = post.next(quiet).await.expect("the elicitation request first");
    assert!(asked.id.is_none() && asked.data.contains("elicitation/create"), "{:?} {}", asked.id, asked.data);
}

/// Every session's resumable streams together keep at most `--max-resume-bytes`: past it, a
/// stream whose client has gone keeps nothing and a resume is told so, while a stream being
/// read still carries everything through its answer.
#[tokio::test]
async fn past_the_resume_budget_a_broken_stream_is_not_kept_and_a_read_one_is_whole() {
    let quiet = std::time::Duration::from_millis(800);
    let conformance = crate::support::plugins().join("conformance.wasm");
    let server = Server::http(&["--no-watch", "--max-resume-bytes", "0", "--plugin", conformance.to_str().unwrap()]);
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({"elicitation": {"form": {}}})).await;
    let ask = |id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "test_elicitation", "arguments": {"message": "who are you?"}}})
    };

    let mut post = RawEvents::post(&client, &ask(7)).await;
    assert!(post.next(quiet).await.expect("a priming event").retry);
    let asked = post.next(quiet).await.expect("the elicitation request");
    let asked_id = asked.id.expect("an id");
    drop(post);
    accept_elicitation(&client, &asked.data).await;
    // The call ends at once; its stream, read by nobody once its connection has gone, is
    // then emptied. Resumed sooner, it would be taken over (and its answer read) instead.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let refused = RawEvents::get(&client, Some(&asked_id)).await;
    assert_eq!(refused.status(), 400, "a stream kept past the budget");
    assert!(refused.text().await.unwrap().contains("no longer keeps"));

    let mut post = RawEvents::post(&client, &ask(8)).await;
    assert!(post.next(quiet).await.expect("a priming event").retry);
    let asked = post.next(quiet).await.expect("the elicitation request");
    accept_elicitation(&client, &asked.data).await;
    let result = post.next(quiet).await.expect("the answer, on the stream being read");
    assert!(result.data.contains("\"id\":8") && result.data.contains("\"result\""), "{}", result.data);
    assert!(post.next(quiet).await.is_none(), "the stream ends after its answer");
}

/// Issue 12, item 3: a client that opens its stream and never reads it slows nobody down,
/// through a hundred list changes and a thousand list-changed emissions.
#[tokio::test]
async fn a_session_that_never_reads_delays_no_one() {
    let dir = crate::support::scratch_dir("never-reads");
    std::fs::copy(crate::support::plugins().join("calc.wasm"), dir.join("calc.wasm")).unwrap();
    let misfit = crate::hardening::misfit();
    let (server, admin) = crate::support::Admin::serve(
        &dir,
        &["--plugins", dir.to_str().unwrap(), "--plugin", misfit.to_str().unwrap(), "--no-watch"],
    );
    let mut laggard = Client::new(&server.url);
    laggard.initialize("2025-11-25", json!({})).await;
    // Its stream is open and never read past its priming event.
    let mut never_read = RawEvents::open(&laggard, None).await;
    let primed = never_read.next(std::time::Duration::from_secs(5)).await.and_then(|e| e.id).expect("a priming id");
    let mut other = Client::new(&server.url);
    other.initialize("2025-06-18", json!({})).await;
    let textkit = crate::support::plugins().join("textkit.wasm");
    let started = std::time::Instant::now();
    for round in 0..50 {
        let op = std::time::Instant::now();
        let (status, body) = admin.call(reqwest::Method::POST, "/plugins", Some(json!({"path": textkit}))).await;
        assert_eq!(status, 200, "{body}");
        let (status, body) = admin.call(reqwest::Method::DELETE, "/plugins/textkit", None).await;
        assert_eq!(status, 200, "{body}");
        assert!(op.elapsed() < std::time::Duration::from_secs(3), "round {round} took {:?}", op.elapsed());
        let sum = other.request(round, "tools/call", json!({"name": "add", "arguments": {"a": round, "b": 1}})).await;
        assert_eq!(first_text(&sum["result"]), (round + 1).to_string());
    }
    let storm = other.request(99, "tools/call", json!({"name": "list_storm", "arguments": {}})).await;
    assert_eq!(first_text(&storm["result"]), "changed 1000 times");
    assert!(started.elapsed() < std::time::Duration::from_secs(60), "took {:?}", started.elapsed());
    // The laggard is still served, and its stream kept only the newest events.
    let tools = laggard.request(100, "tools/list", json!({})).await;
    assert!(tools["result"]["tools"].as_array().is_some_and(|t| !t.is_empty()), "{tools}");
    // Resumed from where its stream started: every event kept.
    let mut late = RawEvents::open(&laggard, Some(&primed)).await;
    let mut kept = 0;
    while let Some(event) = late.next(std::time::Duration::from_millis(800)).await {
        kept += usize::from(event.data.contains("list_changed"));
    }
    assert!((1..=64).contains(&kept), "{kept} list changes kept for a client that never read");
    let _ = std::fs::remove_dir_all(dir);
}

/// `a + 1` as a 2026-07-28 call, checked.
async fn add(client: &Client, id: i64) {
    let reply =
        client.modern(id, "tools/call", json!({"name": "add", "arguments": {"a": id, "b": 1}}), json!({})).await;
    assert_eq!(first_text(&reply.messages[0]["result"]), (id + 1).to_string(), "{:?}", reply.messages);
}

/// Connections are spread over the request workers and stay on theirs: with two workers,
/// the second connection's calls run on the second worker's thread and the first's do not.
#[tokio::test]
async fn each_connection_is_served_by_one_worker_and_they_share_the_load() {
    let server = Server::http(&["--workers", "2", "--worker-fill", "0"]);
    let second_worker = |server: &Server| server.thread_cpu("capsule-wk-1");
    // Each client keeps one connection: calls made one at a time reuse it.
    let (first, second) = (Client::new(&server.url), Client::new(&server.url));
    add(&first, 0).await;
    add(&second, 0).await;
    let before = second_worker(&server);
    for id in 1..=300 {
        add(&second, id).await;
    }
    let served = second_worker(&server) - before;
    let before = second_worker(&server);
    for id in 1..=300 {
        add(&first, id).await;
    }
    let other = second_worker(&server) - before;
    assert!(served >= std::time::Duration::from_millis(5), "the second worker used {served:?} for 300 calls");
    assert!(
        other * 4 < served,
        "the first connection's calls used {other:?} of the second worker (its own: {served:?})"
    );
}

/// `--worker-fill`: one worker a core takes that many connections before the other workers
/// get any. With one worker more than the cores and a fill of two, the first two connections
/// a core leave the last worker idle, and the next connection is served there.
#[tokio::test]
async fn the_first_workers_fill_before_the_others_get_a_connection() {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let (workers, last) = ((cores + 1).to_string(), format!("capsule-wk-{cores}"));
    let server = Server::http(&["--workers", &workers, "--worker-fill", "2"]);
    let filling: Vec<Client> = (0..2 * cores).map(|_| Client::new(&server.url)).collect();
    for client in &filling {
        add(client, 0).await;
    }
    let before = server.thread_cpu(&last);
    for id in 1..=100 {
        for client in &filling {
            add(client, id).await;
        }
    }
    let idle = server.thread_cpu(&last) - before;
    the_next_connection_is_served_by(&server, &last, idle).await;
}

/// A new connection's calls run on the worker thread `last`, which spent only `idle` (a
/// fraction of what they cost it) on the calls of the connections before.
async fn the_next_connection_is_served_by(server: &Server, last: &str, idle: std::time::Duration) {
    let next = Client::new(&server.url);
    add(&next, 0).await;
    let before = server.thread_cpu(last);
    for id in 1..=300 {
        add(&next, id).await;
    }
    let served = server.thread_cpu(last) - before;
    assert!(served >= std::time::Duration::from_millis(5), "the last worker used {served:?} for 300 calls");
    assert!(idle * 4 < served, "the earlier calls used {idle:?} of the last worker (its own: {served:?})");
}

/// A connection that holds a legacy session's GET stream carries no request while it does:
/// it is not counted where new connections are placed. Legacy sessions, each with its POST
/// connection and its stream's, two a core: their calling connections fill the first tier
/// and the last worker stays idle (counted, the streams would push calls onto it).
#[tokio::test]
async fn a_connection_holding_a_stream_leaves_its_first_tier_place_to_calls() {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let (workers, last) = ((cores + 1).to_string(), format!("capsule-wk-{cores}"));
    let server = Server::http(&["--workers", &workers, "--worker-fill", "2"]);
    let mut sessions = Vec::new();
    let mut streams = Vec::new();
    for _ in 0..2 * cores {
        let mut session = Client::new(&server.url);
        session.initialize("2025-11-25", json!({})).await;
        streams.push(RawEvents::open(&session, None).await);
        sessions.push(session);
    }
    let call = |id: i64| json!({"name": "add", "arguments": {"a": id, "b": 1}});
    let before = server.thread_cpu(&last);
    for id in 1..=100 {
        for session in &sessions {
            let reply = session.request(id, "tools/call", call(id)).await;
            assert_eq!(first_text(&reply["result"]), (id + 1).to_string(), "{reply}");
        }
    }
    let idle = server.thread_cpu(&last) - before;
    the_next_connection_is_served_by(&server, &last, idle).await;
    drop(streams);
}

/// `--worker-slice`: every worker thread asks for the slice, the others keep the kernel's.
#[tokio::test]
async fn workers_ask_for_the_slice_they_are_given() {
    let server = Server::http(&["--workers", "2", "--worker-slice", "250"]);
    add(&Client::new(&server.url), 0).await;
    let slices: Vec<(String, u64)> = server
        .thread_files("sched")
        .into_iter()
        .filter_map(|(comm, sched)| {
            let slice = sched.lines().find(|l| l.starts_with("se.slice"))?.split(':').nth(1)?.trim().parse().ok()?;
            Some((comm, slice))
        })
        .collect();
    // Kernels before EEVDF's custom slices (6.12) report none; there is nothing to check.
    if slices.is_empty() {
        return;
    }
    let workers: Vec<_> = slices.iter().filter(|(comm, _)| comm.starts_with("capsule-wk-")).collect();
    assert!(workers.len() >= 2, "{slices:?}");
    assert!(workers.iter().all(|(_, slice)| *slice == 250_000), "{slices:?}");
    let epoch = slices.iter().find(|(comm, _)| comm == "capsule-epoch").expect("the epoch clock's thread");
    assert_ne!(epoch.1, 250_000, "{slices:?}");
}

/// A legacy session's stream and its requests on connections served by different workers:
/// what a request on one worker announces reaches the stream held on the other.
#[tokio::test]
async fn a_session_spans_workers() {
    let quiet = std::time::Duration::from_millis(800);
    let dir = crate::support::scratch_dir("session-workers");
    let policy = crate::hardening::misfit_policy(&dir, "", "");
    let misfit = crate::hardening::misfit();
    let (plugin, config) = (misfit.to_str().unwrap(), policy.to_str().unwrap());
    let server = Server::http(&["--workers", "2", "--worker-fill", "0", "--plugin", plugin, "--config", config]);
    // The session's requests ride the first connection (the first worker); its stream opens
    // the second (the other worker, which has none yet).
    let client = announcing_session(&server).await;
    let mut events = RawEvents::open(&client, None).await;
    assert!(events.next(quiet).await.expect("a priming event").retry);
    for id in 2..5 {
        announce(&client, id).await;
        let event = events.next(quiet).await.expect("the announcement reaches the stream");
        assert!(event.data.contains("notifications/resources/updated"), "{}", event.data);
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn slow_headers_and_slow_bodies_are_cut_off() {
    use tokio::io::AsyncWriteExt;
    let server = Server::http(&["--header-timeout", "1", "--body-timeout", "1"]);
    // Headers trickled and never finished (slowloris): the connection is closed.
    let mut slow = raw_connection(&server).await;
    slow.write_all(b"POST /mcp HTTP/1.1\r\nHost: localhost\r\n").await.unwrap();
    let started = std::time::Instant::now();
    assert!(read_until_closed(&mut slow, std::time::Duration::from_secs(5)).await.is_some(), "still open");
    assert!(started.elapsed() < std::time::Duration::from_secs(4), "closed after {:?}", started.elapsed());
    // A body that never finishes: 408.
    let mut stalled = raw_connection(&server).await;
    let head = "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\"";
    stalled.write_all(head.as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut stalled, std::time::Duration::from_secs(5)).await.unwrap_or_default();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("\r\nconnection: close\r\n"), "{answer}");
    // An idle keep-alive connection is closed too; a well-behaved client is still served.
    let mut idle = raw_connection(&server).await;
    assert!(read_until_closed(&mut idle, std::time::Duration::from_secs(5)).await.is_some());
    let mut client = Client::new(&server.url);
    client.initialize("2025-06-18", json!({})).await;
}

#[tokio::test]
async fn a_request_refused_for_its_headers_is_answered_once_its_body_is_in() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = Server::http(&[]);
    let json = "Content-Type: application/json\r\n";
    let refusals = [
        ("/mcp", "Content-Type: text/plain\r\n".to_owned(), "415"),
        ("/mcp", format!("Origin: http://evil.example\r\n{json}"), "403"),
        ("/mcp", format!("MCP-Protocol-Version: 2025-06-18\r\nMCP-Protocol-Version: 2025-06-18\r\n{json}"), "400"),
        ("/elsewhere", json.to_owned(), "404"),
    ];
    for (target, extra, status) in refusals {
        let body = vec![b' '; 2 << 20];
        let mut stream = raw_connection(&server).await;
        let head = format!(
            "POST {target} HTTP/1.1\r\nHost: localhost\r\n{extra}Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        // In pieces, as over a slow uplink: the refusal is ready long before the body is in.
        // A server that answered and closed at once would reset the connection mid-body.
        for piece in body.chunks(64 << 10) {
            let sent = stream.write_all(piece).await;
            sent.unwrap_or_else(|e| panic!("{status} {target}: the server stopped reading the body: {e}"));
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let mut answer = vec![0; 1024];
        let read = stream.read(&mut answer).await.unwrap_or_else(|e| panic!("{status} {target}: {e}"));
        let answer = String::from_utf8_lossy(&answer[..read]);
        assert!(answer.starts_with(&format!("HTTP/1.1 {status}")), "{target}: {answer}");
    }
    // A client that waits for `100 Continue` before its body is refused at once instead.
    let mut waiting = raw_connection(&server).await;
    let head = "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: text/plain\r\nAccept: application/json, text/event-stream\r\nExpect: 100-continue\r\nContent-Length: 1000000\r\n\r\n";
    waiting.write_all(head.as_bytes()).await.unwrap();
    let mut answer = vec![0; 1024];
    let read = tokio::time::timeout(std::time::Duration::from_secs(5), waiting.read(&mut answer)).await;
    let read = read.expect("answered without the body").unwrap();
    assert!(
        String::from_utf8_lossy(&answer[..read]).starts_with("HTTP/1.1 415"),
        "{}",
        String::from_utf8_lossy(&answer[..read])
    );
}

#[tokio::test]
async fn oversized_heads_and_cut_short_bodies_are_refused() {
    use tokio::io::AsyncWriteExt;
    let server = Server::http(&["--max-header-bytes", "16384"]);
    let head = "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n";
    // One header larger than the limit: 431, and the connection is closed.
    let mut big = raw_connection(&server).await;
    let filler = format!("{head}X-Filler: {}\r\nContent-Length: 2\r\n\r\n{{}}", "a".repeat(20_000));
    big.write_all(filler.as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut big, std::time::Duration::from_secs(5)).await.unwrap_or_default();
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    // A body shorter than its Content-Length, the client done sending: 400, not 413.
    let mut short = raw_connection(&server).await;
    short.write_all(format!("{head}Content-Length: 100\r\n\r\n{{\"jsonrpc\"").as_bytes()).await.unwrap();
    short.shutdown().await.unwrap();
    let answer = read_until_closed(&mut short, std::time::Duration::from_secs(5)).await.unwrap_or_default();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("-32600") && answer.contains("could not be read"), "{answer}");
    // A Content-Length over the body limit: 413 at once, without waiting for the body.
    let mut huge = raw_connection(&server).await;
    huge.write_all(format!("{head}Content-Length: 99999999999\r\n\r\n{{}}").as_bytes()).await.unwrap();
    let started = std::time::Instant::now();
    let answer = read_until_closed(&mut huge, std::time::Duration::from_secs(5)).await.unwrap_or_default();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(started.elapsed() < std::time::Duration::from_secs(2), "answered after {:?}", started.elapsed());
    // A transfer coding other than chunked is not one the server knows: 501. (The client does
    // not half-close: like any request answered after its body is read, the refusal would be
    // lost with the connection hyper ends at end of input.)
    let mut coded = raw_connection(&server).await;
    let request = format!("{head}Connection: close\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\n{{}}\r\n0\r\n\r\n");
    coded.write_all(request.as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut coded, std::time::Duration::from_secs(5)).await.unwrap_or_default();
    assert!(answer.starts_with("HTTP/1.1 501"), "{answer}");
    // Heads under the limit are served.
    let mut client = Client::new(&server.url);
    client.initialize("2025-06-18", json!({})).await;
    // The limit is exact however the head arrives: one write of a head somewhat over it
    // (hyper's read buffer could take it all at once) is refused, one under it served.
    let server = Server::http(&["--max-header-bytes", "32768"]);
    for (filler, refused) in [(40_000, true), (30_000, false)] {
        let mut connection = raw_connection(&server).await;
        let request =
            format!("{head}Connection: close\r\nX-Filler: {}\r\nContent-Length: 2\r\n\r\n{{}}", "a".repeat(filler));
        connection.write_all(request.as_bytes()).await.unwrap();
        let answer = read_until_closed(&mut connection, std::time::Duration::from_secs(5)).await.unwrap_or_default();
        assert!(answer.starts_with("HTTP/1.1 "), "a {filler}-byte header: {answer}");
        assert_eq!(answer.starts_with("HTTP/1.1 431"), refused, "a {filler}-byte header: {answer}");
    }
    // So is a head of more than 100 header fields, however short.
    let mut many = raw_connection(&server).await;
    let fields: String = (0..120).map(|n| format!("X-{n}: 1\r\n")).collect();
    many.write_all(format!("{head}{fields}Content-Length: 2\r\n\r\n{{}}").as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut many, std::time::Duration::from_secs(5)).await.unwrap_or_default();
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
}

#[tokio::test]
async fn connections_and_sessions_per_address_are_capped() {
    // Idle keep-alive connections close after 2 s, so the clients below free their permits.
    let server = Server::http(&["--max-connections", "2", "--sessions-per-address", "2", "--header-timeout", "2"]);
    // Two sessions from this address; a third is refused while they are in use.
    let mut first = Client::new(&server.url);
    first.initialize("2025-06-18", json!({})).await;
    let mut second = Client::new(&server.url);
    second.initialize("2025-06-18", json!({})).await;
    let third = Client::new(&server.url).try_initialize("2025-06-18", json!({})).await;
    assert_eq!(third.status, 503, "{}", third.body);
    assert!(third.body.contains("address"), "{}", third.body);
    // Ending one makes room. A request on it then is told so, with its id.
    assert_eq!(first.end_session().await, 204);
    let gone = first.post(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"})).await;
    assert_eq!((gone.status, gone.response(7)["error"]["code"].clone()), (404, json!(-32001)), "{}", gone.body);
    let mut again = Client::new(&server.url);
    again.initialize("2025-06-18", json!({})).await;
    drop((first, second, again));
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    // Two connections held open (for less than the header timeout): a third waits.
    let held = (raw_connection(&server).await, raw_connection(&server).await);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let fresh = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let ping = || {
        fresh
            .post(&server.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", META_2026)
            .header("mcp-method", "tools/list")
            .body(modern_body(1, "tools/list", json!({})))
            .timeout(std::time::Duration::from_secs(1))
            .send()
    };
    assert!(ping().await.is_err(), "a third connection is not served while two are open");
    drop(held);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(ping().await.expect("served once a connection closed").status(), 200);
}

/// A batch's elements send into its one stream directly: each element's last progress
/// notifications used to go through a task of their own, and were lost when the batch's
/// answers went out first (the tail of one call or more in most batches).
#[tokio::test]
async fn a_batch_stream_carries_every_notification_its_elements_sent() {
    let hostile = crate::support::plugins().join("testing/hostile.wasm");
    let server = Server::http(&["--no-watch", "--plugin", hostile.to_str().unwrap()]);
    let mut client = Client::new(&server.url);
    client.initialize("2025-03-26", json!({})).await;
    for round in 0..10 {
        let batch: Vec<Value> = (0..3)
            .map(|k| {
                json!({"jsonrpc": "2.0", "id": k, "method": "tools/call", "params": {"name": "flood",
                    "arguments": {"count": 200}, "_meta": {"progressToken": format!("t{k}")}}})
            })
            .collect();
        let reply = client.post(&Value::Array(batch)).await;
        let messages: Vec<&Value> =
            reply.messages.iter().flat_map(|m| m.as_array().map_or(vec![m], |all| all.iter().collect())).collect();
        for k in 0..3 {
            let token = format!("t{k}");
            let progress = messages
                .iter()
                .filter(|m| m["method"] == "notifications/progress" && m["params"]["progressToken"] == token)
                .count();
            let answered = messages.iter().any(|m| m["id"] == k && first_text(&m["result"]) == "sent 200 messages");
            assert!(answered && progress == 200, "round {round}, call {k}: {progress} of 200; {}", reply.body);
        }
    }
}

/// 2025-03-26 batches: an element that needs the client's input gets it on the batch's own
/// stream while the other elements run, and every answer comes back.
#[tokio::test]
async fn a_batch_element_can_ask_the_client_on_the_batch_stream() {
    let args = crate::support::all_plugins();
    let server = Server::http(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let mut client = Client::new(&server.url);
    client.initialize("2025-03-26", json!({"roots": {"listChanged": true}})).await;
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
         "params": {"name": "test_input_required_result_list_roots", "arguments": {}}},
        call(json!(2), 20, 22),
    ]);
    let mut stream = client.stream(&batch).await;
    let mut answers = std::collections::BTreeMap::new();
    while answers.len() < 2 {
        let message = stream.next_message().await.expect("the batch's messages");
        if message["method"] == "roots/list" {
            let answer = client
                .post(&json!({"jsonrpc": "2.0", "id": message["id"],
                    "result": {"roots": [{"uri": "file:///tmp/batch", "name": "batch"}]}}))
                .await;
            assert_eq!(answer.status, 202, "{}", answer.body);
        } else {
            answers.insert(message["id"].as_i64().expect("an answer"), first_text(&message["result"]));
        }
    }
    assert_eq!(answers[&1], "Roots: file:///tmp/batch");
    assert_eq!(answers[&2], "42");
}

#[tokio::test]
async fn idle_sessions_end_and_open_streams_keep_theirs() {
    let conformance = crate::support::plugins().join("conformance.wasm");
    let server = Server::http(&["--session-idle", "1", "--no-watch", "--plugin", conformance.to_str().unwrap()]);
    let mut idle = Client::new(&server.url);
    idle.initialize("2025-11-25", json!({})).await;
    let mut watching = Client::new(&server.url);
    watching.initialize("2025-11-25", json!({})).await;
    let mut stream = RawEvents::open(&watching, None).await;
    assert!(stream.next(std::time::Duration::from_secs(1)).await.is_some(), "the priming event");
    // A session answering a request is not idle however long it takes: this one waits for
    // the client to answer an elicitation.
    let mut asking = Client::new(&server.url);
    asking.initialize("2025-11-25", json!({"elicitation": {"form": {}}})).await;
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "test_elicitation", "arguments": {"message": "still there?"}}});
    let mut post = RawEvents::post(&asking, &call).await;
    let quiet = std::time::Duration::from_secs(1);
    assert!(post.next(quiet).await.expect("a priming event").retry);
    let asked = post.next(quiet).await.expect("the elicitation request");
    tokio::time::sleep(std::time::Duration::from_millis(3500)).await;
    let gone = idle.post(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).await;
    assert_eq!(gone.status, 404, "an idle session ends: {}", gone.body);
    let kept = watching.request(1, "tools/list", json!({})).await;
    assert!(kept.get("result").is_some(), "a session with its stream open is not idle: {kept}");
    // A session answering a request is not idle: the answer finds it.
    accept_elicitation(&asking, &asked.data).await;
    let result = post.next(quiet).await.expect("the answer");
    assert!(result.data.contains("\"id\":7") && result.data.contains("\"result\""), "{}", result.data);
}

#[tokio::test]
async fn a_request_longer_than_the_idle_limit_restarts_it_when_it_ends() {
    use std::time::{Duration, Instant};
    let hostile = crate::support::plugins().join("testing/hostile.wasm");
    let server = Server::http(&[
        "--session-idle",
        "3",
        "--call-timeout",
        "4000",
        "--no-watch",
        "--plugin",
        hostile.to_str().unwrap(),
    ]);
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    // The client hangs up on a call that runs past the idle limit until the wall clock
    // stops it; the session was answering all along, so its idle time starts at the end.
    let started = Instant::now();
    let call = client.spawn_call(7, "stall", json!({}));
    tokio::time::sleep(Duration::from_millis(300)).await;
    call.abort();
    // Expiry sweeps run every second: one has run since the call ended (at 4s), and the
    // session has been idle for less than 3s since then.
    tokio::time::sleep(Duration::from_millis(5600).saturating_sub(started.elapsed())).await;
    let kept = client.post(&json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list"})).await;
    assert_eq!(kept.status, 200, "idle for less than 3s since its call ended: {}", kept.body);
}

#[tokio::test]
async fn a_get_stream_open_past_the_idle_limit_restarts_it_when_it_closes() {
    use std::time::{Duration, Instant};
    let conformance = crate::support::plugins().join("conformance.wasm");
    let server = Server::http(&["--session-idle", "2", "--no-watch", "--plugin", conformance.to_str().unwrap()]);
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    let started = Instant::now();
    let mut stream = RawEvents::open(&client, None).await;
    assert!(stream.next(Duration::from_secs(1)).await.is_some(), "the priming event");
    // The stream stays open past the idle limit, then its connection closes (a network blip
    // before the client reconnects): the session was not idle until then.
    tokio::time::sleep(Duration::from_millis(3500).saturating_sub(started.elapsed())).await;
    drop(stream);
    // Expiry sweeps run every second: one has run since the stream closed, and the session
    // has been idle for less than 2s since then.
    tokio::time::sleep(Duration::from_millis(5000).saturating_sub(started.elapsed())).await;
    let kept = client.post(&json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list"})).await;
    assert_eq!(kept.status, 200, "idle for less than 2s since its stream closed: {}", kept.body);
}

/// A request refused at the MCP endpoint before any message in it is read says why in a
/// JSON-RPC Invalid Request error with no id (`null`; left out for 2026-07-28, whose ids are
/// never `null`), as the transport allows and the official SDKs' servers do, so a client can
/// show it; one refused after its message is read carries the message's id.
#[tokio::test]
async fn a_refusal_at_the_endpoint_is_a_json_rpc_error_saying_why() {
    let server = Server::http(&[]);
    let http = reqwest::Client::new();
    let both = "application/json, text/event-stream";
    let legacy: Option<&str> = None;
    let cases = [
        (vec![("content-type", "text/plain"), ("accept", both)], legacy, 415, "Content-Type"),
        (vec![("content-type", "application/json"), ("accept", "text/html")], legacy, 406, "must accept"),
        (
            vec![("content-type", "application/json"), ("accept", both), ("origin", "http://evil.example")],
            legacy,
            403,
            "Origin",
        ),
        (vec![("content-type", "text/plain"), ("accept", both)], Some("2026-07-28"), 415, "Content-Type"),
        (vec![("content-type", "application/json"), ("accept", both)], legacy, 400, "Session ID is required"),
    ];
    for (headers, revision, status, why) in cases {
        let mut request = http.post(&server.url).body(r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#);
        for (name, value) in headers.iter().copied().chain(revision.map(|r| ("mcp-protocol-version", r))) {
            request = request.header(name, value);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), status, "{why}");
        assert_eq!(response.headers()["content-type"], "application/json", "{why}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["jsonrpc"], "2.0", "{body}");
        assert_eq!(body["error"]["code"], -32600, "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains(why), "{body}");
        match (status, revision) {
            // Read, and a request: its id.
            (400, _) => assert_eq!(body["id"], 7, "{body}"),
            (_, Some(_)) => assert!(body.get("id").is_none(), "{body}"),
            (_, None) => assert!(body["id"].is_null() && body.get("id").is_some(), "{body}"),
        }
    }
    // GET and DELETE have nothing for a 2026-07-28 client: 405, saying which method is.
    let response = http.get(&server.url).header("mcp-protocol-version", "2026-07-28").send().await.unwrap();
    assert_eq!((response.status().as_u16(), response.headers()["allow"].to_str().unwrap()), (405, "POST"));
    let body: Value = response.json().await.unwrap();
    assert!(body.get("id").is_none() && body["error"]["code"] == -32600, "{body}");
    // Two Mcp-Session-Id headers on a POST whose request is read: its id.
    let twice = http
        .post(&server.url)
        .header("content-type", "application/json")
        .header("accept", both)
        .header("mcp-session-id", "a")
        .header("mcp-session-id", "b")
        .body(r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#);
    let body: Value = twice.send().await.unwrap().json().await.unwrap();
    assert_eq!((body["id"].clone(), body["error"]["code"].clone()), (json!(7), json!(-32600)), "{body}");
    // Off the endpoint, plain text: an unknown path, and the metadata for a foreign Host.
    let elsewhere = http.get(server.url.replace("/mcp", "/elsewhere")).send().await.unwrap();
    assert_eq!(elsewhere.status().as_u16(), 404);
    let metadata = http.get(server.url.replace("/mcp", "/.well-known/oauth-protected-resource"));
    let metadata = metadata.header("host", "evil.example").send().await.unwrap();
    assert_eq!(metadata.status().as_u16(), 403);
    assert!(metadata.headers()["content-type"].to_str().unwrap().starts_with("text/plain"));
}

/// The admin and metrics listeners close a connection that never finishes its headers as
/// the endpoint does (`--header-timeout`), rather than holding it, and its file descriptor,
/// for good; and a tenant name that is no text once decoded (`/t/%ff/mcp`) is judged by the
/// Host check first, then refused as no tenant's, like any other.
#[tokio::test]
async fn the_listeners_beside_the_endpoint_cut_off_slow_headers_too() {
    use tokio::io::AsyncWriteExt;
    let dir = crate::support::scratch_dir("side-listeners");
    let (server, admin) = crate::support::Admin::serve(&dir, &["--header-timeout", "1", "--metrics", "127.0.0.1:0"]);
    let metrics = crate::telemetry::address_in_log(&server, "metrics on ");
    let authority = |url: &str| url.trim_start_matches("http://").split('/').next().unwrap().to_owned();
    for (what, authority) in [("metrics", authority(&metrics)), ("admin", authority(&admin.base))] {
        let mut slow = tokio::net::TcpStream::connect(&authority).await.unwrap();
        slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n").await.unwrap();
        let started = std::time::Instant::now();
        let closed = read_until_closed(&mut slow, std::time::Duration::from_secs(5)).await;
        assert!(closed.is_some(), "{what}: still open after 5 s");
        assert!(started.elapsed() < std::time::Duration::from_secs(4), "{what}: closed after {:?}", started.elapsed());
    }
    let http = reqwest::Client::new();
    let foreign = http.post(format!("{}/t/%ff/mcp", server.url.trim_end_matches("/mcp")));
    let foreign = foreign.header("host", "evil.example").body("{}").send().await.unwrap();
    assert_eq!(foreign.status().as_u16(), 403, "the Host check comes first");
    let local =
        http.post(format!("{}/t/%ff/mcp", server.url.trim_end_matches("/mcp"))).body("{}").send().await.unwrap();
    assert_eq!(local.status().as_u16(), 404);
    let body: Value = local.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("no such tenant"), "{body}");
    let _ = std::fs::remove_dir_all(dir);
}
