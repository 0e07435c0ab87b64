//! State that outlives a request: per-session settings of legacy (initialize-based) clients,
//! and the registry used to tell clients that a list or a resource changed.

#![allow(deprecated)] // Logging levels are deprecated by SEP-2577 but served to legacy clients.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use rmcp::model::{
    ClientCapabilities, LoggingLevel, PromptListChangedNotification, ProtocolVersion, RequestId,
    ResourceListChangedNotification, ResourceUpdatedNotification, ResourceUpdatedNotificationParam, ServerNotification,
    ToolListChangedNotification,
};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::request::{ClientLink, LinkError};
use super::roots::CachedRoots;
use crate::catalog::Catalog;
use crate::runtime::ListKind;

/// How long one session may take to accept a list-change notification.
const NOTIFY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// What a legacy client said of itself in `initialize`, with the revision agreed on.
pub struct Peer {
    pub version: ProtocolVersion,
    pub capabilities: ClientCapabilities,
}

/// Settings of one legacy session (or of the stdio connection).
#[derive(Default)]
pub struct SessionState {
    /// Set once by `initialize`.
    pub peer: OnceLock<Peer>,
    /// Set once the session is registered to hear of changes.
    registered: AtomicBool,
    /// Requests running now, so `notifications/cancelled` can stop them. Clients may reuse
    /// an id while the first is still running; both are then cancelled together.
    in_flight: Mutex<HashMap<RequestId, (CancellationToken, usize)>>,
    /// Requests running now, however many share an id.
    running: AtomicUsize,
    /// Set by `logging/setLevel`; no log messages are sent before that.
    pub log_level: Mutex<Option<LoggingLevel>>,
    /// URIs subscribed with `resources/subscribe`.
    pub subscriptions: Mutex<BTreeSet<String>>,
    /// The client's roots, once asked for, until the client says they changed.
    pub roots: CachedRoots,
    /// The catalogs its lists came from, so a change it already lists is not announced.
    seen: Mutex<Seen>,
}

impl SessionState {
    /// Note a request as running until the returned guard drops; its token fires if the
    /// client cancels it, or when `within` fires (an HTTP session's end).
    pub fn begin(self: &Arc<Self>, id: &RequestId, within: Option<&CancellationToken>) -> InFlight {
        self.running.fetch_add(1, Ordering::Relaxed);
        self.note(id, within)
    }

    /// [`Self::begin`], unless `cap` requests of this session are running already.
    pub fn try_begin(
        self: &Arc<Self>,
        id: &RequestId,
        within: Option<&CancellationToken>,
        cap: usize,
    ) -> Option<InFlight> {
        self.running.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < cap).then_some(n + 1)).ok()?;
        Some(self.note(id, within))
    }

    /// The in-flight entry of a request already counted in `running`.
    fn note(self: &Arc<Self>, id: &RequestId, within: Option<&CancellationToken>) -> InFlight {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        let token = || within.map_or_else(CancellationToken::new, CancellationToken::child_token);
        let (token, count) = in_flight.entry(id.clone()).or_insert_with(|| (token(), 0));
        *count += 1;
        InFlight { session: self.clone(), id: id.clone(), token: token.clone() }
    }

    /// Whether a request of this session is running.
    pub fn is_answering(&self) -> bool {
        !self.in_flight.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
    }

    /// Cancel the running request(s) with this id, if any.
    pub fn cancel(&self, id: &RequestId) {
        if let Some((token, _)) = self.in_flight.lock().unwrap_or_else(|e| e.into_inner()).get(id) {
            token.cancel();
        }
    }

    /// Note that the session asked for `list` while the first load runs: its answer, which
    /// waits for the load, will hold the loaded catalog.
    pub fn awaiting_first_load(&self, list: List) {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).lists[list as usize] = Listed::AwaitingFirstLoad;
    }

    /// Note that the session is answered `list` (its first page) from `catalog`.
    pub fn listed(&self, list: List, catalog: &Arc<Catalog>) {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).lists[list as usize] = Listed::At(Arc::downgrade(catalog));
    }

    /// Whether the session may hold a `kind` list older than `new`, the catalog a change
    /// produced (`first_load`: the one the first load ended with).
    fn may_hold_stale(&self, kind: ListKind, new: &Arc<Catalog>, first_load: bool) -> bool {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let is_new = |catalog: &Weak<Catalog>| std::ptr::eq(catalog.as_ptr(), Arc::as_ptr(new));
        let lists: &[List] = match kind {
            ListKind::Tools => &[List::Tools],
            ListKind::Resources => &[List::Resources, List::Templates],
            ListKind::Prompts => &[List::Prompts],
        };
        let mut asked = false;
        for &list in lists {
            match &seen.lists[list as usize] {
                Listed::Never => {}
                Listed::AwaitingFirstLoad if first_load => asked = true,
                Listed::At(catalog) if is_new(catalog) => asked = true,
                Listed::AwaitingFirstLoad | Listed::At(_) => return true,
            }
        }
        // A session that never asked for this kind (it may have learnt it some other way)
        // hears of every change since it joined, but for the first load's end: no list of
        // this server's came before that, whether the client then heard of it would depend
        // on whether it connected before the load ended, and a client that asked for one
        // list and is closing would be sent the others' as it closes (Python SDK 1.x fails
        // its whole session on that: python-sdk#1960).
        !asked && !first_load && !is_new(&seen.joined)
    }

    /// The kinds of list it was answered from a catalog other than `current`: a client may
    /// list before it says `notifications/initialized`, and a change announced between
    /// did not reach it.
    fn listed_before(&self, current: &Arc<Catalog>) -> Vec<ListKind> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let older = |list: List| matches!(&seen.lists[list as usize], Listed::At(catalog) if !std::ptr::eq(catalog.as_ptr(), Arc::as_ptr(current)));
        let kinds = [
            (ListKind::Tools, older(List::Tools)),
            (ListKind::Resources, older(List::Resources) || older(List::Templates)),
            (ListKind::Prompts, older(List::Prompts)),
        ];
        kinds.into_iter().filter_map(|(kind, older)| older.then_some(kind)).collect()
    }
}

