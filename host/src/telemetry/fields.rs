//! How text logs write fields: as `tracing-subscriber`'s `DefaultFields` does, byte for byte,
//! but without the `otel.*` fields and with a short path for plain strings.
//!
//! The fmt layer formats a span's fields when the span starts, whether or not a record is
//! ever written inside it, and every request has a span: `DefaultFields` sends each string
//! through `Debug`'s escaping one character at a time, which was most of what the request
//! span cost. A string with nothing to escape is written as it is, in quotes, which is what
//! `Debug` would have written. The `otel.*` fields tell the trace exporter how to name a span
//! and what kind it is; a text log already shows the span's name and the same facts.

use std::cell::RefCell;
use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{RecordFields, VisitOutput};
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::{DefaultVisitor, Writer};

/// The field formatter of text logs.
#[derive(Debug, Default)]
pub struct TextFields;

thread_local! {
    /// Where a span's fields are formatted before they are written out at once.
    static SCRATCH: RefCell<String> = RefCell::new(String::with_capacity(256));
}

impl<'writer> FormatFields<'writer> for TextFields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'writer>, fields: R) -> fmt::Result {
        let format = |writer: Writer<'_>| {
            let mut visitor = Visitor { writer, empty: true, result: Ok(()) };
            fields.record(&mut visitor);
            visitor.result
        };
        // A span's fields go into a string of their own that starts empty: written piece by
        // piece, it would grow several times for every request. Formatted here first, they
        // are one write. (A writer with colours keeps them, so it is written directly; a
        // field whose formatting writes a record of its own finds the scratch taken.)
        if writer.has_ansi_escapes() {
            return format(writer);
        }
        let scratched = SCRATCH.try_with(|scratch| match scratch.try_borrow_mut() {
            Ok(mut scratch) => {
                scratch.clear();
                format(Writer::new(&mut *scratch))?;
                writer.write_str(&scratch)
            }
            Err(_) => format(writer.by_ref()),
        });
        // Gone while the thread's locals are destroyed.
        scratched.unwrap_or_else(|_| format(writer))
    }
}

struct Visitor<'writer> {
    writer: Writer<'writer>,
    /// Nothing written yet, so the next field needs no separating space.
    empty: bool,
    result: fmt::Result,
}

impl Visitor<'_> {
    /// Whether the field stays out of text logs: the exporter's `otel.*` fields, and a `log`
    /// record's metadata, which `DefaultFields` skips too (the line already shows it).
    fn skipped(field: &Field) -> bool {
        field.name().starts_with("otel.") || field.name().starts_with("log.")
    }

    /// Write one field as `DefaultFields` does.
    fn by_default(&mut self, record: impl FnOnce(&mut DefaultVisitor<'_>)) {
        let mut inner = DefaultVisitor::new(self.writer.by_ref(), self.empty);
        record(&mut inner);
        self.result = inner.finish();
        self.empty = false;
    }
}

/// Whether `Debug` writes `value` as itself between quotes.
fn plain(value: &str) -> bool {
    value.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
}

impl Visit for Visitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if self.result.is_err() || Self::skipped(field) {
            return;
        }
        let name = field.name();
        // The message, raw identifiers and colours are left to `DefaultFields`.
        if name == "message" || name.starts_with("r#") || self.writer.has_ansi_escapes() || !plain(value) {
            return self.by_default(|inner| inner.record_str(field, value));
        }
        let writer = &mut self.writer;
        let pad = if self.empty { "" } else { " " };
        self.result = (|| {
            writer.write_str(pad)?;
            writer.write_str(name)?;
            writer.write_str("=\"")?;
            writer.write_str(value)?;
            writer.write_char('"')
        })();
        self.empty = false;
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        if self.result.is_ok() && !Self::skipped(field) {
            self.by_default(|inner| inner.record_error(field, value));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_ok() && !Self::skipped(field) {
            self.by_default(|inner| inner.record_debug(field, value));
        }
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::fmt::format::DefaultFields;

    use super::*;

    /// What `fields` formats the fields of a record made by `emit` as.
    fn written(fields: impl for<'w> FormatFields<'w> + Send + Sync + 'static, emit: impl FnOnce()) -> String {
        let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || Sink(sink.clone()))
            .with_ansi(false)
            .without_time()
            .with_target(false)
            .with_level(false)
            .fmt_fields(fields)
            .finish();
        tracing::subscriber::with_default(subscriber, emit);
        String::from_utf8(out.lock().unwrap().clone()).unwrap()
    }

    struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn records() {
        let span = tracing::error_span!(
            "request",
            mcp.method.name = "tools/call",
            odd = "a \"quoted\"\nline\u{1b}[31m",
            count = 3,
            later = tracing::field::Empty,
        );
        span.record("later", "set after");
        span.in_scope(|| {
            let error = std::io::Error::other("it broke");
            tracing::warn!(plugin = "calc", error = &error as &dyn std::error::Error, "a \"message\" {}", 1);
            tracing::info!(r#type = "raw", empty = "", "second");
        });
    }

    #[test]
    fn text_fields_are_written_as_the_default_formatter_writes_them() {
        let text = written(TextFields, records);
        assert!(text.contains(r#"request{mcp.method.name="tools/call" odd="#), "{text}");
        assert!(text.contains(r#"later="set after"}"#), "{text}");
        assert_eq!(text, written(DefaultFields::new(), records));
    }

    #[test]
    fn the_exporters_fields_stay_out_of_text_logs() {
        let with_otel = || {
            tracing::error_span!("request", otel.name = "tools/call add", otel.kind = "server", tool = "add")
                .in_scope(|| tracing::info!(otel.status_code = "error", "done"));
        };
        assert_eq!(written(TextFields, with_otel), "request{tool=\"add\"}: done\n");
    }
}
