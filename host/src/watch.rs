//! Watching plugin directories for changes.
//!
//! A directory is watched together with the directory it sits in, so that one removed and
//! made again, or swapped for another by a rename (how deployments flip a release), is
//! watched anew rather than left watched through an inode that is gone. Events in those
//! parents concern the plugin directories only; a sibling's churn is not a change.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use notify::Watcher;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

/// What a watcher's event says of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Renamed or removed: whole, so nothing more is coming for it (how deploys and editors
    /// put a file in place).
    Whole,
    /// Created or written: a copy or a build writes a file in several steps.
    Written,
}

impl Change {
    pub(crate) fn of(kind: &notify::EventKind) -> Change {
        use notify::EventKind;
        use notify::event::ModifyKind;
        match kind {
            EventKind::Modify(ModifyKind::Name(_)) | EventKind::Remove(_) => Change::Whole,
            _ => Change::Written,
        }
    }

    /// How long the events must stop after this one before a reload.
    fn quiet(self) -> Duration {
        match self {
            // Long enough to take a few files renamed one after another in one reload.
            Change::Whole => Duration::from_millis(5),
            Change::Written => Duration::from_millis(50),
        }
    }
}

/// Wait until a watcher's events stop, `last` being the latest: one reload after the last
/// step of a change is enough, and a file renamed into place needs no more than a moment.
pub(crate) async fn settle(events: &mut UnboundedReceiver<Change>, mut last: Change) {
    while let Ok(Some(change)) = tokio::time::timeout(last.quiet(), events.recv()).await {
        last = change;
    }
}

/// A set of directories watched for what happens in them and to them.
pub(crate) struct DirWatch {
    watcher: notify::RecommendedWatcher,
    /// The directories whose contents matter, absolute.
    targets: Arc<RwLock<Vec<PathBuf>>>,
    /// A target itself was created, removed or renamed since the last [`DirWatch::renew`].
    moved: Arc<AtomicBool>,
    /// What is watched now: the targets that exist, and their parents.
    watching: Vec<PathBuf>,
}

impl DirWatch {
    /// A watch that sends what it sees to `changes`; it watches nothing until [`DirWatch::set`].
    pub(crate) fn new(changes: UnboundedSender<Change>) -> notify::Result<DirWatch> {
        let targets = Arc::new(RwLock::new(Vec::<PathBuf>::new()));
        let moved = Arc::new(AtomicBool::new(false));
        let (seen, flagged) = (targets.clone(), moved.clone());
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let Ok(event) = event else { return };
            if event.kind.is_access() {
                return;
            }
            let targets = seen.read().unwrap_or_else(|e| e.into_inner());
            let itself = event.need_rescan() || event.paths.iter().any(|p| targets.contains(p));
            let inside = event.paths.iter().any(|p| p.parent().is_some_and(|dir| targets.iter().any(|t| t == dir)));
            if itself {
                flagged.store(true, Ordering::Release);
            }
            if itself || inside {
                let _ = changes.send(Change::of(&event.kind));
            }
        })?;
        Ok(DirWatch { watcher, targets, moved, watching: Vec::new() })
    }

    /// Watch `dirs` (perhaps relative or repeated) and their parents, and nothing else. A
    /// directory that does not exist is watched for in its parent.
    pub(crate) fn set(&mut self, dirs: &[PathBuf]) {
        let mut targets: Vec<PathBuf> = dirs.iter().filter_map(|d| std::path::absolute(d).ok()).collect();
        targets.sort();
        targets.dedup();
        let mut wanted: Vec<PathBuf> = targets.iter().filter_map(|t| t.parent().map(Path::to_path_buf)).collect();
        wanted.extend(targets.iter().cloned());
        wanted.sort();
        wanted.dedup();
        for dir in self.watching.iter().filter(|d| !wanted.contains(d)) {
            let _ = self.watcher.unwatch(dir);
        }
        let mut watching = Vec::new();
        for dir in wanted {
            if self.watching.contains(&dir) {
                watching.push(dir);
                continue;
            }
            match self.watcher.watch(&dir, notify::RecursiveMode::NonRecursive) {
                Ok(()) => {
                    if targets.contains(&dir) {
                        tracing::info!("watching {} for plugin changes", dir.display());
                    }
                    watching.push(dir);
                }
                Err(e) if targets.contains(&dir) => {
                    tracing::warn!("cannot watch {} yet ({e}); it is watched for in its parent", dir.display())
                }
                Err(e) => tracing::debug!("cannot watch {}: {e}", dir.display()),
            }
        }
        self.watching = watching;
        *self.targets.write().unwrap_or_else(|e| e.into_inner()) = targets;
    }

    /// If a target was created, removed or renamed, watch the targets afresh: the old watch
    /// followed the inode that was there.
    pub(crate) fn renew(&mut self) {
        if !self.moved.swap(false, Ordering::AcqRel) {
            return;
        }
        let targets = self.targets.read().unwrap_or_else(|e| e.into_inner()).clone();
        for target in &targets {
            let _ = self.watcher.unwatch(target);
        }
        self.watching.retain(|d| !targets.contains(d));
        self.set(&targets);
    }
}

