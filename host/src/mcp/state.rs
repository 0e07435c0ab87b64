//! Integrity protection for plugin state that travels through a 2026-07-28 client as
//! `requestState`: HMAC-sealed, bound to the request it belongs to, and short-lived.

use std::time::Duration;

use rmcp::model::{RequestStateCodec, SealOptions};

/// How long a client may take between an `input_required` answer and its retry.
const STATE_TTL: Duration = Duration::from_secs(15 * 60);

/// Seals and opens `requestState`.
pub struct StateCodec {
    codec: RequestStateCodec,
}

/// The state was forged, tampered with, expired, or belongs to another request.
#[derive(Debug)]
pub struct InvalidState;

impl StateCodec {
    /// A codec with the given key (at least 32 bytes; replicas must share it).
    pub fn new(key: Vec<u8>) -> Result<Self, String> {
        RequestStateCodec::try_new(key).map(|codec| StateCodec { codec }).map_err(|e| e.to_string())
    }

    /// A codec with a fresh random key: state then only survives within this process.
    pub fn random() -> Self {
        let key: [u8; 32] = rand::random();
        StateCodec::new(key.to_vec()).expect("a 32-byte key is long enough")
    }

    /// Seal plugin state, bound to `bound_to` (the method and the tool, prompt or URI).
    pub fn seal(&self, state: &[u8], bound_to: &str) -> String {
        self.codec.seal_with(state, &SealOptions::new().associated_data(bound_to.as_bytes()).ttl(STATE_TTL))
    }

    /// Open sealed state, checking integrity, binding and expiry.
    pub fn open(&self, sealed: &str, bound_to: &str) -> Result<Vec<u8>, InvalidState> {
        self.codec.open_with(sealed, bound_to.as_bytes()).map_err(|_| InvalidState)
    }
}
