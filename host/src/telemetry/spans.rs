//! The recorder of Capsule's spans for OTLP: ids and parents, the fields the spans name (the
//! `otel.*` ones set name, kind and status), the log records written inside them as events,
//! and start and end times. A sampled span is encoded once, when it closes, into the export
//! queue; an unsampled one keeps only its ids. Capsule's subscriber drives it, or, under a
//! log filter that needs `tracing-subscriber`'s registry, it is a layer there.
//!
//! Capsule records its spans itself rather than through tracing-opentelemetry and the
//! OpenTelemetry SDK: those build a span model per span, convert it again for export, and
//! cost about a fifth of a stateless call's throughput on two cores (BENCHMARKS "Watching").

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt::{self, Write as _};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use super::export::Queue;
use super::otlp::{self, Attribute, SpanKind, SpanRecord, Status, Value};
use super::w3c::{self, RemoteParent};

/// Which traces are recorded (`OTEL_TRACES_SAMPLER`, decided when a trace starts here).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampler {
    /// For a trace that starts here.
    pub root: Rule,
    /// Follow the client's sampled flag when it sends trace context.
    pub parent_based: bool,
}

/// A sampler's own decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rule {
    On,
    Off,
    /// Sample a trace when the low 63 bits of its id's last eight bytes are below this
    /// (OpenTelemetry's `TraceIdRatioBased`, so that every service sampling at one ratio keeps
    /// the same traces).
    Below(u64),
}

impl Rule {
    /// The rule that keeps `ratio` (0 to 1) of the traces.
    pub fn ratio(ratio: f64) -> Rule {
        if ratio >= 1.0 {
            Rule::On
        } else if ratio <= 0.0 {
            Rule::Off
        } else {
            Rule::Below((ratio * (1u64 << 63) as f64) as u64)
        }
    }
}

impl Sampler {
    fn samples(&self, trace_id: &[u8; 16], parent: Option<&RemoteParent>) -> bool {
        match (parent, self.root) {
            (Some(parent), _) if self.parent_based => parent.sampled,
            (_, Rule::On) => true,
            (_, Rule::Off) => false,
            (_, Rule::Below(bound)) => {
                let low = u64::from_be_bytes(trace_id[8..].try_into().expect("eight bytes"));
                (low >> 1) < bound
            }
        }
    }
}

/// How much one span may carry (`OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT`,
/// `OTEL_SPAN_EVENT_COUNT_LIMIT`); what is beyond is counted as dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanLimits {
    pub attributes: usize,
    pub events: usize,
}

/// Records Capsule's spans and queues the sampled ones: the span-recording half of the
/// [`Telemetry`](super::subscriber::Telemetry) subscriber, and a `tracing-subscriber` layer
/// where the log filter needs its registry (span and field directives).
pub struct SpanRecorder {
    queue: Arc<Queue>,
    sampler: Sampler,
    limits: SpanLimits,
}

impl SpanRecorder {
    pub fn new(queue: Arc<Queue>, sampler: Sampler, limits: SpanLimits) -> SpanRecorder {
        SpanRecorder { queue, sampler, limits }
    }

    /// Whether a span or event is recorded: Capsule's own spans that name themselves for
    /// the exporter (`otel.name`; the others, such as a loader's `tenant`, only give log
    /// records their context), and its events at info and above (debug events would be most
    /// of the bytes and tell an operator little).
    pub fn wants(metadata: &tracing::Metadata<'_>) -> bool {
        metadata.target().starts_with("capsule")
            && match metadata.is_span() {
                true => metadata.fields().field("otel.name").is_some(),
                false => *metadata.level() <= Level::INFO,
            }
    }

