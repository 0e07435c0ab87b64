//! What one client can make the server hold, and for how long: requests in flight and
//! waiting on the client, ids and progress tokens, subscriptions, sessions per address, and
//! requests waiting on the client's roots when they are cancelled.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Client, Server, StdioServer, first_text, plugins, scratch_dir, status_mib};

/// A legacy session runs at most `--max-in-flight` requests at once: a client that hangs up
/// on calls waiting for its answers left each running (the spec says a disconnect is no
/// cancellation), holding its params for the five minutes the server waits, with no bound.
/// The next request is refused at once and the session goes on.
#[tokio::test]
async fn a_legacy_session_runs_at_most_max_in_flight_requests() {
    let conformance = plugins().join("conformance.wasm");
    let server = Server::http(&["--no-watch", "--plugin", conformance.to_str().unwrap(), "--max-in-flight", "2"]);
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({"elicitation": {"form": {}}})).await;
    let elicit = |id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "test_elicitation", "arguments": {"message": "who are you?"}}})
    };
    let mut asked = Vec::new();
    let mut streams = Vec::new();
    for id in [2, 3] {
        let mut stream = client.stream(&elicit(id)).await;
        let question = stream.next_message().await.expect("the elicitation request");
        assert_eq!(question["method"], "elicitation/create", "{question}");
        asked.push(question["id"].clone());
        streams.push(stream);
    }
    let refused = client.post(&elicit(4)).await.response(4).clone();
    assert_eq!(refused["error"]["code"], -31429, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("--max-in-flight"), "{refused}");
    // Answered, the first call ends and makes room.
    let answer = json!({"jsonrpc": "2.0", "id": asked[0], "result": {
        "action": "accept", "content": {"username": "ada", "email": "ada@example.com"}}});
    assert_eq!(client.post(&answer).await.status, 202);
    let done = streams[0].next_message().await.expect("the first call's answer");
    assert_eq!(done["id"], 2, "{done}");
    let mut again = client.stream(&elicit(5)).await;
    assert_eq!(again.next_message().await.expect("asked again")["method"], "elicitation/create");
}

/// On stdio a request that waits on the client gives its place in flight up (the client's
/// answer is further down the input), and takes one of as many places for requests that
/// have waited: past those, the question fails at once, rather than every request of a
/// client that answers nothing being held.
#[test]
fn stdio_requests_waiting_on_the_client_are_bounded() {
    let conformance = plugins().join("conformance.wasm");
    let mut stdio =
        StdioServer::start_with(&["--no-watch", "--plugin", conformance.to_str().unwrap(), "--max-in-flight", "1"]);
    stdio.initialize_offering("2025-11-25", json!({"elicitation": {"form": {}}}));
    let elicit = |id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "test_elicitation", "arguments": {"message": "who are you?"}}})
    };
    stdio.send(&elicit(2));
    let asked = stdio.read();
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    stdio.send(&elicit(3));
    let refused = stdio.read();
    assert_eq!(refused["id"], 3, "the second question is not sent: {refused}");
    assert!(first_text(&refused["result"]).contains("--max-in-flight"), "{refused}");
    stdio.send(&json!({"jsonrpc": "2.0", "id": asked["id"], "result": {
        "action": "accept", "content": {"username": "ada", "email": "ada@example.com"}}}));
    let answered = stdio.read();
    assert_eq!(answered["id"], 2, "{answered}");
    assert!(!first_text(&answered["result"]).contains("--max-in-flight"), "{answered}");
    // Its place among the waiting is free again.
    stdio.send(&elicit(4));
    assert_eq!(stdio.read()["method"], "elicitation/create");
    stdio.finish();
}

