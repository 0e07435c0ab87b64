//! The checks every HTTP request passes before its body is read: the Host and Origin
//! headers (DNS-rebinding protection), and what the client accepts and sends.

use axum::http::header::{ACCEPT, AsHeaderName, CONTENT_ENCODING, CONTENT_TYPE, HOST, ORIGIN, TRANSFER_ENCODING};
use axum::http::uri::Authority;
use axum::http::{HeaderMap, HeaderValue, Uri};

/// Host names and origins the endpoint answers to, read once when it starts.
#[derive(Debug, Clone)]
pub struct Allowed {
    hosts: Vec<HostEntry>,
    origins: Vec<OriginEntry>,
}

/// An allowed Host: a bare lowercase name, and the port it must name (any without one).
#[derive(Debug, Clone)]
struct HostEntry {
    host: String,
    port: Option<u16>,
}

impl HostEntry {
    fn parse(entry: &str) -> HostEntry {
        match entry.parse::<Authority>() {
            Ok(authority) => HostEntry { host: bare_host(authority.host()), port: authority.port_u16() },
            // A bare IPv6 address such as `::1` is not an authority.
            Err(_) => HostEntry { host: bare_host(entry), port: None },
        }
    }

    /// A Host that names no port names its scheme's default, 80 or 443 (which one, a server
    /// behind a TLS-terminating proxy cannot tell): an entry with either port takes it.
    fn matches(&self, host: &Authority) -> bool {
        self.host.eq_ignore_ascii_case(unbracketed(host.host()))
            && self.port.is_none_or(|p| match host.port_u16() {
                Some(port) => port == p,
                None => p == 80 || p == 443,
            })
    }
}

/// An `--allow-host` entry as given, if it is a host name or address, with a port or not.
pub fn host_entry(entry: &str) -> Result<String, String> {
    // A bare IPv6 address (`::1`) is not an authority, but names a host all the same.
    let valid = entry.parse().ok().and_then(plain).is_some() || entry.parse::<std::net::Ipv6Addr>().is_ok();
    valid.then(|| entry.to_owned()).ok_or_else(|| {
        format!("`{entry}` is not a host name or address with an optional port (mcp.example or mcp.example:8443)")
    })
}

/// An `--allow-origin` entry as given, if it is an origin or `null`.
pub fn origin_entry(entry: &str) -> Result<String, String> {
    Origin::parse(entry.strip_suffix(":*").unwrap_or(entry)).map(|_| entry.to_owned()).ok_or_else(|| {
        format!(
            "`{entry}` is not an origin: a scheme and a host, with a port, `:*` for any port, or neither for \
             the scheme's default (https://app.example, http://localhost:*), and no path"
        )
    })
}

/// An allowed Origin: `null`, or a scheme and host with a port, any port (`:*`) or the
/// scheme's default.
#[derive(Debug, Clone)]
struct OriginEntry {
    origin: Origin,
    any_port: bool,
}

impl Allowed {
    /// Loopback names and origins, plus the operator's (which `serve` checks with
    /// [`host_entry`] and [`origin_entry`] first). An origin entry that is not one matches
    /// nothing.
    pub fn new(hosts: &[String], origins: &[String]) -> Allowed {
        let loopback = ["localhost", "127.0.0.1", "::1"].into_iter();
        let hosts = loopback.chain(hosts.iter().map(String::as_str)).map(HostEntry::parse).collect();
        let loopback = [
            "http://localhost:*",
            "http://127.0.0.1:*",
            "http://[::1]:*",
            "https://localhost:*",
            "https://127.0.0.1:*",
            "https://[::1]:*",
        ]
        .into_iter();
        let origins = loopback
            .chain(origins.iter().map(String::as_str))
            .filter_map(|entry| {
                let (entry, any_port) = match entry.strip_suffix(":*") {
                    Some(entry) => (entry, true),
                    None => (entry, false),
                };
                Some(OriginEntry { origin: Origin::parse(entry)?, any_port })
            })
            .collect();
        Allowed { hosts, origins }
    }

