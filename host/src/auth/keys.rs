//! An issuer's metadata and signing keys. The metadata (OpenID Connect discovery, then RFC
//! 8414) names the keys and the introspection endpoint, unless they are configured. Keys are
//! fetched once, cached, and fetched again only when a token names a key the cache does not
//! hold, at most once per [`REFETCH_AFTER`], so a stream of tokens with made-up key ids cannot
//! turn the server into a client hammering the issuer.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use jsonwebtoken::DecodingKey;
use jsonwebtoken::jwk::JwkSet;
use serde::Deserialize;
use tokio::sync::{Mutex, OnceCell, RwLock};

/// The least time between two fetches of an issuer's keys.
pub const REFETCH_AFTER: Duration = Duration::from_secs(30);
/// The most a metadata document or key set may weigh.
const MAX_DOCUMENT: usize = 1 << 20;

/// Why a key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("the authorization server could not be asked: {0}")]
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
    /// Configured; otherwise the metadata's.
    jwks_uri: Option<String>,
    /// Found once, then remembered (a failed discovery is tried again next time).
    metadata: OnceCell<Metadata>,
    cache: RwLock<Cached>,
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
    pub fn new(issuer: &str, jwks_uri: Option<String>, http: reqwest::Client) -> IssuerKeys {
        IssuerKeys {
            issuer: issuer.to_owned(),
            jwks_uri,
            metadata: OnceCell::new(),
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

    async fn metadata(&self) -> Result<&Metadata, KeyError> {
        self.metadata.get_or_try_init(|| self.discover()).await
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
                Ok(metadata) if metadata.issuer.trim_end_matches('/') == issuer => return Ok(metadata),
                Ok(metadata) => last = format!("{url} names issuer {}, not {}", metadata.issuer, self.issuer),
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
