//! The log's way to stderr: a thread that logs never waits on it. A record is appended to a
//! bounded buffer that one thread of its own writes out; a stderr nobody reads (a client
//! that pipes a stdio server's stderr and never drains it, a stalled shipper) fills the pipe
//! and then the buffer, and later records are dropped and counted, rather than every worker
//! blocking in a write and the server answering no one. Once the writes go through again,
//! the count is logged.

use std::io::Write as _;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::subscriber::LogOut;

/// Bytes of records waiting for stderr at most; a record that would not fit is dropped.
const MAX_PENDING: usize = 4 << 20;
/// Buffer capacity kept between writes, so that one burst is not held for good.
const KEPT: usize = 64 << 10;
/// Bytes written at a time.
const PIECE: usize = 64 << 10;

/// Records waiting for the writer, shared by every thread that logs.
struct Pipe {
    state: Mutex<Waiting>,
    /// The writer waits here for records; [`flush`] waits here for the writer.
    changed: Condvar,
}

#[derive(Default)]
struct Waiting {
    bytes: Vec<u8>,
    /// Records dropped since the writer last looked.
    dropped: u64,
    /// Whether the writer holds records it has not written yet.
    writing: bool,
    /// Pieces written: [`flush`] waits for as long as they go on.
    written: u64,
}

