//! Integrity protection for plugin state that travels through a 2026-07-28 client as
//! `requestState`: HMAC-sealed, bound to the tenant and the request it belongs to, and
//! short-lived.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{RequestStateCodec, SealOptions};

/// How long a client may take between an `input_required` answer and its retry.
const STATE_TTL: Duration = Duration::from_secs(15 * 60);

/// Seals and opens `requestState`. Cheap to clone.
#[derive(Clone)]
pub struct StateCodec {
    codec: Arc<RequestStateCodec>,
    /// Whose state this codec seals (a tenant): state sealed for one scope opens in no other.
    scope: Arc<str>,
}

/// The state was forged, tampered with, expired, or belongs to another request.
#[derive(Debug)]
pub struct InvalidState;

impl StateCodec {
    /// A codec with the given key (at least 32 bytes; replicas must share it).
    pub fn new(key: Vec<u8>) -> Result<Self, String> {
        RequestStateCodec::try_new(key)
            .map(|codec| StateCodec { codec: Arc::new(codec), scope: "".into() })
            .map_err(|e| e.to_string())
    }

    /// A codec with a fresh random key: state then only survives within this process.
    pub fn random() -> Self {
        let key: [u8; 32] = rand::random();
        StateCodec::new(key.to_vec()).expect("a 32-byte key is long enough")
    }

    /// The same key, sealing for `scope` alone.
    pub fn scoped(&self, scope: &str) -> StateCodec {
        StateCodec { codec: self.codec.clone(), scope: scope.into() }
    }

    /// Seal plugin state, bound to this codec's scope and to `bound_to` (the method and the
    /// tool, prompt or URI).
    pub fn seal(&self, state: &[u8], bound_to: &str) -> String {
        let bound = self.bound(bound_to);
        self.codec.seal_with(state, &SealOptions::new().associated_data(bound.as_bytes()).ttl(STATE_TTL))
    }

    /// Open sealed state, checking integrity, binding and expiry.
    pub fn open(&self, sealed: &str, bound_to: &str) -> Result<Vec<u8>, InvalidState> {
        self.codec.open_with(sealed, self.bound(bound_to).as_bytes()).map_err(|_| InvalidState)
    }

    fn bound(&self, bound_to: &str) -> String {
        format!("{}\0{bound_to}", self.scope)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_opens_only_where_it_was_sealed() {
        let codec = StateCodec::random();
        let (a, b) = (codec.scoped("a"), codec.scoped("b"));
        let sealed = a.seal(b"state", "tools/call\0t");
        assert_eq!(a.open(&sealed, "tools/call\0t").unwrap(), b"state");
        assert!(b.open(&sealed, "tools/call\0t").is_err(), "another tenant");
        assert!(a.open(&sealed, "tools/call\0u").is_err(), "another tool");
    }
}
