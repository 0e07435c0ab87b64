//! Traces: the `tracing` spans at Capsule's choke points (each request, each plugin call's
//! sandbox and guest run, each input round, each reload), exported over OTLP when the
//! standard `OTEL_EXPORTER_OTLP_*` variables name an endpoint, and continuing the client's
//! trace when a request carries W3C trace context (`traceparent`/`tracestate`, in HTTP
//! headers or in `params._meta`).
//!
//! The settings are read from the environment first ([`TraceConfig::from_vars`], pure); then
//! the certificate is read, the HTTP client built and the export thread started.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use thiserror::Error;

use super::export::{self, Batching, Destination, Queue};
use super::otlp::{Attribute, Value};
use super::spans::{Rule, Sampler, SpanLimits, SpanRecorder};

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
    /// The value is named only when it cannot be a secret.
    #[error("{var}: {reason}")]
    Invalid { var: &'static str, reason: String },
}

/// What the environment asks of the exporter.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceConfig {
    url: reqwest::Url,
    headers: Vec<(HeaderName, HeaderValue)>,
    timeout: Duration,
    /// The variable and the path of a PEM bundle of CAs to trust.
    certificate: Option<(&'static str, String)>,
    batching: Batching,
    sampler: Sampler,
    limits: SpanLimits,
    resource: Vec<Attribute>,
}

/// The span exporter, flushed when dropped (for up to [`LAST_EXPORT`]).
pub struct Traces {
    queue: Arc<Queue>,
    /// The export thread, and what tells that it has ended (its sender is dropped with it).
    exporter: Option<(std::thread::JoinHandle<()>, std::sync::mpsc::Receiver<()>)>,
    sampler: Sampler,
    limits: SpanLimits,
}

impl Traces {
    /// The exporter the environment asks for, if it names an endpoint (and neither
    /// `OTEL_SDK_DISABLED` nor `OTEL_TRACES_EXPORTER=none` turns it off).
    pub fn from_env() -> Result<Option<Traces>, TraceSetupError> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        TraceConfig::from_vars(var)?.map(Traces::start).transpose()
    }

    /// Build the HTTP client and start the export thread.
    fn start(config: TraceConfig) -> Result<Traces, TraceSetupError> {
        let client = http_client(config.certificate.as_ref(), config.timeout)?;
        let queue = Arc::new(Queue::new(config.batching));
        let destination = Destination {
            url: config.url,
            headers: config.headers.into_iter().collect(),
            client,
            resource: config.resource,
        };
        let exporting = queue.clone();
        let (ended, ending) = std::sync::mpsc::channel();
        let exporter = std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || {
                let _ended = ended;
                export::run(exporting, destination);
            })
            .map_err(|e| TraceSetupError::Exporter(format!("cannot start its thread: {e}")))?;
        Ok(Traces { queue, exporter: Some((exporter, ending)), sampler: config.sampler, limits: config.limits })
    }

    /// A recorder of spans into the export queue.
    pub fn recorder(&self) -> SpanRecorder {
        SpanRecorder::new(self.queue.clone(), self.sampler, self.limits)
    }
}

/// How long an ending process waits for the spans still queued to be sent: a collector that
/// hangs must not hold the exit off (each export may take `OTEL_EXPORTER_OTLP_TIMEOUT`).
const LAST_EXPORT: Duration = Duration::from_secs(5);

impl Drop for Traces {
    fn drop(&mut self) {
        // Spans still queued are sent before the process ends, for as long as it waits.
        self.queue.stop();
        if let Some((exporter, ending)) = self.exporter.take() {
            match ending.recv_timeout(LAST_EXPORT) {
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    tracing::warn!(
                        "the spans still queued were not all sent within {LAST_EXPORT:?}; the rest are lost"
                    );
                }
                _ => drop(exporter.join()),
            }
        }
    }
}

/// The variables that name an OTLP endpoint for traces: the first is used as it is, the
/// second gets `/v1/traces` appended.
const ENDPOINTS: [&str; 2] = ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"];