    /// Check the host the request names (see [`host`]): `Err` is the status and the reason.
    /// Host names `also` accepts (a tenant's own) pass too. Alone, for what any web page may
    /// read (the protected-resource metadata), where an Origin decides nothing.
    pub fn check_host(
        &self,
        uri: &Uri,
        headers: &HeaderMap,
        also: impl Fn(&str) -> bool,
    ) -> Result<(), (u16, &'static str)> {
        self.allowed_host(uri, headers, also).map(drop)
    }

    /// The host the request names, if it is allowed (see [`Allowed::check_host`]).
    pub fn allowed_host(
        &self,
        uri: &Uri,
        headers: &HeaderMap,
        also: impl Fn(&str) -> bool,
    ) -> Result<Authority, (u16, &'static str)> {
        let host = host(uri, headers)?;
        if !self.hosts.iter().any(|entry| entry.matches(&host)) && !also(&bare_host(host.host())) {
            return Err(match uri.authority() {
                Some(_) => (403, "Forbidden: the host in the request target is not allowed"),
                None => (403, "Forbidden: Host header is not allowed"),
            });
        }
        Ok(host)
    }

    /// Check the host (see [`Allowed::check_host`]), then Origin: an allowed one, or the
    /// origin of the host the request names (a page served from the endpoint's own host; the
    /// host being allowed is what stops DNS rebinding).
    pub fn check(
        &self,
        uri: &Uri,
        headers: &HeaderMap,
        also: impl Fn(&str) -> bool,
    ) -> Result<(), (u16, &'static str)> {
        let host = self.allowed_host(uri, headers, also)?;
        self.check_origin(&host, headers)
    }

    /// Check Origin, for a request naming `host` (allowed): see [`Allowed::check`].
    pub fn check_origin(&self, host: &Authority, headers: &HeaderMap) -> Result<(), (u16, &'static str)> {
        // A user agent sends one Origin (RFC 6454, section 7.3): with more, which one a
        // browser meant cannot be told, so none is trusted.
        let origin =
            at_most_once(headers, ORIGIN).map_err(|Repeated| (403, "Forbidden: more than one Origin header"))?;
        let Some(origin) = origin else { return Ok(()) };
        let origin = origin.to_str().map_err(|_| (403, "Forbidden: Invalid Origin header encoding"))?;
        let origin = Origin::parse(origin).ok_or((403, "Forbidden: Invalid Origin header"))?;
        if !self.origins.iter().any(|entry| origin.matches(entry)) && !origin.is_of(host) {
            return Err((403, "Forbidden: Origin header is not allowed"));
        }
        Ok(())
    }
}

/// The host a request names: its target's when the target is in absolute form
/// (`POST http://host/mcp`), for then RFC 9112 (section 3.2.2) has the Host header's value
/// ignored, else its Host header, which must then be there. A Host header that is there
/// must be there once and be a host, whatever the target (section 3.2: more than one, or an
/// invalid one, is a 400). An absolute target without one is taken (HTTP/1.0 needs none).
pub fn host(uri: &Uri, headers: &HeaderMap) -> Result<Authority, (u16, &'static str)> {
    let host = at_most_once(headers, HOST).map_err(|Repeated| (400, "Bad Request: more than one Host header"))?;
    let host = match host {
        Some(host) => {
            let host = host.to_str().map_err(|_| (400, "Bad Request: Invalid Host header encoding"))?;
            Some(host.parse().ok().and_then(plain).ok_or((400, "Bad Request: Invalid Host header"))?)
        }
        None => None,
    };
    match uri.authority() {
        Some(authority) => plain(authority.clone()).ok_or((400, "Bad Request: Invalid host in the request target")),
        None => host.ok_or((400, "Bad Request: missing Host header")),
    }
}

