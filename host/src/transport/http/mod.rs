//! Streamable HTTP on one endpoint, `/mcp`, for sessionful (2024-11-05 .. 2025-11-25) and
//! stateless (2026-07-28) clients alike.
//!
//! Every request passes the Host and Origin checks ([`checks`]). A POST that declares
//! 2026-07-28 is served by Capsule's own wire ([`modern`]): read once, dispatched, answered
//! as JSON or SSE. Legacy sessions are still served by rmcp's service, behind [`guard`],
//! which closes its gaps: a body-size limit, proper JSON-RPC errors for malformed bodies
//! (rmcp answers 415), JSON-RPC batches for 2025-03-26 clients, and a cap on live sessions.

mod checks;
mod headers;
mod modern;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::serve::ListenerExt;
use http_body_util::BodyExt;
use rmcp::ErrorData;
use rmcp::model::{ClientJsonRpcMessage, ErrorCode, ProtocolVersion, RequestId};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::jsonrpc::{self, Incoming, Message};
use crate::mcp::{CapsuleServer, Shared};

/// Limits and policy of the HTTP endpoint.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Live legacy sessions allowed at once.
    pub max_sessions: usize,
    /// Idle time after which a legacy session is closed.
    pub session_idle: Duration,
    /// Host header values accepted besides loopback names.
    pub allowed_hosts: Vec<String>,
    /// Origins accepted besides loopback ones (e.g. `https://app.example`).
    pub allowed_origins: Vec<String>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            max_body_bytes: 4 << 20,
            max_sessions: 10_000,
            session_idle: Duration::from_secs(30 * 60),
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
        }
    }
}

/// The guard's state. axum clones middleware state for every request, so it lives behind
/// one `Arc` (rmcp's service, cloned by value, carries its whole configuration).
struct Guard {
    service: StreamableHttpService<CapsuleServer, LocalSessionManager>,
    /// Serves 2026-07-28 requests (they belong to no session).
    stateless: CapsuleServer,
    allowed: checks::Allowed,
    sessions: Arc<LocalSessionManager>,
    options: HttpOptions,
    /// `initialize` requests admitted and not yet answered: counted with the live sessions,
    /// so concurrent ones cannot all pass the cap.
    initializing: AtomicUsize,
}

/// One admitted `initialize`, counted until its response is built (its session exists then).
struct Initializing<'a>(&'a AtomicUsize);

impl Drop for Initializing<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The axum router serving MCP at `/mcp`.
pub fn router(shared: Arc<Shared>, options: HttpOptions, shutdown: CancellationToken) -> Router {
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(options.session_idle);
    let sessions = Arc::new(manager);
    let hosts =
        ["localhost", "127.0.0.1", "::1"].into_iter().map(String::from).chain(options.allowed_hosts.iter().cloned());
    let origins =
        ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*", "https://localhost:*", "https://127.0.0.1:*"]
            .into_iter()
            .map(String::from)
            .chain(options.allowed_origins.iter().cloned());
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(true)
        .with_json_response(true)
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .with_max_request_body_bytes(options.max_body_bytes)
        .with_cancellation_token(shutdown);
    let stateless = CapsuleServer::new(shared.clone());
    let service = StreamableHttpService::new(move || Ok(CapsuleServer::new(shared.clone())), sessions.clone(), config);
    let guard = Arc::new(Guard {
        service: service.clone(),
        stateless,
        allowed: checks::Allowed::new(&options.allowed_hosts, &options.allowed_origins),
        sessions,
        options,
        initializing: AtomicUsize::new(0),
    });
    Router::new().route_service("/mcp", service).layer(middleware::from_fn_with_state(guard, self::guard))
}

/// Listen on `addr` and serve until `shutdown` fires.
pub async fn serve(
    shared: Arc<Shared>,
    addr: SocketAddr,
    options: HttpOptions,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    tracing::info!("serving MCP at http://{}/mcp", listener.local_addr()?);
    serve_on(listener, shared, options, shutdown).await
}

