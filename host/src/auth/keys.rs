//! An issuer's metadata and signing keys. The metadata (OpenID Connect discovery, then RFC
//! 8414) names the keys and the introspection endpoint, unless they are configured. Keys are
//! fetched once and cached; fetched again when a token names a key the cache does not hold,
//! at most once per [`REFETCH_AFTER`], so a stream of tokens with made-up key ids cannot turn
//! the server into a client hammering the issuer; and once the set is older than its maximum
//! age, so that a key the issuer withdraws stops being taken. That refresh runs on a task of
//! its own while requests go on with the keys at hand (none waits on the issuer for it, and
//! none can cut it short by hanging up); the keys are kept when it fails (an issuer that
//! cannot be reached does not stop the tokens it signed). A verdict reached with a key set
//! stands no longer than the set is fresh, so a token verified with a key later withdrawn is
//! not remembered past the refresh that drops it. A key is held to what its JWK says it
//! is for (RFC 7517: `use`, `key_ops`, `alg`; RFC 8725, section 3.1: one algorithm a key).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{Jwk, KeyOperations, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;
use tokio::sync::{Mutex, OnceCell, RwLock};

/// The least time between two fetches of an issuer's keys.
pub const REFETCH_AFTER: Duration = Duration::from_secs(30);
/// The most a metadata document or key set may weigh.
const MAX_DOCUMENT: usize = 1 << 20;

/// Why a key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The issuer's metadata or keys could not be had: the issuer's fault, not the token's
    /// (the detail is for the operator's log, never for the client).
    #[error("{0}")]
    Fetch(String),
    #[error("the token's signing key is not one of the authorization server's for its algorithm")]
    Unknown,
}

/// A signing key, and the one algorithm its JWK names, if it names one.
#[derive(Clone)]
struct Key {
    key: DecodingKey,
    alg: Option<Algorithm>,
}

#[derive(Default)]
struct Cached {
    /// By key id: one key may be published under one id for several algorithms.
    keys: HashMap<String, Vec<Key>>,
    /// Keys without an id, tried when a token names none.
    anonymous: Vec<Key>,
    /// When a fetch was last tried (from its start: a fetch in flight counts).
    fetched: Option<Instant>,
    /// When the fetch that brought the keys held started (freshness is counted as staleness
    /// is, from there).
    refreshed: Option<Instant>,
    /// Whether the last fetch failed (the keys from before it are kept).
    failed: bool,
}

impl Cached {
    /// Whether the keys are due to be fetched again: older than `max_age`, or, after a
    /// failed fetch, once [`REFETCH_AFTER`] has passed (or `max_age`, if shorter).
    fn stale(&self, max_age: Duration) -> bool {
        let every = if self.failed { REFETCH_AFTER.min(max_age) } else { max_age };
        self.fetched.is_some_and(|at| at.elapsed() >= every)
    }

    /// Until when a verdict reached with these keys may stand.
    fn fresh_until(&self, max_age: Duration) -> Instant {
        self.refreshed.map_or_else(Instant::now, |at| at + max_age)
    }
}

/// Keys a token may have been signed with, and until when a verdict reached with them may
/// stand (past that, the key set is due to be fetched again).
pub struct Candidates {
    pub keys: Vec<DecodingKey>,
    pub fresh_until: Instant,
}

/// One issuer's keys.
pub struct IssuerKeys {
    issuer: String,
    /// Configured; otherwise the metadata's.
    jwks_uri: Option<String>,
    /// Found once, then remembered (a failed discovery is tried again, once
    /// [`REFETCH_AFTER`] has passed).
    metadata: OnceCell<Metadata>,
    /// When discovery last failed, and why.
    undiscovered: std::sync::Mutex<Option<(Instant, String)>>,
    cache: RwLock<Cached>,
    /// How long a fetched key set is taken before it is fetched again.
    max_age: Duration,
    /// Whether a refresh of a stale set is under way.
    refreshing: AtomicBool,
    /// One fetch at a time.
    fetching: Mutex<()>,
    http: reqwest::Client,
}

/// What an issuer's metadata says that matters here.
#[derive(Deserialize)]
struct Metadata {
    issuer: String,
    jwks_uri: Option<String>,
    introspection_endpoint: Option<String>,
}

