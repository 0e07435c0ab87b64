//! POST streams a client can resume (SEP-1699, sessions of 2025-11-25 and later). When a
//! session's POST is answered with SSE, the stream opens with a priming event (an id, empty
//! data, a `retry`), and every event after it has an id naming the stream and its place
//! (`p3.7`: stream 3, event 7). What the request sends is kept in the session, not only
//! written to the connection, so if the connection breaks before the answer the client can
//! `GET` with `Last-Event-ID: p3.7` and receive what came after, through the answer. A
//! broken connection is not a cancelled request, so the work goes on meanwhile.
//!
//! While a client reads the stream, the request waits for it rather than outrun it (as a
//! stream without ids did), so nothing it has not read is dropped. Once nobody reads, each
//! stream keeps its newest [`KEPT`] events, at most [`KEPT_BYTES`] of them (or its newest
//! event alone, however large); a session keeps its newest [`STREAMS`] streams, holding at
//! most [`SESSION_KEPT_BYTES`] besides the newest (finished streams forgotten first), and
//! forgets finished ones [`FORGET_AFTER`] after they finish. (A stream read to its end is
//! not forgotten then: the server cannot tell whether the bytes reached a client that had
//! already gone.)
//!
//! Those bounds are a session's; every session's streams together are held to the server's
//! [`KeptBytes`] (`--max-resume-bytes`), or ten thousand sessions could keep a tool's whole
//! result each for a minute. Past it a stream keeps only what a reader attached to it has
//! yet to read: one that nobody reads keeps nothing, and can no longer be resumed.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::Stream;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::sse::{Frame, id_number};
use super::watch::{self, Look};

/// Events one POST stream keeps for a resume.
const KEPT: usize = 64;
/// Bytes of events one POST stream keeps for a resume (the newest event is always kept).
const KEPT_BYTES: usize = 64 << 10;
/// POST streams a session keeps.
const STREAMS: usize = 8;
/// Bytes of events a session's POST streams keep together, besides the newest stream's
/// (whose answer may be a tool's whole result, up to `--max-output`).
const SESSION_KEPT_BYTES: usize = 1 << 20;
/// How long a finished stream can still be resumed: many times the `retry` a client is asked
/// to wait before it reconnects.
const FORGET_AFTER: Duration = Duration::from_secs(60);

/// Bytes every session's POST streams keep, counted against the server's limit.
pub struct KeptBytes {
    used: AtomicUsize,
    limit: usize,
    /// Whether the operator has been told the limit was reached.
    told: AtomicBool,
}

impl KeptBytes {
    pub fn new(limit: usize) -> Arc<KeptBytes> {
        Arc::new(KeptBytes { used: AtomicUsize::new(0), limit, told: AtomicBool::new(false) })
    }

    /// A stream kept `before` bytes and keeps `after` now.
    fn change(&self, before: usize, after: usize) {
        if after >= before {
            self.used.fetch_add(after - before, Ordering::Relaxed);
        } else {
            self.used.fetch_sub(before - after, Ordering::Relaxed);
        }
    }

    /// Whether streams keep more than the limit.
    fn full(&self) -> bool {
        let full = self.used.load(Ordering::Relaxed) > self.limit;
        if full && !self.told.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                limit = self.limit,
                "resumable streams keep --max-resume-bytes; while they do, a stream nobody reads is not kept (said once)"
            );
        }
        full
    }

    #[cfg(test)]
    fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
}

/// The POST streams of one session.
pub struct PostStreams {
    kept: Mutex<Kept>,
    /// Fires when the client ends the session (or it expires): its streams end with it. A
    /// server shutting down ends none: each carries what stopping its request made, then
    /// finishes (the shutdown's grace bounds the wait).
    ended: CancellationToken,
    /// The server's count of what every session's streams keep.
    budget: Arc<KeptBytes>,
}

#[derive(Default)]
struct Kept {
    next: u64,
    streams: VecDeque<Arc<PostStream>>,
}

impl PostStreams {
    pub fn new(budget: Arc<KeptBytes>) -> PostStreams {
        PostStreams { kept: Mutex::default(), ended: CancellationToken::new(), budget }
    }

    /// The session is over: every stream ends.
    pub fn end(&self) {
        self.ended.cancel();
    }

