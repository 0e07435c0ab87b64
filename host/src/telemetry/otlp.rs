//! OTLP's trace messages in protobuf (`opentelemetry/proto/trace/v1/trace.proto` and the
//! collector's `ExportTraceServiceRequest`), written straight from Capsule's span records.
//!
//! Each span is encoded once, when it ends, into the bytes of a `ScopeSpans.spans` entry;
//! an export request is those entries, concatenated, inside one resource and one scope. So
//! no span is copied into an intermediate model and converted again on the export thread.

use std::borrow::Cow;

/// A span, as recorded while it ran.
#[derive(Debug, Clone, Default)]
pub struct SpanRecord {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// All zeros for a root span.
    pub parent_id: [u8; 8],
    /// Whether the parent is a client's span, named by its trace context.
    pub remote_parent: bool,
    pub trace_state: Option<std::sync::Arc<str>>,
    /// A [`Value::Str`] or a [`Value::Spanned`].
    pub name: Value,
    /// The text the span's [`Value::Spanned`] values point into: one buffer a span, rather
    /// than an allocation per string field.
    pub text: String,
    pub kind: SpanKind,
    pub start: u64,
    pub end: u64,
    pub attributes: Vec<Attribute>,
    pub dropped_attributes: u32,
    pub events: Vec<Event>,
    pub dropped_events: u32,
    pub status: Status,
}

/// The room a reused record keeps: a typical span's text and fields fit well within it.
pub const KEPT_TEXT: usize = 1 << 10;
const KEPT_ITEMS: usize = 32;

impl SpanRecord {
    /// Empty again, keeping the buffers' room for the next span recorded here, unless a
    /// span with unusually much made them large (a slot would hold that memory for good).
    pub fn reset(&mut self) {
        let mut text = std::mem::take(&mut self.text);
        let mut attributes = std::mem::take(&mut self.attributes);
        let mut events = std::mem::take(&mut self.events);
        text.clear();
        attributes.clear();
        events.clear();
        text.shrink_to(KEPT_TEXT);
        attributes.shrink_to(KEPT_ITEMS);
        events.shrink_to(KEPT_ITEMS);
        *self = SpanRecord { text, attributes, events, ..SpanRecord::default() };
    }
}

/// The span kinds of `Span.SpanKind`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SpanKind {
    #[default]
    Internal = 1,
    Server = 2,
    Client = 3,
    Producer = 4,
    Consumer = 5,
}

impl SpanKind {
    /// The kind an `otel.kind` field names (OpenTelemetry's lowercase names).
    pub fn named(name: &str) -> Option<SpanKind> {
        Some(match name {
            "internal" => SpanKind::Internal,
            "server" => SpanKind::Server,
            "client" => SpanKind::Client,
            "producer" => SpanKind::Producer,
            "consumer" => SpanKind::Consumer,
            _ => return None,
        })
    }
}

/// A span's status: unset, or an error with a description.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Status {
    #[default]
    Unset,
    Ok,
    Error(String),
}

/// A key and a value.
#[derive(Debug, Clone, PartialEq)]
pub struct Attribute {
    pub key: Cow<'static, str>,
    pub value: Value,
}

/// The attribute values `tracing` fields can carry.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(Cow<'static, str>),
    /// A string kept in the span's own `text`, by byte range.
    Spanned(u32, u32),
    Bool(bool),
    Int(i64),
    Double(f64),
}

impl Default for Value {
    fn default() -> Value {
        Value::Str(Cow::Borrowed(""))
    }
}

impl Value {
    /// The string this value is, given its span's text (empty for a value that is not one).
    pub fn as_str<'a>(&'a self, text: &'a str) -> &'a str {
        match self {
            Value::Str(value) => value,
            Value::Spanned(start, end) => text.get(*start as usize..*end as usize).unwrap_or_default(),
            _ => "",
        }
    }
}

/// Something that happened during a span (a log record written inside it).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub time: u64,
    pub name: String,
    pub attributes: Vec<Attribute>,
    pub dropped_attributes: u32,
}

/// `SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK` and `SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK`.
const HAS_IS_REMOTE: u32 = 0x100;
const IS_REMOTE: u32 = 0x200;
/// The W3C sampled flag: only sampled spans are recorded.
const SAMPLED: u32 = 0x01;

