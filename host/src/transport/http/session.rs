//! Legacy (initialize-based) sessions over HTTP: a table with a cap and idle expiry, and per
//! session one GET stream fed from a bounded ring of already serialised events.
//!
//! Messages that belong to no request (list changes, resource updates) go into the session's
//! ring, never blocking the sender: a client that stops reading loses the oldest, not the
//! server its time. Event ids are unique and increase for the session's life; a GET with
//! `Last-Event-ID: N` replays what came after N. A new GET takes over from the previous one,
//! so every event goes to exactly one live stream.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv6Addr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use rmcp::model::{ClientResult, ServerNotification, ServerRequest};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::super::jsonrpc;
use super::super::pending::Pending;
use super::HttpOptions;
use super::resume::{KeptBytes, PostStreams};
use super::sse::{Frame, id_number};
use super::watch::{self, Look};
use crate::mcp::{CapsuleServer, ClientLink, LinkError, LinkFuture, Shared};
use crate::runtime::Account;
use crate::telemetry::{Metrics, Refusal};

/// Events a session keeps for its GET stream (and for resuming it).
const RING: usize = 64;
/// Bytes of events a session keeps besides the newest: an update names a URI of up to 16 KiB
/// (a client's file path, say), and 64 of those in every idle session add up.
const RING_BYTES: usize = 64 << 10;
/// Priming ids of its GET streams a session keeps for a resume.
const PRIMED: usize = 8;
/// Under pressure, a session idle this long may be ended to make room for a new one.
const EVICTABLE_AFTER: Duration = Duration::from_secs(60);

/// One legacy session.
pub struct Session {
    pub id: Arc<str>,
    /// The client's address as counted for the per-address limit ([`counted_address`]).
    client: Option<IpAddr>,
    /// The principal that opened it (a tenant with `[auth]`); no other may use it.
    principal: Option<Arc<str>>,
    pub server: CapsuleServer,
    /// Requests sent to the client on its POST streams, awaiting answers.
    pub pending: Arc<Pending>,
    events: Mutex<Ring>,
    wake: Notify,
    /// Milliseconds since it opened, at the last sign of the client or the end of the last
    /// request it was answered.
    seen: AtomicU64,
    /// Fires when the session ends (DELETE, expiry, shutdown).
    pub ended: CancellationToken,
    /// Fires when the server ends it (shutdown, its tenant gone), not the client or expiry.
    pub closed_by_server: CancellationToken,
    /// Its POST streams that can be resumed (2025-11-25 and later).
    pub posts: PostStreams,
    /// When `initialize` made it.
    opened: Instant,
    /// Requests it may have running at once (`--max-in-flight`).
    pub max_in_flight: usize,
}

#[derive(Default)]
struct Ring {
    events: VecDeque<(u64, Arc<str>)>,
    /// The bytes of `events`.
    bytes: usize,
    next_id: u64,
    /// The newest event a stream has taken.
    delivered: u64,
    /// Bumped by each GET, so the stream it replaces ends.
    stream: u64,
    /// The newest [`PRIMED`] streams' priming ids (the stream, and where it started): the
    /// ones a client may resume from.
    primed: VecDeque<(u64, u64)>,
    streams_open: usize,
}

impl Ring {
    /// Keep `event` under the next id, dropping the oldest while there are [`RING`] events
    /// or [`RING_BYTES`] besides it.
    fn push(&mut self, event: Arc<str>) {
        self.next_id += 1;
        while self.events.len() == RING || (!self.events.is_empty() && self.bytes + event.len() > RING_BYTES) {
            let Some((_, dropped)) = self.events.pop_front() else { break };
            self.bytes -= dropped.len();
        }
        self.bytes += event.len();
        self.events.push_back((self.next_id, event));
    }
}

impl Session {
    /// Queue an event for the GET stream, dropping the oldest while the ring is full.
    fn push(&self, message: Vec<u8>) {
        // Serialised JSON is UTF-8.
        let event: Arc<str> = String::from_utf8(message).unwrap_or_default().into();
        self.events.lock().unwrap_or_else(|e| e.into_inner()).push(event);
        self.wake.notify_waiters();
    }

    /// The newest event a stream has taken (0 if none yet): a new stream starts after it,
    /// so nothing queued while no stream was open is lost.
    pub fn delivered(&self) -> u64 {
        self.events.lock().unwrap_or_else(|e| e.into_inner()).delivered
    }

