//! The request workers: one async runtime of one thread each, and the HTTP connections
//! spread over them.
//!
//! Tokio's multi-threaded scheduler hands work between its workers: a worker that wakes with
//! work wakes an idle sibling to look for more, which usually finds none and sleeps again.
//! For short requests each hand-off (a futex, a context switch, cold caches on the other CPU)
//! costs about as much as the request (BENCHMARKS.md, "Workers"). So every worker is a
//! runtime of its own with a single thread, and a connection, once accepted, lives on one
//! worker: its requests, the plugin calls they start and the tasks they spawn run there,
//! with no hand-off. Where a new connection goes is the [`Placement`]'s choice. The first
//! worker is the runtime `serve` itself runs on, so it also carries the background work
//! (loaders, watchers, session expiry); stdio's one connection is served there too.
//!
//! A long plugin call still leaves its worker (`runtime::offload`): each runtime is a
//! multi-threaded one with a single worker thread, so `block_in_place` can hand that worker's
//! duties to a fresh thread while the call computes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::{Builder, Handle, Runtime};

/// The extra workers' runtimes, owned by whoever started them: dropping it stops them, so it
/// is dropped outside any async context, after the first worker's `block_on` has returned.
pub struct ExtraWorkers {
    runtimes: Vec<Runtime>,
}

impl ExtraWorkers {
    /// Start `count` runtimes of one worker thread each, calling `on_start` on each of their
    /// threads as it starts and `on_unpark` whenever one of them wakes from sleep. A worker
    /// about to sleep builds its spare instance (`runtime::worker_idle`).
    pub fn start(
        count: usize,
        on_start: impl Fn() + Send + Sync + Clone + 'static,
        on_unpark: impl Fn() + Send + Sync + Clone + 'static,
    ) -> std::io::Result<Self> {
        let runtimes = (1..=count)
            .map(|n| {
                Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name(format!("capsule-wk-{n}"))
                    .on_thread_start(on_start.clone())
                    .on_thread_unpark(on_unpark.clone())
                    .on_thread_park(crate::runtime::worker_idle)
                    .on_thread_stop(crate::runtime::worker_stopped)
                    .enable_all()
                    .build()
            })
            .collect::<std::io::Result<_>>()?;
        Ok(ExtraWorkers { runtimes })
    }

    /// The handles of their runtimes.
    pub fn handles(&self) -> impl Iterator<Item = Handle> + '_ {
        self.runtimes.iter().map(|runtime| runtime.handle().clone())
    }
}

/// How new connections are spread over the workers.
///
/// A worker that serves few connections is often idle between their requests, and each time
/// it sleeps and wakes with the next one costs two context switches; on a guest where waking
/// a thread is slow that is a large share of a short call (BENCHMARKS.md, "Filling one worker
/// a core first"). So the first `cores` workers, one a core, each take up to `depth`
/// connections (the one with the fewest first) before any other worker gets one; from then
/// on every connection goes to the worker with the fewest open. `depth` 0 spreads from the
/// first connection on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Workers in the first tier: one a core.
    pub cores: usize,
    /// Connections each of them takes before the others get any.
    pub depth: usize,
}

impl Placement {
    /// The fewest-open rule from the first connection on.
    pub const SPREAD: Placement = Placement { cores: 0, depth: 0 };
}

/// Where connections are served: the runtime a [`Workers`] was made on, and any others.
/// Cheap to clone. Never empty: the current runtime comes first. The default is it alone.
#[derive(Clone)]
pub struct Workers {
    workers: Arc<[Worker]>,
    placement: Placement,
}

struct Worker {
    /// `None` for the runtime the connections are accepted on.
    handle: Option<Handle>,
    /// Connections it serves now.
    open: AtomicUsize,
}

impl Workers {
    /// The current runtime and `others`, connections placed by `placement`.
    pub fn new(others: impl IntoIterator<Item = Handle>, placement: Placement) -> Self {
        let local = std::iter::once(None).chain(others.into_iter().map(Some));
        let workers = local.map(|handle| Worker { handle, open: AtomicUsize::new(0) }).collect();
        Workers { workers, placement }
    }

    /// How many runtimes serve connections (the current one among them).
    pub fn count(&self) -> usize {
        self.workers.len()
    }

    /// The worker the [`Placement`] picks (the first on a tie), counted as serving one more
    /// for as long as the returned [`Assigned`] lives.
    pub fn assign(&self) -> Assigned {
        let open = |i: usize| self.workers[i].open.load(Ordering::Relaxed);
        let Placement { cores, depth } = self.placement;
        let index = (0..cores.min(self.workers.len()))
            .filter(|&i| open(i) < depth)
            .min_by_key(|&i| open(i))
            .or_else(|| (0..self.workers.len()).min_by_key(|&i| open(i)))
            .unwrap_or(0);
        self.workers[index].open.fetch_add(1, Ordering::Relaxed);
        Assigned { workers: self.clone(), index }
    }

    /// Connections open on each worker now.
    #[cfg(test)]
    fn open(&self) -> Vec<usize> {
        self.workers.iter().map(|worker| worker.open.load(Ordering::Relaxed)).collect()
    }
}

impl Default for Workers {
    fn default() -> Self {
        Workers::new([], Placement::SPREAD)
    }
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Workers({})", self.count())
    }
}

/// A connection's place on a worker.
pub struct Assigned {
    workers: Workers,
    index: usize,
}

