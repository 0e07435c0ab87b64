//! Where plugins come from, and keeping the served set in step with them: the initial load
//! and hot swap.
//!
//! A reload reads every source again. A plugin whose bytes did not change is reused as it is;
//! a new or changed one is compiled off the reactor (or taken from the compile cache),
//! linked and validated; the whole set must then build a catalog. Only then is the catalog
//! swapped in, atomically: calls already running keep the version they started on. A plugin
//! that fails to load or validate never replaces a working version.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::catalog::Catalog;
use crate::mcp::Shared;
use crate::runtime::{ListKind, Plugin, PluginRuntime, digest};

/// What to serve: the bundled examples, or plugin directories and files.
#[derive(Debug, Clone)]
pub enum Sources {
    Bundled,
    Paths { dirs: Vec<PathBuf>, files: Vec<PathBuf> },
}

impl Sources {
    /// Every plugin file, in a stable order (each directory sorted, then the files).
    fn files(&self) -> Vec<PathBuf> {
        let Sources::Paths { dirs, files } = self else { return Vec::new() };
        let mut all = Vec::new();
        for dir in dirs {
            match std::fs::read_dir(dir) {
                Ok(entries) => {
                    let mut found: Vec<PathBuf> = entries
                        .filter_map(|e| e.ok().map(|e| e.path()))
                        .filter(|p| p.extension().is_some_and(|e| e == "wasm") && p.is_file())
                        .collect();
                    found.sort();
                    all.extend(found);
                }
                Err(e) => tracing::error!("cannot read plugin directory {}: {e}", dir.display()),
            }
        }
        all.extend(files.iter().cloned());
        all
    }

    /// The directories to watch for changes.
    fn watched(&self) -> Vec<PathBuf> {
        let Sources::Paths { dirs, files } = self else { return Vec::new() };
        let mut watched: Vec<PathBuf> = dirs.clone();
        watched.extend(files.iter().filter_map(|f| f.parent().map(Path::to_path_buf)));
        watched.sort();
        watched.dedup();
        watched
    }
}

fn plugin_name(path: &Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| path.display().to_string())
}

/// A plugin's name and its bytes, or why they could not be read.
type Candidate = (String, Result<Arc<[u8]>, String>);

/// Build the catalog for `sources`, reusing `previous` plugins whose bytes are unchanged and
/// keeping a previous version wherever its replacement fails.
pub async fn load(runtime: &PluginRuntime, sources: &Sources, previous: &[Arc<Plugin>]) -> Catalog {
    let candidates: Vec<Candidate> = match sources {
        Sources::Bundled => {
            crate::bundled::BUNDLED.iter().map(|&(name, bytes)| (name.to_owned(), Ok(Arc::from(bytes)))).collect()
        }
        Sources::Paths { .. } => sources
            .files()
            .into_iter()
            .map(|path| {
                let bytes =
                    std::fs::read(&path).map(Arc::from).map_err(|e| format!("cannot read {}: {e}", path.display()));
                (plugin_name(&path), bytes)
            })
            .collect(),
    };
    let mut loaded: Vec<Arc<Plugin>> = Vec::new();
    let mut catalog = Catalog::default();
    for (name, bytes) in candidates {
        let earlier = previous.iter().find(|p| p.name() == name);
        let fresh = match bytes {
            Ok(bytes) => match earlier.filter(|p| p.digest() == digest(&bytes)) {
                Some(same) => Ok(same.clone()),
                None => runtime.load(&name, bytes).await.map(Arc::new).map_err(|e| e.to_string()),
            },
            Err(e) => Err(e),
        };
        let mut accepted = None;
        for plugin in [fresh.as_ref().ok(), earlier].into_iter().flatten() {
            let mut candidate = loaded.clone();
            candidate.push(plugin.clone());
            match Catalog::build(candidate) {
                Ok(next) => {
                    catalog = next;
                    accepted = Some(plugin.clone());
                    break;
                }
                Err(e) => tracing::error!("plugin {name} (sha256 {}) not served: {e}", &plugin.digest()[..12]),
            }
        }
        match (&fresh, &accepted) {
            (Err(e), Some(kept)) => {
                tracing::error!(
                    "plugin {name}: {e}; still serving the previous version (sha256 {})",
                    &kept.digest()[..12]
                )
            }
            (Err(e), None) => tracing::error!("plugin not loaded: {e}"),
            (Ok(new), Some(kept)) if Arc::ptr_eq(new, kept) && earlier.is_none_or(|e| !Arc::ptr_eq(e, new)) => {
                let m = new.manifest();
                tracing::info!(
                    "loaded plugin {name} (sha256 {}): {} tools, {} resources, {} templates, {} prompts",
                    &new.digest()[..12],
                    m.tools.len(),
                    m.resources.len(),
                    m.templates.len(),
                    m.prompts.len()
                );
            }
            _ => {}
        }
        loaded.extend(accepted);
    }
    for gone in previous.iter().filter(|p| !loaded.iter().any(|l| l.name() == p.name())) {
        tracing::info!("plugin {} is no longer served", gone.name());
    }
    catalog
}

/// Which lists differ between two catalogs: clients are told only about those.
fn changed_lists(old: &Catalog, new: &Catalog) -> Vec<ListKind> {
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

/// Read the sources again and swap the new catalog in, telling clients what changed.
pub async fn reload(runtime: &PluginRuntime, sources: &Sources, shared: &Shared) {
    let old = shared.catalog();
    let new = load(runtime, sources, old.plugins()).await;
    let changed = changed_lists(&old, &new);
    // Swap even when no list changed: a new version may behave differently behind the same
    // definitions, and new calls must get it.
    shared.swap_catalog(new);
    for kind in changed {
        shared.list_changed(kind).await;
    }
}

/// Watch the plugin directories and reload on every change, until `stop` fires.
pub fn watch(
    runtime: PluginRuntime,
    sources: Sources,
    shared: Arc<Shared>,
    stop: tokio_util::sync::CancellationToken,
) -> notify::Result<()> {
    use notify::Watcher;
    let watched = sources.watched();
    if watched.is_empty() {
        return Ok(());
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|e| !e.kind.is_access()) {
            let _ = tx.send(());
        }
    })?;
    for dir in &watched {
        watcher.watch(dir, notify::RecursiveMode::NonRecursive)?;
        tracing::info!("watching {} for plugin changes", dir.display());
    }
    tokio::spawn(async move {
        let _watcher = watcher;
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                event = rx.recv() => if event.is_none() { return },
            }
            // A copy or build writes a file in several steps: wait for quiet, then reload once.
            while tokio::time::timeout(Duration::from_millis(50), rx.recv()).await.is_ok_and(|e| e.is_some()) {}
            reload(&runtime, &sources, &shared).await;
        }
    });
    Ok(())
}
