//! 2026-07-28 requests over HTTP: each describes itself, none belongs to a session, and the
//! client is never asked anything mid-request (the revision answers `input_required`
//! instead). Closing the response stream cancels the request.

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use rmcp::ErrorData;
use rmcp::model::{ErrorCode, ProtocolVersion, RequestId};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::super::jsonrpc::{self, Incoming, Message};
use super::exchange::{self, Answer, OnDrop, json};
use super::headers;
use super::legacy::Caller;
use crate::auth::Authenticator;
use crate::mcp::{CapsuleServer, Front, Origin, TraceContext, mirror};

/// Serve one 2026-07-28 POST body (already read and within limits).
pub async fn serve(
    server: &CapsuleServer,
    headers: &HeaderMap,
    declared: &str,
    body: &[u8],
    (shutdown, caller, auth): (&CancellationToken, &Caller, Option<&Arc<Authenticator>>),
) -> Response {
    // A revision this server does not know is refused first: the error names the ones it
    // does, whatever else the request gets wrong, unless it is no JSON at all. Unless it is
    // dated after 2026-07-28, its errors follow JSON-RPC's own rule: an id that could not be
    // read is `null`, not left out.
    let unsupported = unknown_version(declared)
        .map(|unknown| ErrorData::unsupported_protocol_version(unknown, ProtocolVersion::KNOWN_VERSIONS));
    let refuse = |id: Option<&RequestId>, error: &ErrorData| {
        let body = match super::omits_unread_ids(declared) {
            true => jsonrpc::modern_error(id, error),
            false => jsonrpc::error(id, error),
        };
        json(StatusCode::BAD_REQUEST, body)
    };
    let message = match jsonrpc::read(body) {
        Ok(Incoming::Single(message)) => message,
        Ok(Incoming::Batch(_)) => {
            let refused = jsonrpc::batch_refused(None, "request");
            return refuse(None, unsupported.as_ref().unwrap_or(&refused));
        }
        Err(refusal) => {
            let error = match &unsupported {
                Some(unsupported) if refusal.error.code != ErrorCode::PARSE_ERROR => unsupported,
                _ => &refusal.error,
            };
            return refuse(refusal.id.as_ref(), error);
        }
    };
    let (id, method, params) = match message {
        Message::Request { id, method, params } => (Some(id), method, params),
        Message::Notification { method, params } => (None, method, params),
        Message::Response { .. } => {
            let refused =
                ErrorData::invalid_request("a 2026-07-28 server sends no requests, so it takes no responses", None);
            return refuse(None, unsupported.as_ref().unwrap_or(&refused));
        }
    };
    if let Some(error) = &unsupported {
        return refuse(id.as_ref(), error);
    }
    if let Err(reason) = headers::check(headers, &method, params, id.is_some()) {
        let error = ErrorData::new(ErrorCode::HEADER_MISMATCH, reason, None);
        return json(StatusCode::BAD_REQUEST, jsonrpc::modern_error(id.as_ref(), &error));
    }
    // Notifications change nothing for a request that has no session.
    let Some(id) = id else { return StatusCode::ACCEPTED.into_response() };
    let (link, notes) = exchange::link(None);
    // A client that closes the stream cancels the request.
    let cancelled = shutdown.child_token();
    let front = Front {
        origin: Origin::http(None, caller.clone(), TraceContext::from_headers(headers)),
        id,
        link,
        cancelled: cancelled.clone(),
        declared: Some(declared.into()),
        // A tool call's `Mcp-Name` and `Mcp-Param-*` are checked where its tool is found.
        mirrored: (method == "tools/call").then(|| mirror::kept(headers)),
        before_initialize: false,
    };
    let (server, method, params) = (server.clone(), method.into_owned(), params.map(|p| p.to_owned()));
    let auth = auth.cloned();
    let work = async move {
        match server.request(&method, params.as_deref(), &front).await {
            Ok(result) => Answer::one(StatusCode::OK, jsonrpc::response(&front.id, &result)),
            Err(error) => {
                // Step-up: the challenge names the scope the request needs.
                let answer = Answer::one(status(&error), jsonrpc::modern_error(Some(&front.id), &error));
                exchange::refused_for_scope(answer, exchange::needed_scope(&error), auth.as_deref())
            }
        }
    };
    exchange::respond(work, notes, OnDrop::Cancel(cancelled), None).await
}

/// `declared`, if it names no revision this server knows.
fn unknown_version(declared: &str) -> Option<ProtocolVersion> {
    // A string always reads as a revision (rmcp keeps unknown ones as they are).
    (!super::known(declared)).then(|| ProtocolVersion::deserialize(serde_json::Value::from(declared)).ok()).flatten()
}

/// The HTTP status of a 2026-07-28 error answered as JSON.
fn status(error: &ErrorData) -> StatusCode {
    match error.code {
        ErrorCode::HEADER_MISMATCH
        | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        | ErrorCode::UNSUPPORTED_PROTOCOL_VERSION => StatusCode::BAD_REQUEST,
        ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        ErrorCode::INVALID_PARAMS if error.data.as_ref().is_some_and(|d| d.get("missingMetadata").is_some()) => {
            StatusCode::BAD_REQUEST
        }
        _ => StatusCode::OK,
    }
}