/// One of the lists a session can ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum List {
    Tools,
    Resources,
    Templates,
    Prompts,
}

impl List {
    /// The list a method asks for, if it asks for one.
    pub fn of(method: &str) -> Option<List> {
        Some(match method {
            "tools/list" => List::Tools,
            "resources/list" => List::Resources,
            "resources/templates/list" => List::Templates,
            "prompts/list" => List::Prompts,
            _ => return None,
        })
    }
}

/// What a session has been answered of the lists.
#[derive(Default)]
struct Seen {
    /// The catalog in force when the session joined: a change that produced it came before
    /// the session, so it is not announced to it. Weak, like every catalog here, because an
    /// idle session must not keep a swapped-out catalog (its plugins' compiled code and
    /// instances) alive; and the allocation a `Weak` holds is never reused, so no later
    /// catalog can be mistaken for it.
    joined: Weak<Catalog>,
    /// By [`List`]: where its first page last came from.
    lists: [Listed; 4],
}

#[derive(Default)]
enum Listed {
    #[default]
    Never,
    /// Asked for while the first load ran; answered once it ends.
    AwaitingFirstLoad,
    At(Weak<Catalog>),
}

/// A request noted as running (by `SessionState::begin`) until this drops.
pub struct InFlight {
    session: Arc<SessionState>,
    id: RequestId,
    token: CancellationToken,
}

impl InFlight {
    /// Fires when the client cancels the request.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.session.running.fetch_sub(1, Ordering::Relaxed);
        let mut in_flight = self.session.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, count)) = in_flight.get_mut(&self.id) {
            *count -= 1;
            if *count == 0 {
                in_flight.remove(&self.id);
            }
        }
    }
}

/// A change every interested client hears of.
#[derive(Clone, Debug)]
pub enum Change {
    /// A list changed.
    List(ListKind),
    /// A resource's contents changed.
    Resource(Arc<str>),
}

/// Whether a subscription to `subscribed` covers an update of `updated`: the same resource,
/// or one beneath it (MCP lets an update name a sub-resource of the subscribed one).
pub fn covers(subscribed: &str, updated: &str) -> bool {
    updated
        .strip_prefix(subscribed)
        .is_some_and(|rest| rest.is_empty() || subscribed.ends_with('/') || rest.starts_with('/'))
}

/// Whether any of `subscriptions` covers `updated`. Only `updated` itself and its prefixes
/// that end at a `/` or just before one can, so those are looked up, unless the URI has more
/// of them than there are subscriptions to try.
fn any_covers(subscriptions: &BTreeSet<String>, updated: &str) -> bool {
    let cuts = updated.bytes().filter(|&b| b == b'/').count();
    if subscriptions.len() <= 2 * cuts + 1 {
        return subscriptions.iter().any(|s| covers(s, updated));
    }
    subscriptions.contains(updated)
        || updated
            .match_indices('/')
            .any(|(at, _)| subscriptions.contains(&updated[..at]) || subscriptions.contains(&updated[..=at]))
}