/// A stdio server with hostile narrowed to the client's roots, one place in flight per `places`.
fn roots_server(dir: &Path, places: &str) -> StdioServer {
    let granted = dir.join("granted");
    std::fs::create_dir_all(&granted).unwrap();
    std::fs::write(granted.join("seen.txt"), "SEEN").unwrap();
    let policy = dir.join("capsule.toml");
    std::fs::write(&policy, format!("[plugins.hostile]\nroots = true\ndirs = [{{ path = {:?} }}]\n", granted)).unwrap();
    let hostile = plugins().join("testing/hostile.wasm");
    let args = ["--no-watch", "--plugin", hostile.to_str().unwrap(), "--config", policy.to_str().unwrap()];
    let mut stdio = StdioServer::start_with(&[&args[..], &["--max-in-flight", places]].concat());
    stdio.initialize_offering("2025-06-18", json!({"roots": {"listChanged": true}}));
    stdio
}

fn read_granted(dir: &Path, id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "read_path", "arguments": {"path": dir.join("granted/seen.txt")}}})
}

/// Calls that need the client's roots, more of them than places in flight: the first asks
/// and the others wait for its answer. The asker used to queue for a place again once
/// answered, behind the calls waiting for it, and calls waiting for the asker kept their
/// places so that the reader never reached the answer: all of them stalled for the five
/// minutes the server waits and the client's answer was thrown away. Now a call waiting for
/// another's roots waits on the client like the asker (or, past `--max-in-flight` of those,
/// runs without roots at once).
#[test]
fn stdio_calls_waiting_for_the_roots_do_not_stall_the_one_fetching_them() {
    let dir = scratch_dir("roots-places");
    for (places, calls) in [("2", 3), ("2", 4), ("3", 6)] {
        let mut stdio = roots_server(&dir, places);
        for id in 0..calls {
            stdio.send(&read_granted(&dir, 10 + id));
        }
        let (mut answered, mut seen) = (0, 0);
        let started = std::time::Instant::now();
        while answered < calls {
            let message = stdio.read();
            if message["method"] == "roots/list" {
                let roots = json!([{"uri": format!("file://{}", dir.join("granted").display())}]);
                stdio.send(&json!({"jsonrpc": "2.0", "id": message["id"], "result": {"roots": roots}}));
            } else if message["id"].is_i64() {
                answered += 1;
                seen += usize::from(first_text(&message["result"]) == "SEEN");
            }
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{calls} calls stalled for {:?}", started.elapsed());
        assert!(seen >= 2, "{calls} calls with {places} places: only {seen} saw the roots");
        stdio.finish();
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A call cancelled while the server waits for the client's roots ends at once, and the
/// roots request is cancelled with the client (it used to wait on for five minutes, holding
/// the session's roots fetch, so every later call that needed them hung too).
#[test]
fn stdio_a_call_cancelled_while_its_roots_are_fetched_ends_at_once() {
    let dir = scratch_dir("roots-cancel");
    let mut stdio = roots_server(&dir, "4");
    stdio.send(&read_granted(&dir, 2));
    let asked = stdio.read();
    assert_eq!(asked["method"], "roots/list", "{asked}");
    stdio.send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}}));
    let note = stdio.read();
    assert_eq!(note["method"], "notifications/cancelled", "{note}");
    assert_eq!(note["params"]["requestId"], asked["id"], "{note}");
    // The next call asks afresh and is served.
    stdio.send(&read_granted(&dir, 3));
    loop {
        let message = stdio.read();
        if message["method"] == "roots/list" {
            let roots = json!([{"uri": format!("file://{}", dir.join("granted").display())}]);
            stdio.send(&json!({"jsonrpc": "2.0", "id": message["id"], "result": {"roots": roots}}));
        } else {
            assert_eq!(message["id"], 3, "the cancelled call was answered: {message}");
            assert_eq!(first_text(&message["result"]), "SEEN", "{message}");
            break;
        }
    }
    stdio.finish();
    let _ = std::fs::remove_dir_all(dir);
}

