//! The export queue and the thread that sends it: spans are encoded into the queue as they
//! end, and one thread of its own posts them to the collector in batches (OTLP/HTTP,
//! protobuf), when a batch is full or every schedule delay, and once more at shutdown. A
//! batch the collector could not take for a passing reason (unreachable, 429, 502, 503, 504)
//! is tried again a few times before it is dropped.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use tokio::sync::Notify;

use super::otlp::{self, Attribute, SpanRecord};

/// The batching settings (`OTEL_BSP_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batching {
    /// Spans waiting at most; more are dropped (and the drop is logged).
    pub max_queue: usize,
    /// Spans in one export request at most.
    pub max_batch: usize,
    /// How long a span may wait when no batch fills up.
    pub delay: Duration,
}

/// Where and how batches are sent.
pub struct Destination {
    pub url: reqwest::Url,
    /// `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS` (values never logged: they often hold keys).
    pub headers: HeaderMap,
    pub client: reqwest::Client,
    /// The resource every span belongs to.
    pub resource: Vec<Attribute>,
}

/// Spans encoded and waiting for the export thread.
pub struct Queue {
    pending: Mutex<Pending>,
    ready: Notify,
    stopping: AtomicBool,
    batching: Batching,
}

/// Bytes the queue holds at most, whatever the spans' count: more spans are dropped.
const MAX_QUEUED_BYTES: usize = 32 << 20;

/// Buffer capacity kept between spans and between exports: a burst of large spans is not
/// held for good.
const KEPT_ENCODED: usize = 64 << 10;
const KEPT_QUEUE: usize = 4 << 20;

thread_local! {
    /// A span encoded on this thread, before it joins the queue.
    static ENCODED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

#[derive(Default)]
struct Pending {
    /// Encoded `ScopeSpans.spans` entries, one after the other.
    bytes: Vec<u8>,
    /// Where each span's bytes end.
    ends: Vec<usize>,
    /// Spans dropped because the queue was full, since the exporter last looked.
    dropped: u64,
}

impl Queue {
    pub fn new(batching: Batching) -> Queue {
        Queue { pending: Mutex::default(), ready: Notify::new(), stopping: AtomicBool::new(false), batching }
    }

    /// Encode `span` into the queue (or count it dropped when the queue is full); a batch
    /// that fills wakes the exporter. The span is encoded before the lock is taken, so that
    /// a worker preempted while encoding keeps no other worker waiting.
    pub fn push(&self, span: &SpanRecord) {
        let queue = |encoded: &mut Vec<u8>| {
            encoded.clear();
            otlp::encode_span(encoded, span);
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            if pending.ends.len() >= self.batching.max_queue || pending.bytes.len() + encoded.len() > MAX_QUEUED_BYTES {
                pending.dropped += 1;
            } else {
                pending.bytes.extend_from_slice(encoded);
                let end = pending.bytes.len();
                pending.ends.push(end);
                if pending.ends.len() == self.batching.max_batch {
                    self.ready.notify_one();
                }
            }
            drop(pending);
            encoded.shrink_to(KEPT_ENCODED);
        };
        // A span ending while this thread's locals are destroyed encodes into a buffer of its
        // own.
        if ENCODED.try_with(|encoded| queue(&mut encoded.borrow_mut())).is_err() {
            queue(&mut Vec::new());
        }
    }

    /// What is to be sent now, leaving `spare` (emptied) in its place: the exporter hands
    /// back the buffers it sent, so that they are not grown again from nothing on the
    /// workers. Every span queued, or with `whole` (a batch filled) only the whole batches:
    /// the few spans that came in since wait for the next batch to fill or for the schedule
    /// delay, rather than each wake-up posting a full batch and a small one after it.
    fn take(&self, mut spare: Pending, whole: bool) -> Pending {
        spare.bytes.clear();
        spare.bytes.shrink_to(KEPT_QUEUE);
        spare.ends.clear();
        spare.dropped = 0;
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let mut taken = std::mem::replace(&mut *pending, spare);
        let sent = if whole { taken.ends.len() - taken.ends.len() % self.batching.max_batch } else { taken.ends.len() };
        if sent < taken.ends.len() {
            let from = sent.checked_sub(1).map_or(0, |last| taken.ends[last]);
            pending.bytes.extend_from_slice(&taken.bytes[from..]);
            pending.ends.extend(taken.ends[sent..].iter().map(|end| end - from));
            taken.bytes.truncate(from);
            taken.ends.truncate(sent);
        }
        taken
    }

    /// Ask the exporter to send what is queued and end.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        self.ready.notify_one();
    }
}

