//! Server-sent events (`text/event-stream`), framed here rather than with axum's `Event`: a
//! priming event (SEP-1699) is an id with an *empty* `data` field, and axum's writes no
//! `data` line for empty data. Parsers dispatch no event without one (eventsource-parser,
//! under the TypeScript SDK, among them), so a client would never learn the id it could
//! resume from.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use futures::Stream;
use tokio::time::{Instant, Sleep};

/// How long a stream may stay silent before a comment is sent, so that neither the client
/// nor a proxy between takes it for dead.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// What a priming event asks a client to wait before it reconnects, in milliseconds.
const RETRY_MS: u64 = 3000;
/// The comment sent on a quiet stream.
const QUIET: &[u8] = b":\n\n";

/// A number in an event id as Capsule writes them: decimal digits without a sign or a
/// leading zero, so each id has one spelling and one a client makes up is not taken for one
/// it was sent.
pub fn id_number(text: &str) -> Option<u64> {
    let canonical = text.bytes().all(|b| b.is_ascii_digit()) && (text == "0" || !text.starts_with('0'));
    canonical.then(|| text.parse().ok()).flatten()
}

/// One event, framed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame(Bytes);

impl Frame {
    /// A message (serialised JSON), with its id if it has one. JSON as Capsule writes it has
    /// no line breaks; any there would be are kept as SSE keeps them, one `data` line each.
    pub fn message(id: Option<&str>, data: &[u8]) -> Frame {
        let mut out = Vec::with_capacity(data.len() + id.map_or(0, |id| id.len() + 5) + 8);
        if let Some(id) = id {
            out.extend_from_slice(b"id: ");
            out.extend_from_slice(id.as_bytes());
            out.push(b'\n');
        }
        for line in data.split(|&b| b == b'\n' || b == b'\r') {
            out.extend_from_slice(b"data: ");
            out.extend_from_slice(line);
            out.push(b'\n');
        }
        out.push(b'\n');
        Frame(out.into())
    }

    /// A priming event: `id` to resume from, how long to wait before reconnecting, and an
    /// empty `data` field.
    pub fn priming(id: &str) -> Frame {
        Frame(format!("id: {id}\nretry: {RETRY_MS}\ndata: \n\n").into())
    }

    #[cfg(test)]
    pub fn text(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// A `text/event-stream` response of `frames`, with a comment after each [`KEEP_ALIVE`]
/// without one.
pub fn response(frames: impl Stream<Item = Frame> + Send + 'static) -> Response {
    let mut response = Response::new(Body::from_stream(KeptAlive::new(frames, KEEP_ALIVE)));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // nginx and its kind would otherwise hold events back to fill their buffers.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// Frames, with a comment whenever none came for `every`.
struct KeptAlive<S> {
    frames: Pin<Box<S>>,
    quiet: Pin<Box<Sleep>>,
    every: Duration,
}

impl<S> KeptAlive<S> {
    fn new(frames: S, every: Duration) -> KeptAlive<S> {
        KeptAlive { frames: Box::pin(frames), quiet: Box::pin(tokio::time::sleep(every)), every }
    }
}

impl<S: Stream<Item = Frame>> Stream for KeptAlive<S> {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        match this.frames.as_mut().poll_next(cx) {
            Poll::Ready(Some(Frame(bytes))) => {
                this.quiet.as_mut().reset(Instant::now() + this.every);
                Poll::Ready(Some(Ok(bytes)))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                ready!(this.quiet.as_mut().poll(cx));
                this.quiet.as_mut().reset(Instant::now() + this.every);
                Poll::Ready(Some(Ok(Bytes::from_static(QUIET))))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[test]
    fn events_are_framed_with_their_ids_and_a_priming_event_has_empty_data() {
        assert_eq!(Frame::message(None, br#"{"a":1}"#).text(), "data: {\"a\":1}\n\n");
        assert_eq!(Frame::message(Some("p1.2"), b"{}").text(), "id: p1.2\ndata: {}\n\n");
        assert_eq!(Frame::message(None, b"a\nb").text(), "data: a\ndata: b\n\n");
        assert_eq!(Frame::priming("g1.0").text(), "id: g1.0\nretry: 3000\ndata: \n\n");
    }

    #[tokio::test]
    async fn a_quiet_stream_is_kept_alive_and_ends_with_its_frames() {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let frames = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|f| (f, rx)) });
        let mut alive = KeptAlive::new(frames, Duration::from_millis(20));
        tx.send(Frame::message(None, b"1")).await.unwrap();
        assert_eq!(alive.next().await, Some(Ok(Bytes::from_static(b"data: 1\n\n"))));
        assert_eq!(alive.next().await, Some(Ok(Bytes::from_static(QUIET))), "a comment once it was quiet");
        drop(tx);
        assert_eq!(alive.next().await, None);
    }
}
