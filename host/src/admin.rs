//! The operator's control path: a small HTTP API on a loopback address, guarded by a bearer
//! token. It is deliberately not MCP: no client of the MCP endpoint can reach it, and no
//! plugin can call it.
//!
//! Per tenant, under `/admin/t/{tenant}`:
//! - `GET …/plugins`: every plugin with its source, served version (SHA-256) and last
//!   error, and the policy's state.
//! - `POST …/reload`: read the tenant's configuration and every source again.
//! - `POST …/plugins` with `{"path": "/abs/file.wasm"}`: load (or replace) a plugin.
//! - `DELETE …/plugins/{name}`: stop serving a plugin; running calls finish.
//!
//! For the whole server: `GET /admin/tenants` (every tenant's status), `POST
//! /admin/tenants/reload` (read the configuration again: tenants come, change and go) and
//! `GET /metrics` (Prometheus; the server's token only, as it covers every tenant). On a
//! server with one tenant the same routes work without `/t/{tenant}`.
//!
//! The server's token opens every route. A tenant may have a token of its own (its SHA-256
//! in `admin_token_sha256`), which opens that tenant's `/admin/t/{tenant}/…` routes alone.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use axum::extract::{FromRequestParts, Path as UrlPath, Request, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::auth::{bearer, find_by_digest};
use crate::loader::ControlError;
use crate::telemetry::Scrape;
use crate::tenants::{Tenant, Tenants};
use crate::transport::http::{Allowed, body};

/// The admin bearer token, kept as its SHA-256 so comparisons take the same time whatever
/// the guess.
#[derive(Clone)]
pub struct Token([u8; 32]);

/// The refusal of a tenant's token outside its tenant's routes.
fn tenant_only(own: &str) -> Response {
    problem(StatusCode::FORBIDDEN, format!("this token administers tenant {own} alone: use /admin/t/{own}/…"))
}

/// What a request's token opens.
#[derive(Clone)]
enum Access {
    /// Everything: the server's token.
    Server,
    /// One tenant's routes: that tenant's own token.
    Tenant(Arc<str>),
}

impl Access {
    /// Whose token `presented` is, if anyone's: the server's, or one tenant's own.
    fn of(presented: &str, server: &Token, tenants: &Tenants) -> Option<Access> {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let set = tenants.current();
        let own = set.tenants.values().filter_map(|t| Some((t.admin_token.as_ref()?, Access::Tenant(t.id.clone()))));
        // The server's token comes last, so it keeps its reach should a tenant name the same.
        find_by_digest(&digest, own.chain(std::iter::once((&server.0, Access::Server))))
    }
}

/// Read the token from `path`, or create the file with a fresh random token (mode 0600).
pub fn token(path: &Path) -> Result<Token> {
    let text = match crate::files::read_text(path, 64 << 10) {
        Ok(text) => {
            // Whoever reads the file has the server's admin powers.
            if crate::files::open_to_others(path) {
                tracing::warn!(
                    "the admin token file {} can be read by other users than its owner; `chmod 600` it",
                    path.display()
                );
            }
            text.trim().to_owned()
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let bytes: [u8; 32] = rand::random();
            let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            write_private(path, &token).with_context(|| format!("cannot create the admin token {}", path.display()))?;
            tracing::info!("created a new admin token in {}", path.display());
            token
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read the admin token {}", path.display())),
    };
    if text.len() < 16 {
        bail!("the admin token in {} is shorter than 16 characters", path.display());
    }
    Ok(Token(Sha256::digest(text.as_bytes()).into()))
}

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(text.as_bytes())
}