impl Assigned {
    /// The runtime to serve on, or `None` for the current one.
    pub fn handle(&self) -> Option<&Handle> {
        self.workers.workers[self.index].handle.as_ref()
    }

    /// This connection's place, for its requests to step aside from.
    pub fn seat(&self) -> Seat {
        Seat { workers: self.workers.clone(), index: self.index }
    }
}

/// A connection's place on its worker, as the requests it carries see it.
#[derive(Clone)]
pub struct Seat {
    workers: Workers,
    index: usize,
}

impl Seat {
    /// Count the connection as not open until the returned [`Aside`] drops. An HTTP/1.1
    /// connection that holds an event stream carries no request meanwhile, and costs its
    /// worker nothing but the stream's events: counted, it would keep a first-tier place
    /// from a connection that does carry calls (a legacy client holds one of each).
    pub fn aside(&self) -> Aside {
        self.workers.workers[self.index].open.fetch_sub(1, Ordering::Relaxed);
        Aside(self.clone())
    }
}

/// A connection counted as not open, while it lives (see [`Seat::aside`]).
pub struct Aside(Seat);

impl Drop for Aside {
    fn drop(&mut self) {
        self.0.workers.workers[self.0.index].open.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Assigned {
    fn drop(&mut self) {
        self.workers.workers[self.index].open.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_go_to_the_least_loaded_worker() {
        let extra = ExtraWorkers::start(2, || {}, || {}).expect("runtimes");
        let workers = Workers::new(extra.handles(), Placement::SPREAD);
        assert_eq!(workers.count(), 3);
        let first = workers.assign();
        assert!(first.handle().is_none(), "a tie goes to the current runtime");
        let second = workers.assign();
        let third = workers.assign();
        assert!(second.handle().is_some() && third.handle().is_some());
        assert_eq!(workers.open(), [1, 1, 1]);
        drop(second);
        assert_eq!(workers.open(), [1, 0, 1]);
        let again = workers.assign();
        assert_eq!(workers.open(), [1, 1, 1], "the freed worker is refilled first");
        drop((first, third, again));
        assert_eq!(workers.open(), [0, 0, 0]);
    }

    #[test]
    fn without_others_everything_stays_on_the_current_runtime() {
        let workers = Workers::default();
        assert_eq!(workers.count(), 1);
        assert!(workers.assign().handle().is_none());
        let workers = Workers::new([], Placement { cores: 2, depth: 4 });
        let assigned = workers.assign();
        assert!(assigned.handle().is_none());
        assert_eq!(workers.open(), [1]);
    }

    #[test]
    fn one_worker_a_core_fills_first_then_all_spread() {
        let extra = ExtraWorkers::start(3, || {}, || {}).expect("runtimes");
        let workers = Workers::new(extra.handles(), Placement { cores: 2, depth: 3 });
        let mut held: Vec<Assigned> = (0..2).map(|_| workers.assign()).collect();
        assert_eq!(workers.open(), [1, 1, 0, 0], "the first tier is spread over the cores");
        held.extend((0..4).map(|_| workers.assign()));
        assert_eq!(workers.open(), [3, 3, 0, 0], "the others wait until the first tier is full");
        held.extend((0..3).map(|_| workers.assign()));
        assert_eq!(workers.open(), [3, 3, 2, 1], "past it, the fewest open");
        held.extend((0..3).map(|_| workers.assign()));
        assert_eq!(workers.open(), [3, 3, 3, 3]);
        held.push(workers.assign());
        assert_eq!(workers.open(), [4, 3, 3, 3]);
        drop(held.drain(..2));
        assert_eq!(workers.open(), [3, 2, 3, 3]);
        held.push(workers.assign());
        assert_eq!(workers.open(), [3, 3, 3, 3], "a first-tier worker below its depth takes the next");
        drop(held);
        assert_eq!(workers.open(), [0, 0, 0, 0]);
    }

    #[test]
    fn a_connection_that_holds_a_stream_leaves_its_place_to_the_next() {
        let extra = ExtraWorkers::start(3, || {}, || {}).expect("runtimes");
        let workers = Workers::new(extra.handles(), Placement { cores: 2, depth: 2 });
        let mut held: Vec<Assigned> = (0..4).map(|_| workers.assign()).collect();
        assert_eq!(workers.open(), [2, 2, 0, 0]);
        let streams: Vec<Aside> = held.iter().take(2).map(|assigned| assigned.seat().aside()).collect();
        assert_eq!(workers.open(), [1, 1, 0, 0], "a stream connection is not counted");
        held.extend((0..2).map(|_| workers.assign()));
        assert_eq!(workers.open(), [2, 2, 0, 0], "its place went to a connection that carries calls");
        drop(streams);
        assert_eq!(workers.open(), [3, 3, 0, 0], "counted again once its stream ends");
        drop(held);
        assert_eq!(workers.open(), [0, 0, 0, 0]);
    }

    #[test]
    fn more_cores_than_workers_is_the_fewest_open_rule() {
        let extra = ExtraWorkers::start(1, || {}, || {}).expect("runtimes");
        let workers = Workers::new(extra.handles(), Placement { cores: 8, depth: 2 });
        let held: Vec<Assigned> = (0..5).map(|_| workers.assign()).collect();
        assert_eq!(workers.open(), [3, 2]);
        drop(held);
    }
}
