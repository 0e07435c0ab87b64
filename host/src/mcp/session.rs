//! State that outlives a request: per-session settings of legacy (initialize-based) clients,
//! and the registry used to tell every client that a list changed.

#![allow(deprecated)] // Logging levels are deprecated by SEP-2577 but served to legacy clients.

use std::collections::BTreeSet;
use std::sync::Mutex;

use rmcp::RoleServer;
use rmcp::model::LoggingLevel;
use rmcp::service::Peer;
use tokio::sync::broadcast;

use crate::policy::ClientRoots;
use crate::runtime::ListKind;

/// How long one session may take to accept a list-change notification.
const NOTIFY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Settings of one legacy session (or of the stdio connection).
#[derive(Default)]
pub struct SessionState {
    /// Set by `logging/setLevel`; no log messages are sent before that.
    pub log_level: Mutex<Option<LoggingLevel>>,
    /// URIs subscribed with `resources/subscribe`.
    pub subscriptions: Mutex<BTreeSet<String>>,
    /// The client's roots, once asked for; cleared when the client says they changed.
    pub roots: tokio::sync::Mutex<Option<ClientRoots>>,
}

/// Every live legacy session, and a broadcast for 2026-07-28 `subscriptions/listen` streams.
pub struct Sessions {
    peers: Mutex<Vec<Peer<RoleServer>>>,
    changes: broadcast::Sender<ListKind>,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions { peers: Mutex::default(), changes: broadcast::channel(64).0 }
    }
}

impl Sessions {
    /// Remember a legacy session so it hears about list changes.
    pub fn register(&self, peer: Peer<RoleServer>) {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        peers.retain(|p| !p.is_transport_closed());
        peers.push(peer);
    }

    /// Listen for list changes (for a `subscriptions/listen` stream).
    pub fn subscribe(&self) -> broadcast::Receiver<ListKind> {
        self.changes.subscribe()
    }

    /// Tell every client that a list changed. Each session is sent to on its own task with a
    /// time limit, so a client that stops reading delays nobody: not the caller (a reload, a
    /// tool call), not the other sessions.
    pub async fn list_changed(&self, kind: ListKind) {
        let _ = self.changes.send(kind);
        let peers: Vec<_> = {
            let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
            peers.retain(|p| !p.is_transport_closed());
            peers.clone()
        };
        for peer in peers {
            tokio::spawn(async move {
                let send = async {
                    match kind {
                        ListKind::Tools => peer.notify_tool_list_changed().await,
                        ListKind::Resources => peer.notify_resource_list_changed().await,
                        ListKind::Prompts => peer.notify_prompt_list_changed().await,
                    }
                };
                if tokio::time::timeout(NOTIFY_TIMEOUT, send).await.is_err() {
                    tracing::debug!("a session did not take a list-change notification in time; dropped");
                }
            });
        }
    }
}
