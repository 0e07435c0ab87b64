//! The load generator: real MCP over HTTP/1.1 (one keep-alive connection per client, legacy
//! sessions or stateless 2026-07-28 requests, JSON or SSE responses) and over stdio (one call
//! at a time or pipelined). Every response is checked; errors are counted, never averaged in.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

/// How a client talks to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `initialize`, then requests in an `Mcp-Session-Id` session (2025-11-25).
    Legacy,
    /// Stateless 2026-07-28 requests with `_meta` and the standard headers.
    Stateless,
    /// Stateless requests whose arguments the tool's input schema refuses (`a` a string):
    /// the server's whole path but the plugin, answered with a tool error. Set against
    /// [`Mode::Stateless`] on the same server, it splits a call's cost into wire and sandbox.
    Refused,
}

impl Mode {
    /// Whether its requests are 2026-07-28 ones, with no session.
    fn stateless(self) -> bool {
        matches!(self, Mode::Stateless | Mode::Refused)
    }
}

/// One measurement.
#[derive(Debug, Default)]
pub struct Sample {
    pub calls: u64,
    pub errors: u64,
    pub elapsed: Duration,
    /// Per-call latency in microseconds.
    pub latencies: Vec<u32>,
    /// CPU time the server used over the run (user + system, all threads), in seconds.
    pub server_cpu: Option<f64>,
}

impl Sample {
    /// Add `slice`, a later measurement of the same configuration, to this one.
    pub fn absorb(&mut self, slice: Sample) {
        self.calls += slice.calls;
        self.errors += slice.errors;
        self.elapsed += slice.elapsed;
        self.latencies.extend(slice.latencies);
        self.server_cpu = self.server_cpu.zip(slice.server_cpu).map(|(a, b)| a + b);
    }

    pub fn throughput(&self) -> f64 {
        self.calls as f64 / self.elapsed.as_secs_f64()
    }

    /// The server's CPU time per call, in microseconds: unlike throughput, barely moved by
    /// what else the shared machine runs.
    pub fn cpu_per_call(&self) -> Option<f64> {
        self.server_cpu.filter(|_| self.calls > 0).map(|cpu| cpu * 1e6 / self.calls as f64)
    }

    pub fn percentile(&self, p: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        let mut sorted = self.latencies.clone();
        sorted.sort_unstable();
        let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
        sorted[rank] as f64
    }

    /// Calls slower than 30 ms: on loopback that is a stall (Nagle and delayed ACK look
    /// like ~40 ms), never normal service time.
    pub fn stalls(&self) -> usize {
        self.latencies.iter().filter(|&&l| l > 30_000).count()
    }
}

const PROTOCOL: &str = "2025-11-25";
const MODERN: &str = "2026-07-28";

fn call_body(id: u64, mode: Mode) -> String {
    let arguments = match mode {
        Mode::Refused => json!({"a": "one", "b": 2}),
        Mode::Legacy | Mode::Stateless => json!({"a": 1, "b": 2}),
    };
    let mut params = json!({"name": "add", "arguments": arguments});
    if mode.stateless() {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "capsule-bench", "version": "1"},
        });
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}).to_string()
}

/// The answer a call in `mode` should get, however the server framed it: `3`, or for
/// refused arguments a tool error.
fn is_correct(body: &[u8], mode: Mode) -> bool {
    let text = String::from_utf8_lossy(body);
    let answer = match mode {
        Mode::Refused => r#""isError":true"#,
        Mode::Legacy | Mode::Stateless => r#""text":"3""#,
    };
    text.contains(answer) && text.contains(r#""result""#)
}

struct Connection {
    sender: SendRequest<Full<Bytes>>,
    authority: String,
    path: &'static str,
    session: Option<String>,
    /// `Authorization` sent with every request.
    bearer: Option<Arc<str>>,
}

impl Connection {
    async fn open(addr: SocketAddr, path: &'static str) -> anyhow::Result<Connection> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        Ok(Connection { sender, authority: addr.to_string(), path, session: None, bearer: None })
    }

    async fn post(&mut self, body: String, headers: &[(&str, &str)]) -> anyhow::Result<(u16, hyper::HeaderMap, Bytes)> {
        let mut request = hyper::Request::post(self.path)
            .header("host", &self.authority)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session).header("mcp-protocol-version", PROTOCOL);
        }
        if let Some(token) = &self.bearer {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        self.sender.ready().await?;
        let response = self.sender.send_request(request.body(Full::new(Bytes::from(body)))?).await?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, headers, body))
    }

    async fn initialize(&mut self) -> anyhow::Result<()> {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "capsule-bench", "version": "1"}}});
        let (status, headers, body) = self.post(init.to_string(), &[]).await?;
        anyhow::ensure!(status == 200, "initialize: HTTP {status}: {}", String::from_utf8_lossy(&body));
        self.session = headers.get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let (status, _, _) =
            self.post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(), &[]).await?;
        anyhow::ensure!(status < 300, "notifications/initialized: HTTP {status}");
        Ok(())
    }

    async fn call(&mut self, id: u64, mode: Mode) -> bool {
        let headers: &[(&str, &str)] = match mode {
            Mode::Legacy => &[],
            Mode::Stateless | Mode::Refused => {
                &[("mcp-protocol-version", MODERN), ("mcp-method", "tools/call"), ("mcp-name", "add")]
            }
        };
        matches!(self.post(call_body(id, mode), headers).await, Ok((200, _, body)) if is_correct(&body, mode))
    }
}

