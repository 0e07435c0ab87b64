//! Shared test plumbing: paths, a real `capsule` process on a real socket or pipe, a small
//! MCP-over-HTTP client that reads JSON and SSE responses, and HTTP listeners for plugins to
//! reach.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ has a parent").to_path_buf()
}

/// `target/plugins`, where the build leaves every plugin component.
pub fn plugins() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"));
    let target = if target.is_absolute() { target } else { root().join(target) };
    target.join("plugins")
}

/// A fresh, empty directory for one test.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("capsule-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A [`scratch_dir`] (its canonical path) removed when the test ends, and kept when the test
/// fails, to be looked at. For tests that leave much behind (toolchains' builds, npm installs).
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        Scratch(scratch_dir(name).canonicalize().unwrap())
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A script from `../shared/tools`; the suite cannot be judged without it.
pub fn shared_tool(relative: &str) -> PathBuf {
    let path = root().join("..").join("shared").join("tools").join(relative);
    assert!(
        path.exists(),
        "{} is missing: the client and conformance tests need ../shared/tools beside the repository",
        path.display()
    );
    path
}

/// A running `capsule serve`, killed on drop. Its stderr is collected for assertions.
pub struct Server {
    child: Child,
    pub url: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    /// Start `capsule serve --listen 127.0.0.1:0` (unless `args` name an address) with extra
    /// arguments and wait until it listens and its plugins are loaded.
    pub fn http(args: &[&str]) -> Server {
        Server::http_in(&std::env::current_dir().expect("working directory"), args)
    }

    /// [`Server::http`] with `dir` as its working directory, so relative paths in `args` are
    /// relative to it, as an operator would write them.
    pub fn http_in(dir: &std::path::Path, args: &[&str]) -> Server {
        Server::http_with_env(dir, args, &[])
    }

    /// [`Server::http_in`] with more environment variables.
    pub fn http_with_env(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Server {
        let server = Server::starting_with_env(dir, args, env);
        // Tests compile plugins side by side on two cores: loading may take a while.
        let deadline = Instant::now() + Duration::from_secs(120);
        while !is_ready(&server.log()) {
            assert!(Instant::now() < deadline, "capsule never loaded its plugins; its log:\n{}", server.log());
            std::thread::sleep(Duration::from_millis(10));
        }
        server
    }

    /// Start `capsule serve` and return once it listens, its plugins perhaps still loading.
    pub fn starting(dir: &std::path::Path, args: &[&str]) -> Server {
        Server::starting_with_env(dir, args, &[])
    }

    pub fn starting_with_env(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Server {
        Server::spawn(Command::new(env!("CARGO_BIN_EXE_capsule")), dir, args, env)
    }

    /// [`Server::http`] started as `nohup` starts a program: with SIGHUP ignored.
    pub fn http_ignoring_hangups(args: &[&str]) -> Server {
        let mut command = Command::new("sh");
        command.args(["-c", "trap '' HUP; exec \"$0\" \"$@\"", env!("CARGO_BIN_EXE_capsule")]);
        let server = Server::spawn(command, &std::env::current_dir().expect("working directory"), args, &[]);
        let deadline = Instant::now() + Duration::from_secs(120);
        while !is_ready(&server.log()) {
            assert!(Instant::now() < deadline, "capsule never loaded its plugins; its log:\n{}", server.log());
            std::thread::sleep(Duration::from_millis(10));
        }
        server
    }

    /// Start `command` (capsule, or what runs it) as `capsule serve` with `args`.
    fn spawn(mut command: Command, dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Server {
        let listen: &[&str] = if args.contains(&"--listen") { &[] } else { &["--listen", "127.0.0.1:0"] };
        let mut child = command
            .current_dir(dir)
            .arg("serve")
            .args(listen)
            .args(args)
            .env("CAPSULE_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start capsule");
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("serving MCP at ").nth(1) {
                    let _ = tx.send(address(rest).to_owned());
                }
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("capsule did not start listening; its log:\n{}", log.lock().unwrap()));
        Server { child, url, log }
    }

    /// Everything the server logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Wait until the log contains `needle` (logs are written asynchronously).
    pub fn wait_for_log(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.log();
            if log.contains(needle) || Instant::now() > deadline {
                return log;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status, once it has exited within `within`.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        exit_within(&mut self.child, within)
    }

    /// Each of the server's threads: its name and the text of its `/proc` file `file`
    /// (threads that ended meanwhile, or lack the file, are left out).
    pub fn thread_files(&self, file: &str) -> Vec<(String, String)> {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.pid())).expect("the server's threads");
        tasks
            .map_while(Result::ok)
            .filter_map(|task| {
                let comm = std::fs::read_to_string(task.path().join("comm")).ok()?;
                Some((comm.trim().to_owned(), std::fs::read_to_string(task.path().join(file)).ok()?))
            })
            .collect()
    }

    /// CPU time used so far by the server's threads named `name`.
    pub fn thread_cpu(&self, name: &str) -> Duration {
        let nanos = self
            .thread_files("schedstat")
            .into_iter()
            .filter(|(comm, _)| comm == name)
            .filter_map(|(_, stat)| stat.split_whitespace().next()?.parse::<u64>().ok())
            .sum();
        Duration::from_nanos(nanos)
    }

    /// `host:port` of the server.
    pub fn authority(&self) -> String {
        self.url.trim_start_matches("http://").trim_end_matches("/mcp").to_owned()
    }
}

/// Open a raw connection to the server.
/// A memory figure of process `pid` from `/proc/{pid}/status` (`VmRSS`, `VmHWM`...), in MiB.
pub fn status_mib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':')).unwrap();
    let kib: u64 = line.trim().trim_end_matches(" kB").parse().unwrap();
    kib >> 10
}

