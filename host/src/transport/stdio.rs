//! MCP over stdin/stdout: one JSON-RPC message per line, each line parsed once. Nothing else
//! may write to stdout.
//!
//! The reader takes lines up to a length limit. Each request runs on its own task and its
//! answer goes to the writer, which alone owns stdout. A line that is not JSON, not UTF-8, too
//! long or not a message is answered with its error (a null id when none could be read) and
//! the connection goes on. Batches (2025-03-26 connections only) run their elements
//! concurrently and are answered with one array; each batch collects its own answers, so two
//! batches in flight may reuse ids. At the end of input, whenever it comes, what is still
//! running finishes and is answered, then the server stops.
//!
//! Requests in flight are capped, and so are the bytes of answers waiting for the writer: a
//! request holds its place until its answer is queued, and past the cap the reader waits
//! before it takes another, so a client that writes requests and never reads their answers
//! stops being read rather than filling memory with answers. A request that waits on the
//! client (roots, elicitation, sampling) gives its place up, for the client's answer is
//! further down the input and the reader has to get to it; it takes one of as many places
//! for requests that have waited instead, for the rest of its life, and past those the
//! question fails at once. A batch holds one place for all its elements.

use std::pin::Pin;
use std::sync::{Arc, Mutex};

use rmcp::ErrorData;
use rmcp::model::{ClientResult, ServerNotification, ServerRequest};
use serde_json::value::RawValue;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::jsonrpc::{self, Batch, Incoming, Message, Refusal};
use super::pending::{Outbox, Pending};
use crate::mcp::{CapsuleServer, ClientLink, Front, LinkError, LinkFuture, Origin, Shared};
use crate::telemetry::Traffic;

/// Limits of the stdio transport.
#[derive(Debug, Clone)]
pub struct StdioOptions {
    /// Longest line read, in bytes; a longer one is answered with an error and skipped.
    pub max_line_bytes: usize,
    /// Most messages in one batch; a longer batch is answered with one error.
    pub max_batch: usize,
    /// Most requests (a batch counts once) in flight before the reader waits.
    pub max_in_flight: usize,
    /// Where the bytes read and written are counted.
    pub traffic: Traffic,
}

impl Default for StdioOptions {
    fn default() -> Self {
        StdioOptions {
            max_line_bytes: 4 << 20,
            max_batch: jsonrpc::MAX_BATCH,
            max_in_flight: super::MAX_IN_FLIGHT,
            traffic: Traffic::default(),
        }
    }
}

/// The answer to a request, once it is ready (`None`: the client cancelled it).
type Answer = Pin<Box<dyn Future<Output = Option<Vec<u8>>> + Send>>;

/// Messages waiting for the writer.
const OUTPUT_QUEUE: usize = 1024;

/// Bytes of messages waiting for the writer (or being written). A message larger than this
/// waits until it is the only one.
const OUTPUT_BYTES: usize = 16 << 20;

tokio::task_local! {
    /// The place in flight of the request this task serves, or of the batch it is an element
    /// of (shared by the batch's elements, each on a task of its own), given up when it waits
    /// on the client (see [`Link::request`]).
    static PLACE: Arc<Mutex<Place>>;
}

/// A request's or a batch's place in flight.
struct Place {
    /// Its place among the requests in flight, until it first waits on the client.
    permit: Option<OwnedSemaphorePermit>,
    /// Its place among the requests that have waited on the client, from then on.
    waited: Option<OwnedSemaphorePermit>,
}

impl Place {
    fn shared(permit: Option<OwnedSemaphorePermit>) -> Arc<Mutex<Place>> {
        Arc::new(Mutex::new(Place { permit, waited: None }))
    }

    /// Move to the requests that have waited on the client, unless `waiting` has no room.
    /// The move is for good: a request that queued for its place again after the answer
    /// could wait forever behind requests that themselves wait for it (on the roots it is
    /// fetching, say), and the reader must go on reading to reach the client's answers.
    fn wait(&mut self, waiting: &Arc<Semaphore>) -> bool {
        if self.waited.is_none() {
            let Ok(permit) = waiting.clone().try_acquire_owned() else { return false };
            self.waited = Some(permit);
            self.permit = None;
        }
        true
    }
}