    /// Fill `live` (empty, perhaps with room from an earlier span) with what a span starting
    /// with `attrs` keeps while it is open, under the nearest recorded span `parent` (its
    /// trace id, span id and sampled flag); a root span takes the trace
    /// [`TraceContext::root`] is starting, or a new one.
    pub(super) fn open(&self, live: &mut Live, attrs: &Attributes<'_>, parent: Option<Parent>) {
        let record = &mut live.record;
        let sampled = match parent {
            Some(Parent { trace_id, span_id, sampled, state }) => {
                (record.trace_id, record.parent_id, record.trace_state) = (trace_id, span_id, state);
                sampled
            }
            None => {
                // (None while this thread's locals are destroyed.)
                let context = STARTING.try_with(Cell::take).ok().flatten().unwrap_or_else(|| TraceContext::new(None));
                record.trace_id = context.trace_id;
                let sampled = self.sampler.samples(&context.trace_id, context.parent.as_ref());
                if let Some(parent) = context.parent {
                    record.parent_id = parent.span_id;
                    record.remote_parent = true;
                    record.trace_state = parent.state;
                }
                sampled
            }
        };
        // An unsampled span keeps only its trace id, for its children.
        if sampled {
            record.span_id = rand::random::<u64>().max(1).to_be_bytes();
            record.name = Value::Str(Cow::Borrowed(attrs.metadata().name()));
            record.start = now();
            record.attributes.reserve(attrs.metadata().fields().len());
            record.text.reserve(128);
            attrs.record(&mut Fields { span: record, limit: self.limits.attributes, fresh: true });
        }
        live.sampled = sampled;
    }

    /// Fields recorded on an open span.
    pub(super) fn record(&self, live: &mut Live, values: &Record<'_>) {
        if live.sampled {
            values.record(&mut Fields { span: &mut live.record, limit: self.limits.attributes, fresh: false });
        }
    }

    /// Set one attribute for the exporter alone (see [`export_attributes`]).
    pub(super) fn set(&self, live: &mut Live, key: &'static str, value: &str) {
        if live.sampled {
            let mut fields = Fields { span: &mut live.record, limit: self.limits.attributes, fresh: false };
            let value = fields.keep(|text| text.push_str(value));
            fields.set(key, value);
        }
    }

    /// A record written inside a span, kept as one of its events.
    pub(super) fn event(&self, live: &mut Live, event: &Event<'_>) {
        if !live.sampled {
            return;
        }
        let metadata = event.metadata();
        // A plugin's own error record is its word, not the request's outcome. Judged before
        // the event limit, so that a span filled with a plugin's records still takes the
        // host's error.
        let error = *metadata.level() == Level::ERROR && metadata.target() != super::PLUGIN_LOG;
        if live.record.events.len() >= self.limits.events {
            live.record.dropped_events += 1;
            if error && live.record.status == Status::Unset {
                live.record.status = Status::Error(String::new());
            }
            return;
        }
        let mut fields = EventFields {
            event: otlp::Event {
                time: now(),
                name: String::new(),
                attributes: vec![
                    Attribute { key: "level".into(), value: Value::Str(metadata.level().as_str().into()) },
                    Attribute { key: "target".into(), value: Value::Str(metadata.target().into()) },
                ],
                dropped_attributes: 0,
            },
            limit: self.limits.attributes,
        };
        event.record(&mut fields);
        if error && live.record.status == Status::Unset {
            live.record.status = Status::Error(fields.event.name.clone());
        }
        live.record.events.push(fields.event);
    }

    /// The span has ended: a sampled one is encoded into the export queue.
    pub(super) fn close(&self, live: &mut Live) {
        if live.sampled {
            live.record.end = now();
            self.queue.push(&live.record);
        }
    }
}

/// What the recorder keeps of an open span: in its slot of Capsule's subscriber, or in its
/// extensions in `tracing-subscriber`'s registry.
#[derive(Default)]
pub(super) struct Live {
    record: SpanRecord,
    sampled: bool,
}

impl Live {
    /// Empty again, keeping its buffers' room.
    pub(super) fn reset(&mut self) {
        self.record.reset();
        self.sampled = false;
    }

    /// Whether the span is sampled (exported when it ends).
    pub(super) fn is_sampled(&self) -> bool {
        self.sampled
    }

    /// Its W3C trace context, when it is sampled (an unsampled span has no span id).
    fn trace_context(&self) -> Option<(String, Option<Arc<str>>)> {
        self.sampled.then(|| {
            let trace_id = w3c::trace_id_digits(&self.record.trace_id);
            let mut traceparent = String::with_capacity(55);
            traceparent.push_str("00-");
            traceparent.push_str(std::str::from_utf8(&trace_id).expect("hex digits are ASCII"));
            traceparent.push('-');
            for byte in self.record.span_id {
                let _ = write!(traceparent, "{byte:02x}");
            }
            traceparent.push_str("-01");
            (traceparent, self.record.trace_state.clone())
        })
    }