pub async fn raw_connection(server: &Server) -> tokio::net::TcpStream {
    tokio::net::TcpStream::connect(server.authority()).await.unwrap()
}

/// Read until the server closes the connection (or `within` passes): what it sent.
pub async fn read_until_closed(stream: &mut tokio::net::TcpStream, within: Duration) -> Option<String> {
    let mut received = Vec::new();
    let read = tokio::time::timeout(within, stream.read_to_end(&mut received)).await;
    read.ok().map(|_| String::from_utf8_lossy(&received).into_owned())
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Arguments serving the example plugins, the conformance fixtures and the hostile plugin.
pub fn all_plugins() -> Vec<String> {
    let plugins = plugins();
    vec![
        "--plugins".into(),
        plugins.display().to_string(),
        "--plugin".into(),
        plugins.join("testing").join("hostile.wasm").display().to_string(),
    ]
}

/// Run a shell script (a `../shared/tools` runner), returning its exit success and output.
pub fn run_script(script: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let output = Command::new("bash")
        .arg(script)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run script");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

/// An HTTP response, with its JSON-RPC messages (one JSON body or an SSE stream).
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub messages: Vec<Value>,
    pub body: String,
}

impl Reply {
    /// The message answering request `id`.
    pub fn response(&self, id: i64) -> &Value {
        self.messages
            .iter()
            .find(|m| m.get("id") == Some(&json!(id)) && m.get("method").is_none())
            .unwrap_or_else(|| panic!("no response with id {id} in {:?} (status {})", self.messages, self.status))
    }
}

/// A raw MCP-over-HTTP client.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    pub url: String,
    pub session: Option<String>,
    pub version: String,
    /// A bearer token sent with every request.
    pub bearer: Option<String>,
}

pub const META_2026: &str = "2026-07-28";

impl Client {
    pub fn new(url: &str) -> Client {
        Client {
            http: reqwest::Client::new(),
            url: url.to_owned(),
            session: None,
            version: "2025-11-25".into(),
            bearer: None,
        }
    }

    /// A client sending through `http` (one that resolves a public name to a test's proxy).
    pub fn with_http(url: &str, http: reqwest::Client) -> Client {
        Client { http, ..Client::new(url) }
    }