    /// Where a GET with `Last-Event-ID: id` resumes: after the event `id` names, or where the
    /// stream a priming event `id` opened started. `None` for an id this session never issued.
    pub fn resume_point(&self, id: &str) -> Option<u64> {
        let ring = self.events.lock().unwrap_or_else(|e| e.into_inner());
        match id.strip_prefix('g') {
            Some(primed) => {
                let (stream, after) = primed.split_once('.')?;
                let primed = (id_number(stream)?, id_number(after)?);
                ring.primed.contains(&primed).then_some(primed.1)
            }
            None => id_number(id).filter(|after| (1..=ring.next_id).contains(after)),
        }
    }

    /// Open the GET stream, replaying the events after `after` that are still kept; the
    /// previous stream, if any, ends. With `prime`, it opens with a priming event whose id
    /// (`g{stream}.{after}`: the stream's number, and where it starts) is unique in the
    /// session like every other, and resumes from where the stream started.
    pub fn attach(self: &Arc<Self>, after: u64, prime: bool) -> impl Stream<Item = Frame> + Send + use<> {
        let generation = {
            let mut ring = self.events.lock().unwrap_or_else(|e| e.into_inner());
            ring.stream += 1;
            ring.streams_open += 1;
            if prime {
                let primed = (ring.stream, after);
                if ring.primed.len() == PRIMED {
                    ring.primed.pop_front();
                }
                ring.primed.push_back(primed);
            }
            ring.stream
        };
        self.wake.notify_waiters();
        let priming = prime.then(|| Frame::priming(&format!("g{generation}.{after}")));
        let open = StreamOpen(self.clone());
        futures::stream::iter(priming).chain(futures::stream::unfold((open, after), move |(open, cursor)| async move {
            let session = open.0.clone();
            let next = watch::until(&session.wake, &session.ended, || {
                let mut ring = session.events.lock().unwrap_or_else(|e| e.into_inner());
                if ring.stream != generation || session.ended.is_cancelled() {
                    return Look::Over;
                }
                let Some((id, message)) = ring.events.iter().find(|(id, _)| *id > cursor) else { return Look::Wait };
                let (id, event) = (*id, Frame::message(Some(&id.to_string()), message.as_bytes()));
                ring.delivered = ring.delivered.max(id);
                Look::Ready((id, event))
            });
            let (id, event) = next.await?;
            Some((event, (open, id)))
        }))
    }

    fn now(&self) -> u64 {
        u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Mark the client as seen now: idle time counts from here.
    pub fn touch(&self) {
        self.seen.store(self.now(), Ordering::Relaxed);
    }

    /// How long the session has been idle: not at all while it answers a request, however
    /// long that takes, or while its GET stream is open.
    fn idle_for(&self) -> Duration {
        let open = self.events.lock().unwrap_or_else(|e| e.into_inner()).streams_open;
        if open > 0 || self.server.is_answering() {
            return Duration::ZERO;
        }
        Duration::from_millis(self.now().saturating_sub(self.seen.load(Ordering::Relaxed)))
    }
}

/// Counts a GET stream as open while it lives. When it ends, the session's idle time restarts:
/// it was not idle while the stream was open, however long that was.
struct StreamOpen(Arc<Session>);

impl Drop for StreamOpen {
    fn drop(&mut self) {
        // Touched before the stream stops counting, so that no expiry sweep between sees the
        // session neither streaming nor freshly seen.
        self.0.touch();
        let mut ring = self.0.events.lock().unwrap_or_else(|e| e.into_inner());
        ring.streams_open = ring.streams_open.saturating_sub(1);
    }
}

/// The session's link for what belongs to no request: its GET stream. It does not keep the
/// session alive: the change registry holds it, and an ended session's memory (its streams,
/// subscriptions, roots) goes with its end, not with the next registration.
struct SessionLink {
    session: Weak<Session>,
    ended: CancellationToken,
}

impl ClientLink for SessionLink {
    fn notify(&self, notification: ServerNotification) -> LinkFuture<'_, ()> {
        let sent = match (jsonrpc::outgoing(None, &notification), self.session.upgrade()) {
            (Ok(message), Some(session)) if !session.ended.is_cancelled() => {
                session.push(message);
                Ok(())
            }
            (Ok(_), _) => Err(LinkError::Closed),
            (Err(e), _) => Err(LinkError::Failed(e.to_string())),
        };
        Box::pin(std::future::ready(sent))
    }