    /// What a child span takes from this one.
    pub(super) fn as_parent(&self) -> Parent {
        Parent {
            trace_id: self.record.trace_id,
            span_id: self.record.span_id,
            sampled: self.sampled,
            state: self.record.trace_state.clone(),
        }
    }
}

/// What a child span takes from its parent: the trace id, the parent's span id, whether the
/// trace is sampled, and the trace's `tracestate` (W3C: it belongs to the trace, so every
/// span of it carries the client's).
pub(super) struct Parent {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    sampled: bool,
    state: Option<Arc<str>>,
}

/// The trace a root span belongs to: the client's, when its W3C trace context is valid, else
/// a new one. Known before the span starts, so that the span carries its trace id for the
/// logs from its first moment instead of having it recorded afterwards.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceContext {
    trace_id: [u8; 16],
    parent: Option<RemoteParent>,
}

thread_local! {
    /// The trace of the root span [`TraceContext::root`] is starting on this thread.
    static STARTING: Cell<Option<TraceContext>> = const { Cell::new(None) };
}

impl TraceContext {
    /// Continue the client's span named by `traceparent` (and `tracestate`), if it is valid;
    /// otherwise start a new trace.
    pub fn new(parent: Option<(&str, Option<&str>)>) -> TraceContext {
        match parent.and_then(|(traceparent, tracestate)| w3c::parse(traceparent, tracestate)) {
            Some(parent) => TraceContext { trace_id: parent.trace_id, parent: Some(parent) },
            None => TraceContext { trace_id: trace_id(), parent: None },
        }
    }

    /// The span `start` makes (a root span, given the trace id as 32 hex digits for its
    /// `trace_id` field) as the root of this trace here.
    pub fn root(self, start: impl FnOnce(&str) -> tracing::Span) -> tracing::Span {
        // Text rather than a value to format: the log layer writes a string field as it is,
        // where formatting a u128 in hex went through `Debug`, digit by digit.
        let digits = w3c::trace_id_digits(&self.trace_id);
        let trace_id = std::str::from_utf8(&digits).expect("hex digits are ASCII");
        STARTING.with(|starting| starting.set(Some(self)));
        let span = start(trace_id);
        // Taken by the span recorder when it recorded the span; cleared here when it did not.
        STARTING.with(Cell::take);
        span
    }
}

/// The W3C trace context naming `span` (its `traceparent`, and the trace's `tracestate`)
/// when it is exported: for the `_meta` of a request the server sends, so that the client's
/// work continues the trace.
pub fn trace_context(span: &tracing::Span) -> Option<(String, Option<Arc<str>>)> {
    span.with_subscriber(|(id, dispatch)| {
        if let Some(telemetry) = dispatch.downcast_ref::<super::subscriber::Telemetry>() {
            return telemetry.with_live(id, Live::trace_context).flatten();
        }
        dispatch.downcast_ref::<SpanRecorder>()?;
        let span = dispatch.downcast_ref::<tracing_subscriber::Registry>()?.span(id)?;
        let extensions = span.extensions();
        extensions.get::<Live>()?.trace_context()
    })
    .flatten()
}

/// A setter of attributes: a key and its value.
pub type SetAttribute<'a> = dyn FnMut(&'static str, &str) + 'a;

