//! CORS for the origins the endpoint allows, so that a browser client served from one of
//! them can use it: its preflight is answered, and it may read the answers, `Mcp-Session-Id`
//! and an authorization challenge among them. Which origins those are is `checks`' call
//! alone; a request from any other origin is answered as before (`403` on an MCP path), with
//! no CORS header, so a browser lets its page read nothing. The MCP paths call [`preflight`]
//! and [`readable`] after their own checks, so a call's path has no layer more; the
//! protected-resource metadata is public and says so itself (`*`, in `auth`, which answers
//! its preflights with [`public_preflight`]).

use axum::extract::Request;
use axum::http::header::{
    ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN,
    ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE, ACCESS_CONTROL_REQUEST_HEADERS,
    ACCESS_CONTROL_REQUEST_METHOD, VARY,
};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};

/// What a page may read of an answer beyond the CORS-safelisted headers.
const EXPOSED: HeaderValue = HeaderValue::from_static("Mcp-Session-Id, Mcp-Protocol-Version, WWW-Authenticate");

/// How long a browser may reuse a preflight's answer, in seconds.
const MAX_AGE: HeaderValue = HeaderValue::from_static("600");

/// Chrome's Private Network Access: a page on a public origin asks before it reaches a
/// loopback server. An origin the operator allowed may.
const REQUEST_PRIVATE_NETWORK: HeaderName = HeaderName::from_static("access-control-request-private-network");
const ALLOW_PRIVATE_NETWORK: HeaderName = HeaderName::from_static("access-control-allow-private-network");

/// Whether a request is a CORS preflight: `OPTIONS` asking for a method.
pub fn is_preflight(request: &Request) -> bool {
    request.method() == Method::OPTIONS && request.headers().contains_key(ACCESS_CONTROL_REQUEST_METHOD)
}

/// The answer to a preflight for a public document (the protected-resource metadata): any
/// page may `GET` it, with the headers it asked for (a browser client's discovery may send
/// `MCP-Protocol-Version`, which needs a preflight).
pub fn public_preflight(asked: &HeaderMap) -> Response {
    let vary = HeaderValue::from_static("Access-Control-Request-Method, Access-Control-Request-Headers");
    allowing(HeaderValue::from_static("*"), HeaderValue::from_static("GET, HEAD"), asked, vary)
}

/// `204` letting `origin` use `methods` with the headers `asked` names, for as long as a
/// browser may reuse it, its answer varying by `vary`.
fn allowing(origin: HeaderValue, methods: HeaderValue, asked: &HeaderMap, vary: HeaderValue) -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    let headers = response.headers_mut();
    headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    headers.insert(ACCESS_CONTROL_ALLOW_METHODS, methods);
    if let Some(names) = asked.get(ACCESS_CONTROL_REQUEST_HEADERS) {
        headers.insert(ACCESS_CONTROL_ALLOW_HEADERS, names.clone());
    }
    headers.insert(ACCESS_CONTROL_MAX_AGE, MAX_AGE);
    headers.insert(VARY, vary);
    response
}

/// Mark an answer readable by the allowed origin that asked (`None`: no browser asked).
pub fn readable(origin: Option<HeaderValue>, mut response: Response) -> Response {
    if let Some(origin) = origin {
        let headers = response.headers_mut();
        headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(ACCESS_CONTROL_EXPOSE_HEADERS, EXPOSED);
        headers.append(VARY, HeaderValue::from_static("Origin"));
    }
    response
}

/// The answer to a preflight from an allowed origin: `204` allowing the endpoint's methods
/// and the headers asked for (the endpoint judges each header itself when the request
/// comes, and `Mcp-Param-*` names are the tool's own).
pub fn preflight(origin: HeaderValue, asked: &HeaderMap) -> Response {
    let vary = HeaderValue::from_static("Origin, Access-Control-Request-Method, Access-Control-Request-Headers");
    let mut response = allowing(origin, HeaderValue::from_static("GET, POST, DELETE"), asked, vary);
    if asked.get(REQUEST_PRIVATE_NETWORK).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true")) {
        response.headers_mut().insert(ALLOW_PRIVATE_NETWORK, HeaderValue::from_static("true"));
    }
    response
}