/// `clients` connections calling `add` at `/mcp` for `duration`.
pub async fn http(addr: SocketAddr, mode: Mode, clients: usize, duration: Duration) -> anyhow::Result<Sample> {
    http_at((addr, "/mcp", None), mode, clients, duration).await
}

/// `clients` connections calling `add` at `path` for `duration`, with a bearer token if
/// `bearer` is given.
pub async fn http_at(
    (addr, path, bearer): (SocketAddr, &'static str, Option<Arc<str>>),
    mode: Mode,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<Sample> {
    let mut connections = Vec::with_capacity(clients);
    for _ in 0..clients {
        let mut connection = Connection::open(addr, path).await?;
        connection.bearer = bearer.clone();
        if mode == Mode::Legacy {
            connection.initialize().await?;
        }
        connections.push(connection);
    }
    let start = Instant::now();
    let deadline = start + duration;
    let tasks: Vec<_> = connections
        .into_iter()
        .enumerate()
        .map(|(client, mut connection)| {
            tokio::spawn(async move {
                let mut sample = Sample::default();
                let mut id = (client as u64) << 32;
                while Instant::now() < deadline {
                    id += 1;
                    let began = Instant::now();
                    let ok = connection.call(id, mode).await;
                    let latency = began.elapsed();
                    sample.calls += 1;
                    sample.latencies.push(latency.as_micros().min(u32::MAX as u128) as u32);
                    if !ok {
                        sample.errors += 1;
                    }
                }
                sample
            })
        })
        .collect();
    let mut total = Sample::default();
    for task in tasks {
        let sample = task.await?;
        total.calls += sample.calls;
        total.errors += sample.errors;
        total.latencies.extend(sample.latencies);
    }
    total.elapsed = start.elapsed();
    Ok(total)
}

/// Calls one tool over one stateless connection, to see which plugin version is served.
pub struct Prober(Connection);

impl Prober {
    pub async fn open(addr: SocketAddr) -> anyhow::Result<Prober> {
        Prober::open_at(addr, "/mcp").await
    }

    /// A prober of the endpoint at `path` (a tenant's).
    pub async fn open_at(addr: SocketAddr, path: &'static str) -> anyhow::Result<Prober> {
        Ok(Prober(Connection::open(addr, path).await?))
    }

    /// Whether `tool` answered `arguments` with a successful result.
    pub async fn succeeds(&mut self, tool: &str, arguments: Value) -> bool {
        self.result(tool, arguments).await.is_some_and(|result| result["isError"] == false)
    }

    /// Call `tool` and return its result, or `None` if no JSON-RPC result came back (a
    /// transport failure or a protocol error: the server did not contain the call).
    pub async fn result(&mut self, tool: &str, arguments: Value) -> Option<Value> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": tool, "arguments": arguments,
            "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}}});
        let headers = [("mcp-protocol-version", MODERN), ("mcp-method", "tools/call"), ("mcp-name", tool)];
        let Ok((200, _, body)) = self.0.post(body.to_string(), &headers).await else { return None };
        // A JSON body, or an SSE stream whose last `data:` line with an id is the answer.
        let text = String::from_utf8_lossy(&body);
        let messages = std::iter::once(text.as_ref()).chain(text.lines().filter_map(|l| l.strip_prefix("data:")));
        messages
            .filter_map(|m| serde_json::from_str::<Value>(m.trim()).ok())
            .rev()
            .find(|m| m.get("id").is_some())
            .and_then(|mut m| m.get_mut("result").map(Value::take))
    }
}

/// Open `count` idle legacy sessions (for memory per session); returns their connections.
pub async fn idle_sessions(addr: SocketAddr, count: usize) -> anyhow::Result<usize> {
    let mut opened = 0;
    let mut connection = Connection::open(addr, "/mcp").await?;
    for _ in 0..count {
        connection.session = None;
        connection.initialize().await?;
        opened += 1;
    }
    Ok(opened)
}

/// A server on stdio: `in_flight` calls outstanding at once, for `duration`.
pub async fn stdio(command: &[String], mode: Mode, in_flight: usize, duration: Duration) -> anyhow::Result<Sample> {
    let mut child = tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id();
    let mut stdin = child.stdin.take().expect("piped stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    if mode == Mode::Legacy {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "capsule-bench", "version": "1"}}});
        stdin.write_all(format!("{init}\n").as_bytes()).await?;
        let answer = lines.next_line().await?.unwrap_or_default();
        anyhow::ensure!(answer.contains("protocolVersion"), "stdio initialize failed: {answer}");
        stdin
            .write_all(format!("{}\n", json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).as_bytes())
            .await?;
    }
    // One untimed call first, so server start-up (plugin compilation) is never measured.
    // Plugins that join after `initialize` are announced first: skip notifications.
    stdin.write_all(format!("{}\n", call_body(0, mode)).as_bytes()).await?;
    let warm = loop {
        let line = lines.next_line().await?.unwrap_or_default();
        if !line.contains("\"method\"") {
            break line;
        }
    };
    anyhow::ensure!(is_correct(warm.as_bytes(), mode), "stdio warm-up call failed: {warm}");
    let permits = Arc::new(Semaphore::new(in_flight));
    let sent: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let cpu_before = pid.and_then(cpu_seconds);
    let start = Instant::now();
    let deadline = start + duration;
    let writer = {
        let (permits, sent) = (permits.clone(), sent.clone());
        tokio::spawn(async move {
            let mut id = 0u64;
            while Instant::now() < deadline {
                let Ok(permit) = permits.acquire().await else { break };
                permit.forget();
                id += 1;
                sent.lock().unwrap().insert(id, Instant::now());
                if stdin.write_all(format!("{}\n", call_body(id, mode)).as_bytes()).await.is_err() {
                    break;
                }
            }
            stdin
        })
    };
    let mut sample = Sample::default();
    // Past the deadline the writer sends nothing new; stop once every sent call is answered.
    while Instant::now() < deadline || !sent.lock().unwrap().is_empty() {
        let line = match tokio::time::timeout(Duration::from_secs(10), lines.next_line()).await {
            Ok(Ok(Some(line))) => line,
            _ => anyhow::bail!("the stdio server stopped answering"),
        };
        let Ok(message) = serde_json::from_str::<Value>(&line) else { continue };
        let Some(id) = message.get("id").and_then(Value::as_u64) else { continue };
        let Some(began) = sent.lock().unwrap().remove(&id) else { continue };
        sample.calls += 1;
        sample.latencies.push(began.elapsed().as_micros().min(u32::MAX as u128) as u32);
        if !is_correct(line.as_bytes(), mode) {
            sample.errors += 1;
        }
        permits.add_permits(1);
    }
    sample.elapsed = start.elapsed();
    sample.server_cpu = cpu_before.zip(pid.and_then(cpu_seconds)).map(|(before, after)| after - before);
    permits.close();
    drop(writer.await?);
    let _ = child.kill().await;
    Ok(sample)
}

/// `load`'s sample, with the CPU time the server process `pid` used while it ran.
pub async fn with_server_cpu(pid: u32, load: impl Future<Output = anyhow::Result<Sample>>) -> anyhow::Result<Sample> {
    let before = cpu_seconds(pid);
    let mut sample = load.await?;
    sample.server_cpu = before.zip(cpu_seconds(pid)).map(|(before, after)| after - before);
    Ok(sample)
}

/// The CPU time process `pid` has used so far (user + system, every thread, living or not),
/// in seconds, from `/proc/<pid>/stat`.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    // Clock ticks as the kernel reports them to user space (USER_HZ): 100 on Linux.
    const TICKS: f64 = 100.0;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses; the fields follow its last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line; field 3 is the first after the name.
    let (utime, stime): (u64, u64) = (fields.get(11)?.parse().ok()?, fields.get(12)?.parse().ok()?);
    Some((utime + stime) as f64 / TICKS)
}