impl IssuerKeys {
    pub fn new(issuer: &str, jwks_uri: Option<String>, max_age: Duration, http: reqwest::Client) -> IssuerKeys {
        IssuerKeys {
            issuer: issuer.to_owned(),
            jwks_uri,
            metadata: OnceCell::new(),
            undiscovered: std::sync::Mutex::new(None),
            cache: RwLock::default(),
            max_age,
            refreshing: AtomicBool::new(false),
            fetching: Mutex::new(()),
            http,
        }
    }

    /// The keys a token signed with `alg` and naming key id `kid` may have been signed with.
    pub async fn keys(self: &Arc<Self>, kid: Option<&str>, alg: Algorithm) -> Result<Candidates, KeyError> {
        let found = |cache: &Cached| {
            let keys = Self::lookup(cache, kid, alg)?;
            Some(Candidates { keys, fresh_until: cache.fresh_until(self.max_age) })
        };
        let cache = self.cache.read().await;
        if let Some(found) = found(&cache) {
            if cache.stale(self.max_age) {
                self.refresh_in_background();
            }
            return Ok(found);
        }
        drop(cache);
        // On a task of its own, which waits its turn and fetches: a client that hangs up
        // neither cuts the fetch short nor lets others past it while it runs.
        let (this, kid_owned) = (self.clone(), kid.map(str::to_owned));
        let fetched = tokio::spawn(async move {
            let _one = this.fetching.lock().await;
            let cache = this.cache.read().await;
            if Self::lookup(&cache, kid_owned.as_deref(), alg).is_some() {
                return Ok(());
            }
            if cache.fetched.is_some_and(|at| at.elapsed() < REFETCH_AFTER) {
                // Until the next fetch may be tried, a failed one still stands.
                return Err(match cache.failed {
                    true => KeyError::Fetch(format!("the keys of {} could not be fetched lately", this.issuer)),
                    false => KeyError::Unknown,
                });
            }
            drop(cache);
            this.refresh().await
        });
        fetched.await.unwrap_or_else(|e| Err(KeyError::Fetch(format!("the key fetch failed: {e}"))))?;
        found(&*self.cache.read().await).ok_or(KeyError::Unknown)
    }

    /// Fetch a stale key set again on a task of its own, unless that is under way.
    fn refresh_in_background(self: &Arc<Self>) {
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        /// Lets the next refresh start however this one ends (a panic, the runtime's end).
        struct Done(Arc<IssuerKeys>);
        impl Drop for Done {
            fn drop(&mut self) {
                self.0.refreshing.store(false, Ordering::Release);
            }
        }
        let done = Done(self.clone());
        tokio::spawn(async move {
            let this = &done.0;
            let _one = this.fetching.lock().await;
            if this.cache.read().await.stale(this.max_age) {
                let _ = this.refresh().await;
            }
        });
    }

    /// Fetch the key set and put it in place of the cached one; on failure the cached keys
    /// stay. The caller holds `fetching`.
    async fn refresh(&self) -> Result<(), KeyError> {
        // The attempt counts from its start, so that no other starts meanwhile.
        let started = Instant::now();
        self.cache.write().await.fetched = Some(started);
        let fetched = self.fetch().await;
        let mut cache = self.cache.write().await;
        cache.failed = fetched.is_err();
        let set =
            fetched.inspect_err(|e| tracing::warn!(issuer = %self.issuer, "{e}; the keys had before are kept"))?;
        cache.keys.clear();
        cache.anonymous.clear();
        let published = set.keys.len();
        for (id, key) in signing_keys(set) {
            match id {
                Some(id) => cache.keys.entry(id).or_default().push(key),
                None => cache.anonymous.push(key),
            }
        }
        cache.refreshed = Some(started);
        let usable = cache.keys.values().map(Vec::len).sum::<usize>() + cache.anonymous.len();
        if usable == 0 {
            tracing::warn!(
                issuer = %self.issuer,
                published,
                "the authorization server publishes no signing key Capsule can use: its JWTs are refused"
            );
        } else {
            tracing::info!(issuer = %self.issuer, keys = usable, published, "fetched the authorization server's keys");
        }
        Ok(())
    }

