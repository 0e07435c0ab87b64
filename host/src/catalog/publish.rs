//! How catalogs travel from whoever builds them (the loader) to whoever serves them (the MCP
//! layer), without either knowing the other: the builder publishes each new catalog on a
//! watch channel, and servers ask for a plugin's lists to be read again through a queue.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, watch};

use super::Catalog;
use crate::runtime::ListKind;

/// The publishing end: one per catalog being kept (per tenant, once there are tenants).
pub struct Publisher {
    catalogs: watch::Sender<Arc<Catalog>>,
    relists: Arc<Relists>,
}

impl Publisher {
    /// Publish `first` as the catalog in force.
    pub fn new(first: Catalog) -> Publisher {
        let (catalogs, _) = watch::channel(Arc::new(first));
        Publisher { catalogs, relists: Arc::default() }
    }

    /// The catalog in force.
    pub fn current(&self) -> Arc<Catalog> {
        self.catalogs.borrow().clone()
    }

    /// Serve `catalog` from now on; requests already running keep the one they started on.
    pub fn publish(&self, catalog: Catalog) {
        self.catalogs.send_replace(Arc::new(catalog));
    }

    /// A subscription for a server: the catalog in force and every one that follows.
    pub fn subscribe(&self) -> Published {
        Published { catalogs: self.catalogs.subscribe(), relists: self.relists.clone() }
    }

    /// Plugins whose lists servers asked to be read again.
    pub fn relists(&self) -> &Relists {
        &self.relists
    }
}

/// The serving end: the catalog in force, and a way to ask for lists to be read again.
#[derive(Clone)]
pub struct Published {
    catalogs: watch::Receiver<Arc<Catalog>>,
    relists: Arc<Relists>,
}

impl Published {
    /// The catalog in force. A request keeps the one it started with.
    pub fn current(&self) -> Arc<Catalog> {
        self.catalogs.borrow().clone()
    }

    /// Wait for the next catalog and say which lists differ from `seen` (the last one this
    /// subscriber looked at). `None` once the publisher is gone.
    pub async fn next(&mut self, seen: &Catalog) -> Option<(Arc<Catalog>, Vec<ListKind>)> {
        self.catalogs.changed().await.ok()?;
        let new = self.catalogs.borrow_and_update().clone();
        let changed = changed_lists(seen, &new);
        Some((new, changed))
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
}
