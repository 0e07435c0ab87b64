//! Watching plugin directories and configuration files for changes.
//!
//! A directory is watched together with the directory it sits in, so that one removed and
//! made again, or swapped for another by a rename (how deployments flip a release), is
//! watched anew rather than left watched through an inode that is gone. Events in those
//! parents concern the plugin directories only; a sibling's churn is not a change.
//!
//! A file is watched through every symbolic link its path passes through: Kubernetes
//! updates a mounted ConfigMap by renaming a `..data` link beside the file, and a file
//! whose own name never changes must still be seen to change.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
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

/// The longest a change waits for its events to stop: a file written without pause (a log
/// beside the plugins, a plugin with a writable grant on its own directory) must not hold
/// off every swap for as long as it writes.
const SETTLE_AT_MOST: Duration = Duration::from_secs(1);

/// Wait until a watcher's events stop, `last` being the latest, or [`SETTLE_AT_MOST`] has
/// passed: one reload after the last step of a change is enough, and a file renamed into
/// place needs no more than a moment.
pub(crate) async fn settle(events: &mut UnboundedReceiver<Change>, mut last: Change) {
    let until = tokio::time::Instant::now() + SETTLE_AT_MOST;
    loop {
        let quiet = (tokio::time::Instant::now() + last.quiet()).min(until);
        match tokio::time::timeout_at(quiet, events.recv()).await {
            Ok(Some(change)) => last = change,
            Ok(None) | Err(_) => return,
        }
    }
}

/// Whether a file in a watched directory is one a reload reads: a component, a
/// `.capsule.toml` sidecar, or a `..data` link a Kubernetes volume flips to update them all.
/// A directory's other files (logs, editors' swap files) change nothing.
fn read_by_reloads(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    name.ends_with(".wasm") || name.ends_with(".toml") || name.starts_with("..")
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
            let inside = event
                .paths
                .iter()
                .any(|p| read_by_reloads(p) && p.parent().is_some_and(|dir| targets.iter().any(|t| t == dir)));
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
        self.watching = rewatch(&mut self.watcher, &self.watching, wanted, |dir, watched| match watched {
            Ok(()) if targets.iter().any(|t| t == dir) => {
                tracing::info!("watching {} for plugin changes", dir.display())
            }
            Ok(()) => {}
            Err(e) if targets.iter().any(|t| t == dir) => {
                tracing::warn!("cannot watch {} yet ({e}); it is watched for in its parent", dir.display())
            }
            Err(e) => tracing::debug!("cannot watch {}: {e}", dir.display()),
        });
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

/// A set of files watched for changes to them or to any link on the way to them.
pub(crate) struct FileWatch {
    watcher: notify::RecommendedWatcher,
    /// The files, as named.
    files: Vec<PathBuf>,
    /// Every path on the way to each file ([`resolution`]): an event on one is a change.
    paths: Arc<RwLock<Vec<PathBuf>>>,
    /// The directories those paths are in, watched now.
    watching: Vec<PathBuf>,
}

impl FileWatch {
    /// Watch `files`, sending what is seen to `changes`.
    pub(crate) fn new(files: &[PathBuf], changes: UnboundedSender<Change>) -> notify::Result<FileWatch> {
        let paths = Arc::new(RwLock::new(Vec::<PathBuf>::new()));
        let seen = paths.clone();
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let Ok(event) = event else { return };
            let paths = seen.read().unwrap_or_else(|e| e.into_inner());
            if !event.kind.is_access() && (event.need_rescan() || event.paths.iter().any(|p| paths.contains(p))) {
                let _ = changes.send(Change::of(&event.kind));
            }
        })?;
        let mut watch = FileWatch { watcher, files: files.to_vec(), paths, watching: Vec::new() };
        watch.refresh();
        Ok(watch)
    }

    /// Follow the files' paths again and watch where they lead now: after a change, a link
    /// on the way may point elsewhere.
    pub(crate) fn refresh(&mut self) {
        let mut paths: Vec<PathBuf> = self.files.iter().flat_map(|f| resolution(f)).collect();
        paths.sort();
        paths.dedup();
        let mut wanted: Vec<PathBuf> = paths.iter().filter_map(|p| p.parent().map(Path::to_path_buf)).collect();
        wanted.sort();
        wanted.dedup();
        self.watching = rewatch(&mut self.watcher, &self.watching, wanted, |dir, watched| {
            if let Err(e) = watched {
                tracing::warn!("cannot watch {} for changes to configuration: {e}", dir.display());
            }
        });
        *self.paths.write().unwrap_or_else(|e| e.into_inner()) = paths;
    }
}

/// Watch `wanted` (non-recursively) and stop watching the rest of `watching`; returns what is
/// watched now. Each new watch's outcome goes to `told`.
fn rewatch(
    watcher: &mut notify::RecommendedWatcher,
    watching: &[PathBuf],
    wanted: Vec<PathBuf>,
    told: impl Fn(&Path, notify::Result<()>),
) -> Vec<PathBuf> {
    for dir in watching.iter().filter(|d| !wanted.contains(d)) {
        let _ = watcher.unwatch(dir);
    }
    let mut now = Vec::new();
    for dir in wanted {
        if watching.contains(&dir) {
            now.push(dir);
            continue;
        }
        let watched = watcher.watch(&dir, notify::RecursiveMode::NonRecursive);
        let ok = watched.is_ok();
        told(&dir, watched);
        if ok {
            now.push(dir);
        }
    }
    now
}