    fn lookup(cache: &Cached, kid: Option<&str>, alg: Algorithm) -> Option<Vec<DecodingKey>> {
        let fits = |key: &&Key| key.alg.is_none_or(|only| only == alg);
        let keys: Vec<DecodingKey> = match kid {
            Some(kid) => cache.keys.get(kid).into_iter().flatten().filter(fits).map(|key| key.key.clone()).collect(),
            None if !cache.anonymous.is_empty() => cache.anonymous.iter().filter(fits).map(|k| k.key.clone()).collect(),
            None if cache.keys.len() == 1 => {
                cache.keys.values().flatten().filter(fits).map(|k| k.key.clone()).collect()
            }
            None => Vec::new(),
        };
        (!keys.is_empty()).then_some(keys)
    }

    async fn fetch(&self) -> Result<Published, KeyError> {
        let jwks_uri = match &self.jwks_uri {
            Some(known) => known,
            None => self.metadata().await?.jwks_uri.as_ref().ok_or_else(|| self.lacks("jwks_uri"))?,
        };
        self.get_json(jwks_uri).await
    }

    /// The issuer itself, exactly as configured.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// Where the issuer introspects tokens (RFC 7662), as its metadata says.
    pub async fn introspection_endpoint(&self) -> Result<&str, KeyError> {
        let endpoint = self.metadata().await?.introspection_endpoint.as_deref();
        endpoint.ok_or_else(|| self.lacks("introspection_endpoint"))
    }

    fn lacks(&self, field: &str) -> KeyError {
        KeyError::Fetch(format!("the metadata of {} names no {field}", self.issuer))
    }

