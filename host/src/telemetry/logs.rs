//! Log records as the [`Telemetry`](super::subscriber::Telemetry) subscriber writes them, in
//! the two formats `--log-format` names, laid out as `tracing-subscriber`'s formatters lay
//! them out (a test holds each to theirs):
//!
//! - text: `TIMESTAMP LEVEL span{fields}:span{fields}: target: message fields`, the fields
//!   written by [`TextFields`]; on a terminal the timestamp, level, span names and target
//!   are coloured (the fields are not);
//! - JSON: one object a record, the event's fields at the top level beside `timestamp`,
//!   `level` and `target`, the innermost span under `span` and every span from the root
//!   under `spans`, each with its fields and `name`.
//!
//! A span's fields are formatted once, when it starts (and again when one is recorded), and
//! copied into each record written inside it.

use std::fmt::{self, Write as _};
use std::time::SystemTime;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;

use super::TextFields;

/// How records are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogStyle {
    /// Lines of text, coloured when `ansi`.
    Text { ansi: bool },
    /// One JSON object a line.
    Json,
}

impl LogStyle {
    /// A span's fields as records inside it show them: `key="value" n=1` for text, the
    /// members of a JSON object (without its braces) for JSON.
    pub(super) fn span_fields(self, text: &mut String, fields: impl RecordFields) {
        match self {
            LogStyle::Text { .. } => {
                let _ = TextFields.format_fields(Writer::new(text), fields);
            }
            LogStyle::Json => fields.record(&mut JsonMembers { out: text }),
        }
    }

    /// Add fields recorded on a span after it started to `text`, what
    /// [`span_fields`](Self::span_fields) wrote; a field recorded again keeps its last value.
    pub(super) fn add_fields(self, text: &mut String, fields: impl RecordFields) {
        match self {
            LogStyle::Text { .. } => {
                let mut more = String::new();
                let _ = TextFields.format_fields(Writer::new(&mut more), fields);
                if !text.is_empty() && !more.is_empty() {
                    text.push(' ');
                }
                text.push_str(&more);
            }
            LogStyle::Json => {
                let mut object = String::with_capacity(text.len() + 2);
                object.push('{');
                object.push_str(text);
                object.push('}');
                let mut map: Map<String, Value> = serde_json::from_str(&object).unwrap_or_default();
                let mut more = String::from("{");
                fields.record(&mut JsonMembers { out: &mut more });
                more.push('}');
                if let Ok(Value::Object(added)) = serde_json::from_str(&more) {
                    map.extend(added);
                }
                let whole = serde_json::to_string(&map).unwrap_or_default();
                *text = whole[1..whole.len() - 1].to_owned();
            }
        }
    }

    /// Write the record `event` (described by `metadata`, a `log` record's own when it came
    /// from the `log` crate) into `out` as one line. `scope` holds the name and fields of each
    /// span the record was written in that the log shows, from the root.
    pub(super) fn write_event(
        self,
        out: &mut String,
        event: &Event<'_>,
        metadata: &Metadata<'_>,
        scope: &[(&str, &str)],
    ) {
        match self {
            LogStyle::Text { ansi } => text_line(out, ansi, event, metadata, scope),
            LogStyle::Json => json_line(out, event, metadata, scope),
        }
    }
}

/// The ANSI escapes the text format uses, as `nu-ansi-term` writes them.
const BOLD: &str = "\x1b[1m";
const DIMMED: &str = "\x1b[2m";
const RESET: &str = "\x1b[0m";

fn text_line(out: &mut String, ansi: bool, event: &Event<'_>, metadata: &Metadata<'_>, scope: &[(&str, &str)]) {
    let paint = |out: &mut String, style: &str, text: &str| {
        if ansi {
            out.push_str(style);
            out.push_str(text);
            out.push_str(RESET);
        } else {
            out.push_str(text);
        }
    };
    let mut time = String::new();
    timestamp(&mut time, SystemTime::now());
    paint(out, DIMMED, &time);
    out.push(' ');
    let (level, colour) = match *metadata.level() {
        Level::TRACE => ("TRACE", "\x1b[35m"),
        Level::DEBUG => ("DEBUG", "\x1b[34m"),
        Level::INFO => (" INFO", "\x1b[32m"),
        Level::WARN => (" WARN", "\x1b[33m"),
        Level::ERROR => ("ERROR", "\x1b[31m"),
    };
    paint(out, colour, level);
    out.push(' ');
    for (name, fields) in scope {
        paint(out, BOLD, name);
        if !fields.is_empty() {
            paint(out, BOLD, "{");
            out.push_str(fields);
            paint(out, BOLD, "}");
        }
        paint(out, DIMMED, ":");
    }
    if !scope.is_empty() {
        out.push(' ');
    }
    paint(out, DIMMED, metadata.target());
    paint(out, DIMMED, ":");
    out.push(' ');
    let start = out.len();
    let _ = TextFields.format_fields(Writer::new(out), event);
    one_line(out, start);
    out.push('\n');
}

