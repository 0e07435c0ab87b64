//! Idle polling: a request worker that has just done work keeps polling for the next for a
//! moment before it sleeps.
//!
//! A worker with nothing to do sleeps in `epoll_wait`, and its CPU halts. Waking a halted CPU
//! is slow, on a virtual machine above all (the hypervisor must schedule the virtual CPU
//! again), and its caches come back cold: on the benchmark machine a client making one call
//! at a time saw ~40% more latency per call than with the CPU kept busy. So after any task
//! has run, one [`IdlePoll`] task per worker keeps yielding, which makes tokio poll the
//! sockets without blocking, until a whole `window` passes in which nothing else ran; then
//! it waits until a worker wakes from sleep again. This is what the kernel's `busy_poll`,
//! the `haltpoll` idle governor and Go's spinning scheduler threads do: a bounded amount of
//! CPU (at most one `window` per worker per pause in the traffic) for latency. A busy
//! server never reaches it (its workers have no idle moments), and an idle one sleeps.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::runtime::thread_cpu;

/// CPU time the worker spends between two polls beyond which another task ran in between:
/// the worker was not idle. One empty round (a zero-timeout `epoll_wait`, a yield to other
/// threads) takes about 2 µs; serving a request, 30 µs or more; an interrupt handled on the
/// thread's time, now and then up to ~100 µs on the benchmark machine (a few times in 10 ms),
/// which only restarts the window. Wall time would not do: a poller preempted by another
/// thread would count that as work and poll on for as long as the CPU is contended.
const BUSY_GAP: Duration = Duration::from_micros(25);

/// The shared switch of the idle pollers.
pub struct IdlePoll {
    window: Duration,
    woke: Notify,
}

impl IdlePoll {
    /// Idle pollers that stop once `window` passes without work. A zero window means none:
    /// [`IdlePoll::start`] then starts nothing.
    pub fn new(window: Duration) -> Arc<IdlePoll> {
        Arc::new(IdlePoll { window, woke: Notify::new() })
    }

    /// Say that a worker woke from sleep (tokio's after-unpark hook, on that worker).
    pub fn worker_woke(&self) {
        if !self.window.is_zero() {
            self.woke.notify_waiters();
        }
    }

    /// Start one poller per worker on the current runtime.
    pub fn start(self: &Arc<Self>, workers: usize) {
        if self.window.is_zero() {
            return;
        }
        for _ in 0..workers {
            tokio::spawn(self.clone().poll());
        }
    }

    async fn poll(self: Arc<Self>) {
        loop {
            let mut cpu = thread_cpu();
            let mut quiet_since = Instant::now();
            while quiet_since.elapsed() < self.window {
                tokio::task::yield_now().await;
                // On another worker than the last poll's, this compares two threads' clocks:
                // at worst the window starts again.
                let now = thread_cpu();
                if Duration::from_nanos(now.saturating_sub(cpu)) > BUSY_GAP {
                    quiet_since = Instant::now();
                } else {
                    // Nothing ran on this worker: it builds the spare instance it would
                    // have built before sleeping, and then any other thread waiting for
                    // this CPU (a long call's, another process's) goes first.
                    crate::runtime::worker_idle();
                    std::thread::yield_now();
                }
                cpu = now;
            }
            self.woke.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A one-worker runtime whose worker polls for `window` after it wakes, and the worker's
    /// thread id.
    fn runtime(window: Duration) -> (tokio::runtime::Runtime, i32) {
        let poll = IdlePoll::new(window);
        let (woke, worker) = (poll.clone(), Arc::new(Mutex::new(None)));
        let named = worker.clone();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .on_thread_start(move || {
                // `/proc/thread-self` names this thread: `<pid>/task/<tid>`.
                let link = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
                let tid = link.file_name().and_then(|tid| tid.to_str()?.parse().ok()).expect("a thread id");
                named.lock().unwrap().get_or_insert(tid);
            })
            .on_thread_unpark(move || woke.worker_woke())
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move { tokio::spawn(async move { poll.start(1) }).await }).expect("started");
        let worker = worker.lock().unwrap().expect("the worker started");
        (runtime, worker)
    }

    /// The kernel's schedstat for the thread `tid` of this process: the CPU time it has used,
    /// and the time it has spent runnable, waiting for a CPU.
    fn schedstat(tid: i32) -> (Duration, Duration) {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).expect("schedstat");
        let mut fields = stat.split_whitespace().map(|ns| Duration::from_nanos(ns.parse().expect("nanoseconds")));
        (fields.next().expect("run time"), fields.next().expect("wait time"))
    }

    fn cpu_of(tid: i32) -> Duration {
        schedstat(tid).0
    }

    #[test]
    fn the_worker_polls_after_waking_then_sleeps() {
        let window = Duration::from_millis(1);
        let (runtime, worker) = runtime(window);
        std::thread::sleep(Duration::from_millis(50));
        let before = cpu_of(worker);
        std::thread::sleep(Duration::from_millis(200));
        let idle = cpu_of(worker) - before;
        assert!(idle < Duration::from_millis(5), "an idle worker used {idle:?} of CPU");

        // A task from outside wakes the worker: it polls for about a window, then sleeps. The
        // window is wall time and the poller yields its CPU between polls, so on a busy
        // machine part of it is spent runnable rather than running; either way it is awake.
        let before = schedstat(worker);
        runtime.spawn(async {});
        std::thread::sleep(Duration::from_millis(200));
        let after = schedstat(worker);
        let (woken, waited) = (after.0 - before.0, after.1 - before.1);
        assert!(
            woken + waited >= window / 2,
            "the worker polled for only {woken:?} (and waited {waited:?}) after waking"
        );
        assert!(woken < window * 20, "the worker polled for {woken:?}, far past its window");
    }

    #[test]
    fn a_zero_window_never_polls() {
        let (runtime, worker) = runtime(Duration::ZERO);
        let before = cpu_of(worker);
        runtime.spawn(async {});
        std::thread::sleep(Duration::from_millis(200));
        let used = cpu_of(worker) - before;
        assert!(used < Duration::from_millis(5), "a worker without idle polling used {used:?} of CPU");
    }
}
