//! The resource server's HTTP face: 401 challenges, and each tenant's protected-resource
//! metadata (RFC 9728) at `/.well-known/oauth-protected-resource` followed by the path of
//! its endpoint.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{FrontDoor, by_host_name, counted_refusal, text};
use crate::auth::{AuthError, Authenticator, scope};
use crate::telemetry::Refusal;
use crate::tenants::{Tenant, TenantSet};

/// The scopes a tenant offers: one per plugin it serves, the least a client could ask for
/// to use any one of them.
pub fn scopes_supported(tenant: &Tenant) -> Vec<String> {
    tenant.shared.catalog().plugins().iter().map(|p| scope::of_plugin(p.name())).collect()
}

/// `401` with the challenge that sends a client to the tenant's metadata; `503` when the
/// authorization server could not be asked, which no new token would mend.
pub fn unauthorized(auth: &Authenticator, tenant: &Tenant, error: &AuthError) -> Response {
    let description = match error {
        AuthError::Missing => "this endpoint needs a bearer token".to_owned(),
        AuthError::Invalid(why) => why.clone(),
        AuthError::Unavailable => {
            let mut response = (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"error": "temporarily_unavailable",
                            "error_description": "the authorization server could not be asked; try again shortly"})),
            )
                .into_response();
            let retry = HeaderValue::from(crate::auth::RETRY_AFTER.as_secs());
            response.headers_mut().insert(header::RETRY_AFTER, retry);
            return response;
        }
    };
    let challenge = auth.challenge(error, &scopes_supported(tenant));
    let mut response = (
        StatusCode::UNAUTHORIZED,
        Json(json!({"error": if matches!(error, AuthError::Missing) { "unauthorized" } else { "invalid_token" },
                    "error_description": description})),
    )
        .into_response();
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

fn metadata(tenant: Option<&Arc<Tenant>>) -> Response {
    match tenant.and_then(|t| t.auth.as_ref().map(|auth| (t, auth))) {
        Some((tenant, auth)) => {
            let mut response = Json(auth.metadata(&scopes_supported(tenant))).into_response();
            // Public and the same for everyone: browser-based clients may read it.
            response.headers_mut().insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
            response
        }
        None => text(404, "Not Found: no protected resource here"),
    }
}

/// The metadata of the tenant `/mcp` serves for this Host.
pub async fn metadata_by_host(State(door): State<Arc<FrontDoor>>, request: Request) -> Response {
    let set = door.tenants.current();
    match host_refused(&door, &set, &request) {
        Some(refused) => refused,
        None => metadata(by_host_name(&set, &request)),
    }
}

/// The metadata of `/t/{tenant}/mcp`.
pub async fn metadata_by_path(
    State(door): State<Arc<FrontDoor>>,
    id: Result<Path<String>, PathRejection>,
    request: Request,
) -> Response {
    let set = door.tenants.current();
    match host_refused(&door, &set, &request) {
        Some(refused) => refused,
        None => metadata(id.ok().and_then(|Path(id)| set.tenants.get(id.as_str()))),
    }
}

/// The metadata documents asked for with another method than GET or HEAD: a browser's
/// preflight under an allowed Host is answered (any page may read them), anything else 405.
pub async fn metadata_preflight(State(door): State<Arc<FrontDoor>>, request: Request) -> Response {
    let answer = match super::cors::is_preflight(&request) {
        true => host_refused(&door, &door.tenants.current(), &request)
            .unwrap_or_else(|| super::cors::public_preflight(request.headers())),
        false => super::method_not_allowed("GET, HEAD"),
    };
    super::unread(&door.options, request, answer).await
}

/// The Host check of the MCP paths (not Origin: any page may read the metadata).
fn host_refused(door: &FrontDoor, set: &TenantSet, request: &Request) -> Option<Response> {
    let checked = door.allowed.check_host(request.uri(), request.headers(), |host| set.by_host(host).is_some());
    checked.err().map(|(status, reason)| {
        counted_refusal(door, request, Refusal::Host, reason);
        text(status, reason)
    })
}