    /// A new stream, forgetting the oldest if the session keeps too many.
    pub fn open(&self) -> Arc<PostStream> {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.next += 1;
        kept.forget_old();
        if kept.streams.len() >= STREAMS {
            kept.streams.pop_front();
        }
        let stream = Arc::new(PostStream {
            number: kept.next,
            buffer: Mutex::default(),
            wake: Notify::new(),
            ended: self.ended.clone(),
            budget: self.budget.clone(),
        });
        kept.streams.push_back(stream.clone());
        stream
    }

    /// Forget finished streams past [`FORGET_AFTER`], and the oldest past
    /// [`SESSION_KEPT_BYTES`] (the session's idle sweep calls this: a session that opens no
    /// new stream would keep them otherwise); while the server's streams keep too much,
    /// those nobody reads keep nothing.
    pub fn forget_old(&self) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.forget_old();
        if self.budget.full() {
            for stream in &kept.streams {
                stream.relieve(&mut stream.buffer.lock().unwrap_or_else(|e| e.into_inner()));
            }
        }
    }

    /// Resume the stream an event id names, after the place it names, if the id is one of a
    /// POST stream this session still keeps whole after that place: the events that follow
    /// (see [`PostStream::events`]). `Err` for a POST stream id it does not keep (any more),
    /// or a place after which it dropped events (the resume would skip them silently: an
    /// elicitation among them would never be answered); `Ok(None)` for an id that is not one
    /// a POST stream issued (a place it has not reached would resume nothing, and its answer
    /// would never come). The reader attaches under the stream's lock, so the stream cannot
    /// be emptied for the server's budget between the look and the attaching.
    pub fn find(&self, id: &str) -> Result<Option<impl Stream<Item = Frame> + Send + use<>>, ()> {
        let Some((number, place)) = parse(id) else { return Ok(None) };
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let stream = kept.streams.iter().find(|stream| stream.number == number).ok_or(())?.clone();
        drop(kept);
        let mut buffer = stream.buffer.lock().unwrap_or_else(|e| e.into_inner());
        if buffer.shed || place < buffer.dropped {
            return Err(());
        }
        if place > buffer.last {
            return Ok(None);
        }
        let number = buffer.attach();
        drop(buffer);
        Ok(Some(stream.reading(number, place)))
    }
}

impl Kept {
    fn forget_old(&mut self) {
        let now = Instant::now();
        self.streams.retain(|stream| stream.finished().is_none_or(|at| now.duration_since(at) < FORGET_AFTER));
        // Sizes read once (streams grow meanwhile, without this lock), the newest's left out:
        // it is kept whatever its size, since its answer may be all it holds.
        let mut sizes: Vec<(usize, bool)> =
            self.streams.iter().map(|stream| (stream.bytes(), stream.finished().is_some())).collect();
        if sizes.pop().is_none() {
            return;
        }
        let mut bytes: usize = sizes.iter().map(|(size, _)| size).sum();
        while bytes > SESSION_KEPT_BYTES {
            // Finished streams go first, oldest first: an unfinished one's answer is to come.
            let at = sizes.iter().position(|(_, finished)| *finished).unwrap_or(0);
            bytes -= sizes.remove(at).0;
            self.streams.remove(at);
        }
    }
}

/// `p{stream}.{place}`, as [`PostStream`] writes event ids.
fn parse(id: &str) -> Option<(u64, u64)> {
    let (number, place) = id.strip_prefix('p')?.split_once('.')?;
    Some((id_number(number)?, id_number(place)?))
}

/// One POST's stream: the messages its request sent, then its answers.
pub struct PostStream {
    number: u64,
    buffer: Mutex<Buffer>,
    wake: Notify,
    ended: CancellationToken,
    budget: Arc<KeptBytes>,
}

#[derive(Default)]
struct Buffer {
    events: VecDeque<(u64, Arc<str>)>,
    bytes: usize,
    last: u64,
    /// The newest place a reader has taken.
    taken: u64,
    /// Readers attached now.
    readers: usize,
    /// The number of the newest reader: only it reads.
    reader: u64,
    finished: Option<Instant>,
    /// Emptied for the server's limit while nobody read it: it keeps nothing more, and
    /// cannot be resumed.
    shed: bool,
    /// The newest place dropped: a resume from before it would miss events.
    dropped: u64,
}

impl Buffer {
    /// Whether `len` more bytes fit beside what readers have not taken yet.
    fn room_for(&self, len: usize) -> bool {
        let (count, bytes) = self
            .events
            .iter()
            .filter(|(place, _)| *place > self.taken)
            .fold((0, 0), |(count, bytes), (_, message)| (count + 1, bytes + message.len()));
        count == 0 || (count < KEPT && bytes + len <= KEPT_BYTES)
    }