/// Append `span` to `out` as one `ScopeSpans.spans` entry (field 2).
pub fn encode_span(out: &mut Vec<u8>, span: &SpanRecord) {
    nested(out, 2, |out| {
        bytes(out, 1, &span.trace_id);
        bytes(out, 2, &span.span_id);
        if let Some(state) = &span.trace_state {
            text(out, 3, state);
        }
        if span.parent_id != [0; 8] {
            bytes(out, 4, &span.parent_id);
        }
        text(out, 5, span.name.as_str(&span.text));
        varint_field(out, 6, span.kind as u64);
        fixed64(out, 7, span.start);
        fixed64(out, 8, span.end);
        for attribute in &span.attributes {
            key_value(out, 9, attribute, &span.text);
        }
        if span.dropped_attributes > 0 {
            varint_field(out, 10, span.dropped_attributes.into());
        }
        for event in &span.events {
            nested(out, 11, |out| {
                fixed64(out, 1, event.time);
                text(out, 2, &event.name);
                for attribute in &event.attributes {
                    key_value(out, 3, attribute, "");
                }
                if event.dropped_attributes > 0 {
                    varint_field(out, 4, event.dropped_attributes.into());
                }
            });
        }
        if span.dropped_events > 0 {
            varint_field(out, 12, span.dropped_events.into());
        }
        match &span.status {
            Status::Unset => {}
            Status::Ok => nested(out, 15, |out| varint_field(out, 3, 1)),
            Status::Error(message) => nested(out, 15, |out| {
                if !message.is_empty() {
                    text(out, 2, message);
                }
                varint_field(out, 3, 2);
            }),
        }
        let remote = if span.parent_id != [0; 8] && span.remote_parent { IS_REMOTE } else { 0 };
        key(out, 16, FIXED32);
        out.extend_from_slice(&(SAMPLED | HAS_IS_REMOTE | remote).to_le_bytes());
    });
}

/// An `ExportTraceServiceRequest`: one resource with these attributes, one instrumentation
/// scope, and `spans` (entries from [`encode_span`], concatenated).
pub fn export_request(resource: &[Attribute], scope: (&str, &str), spans: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(spans.len() + 256);
    nested(&mut out, 1, |out| {
        nested(out, 1, |out| {
            for attribute in resource {
                key_value(out, 1, attribute, "");
            }
        });
        nested(out, 2, |out| {
            nested(out, 1, |out| {
                bytes(out, 1, scope.0.as_bytes());
                bytes(out, 2, scope.1.as_bytes());
            });
            out.extend_from_slice(spans);
        });
    });
    out
}

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

fn key(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, u64::from(field) << 3 | u64::from(wire));
}

/// Most varints written (field keys, short lengths, small numbers) take one byte.
#[inline]
fn varint(out: &mut Vec<u8>, value: u64) {
    if value < 0x80 {
        out.push(value as u8);
    } else {
        let (bytes, len) = varint_bytes(value);
        out.extend_from_slice(&bytes[..len]);
    }
}

/// `value` as a varint: its bytes, and how many of them there are.
fn varint_bytes(mut value: u64) -> ([u8; 10], usize) {
    let (mut bytes, mut len) = ([0; 10], 0);
    while value >= 0x80 {
        bytes[len] = value as u8 | 0x80;
        value >>= 7;
        len += 1;
    }
    bytes[len] = value as u8;
    (bytes, len + 1)
}

fn varint_field(out: &mut Vec<u8>, field: u32, value: u64) {
    key(out, field, VARINT);
    varint(out, value);
}

fn fixed64(out: &mut Vec<u8>, field: u32, value: u64) {
    key(out, field, FIXED64);
    out.extend_from_slice(&value.to_le_bytes());
}

/// The most bytes of one string (a name, an attribute's value, a status message) a span
/// carries: the rest is cut, as OpenTelemetry's attribute value length limit does, so that
/// no one string can make a span, a batch or the queue large.
pub const MAX_TEXT: usize = 4096;

/// A string field, cut to [`MAX_TEXT`] bytes at a character boundary.
fn text(out: &mut Vec<u8>, field: u32, value: &str) {
    let mut end = value.len().min(MAX_TEXT);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    bytes(out, field, &value.as_bytes()[..end]);
}

fn bytes(out: &mut Vec<u8>, field: u32, value: &[u8]) {
    key(out, field, LEN);
    varint(out, value.len() as u64);
    out.extend_from_slice(value);
}

