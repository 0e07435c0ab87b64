//! Answering one POST: JSON when the answer is all there is, SSE when something must reach
//! the client first (a notification, or a request it has to answer). The request's
//! notifications and requests travel on its own response stream.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use rmcp::ErrorData;
use rmcp::model::{ClientResult, ServerNotification, ServerRequest};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::super::jsonrpc;
use super::super::pending::Pending;
use super::resume::{PostStream, PostStreams};
use super::sse::{self, Frame};
use crate::auth::Authenticator;
use crate::mcp::{ClientLink, INSUFFICIENT_SCOPE, LinkError, LinkFuture};

/// Messages one POST may have waiting to be written before its answer.
const QUEUE: usize = 64;

/// What a POST is answered with once its work is done.
pub struct Answer {
    /// The HTTP status, if the answer goes out as JSON.
    pub status: StatusCode,
    /// A `WWW-Authenticate` challenge to send with it, if it goes out as JSON.
    pub challenge: Option<String>,
    /// The responses: one, or a batch's (answered as an array).
    pub messages: Vec<Vec<u8>>,
    pub batch: bool,
}

impl Answer {
    pub fn one(status: StatusCode, message: Vec<u8>) -> Answer {
        Answer { status, challenge: None, messages: vec![message], batch: false }
    }

    /// A request left unanswered (it was cancelled): an SSE stream that ends with nothing
    /// in it, the one way to say no more to a request over HTTP.
    pub fn unanswered() -> Answer {
        Answer { status: StatusCode::OK, challenge: None, messages: Vec::new(), batch: false }
    }
}

/// The scope an error says its request lacked ([`INSUFFICIENT_SCOPE`]).
pub fn needed_scope(error: &ErrorData) -> Option<String> {
    let scope = error.data.as_ref()?.get("scope")?.as_str()?;
    (error.code == INSUFFICIENT_SCOPE).then(|| scope.to_owned())
}

/// `answer`, made a `403` with a step-up challenge if its request lacked `needed` (and the
/// tenant authenticates its callers).
pub fn refused_for_scope(mut answer: Answer, needed: Option<String>, auth: Option<&Authenticator>) -> Answer {
    if let (Some(needed), Some(auth)) = (needed, auth) {
        answer.status = StatusCode::FORBIDDEN;
        answer.challenge = Some(auth.insufficient_scope(&needed));
    }
    answer
}

/// A JSON body.
pub fn json(status: StatusCode, body: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response()
}

/// The link a POST's work talks to the client through, and the receiving end of its stream.
/// With `asks`, the client can be asked things (legacy sessions); without, it cannot.
pub fn link(asks: Option<Arc<Pending>>) -> (Arc<dyn ClientLink>, mpsc::Receiver<Vec<u8>>) {
    let (tx, rx) = mpsc::channel(QUEUE);
    (link_into(tx, asks), rx)
}

/// A link whose messages go into `tx`: the one stream of a batch its request is part of.
pub fn link_into(tx: mpsc::Sender<Vec<u8>>, asks: Option<Arc<Pending>>) -> Arc<dyn ClientLink> {
    Arc::new(PostLink { tx, asks })
}

/// What becomes of a POST's work if its response is dropped first (the client went away).
pub enum OnDrop {
    /// It goes on: a legacy session's request is cancelled by `notifications/cancelled`.
    Detach,
    /// The token is cancelled, which stops a plugin call at its next tick; the request then
    /// ends as cancelled, unanswered.
    Cancel(CancellationToken),
}

/// Run `work` and answer: JSON if it finishes before anything is sent, else SSE. With
/// `resumable` (a session's POST streams), an SSE answer can be resumed after a broken
/// connection (see `resume`). The work runs on a task of its own, so that a plugin call
/// moved to its own thread (see `runtime::offload`) does not hold up the stream its
/// notifications travel on.
pub async fn respond<W>(
    work: W,
    mut notes: mpsc::Receiver<Vec<u8>>,
    on_drop: OnDrop,
    resumable: Option<&PostStreams>,
) -> Response
where
    W: Future<Output = Answer> + Send + 'static,
{
    // Boxed before it is handed to tokio: a request's future is kilobytes, and spawning
    // moves it several times on its way into the task (memmove was 4% of a call's CPU).
    let mut work = Box::pin(Spawned { task: tokio::spawn(Box::pin(work)), on_drop });
    tokio::select! {
        biased;
        Some(first) = notes.recv() => match resumable {
            Some(posts) => {
                let stream = posts.open();
                let priming = stream.priming();
                // The reader attaches before anything is pushed: a stream nobody reads may
                // keep nothing (see `resume::KeptBytes`).
                let events = stream.events(0);
                tokio::spawn(keep(stream.clone(), first, work, notes));
                sse::response(futures::stream::iter([priming]).chain(events))
            }
            None => sse::response(Replies { first: Some(first), work: Some(work), notes, answer: Vec::new() }),
        },
        answer = &mut work => match answer.messages.len() {
            0 if answer.batch => StatusCode::ACCEPTED.into_response(),
            0 => sse::response(futures::stream::empty()),
            1 if !answer.batch => {
                let mut response = json(answer.status, answer.messages.into_iter().next().unwrap_or_default());
                if let Some(challenge) = answer.challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
                    response.headers_mut().insert(header::WWW_AUTHENTICATE, challenge);
                }
                response
            }
            _ => json(answer.status, jsonrpc::array(&answer.messages)),
        },
    }
}