/// `place`, locked; a panic while it was held leaves nothing half-changed.
fn locked(place: &Mutex<Place>) -> std::sync::MutexGuard<'_, Place> {
    place.lock().unwrap_or_else(|e| e.into_inner())
}

/// Serve one client on stdin/stdout until it closes stdin, or `shutdown` fires (a client
/// stops its server with SIGTERM once closing its input was not enough, a terminal with
/// Ctrl-C): then what runs is dropped unanswered, and the pipes are put back as they were.
pub async fn serve(shared: Arc<Shared>, options: StdioOptions, shutdown: CancellationToken) -> anyhow::Result<()> {
    let _restore = BlockingOnExit::record();
    let (input, output) = standard_streams();
    tokio::select! {
        () = serve_on(shared, options, input, output) => {}
        () = shutdown.cancelled() => {}
    }
    Ok(())
}

type Input = Box<dyn AsyncRead + Unpin + Send>;
type Output = Box<dyn AsyncWrite + Unpin + Send>;

/// stdin and stdout for serving. Pipes, the way MCP clients start servers, are read and
/// written through the reactor: tokio's own stdio hands every read and write to a blocking
/// thread, two thread hand-offs per call that cost more than the sandbox does. Anything else
/// (a terminal, a file, a socket) keeps tokio's stdio, and so does a stdout that is also
/// stderr, whose log writes must keep blocking.
fn standard_streams() -> (Input, Output) {
    use std::os::fd::AsFd;
    use tokio::net::unix::pipe;
    let input: Input = match std::io::stdin().as_fd().try_clone_to_owned().map(pipe::Receiver::from_owned_fd) {
        Ok(Ok(pipe)) => Box::new(pipe),
        _ => Box::new(tokio::io::stdin()),
    };
    let stdout = std::io::stdout();
    let same = |a: &rustix::fs::Stat, b: &rustix::fs::Stat| (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino);
    let shared = match (rustix::fs::fstat(stdout.as_fd()), rustix::fs::fstat(std::io::stderr().as_fd())) {
        (Ok(out), Ok(err)) => same(&out, &err),
        _ => true,
    };
    let output: Output = match (!shared).then(|| stdout.as_fd().try_clone_to_owned().map(pipe::Sender::from_owned_fd)) {
        Some(Ok(Ok(pipe))) => Box::new(pipe),
        _ => Box::new(tokio::io::stdout()),
    };
    (input, output)
}

/// Serving a pipe makes its file description non-blocking, which whoever shares it (a shell
/// that passed its own pipe on) would see after Capsule exits; this puts the flags back.
struct BlockingOnExit {
    flags: [Option<rustix::fs::OFlags>; 2],
}

impl BlockingOnExit {
    fn record() -> Self {
        use std::os::fd::AsFd;
        BlockingOnExit {
            flags: [
                rustix::fs::fcntl_getfl(std::io::stdin().as_fd()).ok(),
                rustix::fs::fcntl_getfl(std::io::stdout().as_fd()).ok(),
            ],
        }
    }
}

impl Drop for BlockingOnExit {
    fn drop(&mut self) {
        use std::os::fd::AsFd;
        let [input, output] = self.flags;
        if let Some(flags) = input {
            let _ = rustix::fs::fcntl_setfl(std::io::stdin().as_fd(), flags);
        }
        if let Some(flags) = output {
            let _ = rustix::fs::fcntl_setfl(std::io::stdout().as_fd(), flags);
        }
    }
}

