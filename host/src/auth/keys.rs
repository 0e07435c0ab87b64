//! An issuer's signing keys: found through its metadata (OpenID Connect discovery, then RFC
//! 8414) unless configured, fetched once, cached, and fetched again only when a token names a
//! key the cache does not hold, at most once per [`REFETCH_AFTER`], so a stream of tokens with
//! made-up key ids cannot turn the server into a client hammering the issuer.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use jsonwebtoken::DecodingKey;
use jsonwebtoken::jwk::JwkSet;
use serde::Deserialize;
use tokio::sync::{Mutex, RwLock};

/// The least time between two fetches of an issuer's keys.
pub const REFETCH_AFTER: Duration = Duration::from_secs(30);
/// The most a metadata document or key set may weigh.
const MAX_DOCUMENT: usize = 1 << 20;

/// Why a key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("the authorization server's keys could not be fetched: {0}")]
    Fetch(String),
    #[error("the token's signing key is not one of the authorization server's")]
    Unknown,
}

#[derive(Default)]
struct Cached {
    keys: HashMap<String, DecodingKey>,
    /// Keys without an id, tried when a token names none.
    anonymous: Vec<DecodingKey>,
    fetched: Option<Instant>,
}

/// One issuer's keys.
pub struct IssuerKeys {
    issuer: String,
    /// Configured, or found by discovery (then remembered).
    jwks_uri: Mutex<Option<String>>,
    cache: RwLock<Cached>,
    /// One fetch at a time.
    fetching: Mutex<()>,
    http: reqwest::Client,
}

#[derive(Deserialize)]
struct Metadata {
    issuer: String,
    jwks_uri: String,
}

impl IssuerKeys {
    pub fn new(issuer: &str, jwks_uri: Option<String>, http: reqwest::Client) -> IssuerKeys {
        IssuerKeys {
            issuer: issuer.to_owned(),
            jwks_uri: Mutex::new(jwks_uri),
            cache: RwLock::default(),
            fetching: Mutex::new(()),
            http,
        }
    }

    /// The keys a token with key id `kid` may have been signed with.
    pub async fn keys(&self, kid: Option<&str>) -> Result<Vec<DecodingKey>, KeyError> {
        if let Some(found) = Self::lookup(&*self.cache.read().await, kid) {
            return Ok(found);
        }
        let _one = self.fetching.lock().await;
        let cache = self.cache.read().await;
        if let Some(found) = Self::lookup(&cache, kid) {
            return Ok(found);
        }
        if cache.fetched.is_some_and(|at| at.elapsed() < REFETCH_AFTER) {
            return Err(KeyError::Unknown);
        }
        drop(cache);
        let fetched = self.fetch().await;
        let mut cache = self.cache.write().await;
        cache.fetched = Some(Instant::now());
        let set = fetched?;
        cache.keys.clear();
        cache.anonymous.clear();
        for jwk in &set.keys {
            // Keys that cannot verify signatures (encryption keys, unknown types) are skipped.
            let Ok(key) = DecodingKey::from_jwk(jwk) else { continue };
            match &jwk.common.key_id {
                Some(id) => {
                    cache.keys.insert(id.clone(), key);
                }
                None => cache.anonymous.push(key),
            }
        }
        tracing::info!(issuer = %self.issuer, keys = set.keys.len(), "fetched the authorization server's keys");
        Self::lookup(&cache, kid).ok_or(KeyError::Unknown)
    }

    fn lookup(cache: &Cached, kid: Option<&str>) -> Option<Vec<DecodingKey>> {
        match kid {
            Some(kid) => cache.keys.get(kid).map(|key| vec![key.clone()]),
            None if !cache.anonymous.is_empty() => Some(cache.anonymous.clone()),
            None if cache.keys.len() == 1 => Some(cache.keys.values().cloned().collect()),
            None => None,
        }
    }

    async fn fetch(&self) -> Result<JwkSet, KeyError> {
        let mut uri = self.jwks_uri.lock().await;
        let jwks_uri = match &*uri {
            Some(known) => known.clone(),
            None => {
                let found = self.discover().await?;
                uri.insert(found).clone()
            }
        };
        drop(uri);
        self.get_json(&jwks_uri).await
    }

    /// The issuer's `jwks_uri`, from its OpenID Connect or RFC 8414 metadata. The metadata's
    /// `issuer` must be the issuer itself (RFC 8414 §3.3).
    async fn discover(&self) -> Result<String, KeyError> {
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
                Ok(metadata) if metadata.issuer.trim_end_matches('/') == issuer => return Ok(metadata.jwks_uri),
                Ok(metadata) => last = format!("{url} names issuer {}, not {}", metadata.issuer, self.issuer),
                Err(e) => last = e.to_string(),
            }
        }
        Err(KeyError::Fetch(last))
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, KeyError> {
        let failed = |e: String| KeyError::Fetch(format!("{url}: {e}"));
        let response = self.http.get(url).send().await.map_err(|e| failed(e.to_string()))?;
        if !response.status().is_success() {
            return Err(failed(format!("HTTP {}", response.status())));
        }
        if response.content_length().is_some_and(|n| n > MAX_DOCUMENT as u64) {
            return Err(failed("the document is too large".into()));
        }
        let body = response.bytes().await.map_err(|e| failed(e.to_string()))?;
        if body.len() > MAX_DOCUMENT {
            return Err(failed("the document is too large".into()));
        }
        serde_json::from_slice(&body).map_err(|e| failed(e.to_string()))
    }
}
