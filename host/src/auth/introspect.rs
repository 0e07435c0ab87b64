//! RFC 7662 introspection of access tokens that are not JWTs (opaque tokens): the resource
//! server asks its authorization server, authenticating as its own client, whether a token is
//! active and what it grants. The answer is held to the same rules as a JWT's claims (issuer,
//! audience, expiry) and reused for a short while, so a revoked token stops working within
//! that while and a busy client does not cost an authorization-server round trip per request.
//! A token found inactive is remembered as long, so a client retrying a dead token does not
//! ask again each time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use tokio::sync::Semaphore;

use super::keys::{IssuerKeys, read_json};
use super::{AuthError, Claims, Remembered};
use crate::policy::{IntrospectionConfig, Secret};

/// Introspections in flight at once: a flood of made-up tokens queues here rather than
/// becoming a flood at the authorization server.
const IN_FLIGHT: usize = 8;
/// How long a request waits for one of those: past it, the authorization server is taken to
/// be too slow to ask (503), rather than holding every request behind the slow ones.
const SLOT_WAIT: Duration = Duration::from_secs(5);
/// The least time between two warnings that the authorization server could not be asked (a
/// stream of requests while it is down is one warning, the rest at debug).
const WARN_EVERY: u64 = 10;

/// One tenant's introspection client.
pub struct Introspector {
    endpoint: Option<String>,
    /// The `Authorization` header: HTTP Basic with the client id and secret, each
    /// form-encoded first (RFC 6749 §2.3.1).
    authorization: Secret,
    cache_for: Duration,
    slots: Semaphore,
    /// Tokens lately found inactive.
    inactive: Remembered<()>,
    http: reqwest::Client,
    /// When the last warning was logged, in seconds since the epoch.
    warned: AtomicU64,
}

/// Why an inactive token is refused.
const NOT_ACTIVE: &str = "the token is not active (expired, revoked or unknown)";

/// An introspection answer (RFC 7662 §2.2): the fields that matter here.
#[derive(Deserialize)]
struct Answer {
    active: bool,
    iss: Option<String>,
    aud: Option<Audience>,
    exp: Option<u64>,
    nbf: Option<u64>,
    sub: Option<String>,
    client_id: Option<String>,
    scope: Option<String>,
    token_type: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
}

impl Audience {
    fn contains(&self, resource: &str) -> bool {
        let same = |aud: &String| crate::policy::audience_names(aud, resource);
        match self {
            Audience::One(aud) => same(aud),
            Audience::Many(list) => list.iter().any(same),
        }
    }
}

impl Introspector {
    /// Read the client's secret (the only I/O) and make the client.
    pub fn new(config: &IntrospectionConfig, http: reqwest::Client) -> Result<Introspector, String> {
        let secret = config.client_secret.read().map_err(|e| format!("introspection.client_secret: {e}"))?;
        let encode = |text: &str| form_urlencoded::byte_serialize(text.as_bytes()).collect::<String>();
        let credentials = format!("{}:{}", encode(&config.client_id), encode(secret.expose()));
        use base64::Engine as _;
        let basic = base64::engine::general_purpose::STANDARD.encode(credentials);
        Ok(Introspector {
            endpoint: config.endpoint.clone(),
            authorization: Secret::new(format!("Basic {basic}")),
            cache_for: Duration::from_secs(config.cache_s),
            slots: Semaphore::new(IN_FLIGHT),
            inactive: Remembered::new(),
            http,
            warned: AtomicU64::new(0),
        })
    }

    /// Ask `issuer` about `token` (whose SHA-256 is `digest`), and check the answer as a JWT's claims would be checked:
    /// the claims, whose `exp` says until when they may be reused.
    pub async fn introspect(
        &self,
        (token, digest): (&str, &[u8; 32]),
        issuer: &IssuerKeys,
        resource: &str,
        leeway: u64,
    ) -> Result<Claims, AuthError> {
        let endpoint = match &self.endpoint {
            Some(endpoint) => endpoint.as_str(),
            None => issuer.introspection_endpoint().await.map_err(|e| self.unavailable(e.to_string()))?,
        };
        if self.inactive.get(digest, Instant::now()).is_some() {
            return Err(AuthError::Invalid(NOT_ACTIVE.into()));
        }
        let answer: Answer = {
            let _slot = match tokio::time::timeout(SLOT_WAIT, self.slots.acquire()).await {
                Ok(slot) => slot.map_err(|_| AuthError::Invalid("introspection is shut down".into()))?,
                Err(_) => {
                    return Err(self.unavailable(format!(
                        "{IN_FLIGHT} introspections were in flight for {}s, and a token waiting as \
                         long was not asked about",
                        SLOT_WAIT.as_secs()
                    )));
                }
            };
            let response = self
                .http
                .post(endpoint)
                .header(http::header::AUTHORIZATION, self.authorization.expose())
                .header(http::header::ACCEPT, "application/json")
                .form(&[("token", token), ("token_type_hint", "access_token")])
                .send()
                .await
                .map_err(|e| self.unavailable(format!("{endpoint}: {e}")))?;
            let status = response.status();
            // A refusal no retry mends: of the question (400 and its kind), or of Capsule's own
            // credentials (401, 403), which the operator must hear of. Not an outage.
            if status.is_client_error() && status != http::StatusCode::TOO_MANY_REQUESTS {
                let credentials = matches!(status.as_u16(), 401 | 403);
                self.warn_at_most_every(|| match credentials {
                    true => format!("{endpoint} refused Capsule's introspection credentials (HTTP {status})"),
                    false => format!("{endpoint} refused to introspect a token (HTTP {status})"),
                });
                return Err(AuthError::Invalid("the authorization server refused to introspect the token".into()));
            }
            read_json(endpoint, response).await.map_err(|e| self.unavailable(e))?
        };
        if !answer.active {
            self.inactive.insert(*digest, (), Instant::now() + self.cache_for);
        }
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        check(&answer, issuer.issuer(), resource, leeway, now).map_err(AuthError::Invalid)?;
        let until = answer.exp.unwrap_or(u64::MAX).min(now.saturating_add(self.cache_for.as_secs()));
        Ok(Claims {
            iss: issuer.issuer().to_owned(),
            exp: until,
            sub: answer.sub,
            client_id: answer.client_id,
            scope: answer.scope,
            scp: None,
            _nbf: None,
            iat: None,
        })
    }

