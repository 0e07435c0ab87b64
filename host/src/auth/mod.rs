//! The OAuth 2.1 resource server: a tenant whose policy has `[auth]` takes requests only
//! with a bearer token its authorization servers issued for its endpoint (RFC 8707
//! audience): a JWT checked against the issuer's keys, or an opaque token the issuer vouches
//! for by introspection (RFC 7662); or one of its static API keys.
//!
//! The transport authenticates every request before reading its body and hands the
//! [`Principal`] on; the MCP layer holds each request to the principal's [`scope`]s. Tokens
//! go nowhere else: not to plugins, not to logs (failures are described, never echoed).

mod introspect;
mod keys;
pub mod scope;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use http::HeaderMap;
use jsonwebtoken::{Algorithm, Validation};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::policy::AuthConfig;
use introspect::Introspector;
use keys::IssuerKeys;
pub use scope::Granted;

/// When a client told that the authorization server could not be asked may try again: when
/// its keys may be fetched again.
pub const RETRY_AFTER: Duration = keys::REFETCH_AFTER;
/// How long fetching an authorization server's metadata or keys may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a verified token is taken without checking its signature again (never past its
/// `exp`): the signature check is most of what authentication costs.
const VERIFIED_FOR: Duration = Duration::from_secs(300);
/// Verdicts on tokens remembered at most, each kind: past it, the lapsed are let go, then all.
const REMEMBERED_CAP: usize = 10_000;

/// Who sent a request, as their token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Stable across the principal's tokens: the issuer and subject (or the API key's
    /// subject). Sessions, `requestState` and quotas are bound to it.
    pub id: Arc<str>,
    /// The token's subject.
    pub subject: String,
    /// The OAuth client the token was issued to, when it says.
    pub client_id: Option<String>,
    /// What the token grants.
    pub scopes: Granted,
}

/// Why a request was not authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthError {
    /// No credentials at all.
    Missing,
    /// Credentials that are not good: why, in words fit for the client (never the token).
    Invalid(String),
    /// The authorization server could not be asked (its metadata, keys or introspection):
    /// its fault, not the token's, so a client is not sent to sign in again. Why is in the
    /// operator's log; a client hears nothing of its addresses or answers.
    Unavailable,
}

#[derive(Deserialize)]
struct Claims {
    iss: String,
    exp: u64,
    #[serde(default)]
    sub: Option<String>,
    #[serde(default)]
    client_id: Option<String>,
    /// Its value is checked by jsonwebtoken, which passes over one that is not a number;
    /// read here so that such a token is refused (RFC 7519: a NumericDate is a number).
    #[serde(default, rename = "nbf")]
    _nbf: Option<NumericDate>,
    /// Checked here: jsonwebtoken does not look at it.
    #[serde(default)]
    iat: Option<NumericDate>,
    #[serde(default)]
    scope: Option<String>,
    /// Okta writes a list, Entra ID a space-separated string.
    #[serde(default)]
    scp: Option<Scp>,
}

/// A NumericDate claim: any JSON number (seconds since the epoch).
struct NumericDate(f64);

impl<'de> Deserialize<'de> for NumericDate {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        f64::deserialize(deserializer).map(NumericDate)
    }
}

/// Whether a token says it was issued (`iat`) later than `now` plus `leeway` seconds: its
/// issuer's clock is wrong, or it was not made by the issuer at all.
fn issued_in_the_future(iat: Option<&NumericDate>, now: u64, leeway: u64) -> bool {
    iat.is_some_and(|NumericDate(at)| *at > now.saturating_add(leeway) as f64)
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Scp {
    List(Vec<String>),
    Text(String),
}

/// The `iss` of a token, read before its signature is checked, to pick the keys that check
/// it; the signature check then holds the token to that issuer.
fn peek_issuer(token: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Issuer {
        iss: String,
    }
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).ok()?;
    serde_json::from_slice::<Issuer>(&bytes).ok().map(|i| i.iss)
}