impl TraceConfig {
    /// Read the standard variables through `var` (unset and empty are alike). `None` when
    /// traces are not exported.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<TraceConfig>, TraceSetupError> {
        let either = |names: [&'static str; 2]| names.into_iter().find_map(|name| var(name).map(|value| (name, value)));
        let invalid = |var: &'static str, reason: String| TraceSetupError::Invalid { var, reason };
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        // Enumerated values are read whatever their case, as the SDK configuration spec asks.
        let lower = |value: String| value.to_ascii_lowercase();
        match var("OTEL_TRACES_EXPORTER").map(lower).as_deref() {
            Some("none") => return Ok(None),
            None | Some("otlp") => {}
            Some(other) => {
                return Err(invalid("OTEL_TRACES_EXPORTER", format!("{other} is not supported (otlp or none)")));
            }
        }
        let Some((name, endpoint)) = either(ENDPOINTS) else { return Ok(None) };
        let shown = without_userinfo(&endpoint);
        let mut url =
            reqwest::Url::parse(&endpoint).map_err(|e| invalid(name, format!("{shown} is not a URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid(name, format!("{shown}: OTLP/HTTP needs an http or https URL")));
        }
        // The general endpoint's path gets the signal's; a query stays a query.
        if name == ENDPOINTS[1]
            && let Ok(mut path) = url.path_segments_mut()
        {
            path.pop_if_empty().extend(["v1", "traces"]);
        }
        if let Some((_, protocol)) = either(["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"])
            && !protocol.eq_ignore_ascii_case("http/protobuf")
        {
            return Err(TraceSetupError::Protocol(protocol));
        }
        if let Some((name, compression)) =
            either(["OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION"])
            && !compression.eq_ignore_ascii_case("none")
        {
            return Err(invalid(name, format!("{compression} is not supported: spans are sent uncompressed")));
        }
        for names in [
            ["OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"],
            ["OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "OTEL_EXPORTER_OTLP_CLIENT_KEY"],
        ] {
            if let Some((name, _)) = either(names) {
                return Err(TraceSetupError::ClientCertificate(name));
            }
        }
        let mut headers = Vec::new();
        // The general headers first, so that the traces-specific ones win.
        for name in ["OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"] {
            let text = var(name).unwrap_or_default();
            // A pair without `=` (`Authorization: Bearer …` written as HTTP has it) would
            // send every export without the credential.
            if text.split(',').any(|pair| !pair.trim().is_empty() && !pair.contains('=')) {
                return Err(invalid(name, "every header must be written key=value, comma-separated".into()));
            }
            for (key, value) in pairs(&text) {
                // Not repeated either: a value holding `=` (base64 padding) puts part of a
                // key before it.
                let key = HeaderName::try_from(key.as_str()).map_err(|_| {
                    invalid(name, "a header's name (what comes before its first `=`) is not a valid one".into())
                })?;
                // The value is not repeated in the error: it is often an API key.
                let value = HeaderValue::try_from(value)
                    .map_err(|_| invalid(name, format!("the value of {key} is not a header value")))?;
                headers.retain(|(k, _): &(HeaderName, HeaderValue)| *k != key);
                headers.push((key, value));
            }
        }
        let number = |names: [&'static str; 2], default: u64| -> Result<u64, TraceSetupError> {
            match either(names) {
                None => Ok(default),
                Some((name, value)) => {
                    value.parse().map_err(|_| invalid(name, format!("{value} is not a whole number")))
                }
            }
        };
        let one = |name: &'static str| [name, name];
        // A zero timeout would fail every export: refused, rather than read as no limit (which
        // a collector that never answers would hold for good).
        let timeout = |names: [&'static str; 2], default: u64| match number(names, default)? {
            0 => Err(invalid(either(names).map_or(names[0], |(name, _)| name), "0 ms would fail every export".into())),
            millis => Ok(Duration::from_millis(millis)),
        };
        let timeout = timeout(["OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"], 10_000)?
            .min(timeout(one("OTEL_BSP_EXPORT_TIMEOUT"), 30_000)?);
        let max_queue = number(one("OTEL_BSP_MAX_QUEUE_SIZE"), 2_048)?.max(1) as usize;
        let batching = Batching {
            max_queue,
            max_batch: (number(one("OTEL_BSP_MAX_EXPORT_BATCH_SIZE"), 512)?.max(1) as usize).min(max_queue),
            // At least a millisecond: a zero delay would have the exporter spin.
            delay: Duration::from_millis(number(one("OTEL_BSP_SCHEDULE_DELAY"), 5_000)?.max(1)),
        };
        let limits = SpanLimits {
            attributes: number(one("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT"), 128)? as usize,
            events: number(one("OTEL_SPAN_EVENT_COUNT_LIMIT"), 128)? as usize,
        };
        let ratio = match var("OTEL_TRACES_SAMPLER_ARG") {
            None => 1.0,
            Some(arg) => arg
                .parse::<f64>()
                .ok()
                .filter(|r| (0.0..=1.0).contains(r))
                .ok_or_else(|| invalid("OTEL_TRACES_SAMPLER_ARG", format!("{arg} is not a ratio from 0 to 1")))?,
        };
        let sampler = match var("OTEL_TRACES_SAMPLER").map(lower).as_deref().unwrap_or("parentbased_always_on") {
            "always_on" => Sampler { root: Rule::On, parent_based: false },
            "always_off" => Sampler { root: Rule::Off, parent_based: false },
            "traceidratio" => Sampler { root: Rule::ratio(ratio), parent_based: false },
            "parentbased_always_on" => Sampler { root: Rule::On, parent_based: true },
            "parentbased_always_off" => Sampler { root: Rule::Off, parent_based: true },
            "parentbased_traceidratio" => Sampler { root: Rule::ratio(ratio), parent_based: true },
            other => return Err(invalid("OTEL_TRACES_SAMPLER", format!("{other} is not a sampler Capsule has"))),
        };
        let certificate = either(["OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE"]);
        Ok(Some(TraceConfig {
            url,
            headers,
            timeout,
            certificate,
            batching,
            sampler,
            limits,
            resource: resource(&var),
        }))
    }
}

/// `OTEL_RESOURCE_ATTRIBUTES`, with `OTEL_SERVICE_NAME` (else `capsule`) as `service.name`.
fn resource(var: &impl Fn(&str) -> Option<String>) -> Vec<Attribute> {
    let mut attributes: Vec<Attribute> = var("OTEL_RESOURCE_ATTRIBUTES")
        .as_deref()
        .map(pairs)
        .unwrap_or_default()
        .into_iter()
        .map(|(key, value)| Attribute { key: key.into(), value: Value::Str(value.into()) })
        .collect();
    // A resource's keys are unique (OTLP's resource.proto): a key given twice keeps its
    // last value.
    let mut seen = std::collections::HashSet::new();
    attributes.reverse();
    attributes.retain(|a| seen.insert(a.key.clone()));
    attributes.reverse();
    let service = var("OTEL_SERVICE_NAME");
    if service.is_some() || !attributes.iter().any(|a| a.key == "service.name") {
        attributes.retain(|a| a.key != "service.name");
        let name = service.unwrap_or_else(|| "capsule".into());
        attributes.push(Attribute { key: "service.name".into(), value: Value::Str(name.into()) });
    }
    for (key, value) in [
        ("telemetry.sdk.name", "capsule"),
        ("telemetry.sdk.language", "rust"),
        ("telemetry.sdk.version", env!("CARGO_PKG_VERSION")),
    ] {
        // The environment's resource wins over the SDK's own, as the SDK's merge has it.
        if !attributes.iter().any(|a| a.key == key) {
            attributes.push(Attribute { key: key.into(), value: Value::Str(value.into()) });
        }
    }
    attributes
}

/// `endpoint` with what may be a password in it left out, for an error to show: everything
/// up to its last `@` (a password may hold `/`, `?` or `#`, which is why the URL did not
/// parse).
fn without_userinfo(endpoint: &str) -> String {
    match endpoint.rfind('@') {
        Some(at) => format!("…@{}", &endpoint[at + 1..]),
        None => endpoint.to_owned(),
    }
}

/// `key=value` pairs, comma-separated, values percent-decoded (the W3C Baggage format the
/// `OTEL_*_HEADERS` and `OTEL_RESOURCE_ATTRIBUTES` variables use); pairs without `=` are
/// skipped.
fn pairs(text: &str) -> Vec<(String, String)> {
    text.split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| {
            let value = percent_encoding::percent_decode_str(value.trim()).decode_utf8_lossy();
            (key.trim().to_owned(), value.into_owned())
        })
        .filter(|(key, _)| !key.is_empty())
        .collect()
}

/// The exporter's HTTP client: TLS by rustls and ring for `https` endpoints, trusting the
/// webpki roots and the PEM bundle `OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE` names (a
/// collector with a private CA).
fn http_client(
    certificate: Option<&(&'static str, String)>,
    timeout: Duration,
) -> Result<reqwest::Client, TraceSetupError> {
    let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    if let Some((name, path)) = certificate {
        let refused = |reason: String| TraceSetupError::Certificate { var: name, path: path.clone(), reason };
        let certificates = CertificateDer::pem_file_iter(path)
            .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
            .map_err(|e| refused(e.to_string()))?;
        if certificates.is_empty() {
            return Err(refused("no PEM certificate in it".into()));
        }
        for certificate in certificates {
            roots.add(certificate).map_err(|e| refused(e.to_string()))?;
        }
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| TraceSetupError::Exporter(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .timeout(timeout)
        .redirect(redirects())
        .build()
        .map_err(|e| TraceSetupError::Exporter(e.to_string()))
}

/// The most redirects one export follows.
const MAX_REDIRECTS: usize = 5;

/// The redirects an export follows: `307` and `308` (which keep it a POST with its body) within
/// the endpoint's origin. Another origin is refused: the spans and the configured headers
/// (often an API key) would go to a host the operator never named, and reqwest strips only the
/// standard credential headers on such a hop (and none on `https` to `http` on one host). A
/// `301`, `302` or `303` would turn the export into a GET without its spans.
fn redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let (status, to) = (attempt.status(), attempt.url().origin());
        let from = attempt.previous().last().map(reqwest::Url::origin);
        if !matches!(status.as_u16(), 307 | 308) {
            attempt.error(format!("the collector answered {status}, a redirect that would turn the export into a GET"))
        } else if from.as_ref() != Some(&to) {
            let to = to.ascii_serialization();
            attempt.error(format!(
                "the collector redirected the export to {to}, another origin: not followed, so that spans and \
                 headers go only where the endpoint says"
            ))
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("the collector redirected the export more than {MAX_REDIRECTS} times"))
        } else {
            attempt.follow()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> + Copy {
        move |name| pairs.iter().find(|(key, _)| *key == name).map(|(_, value)| (*value).to_owned())
    }

    const AT: (&str, &str) = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/");

    #[test]
    fn the_standard_variables_configure_the_exporter() {
        assert_eq!(TraceConfig::from_vars(env(&[])).unwrap(), None);
        assert_eq!(TraceConfig::from_vars(env(&[AT, ("OTEL_TRACES_EXPORTER", "none")])).unwrap(), None);
        assert_eq!(TraceConfig::from_vars(env(&[AT, ("OTEL_TRACES_EXPORTER", "NONE")])).unwrap(), None);
        let upper = TraceConfig::from_vars(env(&[
            AT,
            ("OTEL_TRACES_EXPORTER", "OTLP"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "HTTP/PROTOBUF"),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "None"),
            ("OTEL_TRACES_SAMPLER", "ALWAYS_OFF"),
        ]));
        assert_eq!(upper.unwrap().unwrap().sampler, Sampler { root: Rule::Off, parent_based: false });
        assert_eq!(TraceConfig::from_vars(env(&[AT, ("OTEL_SDK_DISABLED", "true")])).unwrap(), None);
        let config = TraceConfig::from_vars(env(&[
            AT,
            ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=one,x-tenant=a%20b"),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "api-key=two"),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "2500"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "100"),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.5"),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test,service.name=ignored"),
            ("OTEL_SERVICE_NAME", "edge"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(config.url.as_str(), "http://127.0.0.1:4318/v1/traces");
        let headers: Vec<_> = config.headers.iter().map(|(k, v)| (k.as_str(), v.to_str().unwrap())).collect();
        assert_eq!(headers, [("x-tenant", "a b"), ("api-key", "two")]);
        assert_eq!(config.timeout, Duration::from_millis(2500));
        assert_eq!((config.batching.max_queue, config.batching.max_batch), (100, 100));
        assert_eq!(config.batching.delay, Duration::from_secs(5));
        let at_once = TraceConfig::from_vars(env(&[AT, ("OTEL_BSP_SCHEDULE_DELAY", "0")])).unwrap().unwrap();
        assert_eq!(at_once.batching.delay, Duration::from_millis(1));
        assert_eq!(config.sampler, Sampler { root: Rule::ratio(0.5), parent_based: true });
        let resource: Vec<_> = config.resource.iter().map(|a| (&*a.key, a.value.clone())).take(2).collect();
        assert_eq!(
            resource,
            [("deployment.environment", Value::Str("test".into())), ("service.name", Value::Str("edge".into()))]
        );
        // The traces endpoint is used as it is.
        let config = TraceConfig::from_vars(env(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://c.example/otlp")]));
        assert_eq!(config.unwrap().unwrap().url.as_str(), "https://c.example/otlp");
        // The general one gets the signal's path after its own, before its query.
        let url = |endpoint: &'static str| {
            let pairs: &'static [(&str, &str)] = Box::leak(Box::new([("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)]));
            TraceConfig::from_vars(env(pairs)).unwrap().unwrap().url.to_string()
        };
        assert_eq!(url("http://c.example/base?tenant=a"), "http://c.example/base/v1/traces?tenant=a");
        assert_eq!(url("http://c.example/base/"), "http://c.example/base/v1/traces");
        assert_eq!(url("http://c.example:4318"), "http://c.example:4318/v1/traces");
        // A resource's keys are unique: the last value given wins, over the exporter's own
        // too.
        let config = TraceConfig::from_vars(env(&[
            AT,
            ("OTEL_RESOURCE_ATTRIBUTES", "a=1,telemetry.sdk.name=x,a=2,service.name=s,service.name=t"),
        ]))
        .unwrap()
        .unwrap();
        let resource: Vec<_> = config.resource.iter().map(|a| (&*a.key, a.value.clone())).collect();
        let keys: Vec<_> = resource.iter().map(|(key, _)| *key).collect();
        assert_eq!(
            keys,
            ["telemetry.sdk.name", "a", "service.name", "telemetry.sdk.language", "telemetry.sdk.version"]
        );
        assert_eq!(resource[0].1, Value::Str("x".into()));
        assert_eq!(resource[1].1, Value::Str("2".into()));
        assert_eq!(resource[2].1, Value::Str("t".into()));
    }

    #[test]
    fn the_exporter_refuses_what_it_cannot_honour_and_never_repeats_a_header_value() {
        let refused = |pairs| TraceConfig::from_vars(env(pairs)).unwrap_err();
        let e = refused(&[AT, ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "key.pem")]);
        assert!(matches!(e, TraceSetupError::ClientCertificate("OTEL_EXPORTER_OTLP_CLIENT_KEY")), "{e}");
        let e = refused(&[AT, ("OTEL_EXPORTER_OTLP_TIMEOUT", "10s")]);
        assert!(e.to_string().starts_with("OTEL_EXPORTER_OTLP_TIMEOUT: "), "{e}");
        let e = refused(&[AT, ("OTEL_BSP_EXPORT_TIMEOUT", "0")]);
        assert!(e.to_string().starts_with("OTEL_BSP_EXPORT_TIMEOUT: 0 ms"), "{e}");
        let e = refused(&[AT, ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "0")]);
        assert!(e.to_string().starts_with("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: "), "{e}");
        assert!(matches!(refused(&[AT, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]), TraceSetupError::Protocol(_)));
        let e = refused(&[AT, ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")]);
        assert!(e.to_string().contains("gzip"), "{e}");
        let e = refused(&[AT, ("OTEL_TRACES_SAMPLER", "jaeger_remote")]);
        assert!(e.to_string().contains("jaeger_remote"), "{e}");
        let e = refused(&[AT, ("OTEL_TRACES_SAMPLER_ARG", "2")]);
        assert!(e.to_string().contains("ratio"), "{e}");
        let e = refused(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://collector")]);
        assert!(e.to_string().contains("http or https"), "{e}");
        let e = refused(&[AT, ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer secret\u{7f}token")]);
        assert!(!e.to_string().contains("secret"), "{e}");
        let e = refused(&[AT, ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-tenant=a,Authorization: Bearer secret")]);
        assert!(e.to_string().contains("key=value") && !e.to_string().contains("secret"), "{e}");
        // Base64 padding puts part of the value before the first `=`, in the "name".
        let e = refused(&[AT, ("OTEL_EXPORTER_OTLP_HEADERS", "Authorization: Bearer c2VjcmV0==")]);
        assert!(!e.to_string().contains("c2VjcmV0"), "{e}");
        // Nor is a password in an endpoint that is no URL.
        for endpoint in [
            "http://user:hunter2@127.0.0.1:99999/v1/traces",
            "http://user:hun/ter2@127.0.0.1:4318/v1/traces",
            "http://user:hun#ter2@127.0.0.1:4318/v1/traces",
            "http:/user:hunter2@127.0.0.1:99999/",
            "ftp:/user:hunter2@collector/",
        ] {
            let pairs: &'static [(&str, &str)] =
                Box::leak(Box::new([("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)]));
            let e = refused(pairs);
            assert!(!e.to_string().contains("ter2"), "{e}");
        }
    }

    #[test]
    fn a_certificate_bundle_must_hold_certificates() {
        let config = TraceConfig::from_vars(env(&[
            AT,
            ("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "/nonexistent/ca.pem"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/elsewhere/ca.pem"),
        ]))
        .unwrap()
        .unwrap();
        // The traces-specific variable wins over the general one.
        let refused = http_client(config.certificate.as_ref(), config.timeout).unwrap_err();
        assert!(
            refused.to_string().starts_with("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE=/nonexistent/ca.pem: "),
            "{refused}"
        );
        assert!(http_client(None, config.timeout).is_ok());
    }
}
