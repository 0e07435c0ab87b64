//! The filesystem capability: granted directories as handles.
//!
//! Each granted directory is opened once, when the plugin's grants are prepared, and kept as a
//! handle. A call's mounts ([`Mount`], computed from the grants and the client's roots by the
//! policy) are opened through those handles: the granted directory itself is the handle, and a
//! root inside it is opened beneath it one plain name at a time, never following a symlink.
//! Nothing is re-opened by path, so a plugin that swaps a directory inside a writable mount
//! for a symlink (`inner -> ../outside`) cannot make a later call open the link's target.
//!
//! wasmtime-wasi preopens a directory only by path, so it is handed the handle's own path in
//! `/proc/self/fd`, which names exactly the directory the handle holds.
//!
//! A plugin opens regular files and directories only ([`refuse_special_files`]): opening a
//! FIFO blocks until someone opens its other end, and wasmtime-wasi opens on a blocking
//! thread that a call's limits cannot stop, so one `open` of a FIFO in a granted directory
//! held a thread (and the server's exit) for good.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    DescriptorFlags, ErrorCode, Host, HostDescriptor, OpenFlags, PathFlags,
};
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use super::sandbox::CallState;
use crate::policy::{Grants, Mount};

/// How every directory handle is opened: as a directory, refusing a symlink in its place.
#[cfg(target_os = "linux")]
const DIR: OFlags = OFlags::PATH.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);
#[cfg(not(target_os = "linux"))]
const DIR: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

/// A plugin's granted directories, open. Indexed like [`Grants::dirs`].
#[derive(Debug)]
pub(crate) struct GrantDirs {
    handles: Vec<OwnedFd>,
}