/// A registered session; neither field keeps the session alive once it ends.
struct Live {
    link: Arc<dyn ClientLink>,
    state: Weak<SessionState>,
}

impl Live {
    fn is_gone(&self) -> bool {
        self.link.is_closed() || self.state.strong_count() == 0
    }
}

/// Every live legacy session, and a broadcast for 2026-07-28 `subscriptions/listen` streams.
pub struct Sessions {
    live: Mutex<Vec<Live>>,
    changes: broadcast::Sender<Change>,
}

impl Default for Sessions {
    fn default() -> Self {
        // Room for a whole call's resource updates (64) and a few list changes at once.
        Sessions { live: Mutex::default(), changes: broadcast::channel(256).0 }
    }
}

impl Sessions {
    /// Remember a legacy session so it hears about changes (once, however often asked).
    pub fn register(&self, link: Arc<dyn ClientLink>, state: Arc<SessionState>, joined: &Arc<Catalog>) {
        if state.registered.swap(true, Ordering::SeqCst) {
            return;
        }
        state.seen.lock().unwrap_or_else(|e| e.into_inner()).joined = Arc::downgrade(joined);
        for kind in state.listed_before(joined) {
            let link = link.clone();
            send_in_time(async move { link.notify(changed(kind)).await });
        }
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.retain(|l| !l.is_gone());
        live.push(Live { link, state: Arc::downgrade(&state) });
    }

    /// Listen for changes (for a `subscriptions/listen` stream).
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    /// The live sessions (forgetting closed ones). The lock, which every session's start
    /// takes, is held only to copy them out.
    fn snapshot(&self) -> Vec<(Arc<dyn ClientLink>, Weak<SessionState>)> {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.retain(|l| !l.is_gone());
        live.iter().map(|l| (l.link.clone(), l.state.clone())).collect()
    }

    /// Tell every client that may hold a list older than `new` that it changed: not one that
    /// joined at `new`, nor one whose list of that kind came from `new` (or, at the end of the
    /// first load, is waiting for it). Each session is sent to on its own task with a time
    /// limit, so a client that stops reading delays nobody: not the caller (a reload, a tool
    /// call), not the other sessions.
    pub async fn list_changed(&self, kind: ListKind, new: &Arc<Catalog>, first_load: bool) {
        let _ = self.changes.send(Change::List(kind));
        let stale = self
            .snapshot()
            .into_iter()
            .filter(|(_, state)| state.upgrade().is_some_and(|state| state.may_hold_stale(kind, new, first_load)));
        for (link, _) in stale {
            send_in_time(async move { link.notify(changed(kind)).await });
        }
    }

    /// Tell the clients subscribed to these resources (or to ones they lie beneath) that
    /// they changed, the same way as list changes.
    pub fn resources_updated(&self, uris: Vec<String>) {
        for uri in &uris {
            let _ = self.changes.send(Change::Resource(uri.as_str().into()));
        }
        let sessions = self.snapshot();
        if sessions.is_empty() || uris.is_empty() {
            return;
        }
        // Sessions × URIs of matching: on the blocking pool, not an async worker, since
        // clients choose how many sessions and subscriptions there are.
        tokio::task::spawn_blocking(move || {
            for (link, state) in sessions {
                let Some(state) = state.upgrade() else { continue };
                let wanted: Vec<String> = {
                    let subscriptions = state.subscriptions.lock().unwrap_or_else(|e| e.into_inner());
                    uris.iter().filter(|uri| any_covers(&subscriptions, uri)).cloned().collect()
                };
                if wanted.is_empty() {
                    continue;
                }
                send_in_time(async move {
                    for uri in wanted {
                        let param = ResourceUpdatedNotificationParam::new(uri);
                        link.notify(ResourceUpdatedNotification::new(param).into()).await?;
                    }
                    Ok(())
                });
            }
        });
    }
}

/// The notification that a kind of list changed.
fn changed(kind: ListKind) -> ServerNotification {
    match kind {
        ListKind::Tools => ToolListChangedNotification::default().into(),
        ListKind::Resources => ResourceListChangedNotification::default().into(),
        ListKind::Prompts => PromptListChangedNotification::default().into(),
    }
}

