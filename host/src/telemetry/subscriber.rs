//! Capsule's `tracing` subscriber: one pass that writes log records and records spans for
//! OTLP, instead of `tracing-subscriber`'s registry with a filtered layer for each.
//!
//! Each span is a slot in a pool (its metadata, its parent, a count of the handles to it, and
//! what the log and the recorder keep of it); each thread keeps the stack of spans it has
//! entered. A span or record is enabled when the log filter or the recorder wants it, each
//! decided from its metadata alone, so every callsite's interest is fixed once. A request
//! span costs the registry's slab insert, the per-layer filters' bookkeeping on every enter,
//! exit and close, and a type-keyed extension map for each layer; here it is one slot, one
//! lock a change, and a push and a count on entering it (BENCHMARKS "One subscriber for
//! logs and spans").
//!
//! The log filter here is by target and level (`tracing-subscriber`'s `Targets`). Span and
//! field directives need the registry's span tracking, so [`dispatch`] builds that stack for
//! them, with the same formats and the recorder as a layer.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use sharded_slab::{Clear, Pool};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Dispatch, Event, Metadata, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::filter::{EnvFilter, Targets};

use super::logs::LogStyle;
use super::spans::{Live, SpanRecorder};

/// Where log lines go, each in one call.
pub type LogOut = Arc<dyn Fn(&[u8]) + Send + Sync>;

/// The log filter `CAPSULE_LOG` describes (`info` when unset, empty or invalid).
#[allow(clippy::large_enum_variant, reason = "made once, when the server starts")]
pub enum LogFilter {
    /// Directives by target and level, decided from a record's metadata alone (what
    /// `CAPSULE_LOG` nearly always holds).
    Targets(Targets),
    /// Span and field directives (`info,[request]=debug`): `EnvFilter` follows every span it
    /// might match, so it needs `tracing-subscriber`'s registry.
    Scoped(EnvFilter),
}

impl LogFilter {
    pub fn new(directives: Option<String>) -> LogFilter {
        let directives = directives.filter(|d| !d.trim().is_empty()).unwrap_or_else(|| "info".to_owned());
        // `Targets` would take `[request]` for a target's name, matching nothing.
        match directives.parse::<Targets>() {
            Ok(targets) if !directives.contains('[') => LogFilter::Targets(targets),
            _ => LogFilter::Scoped(EnvFilter::try_new(&directives).unwrap_or_else(|_| EnvFilter::new("info"))),
        }
    }

    /// The most verbose level these directives log (trace when they cannot tell).
    pub fn max_level(&self) -> LevelFilter {
        match self {
            LogFilter::Targets(targets) => {
                <Targets as tracing_subscriber::layer::Filter<tracing_subscriber::Registry>>::max_level_hint(targets)
            }
            LogFilter::Scoped(filter) => filter.max_level_hint(),
        }
        .unwrap_or(LevelFilter::TRACE)
    }
}

/// The subscriber for a server: logs filtered by `filter` and written in `style` to `out`,
/// and spans recorded by `recorder` when traces are exported. [`Telemetry`] for a filter by
/// target and level; `tracing-subscriber`'s registry, its formatter and the recorder as a
/// layer for a scoped one.
pub fn dispatch(filter: LogFilter, style: LogStyle, recorder: Option<SpanRecorder>, out: LogOut) -> Dispatch {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    let filter = match filter {
        LogFilter::Targets(targets) => return Dispatch::new(Telemetry::new(targets, style, recorder, out)),
        LogFilter::Scoped(filter) => filter,
    };
    let text = matches!(style, LogStyle::Text { .. });
    let logs = tracing_subscriber::fmt::layer().with_writer(move || Out { out: out.clone(), text });
    let logs = match style {
        LogStyle::Text { ansi } => logs.fmt_fields(super::TextFields).with_ansi(ansi).boxed(),
        // Spans' fields ride along in each record, so a shipper can group a request's lines.
        LogStyle::Json => logs.json().with_current_span(true).with_span_list(true).flatten_event(true).boxed(),
    };
    let recorded = recorder.map(|recorder| {
        // The hint keeps `log` records of the dependencies below debug from being built and
        // converted at all (a filter without one would let every `log::trace!` through).
        let wanted = tracing_subscriber::filter::filter_fn(SpanRecorder::wants);
        recorder.with_filter(wanted.with_max_level_hint(LevelFilter::DEBUG))
    });
    Dispatch::new(tracing_subscriber::registry().with(logs.with_filter(filter)).with(recorded))
}