/// Put what a POST's work sends, then its answers, into its resumable stream, whether or not
/// the client is still reading it.
async fn keep(
    stream: Arc<PostStream>,
    first: Vec<u8>,
    mut work: Pin<Box<Spawned>>,
    mut notes: mpsc::Receiver<Vec<u8>>,
) {
    stream.push(first).await;
    let answer = loop {
        tokio::select! {
            biased;
            Some(note) = notes.recv() => stream.push(note).await,
            answer = &mut work => break answer,
        }
    };
    // Every notification was queued before the answer was ready.
    while let Ok(note) = notes.try_recv() {
        stream.push(note).await;
    }
    for message in answer.messages {
        stream.push(message).await;
    }
    stream.finish();
}

/// A POST's work on its own task; dropping it does what `on_drop` says.
struct Spawned {
    task: tokio::task::JoinHandle<Answer>,
    on_drop: OnDrop,
}

impl Future for Spawned {
    type Output = Answer;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answer> {
        Pin::new(&mut self.task).poll(cx).map(|joined| {
            joined.unwrap_or_else(|e| {
                tracing::error!("a request's task failed: {e}");
                let error = ErrorData::internal_error("the request failed inside the server", None);
                Answer::one(StatusCode::INTERNAL_SERVER_ERROR, jsonrpc::error(None, &error))
            })
        })
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        // Cancelled, not aborted: the request ends at its next look at the token and does
        // its accounting (an aborted call was missing from the metrics).
        if let OnDrop::Cancel(token) = &self.on_drop {
            token.cancel();
        }
    }
}

/// A POST's SSE stream: what is sent to the client as it comes, then the answers. Dropping
/// it (the client closed the stream) drops the work.
struct Replies<W> {
    first: Option<Vec<u8>>,
    work: Option<Pin<Box<W>>>,
    notes: mpsc::Receiver<Vec<u8>>,
    answer: Vec<Vec<u8>>,
}

fn event(message: Vec<u8>) -> Frame {
    Frame::message(None, &message)
}

impl<W: Future<Output = Answer>> Stream for Replies<W> {
    type Item = Frame;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(event(first)));
        }
        if let Poll::Ready(Some(note)) = self.notes.poll_recv(cx) {
            return Poll::Ready(Some(event(note)));
        }
        if let Some(work) = self.work.as_mut()
            && let Poll::Ready(answer) = work.as_mut().poll(cx)
        {
            self.work = None;
            self.answer = answer.messages;
            self.answer.reverse();
        }
        if self.work.is_none() {
            // Every notification was queued before the answer was ready.
            if let Ok(note) = self.notes.try_recv() {
                return Poll::Ready(Some(event(note)));
            }
            return Poll::Ready(self.answer.pop().map(event));
        }
        Poll::Pending
    }
}

/// The way back to the client through one POST's response stream.
struct PostLink {
    tx: mpsc::Sender<Vec<u8>>,
    asks: Option<Arc<Pending>>,
}

impl ClientLink for PostLink {
    fn notify(&self, notification: ServerNotification) -> LinkFuture<'_, ()> {
        Box::pin(async move {
            let message = jsonrpc::outgoing(None, &notification).map_err(|e| LinkError::Failed(e.to_string()))?;
            self.tx.send(message).await.map_err(|_| LinkError::Closed)
        })
    }

    fn request(&self, request: ServerRequest) -> LinkFuture<'_, ClientResult> {
        Box::pin(async move {
            let Some(asks) = &self.asks else {
                return Err(LinkError::Failed("a 2026-07-28 request cannot be asked anything".into()));
            };
            asks.request(&request, &self.tx, self.tx.closed()).await
        })
    }

    fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    fn closed(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.tx.closed())
    }
}