/// Serve on an already bound listener (tests bind port 0 and read the address first).
pub async fn serve_on(
    listener: TcpListener,
    shared: Arc<Shared>,
    options: HttpOptions,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let app = router(shared, options, shutdown.clone());
    // Without TCP_NODELAY an SSE response waits on Nagle and delayed ACKs (~40 ms).
    let listener = listener.tap_io(|stream| {
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("could not set TCP_NODELAY: {e}");
        }
    });
    axum::serve(listener, app).with_graceful_shutdown(async move { shutdown.cancelled_owned().await }).await?;
    Ok(())
}

fn jsonrpc_error(status: StatusCode, id: Option<&RequestId>, code: i32, message: impl Into<String>) -> Response {
    bytes_response(status, jsonrpc::error(id, &ErrorData::new(ErrorCode(code), message.into(), None)))
}

fn bytes_response(status: StatusCode, body: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response()
}

/// Whether rmcp can decode a message (e.g. `params` of the right shape): `Err` is the
/// invalid-request error, echoing the id.
fn check_typed(bytes: &[u8], id: Option<&RequestId>) -> Result<(), Vec<u8>> {
    serde_json::from_slice::<ClientJsonRpcMessage>(bytes)
        .map(drop)
        .map_err(|e| jsonrpc::error(id, &ErrorData::invalid_request(format!("Invalid Request: {e}"), None)))
}

fn text_response(status: u16, text: &'static str) -> Response {
    (StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST), text).into_response()
}

/// The revision a request declares in `MCP-Protocol-Version`, if it is 2026-07-28 or later.
fn declared_modern(headers: &axum::http::HeaderMap) -> Option<&str> {
    let declared = headers.get("mcp-protocol-version")?.to_str().ok()?;
    (declared >= ProtocolVersion::V_2026_07_28.as_str()).then_some(declared)
}

async fn guard(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    if let Err((status, reason)) = guard.allowed.check(request.headers()) {
        return text_response(status, reason);
    }
    if request.method() == Method::POST
        && let Some(declared) = declared_modern(request.headers()).map(str::to_owned)
    {
        return stateless(&guard, request, &declared).await;
    }
    if request.method() == Method::DELETE {
        // A session that does not exist (never did, or already ended) cannot be ended: 404,
        // as for any other request naming it, never a success.
        let session = request.headers().get("mcp-session-id").and_then(|v| v.to_str().ok());
        if let Some(session) = session
            && !guard.sessions.sessions.read().await.contains_key(session)
        {
            return jsonrpc_error(StatusCode::NOT_FOUND, None, -32001, "no such session (it may have ended)");
        }
        // rmcp acknowledges a session DELETE with 202; clients (the Python SDK among them)
        // expect 200 or 204 for a completed termination.
        let mut response = next.run(request).await;
        if response.status() == StatusCode::ACCEPTED {
            *response.status_mut() = StatusCode::NO_CONTENT;
        }
        return response;
    }
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes = match http_body_util::Limited::new(body, guard.options.max_body_bytes).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            return jsonrpc_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                None,
                -32600,
                format!("request body exceeds the limit of {} bytes", guard.options.max_body_bytes),
            );
        }
    };
    let (id, initialize) = match jsonrpc::read(&bytes) {
        Ok(Incoming::Single(Message::Request { id, method, .. })) => (Some(id), method == "initialize"),
        Ok(Incoming::Single(Message::Response { id, .. })) => (Some(id), false),
        Ok(Incoming::Single(Message::Notification { .. })) => (None, false),
        Ok(Incoming::Batch(_)) => return batch(&guard, parts, &bytes).await,
        Err(refusal) => return bytes_response(StatusCode::BAD_REQUEST, refusal.to_bytes()),
    };
    let _initializing = if initialize {
        // Reserve first, then count: two initializes racing each see the other.
        let admitted = Initializing(&guard.initializing);
        let pending = guard.initializing.fetch_add(1, Ordering::SeqCst) + 1;
        let live = guard.sessions.sessions.read().await.len();
        if live + pending > guard.options.max_sessions {
            return jsonrpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                id.as_ref(),
                -32000,
                format!(
                    "the server has reached its limit of {} live sessions; try again later",
                    guard.options.max_sessions
                ),
            );
        }
        Some(admitted)
    } else {
        None
    };
    let is_json = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let response = next.run(Request::from_parts(parts, Body::from(bytes.clone()))).await;
    // rmcp answers a JSON body it cannot decode as a message with a bare 415; say what is wrong
    // in JSON-RPC terms instead (checked only now, so well-formed traffic is parsed once).
    if response.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE
        && is_json
        && let Err(error) = check_typed(&bytes, id.as_ref())
    {
        return bytes_response(StatusCode::BAD_REQUEST, error);
    }
    response
}