/// Request ids and progress tokens are echoed in every message about their request, so
/// their size is bounded (1 KiB).
#[tokio::test]
async fn ids_and_progress_tokens_are_bounded() {
    let server = Server::http(&["--no-watch"]);
    let client = Client::new(&server.url);
    let ping = |id: &str| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
    let long = format!("\"{}\"", "i".repeat(1025));
    let reply = client.post_raw(ping(&long), &[]).await;
    assert!(reply.body.contains("the limit is 1024 bytes"), "{}", reply.body);
    let mut legacy = Client::new(&server.url);
    legacy.initialize("2025-11-25", json!({})).await;
    let longest = "i".repeat(1024);
    let answered = legacy.post(&json!({"jsonrpc": "2.0", "id": longest, "method": "ping"})).await;
    assert_eq!(answered.messages[0]["id"], longest.as_str());
    let call = |token: String| {
        json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "add",
            "arguments": {"a": 1, "b": 2}, "_meta": {"progressToken": token}}})
    };
    let refused = legacy.post(&call("t".repeat(1025))).await.response(9).clone();
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("progressToken"), "{refused}");
    let served = legacy.post(&call("t".repeat(1024))).await.response(9).clone();
    assert_eq!(first_text(&served["result"]), "3", "{served}");
}

/// A session's subscriptions are bounded in bytes as well as in number: a thousand URIs of
/// 16 KiB each made an idle session cost 16 MiB.
#[tokio::test]
async fn a_session_s_subscriptions_are_bounded_in_bytes() {
    let misfit = plugins().join("testing/misfit.wasm");
    let server = Server::http(&["--no-watch", "--plugin", misfit.to_str().unwrap()]);
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    // misfit serves `misfit://{+v1}-…-{+v32}!`: the last variable takes the length.
    let uri = |i: usize| format!("misfit://{i}{}-{}!", "-a".repeat(30), "x".repeat(16_000));
    for i in 0..16 {
        let reply = client.request(10 + i as i64, "resources/subscribe", json!({"uri": uri(i)})).await;
        assert!(reply.get("result").is_some(), "subscription {i}: {reply}");
    }
    let refused = client.request(40, "resources/subscribe", json!({"uri": uri(16)})).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("256 KiB"), "{refused}");
    // Subscribing again to one it holds is no change; unsubscribing makes room.
    assert!(client.request(41, "resources/subscribe", json!({"uri": uri(3)})).await.get("result").is_some());
    assert!(client.request(42, "resources/unsubscribe", json!({"uri": uri(3)})).await.get("result").is_some());
    assert!(client.request(43, "resources/subscribe", json!({"uri": uri(16)})).await.get("result").is_some());
}

/// `--sessions-per-address` counts a client address's sessions at every tenant together:
/// counted per tenant, an address could hold the limit once at each. Refusals at the front
/// door (this one, a foreign Host or Origin) are counted by reason on `/metrics`, where an
/// operator behind a proxy can see them.
#[tokio::test]
async fn the_per_address_session_limit_spans_tenants() {
    let dir = scratch_dir("address-tenants");
    let policy = crate::tenants::two_tenants(&dir);
    let args = ["--no-watch", "--config", policy.to_str().unwrap(), "--sessions-per-address", "2"];
    let server = Server::http_in(&dir, &[&args[..], &["--metrics", "127.0.0.1:0"]].concat());
    let base = format!("http://{}", server.authority());
    let open = |tenant: &str| {
        let url = format!("{base}/t/{tenant}/mcp");
        async move { Client::new(&url).try_initialize("2025-11-25", json!({})).await.status }
    };
    assert_eq!((open("acme").await, open("globex").await), (200, 200));
    let third = Client::new(&format!("{base}/t/globex/mcp")).try_initialize("2025-11-25", json!({})).await;
    assert_eq!(third.status, 503, "{}", third.body);
    assert!(third.body.contains("client address"), "{}", third.body);

    let acme = Client::new(&format!("{base}/t/acme/mcp"));
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    for (header, value) in [("host", "evil.example"), ("host", "evil.example:80"), ("origin", "https://evil.example")] {
        assert_eq!(acme.post_raw(ping.clone(), &[(header, value)]).await.status, 403, "{header}: {value}");
    }
    let metadata = format!("{base}/.well-known/oauth-protected-resource/t/acme/mcp");
    let foreign = reqwest::Client::new().get(metadata).header("host", "evil.example").send().await.unwrap();
    assert_eq!(foreign.status(), 403);
    let metrics = crate::telemetry::address_in_log(&server, "metrics on ");
    let text = reqwest::get(&metrics).await.unwrap().text().await.unwrap();
    for (reason, count) in [("host", 3), ("origin", 1), ("session_limit_address", 1)] {
        let series = format!("capsule_http_refusals_total{{reason=\"{reason}\"}} {count}\n");
        assert!(text.contains(&series), "{series}in\n{text}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A legacy session is sent only what it negotiated: a request's `_meta` claiming sampling
/// does not make the server send `sampling/createMessage` to a client that declared none.
#[tokio::test]
async fn a_legacy_request_s_meta_does_not_widen_its_session_s_capabilities() {
    let conformance = plugins().join("conformance.wasm");
    let server = Server::http(&["--no-watch", "--plugin", conformance.to_str().unwrap()]);
    let mut client = Client::new(&server.url);
    client.initialize("2025-06-18", json!({})).await;
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "test_sampling",
        "arguments": {"prompt": "hi"}, "_meta": {"io.modelcontextprotocol/clientCapabilities": {"sampling": {}}}}});
    let reply = client.post(&call).await;
    assert!(!reply.body.contains("sampling/createMessage"), "{}", reply.body);
    assert_eq!(reply.response(2)["error"]["code"], -32021, "{}", reply.body);
}