/// A [`LogOut`] as the writer `tracing-subscriber`'s formatter takes. It writes each record
/// in one call; a text record's line breaks are escaped there, as Capsule's own writer does
/// (`logs::one_line`), so that a plugin's stderr or a client's text cannot start a line
/// that passes for a record under a span or field filter either.
struct Out {
    out: LogOut,
    text: bool,
}

impl std::io::Write for Out {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        match std::str::from_utf8(body) {
            Ok(record) if self.text && record.contains(super::logs::breaks) => {
                let mut line = record.to_owned();
                super::logs::one_line(&mut line, 0);
                line.push('\n');
                (self.out)(line.as_bytes());
            }
            _ => (self.out)(bytes),
        }
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The subscriber: logs filtered by `logs` and written in `style` to `out`, and, with a
/// recorder, Capsule's spans recorded for export.
pub struct Telemetry {
    spans: Pool<Slot>,
    logs: Targets,
    style: LogStyle,
    out: LogOut,
    recorder: Option<SpanRecorder>,
}

/// A span on a thread's stack; `again` when the thread had already entered it (it is left
/// without releasing the hold the first entry took). The stack is the thread's, shared by
/// every subscriber it uses (tests switch them), so each entry names its subscriber.
struct Entered {
    owner: usize,
    id: Id,
    again: bool,
}

/// One span.
#[derive(Default)]
struct Slot {
    metadata: Option<&'static Metadata<'static>>,
    /// Held (counted in its `refs`) until this span closes.
    parent: Option<Id>,
    /// Handles to the span, entries on stacks and children; it closes at zero.
    refs: AtomicUsize,
    state: Mutex<State>,
}

/// What changes while a span is open.
#[derive(Default)]
struct State {
    /// The span's fields as its log records show them, when the log shows the span (the
    /// buffer is kept when the slot is reused).
    fields: String,
    logged: bool,
    /// The recorder's, when it records the span (the buffers are kept when the slot is
    /// reused).
    live: Live,
    recorded: bool,
}

impl Clear for Slot {
    fn clear(&mut self) {
        self.metadata = None;
        self.parent = None;
        *self.refs.get_mut() = 0;
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        state.fields.clear();
        state.fields.shrink_to(super::otlp::KEPT_TEXT);
        state.logged = false;
        if state.recorded {
            state.live.reset();
            state.recorded = false;
        }
    }
}

thread_local! {
    /// Set while this thread runs code of a record's (its fields' `Debug`) under a span's
    /// lock: a record written from there must not take a span's lock again.
    static BUSY: Cell<bool> = const { Cell::new(false) };
    /// The spans this thread has entered, innermost last.
    static STACK: RefCell<Vec<Entered>> = const { RefCell::new(Vec::new()) };
    /// Where a line is written before it goes out in one write.
    static LINE: RefCell<String> = RefCell::new(String::with_capacity(512));
}

/// Run `f` with this thread marked busy.
fn busy<T>(f: impl FnOnce() -> T) -> T {
    /// Restores the mark as it was, even if `f` panics.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            BUSY.with(|b| b.set(self.0));
        }
    }
    let _restore = Restore(BUSY.with(|b| b.replace(true)));
    f()
}

fn key(id: &Id) -> usize {
    id.into_u64() as usize - 1
}

impl Telemetry {
    pub fn new(logs: Targets, style: LogStyle, recorder: Option<SpanRecorder>, out: LogOut) -> Telemetry {
        Telemetry { spans: Pool::new(), logs, style, out, recorder }
    }

    fn owner(&self) -> usize {
        self as *const Telemetry as usize
    }

    fn logged(&self, metadata: &Metadata<'_>) -> bool {
        self.logs.would_enable(metadata.target(), metadata.level())
    }

    fn recorded(&self, metadata: &Metadata<'_>) -> bool {
        self.recorder.is_some() && SpanRecorder::wants(metadata)
    }