thread_local! {
    /// Whether this thread is the writer: its own record (the count of those dropped) is never
    /// dropped, or a count could be lost with it.
    static WRITER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The process's one pipe to stderr (there is one stderr); `None` when the system refused
/// its thread.
static PIPE: OnceLock<Option<Arc<Pipe>>> = OnceLock::new();

/// Log lines to stderr (stdout belongs to the stdio transport), through the writer thread,
/// which starts with the first call; written where they are logged if it cannot start.
pub fn stderr() -> LogOut {
    let write = || Pipe::start(|bytes| std::io::stderr().write_all(bytes));
    match PIPE.get_or_init(|| write().ok()).clone() {
        Some(pipe) => Arc::new(move |line| pipe.push(line)),
        None => Arc::new(|line| drop(std::io::stderr().write_all(line))),
    }
}

/// Wait for the records logged so far to be written, for as long as a write ends within
/// `patience` of the last: at exit, so that the last records are not lost with the process
/// when stderr is read however slowly, without hanging on a stderr nobody reads.
pub fn flush(patience: Duration) {
    if let Some(Some(pipe)) = PIPE.get() {
        pipe.flush(patience);
    }
}

impl Pipe {
    /// The pipe, and its writer thread writing with `write`.
    fn start(write: impl Fn(&[u8]) -> std::io::Result<()> + Send + 'static) -> std::io::Result<Arc<Pipe>> {
        let pipe = Arc::new(Pipe { state: Mutex::default(), changed: Condvar::new() });
        let writer = pipe.clone();
        std::thread::Builder::new().name("capsule-log".into()).spawn(move || writer.run(&write))?;
        Ok(pipe)
    }

    fn push(&self, line: &[u8]) {
        let mut waiting = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let idle = waiting.bytes.is_empty() && waiting.dropped == 0 && !waiting.writing;
        if waiting.bytes.len() + line.len() > MAX_PENDING && !WRITER.with(std::cell::Cell::get) {
            // Counted, and told by the writer (woken if idle: a record larger than the whole
            // bound finds the buffer empty).
            waiting.dropped += 1;
        } else {
            waiting.bytes.extend_from_slice(line);
        }
        drop(waiting);
        if idle {
            self.changed.notify_all();
        }
    }

    /// Write what is queued, for as long as the process lives.
    fn run(&self, write: &dyn Fn(&[u8]) -> std::io::Result<()>) {
        WRITER.with(|writer| writer.set(true));
        let mut spare = Vec::new();
        loop {
            let (bytes, dropped) = {
                let mut waiting = self.state.lock().unwrap_or_else(|e| e.into_inner());
                while waiting.bytes.is_empty() && waiting.dropped == 0 {
                    waiting = self.changed.wait(waiting).unwrap_or_else(|e| e.into_inner());
                }
                waiting.writing = true;
                (std::mem::replace(&mut waiting.bytes, spare), std::mem::take(&mut waiting.dropped))
            };
            // In pieces, each a sign of progress for `flush`. A stderr that is closed or failing
            // loses the records, as a direct write would.
            for piece in bytes.chunks(PIECE) {
                if write(piece).is_err() {
                    break;
                }
                self.state.lock().unwrap_or_else(|e| e.into_inner()).written += 1;
                self.changed.notify_all();
            }
            if dropped > 0 {
                // Through the log, so that it is a record of the log's own format (this
                // thread's records always find room).
                tracing::warn!(
                    "{dropped} log records were dropped: stderr was not being read, and more than {} MiB \
                     of records were waiting for it",
                    MAX_PENDING >> 20
                );
            }
            spare = bytes;
            spare.clear();
            spare.shrink_to(KEPT);
            self.state.lock().unwrap_or_else(|e| e.into_inner()).writing = false;
            self.changed.notify_all();
        }
    }

    fn flush(&self, patience: Duration) {
        let mut deadline = Instant::now() + patience;
        let mut waiting = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut written = waiting.written;
        while !waiting.bytes.is_empty() || waiting.dropped > 0 || waiting.writing {
            if waiting.written != written {
                // Stderr is being read: the patience starts again.
                (written, deadline) = (waiting.written, Instant::now() + patience);
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else { return };
            waiting = self.changed.wait_timeout(waiting, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    #[test]
    fn records_past_the_bound_are_dropped_without_blocking_and_counted_once_writes_resume() {
        let (unblock, blocked) = mpsc::channel::<()>();
        let blocked = Mutex::new(blocked);
        let written = Arc::new(Mutex::new(Vec::new()));
        let sink = written.clone();
        // A stderr that takes its first write and then blocks until told to go on.
        let pipe = Pipe::start(move |bytes| {
            let first = sink.lock().unwrap().is_empty();
            sink.lock().unwrap().extend_from_slice(bytes);
            if first {
                blocked.lock().unwrap().recv().unwrap();
            }
            Ok(())
        })
        .unwrap();
        pipe.push(b"first\n");
        while !pipe.state.lock().unwrap().writing {
            std::thread::yield_now();
        }
        let line = vec![b'x'; 1 << 20];
        let started = Instant::now();
        for _ in 0..6 {
            pipe.push(&line);
        }
        assert!(started.elapsed() < Duration::from_secs(1), "pushing never waits on the writer");
        assert_eq!(pipe.state.lock().unwrap().dropped, 2, "4 MiB wait; the rest is dropped");
        // Not written yet: the writer is blocked, and flush gives up after its patience.
        let flushing = Instant::now();
        pipe.flush(Duration::from_millis(100));
        assert!(flushing.elapsed() >= Duration::from_millis(100));
        unblock.send(()).unwrap();
        pipe.flush(Duration::from_secs(10));
        let written = written.lock().unwrap();
        assert_eq!(written.len(), "first\n".len() + 4 * line.len());
    }

    #[test]
    fn flushing_waits_for_a_slow_reader_for_as_long_as_it_reads() {
        let written = Arc::new(Mutex::new(0));
        let sink = written.clone();
        // 64 KiB every 40 ms: 1 MiB takes 640 ms, well past the patience below.
        let pipe = Pipe::start(move |bytes| {
            std::thread::sleep(Duration::from_millis(40));
            *sink.lock().unwrap() += bytes.len();
            Ok(())
        })
        .unwrap();
        pipe.push(&vec![b'x'; 1 << 20]);
        pipe.flush(Duration::from_millis(200));
        assert_eq!(*written.lock().unwrap(), 1 << 20);
    }
}