/// SIGTERM (what systemd, Kubernetes and `docker stop` send) shuts the server down as
/// Ctrl-C does: it logs that it is shutting down and exits 0.
#[test]
fn sigterm_shuts_the_server_down_cleanly() {
    let mut server = Server::http(&["--no-watch"]);
    let sent = std::process::Command::new("kill").args(["-TERM", &server.pid().to_string()]).status().unwrap();
    assert!(sent.success());
    let status = server.wait_exit(Duration::from_secs(10)).expect("the server exits on SIGTERM");
    assert_eq!(status.code(), Some(0), "{}", server.log());
    assert!(server.log().contains("shutting down"), "{}", server.log());
}

/// Shutting down: a running call is answered (a legacy one got an empty stream), new
/// clients are refused at once, a connection that never finishes its request holds the
/// exit off for 10 seconds at most, and a second signal exits at once.
#[tokio::test]
async fn shutdown_answers_running_calls_and_is_bounded() {
    use std::io::Write;
    let hostile = plugins().join("testing/hostile.wasm");
    let args = ["--no-watch", "--plugin", hostile.to_str().unwrap()];
    let (mut patient, mut hasty) = (Server::http(&args), Server::http(&args));
    let term = |server: &Server| {
        let sent = std::process::Command::new("kill").args(["-TERM", &server.pid().to_string()]).status().unwrap();
        assert!(sent.success());
    };
    // Half a request head on each: the server waits for the rest.
    let half = |server: &Server| {
        let mut stream = std::net::TcpStream::connect(server.authority()).unwrap();
        stream.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n").unwrap();
        stream
    };
    let (_held, _also_held) = (half(&patient), half(&hasty));
    let mut client = Client::new(&patient.url);
    client.initialize("2025-11-25", json!({})).await;
    let stall = client.spawn_call(2, "stall", json!({}));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let began = std::time::Instant::now();
    term(&patient);
    let reply = stall.await.unwrap();
    let result = &reply.response(2)["result"];
    assert_eq!(result["isError"], true, "{}", reply.body);
    assert!(first_text(result).contains("cancelled"), "{}", reply.body);
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while std::net::TcpStream::connect(patient.authority()).is_ok() {
        assert!(std::time::Instant::now() < deadline, "a new client was still accepted after shutdown began");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    term(&hasty);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(hasty.wait_exit(Duration::from_millis(200)).is_none(), "the half request should hold the exit off");
    term(&hasty);
    let status = hasty.wait_exit(Duration::from_secs(5)).expect("a second signal exits at once");
    assert_eq!(status.code(), Some(143), "{}", hasty.log());
    let status = patient.wait_exit(Duration::from_secs(15)).expect("shutdown is bounded");
    assert_eq!(status.code(), Some(0), "{}", patient.log());
    assert!(began.elapsed() >= Duration::from_secs(9), "the open connection had its grace");
    assert!(patient.log().contains("still open"), "{}", patient.log());
}

/// A call whose answer would come on a stream already open (it asked the client something
/// first) is answered there when the server shuts down: the stream is not cut under it.
#[tokio::test]
async fn shutdown_answers_a_call_on_its_open_stream() {
    let conformance = plugins().join("conformance.wasm");
    let mut server = Server::http(&["--no-watch", "--plugin", conformance.to_str().unwrap()]);
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({"elicitation": {"form": {}}})).await;
    let asking = client.spawn_call(2, "test_elicitation", json!({"message": "m"}));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let sent = std::process::Command::new("kill").args(["-TERM", &server.pid().to_string()]).status().unwrap();
    assert!(sent.success());
    let reply = asking.await.unwrap();
    assert!(reply.body.contains("elicitation/create"), "{}", reply.body);
    let result = &reply.response(2)["result"];
    assert_eq!(result["isError"], true, "{}", reply.body);
    assert!(first_text(result).contains("cancelled"), "{}", reply.body);
    assert_eq!(server.wait_exit(Duration::from_secs(15)).and_then(|s| s.code()), Some(0));
}

