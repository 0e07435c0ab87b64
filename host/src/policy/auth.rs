//! A tenant's authorization settings as the operator writes them (`[auth]`, or
//! `[tenants.<id>.auth]`): the tenant's endpoint is then an OAuth 2.1 resource server that
//! takes bearer tokens from the named authorization servers, and optionally static API keys.
//!
//! Checked without I/O: URLs are parsed, algorithms held to an allow-list (never `none`,
//! never HMAC, whose "key" would be public), API keys given only as SHA-256 digests, the
//! introspection client's secret named but not read.

use std::path::Path;

use serde::Deserialize;

use super::{SecretSource, parse_sha256};

/// Signature algorithms a token may use, by JOSE name: public-key algorithms only.
pub const ALGORITHMS: [&str; 9] = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"];

/// How long a token may be past `exp` (or before `nbf`) by default: clock skew.
const DEFAULT_LEEWAY_S: u64 = 30;
/// How long an issuer's key set is taken before it is fetched again, by default and at
/// most: a key the issuer withdraws is refused at the latest this long after.
const DEFAULT_KEYS_MAX_AGE_S: u64 = 300;
const MAX_KEYS_MAX_AGE_S: u64 = 86_400;
/// How long an introspection answer is reused by default, and at most: a revoked token is
/// refused at the latest this long after its revocation.
const DEFAULT_INTROSPECTION_CACHE_S: u64 = 60;
const MAX_INTROSPECTION_CACHE_S: u64 = 300;

/// `[auth]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AuthEntry {
    /// The endpoint's canonical URI (RFC 8707): what clients name as `resource`, and what a
    /// token's `aud` must contain.
    resource: String,
    /// Issuers whose tokens are taken (each exactly as its `iss`).
    #[serde(default)]
    authorization_servers: Vec<String>,
    /// Where the issuer's keys are, when discovery should not be used (one issuer only).
    jwks_uri: Option<String>,
    /// Signature algorithms accepted (default: every one of [`ALGORITHMS`]).
    algorithms: Option<Vec<String>>,
    /// Seconds of clock skew allowed on `exp`, `nbf` and `iat`.
    leeway_s: Option<u64>,
    /// Seconds an issuer's key set is taken before it is fetched again.
    keys_max_age_s: Option<u64>,
    /// Insist on RFC 9068's `typ: at+jwt` (many providers still write `JWT`).
    #[serde(default)]
    require_at_jwt: bool,
    /// Static keys for simple deployments.
    #[serde(default)]
    api_keys: Vec<ApiKeyEntry>,
    /// RFC 7662 introspection, for tokens that are not JWTs.
    introspection: Option<IntrospectionEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct IntrospectionEntry {
    /// The introspection endpoint; by default the authorization server's metadata names it.
    endpoint: Option<String>,
    /// The resource server's own client at the authorization server.
    client_id: String,
    /// Its secret (HTTP Basic authentication at the endpoint).
    client_secret: SecretSource,
    /// Seconds an answer is reused.
    cache_s: Option<u64>,
}

/// How opaque tokens are introspected (RFC 7662), checked; the secret is read when the
/// tenant's resource server starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntrospectionConfig {
    pub endpoint: Option<String>,
    pub client_id: String,
    pub client_secret: SecretSource,
    pub cache_s: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ApiKeyEntry {
    /// Who the key's bearer is.
    subject: String,
    /// The key's SHA-256, in hex: the key itself is never written down.
    sha256: String,
    /// What the key may use.
    scopes: Vec<String>,
}

/// A static API key: its digest, whose it is, and what it may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    pub subject: String,
    pub sha256: [u8; 32],
    pub scopes: Vec<String>,
}

/// A tenant's authorization settings, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthConfig {
    pub resource: String,
    pub authorization_servers: Vec<String>,
    pub jwks_uri: Option<String>,
    pub algorithms: Vec<String>,
    pub leeway_s: u64,
    pub keys_max_age_s: u64,
    pub require_at_jwt: bool,
    pub api_keys: Vec<ApiKey>,
    pub introspection: Option<IntrospectionConfig>,
}

/// Whether a token's audience `aud` names `resource` (kept without a trailing slash):
/// exactly, or with a trailing slash, as an authorization server configured with the URI as
/// the operator wrote it (`https://mcp.example/mcp/`) issues it. JWTs and introspection
/// answers alike.
pub fn audience_names(aud: &str, resource: &str) -> bool {
    aud.strip_suffix('/').unwrap_or(aud) == resource
}

impl AuthConfig {
    /// The audiences a JWT may name for this resource (see [`audience_names`]).
    pub fn audiences(&self) -> [String; 2] {
        [self.resource.clone(), format!("{}/", self.resource)]
    }

