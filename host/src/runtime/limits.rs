//! Per-call resource limits enforced by the store, and the meter that charges CPU time.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use thiserror::Error;

use super::clock::Runs;
use super::quota::Account;

/// The typed error a memory grow beyond the cap traps with, so the caller can name the limit.
#[derive(Debug, Error)]
#[error("memory limit exceeded: wanted {desired} bytes, limit is {limit} bytes")]
pub struct MemoryLimitExceeded {
    pub desired: usize,
    pub limit: usize,
}

/// Memory and table caps for one call.
pub struct Limiter {
    pub memory: usize,
    pub table_elements: usize,
    /// The largest linear memory allowed so far (for the memory high-water metric).
    pub peak: usize,
}

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let limit = maximum.map_or(self.memory, |m| m.min(self.memory));
        if desired > limit {
            return Err(MemoryLimitExceeded { desired, limit }.into());
        }
        self.peak = self.peak.max(desired);
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= self.table_elements && maximum.is_none_or(|m| desired <= m))
    }
}

/// The CPU time one call has used: the CPU time of the threads that polled its future, while
/// they polled it, which is when its guest code and its host calls run. Waiting (on I/O, on
/// the client, for a worker after a yield) is not counted; a host call that computes is, so a
/// guest cannot hide its work in host calls (a loop of large `get-random-bytes`, say).
///
/// A thread's CPU clock is a system call the vDSO cannot serve (~0.9 µs on the benchmark
/// machine; two a poll were a tenth of a fresh instance + call). So a poll reads it when it
/// starts, which the epoch callback's checks need, but a poll over within [`SHORT_POLL`] of
/// wall time is charged that wall time instead of reading it again: time the OS gave other
/// threads is not charged, except within a poll that short.
pub(crate) struct CpuMeter {
    /// The tenant account each poll is charged to as well (a caller's call).
    account: Option<Arc<Account>>,
    /// Whether the account's CPU quota ran out during this call.
    over_quota: AtomicBool,
    /// Nanoseconds of completed polls.
    used: AtomicU64,
    /// The polling thread's CPU clock when the poll in progress started (plus one); zero when
    /// idle.
    polling_since: AtomicU64,
}

/// The longest poll charged its wall time rather than its thread's CPU time.
const SHORT_POLL: Duration = Duration::from_micros(100);

/// This thread's CPU time, in nanoseconds.
pub(crate) fn thread_cpu() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    u64::try_from(now.tv_sec).unwrap_or_default().saturating_mul(1_000_000_000).saturating_add(now.tv_nsec as u64)
}

impl CpuMeter {
    pub fn new(account: Option<Arc<Account>>) -> Arc<Self> {
        Arc::new(CpuMeter {
            account,
            over_quota: AtomicBool::new(false),
            used: AtomicU64::new(0),
            polling_since: AtomicU64::new(0),
        })
    }

    /// Whether the tenant's CPU quota ran out while this call ran.
    pub fn over_quota(&self) -> bool {
        self.over_quota.load(Ordering::Relaxed)
    }

    /// CPU time used so far. During a poll, only the polling thread (the epoch callback)
    /// sees the poll in progress counted.
    pub fn used(&self) -> Duration {
        let running = match self.polling_since.load(Ordering::Relaxed) {
            0 => 0,
            since => thread_cpu().saturating_sub(since - 1),
        };
        Duration::from_nanos(self.used.load(Ordering::Relaxed).saturating_add(running))
    }

    /// Charge `spent` to the call and its tenant's account.
    pub fn charge(&self, spent: Duration) {
        let nanos = u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX);
        self.used.fetch_add(nanos, Ordering::Relaxed);
        if let Some(account) = &self.account
            && !account.charge(spent)
        {
            self.over_quota.store(true, Ordering::Relaxed);
        }
    }

    /// `future`, with the time spent polling it charged to this meter, and each poll shown
    /// to the epoch clock as a run of guest code.
    pub fn meter<F: Future>(self: &Arc<Self>, runs: Runs, future: F) -> Metered<F> {
        Metered { meter: self.clone(), runs, future }
    }
}

pin_project_lite::pin_project! {
    /// A future whose polls are timed by a [`CpuMeter`].
    pub(crate) struct Metered<F> {
        meter: Arc<CpuMeter>,
        runs: Runs,
        #[pin]
        future: F,
    }
}

impl<F: Future> Future for Metered<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let meter = &**this.meter;
        let (wall, start) = (Instant::now(), thread_cpu());
        meter.polling_since.store(start + 1, Ordering::Relaxed);
        let future = this.future;
        let result = this.runs.run(|| future.poll(cx));
        meter.polling_since.store(0, Ordering::Relaxed);
        let spent = match wall.elapsed() {
            short if short < SHORT_POLL => u64::try_from(short.as_nanos()).unwrap_or(u64::MAX),
            _ => thread_cpu().saturating_sub(start),
        };
        meter.charge(Duration::from_nanos(spent));
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::clock::EpochClock;

    /// A meter and the runs its polls are shown to the epoch clock as.
    fn meter() -> (Arc<CpuMeter>, Runs, EpochClock) {
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        let engine = wasmtime::Engine::new(&config).expect("an engine");
        let clock = EpochClock::start(&engine, Duration::from_secs(60), Duration::from_secs(60)).expect("the clock");
        (CpuMeter::new(None), clock.runs(), clock)
    }

    /// One poll of a future that runs `during` (with the meter, as the epoch callback would).
    fn poll_once(meter: &Arc<CpuMeter>, runs: Runs, during: impl FnOnce(&CpuMeter)) {
        let inner = meter.clone();
        let mut during = Some(during);
        let future = meter.meter(
            runs,
            std::future::poll_fn(move |_| {
                (during.take().expect("polled once"))(&inner);
                Poll::Ready(())
            }),
        );
        let mut future = std::pin::pin!(future);
        assert!(future.as_mut().poll(&mut Context::from_waker(std::task::Waker::noop())).is_ready());
    }

    #[test]
    fn a_short_poll_is_charged_its_wall_time_a_longer_one_its_cpu_time() {
        let (meter, runs, _clock) = meter();
        // Within `SHORT_POLL`: its wall time, sleep included (unless a busy machine made the
        // sleep longer than that; then it is charged its CPU time, and under `SHORT_POLL`).
        let wall = Instant::now();
        poll_once(&meter, runs.clone(), |_| std::thread::sleep(Duration::from_micros(30)));
        let (wall, short) = (wall.elapsed(), meter.used());
        assert!(short < SHORT_POLL, "a 30 µs sleep was charged {short:?}");
        if wall < SHORT_POLL {
            assert!(short >= Duration::from_micros(30), "a 30 µs poll was charged {short:?}");
        }
        // Longer: only what the thread computed. The epoch callback sees it while it runs.
        poll_once(&meter, runs, |meter| {
            std::thread::sleep(Duration::from_millis(50));
            let start = thread_cpu();
            while thread_cpu() - start < 5_000_000 {
                std::hint::spin_loop();
            }
            // What decides whether the call goes on, moves off the workers or is stopped.
            let seen = meter.used() - short;
            assert!(
                seen >= Duration::from_millis(5) && seen < Duration::from_millis(40),
                "a 50 ms sleep and 5 ms of computing were seen as {seen:?}"
            );
        });
        let charged = meter.used() - short;
        assert!(
            charged >= Duration::from_millis(5) && charged < Duration::from_millis(40),
            "a poll that slept 50 ms and computed 5 ms was charged {charged:?}"
        );
    }
}