/// Serve one client on any byte streams (used with stdin/stdout, and by tests).
pub async fn serve_on(
    shared: Arc<Shared>,
    options: StdioOptions,
    input: impl AsyncRead + Unpin,
    output: impl AsyncWrite + Unpin + Send + 'static,
) {
    let (tx, queue) = mpsc::channel(OUTPUT_QUEUE);
    let out = Queue { tx, room: Arc::new(Semaphore::new(OUTPUT_BYTES)) };
    let room = out.room.clone();
    let places = Arc::new(Semaphore::new(options.max_in_flight));
    let waiting = Arc::new(Semaphore::new(options.max_in_flight));
    let link = Arc::new(Link {
        out,
        pending: Pending::default(),
        closed: CancellationToken::new(),
        places,
        waiting,
        max_waiting: options.max_in_flight,
    });
    let done = CancellationToken::new();
    let writer = {
        let (traffic, closed, done) = (options.traffic.clone(), link.closed.clone(), done.clone());
        tokio::spawn(async move {
            write_out(queue, output, traffic, closed, done).await;
            // Nothing more is written: whoever waits for room hears the client is gone.
            room.close();
        })
    };
    let connection = Connection {
        server: CapsuleServer::new(shared),
        link: link.clone(),
        tasks: TaskTracker::new(),
        max_batch: options.max_batch,
    };
    let mut input = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        match read_line(&mut input, &mut line, options.max_line_bytes).await {
            Ok(Line::Complete) => {
                options.traffic.received(line.len() + 1);
                connection.take(&line).await;
            }
            Ok(Line::TooLong(length)) => {
                options.traffic.received(length + 1);
                let refusal = Refusal {
                    id: None,
                    error: ErrorData::invalid_request(
                        format!(
                            "Invalid Request: the line is {length} bytes long; the limit is {} bytes",
                            options.max_line_bytes
                        ),
                        None,
                    ),
                };
                link.write(refusal.to_bytes()).await;
            }
            Ok(Line::End) | Err(_) => break,
        }
    }
    // Nothing more can arrive: requests to the client fail, subscriptions end, and what is
    // running finishes and is answered.
    link.close();
    connection.tasks.close();
    connection.tasks.wait().await;
    done.cancel();
    let _ = writer.await;
}

enum Line {
    /// A line (without its newline) is in the buffer.
    Complete,
    /// A line longer than the limit was skipped; it was this long.
    TooLong(usize),
    /// The input ended.
    End,
}

/// Read one line into `line`, keeping at most `max` bytes of it. The last line may lack its
/// newline.
async fn read_line(
    input: &mut (impl AsyncBufReadExt + Unpin),
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Line> {
    line.clear();
    let mut length = 0usize;
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok(match length {
                0 => Line::End,
                _ if length > max => Line::TooLong(length),
                _ => Line::Complete,
            });
        }
        let (chunk, newline) = match available.iter().position(|&b| b == b'\n') {
            Some(at) => (&available[..at], true),
            None => (available, false),
        };
        length += chunk.len();
        if length <= max {
            line.extend_from_slice(chunk);
        }
        let used = chunk.len() + usize::from(newline);
        input.consume(used);
        if newline {
            return Ok(if length > max { Line::TooLong(length) } else { Line::Complete });
        }
    }
}

/// Copy queued messages to `output`, one per line, until `done` fires and the queue is empty.
/// If the output fails, the client is gone: `closed` fires.
async fn write_out(
    mut queue: mpsc::Receiver<Queued>,
    mut output: impl AsyncWrite + Unpin,
    traffic: Traffic,
    closed: CancellationToken,
    done: CancellationToken,
) {
    let mut buffer = Vec::new();
    // The messages in `buffer`: their room in the queue is given back once they are written.
    let mut taken = Vec::new();
    loop {
        let first = tokio::select! {
            biased;
            message = queue.recv() => message,
            () = done.cancelled() => queue.try_recv().ok(),
        };
        let Some(first) = first else { return };
        buffer.clear();
        buffer.extend_from_slice(&first.message);
        buffer.push(b'\n');
        taken.push(first.room);
        // Whatever else is ready goes out with it, in one write.
        while buffer.len() < 64 << 10
            && let Ok(more) = queue.try_recv()
        {
            buffer.extend_from_slice(&more.message);
            buffer.push(b'\n');
            taken.push(more.room);
        }
        if output.write_all(&buffer).await.is_err() || output.flush().await.is_err() {
            closed.cancel();
            return;
        }
        taken.clear();
        traffic.sent(buffer.len());
    }
}

/// One client on stdio: its server (the connection is its session) and its link.
struct Connection {
    server: CapsuleServer,
    link: Arc<Link>,
    tasks: TaskTracker,
    max_batch: usize,
}