    /// The path of the resource (`/t/acme/mcp`), where its metadata is inserted after
    /// `/.well-known/oauth-protected-resource`.
    pub fn resource_path(&self) -> &str {
        let after_scheme = self.resource.split_once("://").map_or("", |(_, rest)| rest);
        after_scheme.find('/').map_or("", |at| &after_scheme[at..])
    }

    /// The URL of the resource's metadata (RFC 9728), built from the configured resource,
    /// never from a request's Host.
    pub fn metadata_url(&self) -> String {
        let path = self.resource_path();
        let origin = &self.resource[..self.resource.len() - path.len()];
        format!("{origin}/.well-known/oauth-protected-resource{path}")
    }
}

/// Whether `url` may be fetched or named: `https`, or `http` to a loopback host (tests and
/// a provider on the same machine).
fn check_url(what: &str, url: &str) -> Result<(), String> {
    // Before anything parses or echoes it: such a URL may hold a password, however it would
    // parse. Credentials go in `client_secret`, and would otherwise reach every log line and
    // error that names the URL.
    if url.contains('@') {
        return Err(format!("{what}: the URL carries credentials (user@host) or an @; it must not"));
    }
    let uri: http::Uri = url.parse().map_err(|_| format!("{what}: {url:?} is not a URL"))?;
    let host = uri.host().unwrap_or_default();
    let loopback = matches!(host, "localhost" | "127.0.0.1" | "[::1]");
    match uri.scheme_str() {
        Some("https") => {}
        Some("http") if loopback => {}
        _ => return Err(format!("{what}: {url:?} must be an https URL (http only to a loopback host)")),
    }
    if host.is_empty() || uri.query().is_some() || url.contains('#') {
        return Err(format!("{what}: {url:?} must name a host and have no query or fragment"));
    }
    Ok(())
}

