//! Response bodies that count the bytes they send, as they go: a JSON answer at once, an SSE
//! stream event by event for as long as it lasts.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::response::Response;
use http_body::{Frame, SizeHint};

use crate::telemetry::Traffic;

/// `response`, its body's bytes counted in `traffic` as they are sent.
pub fn response(response: Response, traffic: Traffic) -> Response {
    response.map(|inner| Body::new(Counted { inner, traffic }))
}

struct Counted {
    inner: Body,
    traffic: Traffic,
}

impl http_body::Body for Counted {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            self.traffic.sent(data.len());
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    // Kept, so that a JSON answer still goes out with its Content-Length.
    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