#[cfg(test)]
mod tests {
    use notify::EventKind;
    use notify::event::{CreateKind, DataChange, ModifyKind, RemoveKind, RenameMode};

    use super::*;

    #[test]
    fn renames_and_removals_are_whole_writes_are_not() {
        let whole = [
            EventKind::Modify(ModifyKind::Name(RenameMode::To)),
            EventKind::Modify(ModifyKind::Name(RenameMode::Both)),
            EventKind::Modify(ModifyKind::Name(RenameMode::From)),
            EventKind::Remove(RemoveKind::File),
        ];
        assert!(whole.iter().all(|kind| Change::of(kind) == Change::Whole));
        let written = [
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Data(DataChange::Any)),
            EventKind::Modify(ModifyKind::Any),
            EventKind::Any,
        ];
        assert!(written.iter().all(|kind| Change::of(kind) == Change::Written));
    }

    /// A write after a rename means the file is being written again: the reload waits for
    /// those writes to stop as long as for any write.
    #[tokio::test]
    async fn a_write_after_a_rename_is_waited_for_like_any_write() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let started = std::time::Instant::now();
        tx.send(Change::Written).unwrap();
        settle(&mut rx, Change::Whole).await;
        assert!(started.elapsed() >= Change::Written.quiet(), "settled after {:?}", started.elapsed());
    }

    /// Wait for a change, then for the events to stop, and renew the watch as the loader does.
    async fn next(watch: &mut DirWatch, rx: &mut UnboundedReceiver<Change>) -> bool {
        let Ok(Some(change)) = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await else { return false };
        settle(rx, change).await;
        watch.renew();
        true
    }

    #[tokio::test]
    async fn a_directory_made_again_or_swapped_in_is_watched_anew_and_siblings_are_not_changes() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("plugins");
        std::fs::create_dir(&dir).unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut watch = DirWatch::new(tx).unwrap();
        watch.set(std::slice::from_ref(&dir));
        std::fs::write(dir.join("a.wasm"), b"a").unwrap();
        assert!(next(&mut watch, &mut rx).await, "a file written");
        std::fs::write(root.path().join("sibling"), b"x").unwrap();
        assert!(tokio::time::timeout(Duration::from_millis(300), rx.recv()).await.is_err(), "a sibling");
        // Removed and made again.
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(next(&mut watch, &mut rx).await, "the removal");
        std::fs::create_dir(&dir).unwrap();
        assert!(next(&mut watch, &mut rx).await, "the directory made again");
        std::fs::write(dir.join("b.wasm"), b"b").unwrap();
        assert!(next(&mut watch, &mut rx).await, "a file in the new directory");
        // Swapped for another by a rename.
        let release = root.path().join("release");
        std::fs::create_dir(&release).unwrap();
        std::fs::rename(&dir, root.path().join("previous")).unwrap();
        std::fs::rename(&release, &dir).unwrap();
        assert!(next(&mut watch, &mut rx).await, "the swap");
        while tokio::time::timeout(Duration::from_millis(200), rx.recv()).await.is_ok() {}
        watch.renew();
        std::fs::write(dir.join("c.wasm"), b"c").unwrap();
        assert!(next(&mut watch, &mut rx).await, "a file in the swapped-in directory");
    }
}
