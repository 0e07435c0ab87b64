//! Per-call resource limits enforced by the store, and the meter that charges CPU time.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use thiserror::Error;

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
}

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let limit = maximum.map_or(self.memory, |m| m.min(self.memory));
        if desired > limit {
            return Err(MemoryLimitExceeded { desired, limit }.into());
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= self.table_elements && maximum.is_none_or(|m| desired <= m))
    }
}

/// The CPU time one call has used: the time its future spent being polled, which is when its
/// guest code and its host calls run. Waiting (on I/O, on the client, for a worker after a
/// yield) is not counted; a host call that computes is, so a guest cannot hide its work in
/// host calls (a loop of large `get-random-bytes`, say).
pub(crate) struct CpuMeter {
    base: Instant,
    /// Nanoseconds of completed polls.
    used: AtomicU64,
    /// When the poll in progress started (nanoseconds since `base`, plus one); zero when idle.
    polling_since: AtomicU64,
}

impl CpuMeter {
    pub fn new() -> Arc<Self> {
        Arc::new(CpuMeter { base: Instant::now(), used: AtomicU64::new(0), polling_since: AtomicU64::new(0) })
    }

    fn now(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// CPU time used so far, the poll in progress included.
    pub fn used(&self) -> Duration {
        let running = match self.polling_since.load(Ordering::Relaxed) {
            0 => 0,
            since => self.now().saturating_sub(since - 1),
        };
        Duration::from_nanos(self.used.load(Ordering::Relaxed).saturating_add(running))
    }

    /// `future`, with the time spent polling it charged to this meter.
    pub fn meter<F: Future>(self: &Arc<Self>, future: F) -> Metered<F> {
        Metered { meter: self.clone(), future }
    }
}

pin_project_lite::pin_project! {
    /// A future whose polls are timed by a [`CpuMeter`].
    pub(crate) struct Metered<F> {
        meter: Arc<CpuMeter>,
        #[pin]
        future: F,
    }
}

impl<F: Future> Future for Metered<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let start = this.meter.now();
        this.meter.polling_since.store(start + 1, Ordering::Relaxed);
        let result = this.future.poll(cx);
        this.meter.polling_since.store(0, Ordering::Relaxed);
        this.meter.used.fetch_add(this.meter.now().saturating_sub(start), Ordering::Relaxed);
        result
    }
}