/// Send to one session on its own task, giving up after [`NOTIFY_TIMEOUT`].
fn send_in_time(send: impl Future<Output = Result<(), LinkError>> + Send + 'static) {
    tokio::spawn(async move {
        if tokio::time::timeout(NOTIFY_TIMEOUT, send).await.is_err() {
            tracing::debug!("a session did not take a change notification in time; dropped");
        }
    });
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;

    use rmcp::model::{ClientResult, ServerRequest};
    use tokio::sync::mpsc;

    use super::*;
    use crate::mcp::request::LinkFuture;

    /// A session's link that hands what it is sent to the test.
    struct Recorder(mpsc::UnboundedSender<ServerNotification>);

    impl ClientLink for Recorder {
        fn notify(&self, notification: ServerNotification) -> LinkFuture<'_, ()> {
            let _ = self.0.send(notification);
            Box::pin(async { Ok(()) })
        }
        fn request(&self, _: ServerRequest) -> LinkFuture<'_, ClientResult> {
            Box::pin(async { Err(LinkError::Closed) })
        }
        fn is_closed(&self) -> bool {
            false
        }
        fn closed(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
            Box::pin(std::future::pending())
        }
    }

    /// A registered session: what it is sent, and its state (registered only while held).
    fn session(
        sessions: &Sessions,
        joined: &Arc<Catalog>,
    ) -> (mpsc::UnboundedReceiver<ServerNotification>, Arc<SessionState>) {
        let (sent, heard) = mpsc::unbounded_channel();
        let state = Arc::new(SessionState::default());
        sessions.register(Arc::new(Recorder(sent)), state.clone(), joined);
        (heard, state)
    }

    #[tokio::test]
    async fn a_change_is_announced_to_the_sessions_that_joined_before_it() {
        let sessions = Sessions::default();
        let (old, new) = (Arc::new(Catalog::default()), Arc::new(Catalog::default()));
        let (mut before, _before) = session(&sessions, &old);
        let (mut after, _after) = session(&sessions, &new);
        sessions.list_changed(ListKind::Tools, &new, false).await;
        let heard = tokio::time::timeout(NOTIFY_TIMEOUT, before.recv()).await.unwrap().unwrap();
        assert!(matches!(heard, ServerNotification::ToolListChangedNotification(_)), "{heard:?}");
        tokio::task::yield_now().await;
        assert!(after.try_recv().is_err(), "a session that joined at the new catalog was told of it");
    }

    /// A client may list before it says `notifications/initialized`, which registers it: a
    /// change announced between did not reach it, so it hears of it when it registers.
    #[tokio::test]
    async fn a_session_that_listed_before_it_registered_hears_of_a_change_between() {
        let sessions = Sessions::default();
        let (old, new) = (Arc::new(Catalog::default()), Arc::new(Catalog::default()));
        let (sent, mut heard) = mpsc::unbounded_channel();
        let state = Arc::new(SessionState::default());
        state.listed(List::Tools, &old);
        state.listed(List::Prompts, &new);
        sessions.list_changed(ListKind::Tools, &new, false).await;
        sessions.register(Arc::new(Recorder(sent)), state.clone(), &new);
        let told = tokio::time::timeout(NOTIFY_TIMEOUT, heard.recv()).await.unwrap().unwrap();
        assert!(matches!(told, ServerNotification::ToolListChangedNotification(_)), "{told:?}");
        tokio::task::yield_now().await;
        assert!(heard.try_recv().is_err(), "told of a list it holds from the current catalog");
    }

    #[test]
    fn a_session_hears_of_the_lists_it_may_hold_stale() {
        let (old, new) = (Arc::new(Catalog::default()), Arc::new(Catalog::default()));
        let state = SessionState::default();
        state.seen.lock().unwrap().joined = Arc::downgrade(&old);
        // Nothing listed: every change since it joined, but for the first load's end.
        assert!(state.may_hold_stale(ListKind::Tools, &new, false));
        assert!(!state.may_hold_stale(ListKind::Tools, &old, false));
        assert!(!state.may_hold_stale(ListKind::Tools, &new, true));
        // Listed from the new catalog: not told of it; from the old one: told.
        state.listed(List::Tools, &new);
        assert!(!state.may_hold_stale(ListKind::Tools, &new, false));
        state.listed(List::Prompts, &old);
        assert!(state.may_hold_stale(ListKind::Prompts, &new, false));
        // Resources are two lists: both must be current, one never asked for does not count.
        state.listed(List::Resources, &new);
        assert!(!state.may_hold_stale(ListKind::Resources, &new, false));
        state.listed(List::Templates, &old);
        assert!(state.may_hold_stale(ListKind::Resources, &new, false));
        // A list waiting for the first load gets its end; one still waiting later is not.
        state.awaiting_first_load(List::Templates);
        assert!(!state.may_hold_stale(ListKind::Resources, &new, true));
        assert!(state.may_hold_stale(ListKind::Resources, &new, false));
    }

    #[test]
    fn a_session_does_not_keep_the_catalog_it_joined_alive() {
        let sessions = Sessions::default();
        let joined = Arc::new(Catalog::default());
        let _session = session(&sessions, &joined);
        let watch = Arc::downgrade(&joined);
        drop(joined);
        assert!(watch.upgrade().is_none(), "an idle session pins a swapped-out catalog and its plugins");
    }

    #[tokio::test]
    async fn an_ended_session_is_not_kept_by_the_registry() {
        let sessions = Sessions::default();
        let joined = Arc::new(Catalog::default());
        let (mut heard, state) = session(&sessions, &joined);
        let watch = Arc::downgrade(&state);
        drop(state);
        assert!(watch.upgrade().is_none(), "the registry keeps an ended session's state (subscriptions, roots)");
        sessions.list_changed(ListKind::Tools, &Arc::new(Catalog::default()), false).await;
        tokio::task::yield_now().await;
        assert!(heard.try_recv().is_err(), "an ended session was told of a change");
        assert!(sessions.live.lock().unwrap().is_empty(), "an ended session stays registered");
    }

    #[test]
    fn a_subscription_covers_its_resource_and_what_lies_beneath() {
        assert!(covers("file:///a/b", "file:///a/b"));
        assert!(covers("file:///a/b", "file:///a/b/c.txt"));
        assert!(covers("file:///a/b/", "file:///a/b/c.txt"));
        assert!(!covers("file:///a/b", "file:///a/bc"));
        assert!(!covers("file:///a/b/c.txt", "file:///a/b"));
        assert!(!covers("calc://units/length", "calc://units/lengths"));
    }

    /// The looked-up prefixes find exactly what trying every subscription finds.
    #[test]
    fn looking_up_prefixes_agrees_with_trying_every_subscription() {
        let pieces = ["file:", "/", "//", "a", "b/", "c.txt", "x"];
        let mut uris = vec![String::new()];
        for _ in 0..4 {
            uris = uris.iter().flat_map(|u| pieces.iter().map(move |p| format!("{u}{p}"))).collect();
        }
        // More subscriptions than any URI here has prefixes to look up, so the lookup is used.
        let subscriptions: BTreeSet<String> = uris.iter().step_by(3).cloned().collect();
        assert!(subscriptions.len() > 2 * 4 * 2 + 1);
        for updated in &uris {
            let tried = subscriptions.iter().any(|s| covers(s, updated));
            assert_eq!(any_covers(&subscriptions, updated), tried, "{updated}");
        }
    }

    /// Each session subscribed to an updated URI (or what it lies beneath) hears of it, and
    /// only those.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn updates_reach_the_subscribed_sessions() {
        let sessions = Sessions::default();
        let joined = Arc::new(Catalog::default());
        let mut held = Vec::new();
        let mut heard = Vec::new();
        for n in 0..3 {
            let (tx, rx) = mpsc::unbounded_channel();
            let state = Arc::new(SessionState::default());
            if n != 1 {
                state.subscriptions.lock().unwrap().insert(format!("file:///s{n}/"));
            }
            sessions.register(Arc::new(Recorder(tx)), state.clone(), &joined);
            held.push(state);
            heard.push(rx);
        }
        sessions.resources_updated(vec!["file:///s0/a.txt".into(), "file:///s2/b/c".into()]);
        let within = std::time::Duration::from_secs(5);
        let uri = |n: Result<Option<ServerNotification>, _>| match n {
            Ok(Some(ServerNotification::ResourceUpdatedNotification(n))) => n.params.uri,
            other => panic!("{other:?}"),
        };
        assert_eq!(uri(tokio::time::timeout(within, heard[0].recv()).await), "file:///s0/a.txt");
        assert_eq!(uri(tokio::time::timeout(within, heard[2].recv()).await), "file:///s2/b/c");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(heard[1].try_recv().is_err() && heard[0].try_recv().is_err() && heard[2].try_recv().is_err());
    }
}
