//! The client's roots, fetched by the host for plugins whose directories are narrowed to them.
//!
//! Legacy sessions are asked with `roots/list` on first need; the answer is kept for the
//! session until the client sends `notifications/roots/list_changed`. 2026-07-28 requests
//! get the roots request added to their `input_required` result under a reserved key, and
//! the retry's answer is taken out before the plugin sees the responses.

#![allow(deprecated)] // Roots are deprecated by SEP-2577, still served to clients that declare them.

use rmcp::RoleServer;
use rmcp::service::Peer;

use super::input::CLIENT_ANSWER_TIMEOUT;
use super::session::SessionState;
use crate::policy::ClientRoots;
use crate::runtime::types as wit;

/// The input-request key under which the host asks for roots. Plugins may not use keys
/// starting with `capsule.`.
pub const ROOTS_KEY: &str = "capsule.roots";

/// Take the host's roots answer out of a retry's responses, if it carries one.
pub fn take_answer(responses: &mut Vec<wit::KeyedInputResponse>) -> Option<ClientRoots> {
    let at = responses.iter().position(|r| r.key == ROOTS_KEY)?;
    Some(match responses.remove(at).response {
        wit::InputResponse::Roots(roots) => resolve(&roots),
        other => {
            tracing::warn!("the client's answer to the roots request is unusable ({other:?}); no roots are visible");
            ClientRoots::Listed(std::sync::Arc::new([]))
        }
    })
}

fn resolve(roots: &[wit::Root]) -> ClientRoots {
    ClientRoots::from_uris(roots.iter().map(|r| (r.uri.as_str(), r.name.as_deref())))
}

impl SessionState {
    /// This session's roots: the cached answer, or a fresh `roots/list` to the client. A
    /// client that fails to answer gets no roots, never the unnarrowed grants.
    pub async fn roots(&self, peer: &Peer<RoleServer>) -> ClientRoots {
        let mut cached = self.roots.lock().await;
        if let Some(roots) = cached.as_ref() {
            return roots.clone();
        }
        let fetched = match tokio::time::timeout(CLIENT_ANSWER_TIMEOUT, peer.list_roots()).await {
            Ok(Ok(result)) => {
                let roots: Vec<wit::Root> =
                    result.roots.into_iter().map(|r| wit::Root { uri: r.uri, name: r.name }).collect();
                match tokio::task::spawn_blocking(move || resolve(&roots)).await {
                    Ok(resolved) => resolved,
                    Err(e) => {
                        tracing::warn!("resolving the client's roots failed: {e}");
                        return ClientRoots::Listed(std::sync::Arc::new([]));
                    }
                }
            }
            Ok(Err(e)) => {
                tracing::warn!("the client did not answer roots/list ({e}); no roots are visible");
                return ClientRoots::Listed(std::sync::Arc::new([]));
            }
            Err(_) => {
                tracing::warn!("the client did not answer roots/list in time; no roots are visible");
                return ClientRoots::Listed(std::sync::Arc::new([]));
            }
        };
        *cached = Some(fetched.clone());
        fetched
    }

    /// Forget the cached roots (the client said they changed).
    pub async fn forget_roots(&self) {
        *self.roots.lock().await = None;
    }
}
