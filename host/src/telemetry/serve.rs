//! `GET /metrics`: on a listener of its own (`--metrics HOST:PORT`), or as a route of the
//! admin listener, behind its token.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use super::metrics::CONTENT_TYPE;

/// Renders the metrics, first reading the gauges that are sampled rather than counted (live
/// instances, open sessions). Built at the edge, where the runtime and the tenants are known.
pub type Scrape = Arc<dyn Fn() -> String + Send + Sync>;

/// Judges a scrape's Host and Origin, as the MCP endpoint judges its requests (DNS
/// rebinding: a web page must not read the series through a name it rebound to this
/// address). Built at the edge, where the endpoint's rules are known; `Err` is the status
/// and the reason.
pub type HostCheck = Arc<dyn Fn(&Uri, &HeaderMap) -> Result<(), (u16, &'static str)> + Send + Sync>;

/// The answer to `GET /metrics`.
pub fn respond(scrape: &Scrape) -> Response {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], scrape()).into_response()
}

/// Serve `/metrics` on `addr` until `stop`, to requests `hosts` lets through.
pub async fn serve(addr: SocketAddr, scrape: Scrape, hosts: HostCheck, stop: CancellationToken) -> Result<SocketAddr> {
    let listener =
        tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot listen for metrics on {addr}"))?;
    let local = listener.local_addr()?;
    tracing::info!("metrics on http://{local}/metrics");
    let app = axum::Router::new().route(
        "/metrics",
        get(move |uri: Uri, headers: HeaderMap| async move {
            match hosts(&uri, &headers) {
                Ok(()) => respond(&scrape),
                Err((status, reason)) => {
                    (StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN), reason).into_response()
                }
            }
        }),
    );
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await {
            tracing::error!("metrics endpoint failed: {e}");
        }
    });
    Ok(local)
}