/// The paths that name `file` on the way to it, absolute and free of `.` and `..`: each
/// symbolic link met while resolving it (the file's own name, a directory link above it, a
/// link the first one leads through) and where it ends. It ends where a name is no link:
/// a file, or a name that does not exist yet.
pub(crate) fn resolution(file: &Path) -> Vec<PathBuf> {
    /// As many links as Linux follows in one path.
    const MAX_LINKS: usize = 40;
    let Ok(file) = std::path::absolute(file) else { return Vec::new() };
    // The names still to walk, the next one last.
    let names = |path: &Path| -> Vec<OsString> {
        let mut names: Vec<OsString> = path
            .components()
            .filter_map(|c| match c {
                Component::Normal(name) => Some(name.to_owned()),
                Component::ParentDir => Some("..".into()),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
            })
            .collect();
        names.reverse();
        names
    };
    let (mut rest, mut at, mut paths) = (names(&file), PathBuf::from("/"), Vec::new());
    while let Some(name) = rest.pop() {
        if name == ".." {
            // `at` holds no link, so its parent is where `..` leads.
            at.pop();
            continue;
        }
        let next = at.join(&name);
        match std::fs::read_link(&next) {
            Ok(target) if paths.len() < MAX_LINKS => {
                if target.is_absolute() {
                    at = PathBuf::from("/");
                }
                rest.extend(names(&target));
                paths.push(next);
            }
            _ => at = next,
        }
    }
    paths.push(at);
    paths
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

    /// Writes that never pause hold a reload off for a second at most.
    #[tokio::test]
    async fn endless_writes_settle_within_a_second() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let writer = tokio::spawn(async move {
            while tx.send(Change::Written).is_ok() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        let started = std::time::Instant::now();
        settle(&mut rx, Change::Written).await;
        let waited = started.elapsed();
        assert!(waited >= SETTLE_AT_MOST && waited < SETTLE_AT_MOST + Duration::from_millis(500), "{waited:?}");
        writer.abort();
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
        std::fs::write(dir.join("noise.log"), b"x").unwrap();
        assert!(tokio::time::timeout(Duration::from_millis(300), rx.recv()).await.is_err(), "a file no reload reads");
        std::fs::write(dir.join("a.capsule.toml"), b"").unwrap();
        assert!(next(&mut watch, &mut rx).await, "a sidecar written");
        std::os::unix::fs::symlink("..2026_12_06", dir.join("..data")).unwrap();
        assert!(next(&mut watch, &mut rx).await, "a volume's ..data link made");
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

    #[test]
    fn a_path_resolves_through_each_link_on_the_way() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().canonicalize().unwrap();
        // A ConfigMap as Kubernetes mounts it, reached through a link to its directory.
        let map = root.join("map");
        std::fs::create_dir_all(map.join("..2026_1")).unwrap();
        std::fs::write(map.join("..2026_1/capsule.toml"), "").unwrap();
        std::os::unix::fs::symlink("..2026_1", map.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/capsule.toml", map.join("capsule.toml")).unwrap();
        std::os::unix::fs::symlink(&map, root.join("conf")).unwrap();
        let named = root.join("elsewhere/../conf/./capsule.toml");
        assert_eq!(
            resolution(&named),
            vec![root.join("conf"), map.join("capsule.toml"), map.join("..data"), map.join("..2026_1/capsule.toml")]
        );
        // A plain file, or one not there yet, is itself.
        assert_eq!(resolution(&root.join("plain.toml")), vec![root.join("plain.toml")]);
        // A loop ends.
        std::os::unix::fs::symlink("loop", root.join("loop")).unwrap();
        assert_eq!(resolution(&root.join("loop")).len(), 41);
    }

    /// Wait for a change and for the events to stop, then follow the links again.
    async fn changed(watch: &mut FileWatch, rx: &mut UnboundedReceiver<Change>) -> bool {
        let Ok(Some(change)) = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await else { return false };
        settle(rx, change).await;
        watch.refresh();
        true
    }

    #[tokio::test]
    async fn a_file_is_seen_to_change_when_a_link_on_its_way_flips() {
        let root = tempfile::tempdir().unwrap();
        let map = root.path().canonicalize().unwrap();
        let release = |n: u32, text: &str| {
            std::fs::create_dir(map.join(format!("..{n}"))).unwrap();
            std::fs::write(map.join(format!("..{n}/capsule.toml")), text).unwrap();
            std::os::unix::fs::symlink(format!("..{n}"), map.join("..data_tmp")).unwrap();
            std::fs::rename(map.join("..data_tmp"), map.join("..data")).unwrap();
        };
        release(1, "one");
        std::os::unix::fs::symlink("..data/capsule.toml", map.join("capsule.toml")).unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut watch = FileWatch::new(&[map.join("capsule.toml")], tx).unwrap();
        std::fs::write(map.join("unrelated"), "x").unwrap();
        assert!(tokio::time::timeout(Duration::from_millis(300), rx.recv()).await.is_err(), "a sibling");
        release(2, "two");
        std::fs::remove_dir_all(map.join("..1")).unwrap();
        assert!(changed(&mut watch, &mut rx).await, "the ..data flip");
        // Written where it now leads, in place.
        std::fs::write(map.join("..2/capsule.toml"), "two, edited").unwrap();
        assert!(changed(&mut watch, &mut rx).await, "an edit of the file the link leads to");
    }
}