/// Start the admin endpoint on `addr`, which must be a loopback address.
pub async fn serve(
    tenants: Arc<Tenants>,
    addr: SocketAddr,
    token: Token,
    scrape: Scrape,
    (header_timeout, body_timeout): (std::time::Duration, std::time::Duration),
    stop: CancellationToken,
) -> Result<()> {
    if !addr.ip().is_loopback() {
        bail!("the admin endpoint must listen on a loopback address, not {addr}");
    }
    let app = axum::Router::new()
        .route("/admin/tenants", get(tenants_list))
        .route("/admin/tenants/reload", post(tenants_reload))
        .route("/admin/plugins", get(list).post(load))
        .route("/admin/plugins/{name}", delete(unload))
        .route("/admin/reload", post(reload))
        .route("/admin/t/{tenant}/plugins", get(list).post(load))
        .route("/admin/t/{tenant}/plugins/{name}", delete(unload))
        .route("/admin/t/{tenant}/reload", post(reload))
        .route("/metrics", get(move |Extension(access): Extension<Access>| async move { metrics(&access, &scrape) }))
        .layer(axum::middleware::from_fn_with_state((token, tenants.clone(), Arc::new(Allowed::new(&[], &[]))), guard))
        .layer(Extension(BodyTimeout(body_timeout)))
        .with_state(tenants);
    let what = ("admin endpoint", "/admin");
    crate::listener::side(addr, app, what, header_timeout, stop)
        .await
        .with_context(|| format!("cannot listen for admin on {addr}"))?;
    Ok(())
}

/// `GET /metrics`, for the server's token only: the series cover every tenant.
fn metrics(access: &Access, scrape: &Scrape) -> Response {
    match access {
        Access::Server => crate::telemetry::respond(scrape),
        Access::Tenant(own) => problem(
            StatusCode::FORBIDDEN,
            format!("the metrics cover every tenant: this token administers tenant {own} alone"),
        ),
    }
}

/// Refuse anything without the token, and any host or origin that is not loopback, judged
/// as the MCP endpoint judges them: one Host (or a target in absolute form) naming a loopback
/// host (DNS rebinding), and at most one Origin, a loopback one (the endpoint is for tools,
/// not for web pages).
async fn guard(
    State((token, tenants, loopback)): State<(Token, Arc<Tenants>, Arc<Allowed>)>,
    mut request: Request,
    next: Next,
) -> Response {
    if let Err((status, reason)) = loopback.check(request.uri(), request.headers(), |_| false) {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN);
        return problem(status, format!("{reason} (the admin endpoint answers loopback hosts and origins only)"));
    }
    let presented = bearer(request.headers()).ok();
    match presented.and_then(|presented| Access::of(presented, &token, &tenants)) {
        Some(access) => {
            request.extensions_mut().insert(access);
            next.run(request).await
        }
        None => no_token(),
    }
}

fn problem(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

fn refused(error: ControlError) -> Response {
    let status = match error {
        ControlError::UnknownPlugin(_) => StatusCode::NOT_FOUND,
        ControlError::Outside { .. } => StatusCode::FORBIDDEN,
        ControlError::Failed { .. } => StatusCode::UNPROCESSABLE_ENTITY,
        ControlError::NotWasm(_) | ControlError::Name(_) | ControlError::Path { .. } => StatusCode::BAD_REQUEST,
    };
    problem(status, error.to_string())
}

/// The tenant a request is about: the one its path names, or the server's only one; a
/// tenant's own token reaches its tenant by name alone. A request refused here never reaches
/// its handler. The flag says whether by the tenant's own token (which loads plugins from its
/// tenant's directories only) rather than the server's.
struct Scoped(Arc<Tenant>, bool);

/// The token a request was let in with ([`guard`] puts it there, or refuses the request).
fn access(parts: &Parts) -> Option<&Access> {
    parts.extensions.get::<Access>()
}

/// `401` for a request without a token this endpoint knows.
fn no_token() -> Response {
    let mut response = problem(StatusCode::UNAUTHORIZED, "a valid admin bearer token is required");
    response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    response
}

impl FromRequestParts<Arc<Tenants>> for Scoped {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, tenants: &Arc<Tenants>) -> Result<Scoped, Response> {
        let UrlPath(params) = UrlPath::<HashMap<String, String>>::from_request_parts(parts, tenants)
            .await
            .map_err(IntoResponse::into_response)?;
        let access = access(parts).ok_or_else(no_token)?;
        let own = matches!(access, Access::Tenant(_));
        let tenant = match (params.get("tenant"), access) {
            (Some(id), Access::Tenant(own)) if **own != **id => Err(tenant_only(own)),
            (Some(id), _) => tenants.get(id).map_err(|e| problem(StatusCode::NOT_FOUND, e.to_string())),
            (None, Access::Tenant(own)) => Err(tenant_only(own)),
            (None, Access::Server) => tenants.only().ok_or_else(|| {
                problem(StatusCode::CONFLICT, "this server has several tenants: use /admin/t/{tenant}/…")
            }),
        };
        tenant.map(|tenant| Scoped(tenant, own))
    }
}