    /// The issuer's metadata; a discovery that failed lately fails again at once, so that
    /// requests while the issuer is down do not each ask it.
    async fn metadata(&self) -> Result<&Metadata, KeyError> {
        if let Some(found) = self.metadata.get() {
            return Ok(found);
        }
        let lately = |failed: &Option<(Instant, String)>| {
            failed.as_ref().filter(|(at, _)| at.elapsed() < REFETCH_AFTER).map(|(_, why)| why.clone())
        };
        if let Some(why) = lately(&self.undiscovered.lock().unwrap_or_else(|e| e.into_inner())) {
            return Err(KeyError::Fetch(why));
        }
        self.metadata
            .get_or_try_init(|| async {
                let found = self.discover().await;
                if let Err(KeyError::Fetch(why)) = &found {
                    tracing::warn!(issuer = %self.issuer, "discovery failed: {why}");
                    *self.undiscovered.lock().unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), why.clone()));
                }
                found
            })
            .await
    }

    /// The issuer's OpenID Connect or RFC 8414 metadata. Its `issuer` must be the issuer
    /// itself (RFC 8414 §3.3).
    async fn discover(&self) -> Result<Metadata, KeyError> {
        let issuer = self.issuer.trim_end_matches('/');
        let (origin, path) = match issuer.find("://").and_then(|at| issuer[at + 3..].find('/').map(|p| at + 3 + p)) {
            Some(at) => (&issuer[..at], &issuer[at..]),
            None => (issuer, ""),
        };
        let candidates = [
            format!("{issuer}/.well-known/openid-configuration"),
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
        ];
        let mut last = String::new();
        for url in candidates {
            match self.get_json::<Metadata>(&url).await {
                // Identical (RFC 8414, section 3.3): not up to a trailing slash either.
                Ok(metadata) if metadata.issuer == self.issuer => return Ok(metadata),
                Ok(metadata) => {
                    last = format!(
                        "{url} names issuer {:?}, not {:?}: the issuer must be configured exactly as the \
                         authorization server names itself, trailing slash and all",
                        metadata.issuer, self.issuer
                    )
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(KeyError::Fetch(last))
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, KeyError> {
        let response = self.http.get(url).send().await.map_err(|e| KeyError::Fetch(format!("{url}: {e}")))?;
        read_json(url, response).await.map_err(KeyError::Fetch)
    }
}

/// A bounded JSON answer from an authorization server; errors name `url`.
pub async fn read_json<T: serde::de::DeserializeOwned>(
    url: &str,
    mut response: reqwest::Response,
) -> Result<T, String> {
    let failed = |e: String| format!("{url}: {e}");
    if !response.status().is_success() {
        return Err(failed(format!("HTTP {}", response.status())));
    }
    let too_large = || failed(format!("the document is over {MAX_DOCUMENT} bytes"));
    if response.content_length().is_some_and(|n| n > MAX_DOCUMENT as u64) {
        return Err(too_large());
    }
    let body = crate::bounded::body(&mut response, MAX_DOCUMENT).await.map_err(|e| failed(e.to_string()))?;
    serde_json::from_slice(&body.ok_or_else(too_large)?).map_err(|e| failed(e.to_string()))
}

/// A key set as published: each key read on its own, so that one of a kind jsonwebtoken
/// cannot read (an algorithm or curve it does not know) does not cost the others.
#[derive(Deserialize)]
struct Published {
    keys: Vec<serde_json::Value>,
}

/// The signing keys of a published set, each with its id if it has one.
fn signing_keys(set: Published) -> impl Iterator<Item = (Option<String>, Key)> {
    set.keys.into_iter().filter_map(|value| {
        let jwk: Jwk = serde_json::from_value(value)
            .inspect_err(|e| tracing::debug!("a key the authorization server publishes is passed over: {e}"))
            .ok()?;
        Some((jwk.common.key_id.clone(), signing_key(&jwk)?))
    })
}

/// The signing key a JWK describes, if it is one: keys for encryption (`use`), for
/// operations other than verifying (`key_ops`), for an algorithm that signs nothing (`alg`)
/// or of a type jsonwebtoken cannot read are left out.
fn signing_key(jwk: &Jwk) -> Option<Key> {
    let common = &jwk.common;
    if common.public_key_use.as_ref().is_some_and(|used| *used != PublicKeyUse::Signature) {
        return None;
    }
    if common.key_operations.as_ref().is_some_and(|ops| !ops.contains(&KeyOperations::Verify)) {
        return None;
    }
    let alg = match &common.key_algorithm {
        Some(named) => Some(named.to_string().parse::<Algorithm>().ok()?),
        None => None,
    };
    Some(Key { key: DecodingKey::from_jwk(jwk).ok()?, alg })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_taken_only_for_what_its_jwk_says() {
        let rsa = r#""kty":"RSA","n":"sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw","e":"AQAB""#;
        let jwk = |extra: &str| -> Jwk { serde_json::from_str(&format!("{{{rsa}{extra}}}")).unwrap() };
        assert!(signing_key(&jwk("")).is_some_and(|k| k.alg.is_none()));
        assert!(signing_key(&jwk(r#","use":"sig","alg":"RS256""#)).is_some_and(|k| k.alg == Some(Algorithm::RS256)));
        assert!(signing_key(&jwk(r#","key_ops":["verify"]"#)).is_some());
        for refused in [r#","use":"enc""#, r#","key_ops":["encrypt"]"#, r#","alg":"RSA-OAEP""#] {
            assert!(signing_key(&jwk(refused)).is_none(), "{refused}");
        }
        // A key jsonwebtoken cannot read costs only itself; one id may serve two algorithms.
        let set = format!(
            r#"{{"keys": [{{{rsa},"kid":"k","alg":"RS256"}}, {{{rsa},"kid":"k","alg":"PS256"}},
                {{"kty":"EC","crv":"P-521","alg":"ES512","kid":"e","x":"AQ","y":"AQ"}}]}}"#
        );
        let mut cache = Cached::default();
        for (id, key) in signing_keys(serde_json::from_str(&set).unwrap()) {
            cache.keys.entry(id.unwrap()).or_default().push(key);
        }
        assert_eq!(cache.keys.len(), 1);
        assert!(IssuerKeys::lookup(&cache, Some("k"), Algorithm::RS256).is_some());
        assert!(IssuerKeys::lookup(&cache, Some("k"), Algorithm::PS256).is_some());
        assert!(IssuerKeys::lookup(&cache, Some("k"), Algorithm::RS512).is_none());
        assert!(IssuerKeys::lookup(&cache, None, Algorithm::RS512).is_none());
    }
}
