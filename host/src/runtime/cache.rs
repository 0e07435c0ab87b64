//! Compiled components on disk, keyed by content hash, so a restart or a swap back to an
//! earlier version of a plugin does not compile it again.
//!
//! The key is the SHA-256 of the component bytes together with wasmtime's compatibility hash
//! of the engine (version, target, compiler flags, tunables): an artifact is only ever loaded
//! into an engine that could have produced it.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// A directory of precompiled components.
#[derive(Debug, Clone)]
pub struct CompileCache {
    dir: PathBuf,
}

/// Feeds `Hash` output into SHA-256, giving a hash that is stable across processes (the
/// standard library's hashers are not).
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        u64::from_le_bytes(digest[..8].try_into().expect("a SHA-256 digest has 32 bytes"))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 of a component, in hex: the identity of a plugin version.
pub fn digest(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

impl CompileCache {
    /// Use `dir`, creating it readable by this user only: whatever is in it is loaded as
    /// machine code, so nobody else may write there. A directory that is a symlink, or that
    /// belongs to another user, is refused.
    pub fn open(dir: impl Into<PathBuf>) -> std::io::Result<CompileCache> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::{MetadataExt, PermissionsExt};
            let refuse = |why: String| std::io::Error::new(std::io::ErrorKind::PermissionDenied, why);
            let meta = std::fs::symlink_metadata(&dir)?;
            if !meta.is_dir() {
                return Err(refuse(format!("{} is a symlink or not a directory", dir.display())));
            }
            if meta.uid() != rustix::process::geteuid().as_raw() {
                return Err(refuse(format!("{} belongs to another user (uid {})", dir.display(), meta.uid())));
            }
            // Ours: make sure nobody else can write (or read) it.
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(CompileCache { dir })
    }

    /// Remove what no load will use (see [`prune`]). Run once the plugins served at start
    /// have loaded, each marking its entry used, so that a server up for longer than
    /// [`UNUSED_FOR`] keeps the entries of what it serves. Blocking.
    pub fn prune(&self) {
        prune(&self.dir, std::time::SystemTime::now());
    }

    /// The default location: `$XDG_CACHE_HOME/capsule` or `~/.cache/capsule`.
    pub fn default_dir() -> Option<PathBuf> {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")))?;
        Some(base.join("capsule"))
    }

    /// Where the compilation of the component with this [`digest`] lives.
    fn path(&self, engine: &Engine, sha256: &str) -> PathBuf {
        let mut hasher = Sha256Hasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        self.dir.join(format!("{sha256}-{:016x}.cwasm", hasher.finish()))
    }

    /// Whether there is an entry for the component with this [`digest`] (a plain file).
    pub fn contains(&self, engine: &Engine, sha256: &str) -> bool {
        std::fs::symlink_metadata(self.path(engine, sha256)).is_ok_and(|meta| meta.is_file())
    }

    /// The cached compilation of the component with this [`digest`], if there is a usable one.
    pub fn load(&self, engine: &Engine, sha256: &str) -> Option<Component> {
        // Only a plain file is loaded: never one a symlink leads to.
        if !self.contains(engine, sha256) {
            return None;
        }
        let path = self.path(engine, sha256);
        // SAFETY: the file was written by `store` below, into a directory only this user can
        // write, under a name derived from the source bytes and this engine's configuration;
        // wasmtime still checks the header and engine compatibility and fails cleanly.
        match unsafe { Component::deserialize_file(engine, &path) } {
            Ok(component) => {
                // Marked as used (its access time; its modification time says when it was
                // compiled), so that `prune` keeps it.
                let now = std::fs::FileTimes::new().set_accessed(std::time::SystemTime::now());
                let _ = std::fs::File::options().write(true).open(&path).and_then(|f| f.set_times(now));
                Some(component)
            }
            Err(e) => {
                tracing::warn!("discarding unusable compile cache entry {}: {e:#}", path.display());
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Save a compilation. Written to a temporary file and renamed, so a reader never sees a
    /// partial artifact; failures only cost a recompile later, so they are logged, not raised.
    pub fn store(&self, engine: &Engine, sha256: &str, component: &Component) {
        let path = self.path(engine, sha256);
        let result = component.serialize().map_err(|e| std::io::Error::other(format!("{e:#}"))).and_then(|artifact| {
            let mut file = tempfile::NamedTempFile::new_in(&self.dir)?;
            file.write_all(&artifact)?;
            file.as_file().sync_all()?;
            file.persist(&path).map(drop).map_err(|e| e.error)
        });
        if let Err(e) = result {
            tracing::warn!("could not write compile cache entry {}: {e}", path.display());
        }
    }
}

/// How long an entry no load has used is kept: a plugin version gone for a month, or the
/// compilations of an engine since upgraded (they never match again).
const UNUSED_FOR: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

/// How long a temporary file is left alone: one older is what a crash mid-write left.
const ABANDONED_AFTER: std::time::Duration = std::time::Duration::from_secs(3600);

/// Remove from the cache what no load will use: entries unused for [`UNUSED_FOR`] and
/// temporary files abandoned for [`ABANDONED_AFTER`]. Without this the cache only grew: every
/// version of every plugin ever loaded, a few hundred KiB to tens of MiB each.
fn prune(dir: &Path, now: std::time::SystemTime) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Ok(meta) = entry.metadata() else { continue };
        let since = |time: std::io::Result<std::time::SystemTime>| {
            time.ok().and_then(|t| now.duration_since(t).ok()).unwrap_or_default()
        };
        let stale = match () {
            () if !meta.is_file() => false,
            () if name.starts_with(".tmp") => since(meta.modified()) > ABANDONED_AFTER,
            () if name.ends_with(".cwasm") => since(meta.accessed()) > UNUSED_FOR,
            () => false,
        };
        if stale && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    if removed > 0 {
        tracing::info!("compile cache {}: removed {removed} entries no load has used lately", dir.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_unused_for_a_month_and_abandoned_writes_are_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let now = std::time::SystemTime::now();
        let aged = |name: &str, age: std::time::Duration| {
            let file = std::fs::File::create(dir.path().join(name)).unwrap();
            file.set_times(std::fs::FileTimes::new().set_modified(now - age).set_accessed(now - age)).unwrap();
        };
        let day = std::time::Duration::from_secs(24 * 3600);
        aged("old-0123.cwasm", 31 * day);
        aged("recent-0123.cwasm", 29 * day);
        aged(".tmpAbCdEf", 2 * 3600 * std::time::Duration::from_secs(1));
        aged(".tmpWriting", std::time::Duration::from_secs(60));
        aged("notes.txt", 400 * day);
        prune(dir.path(), now);
        let mut left: Vec<String> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
        left.sort();
        assert_eq!(left, [".tmpWriting", "notes.txt", "recent-0123.cwasm"]);
    }

    #[test]
    fn a_cache_directory_must_be_ours_and_real() {
        let base = tempfile::tempdir().unwrap();
        let real = base.path().join("real");
        let cache = CompileCache::open(&real).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&real).unwrap().permissions().mode() & 0o777, 0o700);
            let link = base.path().join("link");
            std::os::unix::fs::symlink(&real, &link).unwrap();
            assert!(CompileCache::open(&link).is_err(), "a symlinked cache directory is refused");
            if rustix::process::geteuid().is_root() {
                let theirs = base.path().join("theirs");
                std::fs::create_dir(&theirs).unwrap();
                std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
                let error = CompileCache::open(&theirs).unwrap_err().to_string();
                assert!(error.contains("belongs to another user"), "{error}");
            }
            // An entry that is a symlink is never loaded.
            let engine = Engine::default();
            let entry = cache.path(&engine, "abc");
            std::os::unix::fs::symlink("/etc/passwd", &entry).unwrap();
            assert!(cache.load(&engine, "abc").is_none());
        }
    }
}