/// SIGTERM to a stdio server (a client stopping it) exits 0 and leaves the pipes it was
/// given blocking again: a shell that shares them must not find them non-blocking after.
#[test]
fn a_stdio_server_stopped_by_sigterm_leaves_its_pipes_as_it_found_them() {
    use std::io::{BufRead, Write};
    let (input, mut writer) = std::io::pipe().unwrap();
    let shared = input.try_clone().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["serve", "--stdio", "--no-watch"])
        .stdin(std::process::Stdio::from(input))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let discover = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}});
    writeln!(writer, "{discover}").unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.contains("supportedVersions"), "{line}");
    let nonblocking = || rustix::fs::fcntl_getfl(&shared).unwrap().contains(rustix::fs::OFlags::NONBLOCK);
    assert!(nonblocking(), "serving a pipe makes it non-blocking");
    let sent = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(sent.success());
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert!(!nonblocking(), "the pipe was left non-blocking");
}

/// A stdio server whose stderr is a pipe nobody reads (clients that pipe it and never drain
/// it exist) goes on answering: one call whose plugin floods its stderr filled the pipe, and
/// the server blocked in the log's write and answered nothing more. Records that do not fit
/// are dropped, and counted in a record once stderr is read again.
#[test]
fn a_stdio_server_whose_stderr_nobody_reads_goes_on_answering() {
    use std::io::{BufRead, Read, Write};
    let hostile = plugins().join("testing/hostile.wasm");
    let calc = plugins().join("calc.wasm");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["serve", "--stdio", "--no-watch", "--plugin", hostile.to_str().unwrap()])
        .args(["--plugin", calc.to_str().unwrap()])
        .env("CAPSULE_LOG", "info")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let (answers, answered) = std::sync::mpsc::channel::<Value>();
    let output = std::io::BufReader::new(child.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in output.lines().map_while(Result::ok) {
            let _ = answers.send(serde_json::from_str(&line).unwrap());
        }
    });
    let answer = |input: &mut std::process::ChildStdin, message: Value| {
        let id = message["id"].clone();
        writeln!(input, "{message}").unwrap();
        loop {
            let message = answered.recv_timeout(Duration::from_secs(30)).expect("an answer within 30 s");
            if message["id"] == id {
                return message;
            }
        }
    };
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
        "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    answer(&mut input, init);
    writeln!(input, "{}", json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).unwrap();
    // Each flood logs its call's stderr (its 64 KiB budget): the pipe's 64 KiB, then the
    // log's 4 MiB of waiting records, are full well before the last.
    for id in 1..=80 {
        let flood = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "flood", "arguments": {"count": 1}}});
        assert!(answer(&mut input, flood).get("result").is_some());
    }
    let add = json!({"jsonrpc": "2.0", "id": 90, "method": "tools/call",
        "params": {"name": "add", "arguments": {"a": 2, "b": 3}}});
    assert_eq!(first_text(&answer(&mut input, add)["result"]), "5");
    // Read stderr now: what was waiting comes out, then the count of what was dropped.
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut log = String::new();
        let _ = stderr.read_to_string(&mut log);
        log
    });
    let flood = json!({"jsonrpc": "2.0", "id": 91, "method": "tools/call",
        "params": {"name": "flood", "arguments": {"count": 1}}});
    answer(&mut input, flood);
    drop(input);
    assert!(child.wait().unwrap().success());
    let log = reader.join().unwrap();
    assert!(
        log.contains("log records were dropped: stderr was not being read"),
        "{}",
        &log[log.len().saturating_sub(2000)..]
    );
}