impl Connection {
    /// Take one line.
    async fn take(&self, line: &[u8]) {
        if jsonrpc::without_bom(line).iter().all(u8::is_ascii_whitespace) {
            return;
        }
        match jsonrpc::read(line) {
            Err(refusal) => self.link.write(refusal.to_bytes()).await,
            Ok(Incoming::Single(message)) => {
                // `initialize` is answered before the next line is taken, so what a client
                // sends without waiting for the answer (a batch, say) meets the revision
                // the two agreed on rather than none.
                let initialize = matches!(&message, Message::Request { method, .. } if method == "initialize");
                let Some(answer) = self.message(message).await else { return };
                if initialize {
                    if let Some(answer) = answer.await {
                        self.link.write(answer).await;
                    }
                } else {
                    let place = self.link.place().await;
                    let link = self.link.clone();
                    self.tasks.spawn(PLACE.scope(Place::shared(place), async move {
                        if let Some(answer) = answer.await {
                            link.write(answer).await;
                        }
                    }));
                }
            }
            Ok(Incoming::Batch(items)) => self.batch(items).await,
        }
    }

    /// Take one message. A request comes back as the future of its answer (`None` if the
    /// client cancelled it); notifications and the client's answers are taken at once, in
    /// the order they came.
    async fn message(&self, message: Message<'_>) -> Option<Answer> {
        match message {
            Message::Request { id, method, params } => {
                let server = self.server.clone();
                // The end of input cancels nothing: what runs is answered.
                let in_flight = server.begin(&id, None);
                let front = Front {
                    origin: Origin::stdio(),
                    id,
                    link: self.link.clone(),
                    cancelled: in_flight.token().clone(),
                    declared: None,
                    mirrored: None,
                    before_initialize: !server.is_initialized(),
                };
                let (method, params) = (method.into_owned(), params.map(RawValue::to_owned));
                Some(Box::pin(async move {
                    let answer = server.request(&method, params.as_deref(), &front).await;
                    // A cancelled request is not answered.
                    if in_flight.token().is_cancelled() {
                        return None;
                    }
                    Some(match answer {
                        Ok(result) => jsonrpc::response(&front.id, &result),
                        Err(error) => jsonrpc::error(Some(&front.id), &error),
                    })
                }))
            }
            Message::Notification { method, params } => {
                let link: Arc<dyn ClientLink> = self.link.clone();
                self.server.notification(&method, params, &link).await;
                None
            }
            Message::Response { id, outcome } => {
                self.link.pending.answer(&id, outcome);
                None
            }
        }
    }

    /// A batch: only on 2025-03-26 connections, never holding `initialize`.
    async fn batch(&self, items: Batch<'_>) {
        let size = (items.size(), self.max_batch);
        if let Err(refused) = jsonrpc::batch_allowed(self.server.negotiated().as_ref(), "connection", size) {
            return self.link.write(jsonrpc::error(None, &refused)).await;
        }
        let mut answers: Vec<Answer> = Vec::new();
        for item in items.messages() {
            match jsonrpc::batch_element(item) {
                Err(answer) => answers.push(Box::pin(std::future::ready(Some(answer)))),
                Ok(message) => answers.extend(self.message(message).await),
            }
        }
        if answers.is_empty() {
            return;
        }
        let link = self.link.clone();
        // One place for the whole batch: its elements run a few at a time (`run_batch`), each
        // on a task of its own, and share it.
        let place = Place::shared(link.place().await);
        let answers: Vec<Answer> =
            answers.into_iter().map(|answer| Box::pin(PLACE.scope(place.clone(), answer)) as Answer).collect();
        self.tasks.spawn(async move {
            let answers: Vec<Vec<u8>> = jsonrpc::run_batch(answers).await.into_iter().flatten().collect();
            if !answers.is_empty() {
                link.write(jsonrpc::array(&answers)).await;
            }
            drop(place);
        });
    }
}

/// A message for the writer, holding its room in the queue.
struct Queued {
    message: Vec<u8>,
    room: OwnedSemaphorePermit,
}

