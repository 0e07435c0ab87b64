//! The request workers: one async runtime of one thread each, and the HTTP connections
//! spread over them.
//!
//! Tokio's multi-threaded scheduler hands work between its workers: a worker that wakes with
//! work wakes an idle sibling to look for more, which usually finds none and sleeps again.
//! For short requests each hand-off (a futex, a context switch, cold caches on the other CPU)
//! costs about as much as the request (BENCHMARKS.md, "Workers"). So every worker is a
//! runtime of its own with a single thread, and a connection, once accepted, lives on one
//! worker: its requests, the plugin calls they start and the tasks they spawn run there,
//! with no hand-off. New connections go to the worker with the fewest open ones. The first
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

/// Where connections are served: the runtime a [`Workers`] was made on, and any others.
/// Cheap to clone. Never empty: the current runtime comes first. The default is it alone.
#[derive(Clone)]
pub struct Workers {
    workers: Arc<[Worker]>,
}

struct Worker {
    /// `None` for the runtime the connections are accepted on.
    handle: Option<Handle>,
    /// Connections it serves now.
    open: AtomicUsize,
}

impl Workers {
    /// The current runtime and `others`.
    pub fn new(others: impl IntoIterator<Item = Handle>) -> Self {
        let local = std::iter::once(None).chain(others.into_iter().map(Some));
        Workers { workers: local.map(|handle| Worker { handle, open: AtomicUsize::new(0) }).collect() }
    }

    /// How many runtimes serve connections (the current one among them).
    pub fn count(&self) -> usize {
        self.workers.len()
    }

    /// The worker with the fewest open connections (the first on a tie), counted as serving
    /// one more for as long as the returned [`Assigned`] lives.
    pub fn assign(&self) -> Assigned {
        let index = (0..self.workers.len()).min_by_key(|&i| self.workers[i].open.load(Ordering::Relaxed)).unwrap_or(0);
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
        Workers::new([])
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
        let workers = Workers::new(extra.handles());
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
        let workers = Workers::new([]);
        let assigned = workers.assign();
        assert!(assigned.handle().is_none());
        assert_eq!(workers.open(), [1]);
    }
}
