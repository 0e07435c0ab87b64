//! `GET /metrics`: on a listener of its own (`--metrics HOST:PORT`, the app here, served by
//! the edge), or as a route of the admin listener, behind its token.

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

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

/// `/metrics` alone, for a listener of its own, to requests `hosts` lets through.
pub fn app(scrape: Scrape, hosts: HostCheck) -> axum::Router {
    axum::Router::new().route(
        "/metrics",
        get(move |uri: Uri, headers: HeaderMap| async move {
            match hosts(&uri, &headers) {
                Ok(()) => respond(&scrape),
                Err((status, reason)) => {
                    (StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN), reason).into_response()
                }
            }
        }),
    )
}