    /// The span this thread is in: the innermost it entered once.
    fn current(&self) -> Option<Id> {
        let owner = self.owner();
        // No stack while the thread's locals are destroyed: nothing is entered then.
        STACK
            .try_with(|stack| {
                let stack = stack.borrow();
                let current = stack.iter().rev().find(|entered| entered.owner == owner && !entered.again);
                current.map(|entered| entered.id.clone())
            })
            .ok()
            .flatten()
    }

    /// The parent a new span or a record has: the one it names, else (unless it is a root)
    /// the current span.
    fn parent_of(&self, named: Option<&Id>, contextual: bool) -> Option<Id> {
        match named {
            Some(id) => Some(id.clone()),
            None if contextual => self.current(),
            None => None,
        }
    }

    /// Call `f` with the state of `id` and of each of its ancestors in turn, innermost first,
    /// until it returns `Some`; nothing when this thread is busy.
    fn up<T>(
        &self,
        id: Option<Id>,
        mut f: impl FnMut(&'static Metadata<'static>, &mut State) -> Option<T>,
    ) -> Option<T> {
        if BUSY.with(Cell::get) {
            return None;
        }
        let mut next = id;
        while let Some(id) = next {
            let slot = self.spans.get(key(&id))?;
            let found = {
                let mut state = slot.state.lock().unwrap_or_else(|e| e.into_inner());
                f(slot.metadata?, &mut state)
            };
            if found.is_some() {
                return found;
            }
            next = slot.parent.clone();
        }
        None
    }

    /// What `read` makes of the recorder's state of the open span `id`, if it records it.
    pub(super) fn with_live<T>(&self, id: &Id, read: impl FnOnce(&super::spans::Live) -> T) -> Option<T> {
        self.recorder.as_ref()?;
        let slot = self.spans.get(key(id))?;
        let state = slot.state.lock().unwrap_or_else(|e| e.into_inner());
        state.recorded.then(|| read(&state.live))
    }

    /// Give the open span `id` an attribute for the exporter alone (see
    /// [`export_attributes`](super::export_attributes)).
    pub fn export_attributes(&self, id: &Id, attributes: impl FnOnce(&mut super::SetAttribute<'_>)) {
        let Some(recorder) = &self.recorder else { return };
        let Some(slot) = self.spans.get(key(id)) else { return };
        let mut state = slot.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.recorded && state.live.is_sampled() {
            attributes(&mut |key_, value| recorder.set(&mut state.live, key_, value));
        }
    }

    /// Write the record `event` to the log, with the spans it was written in.
    fn log(&self, event: &Event<'_>, metadata: &Metadata<'_>, parent: Option<Id>) {
        let mut scope: Vec<(&'static str, String)> = Vec::new();
        self.up::<()>(parent, |metadata, state| {
            if state.logged {
                scope.push((metadata.name(), state.fields.clone()));
            }
            None
        });
        let scope: Vec<(&str, &str)> = scope.iter().rev().map(|(name, fields)| (*name, fields.as_str())).collect();
        let write = |line: &mut String| {
            line.clear();
            busy(|| self.style.write_event(line, event, metadata, &scope));
            (self.out)(line.as_bytes());
        };
        // A record written while this thread's locals are being destroyed (a store dropped
        // with them logs at trace level) finds the line gone, and makes one.
        let written = LINE.try_with(|line| match line.try_borrow_mut() {
            Ok(mut line) => write(&mut line),
            Err(_) => write(&mut String::new()),
        });
        if written.is_err() {
            write(&mut String::new());
        }
    }
}

impl Subscriber for Telemetry {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if self.logged(metadata) || self.recorded(metadata) { Interest::always() } else { Interest::never() }
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.logged(metadata) || self.recorded(metadata)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        let logs =
            <Targets as tracing_subscriber::layer::Filter<tracing_subscriber::Registry>>::max_level_hint(&self.logs);
        let spans = if self.recorder.is_some() { LevelFilter::DEBUG } else { LevelFilter::OFF };
        Some(logs.unwrap_or(LevelFilter::TRACE).max(spans))
    }

    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let metadata = attrs.metadata();
        let recorder = self.recorder.as_ref().filter(|_| SpanRecorder::wants(metadata));
        let mut above = None;
        // The parent is held until this span closes; the recorder continues the trace of
        // the nearest span it records.
        let parent = self.parent_of(attrs.parent(), attrs.is_contextual()).filter(|id| {
            let Some(slot) = self.spans.get(key(id)) else { return false };
            slot.refs.fetch_add(1, Ordering::Relaxed);
            // A span started while this thread holds a span's lock (in a field's `Debug`)
            // must not take one: it starts a trace of its own.
            if recorder.is_some() && !BUSY.with(Cell::get) {
                let state = slot.state.lock().unwrap_or_else(|e| e.into_inner());
                let live = state.recorded.then(|| state.live.as_parent());
                drop(state);
                above = live.or_else(|| {
                    self.up(slot.parent.clone(), |_, state| state.recorded.then(|| state.live.as_parent()))
                });
            }
            true
        });
        let logged = self.logged(metadata);
        let created = self.spans.create_with(|slot| {
            slot.metadata = Some(metadata);
            slot.parent = parent;
            *slot.refs.get_mut() = 1;
            let state = slot.state.get_mut().unwrap_or_else(|e| e.into_inner());
            if logged {
                self.style.span_fields(&mut state.fields, attrs);
            }
            state.logged = logged;
            if let Some(recorder) = recorder {
                recorder.open(&mut state.live, attrs, above);
                state.recorded = true;
            }
        });
        Id::from_u64(created.expect("too many open spans") as u64 + 1)
    }