/// Set attributes of `span` for the exporter alone: `attributes` is called, with a setter,
/// only if traces are exported and the span is sampled, so that what it formats is formatted
/// only then. For what a request learns at its end, after its last log record; given to the
/// span recorder directly rather than recorded on the span, which the log layer would format
/// too, for nothing.
pub fn export_attributes(span: &tracing::Span, attributes: impl FnOnce(&mut SetAttribute<'_>)) {
    span.with_subscriber(|(id, dispatch)| {
        if let Some(telemetry) = dispatch.downcast_ref::<super::subscriber::Telemetry>() {
            return telemetry.export_attributes(id, attributes);
        }
        let (Some(recorder), Some(registry)) =
            (dispatch.downcast_ref::<SpanRecorder>(), dispatch.downcast_ref::<tracing_subscriber::Registry>())
        else {
            return;
        };
        let Some(span) = registry.span(id) else { return };
        if let Some(live) = span.extensions_mut().get_mut::<Live>().filter(|live| live.sampled) {
            attributes(&mut |key, value| recorder.set(live, key, value));
        }
    });
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// A fresh trace id (never all zeros, which means none).
fn trace_id() -> [u8; 16] {
    rand::random::<u128>().max(1).to_be_bytes()
}

/// The recorder as a layer over `tracing-subscriber`'s registry, for a log filter that needs
/// the registry (see `cli::init_logs`).
impl<S> Layer<S> for SpanRecorder
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let parent = match attrs.parent() {
            Some(parent) => ctx.span(parent),
            None if attrs.is_contextual() => ctx.lookup_current(),
            None => None,
        };
        let inherited = parent.and_then(|parent| Some(parent.extensions().get::<Live>()?.as_parent()));
        let mut live = Live::default();
        self.open(&mut live, attrs, inherited);
        span.extensions_mut().insert(live);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        if let Some(live) = span.extensions_mut().get_mut::<Live>() {
            self.record(live, values);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.event_span(event) else { return };
        if let Some(live) = span.extensions_mut().get_mut::<Live>() {
            self.event(live, event);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        if let Some(mut live) = span.extensions_mut().remove::<Live>() {
            self.close(&mut live);
        }
    }
}

/// A span's fields: `otel.name`, `otel.kind`, `otel.status_code` and `otel.status_message`
/// describe the span; `trace_id` is for the logs; the rest are attributes (`error.type` also
/// makes the status an error, as the semantic conventions ask).
struct Fields<'a> {
    span: &'a mut SpanRecord,
    limit: usize,
    /// The span's fields as it starts, rather than recorded later.
    fresh: bool,
}

impl Fields<'_> {
    /// A string value written into the span's text.
    fn keep(&mut self, write: impl FnOnce(&mut String)) -> Value {
        let start = self.span.text.len();
        write(&mut self.span.text);
        Value::Spanned(start as u32, self.span.text.len() as u32)
    }

    fn set(&mut self, name: &'static str, value: Value) {
        let span = &mut *self.span;
        match name {
            "otel.name" => {
                span.name = match value {
                    Value::Str(_) | Value::Spanned(..) => value,
                    other => Value::Str(as_text(&other, &span.text).into_owned().into()),
                }
            }
            "otel.kind" => span.kind = SpanKind::named(&as_text(&value, &span.text)).unwrap_or_default(),
            "otel.status_code" => match &*as_text(&value, &span.text) {
                code if code.eq_ignore_ascii_case("error") && !matches!(span.status, Status::Error(_)) => {
                    span.status = Status::Error(String::new())
                }
                code if code.eq_ignore_ascii_case("ok") => span.status = Status::Ok,
                _ => {}
            },
            "otel.status_message" => {
                let message = as_text(&value, &span.text).into_owned();
                match &mut span.status {
                    Status::Error(described) => *described = message,
                    status => *status = Status::Error(message),
                }
            }
            key => {
                if key == "error.type" && span.status == Status::Unset {
                    span.status = Status::Error(String::new());
                }
                let fresh = self.fresh;
                set_attribute(&mut span.attributes, &mut span.dropped_attributes, self.limit, key, value, fresh);
            }
        }
    }
}

/// A value as text (`text` is its span's, for [`Value::Spanned`] values).
fn as_text<'a>(value: &'a Value, text: &'a str) -> Cow<'a, str> {
    match value {
        Value::Str(_) | Value::Spanned(..) => Cow::Borrowed(value.as_str(text)),
        Value::Bool(b) => Cow::Owned(b.to_string()),
        Value::Int(i) => Cow::Owned(i.to_string()),
        Value::Double(d) => Cow::Owned(d.to_string()),
    }
}

/// Set `key`, or add it; `fresh` when nothing recorded so far can hold it (a span's fields as
/// it starts are each named once), which spares the search.
fn set_attribute(
    attributes: &mut Vec<Attribute>,
    dropped: &mut u32,
    limit: usize,
    key: &'static str,
    value: Value,
    fresh: bool,
) {
    if !fresh && let Some(existing) = attributes.iter_mut().find(|a| a.key == key) {
        existing.value = value;
    } else if attributes.len() < limit {
        attributes.push(Attribute { key: Cow::Borrowed(key), value });
    } else {
        *dropped += 1;
    }
}

