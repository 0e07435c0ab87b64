//! The operator's control path: a small HTTP API on a loopback address, guarded by a bearer
//! token. It is deliberately not MCP: no client of the MCP endpoint can reach it, and no
//! plugin can call it.
//!
//! - `GET /admin/plugins`: every plugin with its source, served version (SHA-256) and last
//!   error, and the policy file's state.
//! - `POST /admin/reload`: read the policy and every source again.
//! - `POST /admin/plugins` with `{"path": "/abs/file.wasm"}`: load (or replace) a plugin.
//! - `DELETE /admin/plugins/{name}`: stop serving a plugin; running calls finish.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use axum::Json;
use axum::extract::{Path as UrlPath, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::loader::{ControlError, Loader};

/// The admin bearer token, kept as its SHA-256 so comparisons take the same time whatever
/// the guess.
#[derive(Clone)]
pub struct Token([u8; 32]);

impl Token {
    fn matches(&self, presented: &str) -> bool {
        let presented: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        presented.iter().zip(self.0.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

/// Read the token from `path`, or create the file with a fresh random token (mode 0600).
pub fn token(path: &Path) -> Result<Token> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text.trim().to_owned(),
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
pub async fn serve(loader: Arc<Loader>, addr: SocketAddr, token: Token, stop: CancellationToken) -> Result<()> {
    if !addr.ip().is_loopback() {
        bail!("the admin endpoint must listen on a loopback address, not {addr}");
    }
    let listener =
        tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot listen for admin on {addr}"))?;
    let local = listener.local_addr()?;
    tracing::info!("admin endpoint on http://{local}/admin");
    let app = axum::Router::new()
        .route("/admin/plugins", get(list).post(load))
        .route("/admin/plugins/{name}", delete(unload))
        .route("/admin/reload", post(reload))
        .layer(axum::middleware::from_fn_with_state(token, guard))
        .with_state(loader);
    tokio::spawn(async move {
        let served = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await;
        if let Err(e) = served {
            tracing::error!("admin endpoint failed: {e}");
        }
    });
    Ok(())
}

/// Refuse anything without the token, and any Host that is not loopback (DNS rebinding).
async fn guard(State(token): State<Token>, request: Request, next: Next) -> Response {
    let host_ok = request.headers().get(header::HOST).and_then(|h| h.to_str().ok()).is_some_and(is_loopback_host);
    if !host_ok {
        return problem(StatusCode::FORBIDDEN, "the admin endpoint answers only loopback Host names");
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "));
    match presented {
        Some(presented) if token.matches(presented) => next.run(request).await,
        _ => {
            let mut response = problem(StatusCode::UNAUTHORIZED, "a valid admin bearer token is required");
            response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
            response
        }
    }
}

/// `localhost`, `127.0.0.1` or `[::1]`, with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = match host.rsplit_once(':') {
        Some((name, port)) if !name.ends_with(':') && port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    matches!(name.to_ascii_lowercase().as_str(), "localhost" | "127.0.0.1" | "[::1]")
}

fn problem(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

fn refused(error: ControlError) -> Response {
    let status = match error {
        ControlError::UnknownPlugin(_) => StatusCode::NOT_FOUND,
        ControlError::Failed { .. } => StatusCode::UNPROCESSABLE_ENTITY,
        ControlError::NotWasm(_) | ControlError::Path { .. } => StatusCode::BAD_REQUEST,
    };
    problem(status, error.to_string())
}

async fn list(State(loader): State<Arc<Loader>>) -> Response {
    Json(loader.status().await).into_response()
}

async fn reload(State(loader): State<Arc<Loader>>) -> Response {
    Json(loader.reload().await).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadRequest {
    path: PathBuf,
}

async fn load(State(loader): State<Arc<Loader>>, body: axum::body::Bytes) -> Response {
    let request: LoadRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => return problem(StatusCode::BAD_REQUEST, format!("expected {{\"path\": \"/abs/file.wasm\"}}: {e}")),
    };
    match loader.load(&request.path).await {
        Ok(status) => Json(status).into_response(),
        Err(e) => refused(e),
    }
}

async fn unload(State(loader): State<Arc<Loader>>, UrlPath(name): UrlPath<String>) -> Response {
    match loader.unload(&name).await {
        Ok(status) => Json(status).into_response(),
        Err(e) => refused(e),
    }
}
