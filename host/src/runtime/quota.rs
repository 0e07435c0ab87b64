//! A tenant's account: what its plugins and callers use right now, held to the tenant's
//! [`Quotas`]. Every plugin of a tenant charges the same account, and versions of a plugin
//! that overlap during a hot swap charge it too, so a reload never resets a quota.
//!
//! A call that finds a quota used up waits for it up to the tenant's `wait` (a burst is
//! absorbed), and is refused only when the wait ends: refusals cost the server next to
//! nothing, but answering them as fast as a client can ask would still hand that client
//! the request workers its neighbours need.
//!
//! The account knows tenants, principals and tool names only as strings: it serves any
//! front end, and imports nothing from MCP.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use thiserror::Error;
use tokio::sync::Notify;

use crate::policy::{CpuQuota, Quotas, RateQuota};

/// A quota stopped a request. The message names the quota and when it frees up.
#[derive(Debug, Clone, Error)]
pub enum QuotaExceeded {
    #[error("tenant {tenant} is already running its quota of {limit} concurrent calls; try again when one ends")]
    Calls { tenant: Arc<str>, limit: u32 },
    #[error("tenant {tenant} has its quota of {limit} plugin instances in use; try again when a call ends")]
    Instances { tenant: Arc<str>, limit: u32 },
    #[error(
        "tenant {tenant} has used its CPU quota of {budget:?} per {window:?}; it resets in {:.1}s",
        resets_in.as_secs_f64()
    )]
    Cpu { tenant: Arc<str>, budget: Duration, window: Duration, resets_in: Duration },
    #[error(
        "the quota of {per_minute} calls per minute to tool {tool} per caller is used up; the next call is allowed in {:.1}s",
        retry_in.as_secs_f64()
    )]
    Rate { tool: String, per_minute: u32, retry_in: Duration },
}

/// Principals tracked before idle ones are forgotten (a full bucket is the same as none).
const SWEEP_AT: usize = 4096;

/// The CPU a tenant's calls have used in the current window.
struct CpuWindow {
    quota: Option<CpuQuota>,
    start: Instant,
    used: Duration,
}

impl CpuWindow {
    /// Start a new window if the current one is over.
    fn roll(&mut self, quota: CpuQuota, now: Instant) {
        if now.duration_since(self.start) >= quota.window {
            self.start = now;
            self.used = Duration::ZERO;
        }
    }
}

/// Token buckets by principal, then tool.
type Buckets = HashMap<Box<str>, HashMap<Box<str>, Bucket>>;

/// One principal's calls to one tool.
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn refill(&mut self, rate: RateQuota, now: Instant) {
        let per_second = f64::from(rate.per_minute) / 60.0;
        let earned = now.duration_since(self.at).as_secs_f64() * per_second;
        self.tokens = (self.tokens + earned).min(f64::from(rate.burst));
        self.at = now;
    }
}

/// A count of something in use, and a wake-up for calls waiting for it to drop.
#[derive(Default)]
struct Gauge {
    count: AtomicU32,
    freed: Notify,
}

impl Gauge {
    /// Give one back, and wake a call waiting for it.
    fn release(&self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
        self.freed.notify_one();
    }

    /// Take one, unless `limit` are already taken. What is taken is given back by the hold
    /// the caller makes of it ([`Held`], [`InstanceHeld`]).
    fn try_take(&self, limit: Option<u32>) -> Result<(), u32> {
        match limit {
            None => {
                self.count.fetch_add(1, Ordering::Relaxed);
            }
            Some(limit) => {
                self.count
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < limit).then_some(n + 1))
                    .map_err(|_| limit)?;
            }
        }
        Ok(())
    }

    /// Take one, waiting up to `wait` for one to be released; the limit is read afresh on
    /// every try, so a reload that raises it lets waiting calls in.
    async fn take(&self, limit: impl Fn() -> Option<u32>, wait: Duration) -> Result<(), u32> {
        // Most takes find one free: they register no waiter and set no deadline.
        if self.try_take(limit()).is_ok() {
            return Ok(());
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Registered before the try, so a release between the two is not missed.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            match self.try_take(limit()) {
                Ok(()) => return Ok(()),
                Err(limit) => {
                    if tokio::time::timeout_at(deadline, freed).await.is_err() {
                        return Err(limit);
                    }
                }
            }
        }
    }
}

/// One unit of a quota gauge in use, released when the hold drops.
pub struct Held<'a>(&'a Gauge);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// One of an account's instances in use, released when the hold drops.
pub struct InstanceHeld(Arc<Account>);