/// Turns each `record_*` into a [`Value`] for `set` (strings through `keep`).
macro_rules! visit_values {
    () => {
        fn record_str(&mut self, field: &Field, value: &str) {
            // `trace_id` is for the logs (the span has its ids).
            if field.name() != "trace_id" {
                let value = self.keep(|text| text.push_str(value));
                self.set(field.name(), value);
            }
        }
        fn record_bool(&mut self, field: &Field, value: bool) {
            self.set(field.name(), Value::Bool(value));
        }
        fn record_i64(&mut self, field: &Field, value: i64) {
            self.set(field.name(), Value::Int(value));
        }
        fn record_u64(&mut self, field: &Field, value: u64) {
            match i64::try_from(value) {
                Ok(value) => self.set(field.name(), Value::Int(value)),
                Err(_) => {
                    let value = self.keep(|text| {
                        let _ = write!(text, "{value}");
                    });
                    self.set(field.name(), value)
                }
            }
        }
        fn record_f64(&mut self, field: &Field, value: f64) {
            self.set(field.name(), Value::Double(value));
        }
        fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
            let value = self.keep(|text| {
                let _ = write!(text, "{value:?}");
            });
            self.set(field.name(), value);
        }
    };
}

impl Visit for Fields<'_> {
    visit_values!();
}

/// An event's fields: its message names it, the rest are attributes.
struct EventFields {
    event: otlp::Event,
    limit: usize,
}

impl EventFields {
    /// A string value of its own (events are rare; spans share a buffer).
    fn keep(&mut self, write: impl FnOnce(&mut String)) -> Value {
        let mut text = String::new();
        write(&mut text);
        Value::Str(text.into())
    }

    fn set(&mut self, name: &'static str, value: Value) {
        match (name, value) {
            ("message", Value::Str(text)) => self.event.name = text.into_owned(),
            (key, value) => {
                let event = &mut self.event;
                set_attribute(&mut event.attributes, &mut event.dropped_attributes, self.limit, key, value, false)
            }
        }
    }
}

impl Visit for EventFields {
    visit_values!();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_context_gives_its_root_span_the_client_s_trace_id_and_is_not_left_behind() {
        let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let context = TraceContext::new(Some((traceparent, Some("vendor=1"))));
        let parent = context.parent.clone().expect("a valid traceparent");
        assert_eq!((parent.sampled, parent.state.as_deref()), (true, Some("vendor=1")));
        // No subscriber takes it here, so the root must clear it itself.
        let written = |context: TraceContext| {
            let mut seen = String::new();
            context.root(|trace_id| {
                seen = trace_id.to_string();
                tracing::Span::none()
            });
            seen
        };
        assert_eq!(written(context), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(STARTING.with(Cell::take), None);
        let fresh = TraceContext::new(Some(("00-not-a-traceparent", None)));
        assert!(fresh.parent.is_none() && fresh.trace_id != [0; 16]);
        let small = TraceContext { trace_id: 1u128.to_be_bytes(), parent: None };
        assert_eq!(written(small), format!("{:032x}", 1));
    }

    #[test]
    fn a_ratio_sampler_keeps_about_its_share_and_a_parent_based_one_follows_the_client() {
        let sampler = Sampler { root: Rule::ratio(0.25), parent_based: true };
        let kept = (0..10_000).filter(|_| sampler.samples(&trace_id(), None)).count();
        assert!((2_000..3_000).contains(&kept), "{kept} of 10000 at 0.25");
        let parent = |sampled| RemoteParent { trace_id: [0xff; 16], span_id: [1; 8], sampled, state: None };
        let always = Sampler { root: Rule::On, parent_based: true };
        assert!(!always.samples(&[0xff; 16], Some(&parent(false))));
        let never = Sampler { root: Rule::Off, parent_based: true };
        assert!(never.samples(&[0xff; 16], Some(&parent(true))));
        let not_parent_based = Sampler { root: Rule::Off, parent_based: false };
        assert!(!not_parent_based.samples(&[0xff; 16], Some(&parent(true))));
        assert_eq!(Rule::ratio(1.5), Rule::On);
        assert_eq!(Rule::ratio(0.0), Rule::Off);
    }
}
