//! Who may hold the engine's instance slots. The engine has a fixed number of component
//! instances (`--max-instances`); every other pooled resource (core instances, memories,
//! tables, stacks) is sized for that many instances of the largest component the engine
//! accepts, so component instances are the only thing calls compete for.
//!
//! Each plugin keeps a *reserve* of instances no other plugin may use; the instances nobody
//! reserved are shared, first come first served. A plugin that runs as many calls as its own
//! concurrency allows, with components as large as the engine admits, still leaves every
//! neighbour its reserve. The ledger is per plugin name, so the versions of a plugin that
//! overlap during a hot swap share one reserve rather than reserving twice.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use super::error::CallError;

#[derive(Debug, Default)]
struct Account {
    /// Instances kept for this plugin.
    reserve: u32,
    /// Of those, in use now.
    in_use: u32,
    /// Live [`Reservation`]s (one per loaded version of the plugin).
    holders: u32,
}

#[derive(Debug)]
struct Ledger {
    total: u32,
    /// The sum of every account's reserve.
    reserved: u32,
    /// Shared instances in use now.
    shared_in_use: u32,
    /// Instances whose calls are over, about to be freed (see [`Lease::ending`]).
    ending: u32,
    /// Calls waiting for one of those.
    waiting: u32,
    accounts: HashMap<Arc<str>, Account>,
}

impl Ledger {
    fn shared(&self) -> u32 {
        self.total.saturating_sub(self.reserved)
    }

    /// Free `plugin`'s reserve once no version of it is loaded and none of its calls runs.
    fn close_if_idle(&mut self, plugin: &str) {
        if let Some(account) = self.accounts.get(plugin)
            && account.holders == 0
            && account.in_use == 0
        {
            self.reserved -= account.reserve;
            self.accounts.remove(plugin);
        }
    }
}

/// The engine's instances and who may use them. Cheap to clone.
#[derive(Debug, Clone)]
pub struct InstancePool {
    ledger: Arc<Mutex<Ledger>>,
    /// Woken whenever a lease ends.
    freed: Arc<Notify>,
}

/// Why a plugin's reserve cannot be kept.
#[derive(Debug)]
pub struct Overbooked {
    pub asked: u32,
    pub free: u32,
    pub total: u32,
}

impl std::fmt::Display for Overbooked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "it reserves {} plugin instances but only {} of the server's {} are not reserved by other plugins \
             (raise --max-instances, or lower this plugin's `reserve`)",
            self.asked, self.free, self.total
        )
    }
}

fn lock(ledger: &Mutex<Ledger>) -> MutexGuard<'_, Ledger> {
    // The ledger is a few counters updated in place: a panic elsewhere cannot leave it torn.
    ledger.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl InstancePool {
    pub fn new(total: u32) -> InstancePool {
        InstancePool {
            ledger: Arc::new(Mutex::new(Ledger {
                total,
                reserved: 0,
                shared_in_use: 0,
                ending: 0,
                waiting: 0,
                accounts: HashMap::new(),
            })),
            freed: Arc::default(),
        }
    }

    /// Keep `reserve` instances for `plugin` for as long as the returned reservation (or
    /// another one for the same plugin) lives. A later reservation for the same plugin sets
    /// its reserve anew.
    ///
    /// `plugin` is `tenant/name`. A tenant with a quota of `tenant_instances` can use no more
    /// at once, so its plugins reserve no more together: a plugin's reserve is cut to what its
    /// tenant's other plugins leave of the quota, and one tenant cannot keep the server's
    /// instances from the others.
    pub fn reserve(
        &self,
        plugin: &Arc<str>,
        reserve: u32,
        tenant_instances: Option<u32>,
    ) -> Result<Reservation, Overbooked> {
        let mut ledger = lock(&self.ledger);
        let reserve = match tenant_instances {
            Some(quota) => {
                let tenant = plugin.split_once('/').map_or("", |(tenant, _)| tenant);
                let others: u32 = ledger
                    .accounts
                    .iter()
                    .filter(|(key, _)| *key != plugin && key.split_once('/').is_some_and(|(t, _)| t == tenant))
                    .map(|(_, account)| account.reserve)
                    .sum();
                reserve.min(quota.saturating_sub(others))
            }
            None => reserve,
        };
        let current = ledger.accounts.get(plugin).map_or(0, |a| a.reserve);
        let free = ledger.total - (ledger.reserved - current);
        if reserve > free {
            return Err(Overbooked { asked: reserve, free, total: ledger.total });
        }
        ledger.reserved = ledger.reserved - current + reserve;
        let account = ledger.accounts.entry(plugin.clone()).or_default();
        account.reserve = reserve;
        account.holders += 1;
        Ok(Reservation { ledger: self.ledger.clone(), freed: self.freed.clone(), plugin: plugin.clone() })
    }
}