    /// The authorization server could not be asked: why goes to the operator's log (at most
    /// one warning each [`WARN_EVERY`] seconds), never to the client.
    fn unavailable(&self, why: String) -> AuthError {
        self.warn_at_most_every(|| format!("token introspection failed: {why}"));
        AuthError::Unavailable
    }

    /// Log a warning, or at debug when one was logged less than [`WARN_EVERY`] seconds ago.
    fn warn_at_most_every(&self, why: impl FnOnce() -> String) {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let last = self.warned.load(Ordering::Relaxed);
        if now >= last + WARN_EVERY
            && self.warned.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            tracing::warn!("{}", why());
        } else {
            tracing::debug!("{}", why());
        }
    }
}

/// Whether an answer vouches for the token here and now.
fn check(answer: &Answer, issuer: &str, resource: &str, leeway: u64, now: u64) -> Result<(), String> {
    if !answer.active {
        return Err(NOT_ACTIVE.into());
    }
    // Exactly the issuer, as a JWT's `iss` must be.
    if answer.iss.as_deref().is_some_and(|iss| iss != issuer) {
        return Err("the token's issuer is not trusted here".into());
    }
    // An answer that names no audience does not say the token is for us: refused, so a token
    // minted for another service cannot be replayed here (RFC 8707).
    if !answer.aud.as_ref().is_some_and(|aud| aud.contains(resource)) {
        return Err("the token was not issued for this resource".into());
    }
    if answer.exp.is_some_and(|exp| exp.saturating_add(leeway) <= now) {
        return Err("the token has expired".into());
    }
    if answer.nbf.is_some_and(|nbf| nbf > now.saturating_add(leeway)) {
        return Err("the token is not valid yet".into());
    }
    if answer.token_type.as_deref().is_some_and(|t| !t.eq_ignore_ascii_case("bearer") && t != "access_token") {
        return Err("the token is not an access token".into());
    }
    if answer.sub.is_none() && answer.client_id.is_none() {
        return Err("the token names no subject".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(json: &str) -> Answer {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn answers_are_held_to_issuer_audience_time_and_type() {
        let check = |json: &str| check(&answer(json), "https://login.example", "https://mcp.example/mcp", 5, 1000);
        let good = r#"{"active": true, "iss": "https://login.example", "aud": ["x", "https://mcp.example/mcp"],
            "exp": 2000, "sub": "carol", "scope": "plugins", "token_type": "Bearer"}"#;
        assert_eq!(check(good), Ok(()));
        let slashed = r#"{"active": true, "aud": "https://mcp.example/mcp/", "sub": "carol"}"#;
        assert_eq!(check(slashed), Ok(()));
        for (json, why) in [
            (r#"{"active": false}"#, "not active"),
            (
                r#"{"active": true, "iss": "https://evil.example", "aud": "https://mcp.example/mcp", "sub": "a"}"#,
                "issuer",
            ),
            (r#"{"active": true, "iss": "https://login.example/", "sub": "a"}"#, "issuer"),
            (r#"{"active": true, "aud": "https://other.example/mcp", "sub": "a"}"#, "not issued for this resource"),
            (r#"{"active": true, "aud": "https://mcp.example/mcp//", "sub": "a"}"#, "not issued for this resource"),
            (r#"{"active": true, "sub": "a"}"#, "not issued for this resource"),
            (r#"{"active": true, "aud": "https://mcp.example/mcp", "sub": "a", "exp": 995}"#, "expired"),
            (r#"{"active": true, "aud": "https://mcp.example/mcp", "sub": "a", "nbf": 1006}"#, "not valid yet"),
            (
                r#"{"active": true, "aud": "https://mcp.example/mcp", "sub": "a", "token_type": "refresh_token"}"#,
                "not an access token",
            ),
            (r#"{"active": true, "aud": "https://mcp.example/mcp"}"#, "no subject"),
        ] {
            let error = check(json).unwrap_err();
            assert!(error.contains(why), "{json}: {error}");
        }
    }
}