/// A length-delimited message written by `body`: one byte is kept for its length, which fits
/// for most (attributes, values); a longer one moves its bytes along once.
fn nested(out: &mut Vec<u8>, field: u32, body: impl FnOnce(&mut Vec<u8>)) {
    key(out, field, LEN);
    let at = out.len();
    out.push(0);
    body(out);
    let len = out.len() - at - 1;
    if len < 0x80 {
        out[at] = len as u8;
    } else {
        let (prefix, prefix_len) = varint_bytes(len as u64);
        out.splice(at..=at, prefix[..prefix_len].iter().copied());
    }
}

/// An attribute; `span_text` is the span's, for [`Value::Spanned`] values.
fn key_value(out: &mut Vec<u8>, field: u32, attribute: &Attribute, span_text: &str) {
    nested(out, field, |out| {
        text(out, 1, &attribute.key);
        nested(out, 2, |out| match &attribute.value {
            value @ (Value::Str(_) | Value::Spanned(..)) => text(out, 1, value.as_str(span_text)),
            Value::Bool(value) => varint_field(out, 2, u64::from(*value)),
            Value::Int(value) => varint_field(out, 3, *value as u64),
            Value::Double(value) => fixed64(out, 4, value.to_bits()),
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_of_any_size_are_varints() {
        let mut out = Vec::new();
        nested(&mut out, 5, |out| out.extend_from_slice(&[7; 300]));
        // Key (5 << 3 | 2), then 300 as a varint (0xac 0x02), then the body.
        assert_eq!(out[..3], [0x2a, 0xac, 0x02]);
        assert_eq!(out.len(), 303);
        let mut out = Vec::new();
        varint_field(&mut out, 3, (-1i64) as u64);
        assert_eq!(out.len(), 11, "a negative int64 takes ten bytes");
    }

    #[test]
    fn a_span_is_encoded_field_by_field() {
        let span = SpanRecord {
            trace_id: [1; 16],
            span_id: [2; 8],
            name: Value::Spanned(1, 15),
            text: "xtools/call add".into(),
            kind: SpanKind::Server,
            start: 5,
            end: 9,
            attributes: vec![Attribute { key: "k".into(), value: Value::Int(3) }],
            status: Status::Error("x".into()),
            ..SpanRecord::default()
        };
        let mut out = Vec::new();
        encode_span(&mut out, &span);
        let mut wanted = vec![0x12, 0];
        wanted.extend([0x0a, 16].iter().chain(&[1; 16]));
        wanted.extend([0x12, 8].iter().chain(&[2; 8]));
        wanted.extend([0x2a, 14].iter().chain(b"tools/call add"));
        wanted.extend([0x30, 2]);
        wanted.extend([0x39].iter().chain(&5u64.to_le_bytes()));
        wanted.extend([0x41].iter().chain(&9u64.to_le_bytes()));
        // attributes: KeyValue { key: "k", value: AnyValue { int_value: 3 } }
        wanted.extend([0x4a, 7, 0x0a, 1, b'k', 0x12, 2, 0x18, 3]);
        // status: { message: "x", code: ERROR }
        wanted.extend([0x7a, 5, 0x12, 1, b'x', 0x18, 2]);
        // flags (field 16, fixed32): sampled, and the parent is known not to be remote.
        wanted.extend([0x85, 0x01, 0x01, 0x01, 0, 0]);
        wanted[1] = (wanted.len() - 2) as u8;
        assert_eq!(out, wanted);
    }

    #[test]
    fn long_strings_are_cut_at_a_character_boundary() {
        let long = format!("a{}", "é".repeat(MAX_TEXT));
        let span = SpanRecord {
            name: Value::Str(long.clone().into()),
            attributes: vec![Attribute { key: "k".into(), value: Value::Str(long.into()) }],
            ..SpanRecord::default()
        };
        let mut out = Vec::new();
        encode_span(&mut out, &span);
        assert!(out.len() < 2 * MAX_TEXT + 100, "{}", out.len());
        let cut = format!("a{}", "é".repeat((MAX_TEXT - 1) / 2));
        let found = out.windows(cut.len()).filter(|w| *w == cut.as_bytes()).count();
        assert_eq!(found, 2, "the name and the value, each cut to {} bytes", cut.len());
    }
}