/// A plugin's state across a 2026-07-28 client's rounds rides sealed in `requestState`,
/// which the client sends back in a request body: state of more than 1 MiB (its seal larger
/// than a default body once it reached 4 MiB) is refused with the reason, not handed out to
/// a client that could never retry with it.
#[tokio::test]
async fn plugin_state_that_could_not_be_sent_back_is_refused() {
    let misfit = plugins().join("testing/misfit.wasm");
    let server = Server::http(&["--no-watch", "--plugin", misfit.to_str().unwrap()]);
    let client = Client::new(&server.url);
    let reply = client
        .modern(2, "tools/call", json!({"name": "big_state", "arguments": {}}), json!({"elicitation": {"form": {}}}))
        .await;
    let answer = reply.response(2);
    assert_eq!(answer["error"]["code"], -32603, "{}", &reply.body[..reply.body.len().min(500)]);
    assert!(answer["error"]["message"].as_str().unwrap().contains("requestState"), "{answer}");
}

/// A 2026-07-28 retry that answers the plugin's question but not the host's roots request
/// asked beside it runs with no roots, as a legacy client that does not answer: asking for
/// the roots alone again threw the answer it gave away, and the plugin asked once more.
#[tokio::test]
async fn a_retry_that_leaves_the_roots_unanswered_keeps_its_other_answers() {
    let dir = scratch_dir("modern-roots-answers");
    std::fs::create_dir_all(dir.join("granted")).unwrap();
    let policy = dir.join("capsule.toml");
    let grant = format!("[plugins.conformance]\nroots = true\ndirs = [{{ path = {:?} }}]\n", dir.join("granted"));
    std::fs::write(&policy, grant).unwrap();
    let conformance = plugins().join("conformance.wasm");
    let server =
        Server::http(&["--no-watch", "--plugin", conformance.to_str().unwrap(), "--config", policy.to_str().unwrap()]);
    let client = Client::new(&server.url);
    let caps = || json!({"elicitation": {"form": {}}, "roots": {}});
    let call = |extra: Value| {
        let mut params = json!({"name": "test_elicitation", "arguments": {"message": "who are you?"}});
        params.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        params
    };
    let first = client.modern(1, "tools/call", call(json!({})), caps()).await.response(1)["result"].clone();
    assert!(first["inputRequests"]["capsule.roots"].is_object(), "the host asks for the roots first: {first}");
    let roots = json!({"roots": [{"uri": format!("file://{}", dir.join("granted").display())}]});
    let mut retry = json!({"inputResponses": {"capsule.roots": roots}});
    if let Some(state) = first.get("requestState") {
        retry["requestState"] = state.clone();
    }
    let asked = client.modern(2, "tools/call", call(retry), caps()).await.response(2)["result"].clone();
    let (key, question) = asked["inputRequests"]
        .as_object()
        .and_then(|r| r.iter().find(|(k, _)| !k.starts_with("capsule.")))
        .map(|(k, v)| (k.clone(), v.clone()))
        .unwrap_or_else(|| panic!("the plugin asks its question: {asked}"));
    assert_eq!(question["method"], "elicitation/create", "{asked}");
    let answer = json!({"action": "accept", "content": {"username": "ada", "email": "ada@example.com"}});
    let mut retry = json!({"inputResponses": {key: answer}});
    if let Some(state) = asked.get("requestState") {
        retry["requestState"] = state.clone();
    }
    let done = client.modern(3, "tools/call", call(retry), caps()).await.response(3)["result"].clone();
    assert_ne!(done["resultType"], "input_required", "the answer was thrown away: {done}");
    assert!(first_text(&done).contains("ada"), "{done}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A stdio `subscriptions/listen` stream lasts until the client cancels it: it waits on the
/// client, so it holds no place in flight (with as many streams as places the reader used
/// to stop for good, and never read the cancellation that would end them), and past
/// `--max-in-flight` of them one more is refused.
#[test]
fn stdio_listen_streams_hold_no_place_in_flight() {
    let mut stdio = StdioServer::start_with(&["--no-watch", "--max-in-flight", "1"]);
    let listen = |id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": {
            "notifications": {"toolsListChanged": true},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}}}})
    };
    stdio.send(&listen(5));
    stdio.send(&listen(6));
    let list = |id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}})
    };
    stdio.send(&list(7));
    let (mut refused, mut listed) = (false, false);
    while !(refused && listed) {
        let message = stdio.read();
        match message["id"].as_i64() {
            Some(6) => {
                assert_eq!(message["error"]["code"], -31429, "{message}");
                refused = true;
            }
            Some(7) => {
                assert!(message.get("result").is_some(), "{message}");
                listed = true;
            }
            Some(other) => panic!("request {other} was answered: {message}"),
            None => {}
        }
    }
    stdio.send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}}));
    stdio.send(&list(8));
    loop {
        let message = stdio.read();
        if message["id"] == 8 {
            break;
        }
    }
    stdio.finish();
}