/// `authority` if it is a host and an optional port, as Host (RFC 9112, section 3.2) and
/// Origin (RFC 6454, section 7) are: no user information (`a@127.0.0.1`, which the http
/// crate reads as an authority), brackets only around an IPv6 address (RFC 3986, section
/// 3.2.2: `[localhost]` is no host; with a zone, RFC 6874: `[fe80::1%25eth0]`) with nothing
/// but a port after them, and a port that is a port (not `99999`).
fn plain(authority: Authority) -> Option<Authority> {
    let text = authority.as_str();
    if text.contains('@') {
        return None;
    }
    // The port follows the host's last `:` (an IPv6 host is bracketed); the http crate
    // reads a port it cannot hold as none at all.
    let after_host = match text.strip_prefix('[') {
        Some(bracketed) => {
            let (address, rest) = bracketed.split_once(']')?;
            let (address, zone) = address.split_once("%25").unwrap_or((address, "x"));
            let zoned = |c: char| c.is_ascii_alphanumeric() || "-._~%".contains(c);
            address.parse::<std::net::Ipv6Addr>().ok()?;
            if zone.is_empty() || !zone.chars().all(zoned) {
                return None;
            }
            if !rest.is_empty() && !rest.starts_with(':') {
                return None;
            }
            rest
        }
        None if text.contains(['[', ']']) => return None,
        None => text,
    };
    let port_ok = after_host.rsplit_once(':').is_none_or(|(_, port)| port.is_empty() || port.parse::<u16>().is_ok());
    port_ok.then_some(authority)
}

/// A host name as tenants' `hosts` hold it: lowercase, IPv6 without brackets.
pub fn bare_host(host: &str) -> String {
    unbracketed(host).to_ascii_lowercase()
}

fn unbracketed(host: &str) -> &str {
    host.trim_start_matches('[').trim_end_matches(']')
}

/// A parsed `Origin` header.
#[derive(Debug, Clone)]
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
        let authority = plain(rest.trim_end_matches('/').parse().ok()?)?;
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

    /// Whether this is the origin of `host` (a Host header, or a request target's
    /// authority): an http or https origin with its name and its port. A Host that names no
    /// port (a proxy forwarding `$host`) was reached at 80 or 443, which cannot be told
    /// apart here: only the https origin on 443 is taken for it, since an http page on that
    /// name may be anyone's on the network's path.
    fn is_of(&self, host: &Authority) -> bool {
        let Some(default) = self.default_port() else { return false };
        self.host == bare_host(host.host())
            && match host.port_u16() {
                Some(port) => self.port.unwrap_or(default) == port,
                None => self.scheme == "https" && self.port.is_none_or(|port| port == 443),
            }
    }

    fn matches(&self, entry: &OriginEntry) -> bool {
        let allowed = &entry.origin;
        if allowed.null || self.null {
            return allowed.null && self.null;
        }
        if allowed.scheme != self.scheme || allowed.host != self.host {
            return false;
        }
        // An entry without a port names the scheme's default: an origin is its port too.
        let port = |origin: &Origin| origin.port.or_else(|| origin.default_port());
        entry.any_port || port(self) == port(allowed)
    }
}

/// The media ranges an `Accept` header lists (without parameters), each with whether it
/// is refused (`q=0`). A range refused with parameters of its own (`text/event-stream;
/// level=1;q=0`) refuses only representations with them, which Capsule never sends: it is
/// left out.
fn ranges(headers: &HeaderMap) -> impl Iterator<Item = (&str, bool)> {
    headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|entry| {
            let mut parts = entry.split(';');
            let essence = parts.next().unwrap_or_default().trim();
            let (mut refused, mut narrowed) = (false, false);
            for (name, value) in parts.filter_map(|p| p.split_once('=')) {
                // Parameter names are case-insensitive (RFC 9110, section 5.6.6): `Q=0` too.
                if name.trim().eq_ignore_ascii_case("q") {
                    refused = value.trim().parse::<f32>().is_ok_and(|q| q == 0.0);
                } else {
                    narrowed = true;
                }
            }
            let refuses_nothing_sent = refused && narrowed;
            (!essence.is_empty() && !refuses_nothing_sent).then_some((essence, refused))
        })
}

