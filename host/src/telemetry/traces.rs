//! Traces: the `tracing` spans at Capsule's choke points (each request, each plugin call's
//! sandbox and guest run), exported over OTLP when the standard `OTEL_EXPORTER_OTLP_*`
//! variables name an endpoint, and continuing the client's trace when a request carries W3C
//! trace context (`traceparent`/`tracestate`, in HTTP headers or in `params._meta`).

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::SpanExporter;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
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
        // busy/idle times would triple what each span costs to build, encode and send.
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("capsule"))
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_tracked_inactivity(false)
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

/// Make `span` a child of the client's span, when `traceparent` is valid W3C trace context.
/// Call it before the span is first entered. Without an exporter this does nothing.
pub fn continue_trace(span: &tracing::Span, traceparent: &str, tracestate: Option<&str>) {
    let mut carrier = HashMap::with_capacity(2);
    carrier.insert("traceparent".to_owned(), traceparent.to_owned());
    if let Some(state) = tracestate {
        carrier.insert("tracestate".to_owned(), state.to_owned());
    }
    let parent = TraceContextPropagator::new().extract(&carrier);
    // A span without an OpenTelemetry side (no exporter) keeps no parent.
    let _ = span.set_parent(parent);
}
