//! Streamable HTTP on one endpoint, `/mcp`, for sessionful (2024-11-05 .. 2025-11-25) and
//! stateless (2026-07-28) clients alike, on Capsule's own wire.
//!
//! Every request passes the Host and Origin checks (`checks`) first. A POST that declares
//! 2026-07-28 in `MCP-Protocol-Version` is a stateless request (`modern`); anything else
//! belongs to a legacy session (`legacy`, `session`). Either way the body is read once,
//! within its limit, and answered as JSON unless something must reach the client first
//! (`exchange`).

mod checks;
mod exchange;
mod headers;
mod legacy;
mod listener;
mod modern;
mod session;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use http_body_util::BodyExt;
use rmcp::ErrorData;
use rmcp::model::ProtocolVersion;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::jsonrpc;
use crate::mcp::{CapsuleServer, Shared};
pub use listener::ConnectionLimits;
use session::SessionTable;

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
    /// Live sessions one client address may hold.
    pub sessions_per_address: usize,
    /// Time allowed to receive a request's body.
    pub body_timeout: Duration,
    /// Limits on connections themselves.
    pub connections: ConnectionLimits,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            max_body_bytes: 4 << 20,
            max_sessions: 10_000,
            session_idle: Duration::from_secs(30 * 60),
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            sessions_per_address: 1_000,
            body_timeout: Duration::from_secs(30),
            connections: ConnectionLimits::default(),
        }
    }
}

/// What every HTTP request is served with.
struct Endpoint {
    /// Serves 2026-07-28 requests (they belong to no session).
    stateless: CapsuleServer,
    sessions: Arc<SessionTable>,
    allowed: checks::Allowed,
    options: HttpOptions,
    shutdown: CancellationToken,
}

/// The axum router serving MCP at `/mcp`.
pub fn router(shared: Arc<Shared>, options: HttpOptions, shutdown: CancellationToken) -> Router {
    let endpoint = Endpoint {
        stateless: CapsuleServer::new(shared.clone()),
        sessions: SessionTable::new(shared, &options, shutdown.clone()),
        allowed: checks::Allowed::new(&options.allowed_hosts, &options.allowed_origins),
        options,
        shutdown,
    };
    Router::new().route("/mcp", any(handle)).with_state(Arc::new(endpoint))
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
    let limits = options.connections.clone();
    let app = router(shared, options, shutdown.clone());
    listener::run(listener, app, limits, shutdown).await;
    Ok(())
}

/// A header map from name/value pairs, for tests.
#[cfg(test)]
fn header_map(pairs: &[(&'static str, &str)]) -> axum::http::HeaderMap {
    let mut map = axum::http::HeaderMap::new();
    for (name, value) in pairs {
        map.append(*name, HeaderValue::from_str(value).expect("a valid header value"));
    }
    map
}

/// A plain-text error.
fn text(status: u16, text: &'static str) -> Response {
    (StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST), text).into_response()
}

fn method_not_allowed(allow: &'static str) -> Response {
    let mut response = text(405, "Method Not Allowed");
    response.headers_mut().insert(header::ALLOW, HeaderValue::from_static(allow));
    response
}

/// The revision a request declares in `MCP-Protocol-Version`: `Err` if the header is there
/// but names no revision this server knows (and is not a later one).
fn declared(headers: &axum::http::HeaderMap) -> Result<Option<&str>, &'static str> {
    let Some(value) = headers.get("mcp-protocol-version") else { return Ok(None) };
    let value = value.to_str().map_err(|_| "Bad Request: Invalid MCP-Protocol-Version header encoding")?;
    let known = ProtocolVersion::KNOWN_VERSIONS.iter().any(|v| v.as_str() == value);
    if !known && value < ProtocolVersion::V_2026_07_28.as_str() {
        return Err("Bad Request: Unsupported MCP-Protocol-Version");
    }
    Ok(Some(value))
}

async fn handle(State(endpoint): State<Arc<Endpoint>>, request: Request) -> Response {
    if let Err((status, reason)) = endpoint.allowed.check(request.headers()) {
        return text(status, reason);
    }
    let declared = match declared(request.headers()) {
        Ok(declared) => declared.map(str::to_owned),
        Err(reason) => return text(400, reason),
    };
    let modern = declared.as_deref().filter(|v| *v >= ProtocolVersion::V_2026_07_28.as_str());
    match *request.method() {
        Method::POST => {}
        // A 2026-07-28 client has no session, so no stream of its own and nothing to end.
        Method::GET | Method::DELETE if modern.is_some() => return method_not_allowed("POST"),
        Method::GET => {
            if !checks::accepts(request.headers(), &["text/event-stream"]) {
                return text(406, "Not Acceptable: Client must accept text/event-stream");
            }
            return legacy::get(&endpoint.sessions, request.headers());
        }
        Method::DELETE => return legacy::delete(&endpoint.sessions, request.headers()),
        _ => return method_not_allowed("GET, POST, DELETE"),
    }
    let (parts, body) = request.into_parts();
    if !checks::accepts(&parts.headers, &["application/json", "text/event-stream"]) {
        return text(406, "Not Acceptable: Client must accept both application/json and text/event-stream");
    }
    if !checks::is_json(&parts.headers) {
        return text(415, "Unsupported Media Type: Content-Type must be application/json");
    }
    let limit = endpoint.options.max_body_bytes;
    let read = http_body_util::Limited::new(body, limit).collect();
    let body = match tokio::time::timeout(endpoint.options.body_timeout, read).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(_)) => {
            let error = ErrorData::invalid_request(format!("request body exceeds the limit of {limit} bytes"), None);
            return exchange::json(StatusCode::PAYLOAD_TOO_LARGE, jsonrpc::error(None, &error));
        }
        Err(_) => return text(408, "Request Timeout: the body did not arrive in time"),
    };
    match modern {
        Some(declared) => modern::serve(&endpoint.stateless, &parts.headers, declared, &body, &endpoint.shutdown).await,
        None => {
            let client = parts.extensions.get::<listener::ClientAddr>().map(|a| a.0);
            legacy::post(&endpoint.sessions, &parts.headers, client, &body).await
        }
    }
}