    /// A POST with the standard headers, and the session's when there is one.
    fn builder(&self) -> reqwest::RequestBuilder {
        let request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        let request = match &self.bearer {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        match &self.session {
            Some(session) => request.header("mcp-session-id", session).header("mcp-protocol-version", &self.version),
            None => request,
        }
    }

    /// POST a body with the standard headers (plus `extra`), reading JSON or SSE.
    pub async fn post_raw(&self, body: impl Into<reqwest::Body>, extra: &[(&str, &str)]) -> Reply {
        let mut request = self.builder();
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        let response = request.body(body).send().await.expect("send");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.text().await.unwrap_or_default();
        let is_sse = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let messages = if is_sse {
            body.lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str(d.trim()).ok())
                .collect()
        } else {
            match serde_json::from_str::<Value>(&body) {
                Ok(Value::Array(items)) => items,
                Ok(value) => vec![value],
                Err(_) => Vec::new(),
            }
        };
        Reply { status, headers, messages, body }
    }

    /// End the session with DELETE (its bearer token and revision sent as on every request);
    /// the status.
    pub async fn end_session(&self) -> u16 {
        let session = self.session.as_deref().expect("a session to end");
        let request =
            self.http.delete(&self.url).header("mcp-session-id", session).header("mcp-protocol-version", &self.version);
        let request = match &self.bearer {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        request.send().await.expect("send").status().as_u16()
    }

    /// POST a message and read the SSE response message by message, as it arrives (a JSON
    /// answer, given when nothing had to come first, reads as a stream of one message).
    pub async fn stream(&self, message: &Value) -> SseStream {
        let response = self.builder().body(message.to_string()).send().await.expect("send");
        assert_eq!(response.status(), 200, "streamed POST");
        let is_json = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        if is_json {
            let body = response.text().await.unwrap_or_default();
            return SseStream { body: Box::pin(futures::stream::empty()), buffer: format!("data: {body}\n\n") };
        }
        SseStream { body: Box::pin(response.bytes_stream()), buffer: String::new() }
    }

    /// Open the legacy session's GET stream, where server-initiated notifications arrive.
    pub async fn listen_legacy(&self) -> SseStream {
        let response = self
            .http
            .get(&self.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", self.session.as_deref().expect("a session"))
            .header("mcp-protocol-version", &self.version)
            .send()
            .await
            .expect("send");
        assert_eq!(response.status(), 200, "GET stream");
        SseStream { body: Box::pin(response.bytes_stream()), buffer: String::new() }
    }

    /// Open a 2026-07-28 `subscriptions/listen` stream with this filter.
    pub async fn stream_modern(&self, notifications: Value) -> SseStream {
        let mut params = json!({"notifications": notifications["notifications"]});
        params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": META_2026,
            "io.modelcontextprotocol/clientCapabilities": {}});
        let response = self
            .builder()
            .header("mcp-protocol-version", META_2026)
            .header("mcp-method", "subscriptions/listen")
            .body(json!({"jsonrpc": "2.0", "id": 77, "method": "subscriptions/listen", "params": params}).to_string())
            .send()
            .await
            .expect("send");
        assert_eq!(response.status(), 200, "listen");
        SseStream { body: Box::pin(response.bytes_stream()), buffer: String::new() }
    }

    /// Send a JSON-RPC message.
    pub async fn post(&self, message: &Value) -> Reply {
        self.post_raw(message.to_string(), &[]).await
    }