/// Run the exporter on this thread until the queue is stopped and emptied.
pub fn run(queue: Arc<Queue>, destination: Destination) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!("cannot start the span exporter, no span will be exported: {e}");
            return;
        }
    };
    let mut health = Health::default();
    let mut spare = Pending::default();
    runtime.block_on(async {
        loop {
            let filled = tokio::time::timeout(queue.batching.delay, queue.ready.notified()).await.is_ok();
            let stopping = queue.stopping.load(Ordering::Acquire);
            let pending = queue.take(spare, filled && !stopping);
            health.dropped(pending.dropped, queue.batching.max_queue);
            let mut start = 0;
            for batch in pending.ends.chunks(queue.batching.max_batch) {
                let end = *batch.last().expect("chunks are not empty");
                health.sent(deliver(&destination, &pending.bytes[start..end], &queue.stopping).await);
                start = end;
            }
            spare = pending;
            if stopping {
                return;
            }
        }
    });
}

/// How often one batch is tried when the collector cannot be reached or answers 429, 502, 503
/// or 504 (what OTLP/HTTP calls retryable): waiting 250 ms, then 500 ms, then 1 s, or as long
/// as its `Retry-After` asks, up to 5 s. Not while shutting down.
const TRIES: u32 = 4;
const FIRST_WAIT: Duration = Duration::from_millis(250);
const LONGEST_WAIT: Duration = Duration::from_secs(5);
/// How often a wait between tries looks whether the server is stopping.
const STOP_CHECK: Duration = Duration::from_millis(50);

/// Send one batch, retrying what may pass later; the whole cause when it fails for good.
async fn deliver(destination: &Destination, spans: &[u8], stopping: &AtomicBool) -> Result<(), String> {
    // Shared, not copied, by each try.
    let body =
        bytes::Bytes::from(otlp::export_request(&destination.resource, ("capsule", env!("CARGO_PKG_VERSION")), spans));
    let mut wait = FIRST_WAIT;
    let mut tries = 1;
    loop {
        match send(destination, body.clone()).await {
            Ok(()) => return Ok(()),
            Err(failure) if failure.retryable && tries < TRIES && !stopping.load(Ordering::Acquire) => {
                // Cut short at shutdown: the batch is tried once more, at once.
                let until = tokio::time::Instant::now() + failure.retry_after.unwrap_or(wait).min(LONGEST_WAIT);
                while !stopping.load(Ordering::Acquire) && tokio::time::Instant::now() < until {
                    tokio::time::sleep_until(until.min(tokio::time::Instant::now() + STOP_CHECK)).await;
                }
                wait *= 2;
                tries += 1;
            }
            Err(failure) if tries > 1 => return Err(format!("{} (tried {tries} times)", failure.why)),
            Err(failure) => return Err(failure.why),
        }
    }
}

/// Why a post failed, and whether trying again may help.
struct Failure {
    why: String,
    retryable: bool,
    retry_after: Option<Duration>,
}