/// A request whose token opens the whole server, not one tenant.
struct ServerWide;

impl FromRequestParts<Arc<Tenants>> for ServerWide {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &Arc<Tenants>) -> Result<ServerWide, Response> {
        match access(parts).ok_or_else(no_token)? {
            Access::Server => Ok(ServerWide),
            Access::Tenant(own) => Err(tenant_only(own)),
        }
    }
}

async fn tenants_list(_: ServerWide, State(tenants): State<Arc<Tenants>>) -> Response {
    Json(json!({"error": tenants.error().await, "tenants": tenants.statuses().await})).into_response()
}

async fn tenants_reload(_: ServerWide, State(tenants): State<Arc<Tenants>>) -> Response {
    let statuses = tenants.reload().await;
    Json(json!({"error": tenants.error().await, "tenants": statuses})).into_response()
}

async fn list(Scoped(tenant, _): Scoped) -> Response {
    Json(tenant.loader.status().await).into_response()
}

async fn reload(State(tenants): State<Arc<Tenants>>, Scoped(tenant, _): Scoped) -> Response {
    match tenants.reload_one(&tenant.id).await {
        Ok(status) => Json(status).into_response(),
        Err(e) => problem(StatusCode::NOT_FOUND, e.to_string()),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadRequest {
    path: PathBuf,
}

/// How large a load request's body may be: it names a path.
const LOAD_BODY_BYTES: usize = 64 << 10;

/// How long a request's body may take to arrive (`--body-timeout`, as on the MCP endpoint): a
/// token holder's slow or endless body is not held open for good.
#[derive(Clone, Copy)]
struct BodyTimeout(std::time::Duration);

async fn load(
    Scoped(tenant, own): Scoped,
    Extension(BodyTimeout(timeout)): Extension<BodyTimeout>,
    body: axum::body::Body,
) -> Response {
    let body = match body::read_within(body, LOAD_BODY_BYTES, timeout).await {
        Ok(body) => body,
        Err(body::Refused::TooLarge) => {
            let why = format!("the request body could not be read: longer than {LOAD_BODY_BYTES} bytes");
            return problem(StatusCode::BAD_REQUEST, why);
        }
        Err(body::Refused::Broken(e)) => {
            return problem(StatusCode::BAD_REQUEST, format!("the request body could not be read: {e}"));
        }
        Err(body::Refused::Late) => {
            return body::closing(problem(StatusCode::REQUEST_TIMEOUT, "the request body did not arrive in time"));
        }
    };
    let request: LoadRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => return problem(StatusCode::BAD_REQUEST, format!("expected {{\"path\": \"/abs/file.wasm\"}}: {e}")),
    };
    match tenant.loader.load(&request.path, own).await {
        Ok(status) => Json(status).into_response(),
        Err(e) => refused(e),
    }
}

async fn unload(Scoped(tenant, _): Scoped, UrlPath(params): UrlPath<HashMap<String, String>>) -> Response {
    let name = params.get("name").map_or("", String::as_str);
    match tenant.loader.unload(name).await {
        Ok(status) => Json(status).into_response(),
        Err(e) => refused(e),
    }
}
