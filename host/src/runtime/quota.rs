//! A tenant's account: what its plugins and callers use right now, held to the tenant's
//! [`Quotas`]. Every plugin of a tenant charges the same account, and versions of a plugin
//! that overlap during a hot swap charge it too, so a reload never resets a quota.
//!
//! The account knows tenants, principals and tool names only as strings: it serves any
//! front end, and imports nothing from MCP.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use thiserror::Error;

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

/// A count of something in use, released when the hold drops.
pub struct Held<'a>(&'a AtomicU32);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Take one of `counter`, unless `limit` are already taken.
fn hold(counter: &AtomicU32, limit: Option<u32>) -> Result<Held<'_>, u32> {
    match limit {
        None => {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        Some(limit) => {
            counter
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < limit).then_some(n + 1))
                .map_err(|_| limit)?;
        }
    }
    Ok(Held(counter))
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
    calls: AtomicU32,
    instances: AtomicU32,
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
            calls: AtomicU32::new(0),
            instances: AtomicU32::new(0),
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

    /// Count a request that runs plugin code, for as long as the hold lives.
    pub fn call(&self) -> Result<Held<'_>, QuotaExceeded> {
        hold(&self.calls, self.quotas().concurrent_calls)
            .map_err(|limit| QuotaExceeded::Calls { tenant: self.tenant.clone(), limit })
    }

    /// Count a plugin instance, for as long as the hold lives.
    pub fn instance(&self) -> Result<Held<'_>, QuotaExceeded> {
        hold(&self.instances, self.quotas().instances)
            .map_err(|limit| QuotaExceeded::Instances { tenant: self.tenant.clone(), limit })
    }

    /// Refuse a call when the tenant's CPU quota for this window is used up.
    pub fn check_cpu(&self) -> Result<(), QuotaExceeded> {
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

    /// Take one call of `principal` to `tool` from its token bucket.
    pub fn take(&self, principal: &str, tool: &str) -> Result<(), QuotaExceeded> {
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
            calls_running: self.calls.load(Ordering::Relaxed),
            instances_live: self.instances.load(Ordering::Relaxed),
            cpu_ms_in_window,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(quotas: Quotas) -> Arc<Account> {
        Account::new("acme", quotas)
    }

    #[test]
    fn holds_count_up_to_the_quota_and_free_on_drop() {
        let account = account(Quotas { concurrent_calls: Some(2), instances: Some(1), ..Quotas::default() });
        let (a, b) = (account.call().unwrap(), account.call().unwrap());
        let refused = account.call().err().unwrap().to_string();
        assert!(refused.contains("tenant acme") && refused.contains("2 concurrent calls"), "{refused}");
        drop(a);
        let _c = account.call().unwrap();
        let _i = account.instance().unwrap();
        assert!(matches!(account.instance(), Err(QuotaExceeded::Instances { limit: 1, .. })));
        assert_eq!(account.usage().calls_running, 2);
        drop(b);
        assert_eq!(account.usage().calls_running, 1);
    }

    #[test]
    fn cpu_is_refused_once_the_window_is_spent_and_resets_after_it() {
        let window = Duration::from_millis(200);
        let account =
            account(Quotas { cpu: Some(CpuQuota { budget: Duration::from_millis(10), window }), ..Quotas::default() });
        assert!(account.check_cpu().is_ok());
        assert!(account.charge(Duration::from_millis(6)));
        assert!(!account.charge(Duration::from_millis(6)));
        let refused = account.check_cpu().unwrap_err();
        let QuotaExceeded::Cpu { resets_in, .. } = &refused else { panic!("{refused}") };
        assert!(*resets_in <= window, "{refused}");
        assert!(refused.to_string().contains("CPU quota of 10ms per 200ms; it resets in"), "{refused}");
        std::thread::sleep(window);
        assert!(account.check_cpu().is_ok());
    }

    #[test]
    fn each_principal_has_its_own_bucket_per_tool() {
        let account = account(Quotas { rate: Some(RateQuota { per_minute: 60, burst: 2 }), ..Quotas::default() });
        assert!(account.take("alice", "add").is_ok() && account.take("alice", "add").is_ok());
        let refused = account.take("alice", "add").unwrap_err();
        let QuotaExceeded::Rate { retry_in, .. } = &refused else { panic!("{refused}") };
        assert!(*retry_in <= Duration::from_secs(1), "{refused}");
        assert!(refused.to_string().contains("60 calls per minute to tool add"), "{refused}");
        assert!(account.take("alice", "mul").is_ok());
        assert!(account.take("bob", "add").is_ok());
        account.set(Quotas::default());
        assert!(account.take("alice", "add").is_ok());
    }

    #[test]
    fn idle_principals_are_forgotten() {
        let account =
            account(Quotas { rate: Some(RateQuota { per_minute: 6_000_000, burst: 1 }), ..Quotas::default() });
        for n in 0..SWEEP_AT * 2 {
            account.take(&format!("p{n}"), "add").unwrap();
            std::thread::sleep(Duration::from_micros(20));
        }
        assert!(lock(&account.buckets).len() <= SWEEP_AT);
    }
}
