//! The checks every HTTP request passes before its body is read: the Host and Origin
//! headers (DNS-rebinding protection), and what the client accepts and sends.

use axum::http::HeaderMap;
use axum::http::header::{ACCEPT, CONTENT_TYPE, HOST, ORIGIN};
use axum::http::uri::Authority;

/// Host names and origins the endpoint answers to.
#[derive(Debug, Clone)]
pub struct Allowed {
    /// `host` or `host:port` entries; without a port any port matches.
    hosts: Vec<String>,
    /// `scheme://host`, `scheme://host:port` or `scheme://host:*` entries, or `null`.
    origins: Vec<String>,
}

impl Allowed {
    /// Loopback names and origins, plus the operator's.
    pub fn new(hosts: &[String], origins: &[String]) -> Allowed {
        let hosts = ["localhost", "127.0.0.1", "::1"].into_iter().map(String::from).chain(hosts.iter().cloned());
        let origins = [
            "http://localhost:*",
            "http://127.0.0.1:*",
            "http://[::1]:*",
            "https://localhost:*",
            "https://127.0.0.1:*",
        ]
        .into_iter()
        .map(String::from)
        .chain(origins.iter().cloned());
        Allowed { hosts: hosts.map(|h| h.to_ascii_lowercase()).collect(), origins: origins.collect() }
    }

    /// Check Host, then Origin: `Err` is the status and the reason. Host names `also` accepts
    /// (a tenant's own) pass too.
    pub fn check(&self, headers: &HeaderMap, also: impl Fn(&str) -> bool) -> Result<(), (u16, &'static str)> {
        let host = host(headers)?;
        if !self.hosts.iter().any(|entry| host_matches(entry, &host)) && !also(&bare_host(host.host())) {
            return Err((403, "Forbidden: Host header is not allowed"));
        }
        let Some(origin) = headers.get(ORIGIN) else { return Ok(()) };
        let origin = origin.to_str().map_err(|_| (403, "Forbidden: Invalid Origin header encoding"))?;
        let origin = Origin::parse(origin).ok_or((403, "Forbidden: Invalid Origin header"))?;
        if !self.origins.iter().any(|entry| origin.matches(entry)) {
            return Err((403, "Forbidden: Origin header is not allowed"));
        }
        Ok(())
    }
}

/// The request's Host header.
pub fn host(headers: &HeaderMap) -> Result<Authority, (u16, &'static str)> {
    let host = headers.get(HOST).ok_or((400, "Bad Request: missing Host header"))?;
    let host = host.to_str().map_err(|_| (400, "Bad Request: Invalid Host header encoding"))?;
    host.parse().map_err(|_| (400, "Bad Request: Invalid Host header"))
}

/// A host name as tenants' `hosts` hold it: lowercase, IPv6 without brackets.
pub fn bare_host(host: &str) -> String {
    host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase()
}

fn host_matches(entry: &str, host: &Authority) -> bool {
    let Ok(entry) = entry.parse::<Authority>() else {
        // A bare IPv6 address such as `::1` is not an authority.
        return bare_host(entry) == bare_host(host.host());
    };
    bare_host(entry.host()) == bare_host(host.host())
        && entry.port_u16().is_none_or(|port| host.port_u16() == Some(port))
}

/// A parsed `Origin` header.
struct Origin {
    scheme: String,
    host: String,
    port: Option<u16>,
    null: bool,
}

impl Origin {
    fn parse(text: &str) -> Option<Origin> {
        if text.eq_ignore_ascii_case("null") {
            return Some(Origin { scheme: String::new(), host: String::new(), port: None, null: true });
        }
        let (scheme, rest) = text.split_once("://")?;
        let authority: Authority = rest.trim_end_matches('/').parse().ok()?;
        Some(Origin {
            scheme: scheme.to_ascii_lowercase(),
            host: bare_host(authority.host()),
            port: authority.port_u16(),
            null: false,
        })
    }

    fn default_port(&self) -> Option<u16> {
        match self.scheme.as_str() {
            "http" => Some(80),
            "https" => Some(443),
            _ => None,
        }
    }