    /// Drop what no reader needs: what the reader attached has taken, or, with none
    /// attached, everything.
    fn trim(&mut self) {
        if self.readers == 0 {
            self.events.clear();
            self.shed = true;
        } else {
            let taken = self.taken;
            let read = self.events.partition_point(|(place, _)| *place <= taken);
            if let Some((place, _)) = self.events.drain(..read).next_back() {
                self.dropped = place;
            }
        }
        self.bytes = self.events.iter().map(|(_, message)| message.len()).sum();
    }

    /// Attach a new reader, which the one attached before gives way to; its number.
    fn attach(&mut self) -> u64 {
        self.readers += 1;
        self.reader += 1;
        self.reader
    }
}

impl PostStream {
    /// The stream's priming event.
    pub fn priming(&self) -> Frame {
        Frame::priming(&self.id(0))
    }

    fn id(&self, place: u64) -> String {
        format!("p{}.{place}", self.number)
    }

    /// Add a message (serialised JSON) to the stream, once a reader (if one is attached) has
    /// taken enough for it to fit. Readers read in order, so what is dropped to stay within
    /// bounds is what they took, unless nobody reads.
    pub async fn push(&self, message: Vec<u8>) {
        // Once the session has ended nobody can read, and the message is kept like any other.
        let _ = watch::until(&self.wake, &self.ended, || {
            let buffer = self.buffer.lock().unwrap_or_else(|e| e.into_inner());
            if buffer.readers == 0 || buffer.room_for(message.len()) { Look::Ready(()) } else { Look::Wait }
        })
        .await;
        let mut buffer = self.buffer.lock().unwrap_or_else(|e| e.into_inner());
        if buffer.shed {
            return;
        }
        let before = buffer.bytes;
        buffer.last += 1;
        let place = buffer.last;
        buffer.bytes += message.len();
        buffer.events.push_back((place, String::from_utf8(message).unwrap_or_default().into()));
        while buffer.events.len() > KEPT || (buffer.bytes > KEPT_BYTES && buffer.events.len() > 1) {
            if let Some((place, dropped)) = buffer.events.pop_front() {
                buffer.bytes -= dropped.len();
                buffer.dropped = place;
            }
        }
        self.budget.change(before, buffer.bytes);
        self.relieve(&mut buffer);
        drop(buffer);
        self.wake.notify_waiters();
    }

    /// Trim the buffer while the server's budget is exceeded, counting what it gives back.
    fn relieve(&self, buffer: &mut Buffer) {
        if self.budget.full() {
            let kept = buffer.bytes;
            buffer.trim();
            self.budget.change(kept, buffer.bytes);
        }
    }

    /// Nothing more will be added: readers end once they have read it all.
    pub fn finish(&self) {
        let mut buffer = self.buffer.lock().unwrap_or_else(|e| e.into_inner());
        buffer.finished = Some(Instant::now());
        self.relieve(&mut buffer);
        drop(buffer);
        self.wake.notify_waiters();
    }

    fn finished(&self) -> Option<Instant> {
        self.buffer.lock().unwrap_or_else(|e| e.into_inner()).finished
    }

    /// The bytes of the events it keeps.
    fn bytes(&self) -> usize {
        self.buffer.lock().unwrap_or_else(|e| e.into_inner()).bytes
    }

    /// The events after `after` (those still kept), then each as it is added, until the
    /// stream is finished and read, the session ends, or a newer reader takes over (a client
    /// that resumes while its first connection is still open): every event goes to one
    /// live stream.
    pub fn events(self: &Arc<Self>, after: u64) -> impl Stream<Item = Frame> + Send + use<> {
        let number = self.buffer.lock().unwrap_or_else(|e| e.into_inner()).attach();
        self.reading(number, after)
    }

    /// The events reader `number`, attached already, reads after `after`.
    fn reading(self: &Arc<Self>, number: u64, after: u64) -> impl Stream<Item = Frame> + Send + use<> {
        // The reader this one takes over from ends.
        self.wake.notify_waiters();
        let reading = Reading(self.clone());
        futures::stream::unfold((reading, after), move |(reading, cursor)| async move {
            // The watcher borrows this one; the state moves on to the next step.
            let stream = reading.0.clone();
            let next = watch::until(&stream.wake, &stream.ended, || {
                let mut buffer = stream.buffer.lock().unwrap_or_else(|e| e.into_inner());
                if buffer.reader != number {
                    return Look::Over;
                }
                if let Some((place, message)) = buffer.events.iter().find(|(place, _)| *place > cursor) {
                    let (place, event) = (*place, Frame::message(Some(&stream.id(*place)), message.as_bytes()));
                    buffer.taken = buffer.taken.max(place);
                    return Look::Ready((place, event));
                }
                if buffer.finished.is_some() || stream.ended.is_cancelled() { Look::Over } else { Look::Wait }
            });
            let (place, event) = next.await?;
            // A push may be waiting for the room this made.
            stream.wake.notify_waiters();
            Some((event, (reading, place)))
        })
    }
}