/// How specifically the range `listed` names the media type `wanted` (`type/subtype`):
/// 2 by name, 1 by `type/*`, 0 by `*/*`, none if it does not.
fn specificity(listed: &str, wanted: &str) -> Option<u8> {
    let (kind, _) = wanted.split_once('/')?;
    if listed.eq_ignore_ascii_case(wanted) {
        return Some(2);
    }
    match listed.split_once('/')? {
        ("*", "*") => Some(0),
        (listed_kind, "*") if listed_kind.eq_ignore_ascii_case(kind) => Some(1),
        _ => None,
    }
}

/// Whether the client accepts every one of `types`: each is named by the most specific
/// range that matches it (RFC 9110, section 12.5.1: `application/json` before
/// `application/*` before `*/*`), and that range is not refused with `q=0`.
pub fn accepts(headers: &HeaderMap, types: &[&str]) -> bool {
    types.iter().all(|wanted| {
        let best = ranges(headers)
            .filter_map(|(listed, refused)| Some((specificity(listed, wanted)?, refused)))
            // Of two ranges as specific, the one that accepts.
            .max_by_key(|(specific, refused)| (*specific, !*refused));
        best.is_some_and(|(_, refused)| !refused)
    })
}

/// A header came more than once where it may come once at most.
pub struct Repeated;

/// The value of a header that may come once at most, if it came.
pub fn at_most_once(headers: &HeaderMap, name: impl AsHeaderName) -> Result<Option<&HeaderValue>, Repeated> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(Repeated);
    }
    Ok(first)
}

/// Whether the body is declared as JSON (by exactly one `Content-Type`).
pub fn is_json(headers: &HeaderMap) -> bool {
    let Ok(Some(value)) = at_most_once(headers, CONTENT_TYPE) else { return false };
    value
        .to_str()
        .ok()
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"))
}

/// Whether the body comes as it is: no `Content-Encoding`, or only `identity`. Capsule
/// decompresses nothing, so a compressed body would otherwise read as malformed JSON.
pub fn is_identity(headers: &HeaderMap) -> bool {
    only_coding(headers, CONTENT_ENCODING, "identity")
}

/// Whether the body's framing is one hyper reads: no `Transfer-Encoding`, or `chunked`
/// alone. hyper takes `gzip, chunked` as chunked and would hand on the still-compressed
/// bytes; RFC 9112 (section 6.1) has a coding the server does not know answered 501.
pub fn is_plain_framing(headers: &HeaderMap) -> bool {
    only_coding(headers, TRANSFER_ENCODING, "chunked")
}