impl AuthEntry {
    /// Check the entry; errors say which field is wrong. A secret file is relative to
    /// `base_dir`, the policy file's directory.
    pub(super) fn check(self, base_dir: &Path) -> Result<AuthConfig, String> {
        check_url("resource", &self.resource)?;
        let resource = self.resource.trim_end_matches('/').to_owned();
        if self.authorization_servers.is_empty() && self.api_keys.is_empty() {
            return Err("name at least one of authorization_servers or api_keys".into());
        }
        for issuer in &self.authorization_servers {
            check_url("authorization_servers", issuer)?;
        }
        if let Some(jwks) = &self.jwks_uri {
            check_url("jwks_uri", jwks)?;
            if self.authorization_servers.len() != 1 {
                return Err("jwks_uri needs exactly one authorization server".into());
            }
        }
        let algorithms = match self.algorithms {
            None => ALGORITHMS.iter().map(|a| (*a).to_owned()).collect(),
            Some(list) if list.is_empty() => return Err("algorithms is empty".into()),
            Some(list) => {
                if let Some(bad) = list.iter().find(|a| !ALGORITHMS.contains(&a.as_str())) {
                    return Err(format!(
                        "algorithms: {bad:?} is not accepted (public-key algorithms only: {})",
                        ALGORITHMS.join(", ")
                    ));
                }
                list
            }
        };
        let keys_max_age_s = match self.keys_max_age_s {
            None => DEFAULT_KEYS_MAX_AGE_S,
            Some(0) => return Err("keys_max_age_s must be at least 1".into()),
            Some(s) => s.min(MAX_KEYS_MAX_AGE_S),
        };
        let mut api_keys = Vec::with_capacity(self.api_keys.len());
        for key in self.api_keys {
            let sha256 = parse_sha256(&key.sha256)
                .ok_or_else(|| format!("api_keys: the key of {} is not a SHA-256 in hex", key.subject))?;
            if key.subject.is_empty() {
                return Err("api_keys: a key has an empty subject".into());
            }
            api_keys.push(ApiKey { subject: key.subject, sha256, scopes: key.scopes });
        }
        let introspection = match self.introspection {
            None => None,
            Some(entry) => {
                // Answers are taken as the one trusted issuer's.
                if self.authorization_servers.len() != 1 {
                    return Err("introspection needs exactly one authorization server".into());
                }
                if let Some(endpoint) = &entry.endpoint {
                    check_url("introspection.endpoint", endpoint)?;
                }
                if entry.client_id.is_empty() {
                    return Err("introspection.client_id is empty".into());
                }
                Some(IntrospectionConfig {
                    endpoint: entry.endpoint,
                    client_id: entry.client_id,
                    client_secret: entry.client_secret.relative_to(base_dir),
                    cache_s: entry.cache_s.unwrap_or(DEFAULT_INTROSPECTION_CACHE_S).min(MAX_INTROSPECTION_CACHE_S),
                })
            }
        };
        Ok(AuthConfig {
            resource,
            authorization_servers: self.authorization_servers,
            jwks_uri: self.jwks_uri,
            algorithms,
            leeway_s: self.leeway_s.unwrap_or(DEFAULT_LEEWAY_S).min(600),
            keys_max_age_s,
            require_at_jwt: self.require_at_jwt,
            api_keys,
            introspection,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(text: &str) -> Result<AuthConfig, String> {
        toml::from_str::<AuthEntry>(text).map_err(|e| e.to_string())?.check(Path::new("/etc/capsule"))
    }

    #[test]
    fn a_resource_server_is_configured_without_io() {
        let config = auth(
            "resource = \"https://mcp.acme.example/t/acme/mcp/\"\n\
             authorization_servers = [\"https://login.acme.example/realms/acme\"]\n\
             algorithms = [\"RS256\", \"ES256\"]",
        )
        .unwrap();
        assert_eq!(config.resource, "https://mcp.acme.example/t/acme/mcp");
        assert_eq!(config.resource_path(), "/t/acme/mcp");
        assert_eq!(config.metadata_url(), "https://mcp.acme.example/.well-known/oauth-protected-resource/t/acme/mcp");
        assert_eq!(config.leeway_s, 30);
        assert_eq!(config.keys_max_age_s, 300);
        let local = auth("resource = \"http://127.0.0.1:3000/mcp\"\nauthorization_servers = [\"http://localhost:9\"]");
        assert!(local.is_ok(), "{local:?}");
        let never = auth(
            "resource = \"https://m.example/mcp\"\nauthorization_servers = [\"https://i.example\"]\nkeys_max_age_s = 0",
        );
        assert!(never.unwrap_err().contains("keys_max_age_s"));
    }

    #[test]
    fn introspection_names_its_secret_without_reading_it() {
        let base = "resource = \"https://mcp.example/mcp\"\nauthorization_servers = [\"https://login.example\"]\n";
        let config = auth(&format!(
            "{base}[introspection]\nclient_id = \"capsule\"\nclient_secret = {{ file = \"secrets/introspect\" }}\ncache_s = 9999"
        ))
        .unwrap();
        let introspection = config.introspection.unwrap();
        assert_eq!(introspection.client_secret, SecretSource::File { file: "/etc/capsule/secrets/introspect".into() });
        assert_eq!((introspection.endpoint, introspection.cache_s), (None, 300));
        let two = "resource = \"https://mcp.example/mcp\"\nauthorization_servers = [\"https://a.example\", \"https://b.example\"]\n";
        let error =
            auth(&format!("{two}[introspection]\nclient_id = \"c\"\nclient_secret = {{ env = \"S\" }}")).unwrap_err();
        assert!(error.contains("exactly one"), "{error}");
        let plain = format!(
            "{base}[introspection]\nendpoint = \"http://login.example/introspect\"\nclient_id = \"c\"\nclient_secret = {{ env = \"S\" }}"
        );
        assert!(auth(&plain).unwrap_err().contains("https"));
    }

    #[test]
    fn unsafe_settings_are_refused() {
        let base = "resource = \"https://mcp.example/mcp\"\n";
        for (extra, expected) in [
            ("", "at least one"),
            ("authorization_servers = [\"http://login.example\"]", "must be an https URL"),
            ("authorization_servers = [\"https://a.example\"]\nalgorithms = [\"HS256\"]", "not accepted"),
            ("authorization_servers = [\"https://a.example\"]\nalgorithms = [\"none\"]", "not accepted"),
            (
                "authorization_servers = [\"https://a.example\", \"https://b.example\"]\njwks_uri = \"https://a.example/k\"",
                "exactly one",
            ),
            ("api_keys = [{ subject = \"ci\", sha256 = \"00\", scopes = [] }]", "not a SHA-256"),
            (
                "authorization_servers = [\"https://login.example\"]\njwks_uri = \"https://u:SECRET@login.example/k\"",
                "carries credentials",
            ),
            (
                "authorization_servers = [\"https://login.example\"]\njwks_uri = \"https://u:SEC/RET@login.example/k\"",
                "carries credentials",
            ),
            (
                "authorization_servers = [\"https://login.example\"]\njwks_uri = \"https://u:SE CRET@login.example/k\"",
                "carries credentials",
            ),
            ("authorization_servers = [\"https://a.example\"]\ncolour = 1", "unknown field"),
        ] {
            let error = auth(&format!("{base}{extra}")).unwrap_err();
            assert!(error.contains(expected) && !error.contains("SECRET"), "{extra}: {error}");
        }
        assert!(auth("resource = \"ftp://x/mcp\"\nauthorization_servers = [\"https://a.example\"]").is_err());
    }
}