impl Drop for PostStream {
    fn drop(&mut self) {
        let buffer = self.buffer.get_mut().unwrap_or_else(|e| e.into_inner());
        self.budget.change(buffer.bytes, 0);
    }
}

/// A reader attached to a stream, for as long as it lives.
struct Reading(Arc<PostStream>);

impl Drop for Reading {
    fn drop(&mut self) {
        let mut buffer = self.0.buffer.lock().unwrap_or_else(|e| e.into_inner());
        buffer.readers = buffer.readers.saturating_sub(1);
        self.0.relieve(&mut buffer);
        drop(buffer);
        // A push waiting for this reader need not any more.
        self.0.wake.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn a_stream_resumes_after_the_last_event_seen_and_ends_when_finished() {
        let streams = PostStreams::new(KeptBytes::new(usize::MAX));
        let stream = streams.open();
        stream.push(b"{\"a\":1}".to_vec()).await;
        stream.push(b"{\"a\":2}".to_vec()).await;
        stream.push(b"{\"a\":3}".to_vec()).await;
        stream.finish();
        let rest: Vec<_> = streams.find("p1.1").expect("kept").expect("a POST stream id").collect().await;
        assert_eq!(rest.len(), 2, "events 2 and 3, then the end");
        assert!(matches!(streams.find("7"), Ok(None)), "a GET stream id is not a POST stream's");
        assert!(streams.find("p9.1").is_err(), "a stream this session does not keep");
        assert_eq!(parse("p12.0"), Some((12, 0)));
        assert_eq!(parse("p12"), None);
        assert_eq!(parse("q1.2"), None);
    }

    #[tokio::test]
    async fn a_session_s_streams_keep_a_bounded_total_beside_the_newest() {
        let streams = PostStreams::new(KeptBytes::new(usize::MAX));
        let big = || vec![b'x'; 600 << 10];
        for _ in 0..3 {
            let stream = streams.open();
            stream.push(big()).await;
            stream.finish();
        }
        let kept = |number: u64| streams.find(&format!("p{number}.1")).is_ok_and(|s| s.is_some());
        // Three finished streams of 600 KiB each: besides the newest, the oldest go until the
        // rest fit in 1 MiB.
        streams.forget_old();
        assert!(!kept(1), "kept past the session's bytes");
        assert!(kept(2) && kept(3));
        // An unfinished stream outlasts finished ones, and the newest is kept however large.
        let running = streams.open();
        running.push(big()).await;
        let huge = streams.open();
        huge.push(vec![b'y'; 4 << 20]).await;
        streams.forget_old();
        assert!(kept(5), "the newest stream is forgotten");
        assert!(kept(4), "a stream whose answer is still to come went before finished ones");
        assert!(!kept(2) && !kept(3));
    }

    #[tokio::test]
    async fn a_session_keeps_its_newest_streams_and_their_newest_events() {
        let streams = PostStreams::new(KeptBytes::new(usize::MAX));
        for _ in 0..STREAMS + 2 {
            streams.open().finish();
        }
        assert!(streams.find("p1.0").is_err() && streams.find("p2.0").is_err());
        assert!(streams.find(&format!("p{}.0", STREAMS + 2)).is_ok_and(|s| s.is_some()));
        let stream = streams.open();
        for n in 0..KEPT + 10 {
            stream.push(format!("{n}").into_bytes()).await;
        }
        stream.finish();
        assert_eq!(stream.events(0).collect::<Vec<_>>().await.len(), KEPT);
        let stream = streams.open();
        for _ in 0..4 {
            stream.push(vec![b'x'; KEPT_BYTES / 3]).await;
        }
        stream.push(vec![b'y'; 2 * KEPT_BYTES]).await;
        stream.finish();
        assert_eq!(stream.events(0).collect::<Vec<_>>().await.len(), 1, "only the newest, too big alone");
    }

    #[tokio::test]
    async fn a_request_waits_for_its_reader_and_nothing_unread_is_dropped() {
        let streams = PostStreams::new(KeptBytes::new(usize::MAX));
        let stream = streams.open();
        let mut events = Box::pin(stream.events(0));
        let writer = stream.clone();
        let pushed = tokio::spawn(async move {
            for n in 0..3 * KEPT {
                writer.push(format!("{n}").into_bytes()).await;
            }
            writer.finish();
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!pushed.is_finished(), "the request outran a reader that reads nothing");
        let mut read = 0;
        while events.next().await.is_some() {
            read += 1;
        }
        assert_eq!(read, 3 * KEPT, "every event reached the reader");
        pushed.await.expect("the pushes");
        // With nobody reading, pushes never wait.
        let alone = streams.open();
        for n in 0..3 * KEPT {
            alone.push(format!("{n}").into_bytes()).await;
        }
    }

    #[tokio::test]
    async fn a_reader_waits_for_more_and_the_session_ending_ends_it() {
        let streams = PostStreams::new(KeptBytes::new(usize::MAX));
        let stream = streams.open();
        let mut events = Box::pin(stream.events(0));
        stream.push(b"1".to_vec()).await;
        assert!(events.next().await.is_some());
        let waiting = tokio::spawn(async move { events.next().await.is_none() });
        tokio::task::yield_now().await;
        streams.end();
        assert!(waiting.await.expect("the reader"), "the stream ends with its session");
    }

    #[tokio::test]
    async fn past_the_server_s_budget_a_stream_keeps_only_what_its_reader_has_yet_to_read() {
        let budget = KeptBytes::new(1 << 10);
        let (one, two) = (PostStreams::new(budget.clone()), PostStreams::new(budget.clone()));
        // Within the budget, a finished stream nobody read is kept for a resume.
        let within = one.open();
        within.push(vec![b'a'; 600]).await;
        within.finish();
        assert_eq!(budget.used(), 600);
        assert!(one.find("p1.0").is_ok_and(|s| s.is_some()));
        // Another session's stream takes the server past its budget: nobody reads it, so it
        // keeps nothing, says so to a resume, and keeps nothing pushed later.
        let past = two.open();
        past.push(vec![b'b'; 600]).await;
        assert_eq!(budget.used(), 600, "a stream nobody reads was kept past the budget");
        assert!(two.find("p1.0").is_err(), "a stream that keeps nothing was offered for a resume");
        past.push(vec![b'c'; 10]).await;
        past.finish();
        assert_eq!(budget.used(), 600);
        // A stream being read gets every event, however far past the budget, and keeps what
        // it has read no longer.
        let read = two.open();
        let mut events = Box::pin(read.events(0));
        for n in 0..4 {
            read.push(vec![b'0' + n; 500]).await;
        }
        read.finish();
        let mut got = 0;
        while events.next().await.is_some() {
            got += 1;
        }
        assert_eq!(got, 4, "a reader lost events to the budget");
        drop(events);
        assert_eq!(budget.used(), 600, "read events were kept past the budget");
        // Forgotten streams give their bytes back.
        drop((within, one));
        assert_eq!(budget.used(), 0);
        let again = two.open();
        again.push(vec![b'd'; 600]).await;
        again.finish();
        assert!(two.find("p3.0").is_ok_and(|s| s.is_some()), "room made was not used");
    }

    #[tokio::test]
    async fn a_resume_that_would_skip_dropped_events_is_refused() {
        // Past a stream's own bounds, with nobody reading, the oldest go.
        let streams = PostStreams::new(KeptBytes::new(usize::MAX));
        let stream = streams.open();
        for n in 0..=KEPT {
            stream.push(format!("{n}").into_bytes()).await;
        }
        stream.finish();
        assert!(streams.find("p1.0").is_err(), "event 1 is gone: a resume from before it would skip it");
        assert!(streams.find("p1.1").is_ok_and(|s| s.is_some()));
        // Past the server's budget what a reader took goes: a resume from before it is
        // refused, one from where the reader got to is not.
        let streams = PostStreams::new(KeptBytes::new(0));
        let stream = streams.open();
        let mut events = Box::pin(stream.events(0));
        stream.push(b"1".to_vec()).await;
        assert!(events.next().await.is_some());
        stream.push(b"2".to_vec()).await;
        assert!(streams.find("p1.0").is_err(), "a resume would skip the event the reader took");
        let mut resumed = Box::pin(streams.find("p1.1").expect("kept").expect("a POST stream id"));
        assert!(resumed.next().await.is_some_and(|event| event.text().contains("data: 2")));
    }
}
