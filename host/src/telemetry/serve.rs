//! `GET /metrics`: on a listener of its own (`--metrics HOST:PORT`), or as a route of the
//! admin listener, behind its token.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use super::metrics::CONTENT_TYPE;

/// Renders the metrics, first reading the gauges that are sampled rather than counted (live
/// instances, open sessions). Built at the edge, where the runtime and the tenants are known.
pub type Scrape = Arc<dyn Fn() -> String + Send + Sync>;

/// The answer to `GET /metrics`.
pub fn respond(scrape: &Scrape) -> Response {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], scrape()).into_response()
}

/// Serve `/metrics` on `addr` until `stop`.
pub async fn serve(addr: SocketAddr, scrape: Scrape, stop: CancellationToken) -> Result<SocketAddr> {
    let listener =
        tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot listen for metrics on {addr}"))?;
    let local = listener.local_addr()?;
    tracing::info!("metrics on http://{local}/metrics");
    let app = axum::Router::new().route("/metrics", get(move || async move { respond(&scrape) }));
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await {
            tracing::error!("metrics endpoint failed: {e}");
        }
    });
    Ok(local)
}
