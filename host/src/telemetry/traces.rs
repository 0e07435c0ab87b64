//! Traces: the `tracing` spans at Capsule's choke points (each request, each plugin call's
//! sandbox and guest run, each input round, each reload), exported over OTLP when the standard `OTEL_EXPORTER_OTLP_*`
//! variables name an endpoint, and continuing the client's trace when a request carries W3C
//! trace context (`traceparent`/`tracestate`, in HTTP headers or in `params._meta`).

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TraceId, TracerProvider as _};
use opentelemetry_otlp::SpanExporter;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SdkTracerProvider};
use thiserror::Error;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

/// Why traces cannot be exported as the environment asks.
#[derive(Debug, Error)]
pub enum TraceSetupError {
    #[error("OTEL_EXPORTER_OTLP_PROTOCOL={0} is not supported: Capsule exports OTLP over http/protobuf")]
    Protocol(String),
    #[error("cannot set up the OTLP exporter: {0}")]
    Exporter(String),
}

/// The span exporter, flushed when dropped.
pub struct Traces {
    provider: SdkTracerProvider,
}

/// The variables that name an OTLP endpoint for traces.
const ENDPOINTS: [&str; 2] = ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"];

impl Traces {
    /// The exporter the environment asks for, if it names an endpoint (and
    /// `OTEL_TRACES_EXPORTER` is not `none`). The exporter reads the rest of the standard
    /// variables itself (headers, timeout; `OTEL_BSP_*` for batching, `OTEL_SERVICE_NAME`
    /// and `OTEL_RESOURCE_ATTRIBUTES` for the resource).
    pub fn from_env() -> Result<Option<Traces>, TraceSetupError> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        if var("OTEL_TRACES_EXPORTER").is_some_and(|v| v == "none") || !ENDPOINTS.iter().any(|name| var(name).is_some())
        {
            return Ok(None);
        }
        let protocol = var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"));
        if let Some(protocol) = protocol.filter(|p| p != "http/protobuf") {
            return Err(TraceSetupError::Protocol(protocol));
        }
        let exporter =
            SpanExporter::builder().with_http().build().map_err(|e| TraceSetupError::Exporter(e.to_string()))?;
        let resource = match var("OTEL_SERVICE_NAME") {
            Some(_) => Resource::builder().build(),
            None => Resource::builder().with_service_name("capsule").build(),
        };
        let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
        Ok(Some(Traces { provider }))
    }

    /// The layer that turns `tracing` spans into OpenTelemetry spans.
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        // Only the attributes the spans name: source locations, thread names, targets and
        // busy/idle times would triple what each span costs to build, encode and send. Nor is
        // a span's OpenTelemetry context made current on every poll: nothing in Capsule reads
        // it (spans find their parents through `tracing`), and attaching it costs a context
        // clone and a thread-local push per poll.
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("capsule"))
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            .with_context_activation(false)
    }
}

impl Drop for Traces {
    fn drop(&mut self) {
        // Spans still batched are sent before the process ends.
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!("exporting the last spans failed: {e}");
        }
    }
}

/// Start `span`'s trace: as a child of the client's span when `parent` (`traceparent`, and
/// `tracestate` if any) is valid W3C trace context, else as a new trace. Its `trace_id` field
/// gets the trace's id, so that every log record written inside it carries the id the exported
/// spans have (or, without an exporter, the client's, else a fresh one that still groups the
/// records). Call it before the span is first entered.
pub fn start_trace(span: &tracing::Span, parent: Option<(&str, Option<&str>)>) {
    if span.is_disabled() {
        return;
    }
    let parent = parent.map(|(traceparent, tracestate)| {
        let mut carrier = HashMap::with_capacity(2);
        carrier.insert("traceparent".to_owned(), traceparent.to_owned());
        if let Some(state) = tracestate {
            carrier.insert("tracestate".to_owned(), state.to_owned());
        }
        TraceContextPropagator::new().extract(&carrier)
    });
    if let Some(parent) = &parent {
        // A span without an OpenTelemetry side (no exporter) keeps no parent.
        let _ = span.set_parent(parent.clone());
    }
    // Starts the exported span (its name and parent are fixed by now) to learn its trace id.
    let exported = span.context().span().span_context().trace_id();
    let client = parent.map(|p| p.span().span_context().trace_id()).unwrap_or(TraceId::INVALID);
    let id = [exported, client].into_iter().find(|id| *id != TraceId::INVALID);
    let id = id.unwrap_or_else(|| RandomIdGenerator::default().new_trace_id());
    span.record("trace_id", tracing::field::display(id));
}