    /// A `tools/call` posted from a task of its own, so that the test can act while it runs
    /// (cancel it, call beside it).
    pub fn spawn_call(&self, id: u64, name: &str, arguments: Value) -> tokio::task::JoinHandle<Reply> {
        let client = self.clone();
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}});
        tokio::spawn(async move { client.post(&call).await })
    }

    /// An `initialize` request (id 0) at `version`, answered however the server answers it.
    pub async fn try_initialize(&self, version: &str, capabilities: Value) -> Reply {
        self.post(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": capabilities,
            "clientInfo": {"name": "capsule-tests", "version": "1"}}}))
            .await
    }

    /// `initialize` + `notifications/initialized` at `version`; keeps the session id.
    pub async fn initialize(&mut self, version: &str, capabilities: Value) -> Value {
        let reply = self.try_initialize(version, capabilities).await;
        assert_eq!(reply.status, 200, "initialize failed: {}", reply.body);
        self.session = reply.headers.get("mcp-session-id").map(|v| v.to_str().unwrap().to_owned());
        let result = reply.response(0)["result"].clone();
        self.version = result["protocolVersion"].as_str().unwrap_or(version).to_owned();
        let ack = self.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        assert!(ack.status < 300, "notifications/initialized: {} {}", ack.status, ack.body);
        result
    }

    /// A request in the current session.
    pub async fn request(&self, id: i64, method: &str, params: Value) -> Value {
        let reply = self.post(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        reply.response(id).clone()
    }

    /// A stateless 2026-07-28 request with the standard headers and `_meta`.
    pub async fn modern(&self, id: i64, method: &str, mut params: Value, capabilities: Value) -> Reply {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": META_2026,
            "io.modelcontextprotocol/clientCapabilities": capabilities,
            "io.modelcontextprotocol/clientInfo": {"name": "capsule-tests", "version": "1"},
        });
        let name = params.get("name").or_else(|| params.get("uri")).and_then(Value::as_str).map(str::to_owned);
        let mut headers = vec![("mcp-protocol-version", META_2026), ("mcp-method", method)];
        if let Some(name) = &name {
            headers.push(("mcp-name", name.as_str()));
        }
        self.post_raw(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(), &headers)
            .await
    }
}

/// The text of a tool result's first content block.
pub fn first_text(result: &Value) -> String {
    result["content"][0]["text"].as_str().unwrap_or_default().to_owned()
}

/// An SSE response read incrementally.
pub struct SseStream {
    body: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: String,
}

impl SseStream {
    /// The next JSON-RPC message on the stream (skipping priming and keep-alive events).
    pub async fn next_message(&mut self) -> Option<Value> {
        use futures::StreamExt;
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                let data: String = event.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim).collect();
                if let Ok(message) = serde_json::from_str::<Value>(&data) {
                    return Some(message);
                }
            }
            let chunk = tokio::time::timeout(Duration::from_secs(10), self.body.next()).await.ok()??.ok()?;
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

/// Whether a log (text or JSON records) says the first load is done.
pub fn is_ready(log: &str) -> bool {
    log.contains(" ready: ") || log.contains("\"ready: ")
}

/// The address at the start of `rest`, in a text log line or a JSON one.
pub fn address(rest: &str) -> &str {
    rest.split(|c: char| c.is_whitespace() || c == '"').next().unwrap_or_default()
}

/// `child`'s exit status, once it has exited within `within`.
fn exit_within(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().ok().flatten() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// `capsule serve --stdio` over real pipes: write messages, read one JSON line at a time.
pub struct StdioServer {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
}

impl StdioServer {
    pub fn start() -> StdioServer {
        StdioServer::start_with(&[])
    }

    /// Start with more `serve` flags, and wait until its plugins are loaded (or it exits):
    /// plugins that join after `initialize` are announced with list-change notifications,
    /// which would come between the answers these tests read.
    pub fn start_with(args: &[&str]) -> StdioServer {
        StdioServer::start_with_env(args, &[])
    }

    /// [`StdioServer::start_with`] with more environment variables.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> StdioServer {
        let (server, loaded) = StdioServer::starting(args, env);
        // An error (the channel closed at exit) is for the test to find.
        let _ = loaded.recv_timeout(Duration::from_secs(120));
        server
    }

    /// Start without waiting for the plugins; the receiver hears when they are loaded.
    pub fn starting(args: &[&str], env: &[(&str, &str)]) -> (StdioServer, std::sync::mpsc::Receiver<()>) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_capsule"))
            .args(["serve", "--stdio"])
            .args(args)
            .env("CAPSULE_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start capsule --stdio");
        let stderr = child.stderr.take().expect("piped stderr");
        let (ready, loaded) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if is_ready(&line) {
                    let _ = ready.send(());
                }
            }
        });
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        (StdioServer { child, stdin, stdout }, loaded)
    }

    /// Write one line as it is (it need not be valid JSON).
    pub fn send_line(&mut self, line: &str) {
        self.send_bytes(format!("{line}\n").as_bytes());
    }

    /// Write raw bytes (not necessarily UTF-8, not necessarily a whole line).
    pub fn send_bytes(&mut self, bytes: &[u8]) {
        use std::io::Write;
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).and_then(|()| stdin.flush()).expect("write to capsule");
    }

    pub fn send(&mut self, message: &Value) {
        self.send_line(&message.to_string());
    }

    /// The next line of stdout, which must be JSON-RPC and nothing else.
    pub fn read(&mut self) -> Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read from capsule");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("stdout must carry only JSON-RPC ({e}): {line:?}"))
    }

    /// `initialize` at `version` and `notifications/initialized`.
    pub fn initialize(&mut self, version: &str) {
        self.initialize_offering(version, json!({}));
    }

    /// The same, for a client offering `capabilities`.
    pub fn initialize_offering(&mut self, version: &str, capabilities: Value) {
        self.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": capabilities, "clientInfo": {"name": "t", "version": "1"}}}));
        assert_eq!(self.read()["result"]["protocolVersion"], version);
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    /// Its exit status, once it has exited within `within`.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        exit_within(&mut self.child, within)
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Close stdin and expect a clean exit.
    pub fn finish(mut self) {
        self.close_input();
        assert!(self.child.wait().expect("wait").success(), "capsule should exit cleanly when stdin closes");
    }

    /// Close stdin (answers to what was sent may still follow).
    pub fn close_input(&mut self) {
        drop(self.stdin.take());
    }

    /// Stdout, for a test that reads it line by line itself.
    pub fn stdout_mut(&mut self) -> &mut BufReader<std::process::ChildStdout> {
        &mut self.stdout
    }

    /// Stdin itself, for a test that writes from another thread (closing it ends the input).
    pub fn take_input(&mut self) -> std::process::ChildStdin {
        self.stdin.take().expect("stdin open")
    }
}