    fn record(&self, id: &Id, values: &Record<'_>) {
        if BUSY.with(Cell::get) {
            return;
        }
        let Some(slot) = self.spans.get(key(id)) else { return };
        let mut state = slot.state.lock().unwrap_or_else(|e| e.into_inner());
        let state = &mut *state;
        busy(|| {
            if state.logged {
                self.style.add_fields(&mut state.fields, values);
            }
            if let Some(recorder) = self.recorder.as_ref().filter(|_| state.recorded) {
                recorder.record(&mut state.live, values);
            }
        });
    }

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let metadata = event.metadata();
        let normalized = event.normalized_metadata();
        let shown = normalized.as_ref().unwrap_or(metadata);
        let logged = self.logged(shown);
        let recorded = self.recorded(metadata);
        if !logged && !recorded {
            return;
        }
        let parent = self.parent_of(event.parent(), event.is_contextual());
        if let Some(recorder) = self.recorder.as_ref().filter(|_| recorded) {
            self.up(parent.clone(), |_, state| state.recorded.then(|| busy(|| recorder.event(&mut state.live, event))));
        }
        if logged {
            self.log(event, shown, parent);
        }
    }

    fn enter(&self, id: &Id) {
        let owner = self.owner();
        let again = STACK.try_with(|stack| {
            let mut stack = stack.borrow_mut();
            let again = stack.iter().any(|entered| entered.owner == owner && entered.id == *id);
            stack.push(Entered { owner, id: id.clone(), again });
            again
        });
        // Entered where no stack is left to push it on, it is never left either.
        if again == Ok(false) {
            self.clone_span(id);
        }
    }

    fn exit(&self, id: &Id) {
        let owner = self.owner();
        let left = STACK
            .try_with(|stack| {
                let mut stack = stack.borrow_mut();
                let at = stack.iter().rposition(|entered| entered.owner == owner && entered.id == *id)?;
                Some(stack.remove(at))
            })
            .ok()
            .flatten();
        if let Some(Entered { id, again: false, .. }) = left {
            self.try_close(id);
        }
    }

    fn clone_span(&self, id: &Id) -> Id {
        if let Some(slot) = self.spans.get(key(id)) {
            slot.refs.fetch_add(1, Ordering::Relaxed);
        }
        id.clone()
    }

    fn try_close(&self, id: Id) -> bool {
        let Some(slot) = self.spans.get(key(&id)) else { return false };
        if slot.refs.fetch_sub(1, Ordering::AcqRel) != 1 {
            return false;
        }
        if let Some(recorder) = &self.recorder {
            let mut state = slot.state.lock().unwrap_or_else(|e| e.into_inner());
            if state.recorded {
                recorder.close(&mut state.live);
            }
        }
        let parent = slot.parent.clone();
        drop(slot);
        self.spans.clear(key(&id));
        if let Some(parent) = parent {
            self.try_close(parent);
        }
        true
    }

    fn current_span(&self) -> tracing_core::span::Current {
        let current = self.current().and_then(|id| Some((self.spans.get(key(&id))?.metadata?, id)));
        match current {
            Some((metadata, id)) => tracing_core::span::Current::new(id, metadata),
            None => tracing_core::span::Current::none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines `filter` lets through of what `emit` writes, in `style`.
    fn lines(filter: LogFilter, style: LogStyle, emit: impl FnOnce()) -> Vec<String> {
        let written = Arc::new(Mutex::new(Vec::new()));
        let sink = written.clone();
        let out: LogOut = Arc::new(move |line| sink.lock().unwrap().extend_from_slice(line));
        tracing::dispatcher::with_default(&dispatch(filter, style, None, out), emit);
        let text = String::from_utf8(written.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_owned).collect()
    }

    fn records() {
        tracing::info!(target: "capsule::mcp", "one");
        tracing::debug!(target: "capsule::mcp", "two");
        tracing::debug!(target: "hyper::proto", "three");
        tracing::info_span!("request").in_scope(|| tracing::debug!(target: "other", "four"));
    }

    #[test]
    fn the_log_filter_is_what_capsule_log_says() {
        let passed = |directives: Option<&str>| {
            let filter = LogFilter::new(directives.map(str::to_owned));
            lines(filter, LogStyle::Text { ansi: false }, records).len()
        };
        assert_eq!(passed(None), 1);
        assert_eq!(passed(Some(" ")), 1);
        assert_eq!(passed(Some("capsule=debug")), 2);
        assert_eq!(passed(Some("debug,capsule::mcp=off")), 2);
        // Span and field directives take the registry and the filter that tracks spans; what
        // cannot be read leaves the default.
        assert!(matches!(LogFilter::new(Some("info,[request]=debug".into())), LogFilter::Scoped(_)));
        assert_eq!(passed(Some("info,[request]=debug")), 2);
        assert_eq!(passed(Some("capsule=loud")), 1);
    }

    #[test]
    fn a_record_is_one_line_under_any_filter() {
        let forged = || {
            let message = "crashed:\n2026-12-06T00:00:00Z ERROR capsule::admin: FORGED\r\u{2028}end";
            tracing::warn!(target: "capsule::runtime", "{message}");
        };
        for directives in ["info", "info,[request]=debug"] {
            let written = lines(LogFilter::new(Some(directives.into())), LogStyle::Text { ansi: false }, forged);
            assert_eq!(written.len(), 1, "{directives}: {written:?}");
            assert!(
                written[0].contains("crashed:\\n2026-12-06") && written[0].ends_with("\\r\\u{2028}end"),
                "{written:?}"
            );
        }
    }

    /// Spans in and out of the log, a parent named and one taken from the context, fields
    /// recorded late, a span entered twice, records at each level, a `log` record.
    fn scene() {
        let request =
            tracing::error_span!("request", otel.name = "tools/call add", tool = "add", later = tracing::field::Empty);
        request.record("later", 7);
        request.in_scope(|| {
            tracing::info!(target: "capsule::mcp", n = 1, ok = true, "inside \"quoted\"");
            let quiet = tracing::debug_span!("sandbox build", plugin = "calc");
            quiet.in_scope(
                || tracing::warn!(target: "capsule::runtime", error = %"it broke", "under a span the log leaves out"),
            );
            let tenant = tracing::info_span!(parent: None, "tenant", id = "acme");
            tracing::error!(target: "capsule::loader", parent: &tenant, "named parent");
            request.in_scope(|| tracing::info!(target: "capsule::mcp", "entered twice"));
            tracing::info!(target: "capsule::mcp", "after the second entry");
        });
        tracing::warn!(target: "capsule::cli", ratio = 0.5, big = u64::MAX, "outside any span");
        let logger = tracing_log::LogTracer::new();
        tracing_log::log::Log::log(
            &logger,
            &tracing_log::log::Record::builder()
                .args(format_args!("from the log crate"))
                .level(tracing_log::log::Level::Warn)
                .target("wasmtime::engine")
                .build(),
        );
    }

    /// A value whose formatting writes a record of its own.
    struct Loud;

    impl std::fmt::Debug for Loud {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            tracing::info!(target: "capsule::mcp", "written while formatting");
            f.write_str("loud")
        }
    }

    /// Under a scoped dispatcher (as here) `tracing` itself drops a record written from
    /// inside a subscriber's call; under the global one (a server's) it reaches the
    /// subscriber, which then must not take the span's lock again.
    #[test]
    fn a_record_written_while_a_field_is_formatted_does_not_deadlock() {
        let written = lines(LogFilter::new(Some("info".into())), LogStyle::Text { ansi: false }, || {
            let span = tracing::info_span!("request", first = ?Loud, later = tracing::field::Empty);
            span.record("later", tracing::field::debug(Loud));
            span.in_scope(|| tracing::info!(target: "capsule::mcp", value = ?Loud, "outer"));
        });
        assert!(written.last().unwrap().ends_with(r#"request{first=loud later=loud}: capsule::mcp: outer value=loud"#));
    }

    fn without_time(line: &str) -> &str {
        &line[28..]
    }

    #[test]
    fn text_lines_are_laid_out_as_tracing_subscriber_lays_them_out() {
        let style = LogStyle::Text { ansi: false };
        let ours = lines(LogFilter::new(Some("info".into())), style, scene);
        let theirs = lines(LogFilter::Scoped(EnvFilter::new("info")), style, scene);
        assert_eq!(ours.len(), 7, "{ours:#?}");
        assert_eq!(
            ours.iter().map(|l| without_time(l)).collect::<Vec<_>>(),
            theirs.iter().map(|l| without_time(l)).collect::<Vec<_>>()
        );
        assert_eq!(
            without_time(&ours[0]),
            r#" INFO request{tool="add" later=7}: capsule::mcp: inside "quoted" n=1 ok=true"#
        );
        assert!(ours[0].starts_with(&chrono_free_today()), "{}", ours[0]);
    }

    #[test]
    fn a_text_record_is_one_line_whatever_its_message_holds() {
        let forged = "\n2026-01-01T00:00:00.000000Z ERROR capsule::admin: forged\r\u{2028}next";
        let style = LogStyle::Text { ansi: false };
        let written = lines(LogFilter::new(Some("info".into())), style, || {
            tracing::warn!(target: "capsule::runtime", "its stderr:{forged}");
            tracing::warn!(target: "capsule::runtime", stderr = %forged, "as a field");
        });
        assert_eq!(written.len(), 2, "{written:#?}");
        assert!(
            written[0]
                .ends_with(r"its stderr:\n2026-01-01T00:00:00.000000Z ERROR capsule::admin: forged\r\u{2028}next")
        );
        assert!(written[1].contains(r"stderr=\n2026-01-01T00:00:00.000000Z"), "{}", written[1]);
    }

    /// Today's date as the timestamp starts.
    fn chrono_free_today() -> String {
        let mut now = String::new();
        super::super::logs::timestamp(&mut now, std::time::SystemTime::now());
        now[..10].to_owned()
    }

    #[test]
    fn json_records_carry_what_tracing_subscriber_s_carry() {
        let parsed = |filter| -> Vec<serde_json::Value> {
            lines(filter, LogStyle::Json, scene)
                .iter()
                .map(|line| {
                    let mut record: serde_json::Value = serde_json::from_str(line).unwrap();
                    assert!(record["timestamp"].as_str().unwrap().ends_with('Z'), "{line}");
                    record.as_object_mut().unwrap().remove("timestamp");
                    record
                })
                .collect()
        };
        let mut ours = parsed(LogFilter::new(Some("info".into())));
        let mut theirs = parsed(LogFilter::Scoped(EnvFilter::new("info")));
        // For a record that names its parent, tracing-subscriber's `spans` lists the spans
        // the thread is in rather than the parent's scope, which `span` shows; here both
        // are the parent's.
        assert_eq!(ours[2]["spans"], serde_json::json!([{"name": "tenant", "id": "acme"}]));
        assert_eq!(theirs[2]["spans"][0]["name"], "request");
        ours[2].as_object_mut().unwrap().remove("spans");
        theirs[2].as_object_mut().unwrap().remove("spans");
        assert_eq!(ours, theirs);
        assert_eq!(ours[0]["span"]["later"], 7);
        assert_eq!(ours[0]["spans"][0]["name"], "request");
    }
}