/// Whether `c` ends a line for a terminal or a log reader.
pub(super) fn breaks(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{b}' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// Escape the line breaks `out` holds from `start`, so that a record is one line however many
/// its message has: a plugin's stderr, a crash's backtrace or a client's text then cannot start
/// a line that passes for a record of its own. (Span fields are escaped already, as `Debug`
/// writes strings; the message and `%` fields are written as they are.)
pub(super) fn one_line(out: &mut String, start: usize) {
    if !out[start..].contains(breaks) {
        return;
    }
    let written = out.split_off(start);
    for c in written.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if breaks(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
}

fn json_line(out: &mut String, event: &Event<'_>, metadata: &Metadata<'_>, scope: &[(&str, &str)]) {
    out.push_str("{\"timestamp\":\"");
    timestamp(out, SystemTime::now());
    out.push_str("\",\"level\":\"");
    out.push_str(metadata.level().as_str());
    out.push('"');
    let mut fields = String::new();
    event.record(&mut JsonMembers { out: &mut fields });
    if !fields.is_empty() {
        out.push(',');
        out.push_str(&fields);
    }
    out.push_str(",\"target\":");
    string(out, metadata.target());
    let span = |out: &mut String, (name, fields): &(&str, &str)| {
        out.push('{');
        out.push_str(fields);
        if !fields.is_empty() {
            out.push(',');
        }
        out.push_str("\"name\":");
        string(out, name);
        out.push('}');
    };
    if let Some(current) = scope.last() {
        out.push_str(",\"span\":");
        span(out, current);
        out.push_str(",\"spans\":[");
        for (i, each) in scope.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            span(out, each);
        }
        out.push(']');
    }
    out.push_str("}\n");
}

/// A JSON string, escaped.
fn string(out: &mut String, text: &str) {
    // Writing into a String cannot fail.
    let _ = serde_json::to_writer(Adapter(out), text);
}

/// `serde_json` writes bytes; they are UTF-8 it made from a `str`.
struct Adapter<'a>(&'a mut String);

impl std::io::Write for Adapter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.push_str(std::str::from_utf8(bytes).map_err(std::io::Error::other)?);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Writes each field as a JSON object member, `"key":value`, comma-separated.
struct JsonMembers<'a> {
    out: &'a mut String,
}

impl JsonMembers<'_> {
    fn key(&mut self, field: &Field) {
        if !self.out.is_empty() && !self.out.ends_with('{') {
            self.out.push(',');
        }
        string(self.out, field.name());
        self.out.push(':');
    }
}

impl Visit for JsonMembers<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.key(field);
        string(self.out, value);
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.key(field);
        self.out.push_str(if value { "true" } else { "false" });
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.key(field);
        let _ = write!(self.out, "{value}");
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.key(field);
        let _ = write!(self.out, "{value}");
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.key(field);
        match serde_json::Number::from_f64(value) {
            Some(number) => {
                let _ = write!(self.out, "{number}");
            }
            None => self.out.push_str("null"),
        }
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.key(field);
        string(self.out, &value.to_string());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.key(field);
        string(self.out, &format!("{value:?}"));
    }
}

/// `time` as RFC 3339 in UTC with microseconds (`2026-11-26T14:30:26.123456Z`), as
/// `tracing-subscriber` writes it.
pub(super) fn timestamp(out: &mut String, time: SystemTime) {
    out.push_str(&DateTime::<Utc>::from(time).to_rfc3339_opts(SecondsFormat::Micros, true));
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn timestamps_are_rfc_3339_in_utc_with_microseconds() {
        let at = |seconds: u64, micros: u64| {
            let mut out = String::new();
            timestamp(&mut out, UNIX_EPOCH + Duration::from_secs(seconds) + Duration::from_micros(micros));
            out
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(at(951_782_400, 7), "2000-02-29T00:00:00.000007Z");
        assert_eq!(at(1_795_703_426, 123_456), "2026-11-26T14:30:26.123456Z");
        assert_eq!(at(4_107_542_399, 999_999), "2100-02-28T23:59:59.999999Z");
    }
}