    fn matches(&self, entry: &str) -> bool {
        if entry.eq_ignore_ascii_case("null") || self.null {
            return entry.eq_ignore_ascii_case("null") && self.null;
        }
        let (entry, any_port) = match entry.strip_suffix(":*") {
            Some(entry) => (entry, true),
            None => (entry, false),
        };
        let Some(entry) = Origin::parse(entry) else { return false };
        if entry.scheme != self.scheme || entry.host != self.host {
            return false;
        }
        match entry.port {
            _ if any_port => true,
            None => true,
            Some(port) => self.port.or_else(|| self.default_port()) == Some(port),
        }
    }
}

/// The media types an `Accept` header lists (without parameters), leaving out those refused
/// with `q=0`.
fn accepted(headers: &HeaderMap) -> Vec<String> {
    let mut types = Vec::new();
    for value in headers.get_all(ACCEPT) {
        let Ok(value) = value.to_str() else { continue };
        for entry in value.split(',') {
            let mut parts = entry.split(';');
            let essence = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
            let refused =
                parts.any(|p| p.trim().strip_prefix("q=").is_some_and(|q| q.parse::<f32>().is_ok_and(|q| q == 0.0)));
            if !essence.is_empty() && !refused {
                types.push(essence);
            }
        }
    }
    types
}

/// Whether the client accepts every one of `types`.
pub fn accepts(headers: &HeaderMap, types: &[&str]) -> bool {
    let listed = accepted(headers);
    types.iter().all(|t| listed.iter().any(|l| l == t))
}

/// Whether the body is declared as JSON (by exactly one `Content-Type`).
pub fn is_json(headers: &HeaderMap) -> bool {
    let mut values = headers.get_all(CONTENT_TYPE).iter();
    let (Some(value), None) = (values.next(), values.next()) else { return false };
    value
        .to_str()
        .ok()
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"))
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::transport::http::header_map as headers;

    #[test]
    fn hosts_and_origins() {
        let allowed = Allowed::new(&["mcp.example:8443".into()], &["https://app.example".into()]);
        let check =
            |pairs: &[(&'static str, &str)]| allowed.check(&headers(pairs), |_| false).map_err(|(status, _)| status);
        assert_eq!(check(&[("host", "127.0.0.1:3000")]), Ok(()));
        assert_eq!(check(&[("host", "[::1]:3000")]), Ok(()));
        assert_eq!(check(&[("host", "LOCALHOST")]), Ok(()));
        assert_eq!(check(&[("host", "mcp.example:8443")]), Ok(()));
        assert_eq!(check(&[("host", "mcp.example:80")]), Err(403));
        assert_eq!(check(&[("host", "evil.example")]), Err(403));
        assert_eq!(check(&[]), Err(400));
        assert_eq!(check(&[("host", "localhost"), ("origin", "http://localhost:5173")]), Ok(()));
        assert_eq!(check(&[("host", "localhost"), ("origin", "https://app.example")]), Ok(()));
        assert_eq!(check(&[("host", "localhost"), ("origin", "https://app.example:443")]), Ok(()));
        assert_eq!(check(&[("host", "localhost"), ("origin", "http://app.example")]), Err(403));
        assert_eq!(check(&[("host", "localhost"), ("origin", "https://evil.example")]), Err(403));
        assert_eq!(check(&[("host", "localhost"), ("origin", "null")]), Err(403));
        assert_eq!(check(&[("host", "localhost"), ("origin", "garbage")]), Err(403));
    }

    #[test]
    fn accept_and_content_type() {
        let both = headers(&[("accept", "application/json, text/event-stream;q=0.5")]);
        assert!(accepts(&both, &["application/json", "text/event-stream"]));
        let refused = headers(&[("accept", "application/json, text/event-stream;q=0")]);
        assert!(!accepts(&refused, &["application/json", "text/event-stream"]));
        assert!(!accepts(&headers(&[("accept", "*/*")]), &["application/json"]));
        assert!(is_json(&headers(&[("content-type", "Application/JSON; charset=utf-8")])));
        assert!(!is_json(&headers(&[("content-type", "text/plain")])));
        assert!(!is_json(&headers(&[("content-type", "application/json"), ("content-type", "text/plain")])));
    }
}
