//! A call's stderr: kept in memory up to a byte budget (the newest bytes win, since a crash
//! explains itself last), logged as one record when the call ends, and mined for the cause
//! of a crash so the caller learns it too.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// The most of a crash cause a tool error carries.
const CAUSE_LIMIT: usize = 1024;

/// Where a guest's stderr goes during one call. Clones share the same buffer.
#[derive(Clone)]
pub(crate) struct CallStderr {
    captured: Arc<Mutex<Captured>>,
}

struct Captured {
    bytes: VecDeque<u8>,
    limit: usize,
    /// Bytes pushed out of the buffer by newer ones.
    dropped: usize,
}

impl CallStderr {
    pub fn new(limit: usize) -> Self {
        CallStderr { captured: Arc::new(Mutex::new(Captured { bytes: VecDeque::new(), limit, dropped: 0 })) }
    }

    fn push(&self, data: &[u8]) {
        let mut captured = self.captured.lock().unwrap_or_else(|e| e.into_inner());
        let keep = data.len().min(captured.limit);
        captured.dropped += data.len() - keep;
        captured.bytes.extend(&data[data.len() - keep..]);
        let excess = captured.bytes.len().saturating_sub(captured.limit);
        captured.bytes.drain(..excess);
        captured.dropped += excess;
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        let captured = self.captured.lock().unwrap_or_else(|e| e.into_inner());
        captured.bytes.is_empty() && captured.dropped == 0
    }

    /// Everything kept, as text, with a note of how much came before it; `None` if the call
    /// wrote nothing.
    pub fn text(&self) -> Option<String> {
        let captured = self.captured.lock().unwrap_or_else(|e| e.into_inner());
        if captured.bytes.is_empty() {
            return None;
        }
        let (front, back) = captured.bytes.as_slices();
        let text = String::from_utf8_lossy(&[front, back].concat()).trim_end().to_owned();
        Some(match captured.dropped {
            0 => text,
            dropped => format!("[{dropped} earlier bytes dropped]\n{text}"),
        })
    }
}

/// What a crashed guest said about why, from its stderr: a Rust panic message, the end of a
/// Python traceback, a Go panic's message, or else its last lines. Bounded, on one line,
/// control characters removed.
pub(crate) fn crash_cause(stderr: &str) -> Option<String> {
    const MARKERS: [&str; 2] = ["panicked at", "Traceback (most recent call last)"];
    let (section, found) = match go_panic(stderr) {
        Some(panic) => (panic, true),
        None => {
            let from = MARKERS
                .iter()
                .filter_map(|marker| stderr.rfind(marker))
                .max()
                .map(|at| stderr[..at].rfind('\n').map_or(0, |newline| newline + 1));
            (&stderr[from.unwrap_or(0)..], from.is_some())
        }
    };
    let lines: Vec<&str> = section
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("note: run with `RUST_BACKTRACE"))
        .collect();
    let lines = if found { &lines[..] } else { &lines[lines.len().saturating_sub(5)..] };
    let text: String =
        lines.join(" ").chars().map(|c| if c.is_control() { ' ' } else { c }).collect::<String>().trim().to_owned();
    if text.is_empty() {
        return None;
    }
    if text.len() <= CAUSE_LIMIT {
        return Some(text);
    }
    // The end holds a traceback's exception; keep it.
    Some(format!("…{}", &text[text.ceil_char_boundary(text.len() - CAUSE_LIMIT)..]))
}

/// A Go panic: `panic: MESSAGE` (nested ones and `[recovered]` on the lines after it) or
/// `fatal error: MESSAGE`, then every goroutine's stack, which would crowd the message out.
fn go_panic(stderr: &str) -> Option<&str> {
    let line_start = |marker: &str| {
        if stderr.starts_with(marker) { Some(0) } else { stderr.find(&format!("\n{marker}")).map(|at| at + 1) }
    };
    let start = ["panic: ", "fatal error: "].into_iter().filter_map(line_start).min()?;
    let rest = &stderr[start..];
    let end = ["\ngoroutine ", "\nruntime stack:"].into_iter().filter_map(|marker| rest.find(marker)).min()?;
    Some(&rest[..end])
}

impl IsTerminal for CallStderr {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CallStderr {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CallStderr {
    async fn ready(&mut self) {}
}

impl OutputStream for CallStderr {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 << 10)
    }
}

impl tokio::io::AsyncWrite for CallStderr {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.push(data);
        std::task::Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_bytes() {
        let stderr = CallStderr::new(8);
        stderr.push(b"0123456789");
        stderr.push(b"ab");
        assert_eq!(stderr.text().unwrap(), "[4 earlier bytes dropped]\n456789ab");
        assert!(CallStderr::new(8).text().is_none());
    }

    #[test]
    fn finds_the_cause_of_a_crash() {
        let rust = "starting\nthread '<unnamed>' panicked at src/lib.rs:13:5:\nindex out of bounds\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(crash_cause(rust).unwrap(), "thread '<unnamed>' panicked at src/lib.rs:13:5: index out of bounds");
        let python = "Traceback (most recent call last):\n  File \"app.py\", line 3, in call\n    return d['x']\nKeyError: 'x'\n";
        assert!(crash_cause(python).unwrap().ends_with("KeyError: 'x'"));
        let js = "a\nb\nc\nd\ne\nTypeError: undefined is not a function\u{1b}[0m\n";
        assert_eq!(crash_cause(js).unwrap(), "b c d e TypeError: undefined is not a function [0m");
        let go = "panic: the disk is on fire\n\ngoroutine 1 [running]:\nmain.call(...)\n\t/src/tools.go:109 +0x8d\n";
        assert_eq!(crash_cause(go).unwrap(), "panic: the disk is on fire");
        let nested = "log\npanic: first [recovered]\n\tpanic: second\n\ngoroutine 1 [running]:\nmain.f()\n";
        assert_eq!(crash_cause(nested).unwrap(), "panic: first [recovered] panic: second");
        let fatal = "fatal error: runtime: out of memory\n\nruntime stack:\nruntime.throw(...)\n";
        assert_eq!(crash_cause(fatal).unwrap(), "fatal error: runtime: out of memory");
        // Without a goroutine dump it is not Go's panic: the last lines are kept.
        assert_eq!(crash_cause("a\npanic: maybe\nb").unwrap(), "a panic: maybe b");
        assert!(crash_cause("\n  \n").is_none());
        let long = format!("panicked at x:\n{}KeyError", "é".repeat(2000));
        let cause = crash_cause(&long).unwrap();
        assert!(cause.starts_with('…') && cause.ends_with("KeyError") && cause.len() <= CAUSE_LIMIT + 3);
    }
}
