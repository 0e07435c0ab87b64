//! Streamable HTTP on one endpoint per tenant, for sessionful (2024-11-05 .. 2025-11-25) and
//! stateless (2026-07-28) clients alike, on Capsule's own wire.
//!
//! The front door finds the tenant first (`/t/{tenant}/mcp`, or the Host at `/mcp`), before
//! any body is read; each tenant's endpoint has its own stateless server and session table,
//! ended when the tenant is removed.
//!
//! Every request passes the Host and Origin checks (`checks`) first; a browser's request from
//! an allowed origin is answered with CORS headers, its preflight by `cors` alone. A POST that declares
//! 2026-07-28 in `MCP-Protocol-Version` is a stateless request (`modern`); anything else
//! belongs to a legacy session (`legacy`, `session`). Either way the body is read once,
//! within its limit, and answered as JSON unless something must reach the client first
//! (`exchange`).

mod auth;
pub mod body;
mod checks;
mod cors;
mod counted;
mod exchange;
mod headers;
mod legacy;
mod modern;
mod resume;
mod session;
mod sse;
mod watch;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use axum::Router;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use rmcp::ErrorData;
use rmcp::model::ProtocolVersion;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::jsonrpc;
use crate::listener;
pub use crate::listener::ConnectionLimits;
use crate::mcp::CapsuleServer;
use crate::telemetry::{Refusal, Traffic};
use crate::tenants::{Tenant, TenantSet, Tenants};
use crate::workers::Workers;
pub use checks::{Allowed, host_entry, origin_entry};
use resume::KeptBytes;
use session::{SessionCounts, SessionTable};

/// Limits and policy of the HTTP endpoint.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Most messages in one batch (2025-03-26 sessions).
    pub max_batch: usize,
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
    /// Bytes every session's resumable POST streams may keep together.
    pub max_resume_bytes: usize,
    /// Requests one legacy session may have running at once.
    pub max_in_flight: usize,
    /// Time allowed to receive a request's body.
    pub body_timeout: Duration,
    /// Limits on connections themselves.
    pub connections: ConnectionLimits,
    /// The runtimes connections are spread over.
    pub workers: Workers,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            max_body_bytes: 4 << 20,
            max_batch: super::jsonrpc::MAX_BATCH,
            max_sessions: 10_000,
            session_idle: Duration::from_secs(30 * 60),
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            sessions_per_address: 1_000,
            max_resume_bytes: 256 << 20,
            max_in_flight: super::MAX_IN_FLIGHT,
            body_timeout: Duration::from_secs(30),
            connections: ConnectionLimits::default(),
            workers: Workers::default(),
        }
    }
}

/// One tenant's endpoint: its stateless server and its legacy sessions.
struct Endpoint {
    tenant: Arc<Tenant>,
    /// Serves 2026-07-28 requests (they belong to no session).
    stateless: CapsuleServer,
    sessions: Arc<SessionTable>,
    /// Ends the tenant's sessions and streams when the tenant is removed.
    ended: CancellationToken,
    /// Children of `ended` that stateless requests' tokens are made under, one a thread
    /// slot (see [`Endpoint::branch`]).
    branches: Box<[CancellationToken]>,
    /// The bytes of its requests and responses.
    traffic: Traffic,
}

/// Branches of an endpoint's token: more than the request workers of most machines.
const BRANCHES: usize = 16;

impl Endpoint {
    /// The token this thread's stateless requests make theirs under. A token's parent is
    /// locked whenever a child is made or dropped; had every request a child of `ended`,
    /// every worker would take that one lock twice a request, and more workers (cores)
    /// would contend more. On two cores at 8 clients, adding and removing the children
    /// went from 0.35 to 0.16 µs a call (`perf`).
    fn branch(&self) -> &CancellationToken {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        thread_local! {
            static SLOT: usize = NEXT.fetch_add(1, Ordering::Relaxed);
        }
        &self.branches[SLOT.with(|slot| *slot) % self.branches.len()]
    }
}

/// What every HTTP request is served with: the tenants and their endpoints.
struct FrontDoor {
    tenants: Arc<Tenants>,
    endpoints: RwLock<HashMap<Arc<str>, Arc<Endpoint>>>,
    /// Legacy sessions of every tenant together, held to `--max-sessions` and
    /// `--sessions-per-address`.
    sessions: Arc<SessionCounts>,
    /// What their resumable POST streams keep, held to `--max-resume-bytes`.
    kept: Arc<KeptBytes>,
    allowed: checks::Allowed,
    options: HttpOptions,
    shutdown: CancellationToken,
}

