//! The client's roots, fetched by the host for plugins whose directories are narrowed to them.
//!
//! Legacy sessions are asked with `roots/list` on first need; the answer is kept for the
//! session until the client sends `notifications/roots/list_changed`. 2026-07-28 requests
//! get the roots request added to their `input_required` result under a reserved key, and
//! the retry's answer is taken out before the plugin sees the responses.

#![allow(deprecated)] // Roots are deprecated by SEP-2577, still served to clients that declare them.

use std::sync::atomic::{AtomicU64, Ordering};

use rmcp::model::{ClientResult, ListRootsRequest, ServerRequest};
use tracing::Instrument;

use super::input::{CLIENT_ANSWER_TIMEOUT, client_request_span};
use super::request::ClientLink;
use super::session::SessionState;
use crate::policy::ClientRoots;
use crate::runtime::types as wit;

/// The input-request key under which the host asks for roots. Plugins may not use keys
/// starting with `capsule.`.
pub const ROOTS_KEY: &str = "capsule.roots";

/// Take the host's roots answer out of a retry's responses, if it carries one. An unusable
/// answer counts as no roots.
pub fn take_answer(responses: &mut Vec<wit::KeyedInputResponse>) -> Option<Vec<wit::Root>> {
    let at = responses.iter().position(|r| r.key == ROOTS_KEY)?;
    Some(match responses.remove(at).response {
        wit::InputResponse::Roots(roots) => roots,
        other => {
            tracing::warn!("the client's answer to the roots request is unusable ({other:?}); no roots are visible");
            Vec::new()
        }
    })
}

/// Canonicalize the client's roots on the blocking pool (paths may sit on slow filesystems).
pub async fn resolve(roots: Vec<wit::Root>) -> Result<ClientRoots, String> {
    tokio::task::spawn_blocking(move || {
        ClientRoots::from_uris(roots.iter().map(|r| (r.uri.as_str(), r.name.as_deref())))
    })
    .await
    .map_err(|e| format!("resolving the client's roots failed: {e}"))
}

/// A session's roots as last fetched, and how often the client has said they changed.
#[derive(Default)]
pub struct CachedRoots {
    /// Bumped by `notifications/roots/list_changed` as the transport takes it, in the order
    /// the client sent its messages: a request sent after the notification never runs with
    /// an answer fetched before it, even if its task runs while that fetch is still waiting.
    changes: AtomicU64,
    /// The last answer and the `changes` it was asked at.
    last: std::sync::Mutex<Option<(u64, ClientRoots)>>,
    /// Held across a fetch, so that concurrent calls ask the client once: waiting for it is
    /// waiting on the client.
    fetching: tokio::sync::Mutex<()>,
}

impl CachedRoots {
    /// The last answer, if it was asked at `at`.
    fn cached(&self, at: u64) -> Option<ClientRoots> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.as_ref().filter(|(asked_at, _)| *asked_at == at).map(|(_, roots)| roots.clone())
    }
}

impl SessionState {
    /// This session's roots: the cached answer, or a fresh `roots/list` to the client. A
    /// client that fails to answer gets no roots, never the unnarrowed grants.
    pub async fn roots(&self, link: &dyn ClientLink) -> ClientRoots {
        if let Some(roots) = self.roots.cached(self.roots.changes.load(Ordering::Acquire)) {
            return roots;
        }
        let _fetching = match self.roots.fetching.try_lock() {
            Ok(fetching) => fetching,
            // Another request is asking the client: waiting for its answer is waiting on
            // the client, and the transport must be free to read that answer.
            Err(_) => match link.wait_on_client() {
                Ok(()) => self.roots.fetching.lock().await,
                Err(e) => {
                    tracing::warn!("{e}; no roots are visible");
                    return ClientRoots::none();
                }
            },
        };
        let asked_at = self.roots.changes.load(Ordering::Acquire);
        if let Some(roots) = self.roots.cached(asked_at) {
            return roots;
        }
        let ask = link.request(ServerRequest::ListRootsRequest(ListRootsRequest::default()));
        let asked = tokio::time::timeout(CLIENT_ANSWER_TIMEOUT, ask).instrument(client_request_span("roots/list"));
        let answer = match asked.await {
            Ok(Ok(ClientResult::ListRootsResult(result))) => {
                resolve(result.roots.into_iter().map(|r| wit::Root { uri: r.uri, name: r.name }).collect()).await
            }
            Ok(Ok(other)) => Err(format!("the client answered roots/list with something else ({other:?})")),
            Ok(Err(e)) => Err(format!("the client did not answer roots/list ({e})")),
            Err(_) => Err("the client did not answer roots/list in time".into()),
        };
        match answer {
            Ok(roots) => {
                // Kept as the answer of when it was asked: if the roots changed meanwhile,
                // the next request asks again.
                *self.roots.last.lock().unwrap_or_else(|e| e.into_inner()) = Some((asked_at, roots.clone()));
                roots
            }
            Err(reason) => {
                tracing::warn!("{reason}; no roots are visible");
                ClientRoots::none()
            }
        }
    }

    /// The client said its roots changed: every request from now on asks for them again.
    /// Takes no lock, so it never waits on a roots request the client has not answered.
    pub fn roots_changed(&self) {
        self.roots.changes.fetch_add(1, Ordering::AcqRel);
    }
}