/// Whether the token's header lists critical extensions (`crit`, whatever its value, however
/// often). Capsule understands none, so such a token is invalid (RFC 7515, section
/// 4.1.11); jsonwebtoken does not look. A header that is no JSON object is taken as listing
/// some: what cannot be read whole cannot be said to list none.
fn has_critical_extensions(token: &str) -> bool {
    let header = token.split('.').next().unwrap_or_default();
    let Ok(bytes) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(header) else { return true };
    // A map keeps the last of two members of one name, where a struct refuses the pair.
    serde_json::from_slice::<serde_json::Map<String, Value>>(&bytes).map_or(true, |h| h.contains_key("crit"))
}

/// The item whose secret's SHA-256 is `digest`. Every candidate is compared in full, in
/// time that does not depend on where digests differ, so timing tells nothing of which one
/// (if any) matched.
pub fn find_by_digest<'a, T>(digest: &[u8; 32], candidates: impl IntoIterator<Item = (&'a [u8; 32], T)>) -> Option<T> {
    let mut found = None;
    for (candidate, item) in candidates {
        if digest.iter().zip(candidate.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0 {
            found = Some(item);
        }
    }
    found
}

/// Seconds since the Unix epoch.
fn epoch_seconds() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

/// How long a verdict on a token that expires at `exp` may be reused at `now` (both in
/// seconds since the epoch): never past its expiry, nor past [`VERIFIED_FOR`]. Counted in
/// seconds, since an issuer's `exp` may be any u64 (past what a `SystemTime` can hold), and a
/// token taken within the leeway has expired already.
fn reusable_for(exp: u64, now: u64) -> Duration {
    Duration::from_secs(exp.saturating_sub(now)).min(VERIFIED_FOR)
}

/// A quoted-string value for `WWW-Authenticate`, with nothing that could end the quotes.
fn quoted(text: &str) -> String {
    let clean: String = text.chars().filter(|c| *c != '"' && *c != '\\' && !c.is_control()).collect();
    format!("\"{clean}\"")
}

/// One tenant's resource server.
pub struct Authenticator {
    config: AuthConfig,
    issuers: Vec<Arc<IssuerKeys>>,
    algorithms: Vec<Algorithm>,
    introspector: Option<Introspector>,
    /// Tokens verified lately, with their principal.
    verified: Remembered<Arc<Principal>>,
}

/// Verdicts on tokens lately judged, by their SHA-256 (the tokens themselves are not kept),
/// each until when it stands; at most [`REMEMBERED_CAP`].
pub(super) struct Remembered<V>(std::sync::Mutex<HashMap<[u8; 32], (V, Instant)>>);

impl<V: Clone> Remembered<V> {
    fn new() -> Self {
        Remembered(std::sync::Mutex::default())
    }

    /// The verdict on `digest`, if one stands at `now`.
    fn get(&self, digest: &[u8; 32], now: Instant) -> Option<V> {
        let held = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        held.get(digest).filter(|(_, until)| now < *until).map(|(value, _)| value.clone())
    }

    fn insert(&self, digest: [u8; 32], value: V, until: Instant) {
        let mut held = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if held.len() >= REMEMBERED_CAP {
            let now = Instant::now();
            held.retain(|_, (_, until)| now < *until);
            if held.len() >= REMEMBERED_CAP {
                held.clear();
            }
        }
        held.insert(digest, (value, until));
    }
}

impl Authenticator {
    pub fn new(config: AuthConfig) -> Result<Authenticator, String> {
        let http = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            // Metadata and keys come from where the operator said, not from wherever a
            // redirect points.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
        let keys_max_age = Duration::from_secs(config.keys_max_age_s);
        let issuers = config
            .authorization_servers
            .iter()
            .map(|issuer| Arc::new(IssuerKeys::new(issuer, config.jwks_uri.clone(), keys_max_age, http.clone())))
            .collect();
        let algorithms = config.algorithms.iter().filter_map(|name| name.parse().ok()).collect();
        let introspector = config.introspection.as_ref().map(|i| Introspector::new(i, http.clone())).transpose()?;
        Ok(Authenticator { config, issuers, algorithms, introspector, verified: Remembered::new() })
    }

    /// The settings it was made from.
    pub fn config(&self) -> &AuthConfig {
        &self.config
    }

    /// Authenticate a request by its `Authorization: Bearer` header.
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Arc<Principal>, AuthError> {
        let token = bearer(headers)?;
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(principal) = self.api_key(&digest) {
            return Ok(Arc::new(principal));
        }
        let now = Instant::now();
        if let Some(principal) = self.verified.get(&digest, now) {
            return Ok(principal);
        }
        let (principal, left) = self.verify(token, &digest).await?;
        let principal = Arc::new(principal);
        if !left.is_zero() {
            self.verified.insert(digest, principal.clone(), now + left);
        }
        Ok(principal)
    }

    /// Verify a token: locally if it is a JWT, by introspection if it is not and the tenant
    /// introspects. The principal, and how long the verdict may be reused.
    async fn verify(&self, token: &str, digest: &[u8; 32]) -> Result<(Principal, Duration), AuthError> {
        if let Some(introspector) = &self.introspector
            && jsonwebtoken::decode_header(token).is_err()
        {
            let (resource, leeway) = (&self.config.resource, self.config.leeway_s);
            let claims = introspector.introspect((token, digest), &self.issuers[0], resource, leeway).await?;
            let exp = claims.exp;
            return Ok((principal(claims).map_err(AuthError::Invalid)?, reusable_for(exp, epoch_seconds())));
        }
        let (principal, exp, fresh_until) = self.jwt(token).await?;
        // Not past the keys' freshness either: a token whose key is withdrawn is refused once
        // the keys are fetched again.
        let fresh_for = fresh_until.saturating_duration_since(Instant::now());
        Ok((principal, reusable_for(exp, epoch_seconds()).min(fresh_for)))
    }

    /// The API key whose digest this is, if any. Every key is compared, in constant time.
    fn api_key(&self, digest: &[u8; 32]) -> Option<Principal> {
        let keys = self.config.api_keys.iter().map(|key| (&key.sha256, key));
        find_by_digest(digest, keys).map(|key| Principal {
            id: format!("api-key:{}", key.subject).into(),
            subject: key.subject.clone(),
            client_id: None,
            scopes: Granted::of(&key.scopes),
        })
    }

    /// Verify a JWT: its principal, its `exp`, and until when its keys are fresh.
    async fn jwt(&self, token: &str) -> Result<(Principal, u64, Instant), AuthError> {
        let (alg, issuer, candidates) = self.jwt_keys(token).await?;
        let (principal, exp) = self.check_jwt(token, alg, &issuer, candidates.keys).map_err(AuthError::Invalid)?;
        Ok((principal, exp, candidates.fresh_until))
    }

    /// The keys that may have signed a JWT whose header passes: its issuer's, for its key id
    /// and algorithm (which are returned with them).
    async fn jwt_keys(&self, token: &str) -> Result<(Algorithm, String, keys::Candidates), AuthError> {
        let invalid = |why: &str| AuthError::Invalid(why.to_owned());
        let header = jsonwebtoken::decode_header(token).map_err(|_| invalid("the token is not a signed JWT"))?;
        if !self.algorithms.contains(&header.alg) {
            return Err(AuthError::Invalid(format!("tokens signed with {:?} are not accepted", header.alg)));
        }
        if has_critical_extensions(token) {
            return Err(invalid("the token's header lists critical extensions (crit), which are not understood here"));
        }
        if self.config.require_at_jwt
            && !header
                .typ
                .as_deref()
                .is_some_and(|t| t.eq_ignore_ascii_case("at+jwt") || t.eq_ignore_ascii_case("application/at+jwt"))
        {
            return Err(invalid("the token is not an access token (typ at+jwt)"));
        }
        let issuer = peek_issuer(token).ok_or_else(|| invalid("the token names no issuer"))?;
        let Some(at) = self.config.authorization_servers.iter().position(|s| *s == issuer) else {
            return Err(invalid("the token's issuer is not trusted here"));
        };
        let keys = self.issuers[at].keys(header.kid.as_deref(), header.alg).await.map_err(|e| match e {
            keys::KeyError::Fetch(_) => AuthError::Unavailable,
            keys::KeyError::Unknown => AuthError::Invalid(e.to_string()),
        })?;
        Ok((header.alg, issuer, keys))
    }

    /// Check a JWT's signature, by one of `keys`, and its claims: its principal, and its `exp`.
    fn check_jwt(
        &self,
        token: &str,
        alg: Algorithm,
        issuer: &str,
        keys: Vec<jsonwebtoken::DecodingKey>,
    ) -> Result<(Principal, u64), String> {
        let mut validation = Validation::new(alg);
        validation.set_issuer(&[issuer]);
        validation.set_audience(&self.config.audiences());
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.validate_nbf = true;
        validation.leeway = self.config.leeway_s;
        let mut last = "the token's signature does not verify".to_owned();
        for key in keys {
            match jsonwebtoken::decode::<Claims>(token, &key, &validation) {
                Ok(data) if issued_in_the_future(data.claims.iat.as_ref(), epoch_seconds(), self.config.leeway_s) => {
                    return Err("the token says it was issued in the future".into());
                }
                Ok(data) => {
                    let exp = data.claims.exp;
                    return principal(data.claims).map(|p| (p, exp));
                }
                Err(e) => {
                    use jsonwebtoken::errors::ErrorKind;
                    last = match e.kind() {
                        // Not this key (nor, for a key of another type, its algorithm): the next.
                        ErrorKind::InvalidSignature | ErrorKind::InvalidAlgorithm => continue,
                        ErrorKind::ExpiredSignature => "the token has expired".into(),
                        ErrorKind::ImmatureSignature => "the token is not valid yet".into(),
                        ErrorKind::InvalidAudience => "the token was not issued for this resource".into(),
                        ErrorKind::InvalidIssuer => "the token's issuer is not trusted here".into(),
                        ErrorKind::MissingRequiredClaim(claim) => format!("the token has no {claim} claim"),
                        _ => "the token is not valid".into(),
                    };
                    break;
                }
            }
        }
        Err(last)
    }

    /// The `WWW-Authenticate` value for a 401: where the metadata is and the scopes that
    /// would do, plus what was wrong with the credentials if some were sent.
    pub fn challenge(&self, error: &AuthError, scopes: &[String]) -> String {
        let mut value = format!("Bearer resource_metadata={}", quoted(&self.config.metadata_url()));
        if !scopes.is_empty() {
            value.push_str(&format!(", scope={}", quoted(&scopes.join(" "))));
        }
        if let AuthError::Invalid(why) = error {
            value.push_str(&format!(", error=\"invalid_token\", error_description={}", quoted(why)));
        }
        value
    }

    /// The `WWW-Authenticate` value for a 403: the scope a request needs.
    pub fn insufficient_scope(&self, needed: &str) -> String {
        format!(
            "Bearer error=\"insufficient_scope\", scope={}, resource_metadata={}, error_description={}",
            quoted(needed),
            quoted(&self.config.metadata_url()),
            quoted(&format!("this request needs the scope {needed}"))
        )
    }

    /// The protected-resource metadata (RFC 9728).
    pub fn metadata(&self, scopes_supported: &[String]) -> Value {
        json!({
            "resource": self.config.resource,
            "authorization_servers": self.config.authorization_servers,
            "scopes_supported": scopes_supported,
            "bearer_methods_supported": ["header"],
        })
    }
}

/// The principal a token names: its issuer and subject, or, for a token that names no subject
/// (introspection answers may not), its issuer and client, in an id no subject can take.
fn principal(claims: Claims) -> Result<Principal, String> {
    let (iss, sub, client) = (&claims.iss, claims.sub.filter(|s| !s.is_empty()), claims.client_id.as_deref());
    let (id, subject) = match (sub, client.filter(|c| !c.is_empty())) {
        (Some(sub), _) => (format!("{iss}#{}", serde_json::Value::from(&*sub)), sub),
        (None, Some(client)) => (format!("{iss}#client_id={}", serde_json::Value::from(client)), client.to_owned()),
        (None, None) => return Err("the token names no subject".into()),
    };
    let scopes = match (claims.scope, claims.scp) {
        (Some(scope), _) => Granted::parse(&scope),
        (None, Some(Scp::List(list))) => Granted::of(&list),
        (None, Some(Scp::Text(text))) => Granted::parse(&text),
        (None, None) => Granted::default(),
    };
    Ok(Principal { id: id.into(), subject, client_id: claims.client_id, scopes })
}

/// The token of a request's one `Authorization` header, whose scheme is `Bearer` in any case
/// (RFC 9110, section 11.1). Two headers are refused: which one a proxy in front judged
/// cannot be told.
pub fn bearer(headers: &HeaderMap) -> Result<&str, AuthError> {
    let mut values = headers.get_all(http::header::AUTHORIZATION).iter();
    let Some(value) = values.next() else { return Err(AuthError::Missing) };
    if values.next().is_some() {
        return Err(AuthError::Invalid("more than one Authorization header".into()));
    }
    let value = value.to_str().map_err(|_| AuthError::Invalid("the Authorization header is not text".into()))?;
    match value.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() => Ok(token.trim()),
        _ => Err(AuthError::Invalid("expected Authorization: Bearer <token>".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::scope::Kind;
    use crate::policy::ApiKey;

    fn authenticator() -> Authenticator {
        let key: [u8; 32] = Sha256::digest(b"a-static-key-0123456789").into();
        Authenticator::new(AuthConfig {
            resource: "https://mcp.example/t/acme/mcp".into(),
            authorization_servers: vec!["https://login.example".into()],
            jwks_uri: None,
            algorithms: vec!["RS256".into()],
            leeway_s: 0,
            keys_max_age_s: 300,
            require_at_jwt: false,
            api_keys: vec![ApiKey { subject: "ci".into(), sha256: key, scopes: vec!["plugins.calc".into()] }],
            introspection: None,
        })
        .unwrap()
    }

    fn bearer(token: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
        headers
    }

    #[test]
    fn a_header_listing_critical_extensions_is_told() {
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let token = |header: &str| format!("{}.{}.sig", b64(header), b64(r#"{"iss":"https://i"}"#));
        assert!(has_critical_extensions(&token(r#"{"alg":"RS256","kid":"k","crit":["foo"],"foo":1}"#)));
        assert!(has_critical_extensions(&token(r#"{"alg":"RS256","crit":[]}"#)));
        assert!(!has_critical_extensions(&token(r#"{"alg":"RS256","kid":"k","typ":"at+jwt"}"#)));
        // Named twice (a struct refused the pair and read none), or null.
        assert!(has_critical_extensions(&token(r#"{"alg":"RS256","crit":["x"],"x":1,"crit":["x"]}"#)));
        assert!(has_critical_extensions(&token(r#"{"alg":"RS256","crit":null}"#)));
    }

    #[tokio::test]
    async fn api_keys_and_malformed_credentials_are_told_apart_without_io() {
        let auth = authenticator();
        let principal = auth.authenticate(&bearer("a-static-key-0123456789")).await.unwrap();
        assert_eq!((&*principal.id, principal.scopes.iter().collect::<Vec<_>>()), ("api-key:ci", vec!["plugins.calc"]));
        assert_eq!(auth.authenticate(&HeaderMap::new()).await, Err(AuthError::Missing));
        let mut basic = HeaderMap::new();
        basic.insert(http::header::AUTHORIZATION, "Basic YTpi".parse().unwrap());
        assert!(matches!(auth.authenticate(&basic).await, Err(AuthError::Invalid(_))));
        let unsigned = "eyJhbGciOiJub25lIn0.eyJpc3MiOiJodHRwczovL2xvZ2luLmV4YW1wbGUifQ.";
        assert_eq!(
            auth.authenticate(&bearer(unsigned)).await,
            Err(AuthError::Invalid("the token is not a signed JWT".into()))
        );
    }

    #[test]
    fn a_verdict_is_reused_until_expiry_at_most_and_any_exp_is_counted() {
        assert_eq!(reusable_for(1_060, 1_000), Duration::from_secs(60));
        assert_eq!(reusable_for(995, 1_000), Duration::ZERO, "an expired token taken within the leeway");
        assert_eq!(reusable_for(u64::MAX, 1_000), VERIFIED_FOR);
        assert_eq!(reusable_for(10_000_000_000_000_000_000, epoch_seconds()), VERIFIED_FOR);
    }

    #[test]
    fn scopes_are_read_from_scope_or_either_form_of_scp() {
        let claims = |json: &str| principal(serde_json::from_str::<Claims>(json).unwrap()).unwrap();
        let okta = claims(r#"{"iss": "https://o", "exp": 1, "sub": "a", "scp": ["plugins.calc", "plugins.files"]}"#);
        let entra = claims(r#"{"iss": "https://e", "exp": 1, "sub": "a", "scp": "plugins.calc plugins.files"}"#);
        assert_eq!(okta.scopes, entra.scopes);
        let client = claims(r#"{"iss": "https://i", "exp": 1, "client_id": "svc", "scope": "plugins"}"#);
        assert_eq!((&*client.id, client.scopes.allows("x", Kind::Tools, "y")), (r#"https://i#client_id="svc""#, true));
        // A subject and a client of the same name are not one principal; an empty subject is none.
        let user = claims(r#"{"iss": "https://i", "exp": 1, "sub": "svc", "client_id": "web"}"#);
        assert_eq!(&*user.id, r#"https://i#"svc""#);
        let empty = claims(r#"{"iss": "https://i", "exp": 1, "sub": "", "client_id": "svc"}"#);
        assert_eq!(empty.id, client.id);
        assert!(principal(serde_json::from_str(r#"{"iss": "https://i", "exp": 1, "sub": ""}"#).unwrap()).is_err());
        assert!(serde_json::from_str::<Claims>(r#"{"iss": "https://i", "exp": 1, "sub": "a", "nbf": "9"}"#).is_err());
        assert!(serde_json::from_str::<Claims>(r#"{"iss": "https://i", "exp": 1, "sub": "a", "nbf": 9.5}"#).is_ok());
        assert!(serde_json::from_str::<Claims>(r#"{"iss": "https://i", "exp": 1, "sub": "a", "iat": "9"}"#).is_err());
    }

    #[test]
    fn a_token_issued_in_the_future_is_told_apart_within_the_leeway() {
        let at = |t: f64| Some(NumericDate(t));
        assert!(!issued_in_the_future(None, 1_000, 0));
        assert!(!issued_in_the_future(at(1_000.0).as_ref(), 1_000, 0));
        assert!(issued_in_the_future(at(1_000.5).as_ref(), 1_000, 0));
        assert!(!issued_in_the_future(at(1_030.0).as_ref(), 1_000, 30));
        assert!(issued_in_the_future(at(1_031.0).as_ref(), 1_000, 30));
        assert!(issued_in_the_future(at(1e300).as_ref(), u64::MAX, 30), "the leeway saturates");
    }

    #[test]
    fn challenges_point_at_the_configured_metadata_and_cannot_be_broken_out_of() {
        let auth = authenticator();
        let missing = auth.challenge(&AuthError::Missing, &["plugins.calc".into()]);
        assert_eq!(
            missing,
            "Bearer resource_metadata=\"https://mcp.example/.well-known/oauth-protected-resource/t/acme/mcp\", \
             scope=\"plugins.calc\""
        );
        let invalid = auth.challenge(&AuthError::Invalid("bad \"quote\"\r\nX: y".into()), &[]);
        assert!(invalid.ends_with("error=\"invalid_token\", error_description=\"bad quoteX: y\""), "{invalid}");
        assert!(auth.insufficient_scope("plugins.calc.tools.add").contains("scope=\"plugins.calc.tools.add\""));
    }
}