impl FrontDoor {
    /// The endpoint of `tenant`, made on its first request.
    fn endpoint(&self, tenant: &Arc<Tenant>) -> Arc<Endpoint> {
        let serves = |e: &&Arc<Endpoint>| Arc::ptr_eq(&e.tenant.shared, &tenant.shared);
        if let Some(endpoint) =
            self.endpoints.read().unwrap_or_else(PoisonError::into_inner).get(&tenant.id).filter(serves)
        {
            return endpoint.clone();
        }
        let mut endpoints = self.endpoints.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(endpoint) = endpoints.get(&tenant.id).filter(serves) {
            return endpoint.clone();
        }
        let ended = self.shutdown.child_token();
        let endpoint = Arc::new(Endpoint {
            tenant: tenant.clone(),
            stateless: CapsuleServer::new(tenant.shared.clone()),
            sessions: SessionTable::new(
                tenant.shared.clone(),
                tenant.loader.account().clone(),
                self.sessions.clone(),
                self.kept.clone(),
                &self.options,
                ended.clone(),
            ),
            branches: (0..BRANCHES).map(|_| ended.child_token()).collect(),
            ended,
            traffic: tenant.shared.metrics().traffic(&tenant.id, "tcp"),
        });
        if let Some(replaced) = endpoints.insert(tenant.id.clone(), endpoint.clone()) {
            replaced.ended.cancel();
        }
        endpoint
    }

    /// Drop the endpoints of tenants that are gone: nothing new reaches them, their running
    /// calls finish and are answered, and then their sessions end (at shutdown at the latest).
    fn prune(&self, set: &TenantSet) {
        self.endpoints.write().unwrap_or_else(PoisonError::into_inner).retain(|id, endpoint| {
            let kept = set.tenants.get(id).is_some_and(|t| Arc::ptr_eq(&t.shared, &endpoint.tenant.shared));
            if !kept {
                let (endpoint, shutdown) = (endpoint.clone(), self.shutdown.clone());
                // Its clients' answers can no longer arrive (its routes are gone).
                endpoint.sessions.fail_pending();
                tokio::spawn(async move {
                    // Calls are bounded by their limits and by the client's answer time; a
                    // rare event, so a plain poll.
                    let account = endpoint.tenant.loader.account();
                    while account.usage().calls_running > 0 && !shutdown.is_cancelled() {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    endpoint.ended.cancel();
                });
            }
            kept
        });
    }
}

/// The axum router: each tenant at `/t/{tenant}/mcp`, and at `/mcp` for its host names (or,
/// on a server with only the default tenant, for every allowed host).
pub fn router(tenants: Arc<Tenants>, options: HttpOptions, shutdown: CancellationToken) -> Router {
    let door = Arc::new(FrontDoor {
        allowed: checks::Allowed::new(&options.allowed_hosts, &options.allowed_origins),
        tenants,
        endpoints: RwLock::default(),
        sessions: Arc::default(),
        kept: KeptBytes::new(options.max_resume_bytes),
        options,
        shutdown,
    });
    let follower = door.clone();
    let mut changes = follower.tenants.subscribe();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return },
                () = follower.shutdown.cancelled() => return,
            }
            let set = changes.borrow_and_update().clone();
            follower.prune(&set);
        }
    });
    Router::new()
        .route("/mcp", any(by_host))
        .route("/t/{tenant}/mcp", any(by_path))
        .route("/.well-known/oauth-protected-resource", get(auth::metadata_by_host).fallback(auth::metadata_preflight))
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(auth::metadata_by_host).fallback(auth::metadata_preflight),
        )
        .route(
            "/.well-known/oauth-protected-resource/t/{tenant}/mcp",
            get(auth::metadata_by_path).fallback(auth::metadata_preflight),
        )
        .fallback(no_such_path)
        .with_state(door)
}

/// Any other path: 404, once the body is read (see `unread`).
async fn no_such_path(State(door): State<Arc<FrontDoor>>, request: Request) -> Response {
    unread(&door.options, request, text(404, "Not Found")).await
}

/// Listen on `addr` and serve until `shutdown` fires.
pub async fn serve(
    tenants: Arc<Tenants>,
    addr: SocketAddr,
    options: HttpOptions,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    for id in tenants.current().tenants.keys() {
        tracing::info!("tenant {id} at http://{local}/t/{id}/mcp");
    }
    tracing::info!("serving MCP at http://{local}/mcp");
    serve_on(listener, tenants, options, shutdown).await
}

