//! Traces: the `tracing` spans at Capsule's choke points (each request, each plugin call's
//! sandbox and guest run, each input round, each reload), exported over OTLP when the standard `OTEL_EXPORTER_OTLP_*`
//! variables name an endpoint, and continuing the client's trace when a request carries W3C
//! trace context (`traceparent`/`tracestate`, in HTTP headers or in `params._meta`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TraceId, TracerProvider as _};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{SpanExporter, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SdkTracerProvider};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
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
    #[error("{var}={path}: {reason}")]
    Certificate { var: &'static str, path: String, reason: String },
    #[error("{0} is not supported: Capsule's OTLP exporter does not present a client certificate")]
    ClientCertificate(&'static str),
    #[error("{var}={value} is not a timeout in milliseconds")]
    Timeout { var: &'static str, value: String },
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
        let exporter = SpanExporter::builder()
            .with_http()
            .with_http_client(Reported { client: http_client(var)?, failing: AtomicBool::new(false) })
            .build()
            .map_err(|e| TraceSetupError::Exporter(e.to_string()))?;
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

/// The exporter's HTTP client, saying in the log when exports start failing and why (the whole
/// cause: an untrusted certificate, a refused connection, the collector's answer) and when they
/// work again: once each, not once a batch. The OTLP exporter itself reports only "network
/// error", and the SDK's own diagnostics are compiled out.
#[derive(Debug)]
struct Reported {
    client: reqwest_otlp::blocking::Client,
    failing: AtomicBool,
}

#[async_trait::async_trait]
impl HttpClient for Reported {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let result = self.client.send_bytes(request).await;
        let failure = match &result {
            Err(e) => {
                let mut why = e.to_string();
                let mut source = e.source();
                while let Some(cause) = source {
                    why = format!("{why}: {cause}");
                    source = cause.source();
                }
                Some(why)
            }
            Ok(response) if !response.status().is_success() => {
                Some(format!("the collector answered {}", response.status()))
            }
            Ok(_) => None,
        };
        match failure {
            Some(why) if !self.failing.swap(true, Ordering::Relaxed) => {
                tracing::warn!(
                    "exporting spans over OTLP failed (that batch is dropped; the next ones are still sent): {why}"
                )
            }
            None if self.failing.swap(false, Ordering::Relaxed) => {
                tracing::info!("exporting spans over OTLP works again")
            }
            _ => {}
        }
        result
    }
}

/// The exporter's HTTP client: TLS by rustls and ring for `https` endpoints, trusting the
/// webpki roots and the PEM bundle `OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE` names (a
/// collector with a private CA); the timeout from `OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT`
/// (milliseconds, 10 s by default). Client certificates (mutual TLS) are refused rather than
/// ignored.
fn http_client(var: impl Fn(&str) -> Option<String>) -> Result<reqwest_otlp::blocking::Client, TraceSetupError> {
    let either = |names: [&'static str; 2]| names.into_iter().find_map(|name| var(name).map(|value| (name, value)));
    for names in [
        ["OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"],
        ["OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "OTEL_EXPORTER_OTLP_CLIENT_KEY"],
    ] {
        if let Some((name, _)) = either(names) {
            return Err(TraceSetupError::ClientCertificate(name));
        }
    }
    let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    if let Some((name, path)) = either(["OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE"]) {
        let refused = |reason: String| TraceSetupError::Certificate { var: name, path: path.clone(), reason };
        let certificates = CertificateDer::pem_file_iter(&path)
            .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
            .map_err(|e| refused(e.to_string()))?;
        if certificates.is_empty() {
            return Err(refused("no PEM certificate in it".into()));
        }
        for certificate in certificates {
            roots.add(certificate).map_err(|e| refused(e.to_string()))?;
        }
    }
    let timeout = match either(["OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"]) {
        None => Duration::from_secs(10),
        Some((name, value)) => Duration::from_millis(
            value.parse().map_err(|_| TraceSetupError::Timeout { var: name, value: value.clone() })?,
        ),
    };
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| TraceSetupError::Exporter(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // reqwest's blocking client starts a runtime of its own, which cannot be made inside
    // Capsule's.
    std::thread::spawn(move || {
        reqwest_otlp::blocking::Client::builder().tls_backend_preconfigured(tls).timeout(timeout).build()
    })
    .join()
    .map_err(|_| TraceSetupError::Exporter("building its HTTP client panicked".into()))?
    .map_err(|e| TraceSetupError::Exporter(e.to_string()))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> + Copy {
        move |name| pairs.iter().find(|(key, _)| *key == name).map(|(_, value)| (*value).to_owned())
    }

    #[test]
    fn the_exporter_s_client_refuses_what_it_cannot_honour() {
        let refused = http_client(env(&[("OTEL_EXPORTER_OTLP_CLIENT_KEY", "key.pem")])).unwrap_err();
        assert!(matches!(refused, TraceSetupError::ClientCertificate("OTEL_EXPORTER_OTLP_CLIENT_KEY")), "{refused}");
        let refused = http_client(env(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "10s")])).unwrap_err();
        assert!(matches!(refused, TraceSetupError::Timeout { .. }), "{refused}");
        // The traces-specific variable wins over the general one.
        let refused = http_client(env(&[
            ("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "/nonexistent/ca.pem"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/elsewhere/ca.pem"),
        ]))
        .unwrap_err();
        assert!(
            refused.to_string().starts_with("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE=/nonexistent/ca.pem: "),
            "{refused}"
        );
        assert!(http_client(env(&[("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "2500")])).is_ok());
    }
}