/// Post one export request.
async fn send(destination: &Destination, body: bytes::Bytes) -> Result<(), Failure> {
    // The body's type is the exporter's to say, whatever the configured headers hold.
    let mut headers = destination.headers.clone();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/x-protobuf"));
    let sent = destination.client.post(destination.url.clone()).headers(headers).body(body).send().await;
    match sent {
        Err(e) => Err(Failure { why: causes(&e), retryable: e.is_connect() || e.is_timeout(), retry_after: None }),
        Ok(response) if !response.status().is_success() => {
            let status = response.status();
            let retry_after = response.headers().get(RETRY_AFTER).and_then(|v| v.to_str().ok()?.trim().parse().ok());
            Err(Failure {
                why: format!("the collector answered {status}"),
                retryable: matches!(status.as_u16(), 429 | 502 | 503 | 504),
                retry_after: retry_after.map(Duration::from_secs),
            })
        }
        // The body (an `ExportTraceServiceResponse`, a few bytes) is read so that the
        // connection is reused; past [`MAX_RESPONSE_BYTES`] the rest is left unread and the
        // connection closed: a collector's answer must not grow the server without bound.
        Ok(mut response) => {
            let mut read = 0;
            loop {
                match response.chunk().await {
                    Ok(Some(chunk)) if read + chunk.len() <= MAX_RESPONSE_BYTES => read += chunk.len(),
                    Ok(_) => return Ok(()),
                    Err(e) => return Err(Failure { why: causes(&e), retryable: false, retry_after: None }),
                }
            }
        }
    }
}

/// The most of a collector's answer to an export that is read.
const MAX_RESPONSE_BYTES: usize = 64 << 10;

/// An error with its causes, each after a colon (reqwest's own message says little: "error
/// sending request", "error decoding response body").
fn causes(e: &reqwest::Error) -> String {
    let mut why = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        why = format!("{why}: {cause}");
        source = cause.source();
    }
    why
}

/// What the log says about exporting: once when exports start failing (or spans start being
/// dropped) and why, once when they work again; not once a batch.
#[derive(Default)]
struct Health {
    failing: bool,
    dropping: bool,
}

impl Health {
    fn sent(&mut self, result: Result<(), String>) {
        match result {
            Err(why) if !self.failing => {
                self.failing = true;
                tracing::warn!(
                    "exporting spans over OTLP failed (that batch is dropped; the next ones are still sent): {why}"
                );
            }
            Ok(()) if self.failing => {
                self.failing = false;
                tracing::info!("exporting spans over OTLP works again");
            }
            _ => {}
        }
    }

    fn dropped(&mut self, dropped: u64, max_queue: usize) {
        if dropped > 0 && !self.dropping {
            tracing::warn!(
                "{dropped} spans were dropped: more than {max_queue} (OTEL_BSP_MAX_QUEUE_SIZE), or \
                 more than {} MiB, were waiting for export; later drops are logged at debug level",
                MAX_QUEUED_BYTES >> 20
            );
        } else if dropped > 0 {
            tracing::debug!("{dropped} more spans were dropped: the export queue was full");
        }
        self.dropping |= dropped > 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(n: u8) -> SpanRecord {
        SpanRecord { span_id: [n; 8], start: u64::from(n), ..SpanRecord::default() }
    }

    fn encoded(n: u8) -> Vec<u8> {
        let mut out = Vec::new();
        otlp::encode_span(&mut out, &span(n));
        out
    }

    #[test]
    fn a_filled_batch_sends_whole_batches_and_keeps_the_rest_for_later() {
        let queue = Queue::new(Batching { max_queue: 100, max_batch: 3, delay: Duration::from_secs(5) });
        for n in 1..=7 {
            queue.push(&span(n));
        }
        let first = queue.take(Pending::default(), true);
        assert_eq!(first.ends.len(), 6);
        assert_eq!(first.bytes, (1..=6).flat_map(encoded).collect::<Vec<_>>());
        queue.push(&span(8));
        // The schedule delay (or shutdown) sends what is left, batch full or not.
        let rest = queue.take(first, false);
        assert_eq!(rest.ends, [encoded(7).len(), encoded(7).len() + encoded(8).len()]);
        assert_eq!(rest.bytes, [encoded(7), encoded(8)].concat());
        // A wake-up left over from a batch already sent finds no whole batch: nothing goes.
        queue.push(&span(9));
        assert!(queue.take(rest, true).ends.is_empty());
        assert_eq!(queue.take(Pending::default(), false).bytes, encoded(9));
    }
}