/// A plugin's claim on its reserve. Dropping the last one for a plugin frees the reserve.
#[derive(Debug)]
pub struct Reservation {
    ledger: Arc<Mutex<Ledger>>,
    freed: Arc<Notify>,
    plugin: Arc<str>,
}

impl Reservation {
    /// An instance for one call: one of the plugin's own if any is free, else a shared one.
    /// Hold the lease until the call's store is dropped.
    pub fn lease(&self) -> Result<Lease, CallError> {
        self.lease_from(&mut lock(&self.ledger))
    }

    fn lease_from(&self, ledger: &mut Ledger) -> Result<Lease, CallError> {
        let shared = ledger.shared();
        let shared_in_use = ledger.shared_in_use;
        let account = ledger.accounts.get_mut(&self.plugin).ok_or(CallError::Busy)?;
        let own = if account.in_use < account.reserve {
            account.in_use += 1;
            true
        } else if shared_in_use < shared {
            ledger.shared_in_use += 1;
            false
        } else {
            return Err(CallError::Busy);
        };
        Ok(Lease {
            ledger: self.ledger.clone(),
            freed: self.freed.clone(),
            plugin: self.plugin.clone(),
            own,
            ending: false,
        })
    }

    /// [`Reservation::lease`], but while some call's instance is being freed (its answer sent,
    /// its teardown due), wait for that rather than refuse: a client's next call must not
    /// find its plugin busy with the instance of the call it already has the answer to.
    pub async fn lease_when_free(&self) -> Result<Lease, CallError> {
        match self.lease() {
            Err(_) if lock(&self.ledger).ending > 0 => {}
            leased => return leased,
        }
        // Counted among the waiters until it returns or is dropped (a cancelled call).
        struct Waiting<'a>(&'a Mutex<Ledger>);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                lock(self.0).waiting -= 1;
            }
        }
        let mut waiting = None;
        loop {
            // Registered before the ledger is read, so an end after that is not missed.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut ledger = lock(&self.ledger);
                match self.lease_from(&mut ledger) {
                    Err(_) if ledger.ending > 0 => {
                        if waiting.is_none() {
                            ledger.waiting += 1;
                            waiting = Some(Waiting(&self.ledger));
                        }
                    }
                    leased => {
                        drop(ledger);
                        return leased;
                    }
                }
            }
            freed.await;
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut ledger = lock(&self.ledger);
        let Some(account) = ledger.accounts.get_mut(&self.plugin) else { return };
        account.holders -= 1;
        ledger.close_if_idle(&self.plugin);
    }
}

/// One instance, held by one call.
#[derive(Debug)]
pub struct Lease {
    ledger: Arc<Mutex<Ledger>>,
    freed: Arc<Notify>,
    plugin: Arc<str>,
    /// From the plugin's reserve rather than the shared instances.
    own: bool,
    /// Its call is over; only the instance's teardown holds it.
    ending: bool,
}

