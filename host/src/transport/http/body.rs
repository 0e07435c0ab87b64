//! Reading a request body within the size limit. A body that turns out too long is read on
//! to its end and dropped, up to [`DRAIN_FACTOR`] times the limit, before it is refused: a
//! server that answers and closes while the client is still sending resets the connection,
//! and the client may never read its `413`. A `Content-Length` beyond that is refused at
//! once, without reading anything. The body of a request refused for its headers is drained
//! the same way ([`drain`]), so its client reads that refusal too.

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;

/// How much of a too-long body is read and dropped, as a multiple of the limit.
const DRAIN_FACTOR: usize = 4;

/// Why a body was not taken.
pub enum Refused {
    /// Longer than the limit.
    TooLarge,
    /// Cut short or malformed (the client stopped before its `Content-Length`, a bad chunk).
    Broken(String),
    /// Not all there by the deadline.
    Late,
}

/// [`read`], within `timeout`.
pub async fn read_within(body: Body, limit: usize, timeout: Duration) -> Result<Bytes, Refused> {
    tokio::time::timeout(timeout, read(body, limit)).await.unwrap_or(Err(Refused::Late))
}

/// `response` to a request whose body did not arrive in time: the rest of it may still come,
/// so the connection cannot carry another request.
pub fn closing(mut response: Response) -> Response {
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The body, if it is at most `limit` bytes.
pub async fn read(mut body: Body, limit: usize) -> Result<Bytes, Refused> {
    let Some(mut budget) = Budget::new(&body, limit) else {
        return Err(Refused::TooLarge);
    };
    // Most bodies arrive as one frame, which is kept as it came rather than copied.
    let mut first: Option<Bytes> = None;
    let mut joined = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Refused::Broken(e.to_string()))?;
        let Ok(data) = frame.into_data() else { continue };
        if !budget.take(data.len()) {
            return Err(Refused::TooLarge);
        }
        if budget.seen > limit {
            continue;
        }
        match first.take() {
            None if joined.is_empty() => first = Some(data),
            earlier => {
                if let Some(earlier) = earlier {
                    joined.extend_from_slice(&earlier);
                }
                joined.extend_from_slice(&data);
            }
        }
    }
    match (budget.seen > limit, first) {
        (true, _) => Err(Refused::TooLarge),
        (false, Some(only)) => Ok(only),
        (false, None) => Ok(joined.freeze()),
    }
}

/// Read a body the server will not use to its end, dropping it, up to [`DRAIN_FACTOR`] times
/// `limit`; a longer one is left unread (the connection then closes).
pub async fn drain(mut body: Body, limit: usize) {
    let Some(mut budget) = Budget::new(&body, limit) else { return };
    while let Some(Ok(frame)) = body.frame().await {
        if !budget.take(frame.data_ref().map_or(0, Bytes::len)) {
            return;
        }
    }
}

/// What is read of a body before the rest is left unread: [`DRAIN_FACTOR`] times the limit.
struct Budget {
    cap: usize,
    seen: usize,
}

impl Budget {
    /// `None` for a body whose declared length is already past the cap: none of it is read.
    fn new(body: &Body, limit: usize) -> Option<Self> {
        let cap = limit.saturating_mul(DRAIN_FACTOR);
        (http_body::Body::size_hint(body).lower() <= cap as u64).then_some(Self { cap, seen: 0 })
    }

    /// Count `len` more bytes read; false once the body is past the cap.
    fn take(&mut self, len: usize) -> bool {
        self.seen = self.seen.saturating_add(len);
        self.seen <= self.cap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunked(parts: &[&'static [u8]]) -> Body {
        let frames = parts.iter().map(|p| Ok::<_, std::io::Error>(http_body::Frame::data(Bytes::from_static(p))));
        Body::new(http_body_util::StreamBody::new(futures::stream::iter(frames.collect::<Vec<_>>())))
    }

    #[tokio::test]
    async fn bodies_within_the_limit_are_read_whole() {
        assert_eq!(read(Body::from("{}"), 8).await.ok(), Some(Bytes::from_static(b"{}")));
        let joined = read(chunked(&[b"ab", b"cd", b"ef"]), 8).await.ok();
        assert_eq!(joined, Some(Bytes::from_static(b"abcdef")));
        assert_eq!(read(Body::empty(), 8).await.ok(), Some(Bytes::new()));
    }

    #[tokio::test]
    async fn longer_bodies_are_read_to_their_end_and_refused() {
        assert!(matches!(read(chunked(&[b"abcdef", b"ghi"]), 8).await, Err(Refused::TooLarge)));
        // Beyond what is drained, refused without reading on.
        assert!(matches!(read(Body::from(vec![b'x'; 40]), 8).await, Err(Refused::TooLarge)));
    }
}