/// Whether every coding the `name` headers list (comma-separated, any number of them) is
/// `coding`; true when there is none.
fn only_coding(headers: &HeaderMap, name: impl AsHeaderName, coding: &str) -> bool {
    headers.get_all(name).iter().all(|value| {
        value.to_str().is_ok_and(|v| v.split(',').all(|listed| listed.trim().eq_ignore_ascii_case(coding)))
    })
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::transport::http::header_map as headers;

    #[test]
    fn hosts_and_origins() {
        let allowed = Allowed::new(&["mcp.example:8443".into()], &["https://app.example".into()]);
        let check = |pairs: &[(&'static str, &str)]| {
            allowed.check(&Uri::from_static("/mcp"), &headers(pairs), |_| false).map_err(|(status, _)| status)
        };
        assert_eq!(check(&[("host", "127.0.0.1:3000")]), Ok(()));
        assert_eq!(check(&[("host", "[::1]:3000")]), Ok(()));
        assert_eq!(check(&[("host", "LOCALHOST")]), Ok(()));
        assert_eq!(check(&[("host", "mcp.example:8443")]), Ok(()));
        assert_eq!(check(&[("host", "mcp.example:80")]), Err(403));
        assert_eq!(check(&[("host", "mcp.example")]), Err(403), "no port: 80 or 443, never 8443");
        // A page served from the host the request names is of the endpoint's own origin.
        assert_eq!(check(&[("host", "mcp.example:8443"), ("origin", "https://mcp.example:8443")]), Ok(()));
        assert_eq!(check(&[("host", "mcp.example:8443"), ("origin", "http://MCP.example:8443")]), Ok(()));
        assert_eq!(check(&[("host", "mcp.example:8443"), ("origin", "https://mcp.example")]), Err(403));
        assert_eq!(check(&[("host", "mcp.example:8443"), ("origin", "https://other.example:8443")]), Err(403));
        assert_eq!(check(&[("host", "mcp.example:8443"), ("origin", "ftp://mcp.example:8443")]), Err(403));
        assert_eq!(check(&[("host", "mcp.example:8443"), ("origin", "null")]), Err(403));
        // Behind a proxy that forwards the name alone (`$host`), an entry with port 443 or 80
        // takes it, and the page's origin names the scheme's default port.
        let proxied = Allowed::new(&["pub.example:443".into(), "plain.example:80".into()], &[]);
        let behind = |pairs: &[(&'static str, &str)]| {
            proxied.check(&Uri::from_static("/mcp"), &headers(pairs), |_| false).map_err(|(status, _)| status)
        };
        assert_eq!(behind(&[("host", "pub.example")]), Ok(()));
        assert_eq!(behind(&[("host", "plain.example")]), Ok(()));
        assert_eq!(behind(&[("host", "pub.example"), ("origin", "https://pub.example")]), Ok(()));
        assert_eq!(behind(&[("host", "pub.example"), ("origin", "https://pub.example:443")]), Ok(()));
        assert_eq!(behind(&[("host", "pub.example"), ("origin", "https://pub.example:8443")]), Err(403));
        assert_eq!(behind(&[("host", "pub.example"), ("origin", "http://pub.example")]), Err(403), "only https");
        assert_eq!(behind(&[("host", "plain.example"), ("origin", "http://plain.example")]), Err(403));
        assert_eq!(behind(&[("host", "evil.example"), ("origin", "https://evil.example")]), Err(403), "DNS rebinding");
        // A tenant's own host (`also`) is allowed, and so is its origin.
        let tenant = |pairs: &[(&'static str, &str)]| {
            proxied
                .check(&Uri::from_static("/mcp"), &headers(pairs), |host| host == "mcp.acme.example")
                .map_err(|(status, _)| status)
        };
        assert_eq!(tenant(&[("host", "mcp.acme.example"), ("origin", "https://mcp.acme.example")]), Ok(()));
        assert_eq!(tenant(&[("host", "mcp.acme.example"), ("origin", "https://app.acme.example")]), Err(403));
        assert_eq!(check(&[("host", "evil.example")]), Err(403));
        assert_eq!(check(&[]), Err(400));
        assert_eq!(check(&[("host", "localhost"), ("host", "evil.example")]), Err(400));
        // A target in absolute form names the host; the Host header is then ignored.
        let target = |uri: &'static str, host: &str| {
            allowed.check(&Uri::from_static(uri), &headers(&[("host", host)]), |_| false).map_err(|(status, _)| status)
        };
        assert_eq!(target("http://evil.example/mcp", "localhost"), Err(403));
        let reason =
            allowed.check(&Uri::from_static("http://evil.example/mcp"), &headers(&[("host", "localhost")]), |_| false);
        assert_eq!(reason, Err((403, "Forbidden: the host in the request target is not allowed")));
        assert_eq!(target("http://localhost:3000/mcp", "evil.example"), Ok(()));
        // A Host header it has must be there once and be a host (RFC 9112, section 3.2);
        // HTTP/1.0 needs none.
        let absolute = |pairs: &[(&'static str, &str)]| {
            let uri = Uri::from_static("http://localhost:3000/mcp");
            allowed.check(&uri, &headers(pairs), |_| false).map_err(|(status, _)| status)
        };
        assert_eq!(absolute(&[]), Ok(()), "no Host");
        assert_eq!(absolute(&[("host", "localhost"), ("host", "evil.example")]), Err(400), "two");
        assert_eq!(absolute(&[("host", "a@b")]), Err(400), "no host");
        assert_eq!(absolute(&[("host", "127.0.0.1:99999")]), Err(400), "no port");
        // Brackets hold an IPv6 address, and nothing but a port follows them (RFC 3986).
        for host in ["[localhost]", "[127.0.0.1]", "[::1]x", "[mcp.example]:8443", "local]host", "[::1"] {
            assert_eq!(check(&[("host", host)]), Err(400), "{host}");
        }
        assert_eq!(check(&[("host", "[::1]:")]), Ok(()), "an empty port is a port (RFC 3986)");
        // An IPv6 address with a zone (RFC 6874) is a host, here not an allowed one.
        assert_eq!(check(&[("host", "[fe80::1%25eth0]:3000")]), Err(403));
        for host in ["[fe80::1%25]", "[fe80::1%eth0]", "[fe80::1%25eth/0]"] {
            assert_eq!(check(&[("host", host)]), Err(400), "{host}");
        }
        assert_eq!(check(&[("host", "localhost"), ("origin", "http://[localhost]")]), Err(403));
        // A host with user information, or a port no port can be, is no host (400), though
        // the http crate reads both as authorities; an Origin like it is no origin (403).
        assert_eq!(check(&[("host", "a@127.0.0.1")]), Err(400));
        assert_eq!(check(&[("host", "127.0.0.1:99999")]), Err(400));
        assert_eq!(target("http://evil.example@localhost/mcp", "localhost"), Err(400));
        assert_eq!(check(&[("host", "localhost"), ("origin", "http://evil.example@localhost")]), Err(403));
        assert_eq!(check(&[("host", "localhost"), ("origin", "http://localhost:99999")]), Err(403));
        assert_eq!(check(&[("host", "localhost"), ("origin", "http://localhost:5173")]), Ok(()));
        assert_eq!(check(&[("host", "localhost"), ("origin", "https://app.example")]), Ok(()));
        assert_eq!(check(&[("host", "localhost"), ("origin", "https://app.example:443")]), Ok(()));
        assert_eq!(check(&[("host", "localhost"), ("origin", "https://app.example:8443")]), Err(403), "another port");
        assert_eq!(check(&[("host", "localhost"), ("origin", "https://[::1]:3000")]), Ok(()));
        assert_eq!(check(&[("host", "localhost"), ("origin", "http://app.example")]), Err(403));
        assert_eq!(check(&[("host", "localhost"), ("origin", "https://evil.example")]), Err(403));
        assert_eq!(check(&[("host", "localhost"), ("origin", "null")]), Err(403));
        assert_eq!(check(&[("host", "localhost"), ("origin", "garbage")]), Err(403));
        let twice = [("host", "localhost"), ("origin", "http://localhost"), ("origin", "http://localhost")];
        assert_eq!(check(&twice), Err(403), "two Origin headers, even the same allowed one");
        let second = [("host", "localhost"), ("origin", "http://localhost"), ("origin", "https://evil.example")];
        assert_eq!(check(&second), Err(403), "a foreign Origin after an allowed one");
        // An operator may allow the `null` origin; an entry that is no origin matches nothing.
        let allowed = Allowed::new(&["::1".into()], &["null".into(), "garbage".into(), "http://a.example:*".into()]);
        let check = |pairs: &[(&'static str, &str)]| {
            allowed.check(&Uri::from_static("/mcp"), &headers(pairs), |_| false).map_err(|(status, _)| status)
        };
        assert_eq!(check(&[("host", "[::1]"), ("origin", "null")]), Ok(()));
        assert_eq!(check(&[("host", "[::1]"), ("origin", "garbage")]), Err(403));
        assert_eq!(check(&[("host", "[::1]"), ("origin", "HTTP://A.example:9000")]), Ok(()));
        assert_eq!(check(&[("host", "[::1]"), ("origin", "https://a.example")]), Err(403));
    }

    #[test]
    fn operators_entries_that_are_no_host_or_origin_are_refused() {
        for host in ["mcp.example", "mcp.example:8443", "::1", "[::1]:3000", "10.0.0.7"] {
            assert!(host_entry(host).is_ok(), "{host}");
        }
        for host in ["http://mcp.example", "mcp.example/mcp", "a@mcp.example", "mcp.example:99999", ""] {
            assert!(host_entry(host).is_err(), "{host}");
        }
        for origin in ["https://app.example", "https://app.example/", "http://localhost:*", "null", "http://[::1]:8080"]
        {
            assert!(origin_entry(origin).is_ok(), "{origin}");
        }
        for origin in ["app.example", "https://app.example/path", "https://a@app.example", "https://", "*"] {
            assert!(origin_entry(origin).is_err(), "{origin}");
        }
    }

    #[test]
    fn accept_and_content_type() {
        let both = headers(&[("accept", "application/json, text/event-stream;q=0.5")]);
        assert!(accepts(&both, &["application/json", "text/event-stream"]));
        for refused in ["application/json, text/event-stream;q=0", "application/json, text/event-stream; Q = 0.0"] {
            assert!(
                !accepts(&headers(&[("accept", refused)]), &["application/json", "text/event-stream"]),
                "{refused}"
            );
        }
        // Wildcards name what they cover (RFC 9110), the most specific range deciding.
        let both = ["application/json", "text/event-stream"];
        for listed in ["*/*", "*/*;q=0.1", "application/*, text/*", "application/json, text/*;q=0.5", "text/html, */*"]
        {
            assert!(accepts(&headers(&[("accept", listed)]), &both), "{listed}");
        }
        for listed in [
            "application/*",
            "text/*",
            "application/json;q=0, */*",
            "*/*;q=0, application/json",
            "application/jsonx, text/event-streamx",
            "*, json",
        ] {
            assert!(!accepts(&headers(&[("accept", listed)]), &both), "{listed}");
        }
        assert!(!accepts(&headers(&[]), &both));
        // A refusal with parameters of its own covers none of Capsule's answers; of two
        // ranges as specific, the accepting one decides.
        for listed in [
            "application/json, text/event-stream;level=1;q=0, text/event-stream",
            "application/json, text/event-stream, application/json;q=0",
            "application/json, text/event-stream;charset=utf-8",
        ] {
            assert!(accepts(&headers(&[("accept", listed)]), &both), "{listed}");
        }
        assert!(accepts(&headers(&[("accept", "text/*")]), &["text/event-stream"]));
        assert!(is_json(&headers(&[("content-type", "Application/JSON; charset=utf-8")])));
        assert!(!is_json(&headers(&[("content-type", "text/plain")])));
        assert!(!is_json(&headers(&[("content-type", "application/json"), ("content-type", "text/plain")])));
        assert!(is_identity(&headers(&[])));
        assert!(is_identity(&headers(&[("content-encoding", "Identity")])));
        assert!(!is_identity(&headers(&[("content-encoding", "gzip")])));
        assert!(!is_identity(&headers(&[("content-encoding", "identity, br")])));
        assert!(is_plain_framing(&headers(&[])));
        assert!(is_plain_framing(&headers(&[("transfer-encoding", "Chunked")])));
        assert!(!is_plain_framing(&headers(&[("transfer-encoding", "gzip, chunked")])));
        assert!(!is_plain_framing(&headers(&[("transfer-encoding", "gzip"), ("transfer-encoding", "chunked")])));
    }
}