impl Lease {
    /// Say that the call is over and the lease ends as soon as its instance is freed: until
    /// then, calls that find no instance wait rather than being refused.
    pub fn ending(&mut self) {
        if !self.ending {
            self.ending = true;
            lock(&self.ledger).ending += 1;
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let wake = {
            let mut ledger = lock(&self.ledger);
            if self.ending {
                ledger.ending -= 1;
            }
            if !self.own {
                ledger.shared_in_use -= 1;
            } else if let Some(account) = ledger.accounts.get_mut(&self.plugin) {
                account.in_use -= 1;
                ledger.close_if_idle(&self.plugin);
            }
            ledger.waiting > 0
        };
        if wake {
            self.freed.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Arc<str> {
        s.into()
    }

    #[test]
    fn a_busy_plugin_leaves_its_neighbours_their_reserve() {
        let pool = InstancePool::new(4);
        let (a, b) = (name("a"), name("b"));
        let noisy = pool.reserve(&a, 1, None).unwrap();
        let quiet = pool.reserve(&b, 1, None).unwrap();
        let held: Vec<_> = std::iter::from_fn(|| noisy.lease().ok()).take(10).collect();
        assert_eq!(held.len(), 3, "its own instance and the two shared ones");
        let first = quiet.lease().expect("the neighbour's reserve is kept");
        assert!(quiet.lease().is_err(), "the shared instances are all in use");
        drop(held);
        let second = quiet.lease().expect("shared instances come back");
        drop((first, second));
    }

    #[tokio::test]
    async fn a_call_waits_for_an_ending_lease_and_is_refused_when_none_is_ending() {
        let pool = InstancePool::new(1);
        let a = name("a");
        let plugin = pool.reserve(&a, 0, None).unwrap();
        let mut first = plugin.lease().unwrap();
        let refused = plugin.lease_when_free().await;
        assert!(matches!(refused, Err(CallError::Busy)), "no lease is ending: refused at once");
        first.ending();
        let waiting = tokio::spawn(async move { plugin.lease_when_free().await.map(drop) });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "the only instance is still being freed");
        drop(first);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting).await.unwrap().unwrap().unwrap();
        let ledger = lock(&pool.ledger);
        assert_eq!((ledger.ending, ledger.waiting, ledger.shared_in_use), (0, 0, 0));
    }

    #[test]
    fn a_tenants_plugins_reserve_no_more_than_its_instance_quota() {
        let pool = InstancePool::new(8);
        let (one, two, three) = (name("acme/one"), name("acme/two"), name("acme/three"));
        let kept: Vec<_> = [&one, &two, &three].map(|p| pool.reserve(p, 2, Some(1)).unwrap()).into();
        let reserves: Vec<u32> = [&one, &two, &three].map(|p| lock(&pool.ledger).accounts[p].reserve).into();
        assert_eq!(reserves, [1, 0, 0], "acme may use one instance at once: it reserves one");
        // Another tenant's plugins still find the rest of the server.
        let other = pool.reserve(&name("globex/calc"), 7, Some(7)).expect("seven are free");
        // A new version of the first plugin keeps its place in the quota.
        assert!(pool.reserve(&one, 2, Some(1)).is_ok());
        assert_eq!(lock(&pool.ledger).accounts[&one].reserve, 1);
        drop((kept, other));
    }

    #[test]
    fn versions_of_a_plugin_share_one_reserve_that_ends_with_the_last() {
        let pool = InstancePool::new(4);
        let a = name("a");
        let old = pool.reserve(&a, 3, None).unwrap();
        let new = pool.reserve(&a, 3, None).expect("a new version does not reserve twice");
        assert!(pool.reserve(&name("b"), 2, None).is_err(), "only one instance is unreserved");
        let lease = old.lease().unwrap();
        drop(old);
        drop(new);
        assert!(pool.reserve(&name("b"), 2, None).is_err(), "a running call keeps the reserve");
        drop(lease);
        let overbooked = pool.reserve(&name("b"), 5, None).unwrap_err();
        assert_eq!((overbooked.free, overbooked.total), (4, 4));
        pool.reserve(&name("b"), 4, None).expect("the whole pool is free again");
    }
}