impl Drop for InstanceHeld {
    fn drop(&mut self) {
        self.0.instances.release();
    }
}

/// Try `check` until it passes or `wait` is over, sleeping as long as the refusal says
/// the quota needs (but not past the wait) between tries.
async fn waiting<T>(wait: Duration, mut check: impl FnMut() -> Result<T, QuotaExceeded>) -> Result<T, QuotaExceeded> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let refused = match check() {
            Ok(passed) => return Ok(passed),
            Err(refused) => refused,
        };
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Err(refused);
        }
        // A quota that frees within a millisecond is retried after one, not spun on.
        let frees_in = refused.frees_in().unwrap_or(wait).max(Duration::from_millis(1));
        tokio::time::sleep_until(deadline.min(now + frees_in)).await;
    }
}

impl QuotaExceeded {
    /// When the quota frees, if it is a matter of time.
    fn frees_in(&self) -> Option<Duration> {
        match self {
            QuotaExceeded::Cpu { resets_in, .. } => Some(*resets_in),
            QuotaExceeded::Rate { retry_in, .. } => Some(*retry_in),
            QuotaExceeded::Calls { .. } | QuotaExceeded::Instances { .. } => None,
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Counters and timestamps updated in place: a panic elsewhere cannot leave them torn.
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a tenant is using now, for the admin API.
#[derive(Debug, Clone, Serialize)]
pub struct Usage {
    pub calls_running: u32,
    pub instances_live: u32,
    /// CPU time used in the current window, when there is a CPU quota.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_ms_in_window: Option<u64>,
}

/// A tenant's account.
pub struct Account {
    tenant: Arc<str>,
    quotas: RwLock<Quotas>,
    calls: Gauge,
    instances: Gauge,
    /// Whether there is a CPU quota: calls skip the window's lock when there is none.
    metered: AtomicBool,
    cpu: Mutex<CpuWindow>,
    buckets: Mutex<Buckets>,
}

impl Account {
    pub fn new(tenant: &str, quotas: Quotas) -> Arc<Account> {
        Arc::new(Account {
            tenant: tenant.into(),
            metered: AtomicBool::new(quotas.cpu.is_some()),
            cpu: Mutex::new(CpuWindow { quota: quotas.cpu, start: Instant::now(), used: Duration::ZERO }),
            quotas: RwLock::new(quotas),
            calls: Gauge::default(),
            instances: Gauge::default(),
            buckets: Mutex::default(),
        })
    }

    /// The tenant this account is.
    pub fn tenant(&self) -> &Arc<str> {
        &self.tenant
    }

    /// The quotas in force.
    pub fn quotas(&self) -> Quotas {
        *self.quotas.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Put new quotas in force (the tenant's policy changed). What is in use stays counted.
    pub fn set(&self, quotas: Quotas) {
        *self.quotas.write().unwrap_or_else(std::sync::PoisonError::into_inner) = quotas;
        lock(&self.cpu).quota = quotas.cpu;
        self.metered.store(quotas.cpu.is_some(), Ordering::Relaxed);
        if quotas.rate.is_none() {
            lock(&self.buckets).clear();
        }
    }

    /// How long a call waits for a used-up quota.
    pub fn wait(&self) -> Duration {
        self.quotas().wait
    }

    /// Count a request that runs plugin code, for as long as the hold lives.
    pub async fn call(&self) -> Result<Held<'_>, QuotaExceeded> {
        self.calls
            .take(|| self.quotas().concurrent_calls, self.wait())
            .await
            .map(|()| Held(&self.calls))
            .map_err(|limit| QuotaExceeded::Calls { tenant: self.tenant.clone(), limit })
    }

    /// Count a plugin instance, for as long as the hold lives (it may outlive the call that
    /// took it: an instance is torn down after its call's answer has gone).
    pub async fn instance(self: &Arc<Self>) -> Result<InstanceHeld, QuotaExceeded> {
        self.instances
            .take(|| self.quotas().instances, self.wait())
            .await
            .map(|()| InstanceHeld(self.clone()))
            .map_err(|limit| QuotaExceeded::Instances { tenant: self.tenant.clone(), limit })
    }

    /// Wait for the tenant's CPU quota for this window, if it is used up.
    pub async fn check_cpu(&self) -> Result<(), QuotaExceeded> {
        waiting(self.wait(), || self.cpu_left()).await
    }

    /// Refuse a call when the tenant's CPU quota for this window is used up.
    pub fn cpu_left(&self) -> Result<(), QuotaExceeded> {
        if !self.metered.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut window = lock(&self.cpu);
        let Some(quota) = window.quota else { return Ok(()) };
        let now = Instant::now();
        window.roll(quota, now);
        if window.used < quota.budget {
            return Ok(());
        }
        Err(QuotaExceeded::Cpu {
            tenant: self.tenant.clone(),
            budget: quota.budget,
            window: quota.window,
            resets_in: (window.start + quota.window).saturating_duration_since(now),
        })
    }

    /// Charge CPU time to the current window. Returns whether the quota still has room.
    pub fn charge(&self, used: Duration) -> bool {
        if !self.metered.load(Ordering::Relaxed) {
            return true;
        }
        let mut window = lock(&self.cpu);
        let Some(quota) = window.quota else { return true };
        window.roll(quota, Instant::now());
        window.used += used;
        window.used < quota.budget
    }

    /// Take one call of `principal` to `tool` from its token bucket, waiting for it to refill.
    pub async fn take(&self, principal: &str, tool: &str) -> Result<(), QuotaExceeded> {
        waiting(self.wait(), || self.try_take(principal, tool)).await
    }

    fn try_take(&self, principal: &str, tool: &str) -> Result<(), QuotaExceeded> {
        let Some(rate) = self.quotas().rate else { return Ok(()) };
        let now = Instant::now();
        let mut buckets = lock(&self.buckets);
        if buckets.len() >= SWEEP_AT && !buckets.contains_key(principal) {
            buckets.retain(|_, tools| {
                tools.retain(|_, bucket| {
                    bucket.refill(rate, now);
                    bucket.tokens < f64::from(rate.burst)
                });
                !tools.is_empty()
            });
        }
        let tools = match buckets.get_mut(principal) {
            Some(tools) => tools,
            None => buckets.entry(principal.into()).or_default(),
        };
        let bucket = match tools.get_mut(tool) {
            Some(bucket) => bucket,
            None => tools.entry(tool.into()).or_insert(Bucket { tokens: f64::from(rate.burst), at: now }),
        };
        bucket.refill(rate, now);
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        let per_second = f64::from(rate.per_minute) / 60.0;
        Err(QuotaExceeded::Rate {
            tool: tool.into(),
            per_minute: rate.per_minute,
            retry_in: Duration::from_secs_f64((1.0 - bucket.tokens) / per_second),
        })
    }

    /// What the tenant uses now.
    pub fn usage(&self) -> Usage {
        let cpu_ms_in_window = self.metered.load(Ordering::Relaxed).then(|| {
            let mut window = lock(&self.cpu);
            if let Some(quota) = window.quota {
                window.roll(quota, Instant::now());
            }
            u64::try_from(window.used.as_millis()).unwrap_or(u64::MAX)
        });
        Usage {
            calls_running: self.calls.count.load(Ordering::Relaxed),
            instances_live: self.instances.count.load(Ordering::Relaxed),
            cpu_ms_in_window,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An account whose quotas refuse at once.
    fn account(quotas: Quotas) -> Arc<Account> {
        Account::new("acme", Quotas { wait: Duration::ZERO, ..quotas })
    }

    #[tokio::test]
    async fn holds_count_up_to_the_quota_and_free_on_drop() {
        let account = account(Quotas { concurrent_calls: Some(2), instances: Some(1), ..Quotas::default() });
        let (a, b) = (account.call().await.unwrap(), account.call().await.unwrap());
        let refused = account.call().await.err().unwrap().to_string();
        assert!(refused.contains("tenant acme") && refused.contains("2 concurrent calls"), "{refused}");
        drop(a);
        let _c = account.call().await.unwrap();
        let _i = account.instance().await.unwrap();
        assert!(matches!(account.instance().await, Err(QuotaExceeded::Instances { limit: 1, .. })));
        assert_eq!(account.usage().calls_running, 2);
        drop(b);
        assert_eq!(account.usage().calls_running, 1);
    }

    #[tokio::test]
    async fn a_call_waits_for_a_slot_and_a_refusal_comes_only_when_the_wait_ends() {
        let wait = Duration::from_millis(100);
        let account = Account::new("acme", Quotas { concurrent_calls: Some(1), wait, ..Quotas::default() });
        let running = account.call().await.unwrap();
        let started = Instant::now();
        assert!(matches!(account.call().await, Err(QuotaExceeded::Calls { limit: 1, .. })));
        assert!(started.elapsed() >= wait, "refused when the wait ended, not sooner");

        // A slot freed during the wait goes to the waiting call.
        let waiting = {
            let account = account.clone();
            tokio::spawn(async move { account.call().await.is_ok() })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(running);
        assert!(waiting.await.unwrap(), "admitted once the slot was free");

        // A reload that raises the quota lets a waiting call in too.
        let (_held, other) = (account.call().await.unwrap(), account.clone());
        let waiting = tokio::spawn(async move { other.call().await.is_ok() });
        tokio::time::sleep(Duration::from_millis(20)).await;
        account.set(Quotas { concurrent_calls: Some(2), wait, ..Quotas::default() });
        drop(account.call().await);
        assert!(waiting.await.unwrap());
    }

    #[tokio::test]
    async fn cpu_is_refused_once_the_window_is_spent_and_resets_after_it() {
        let window = Duration::from_millis(200);
        let account =
            account(Quotas { cpu: Some(CpuQuota { budget: Duration::from_millis(10), window }), ..Quotas::default() });
        assert!(account.check_cpu().await.is_ok());
        assert!(account.charge(Duration::from_millis(6)));
        assert!(!account.charge(Duration::from_millis(6)));
        let refused = account.check_cpu().await.unwrap_err();
        let QuotaExceeded::Cpu { resets_in, .. } = &refused else { panic!("{refused}") };
        assert!(*resets_in <= window, "{refused}");
        assert!(refused.to_string().contains("CPU quota of 10ms per 200ms; it resets in"), "{refused}");
        std::thread::sleep(window);
        assert!(account.check_cpu().await.is_ok());
    }

    #[tokio::test]
    async fn a_call_waits_for_a_cpu_window_that_resets_within_the_wait() {
        let window = Duration::from_millis(50);
        let quotas = Quotas {
            cpu: Some(CpuQuota { budget: Duration::from_millis(10), window }),
            wait: Duration::from_millis(500),
            ..Quotas::default()
        };
        let account = Account::new("acme", quotas);
        assert!(!account.charge(Duration::from_millis(20)));
        let started = Instant::now();
        account.check_cpu().await.expect("the window reset during the wait");
        assert!(started.elapsed() < Duration::from_millis(400), "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn each_principal_has_its_own_bucket_per_tool() {
        let account = account(Quotas { rate: Some(RateQuota { per_minute: 60, burst: 2 }), ..Quotas::default() });
        assert!(account.take("alice", "add").await.is_ok() && account.take("alice", "add").await.is_ok());
        let refused = account.take("alice", "add").await.unwrap_err();
        let QuotaExceeded::Rate { retry_in, .. } = &refused else { panic!("{refused}") };
        assert!(*retry_in <= Duration::from_secs(1), "{refused}");
        assert!(refused.to_string().contains("60 calls per minute to tool add"), "{refused}");
        assert!(account.take("alice", "mul").await.is_ok());
        assert!(account.take("bob", "add").await.is_ok());
        account.set(Quotas { wait: Duration::ZERO, ..Quotas::default() });
        assert!(account.take("alice", "add").await.is_ok());
    }

    #[tokio::test]
    async fn a_token_due_within_the_wait_is_waited_for_and_one_due_later_is_not() {
        let wait = Duration::from_millis(200);
        let rate = |per_minute| Quotas { rate: Some(RateQuota { per_minute, burst: 1 }), wait, ..Quotas::default() };
        // A token every 50 ms.
        let account = Account::new("acme", rate(1200));
        account.take("alice", "add").await.unwrap();
        let started = Instant::now();
        account.take("alice", "add").await.expect("the next token came within the wait");
        assert!(started.elapsed() >= Duration::from_millis(40), "{:?}", started.elapsed());

        let slow = Account::new("acme", rate(1));
        slow.take("alice", "add").await.unwrap();
        let started = Instant::now();
        let refused = slow.take("alice", "add").await.unwrap_err();
        assert!(started.elapsed() >= wait, "{refused} after {:?}", started.elapsed());
    }

    #[tokio::test]
    async fn idle_principals_are_forgotten() {
        let account =
            account(Quotas { rate: Some(RateQuota { per_minute: 6_000_000, burst: 1 }), ..Quotas::default() });
        for n in 0..SWEEP_AT * 2 {
            account.take(&format!("p{n}"), "add").await.unwrap();
            std::thread::sleep(Duration::from_micros(20));
        }
        assert!(lock(&account.buckets).len() <= SWEEP_AT);
    }
}