    fn request(&self, _: ServerRequest) -> LinkFuture<'_, ClientResult> {
        // Requests to the client go on the stream of the request they serve.
        Box::pin(std::future::ready(Err(LinkError::Failed("no request is waiting on this stream".into()))))
    }

    fn is_closed(&self) -> bool {
        self.ended.is_cancelled() || self.session.strong_count() == 0
    }

    fn closed(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.ended.cancelled())
    }
}

/// Why no session could be opened.
#[derive(Debug, thiserror::Error)]
pub enum Full {
    #[error("the server has reached its limit of {0} live sessions; try again later")]
    Server(usize),
    #[error("tenant {tenant} has reached its quota of {limit} live sessions; end one or try again later")]
    Tenant { tenant: Arc<str>, limit: u32 },
    #[error("this client address has reached its limit of {0} live sessions; end one or try again later")]
    Address(usize),
}

impl Full {
    fn refusal(&self) -> Refusal {
        match self {
            Full::Server(_) => Refusal::SessionsServer,
            Full::Tenant { .. } => Refusal::SessionsTenant,
            Full::Address(_) => Refusal::SessionsAddress,
        }
    }
}

/// Count and log a new session refused at a limit (the log names the client, which the
/// answer reaches through a proxy that may keep no record).
fn refused(live: &Live, client: Option<IpAddr>, full: Full) -> Full {
    live.metrics.refused(full.refusal());
    tracing::debug!(client = ?client, "refused a new session: {full}");
    full
}

/// Sessions of every tenant together: the server's cap and each client address's count
/// are the server's, whichever tenants' endpoints the sessions were opened at.
#[derive(Default)]
pub struct SessionCounts {
    total: AtomicUsize,
    per_address: Mutex<HashMap<IpAddr, usize>>,
}

impl SessionCounts {
    /// Count one more session against the server's cap, unless it is reached.
    fn admit(&self, cap: usize) -> bool {
        self.total.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < cap).then_some(n + 1)).is_ok()
    }

    /// Count one more session of `address`, unless it holds `cap` already.
    fn admit_address(&self, address: IpAddr, cap: usize) -> bool {
        let mut counts = self.per_address.lock().unwrap_or_else(|e| e.into_inner());
        let count = counts.entry(address).or_default();
        if *count >= cap {
            return false;
        }
        *count += 1;
        true
    }

    /// One session less, of `address` if it had one.
    fn release(&self, address: Option<IpAddr>) {
        self.total.fetch_sub(1, Ordering::Relaxed);
        self.release_address(address);
    }

    fn release_address(&self, address: Option<IpAddr>) {
        let Some(address) = address else { return };
        let mut counts = self.per_address.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = counts.get_mut(&address) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&address);
            }
        }
    }
}

/// The address a client's sessions are counted by. An IPv6 client is its /64 network: a
/// host is commonly handed a whole /64 and may send from any address in it. An IPv4 client
/// reaching a dual-stack listener (`::ffff:a.b.c.d`) is its IPv4 address.
fn counted_address(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(_) => address,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !u128::from(u64::MAX))),
        },
    }
}

struct Live {
    /// Where sessions are counted, as the tenant's.
    metrics: Arc<Metrics>,
    tenant: Arc<str>,
    sessions: HashMap<Arc<str>, Arc<Session>>,
    /// Sessions of every tenant together, for the server's cap and the addresses'.
    counts: Arc<SessionCounts>,
}

impl Live {
    /// Add a session already admitted to the server's and its address's counts.
    fn insert(&mut self, session: Arc<Session>) {
        self.sessions.insert(session.id.clone(), session);
        self.metrics.session_opened(&self.tenant);
    }

    fn remove(&mut self, id: &str) -> Option<Arc<Session>> {
        let session = self.sessions.remove(id)?;
        self.counts.release(session.client);
        session.ended.cancel();
        session.posts.end();
        session.pending.fail_all();
        self.metrics.session_ended(&self.tenant, "tcp", session.server.version(), session.opened.elapsed());
        Some(session)
    }
}