/// The writer's queue, bounded in messages and in bytes.
struct Queue {
    tx: mpsc::Sender<Queued>,
    /// One permit a byte (see [`OUTPUT_BYTES`]); closed once the writer has stopped.
    room: Arc<Semaphore>,
}

impl Outbox for Queue {
    async fn post(&self, message: Vec<u8>) -> bool {
        let bytes = message.len().clamp(1, OUTPUT_BYTES) as u32;
        let Ok(room) = self.room.clone().acquire_many_owned(bytes).await else { return false };
        self.tx.send(Queued { message, room }).await.is_ok()
    }

    fn offer(&self, message: Vec<u8>) {
        let bytes = message.len().clamp(1, OUTPUT_BYTES) as u32;
        if let Ok(room) = self.room.clone().try_acquire_many_owned(bytes) {
            let _ = self.tx.try_send(Queued { message, room });
        }
    }
}

/// The way back to the stdio client: the writer's queue, and the requests sent to the client
/// that await its answer.
struct Link {
    out: Queue,
    pending: Pending,
    /// Fires when the input ends or the output fails.
    closed: CancellationToken,
    /// Places for requests in flight (see the module's doc).
    places: Arc<Semaphore>,
    /// Places for requests that have waited on the client (`max_waiting` of them).
    waiting: Arc<Semaphore>,
    max_waiting: usize,
}

impl Link {
    /// Queue a message for the writer (dropped if the client is gone).
    async fn write(&self, message: Vec<u8>) {
        self.out.post(message).await;
    }

    /// A place for one more request in flight, once there is one (`None` only if the
    /// semaphore were closed, which it never is).
    async fn place(&self) -> Option<OwnedSemaphorePermit> {
        self.places.clone().acquire_owned().await.ok()
    }

    /// The client is gone: fail every request waiting on it.
    fn close(&self) {
        self.closed.cancel();
        self.pending.fail_all();
    }
}

impl ClientLink for Link {
    /// A notification still goes out after the input ends: the client may read on while
    /// what runs finishes, and a request's progress belongs before its answer.
    fn notify(&self, notification: ServerNotification) -> LinkFuture<'_, ()> {
        Box::pin(async move {
            let message = jsonrpc::outgoing(None, &notification).map_err(|e| LinkError::Failed(e.to_string()))?;
            if self.out.post(message).await { Ok(()) } else { Err(LinkError::Closed) }
        })
    }

    fn request(&self, request: ServerRequest) -> LinkFuture<'_, ClientResult> {
        Box::pin(async move {
            if self.closed.is_cancelled() {
                return Err(LinkError::Closed);
            }
            self.wait_on_client()?;
            self.pending.request(&request, &self.out, self.closed.cancelled()).await
        })
    }

    /// The request's (or its batch's) place goes when it waits on the client; a request
    /// taken inline has none to give up.
    fn wait_on_client(&self) -> Result<(), LinkError> {
        if let Ok(place) = PLACE.try_with(Arc::clone)
            && !locked(&place).wait(&self.waiting)
        {
            return Err(LinkError::Failed(format!(
                "{} requests of this client already wait on its answers, its limit (--max-in-flight)",
                self.max_waiting
            )));
        }
        Ok(())
    }

    fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    fn closed(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.closed.cancelled())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], max: usize) -> Vec<Result<String, usize>> {
        let mut reader = BufReader::with_capacity(4, input);
        let mut line = Vec::new();
        let mut out = Vec::new();
        loop {
            match read_line(&mut reader, &mut line, max).await.unwrap() {
                Line::Complete => out.push(Ok(String::from_utf8_lossy(&line).into_owned())),
                Line::TooLong(n) => out.push(Err(n)),
                Line::End => return out,
            }
        }
    }

    #[tokio::test]
    async fn reads_lines_within_the_limit() {
        let read = lines(b"ab\n0123456789\n\ncd", 8).await;
        assert_eq!(read, vec![Ok("ab".into()), Err(10), Ok(String::new()), Ok("cd".into())]);
        assert_eq!(lines(b"", 8).await, vec![]);
        assert_eq!(lines(b"0123456789", 8).await, vec![Err(10)]);
    }
}
