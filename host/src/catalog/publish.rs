//! How catalogs travel from whoever builds them (the loader) to whoever serves them (the MCP
//! layer), without either knowing the other: the builder publishes each new catalog, a watch
//! channel tells subscribers a new one is in force, and servers ask for a plugin's lists to
//! be read again through a queue.
//!
//! The catalog in force is kept in an `ArcSwap`, not in the watch channel: every request
//! looks it up, on every worker, and a watch channel's borrow takes a lock whose cache line
//! then moves between the workers' CPUs.
//!
//! A publisher may start empty, with its first load still under way: catalogs are then
//! published as plugins join, and servers can wait for the load to end before answering
//! what a missing plugin would get wrong.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;

use tokio::sync::{Notify, watch};

use super::Catalog;
use crate::runtime::ListKind;

/// The publishing end: one per catalog being kept (per tenant, once there are tenants).
pub struct Publisher {
    /// The catalog in force.
    live: Arc<ArcSwap<Catalog>>,
    /// Fires when another catalog is put in force.
    changes: watch::Sender<()>,
    relists: Arc<Relists>,
    /// Whether the first load is over.
    loaded: watch::Sender<bool>,
    /// The same, for reading without a lock.
    done: Arc<AtomicBool>,
}

impl Publisher {
    /// Publish `first` as the catalog in force.
    pub fn new(first: Catalog) -> Publisher {
        Publisher {
            live: Arc::new(ArcSwap::from_pointee(first)),
            changes: watch::Sender::new(()),
            relists: Arc::default(),
            loaded: watch::Sender::new(true),
            done: Arc::new(AtomicBool::new(true)),
        }
    }

    /// Publish an empty catalog while the first load is under way; [`Publisher::loaded`]
    /// says when it is over.
    pub fn loading() -> Publisher {
        Publisher {
            loaded: watch::Sender::new(false),
            done: Arc::new(AtomicBool::new(false)),
            ..Publisher::new(Catalog::default())
        }
    }

    /// Whether the first load is over.
    pub fn is_loaded(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// The first load is over.
    pub fn loaded(&self) {
        self.done.store(true, Ordering::Release);
        self.loaded.send_replace(true);
    }

    /// The catalog in force.
    pub fn current(&self) -> Arc<Catalog> {
        self.live.load_full()
    }

    /// Serve `catalog` from now on; requests already running keep the one they started on.
    /// It is in force before subscribers hear of it.
    pub fn publish(&self, catalog: Catalog) {
        self.live.store(Arc::new(catalog));
        self.changes.send_replace(());
    }

    /// A subscription for a server: the catalog in force and every one that follows.
    pub fn subscribe(&self) -> Published {
        Published {
            live: self.live.clone(),
            changes: self.changes.subscribe(),
            relists: self.relists.clone(),
            loaded: self.loaded.subscribe(),
            done: self.done.clone(),
        }
    }

    /// Plugins whose lists servers asked to be read again.
    pub fn relists(&self) -> &Relists {
        &self.relists
    }
}

/// The serving end: the catalog in force, and a way to ask for lists to be read again.
#[derive(Clone)]
pub struct Published {
    live: Arc<ArcSwap<Catalog>>,
    changes: watch::Receiver<()>,
    relists: Arc<Relists>,
    loaded: watch::Receiver<bool>,
    done: Arc<AtomicBool>,
}

impl Published {
    /// The catalog in force. A request keeps the one it started with.
    pub fn current(&self) -> Arc<Catalog> {
        self.live.load_full()
    }

    /// Look something up in the catalog in force, without holding on to it.
    pub fn with<R>(&self, look: impl FnOnce(&Catalog) -> R) -> R {
        look(&self.live.load())
    }

    /// Wait for the next catalog and say which lists differ from `seen` (the last one this
    /// subscriber looked at). `None` once the publisher is gone.
    pub async fn next(&mut self, seen: &Catalog) -> Option<(Arc<Catalog>, Vec<ListKind>)> {
        self.changes.changed().await.ok()?;
        Some(self.since(seen))
    }