impl Drop for Live {
    /// A removed tenant's table goes with its sessions: they no longer count.
    fn drop(&mut self) {
        for session in self.sessions.values() {
            self.counts.release(session.client);
            self.metrics.session_ended(&self.tenant, "tcp", session.server.version(), session.opened.elapsed());
        }
    }
}

/// Every live legacy session of one tenant.
pub struct SessionTable {
    live: RwLock<Live>,
    shared: Arc<Shared>,
    /// The tenant, whose quotas may cap its sessions.
    account: Arc<Account>,
    /// The server's cap on sessions, every tenant's together.
    cap: usize,
    per_address: usize,
    max_in_flight: usize,
    idle: Duration,
    shutdown: CancellationToken,
    /// What every tenant's sessions keep for resumable POST streams, together.
    kept: Arc<KeptBytes>,
}

impl SessionTable {
    /// Fail every request its sessions' clients have yet to answer: their tenant is gone, so
    /// no answer can reach them, and the calls that asked go on without one.
    pub fn fail_pending(&self) {
        for session in self.live.read().unwrap_or_else(|e| e.into_inner()).sessions.values() {
            session.pending.fail_all();
        }
    }

    /// A tenant's table; `counts` counts the sessions of every tenant's table together, and
    /// `kept` the bytes their POST streams keep.
    pub fn new(
        shared: Arc<Shared>,
        account: Arc<Account>,
        counts: Arc<SessionCounts>,
        kept: Arc<KeptBytes>,
        options: &HttpOptions,
        shutdown: CancellationToken,
    ) -> Arc<SessionTable> {
        let live = Live {
            metrics: shared.metrics().clone(),
            tenant: account.tenant().clone(),
            sessions: HashMap::new(),
            counts,
        };
        let table = Arc::new(SessionTable {
            live: RwLock::new(live),
            shared,
            account,
            cap: options.max_sessions,
            per_address: options.sessions_per_address,
            max_in_flight: options.max_in_flight,
            idle: options.session_idle,
            shutdown,
            kept,
        });
        let reaper = Arc::downgrade(&table);
        let every = (table.idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(table) = reaper.upgrade() else { return };
                table.expire();
            }
        });
        table
    }

    /// End the session idle longest among those `whose` picks, if it has been idle a while.
    fn make_room(&self, live: &mut Live, whose: impl Fn(&Session) -> bool) -> bool {
        let oldest = live
            .sessions
            .values()
            .filter(|s| whose(s))
            .map(|s| (s.idle_for(), s.id.clone()))
            .filter(|(idle, _)| *idle >= EVICTABLE_AFTER)
            .max_by_key(|(idle, _)| *idle);
        let Some((_, id)) = oldest else { return false };
        tracing::info!("the session limit is reached; ended the session idle longest");
        live.remove(&id).is_some()
    }

    /// A new session for a client at `client`. At a limit (the address's, the tenant's or
    /// the server's), the tenant's session idle longest makes room if it has been idle a
    /// while: a tenant never ends another's sessions.
    pub fn create(&self, client: Option<IpAddr>, principal: Option<Arc<str>>) -> Result<Arc<Session>, Full> {
        let client = client.map(counted_address);
        let mut live = self.live.write().unwrap_or_else(|e| e.into_inner());
        let counts = live.counts.clone();
        if let Some(address) = client
            && !counts.admit_address(address, self.per_address)
            && !(self.make_room(&mut live, |s| s.client == Some(address))
                && counts.admit_address(address, self.per_address))
        {
            return Err(refused(&live, client, Full::Address(self.per_address)));
        }
        if let Some(limit) = self.account.quotas().sessions
            && live.sessions.len() >= limit as usize
            && !self.make_room(&mut live, |_| true)
        {
            counts.release_address(client);
            return Err(refused(&live, client, Full::Tenant { tenant: self.account.tenant().clone(), limit }));
        }
        let admitted = counts.admit(self.cap) || (self.make_room(&mut live, |_| true) && counts.admit(self.cap));
        if !admitted {
            counts.release_address(client);
            return Err(refused(&live, client, Full::Server(self.cap)));
        }
        let id: Arc<str> = format!("{:032x}", rand::random::<u128>()).into();
        let ended = self.shutdown.child_token();
        let session = Arc::new(Session {
            id,
            client,
            principal,
            server: CapsuleServer::new(self.shared.clone()),
            pending: Arc::default(),
            events: Mutex::default(),
            wake: Notify::new(),
            seen: AtomicU64::new(0),
            ended: ended.clone(),
            closed_by_server: self.shutdown.clone(),
            posts: PostStreams::new(self.kept.clone()),
            opened: Instant::now(),
            max_in_flight: self.max_in_flight,
        });
        live.insert(session.clone());
        Ok(session)
    }

    /// The live session with this id, if `principal` opened it, marked as in use. Another
    /// principal's session is not found: it can neither be used nor learnt of.
    pub fn get(&self, id: &str, principal: Option<&str>) -> Option<Arc<Session>> {
        let live = self.live.read().unwrap_or_else(|e| e.into_inner());
        let session = live.sessions.get(id).filter(|s| s.principal.as_deref() == principal).cloned()?;
        // Touched under the lock: an expiry sweep or a make_room (which take it to write)
        // then cannot end a session between its lookup and its use.
        session.touch();
        drop(live);
        Some(session)
    }

    /// End a session `principal` opened; `false` if there was none.
    pub fn remove(&self, id: &str, principal: Option<&str>) -> bool {
        let mut live = self.live.write().unwrap_or_else(|e| e.into_inner());
        if live.sessions.get(id).is_none_or(|s| s.principal.as_deref() != principal) {
            return false;
        }
        live.remove(id).is_some()
    }

    /// The link to a session's GET stream, for what belongs to no request.
    pub fn link(session: &Arc<Session>) -> Arc<dyn ClientLink> {
        Arc::new(SessionLink { session: Arc::downgrade(session), ended: session.ended.clone() })
    }

    /// End the sessions idle past the limit.
    fn expire(&self) {
        let mut live = self.live.write().unwrap_or_else(|e| e.into_inner());
        let expired: Vec<Arc<str>> = live
            .sessions
            .values()
            .filter(|s| s.idle_for() >= self.idle || s.ended.is_cancelled())
            .map(|s| s.id.clone())
            .collect();
        for id in expired {
            live.remove(&id);
        }
        let sessions: Vec<Arc<Session>> = live.sessions.values().cloned().collect();
        drop(live);
        for session in sessions {
            session.posts.forget_old();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(address: &str) -> IpAddr {
        counted_address(address.parse().unwrap())
    }

    #[test]
    fn an_ipv6_client_is_counted_by_its_slash_64() {
        assert_eq!(counted("2001:db8:1:2:aaaa::1"), counted("2001:db8:1:2:ffff:1:2:3"));
        assert_ne!(counted("2001:db8:1:2::1"), counted("2001:db8:1:3::1"));
        assert_eq!(counted("::ffff:192.0.2.7"), counted("192.0.2.7"));
        assert_ne!(counted("192.0.2.7"), counted("192.0.2.8"));
    }

    #[test]
    fn the_ring_is_bounded_in_events_and_bytes() {
        let mut ring = Ring::default();
        for _ in 0..100 {
            ring.push("e".into());
        }
        assert_eq!((ring.events.len(), ring.events[0].0, ring.next_id), (RING, 37, 100));
        let big: Arc<str> = "u".repeat(16 << 10).into();
        for _ in 0..10 {
            ring.push(big.clone());
        }
        assert_eq!(ring.events.len(), RING_BYTES / big.len(), "the newest that fit in {RING_BYTES} bytes");
        assert_eq!(ring.bytes, ring.events.iter().map(|(_, e)| e.len()).sum::<usize>());
        ring.push("x".repeat(RING_BYTES * 2).into());
        assert_eq!((ring.events.len(), ring.events[0].0), (1, 111), "the newest is kept, however large");
    }

    #[test]
    fn addresses_in_one_slash_64_share_one_count() {
        let counts = SessionCounts::default();
        let (a, b) = (counted("2001:db8::1"), counted("2001:db8::ffff:2"));
        assert!(counts.admit_address(a, 2));
        assert!(counts.admit_address(b, 2));
        assert!(!counts.admit_address(counted("2001:db8::3"), 2));
        assert!(counts.admit_address(counted("2001:db8:0:1::1"), 2));
        counts.release_address(Some(a));
        assert!(counts.admit_address(b, 2));
    }
}