/// A 2025-03-26 batch counts once against a session's `--max-in-flight`: its elements queue
/// to run a few at a time, and were each refused past the limit as if sent apart.
#[tokio::test]
async fn a_batch_counts_once_against_max_in_flight() {
    let server = Server::http(&["--no-watch", "--max-in-flight", "2"]);
    let mut client = Client::new(&server.url);
    client.initialize("2025-03-26", json!({})).await;
    let batch: Vec<Value> = (10..15).map(|id| json!({"jsonrpc": "2.0", "id": id, "method": "ping"})).collect();
    let reply = client.post(&Value::Array(batch)).await;
    for id in 10..15 {
        assert!(reply.response(id).get("result").is_some(), "{}", reply.body);
    }
}

/// A batch's elements are read only once its length is allowed: two million `0`s in a
/// 4 MiB body each became a refusal (the server's peak went from 44 to 394 MB) before the
/// batch was refused for its length.
#[tokio::test]
async fn a_batch_past_max_batch_is_refused_unread() {
    let server = Server::http(&["--no-watch"]);
    let peak_mib = || status_mib(server.pid(), "VmHWM");
    let mut client = Client::new(&server.url);
    client.initialize("2025-03-26", json!({})).await;
    let before = peak_mib();
    let count = 2_000_000;
    let body = format!("[{}0]", "0,".repeat(count - 1));
    let reply = client.post_raw(body, &[]).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    let error = &reply.messages[0]["error"];
    assert_eq!(error["code"], -32600, "{}", reply.body);
    assert!(error["message"].as_str().unwrap().ends_with(&format!("this one holds {count}")), "{}", reply.body);
    let grew = peak_mib().saturating_sub(before);
    assert!(grew < 64, "the server's peak grew {grew} MiB for one refused batch");
    assert!(client.request(2, "ping", json!({})).await.get("result").is_some());
}