/// Serve on an already bound listener (tests bind port 0 and read the address first).
pub async fn serve_on(
    listener: TcpListener,
    tenants: Arc<Tenants>,
    options: HttpOptions,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let (limits, workers) = (options.connections.clone(), options.workers.clone());
    let app = router(tenants, options, shutdown.clone());
    listener::run(listener, app, limits, workers, shutdown).await;
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

/// A plain-text error, off the MCP endpoint.
fn text(status: u16, text: &'static str) -> Response {
    (StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST), text).into_response()
}

fn method_not_allowed(allow: &'static str) -> Response {
    with_allow(text(405, "Method Not Allowed"), allow)
}

fn with_allow(mut response: Response, allow: &'static str) -> Response {
    response.headers_mut().insert(header::ALLOW, HeaderValue::from_static(allow));
    response
}

/// A request to the MCP endpoint refused before any message in it is read: `status`, with a
/// JSON-RPC Invalid Request error that has no id, as the transport allows ("MAY comprise a
/// JSON-RPC error response that has no id"), so a client can show why: `null`, or left out
/// for a revision whose ids are never `null` (see [`omits_unread_ids`]).
fn refused(headers: &axum::http::HeaderMap, status: u16, why: &'static str) -> Response {
    let error = ErrorData::invalid_request(why, None);
    let omits = declared(headers).ok().flatten().is_some_and(|(version, _)| omits_unread_ids(version));
    let body = if omits { jsonrpc::modern_error(None, &error) } else { jsonrpc::error(None, &error) };
    exchange::json(StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST), body)
}

/// The revision a request declares in `MCP-Protocol-Version`, and whether this server knows
/// it; `Err` if the header is not text, or comes more than once.
fn declared(headers: &axum::http::HeaderMap) -> Result<Option<(&str, bool)>, &'static str> {
    let declared = checks::at_most_once(headers, "mcp-protocol-version")
        .map_err(|checks::Repeated| "Bad Request: more than one MCP-Protocol-Version header")?;
    let Some(value) = declared else { return Ok(None) };
    let value = value.to_str().map_err(|_| "Bad Request: Invalid MCP-Protocol-Version header encoding")?;
    Ok(Some((value, known(value))))
}

/// Whether `version` names a revision this server knows.
fn known(version: &str) -> bool {
    ProtocolVersion::KNOWN_VERSIONS.iter().any(|v| v.as_str() == version)
}

/// Whether an error to a POST declaring `version` leaves out an id it could not read
/// (2026-07-28's schema types an id a string or an integer) rather than sending `null`
/// (JSON-RPC's rule, and every earlier revision's): for 2026-07-28, and for an unknown
/// revision dated after it, whose rules most likely follow it.
fn omits_unread_ids(version: &str) -> bool {
    let dated = version.len() == 10
        && version.bytes().enumerate().all(|(at, b)| if at == 4 || at == 7 { b == b'-' } else { b.is_ascii_digit() });
    dated && version >= ProtocolVersion::V_2026_07_28.as_str()
}

/// `/mcp`: the tenant whose host name the request names; on a server with only the default
/// tenant, that one.
async fn by_host(State(door): State<Arc<FrontDoor>>, request: Request) -> Response {
    let set = door.tenants.current();
    let tenant = by_host_name(&set, &request);
    front(&door, &set, tenant, request).await
}

/// The tenant `/mcp` serves for a request's Host. The default tenant has no host names: on a
/// server with only it, it serves every allowed Host; configured tenants are routed by name.
fn by_host_name<'a>(set: &'a TenantSet, request: &Request) -> Option<&'a Arc<Tenant>> {
    set.default_tenant().or_else(|| {
        let host = checks::host(request.uri(), request.headers()).ok()?;
        set.by_host(&checks::bare_host(host.host()))
    })
}

/// `/t/{tenant}/mcp`. A name that is no text once decoded (`/t/%ff/mcp`) is no tenant's:
/// refused as such, after the Host and Origin checks, like any other.
async fn by_path(
    State(door): State<Arc<FrontDoor>>,
    id: Result<Path<String>, PathRejection>,
    request: Request,
) -> Response {
    let set = door.tenants.current();
    let tenant = id.ok().and_then(|Path(id)| set.tenants.get(id.as_str()));
    front(&door, &set, tenant, request).await
}