/// The admin endpoint of a server started with `--admin 127.0.0.1:0`.
pub struct Admin {
    http: reqwest::Client,
    pub base: String,
    pub token: String,
}

impl Admin {
    /// Start a server in `dir` with `args` and its admin endpoint (token file in `dir`).
    pub fn serve(dir: &std::path::Path, args: &[&str]) -> (Server, Admin) {
        let token_file = dir.join("admin-token");
        let mut all = args.to_vec();
        all.extend(["--admin", "127.0.0.1:0", "--admin-token-file", token_file.to_str().unwrap()]);
        let server = Server::http_in(dir, &all);
        let admin = Admin::of(&server, &token_file);
        (server, admin)
    }

    pub fn of(server: &Server, token_file: &std::path::Path) -> Admin {
        let log = server.wait_for_log("admin endpoint on http://");
        let base = log.split("admin endpoint on ").nth(1).map(address).expect("admin address in the log").to_owned();
        let token = std::fs::read_to_string(token_file).expect("the server wrote the token").trim().to_owned();
        Admin { http: reqwest::Client::new(), base, token }
    }

    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        token: Option<&str>,
    ) -> (u16, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("admin request");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        self.send(method, path, body, Some(&self.token.clone())).await
    }

    pub async fn plugin(&self, name: &str) -> Value {
        let (status, body) = self.call(reqwest::Method::GET, "/plugins", None).await;
        assert_eq!(status, 200, "{body}");
        body["plugins"].as_array().unwrap().iter().find(|p| p["name"] == name).cloned().unwrap_or(Value::Null)
    }
}

/// An HTTP server on 127.0.0.1 that gives every request the same answer and counts connections.
pub struct Listener {
    pub port: u16,
    pub connections: Arc<AtomicUsize>,
}

impl Listener {
    /// Answer `200 OK` with `body`.
    pub async fn start(body: &str) -> Listener {
        let reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        Listener::serve(reply).await
    }

    /// Answer `302 Found` to `location`.
    pub async fn redirect(location: &str) -> Listener {
        Listener::serve(format!(
            "HTTP/1.1 302 Found\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        ))
        .await
    }

    async fn serve(reply: String) -> Listener {
        let socket = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = socket.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let count = connections.clone();
        let reply: Arc<str> = reply.into();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = socket.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let reply = reply.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let _ = stream.write_all(reply.as_bytes()).await;
                });
            }
        });
        Listener { port, connections }
    }
}