impl GrantDirs {
    /// Open every directory `grants` names ([`open_granted`]). The paths are canonical (the
    /// policy resolved them), so a symlink found anywhere on one means it was put there
    /// since: refused.
    pub fn open(grants: &Grants) -> Result<GrantDirs, String> {
        let handles = grants
            .dirs
            .iter()
            .map(|dir| {
                open_granted(&dir.path).map_err(|e| {
                    format!(
                        "cannot open granted directory {} without following a symbolic link: {e}",
                        dir.path.display()
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(GrantDirs { handles })
    }

    /// Whether each handle is still the directory at its granted path, reached as
    /// [`open_granted`] reaches it (a directory the operator replaced is opened again on the
    /// next reload; one behind a planted link is not current, and does not open again).
    pub fn is_current(&self, grants: &Grants) -> bool {
        self.handles.len() == grants.dirs.len()
            && self.handles.iter().zip(&grants.dirs).all(|(handle, dir)| {
                let there = open_granted(&dir.path).and_then(|there| Ok(rustix::fs::fstat(there)?));
                match (rustix::fs::fstat(handle), there) {
                    (Ok(held), Ok(there)) => (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino),
                    _ => false,
                }
            })
    }

    /// Preopen `mounts` in a call's WASI context, each through its grant's handle. A mount
    /// that can no longer be reached beneath its grant without following a symlink is left
    /// out (and logged); the mounts returned are the ones the call can use.
    pub fn preopen(&self, plugin: &str, wasi: &mut WasiCtxBuilder, mounts: Vec<Mount>) -> Result<Vec<Mount>, String> {
        let mut opened = Vec::with_capacity(mounts.len());
        for mount in mounts {
            let grant = self.handles.get(mount.grant).ok_or_else(|| format!("mount {} has no grant", mount.guest))?;
            let beneath = match open_beneath(grant.as_fd(), &mount.beneath) {
                Ok(handle) => handle,
                Err(e) => {
                    tracing::warn!(
                        plugin,
                        "{} is not opened for this call: it is not a plain directory beneath its grant ({e})",
                        mount.host.display()
                    );
                    continue;
                }
            };
            let handle = beneath.as_ref().map_or(grant.as_fd(), AsFd::as_fd);
            let perms = if mount.write { FsPerms::ReadWrite } else { FsPerms::ReadOnly };
            wasi.preopened_dir(handle_path(handle), &mount.guest, perms)
                .map_err(|e| format!("cannot open granted directory {}: {e:#}", mount.host.display()))?;
            opened.push(mount);
        }
        Ok(opened)
    }
}

/// An empty directory that no path names any more: the only preopen of a prebuilt
/// instance's placeholder state when its plugin has granted directories (see `spare`), so
/// that a start function that asks for its directories leaves a descriptor behind (and
/// finds nothing to read, and nowhere to write).
pub(crate) fn vanished_dir() -> io::Result<OwnedFd> {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    let path = std::env::temp_dir().join(format!("capsule-placeholder-{}-{nanos:08x}", std::process::id()));
    std::fs::create_dir(&path)?;
    let opened = rustix::fs::open(&path, DIR, Mode::empty());
    std::fs::remove_dir(&path)?;
    Ok(opened?)
}

/// Preopen [`vanished_dir`]'s `handle`, read-only, as `/`.
pub(crate) fn preopen_vanished(wasi: &mut WasiCtxBuilder, handle: BorrowedFd<'_>) -> Result<(), String> {
    wasi.preopened_dir(handle_path(handle), "/", FsPerms::ReadOnly).map(|_| ()).map_err(|e| format!("{e:#}"))
}

/// Open the directory at the absolute, canonical `path` from `/` one plain name at a time,
/// following no symbolic link anywhere on the way. Opening the whole path at once would
/// follow a link in a parent: a plugin with a writable grant above a nested grant (its own
/// or another plugin's) can swap a directory on the way for `x -> ../..`, and the next open
/// by path would land wherever the link leads.
fn open_granted(path: &Path) -> io::Result<OwnedFd> {
    let relative = path
        .strip_prefix("/")
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a granted path is absolute"))?;
    let root = rustix::fs::open("/", DIR, Mode::empty())?;
    Ok(open_beneath(root.as_fd(), relative)?.unwrap_or(root))
}

/// Open `beneath` below `base` one plain name at a time, refusing symlinks, `..` and
/// anything that is not a directory. `None` means `base` itself.
fn open_beneath(base: BorrowedFd<'_>, beneath: &Path) -> io::Result<Option<OwnedFd>> {
    let mut dir: Option<OwnedFd> = None;
    for component in beneath.components() {
        let Component::Normal(name) = component else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a plain name"));
        };
        let parent = dir.as_ref().map_or(base, AsFd::as_fd);
        dir = Some(rustix::fs::openat(parent, name, DIR, Mode::empty())?);
    }
    Ok(dir)
}

/// Put Capsule's `open-at` in place of wasmtime-wasi's: the same, except that a path naming a
/// FIFO, a socket or a device is refused with `not-permitted` before anything opens it.
pub(crate) fn refuse_special_files(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
    type Args = (Resource<Descriptor>, PathFlags, String, OpenFlags, DescriptorFlags);
    linker.allow_shadowing(true);
    let defined = linker.instance("wasi:filesystem/types@0.2.12")?.func_wrap_async(
        "[method]descriptor.open-at",
        |mut store, (fd, path_flags, path, open_flags, flags): Args| {
            Box::new(async move {
                let mut view = store.data_mut().filesystem();
                let dir = match view.table.get(&fd)? {
                    Descriptor::Dir(dir) => Some(dir.dir.clone()),
                    Descriptor::File(_) => None,
                };
                if let Some(dir) = dir {
                    let (name, follow) = (path.clone(), path_flags.contains(PathFlags::SYMLINK_FOLLOW));
                    // A lookup may wait on a slow filesystem, as the open after it may.
                    let special = tokio::task::spawn_blocking(move || is_special(dir.as_fd(), &name, follow))
                        .await
                        .unwrap_or(false);
                    if special {
                        return Ok((Err(ErrorCode::NotPermitted),));
                    }
                }
                match HostDescriptor::open_at(&mut view, fd, path_flags, path, open_flags, flags).await {
                    Ok(opened) => Ok((Ok(opened),)),
                    // A trap stays a trap; an error code goes to the guest.
                    Err(e) => Ok((Err(Host::convert_error_code(&mut view, e)?),)),
                }
            })
        },
    );
    linker.allow_shadowing(false);
    defined
}

/// Whether `path` beneath `dir` names something that is neither a regular file, a directory
/// nor a symlink, or cannot be told. Looked up without opening it (`O_PATH`), never leaving
/// `dir`. A lookup that fails the way the open will fail too (nothing there, not a
/// directory, a link not followed, outside `dir`, no access) is left to the open to report;
/// any other failure refuses the open rather than risk it: `openat2` missing (Linux before
/// 5.6, or a seccomp filter), or a lookup still racing renames elsewhere after a few tries,
/// since wasmtime-wasi's own open falls back to resolving by hand and would open a FIFO. A
/// FIFO renamed into a file's place between this lookup and the open would still block it,
/// but only someone on the host can make one (WASI has no call that does).
fn is_special(dir: BorrowedFd<'_>, path: &str, follow: bool) -> bool {
    use rustix::fs::{FileType, ResolveFlags};
    use rustix::io::Errno;
    let mut flags = OFlags::PATH | OFlags::CLOEXEC;
    if !follow {
        flags |= OFlags::NOFOLLOW;
    }
    let beneath = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
    let mut tries = 0;
    let found = loop {
        match rustix::fs::openat2(dir, path, flags, Mode::empty(), beneath) {
            Ok(found) => break found,
            Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP | Errno::XDEV | Errno::ACCESS | Errno::NAMETOOLONG) => {
                return false;
            }
            // A rename somewhere on the system while `..` was resolved: look again.
            Err(Errno::AGAIN) if tries < 3 => tries += 1,
            Err(_) => return true,
        }
    };
    rustix::fs::fstat(&found).is_ok_and(|stat| {
        !matches!(
            FileType::from_raw_mode(stat.st_mode),
            FileType::RegularFile | FileType::Directory | FileType::Symlink
        )
    })
}

/// The path naming exactly the directory `handle` holds.
fn handle_path(handle: BorrowedFd<'_>) -> PathBuf {
    #[cfg(target_os = "linux")]
    let dir = "/proc/self/fd";
    #[cfg(not(target_os = "linux"))]
    let dir = "/dev/fd";
    Path::new(dir).join(handle.as_raw_fd().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::DirGrant;

    #[test]
    fn mounts_are_opened_beneath_grants_without_following_symlinks() {
        let base = tempfile::tempdir().unwrap();
        let base = base.path().canonicalize().unwrap();
        std::fs::create_dir_all(base.join("grant/a/b")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        std::os::unix::fs::symlink("../../outside", base.join("grant/a/link")).unwrap();
        let grant = base.join("grant");
        let grants = Grants {
            dirs: vec![DirGrant { path: grant.clone(), guest: "/g".into(), write: false }],
            ..Grants::default()
        };
        let dirs = GrantDirs::open(&grants).unwrap();
        assert!(dirs.is_current(&grants));
        let handle = |beneath: &str| open_beneath(dirs.handles[0].as_fd(), Path::new(beneath));
        assert!(handle("").unwrap().is_none());
        assert!(handle("a/b").unwrap().is_some());
        assert!(handle("a/link").is_err(), "a symlink is never followed");
        assert!(handle("a/../a").is_err(), "only plain names");
        // The handle keeps naming the granted directory after it is moved and replaced.
        std::fs::rename(&grant, base.join("moved")).unwrap();
        std::os::unix::fs::symlink("outside", &grant).unwrap();
        assert!(!dirs.is_current(&grants));
        let seen = std::fs::read_dir(handle_path(dirs.handles[0].as_fd())).unwrap();
        assert_eq!(seen.map(|e| e.unwrap().file_name()).collect::<Vec<_>>(), vec!["a"]);
        assert!(GrantDirs::open(&grants).is_err(), "a symlink in place of a grant is refused");
    }

    /// A link planted above a nested grant, not in its place: `w/pub -> ../lure` makes the
    /// path `w/pub/data` lead to `lure/data`. Neither the open nor the currency check follows it.
    #[test]
    fn a_link_anywhere_on_a_granted_path_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let base = base.path().canonicalize().unwrap();
        std::fs::create_dir_all(base.join("w/pub/data")).unwrap();
        std::fs::create_dir_all(base.join("lure/data")).unwrap();
        std::fs::write(base.join("lure/data/secret.txt"), "s").unwrap();
        let data = base.join("w/pub/data");
        let grants = Grants {
            dirs: vec![DirGrant { path: data.clone(), guest: "/d".into(), write: false }],
            ..Grants::default()
        };
        let dirs = GrantDirs::open(&grants).unwrap();
        std::fs::rename(base.join("w/pub"), base.join("w/pub.o")).unwrap();
        std::os::unix::fs::symlink("../lure", base.join("w/pub")).unwrap();
        assert!(std::fs::metadata(data.join("secret.txt")).is_ok(), "the path now leads to the lure");
        assert!(!dirs.is_current(&grants), "the handle is not what the path reaches");
        let refused = GrantDirs::open(&grants).unwrap_err();
        assert!(refused.contains("without following a symbolic link"), "{refused}");
        // The handle held still names the directory granted.
        let seen = std::fs::read_dir(handle_path(dirs.handles[0].as_fd())).unwrap();
        assert_eq!(seen.count(), 0);
    }
}