/// An MCP path's request, for `tenant` if there is one: the Host and Origin checks, a
/// browser's preflight, then the endpoint; an answer to an allowed origin is marked
/// readable by it.
async fn front(door: &FrontDoor, set: &TenantSet, tenant: Option<&Arc<Tenant>>, request: Request) -> Response {
    if let Some(refused) = checked(door, set, &request) {
        return unread(&door.options, request, refused).await;
    }
    let origin = request.headers().get(header::ORIGIN).cloned();
    if let Some(origin) = &origin
        && cors::is_preflight(&request)
    {
        let answer = cors::preflight(origin.clone(), request.headers());
        return unread(&door.options, request, answer).await;
    }
    let response = match tenant {
        Some(tenant) => handle(door, tenant, request).await,
        None => {
            let answer = refused(request.headers(), 404, "Not Found: no such tenant");
            unread(&door.options, request, answer).await
        }
    };
    cors::readable(origin, response)
}

/// The Host and Origin checks; a tenant's own host names are allowed.
fn checked(door: &FrontDoor, set: &TenantSet, request: &Request) -> Option<Response> {
    let (uri, headers) = (request.uri(), request.headers());
    let checked = match door.allowed.allowed_host(uri, headers, |host| set.by_host(host).is_some()) {
        Ok(host) => door.allowed.check_origin(&host, headers).map_err(|refused| (Refusal::Origin, refused)),
        Err(refused) => Err((Refusal::Host, refused)),
    };
    checked.err().map(|(refusal, (status, reason))| {
        counted_refusal(door, request, refusal, reason);
        refused(request.headers(), status, reason)
    })
}

/// A request refused by the Host or Origin check: counted, and logged with the client's
/// address, which a proxy in front may keep no record of.
fn counted_refusal(door: &FrontDoor, request: &Request, refusal: Refusal, reason: &'static str) {
    door.tenants.metrics().refused(refusal);
    let client = request.extensions().get::<listener::ClientAddr>().map(|a| a.0);
    tracing::debug!(client = ?client, "refused: {reason}");
}

/// Serve a request for `tenant` as the set in force now has it: its settings (authorization
/// among them) are the current ones even when its endpoint outlived a reload.
async fn handle(door: &FrontDoor, tenant: &Arc<Tenant>, request: Request) -> Response {
    let endpoint = door.endpoint(tenant);
    let response = serve_request(door, tenant, &endpoint, request).await;
    counted::response(response, endpoint.traffic.clone())
}

async fn serve_request(door: &FrontDoor, tenant: &Arc<Tenant>, endpoint: &Endpoint, request: Request) -> Response {
    match before_body(tenant, endpoint, request.method(), request.headers()).await {
        Headed::Post(post) => serve_body(door, tenant, endpoint, request, post).await,
        Headed::Answered(answer) => unread(&door.options, request, answer).await,
    }
}

/// What a request's method and headers decide before its body is read.
enum Headed {
    /// A POST to read and serve.
    Post(Post),
    /// The whole answer: a refusal, a GET stream, a DELETE.
    Answered(Response),
}

/// A POST's caller and the revision it declares.
struct Post {
    caller: legacy::Caller,
    modern: Option<String>,
    unknown: Option<String>,
}

