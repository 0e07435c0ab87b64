//! 2026-07-28 requests over HTTP: each describes itself, none belongs to a session. The
//! request is dispatched right here; its answer is JSON unless a notification (progress, a
//! log message, a subscription's acknowledgement) comes first, and then an SSE stream that
//! ends with the answer. Closing the stream cancels the request.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use rmcp::ErrorData;
use rmcp::model::{ClientResult, ErrorCode, ServerNotification, ServerRequest};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::super::jsonrpc::{self, Incoming, Message, Refusal};
use super::{bytes_response, headers};
use crate::mcp::{CapsuleServer, ClientLink, Front, LinkError, LinkFuture};

/// Notifications one request may have waiting to be written.
const NOTES: usize = 64;

/// Serve one 2026-07-28 POST body (already read and within limits).
pub async fn serve(server: &CapsuleServer, headers: &HeaderMap, declared: &str, body: &[u8]) -> Response {
    let message = match jsonrpc::read(body) {
        Ok(Incoming::Single(message)) => message,
        Ok(Incoming::Batch(_)) => {
            let error = ErrorData::invalid_request(
                format!(
                    "Invalid Request: JSON-RPC batches are only part of protocol revision {}",
                    jsonrpc::BATCH_VERSION
                ),
                None,
            );
            return bytes_response(StatusCode::BAD_REQUEST, jsonrpc::error(None, &error));
        }
        Err(refusal) => return bytes_response(StatusCode::BAD_REQUEST, refusal.to_bytes()),
    };
    let (id, method, params) = match message {
        Message::Request { id, method, params } => (Some(id), method, params),
        Message::Notification { method, params } => (None, method, params),
        Message::Response { .. } => {
            let refusal = Refusal {
                id: None,
                error: ErrorData::invalid_request(
                    "a 2026-07-28 server sends no requests, so it takes no responses",
                    None,
                ),
            };
            return bytes_response(StatusCode::BAD_REQUEST, refusal.to_bytes());
        }
    };
    if let Err(reason) = headers::check(headers, &method, params, |tool| server.input_schema(tool)) {
        let error = ErrorData::new(ErrorCode::HEADER_MISMATCH, reason, None);
        return bytes_response(StatusCode::BAD_REQUEST, jsonrpc::error(id.as_ref(), &error));
    }
    // Notifications change nothing for a request that has no session.
    let Some(id) = id else { return StatusCode::ACCEPTED.into_response() };
    let (tx, mut notes) = mpsc::channel(NOTES);
    let front = Front {
        id,
        link: Arc::new(RequestLink { tx }),
        cancelled: CancellationToken::new(),
        declared: Some(declared.into()),
    };
    let (server, method, params) = (server.clone(), method.into_owned(), params.map(|p| p.to_owned()));
    let mut work = Box::pin(async move {
        let answer = server.request(&method, params.as_deref(), &front).await;
        match answer {
            Ok(result) => (StatusCode::OK, jsonrpc::response(&front.id, &result)),
            Err(error) => (status(&error), jsonrpc::error(Some(&front.id), &error)),
        }
    });
    tokio::select! {
        biased;
        Some(first) = notes.recv() => {
            let replies = Replies { first: Some(first), work: Some(work), notes, answer: None };
            let mut response = Sse::new(replies).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response();
            response.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
            response
        }
        (status, answer) = &mut work => bytes_response(status, answer),
    }
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

/// The SSE stream of one request: its notifications as they come, then its answer. Dropping
/// it (the client closed the stream) drops the request.
struct Replies<W> {
    first: Option<Vec<u8>>,
    work: Option<Pin<Box<W>>>,
    notes: mpsc::Receiver<Vec<u8>>,
    answer: Option<Vec<u8>>,
}

fn event(message: Vec<u8>) -> Result<Event, Infallible> {
    // Messages are serialised JSON, so always UTF-8.
    Ok(Event::default().data(String::from_utf8(message).unwrap_or_default()))
}

impl<W: Future<Output = (StatusCode, Vec<u8>)>> Stream for Replies<W> {
    type Item = Result<Event, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(event(first)));
        }
        if let Poll::Ready(Some(note)) = self.notes.poll_recv(cx) {
            return Poll::Ready(Some(event(note)));
        }
        if let Some(work) = self.work.as_mut()
            && let Poll::Ready((_, answer)) = work.as_mut().poll(cx)
        {
            self.work = None;
            self.answer = Some(answer);
        }
        if self.work.is_none() {
            // Every notification was queued before the answer was ready.
            if let Ok(note) = self.notes.try_recv() {
                return Poll::Ready(Some(event(note)));
            }
            return Poll::Ready(self.answer.take().map(event));
        }
        Poll::Pending
    }
}

/// The way back to a 2026-07-28 client: notifications on the request's own stream, and no
/// requests (the revision answers `input_required` instead).
struct RequestLink {
    tx: mpsc::Sender<Vec<u8>>,
}

impl ClientLink for RequestLink {
    fn notify(&self, notification: ServerNotification) -> LinkFuture<'_, ()> {
        Box::pin(async move {
            let message = jsonrpc::outgoing(None, &notification).map_err(|e| LinkError::Failed(e.to_string()))?;
            self.tx.send(message).await.map_err(|_| LinkError::Closed)
        })
    }

    fn request(&self, _: ServerRequest) -> LinkFuture<'_, ClientResult> {
        Box::pin(std::future::ready(Err(LinkError::Failed("a 2026-07-28 request cannot be asked anything".into()))))
    }

    fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    fn closed(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.tx.closed())
    }
}
