//! Outbound HTTP for plugins (`wasi:http/outgoing-handler`), gated by the plugin's network
//! grants. Every request is checked here, after the guest has built it and before a socket is
//! opened, so no guest-side trick (a Host header, a redirect, an IP literal) reaches a host the
//! operator did not name. Raw TCP is a separate grant, checked in the WASI context
//! (`sandbox.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http::uri::Scheme;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use crate::policy::HostRule;

type Sent = Box<dyn Future<Output = Result<(), Error>> + Send>;
type Response = Box<dyn Future<Output = Result<(http::Response<WasiBody>, Sent), Error>> + Send>;

/// The most outbound requests one call may have open at once. Their connections, DNS
/// lookups and TLS handshakes run outside the call's CPU deadline and memory cap, so a plugin
/// that starts requests without waiting for them would otherwise hold the worker's resources
/// without bound. A request over the limit gets wasi:http's `connection-limit-reached`.
pub(crate) const MAX_REQUESTS_IN_FLIGHT: usize = 32;

/// The allow-list one call's outbound requests are checked against.
pub(crate) struct NetworkGate {
    plugin: Arc<str>,
    rules: Arc<[HostRule]>,
    /// The call's requests whose connection is still open.
    in_flight: Arc<AtomicUsize>,
    /// Requests refused so far: only the first is a warning, so that a plugin looping on a
    /// refused request cannot flood the log.
    refused: usize,
}

/// One open request's place under [`MAX_REQUESTS_IN_FLIGHT`], given back when its connection
/// ends (or the call's store, which aborts it, is dropped).
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl NetworkGate {
    pub fn new(plugin: Arc<str>, rules: Arc<[HostRule]>) -> Self {
        NetworkGate { plugin, rules, in_flight: Arc::default(), refused: 0 }
    }

    /// `Ok` if a rule allows the destination of `uri`; otherwise `Err(host:port)`.
    fn admit(&self, uri: &http::Uri) -> Result<(), String> {
        let host = uri.host().unwrap_or_default();
        let port = uri.port_u16().unwrap_or(if uri.scheme() == Some(&Scheme::HTTP) { 80 } else { 443 });
        // Userinfo (`user@host`) is checked as the host after it, but the connector would
        // resolve the authority with it: refused, as no HTTP request needs it.
        let userinfo = uri.authority().is_some_and(|a| a.as_str().contains('@'));
        if !host.is_empty() && !userinfo && self.rules.iter().any(|rule| rule.allows(host, port)) {
            Ok(())
        } else {
            Err(format!("{host}:{port}"))
        }
    }

    /// A place for one more open request, if the call has one left.
    fn slot(&self) -> Option<Slot> {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < MAX_REQUESTS_IN_FLIGHT).then_some(n + 1))
            .ok()
            .map(|_| Slot(self.in_flight.clone()))
    }

    /// Tell the operator why a request was refused: the first time in a call as a warning,
    /// later ones at debug level.
    fn refuse(&mut self, why: &str, destination: &str) {
        self.refused += 1;
        if self.refused == 1 {
            tracing::warn!(plugin = %self.plugin, %destination, "outbound request refused: {why} (further refusals in this call are logged at debug level)");
        } else {
            tracing::debug!(plugin = %self.plugin, %destination, refused = self.refused, "outbound request refused: {why}");
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
            self.refuse("not in the plugin's network grants", &destination);
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        let Some(slot) = self.slot() else {
            let host = request.uri().host().unwrap_or_default().to_owned();
            self.refuse(&format!("more than {MAX_REQUESTS_IN_FLIGHT} requests open at once"), &host);
            return Box::new(async { Err(Error::ConnectionLimitReached) });
        };
        // Only the destination: a path or query may carry a secret the plugin was granted.
        tracing::debug!(plugin = %self.plugin, host = ?request.uri().host(), "outbound request");
        Box::new(async move {
            use http_body_util::BodyExt;
            let (response, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            let io = async move {
                let _slot = slot;
                io.await
            };
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
    fn userinfo_is_refused_whatever_host_follows() {
        let gate = gate(&["api.example.com"]);
        assert!(!admits(&gate, "http://evil@api.example.com/"));
        assert!(!admits(&gate, "https://user:pass@api.example.com/"));
        assert!(admits(&gate, "https://api.example.com/?next=a@b"));
    }

    #[test]
    fn a_call_has_a_bounded_number_of_requests_open() {
        let gate = gate(&["api.example.com"]);
        let slots: Vec<Slot> = (0..MAX_REQUESTS_IN_FLIGHT).map(|_| gate.slot().expect("a slot")).collect();
        assert!(gate.slot().is_none(), "one past the limit");
        drop(slots.into_iter().next());
        assert!(gate.slot().is_some(), "a finished request gives its place back");
    }

    #[test]
    fn nothing_passes_without_grants() {
        let gate = gate(&[]);
        assert!(!admits(&gate, "https://example.com/"));
        assert_eq!(gate.admit(&"http://localhost:3000/".parse().unwrap()), Err("localhost:3000".into()));
    }
}