async fn before_body(
    tenant: &Arc<Tenant>,
    endpoint: &Endpoint,
    method: &Method,
    headers: &axum::http::HeaderMap,
) -> Headed {
    // Every request is authenticated on its own, before its body is read.
    let caller = match &tenant.auth {
        None => None,
        Some(auth) => match auth.authenticate(headers).await {
            Ok(principal) => Some(principal),
            Err(error) => return Headed::Answered(auth::unauthorized(auth, tenant, &error)),
        },
    };
    let declared = match declared(headers) {
        Ok(declared) => declared,
        Err(reason) => return Headed::Answered(refused(headers, 400, reason)),
    };
    let modern = declared
        .filter(|(version, _)| *version >= ProtocolVersion::V_2026_07_28.as_str())
        .map(|(version, _)| version.to_owned());
    let unknown = declared.filter(|(_, known)| !known).map(|(version, _)| version.to_owned());
    match *method {
        // An unknown revision is answered by the 2026-07-28 path, whose error names the
        // supported ones and carries the request's id (-32022); a legacy client gets the 400
        // its revision asks for either way.
        Method::POST => {}
        Method::GET | Method::DELETE if unknown.is_some() => {
            return Headed::Answered(refused(headers, 400, "Bad Request: Unsupported MCP-Protocol-Version"));
        }
        // A 2026-07-28 client has no session, so no stream of its own and nothing to end.
        Method::GET | Method::DELETE if modern.is_some() => {
            return Headed::Answered(with_allow(refused(headers, 405, "Method Not Allowed"), "POST"));
        }
        Method::GET => {
            if !checks::accepts(headers, &["text/event-stream"]) {
                return Headed::Answered(refused(headers, 406, "Not Acceptable: Client must accept text/event-stream"));
            }
            return Headed::Answered(legacy::get(&endpoint.sessions, headers, &caller));
        }
        Method::DELETE => return Headed::Answered(legacy::delete(&endpoint.sessions, headers, &caller)),
        _ => return Headed::Answered(with_allow(refused(headers, 405, "Method Not Allowed"), "GET, POST, DELETE")),
    }
    if !checks::accepts(headers, &["application/json", "text/event-stream"]) {
        return Headed::Answered(refused(
            headers,
            406,
            "Not Acceptable: Client must accept both application/json and text/event-stream",
        ));
    }
    if !checks::is_json(headers) {
        return Headed::Answered(refused(
            headers,
            415,
            "Unsupported Media Type: Content-Type must be application/json",
        ));
    }
    if !checks::is_identity(headers) {
        return Headed::Answered(refused(headers, 415, "Unsupported Media Type: Content-Encoding is not supported"));
    }
    if !checks::is_plain_framing(headers) {
        let why = "Not Implemented: Transfer-Encoding other than chunked is not supported";
        return Headed::Answered(refused(headers, 501, why));
    }
    Headed::Post(Post { caller, modern, unknown })
}

/// Answer a request whose body the server does not use once that body is read and dropped
/// (`body::drain`), so a client still sending it reads the answer rather than a reset. A
/// client that waits for `100 Continue` before sending its body is answered at once.
async fn unread(options: &HttpOptions, request: Request, answer: Response) -> Response {
    let (parts, body) = request.into_parts();
    let waits = parts.headers.get(header::EXPECT).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if !waits && !http_body::Body::is_end_stream(&body) {
        let _ = tokio::time::timeout(options.body_timeout, body::drain(body, options.max_body_bytes)).await;
    }
    answer
}

/// Read a POST's body within its limits and serve it.
async fn serve_body(
    door: &FrontDoor,
    tenant: &Arc<Tenant>,
    endpoint: &Endpoint,
    request: Request,
    Post { caller, modern, unknown }: Post,
) -> Response {
    let (parts, body) = request.into_parts();
    let limit = door.options.max_body_bytes;
    // A body that cannot be read has no id to echo: a 2026-07-28 client gets none at all.
    let unread = |error| match modern.as_deref().or(unknown.as_deref()).is_some_and(omits_unread_ids) {
        true => jsonrpc::modern_error(None, &error),
        false => jsonrpc::error(None, &error),
    };
    let body = match body::read_within(body, limit, door.options.body_timeout).await {
        Ok(body) => {
            endpoint.traffic.received(body.len());
            body
        }
        Err(body::Refused::TooLarge) => {
            let error = ErrorData::invalid_request(format!("request body exceeds the limit of {limit} bytes"), None);
            return exchange::json(StatusCode::PAYLOAD_TOO_LARGE, unread(error));
        }
        // A body cut short (the client closed before its Content-Length), or a broken chunk.
        Err(body::Refused::Broken(e)) => {
            let error = ErrorData::invalid_request(format!("the request body could not be read: {e}"), None);
            return exchange::json(StatusCode::BAD_REQUEST, unread(error));
        }
        Err(body::Refused::Late) => {
            let late = refused(&parts.headers, 408, "Request Timeout: the body did not arrive in time");
            return body::closing(late);
        }
    };
    match modern.or(unknown) {
        Some(declared) => {
            let answer = (endpoint.branch(), &caller, tenant.auth.as_ref());
            modern::serve(&endpoint.stateless, &parts.headers, &declared, &body, answer).await
        }
        None => {
            let client = parts.extensions.get::<listener::ClientAddr>().map(|a| a.0);
            let sender = (client, &caller, tenant.auth.as_ref());
            legacy::post(&endpoint.sessions, &parts.headers, sender, &body, door.options.max_batch).await
        }
    }
}
