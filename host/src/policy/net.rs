//! Network grants: which hosts and ports a plugin may reach over HTTP.

use std::str::FromStr;

use thiserror::Error;

/// One allowed destination: `host`, `host:port`, or `*.domain[:port]` for every subdomain.
/// Without a port, the default ports of HTTP and HTTPS (80 and 443) are allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRule {
    /// Lowercase host name or IP literal (IPv6 without brackets); for a wildcard, the
    /// domain after `*.`.
    host: String,
    wildcard: bool,
    port: Option<u16>,
}

/// A network grant that cannot be parsed.
#[derive(Debug, Error)]
#[error("{rule:?} is not a host rule ({reason}); write host, host:port or *.domain")]
pub struct HostRuleError {
    rule: String,
    reason: &'static str,
}

impl FromStr for HostRule {
    type Err = HostRuleError;

    fn from_str(rule: &str) -> Result<Self, Self::Err> {
        let error = |reason| HostRuleError { rule: rule.to_owned(), reason };
        if rule.contains("://") || rule.contains('/') {
            return Err(error("a host, not a URL"));
        }
        let (host, port) = if let Some(rest) = rule.strip_prefix('[') {
            let (host, after) = rest.split_once(']').ok_or_else(|| error("unclosed ["))?;
            match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None if after.is_empty() => (host, None),
                None => return Err(error("text after ]")),
            }
        } else {
            match rule.rsplit_once(':') {
                Some((host, port)) if !host.contains(':') => (host, Some(port)),
                Some(_) => return Err(error("put IPv6 addresses in brackets")),
                None => (rule, None),
            }
        };
        let port =
            port.map(|p| p.parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(|| error("bad port"))).transpose()?;
        let (host, wildcard) = match host.strip_prefix("*.") {
            Some(domain) => (domain, true),
            None => (host, false),
        };
        if host.is_empty() || host.contains('*') || host.chars().any(char::is_whitespace) {
            return Err(error("bad host name"));
        }
        Ok(HostRule { host: host.to_ascii_lowercase(), wildcard, port })
    }
}

impl std::fmt::Display for HostRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let star = if self.wildcard { "*." } else { "" };
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        match self.port {
            Some(port) => write!(f, "{star}{host}:{port}"),
            None => write!(f, "{star}{host}"),
        }
    }
}

impl HostRule {
    /// Whether a request to `host` on `port` is allowed by this rule. `host` is compared
    /// case-insensitively and without a trailing dot.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        let host = host.trim_end_matches('.').trim_start_matches('[').trim_end_matches(']');
        let name_matches = if self.wildcard {
            host.len() > self.host.len() + 1
                && host.as_bytes()[host.len() - self.host.len() - 1] == b'.'
                && host[host.len() - self.host.len()..].eq_ignore_ascii_case(&self.host)
        } else {
            host.eq_ignore_ascii_case(&self.host)
        };
        name_matches && self.port.map_or(port == 80 || port == 443, |p| p == port)
    }

    /// Whether every destination this rule allows is also allowed by `other`.
    pub fn within(&self, other: &HostRule) -> bool {
        let ports_within = match (self.port, other.port) {
            (_, None) => self.port.is_none_or(|p| p == 80 || p == 443),
            (Some(a), Some(b)) => a == b,
            (None, Some(_)) => false,
        };
        let hosts_within = match (self.wildcard, other.wildcard) {
            (false, false) => self.host == other.host,
            (false, true) => other.allows(&self.host, other.port.unwrap_or(443)),
            (true, true) => self.host == other.host || self.host.ends_with(&format!(".{}", other.host)),
            (true, false) => false,
        };
        ports_within && hosts_within
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> HostRule {
        text.parse().unwrap()
    }

    #[test]
    fn parses_and_prints() {
        for text in
            ["example.org", "example.org:8443", "*.example.org", "*.example.org:8080", "127.0.0.1:3000", "[::1]:80"]
        {
            assert_eq!(rule(text).to_string(), text);
        }
        for bad in ["", "https://example.org", "example.org/path", "a:0", "a:x", "*", "a.*.b", "::1", "[::1"] {
            assert!(bad.parse::<HostRule>().is_err(), "{bad}");
        }
    }

    #[test]
    fn matching() {
        assert!(rule("Example.org").allows("example.ORG.", 443));
        assert!(rule("example.org").allows("example.org", 80));
        assert!(!rule("example.org").allows("example.org", 8080));
        assert!(!rule("example.org").allows("evil-example.org", 443));
        assert!(!rule("example.org").allows("example.org.evil.com", 443));
        assert!(rule("example.org:8080").allows("example.org", 8080));
        assert!(!rule("example.org:8080").allows("example.org", 443));
        assert!(rule("*.example.org").allows("api.example.org", 443));
        assert!(!rule("*.example.org").allows("example.org", 443));
        assert!(!rule("*.example.org").allows("badexample.org", 443));
        assert!(rule("[::1]:80").allows("[::1]", 80));
    }

    #[test]
    fn containment() {
        assert!(rule("api.example.org").within(&rule("*.example.org")));
        assert!(rule("a.b.example.org:443").within(&rule("*.example.org")));
        assert!(!rule("example.org:8080").within(&rule("example.org")));
        assert!(!rule("example.org").within(&rule("example.org:443")));
        assert!(!rule("*.example.org").within(&rule("api.example.org")));
    }
}