    /// The catalog in force and the lists that differ from `seen`, at once; what was
    /// published until now counts as seen by [`Published::next`].
    pub fn since(&mut self, seen: &Catalog) -> (Arc<Catalog>, Vec<ListKind>) {
        self.changes.mark_unchanged();
        let new = self.current();
        let changed = changed_lists(seen, &new);
        (new, changed)
    }

    /// Whether the publisher's first load is over.
    pub fn is_loaded(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Wait for the publisher's first load to end, but no longer than `within`.
    pub async fn first_load(&self, within: Duration) {
        if self.is_loaded() {
            return;
        }
        let mut loaded = self.loaded.clone();
        // A publisher gone before it loaded has nothing more to wait for.
        let _ = tokio::time::timeout(within, loaded.wait_for(|done| *done)).await;
    }

    /// Ask for `plugin`'s lists to be read again (it said one changed).
    pub fn relist(&self, plugin: &str) {
        self.relists.request(plugin);
    }
}

/// Plugins that said one of their lists changed, waiting for whoever builds catalogs to read
/// their lists again. A set, so a storm of requests is one relist.
#[derive(Default)]
pub struct Relists {
    pending: Mutex<BTreeSet<String>>,
    ready: Notify,
}

impl Relists {
    fn request(&self, plugin: &str) {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).insert(plugin.to_owned());
        self.ready.notify_one();
    }

    /// Wait for requests, then take every plugin named since the last call.
    pub async fn next(&self) -> BTreeSet<String> {
        loop {
            let taken = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
            if !taken.is_empty() {
                return taken;
            }
            self.ready.notified().await;
        }
    }
}

/// The lists that differ between two catalogs.
pub fn changed_lists(old: &Catalog, new: &Catalog) -> Vec<ListKind> {
    // The WIT records have no equality; their debug form covers every field.
    let listing = |catalog: &Catalog, kind: ListKind| match kind {
        ListKind::Tools => format!("{:?}", catalog.tools().iter().map(|t| &t.tool).collect::<Vec<_>>()),
        ListKind::Resources => format!(
            "{:?} {:?}",
            catalog.resources().iter().map(|r| &r.resource).collect::<Vec<_>>(),
            catalog.templates().iter().map(|t| &t.template).collect::<Vec<_>>()
        ),
        ListKind::Prompts => format!("{:?}", catalog.prompts().iter().map(|p| &p.prompt).collect::<Vec<_>>()),
    };
    [ListKind::Tools, ListKind::Resources, ListKind::Prompts]
        .into_iter()
        .filter(|&kind| listing(old, kind) != listing(new, kind))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn subscribers_see_each_new_catalog_and_relist_requests_coalesce() {
        let publisher = Publisher::new(Catalog::default());
        let mut published = publisher.subscribe();
        let seen = published.current();
        publisher.publish(Catalog::default());
        let (next, changed) = published.next(&seen).await.expect("a new catalog");
        assert!(!Arc::ptr_eq(&seen, &next));
        assert!(changed.is_empty(), "equal lists are no change");
        for _ in 0..100 {
            published.relist("a");
        }
        published.relist("b");
        let taken = publisher.relists().next().await;
        assert_eq!(taken.into_iter().collect::<Vec<_>>(), ["a", "b"]);
        drop(publisher);
        assert!(published.next(&next).await.is_none());
    }

    #[tokio::test]
    async fn a_server_can_wait_for_the_first_load_and_no_longer_than_it_says() {
        let publisher = Publisher::loading();
        let published = publisher.subscribe();
        let started = tokio::time::Instant::now();
        published.first_load(Duration::from_millis(50)).await;
        assert!(started.elapsed() >= Duration::from_millis(50), "the load is not over");
        let waiting = tokio::spawn(async move { published.first_load(Duration::from_secs(60)).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!publisher.is_loaded());
        publisher.loaded();
        tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("woken when the load ended").unwrap();
        Publisher::new(Catalog::default()).subscribe().first_load(Duration::from_secs(60)).await;
    }
}
