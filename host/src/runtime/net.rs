//! Outbound HTTP for plugins (`wasi:http/outgoing-handler`), gated by the plugin's network
//! grants. Every request is checked here, after the guest has built it and before a socket is
//! opened, so no guest-side trick (a Host header, a redirect, an IP literal) reaches a host the
//! operator did not name. Raw TCP is a separate grant, checked in the WASI context
//! (`sandbox.rs`).

use std::sync::Arc;

use http::uri::Scheme;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use crate::policy::HostRule;

type Sent = Box<dyn Future<Output = Result<(), Error>> + Send>;
type Response = Box<dyn Future<Output = Result<(http::Response<WasiBody>, Sent), Error>> + Send>;

/// The allow-list one call's outbound requests are checked against.
pub(crate) struct NetworkGate {
    plugin: Arc<str>,
    rules: Arc<[HostRule]>,
}

impl NetworkGate {
    pub fn new(plugin: Arc<str>, rules: Arc<[HostRule]>) -> Self {
        NetworkGate { plugin, rules }
    }

    /// `Ok` if a rule allows the destination of `uri`; otherwise `Err(host:port)`.
    fn admit(&self, uri: &http::Uri) -> Result<(), String> {
        let host = uri.host().unwrap_or_default();
        let port = uri.port_u16().unwrap_or(if uri.scheme() == Some(&Scheme::HTTP) { 80 } else { 443 });
        if !host.is_empty() && self.rules.iter().any(|rule| rule.allows(host, port)) {
            Ok(())
        } else {
            Err(format!("{host}:{port}"))
        }
    }
}

impl WasiHttpHooks for NetworkGate {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _response_done: Sent,
    ) -> Response {
        if let Err(destination) = self.admit(request.uri()) {
            // The guest sees wasi:http's `HTTP-request-denied`; the operator sees why.
            tracing::warn!(plugin = %self.plugin, %destination, "outbound request denied: not in the plugin's network grants");
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        // Only the destination: a path or query may carry a secret the plugin was granted.
        tracing::debug!(plugin = %self.plugin, host = ?request.uri().host(), "outbound request");
        Box::new(async move {
            use http_body_util::BodyExt;
            let (response, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            Ok((response.map(BodyExt::boxed_unsync), Box::new(io) as Sent))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(rules: &[&str]) -> NetworkGate {
        let rules: Vec<HostRule> = rules.iter().map(|r| r.parse().unwrap()).collect();
        NetworkGate::new("t".into(), rules.into())
    }

    fn admits(gate: &NetworkGate, uri: &str) -> bool {
        gate.admit(&uri.parse().unwrap()).is_ok()
    }

    #[test]
    fn only_granted_destinations_pass() {
        let gate = gate(&["api.example.com", "127.0.0.1:8080", "*.docs.rs"]);
        assert!(admits(&gate, "https://api.example.com/v1"));
        assert!(admits(&gate, "http://api.example.com/"));
        assert!(admits(&gate, "http://API.example.com./"));
        assert!(!admits(&gate, "https://api.example.com:8443/"));
        assert!(admits(&gate, "http://127.0.0.1:8080/x"));
        assert!(!admits(&gate, "http://127.0.0.1/"));
        assert!(!admits(&gate, "http://127.0.0.1:8081/"));
        assert!(admits(&gate, "https://serde.docs.rs/"));
        assert!(!admits(&gate, "https://docs.rs/"));
        assert!(!admits(&gate, "https://evil-docs.rs/"));
        assert!(!admits(&gate, "https://api.example.com.evil.net/"));
    }

    #[test]
    fn nothing_passes_without_grants() {
        let gate = gate(&[]);
        assert!(!admits(&gate, "https://example.com/"));
        assert_eq!(gate.admit(&"http://localhost:3000/".parse().unwrap()), Err("localhost:3000".into()));
    }
}