/// A 2026-07-28 POST: the checks a stateless request must pass, then Capsule's own wire.
async fn stateless(guard: &Guard, request: Request, declared: &str) -> Response {
    let (parts, body) = request.into_parts();
    if !checks::accepts(&parts.headers, &["application/json", "text/event-stream"]) {
        return text_response(406, "Not Acceptable: Client must accept both application/json and text/event-stream");
    }
    if !checks::is_json(&parts.headers) {
        return text_response(415, "Unsupported Media Type: Content-Type must be application/json");
    }
    let bytes = match http_body_util::Limited::new(body, guard.options.max_body_bytes).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            return jsonrpc_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                None,
                -32600,
                format!("request body exceeds the limit of {} bytes", guard.options.max_body_bytes),
            );
        }
    };
    modern::serve(&guard.stateless, &parts.headers, declared, &bytes).await
}

/// JSON-RPC batches (2025-03-26 only): each element is served as if posted alone, and the
/// responses come back as one JSON array.
async fn batch(guard: &Guard, parts: axum::http::request::Parts, body: &[u8]) -> Response {
    let version = parts.headers.get("mcp-protocol-version").and_then(|v| v.to_str().ok());
    if version.is_some_and(|v| v != jsonrpc::BATCH_VERSION) {
        let message = format!(
            "Invalid Request: JSON-RPC batches are only part of protocol revision {} (this connection uses {})",
            jsonrpc::BATCH_VERSION,
            version.unwrap_or_default()
        );
        return jsonrpc_error(StatusCode::BAD_REQUEST, None, -32600, message);
    }
    let items: Vec<&RawValue> = serde_json::from_slice(body).unwrap_or_default();
    let mut responses = Vec::new();
    for item in items {
        let text = item.get().as_bytes();
        let (id, is_request) = match jsonrpc::read(text) {
            Ok(Incoming::Single(Message::Request { id, method, .. })) => {
                if method == "initialize" {
                    let error = ErrorData::invalid_request("initialize must not be part of a batch", None);
                    responses.push(jsonrpc::error(Some(&id), &error));
                    continue;
                }
                (Some(id), true)
            }
            Ok(Incoming::Single(Message::Response { id, .. })) => (Some(id), false),
            Ok(_) => (None, false),
            Err(refusal) => {
                responses.push(refusal.to_bytes());
                continue;
            }
        };
        if let Err(error) = check_typed(text, id.as_ref()) {
            responses.push(error);
            continue;
        }
        let mut request = Request::from_parts(parts.clone(), Body::from(item.get().to_owned()));
        request.headers_mut().remove(header::CONTENT_LENGTH);
        let response = guard.service.handle(request).await.map(Body::new);
        let messages = read_messages(response.into_response()).await;
        if is_request {
            let id_value = id.as_ref().map(|id| id.clone().into_json_value());
            match messages.into_iter().find(|m| m.get("id") == id_value.as_ref() && m.get("method").is_none()) {
                Some(message) => responses.push(message.to_string().into_bytes()),
                None => responses.push(jsonrpc::error(
                    id.as_ref(),
                    &ErrorData::internal_error("the server produced no response", None),
                )),
            }
        }
    }
    if responses.is_empty() {
        return StatusCode::ACCEPTED.into_response();
    }
    bytes_response(StatusCode::OK, jsonrpc::array(&responses))
}

/// The JSON-RPC messages in a response body, whether JSON or an SSE stream.
async fn read_messages(response: Response) -> Vec<Value> {
    let is_sse = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let status = response.status();
    let bytes: Bytes = response.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    if is_sse {
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str(data.trim()).ok())
            .collect()
    } else {
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Array(items)) => items,
            Ok(value) => vec![value],
            Err(_) if !status.is_success() => vec![serde_json::json!({
                "jsonrpc": "2.0", "id": null,
                "error": {"code": -32600, "message": String::from_utf8_lossy(&bytes)}
            })],
            Err(_) => Vec::new(),
        }
    }
}
