//! Filesystem grants narrowed to the client's roots: which directories a call may see.
//!
//! The answer is a list of [`Mount`]s the runtime preopens for that one call. Paths are
//! compared after canonicalization, so a root that is a symlink, or spelled with `..`, is
//! judged by where it really points. A root outside every grant yields nothing.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Grants;

/// One of the client's roots, resolved to a canonical local directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientRoot {
    pub path: PathBuf,
    pub name: Option<String>,
}

/// What the client said about its roots, for one call.
#[derive(Debug, Clone, Default)]
pub enum ClientRoots {
    /// The client offers no roots (no roots capability): the grants apply as written, and
    /// paths the model passes are checked against them.
    #[default]
    NotOffered,
    /// The client's roots, canonical. Empty means the client has none: nothing is visible.
    Listed(Arc<[ClientRoot]>),
    /// The request is not one that sees directories (completion): nothing is visible,
    /// whatever the grants.
    Withheld,
}

/// The most roots of a client's list Capsule looks at: each is resolved on the filesystem
/// and becomes an open directory for a call, so a list of thousands would hold a thread and
/// the process's descriptors. Clients list a few (a workspace's folders).
pub const MAX_ROOTS: usize = 64;

impl ClientRoots {
    /// The client has roots, but none usable: nothing is visible.
    pub fn none() -> ClientRoots {
        ClientRoots::Listed(Arc::new([]))
    }

    /// Resolve the `file://` URIs a client listed, the first [`MAX_ROOTS`] of them. Other
    /// schemes, paths that do not exist or are not directories, and non-local hosts are
    /// dropped with a log line; a directory listed twice counts once.
    pub fn from_uris<'a>(roots: impl IntoIterator<Item = (&'a str, Option<&'a str>)>) -> ClientRoots {
        let mut resolved: Vec<ClientRoot> = Vec::new();
        let mut roots = roots.into_iter();
        for (uri, name) in roots.by_ref().take(MAX_ROOTS) {
            match local_path(uri).map(|path| std::fs::canonicalize(&path).map(|p| (path, p))) {
                Some(Ok((_, canonical))) if resolved.iter().any(|r| r.path == canonical) => {}
                Some(Ok((_, canonical))) if canonical.is_dir() => {
                    resolved.push(ClientRoot { path: canonical, name: name.map(str::to_owned) })
                }
                Some(Ok((path, _))) => tracing::debug!("client root {} is not a directory; ignored", path.display()),
                Some(Err(e)) => tracing::debug!("client root {uri} cannot be resolved ({e}); ignored"),
                None => tracing::debug!("client root {uri} is not a local file URI; ignored"),
            }
        }
        let beyond = roots.count();
        if beyond > 0 {
            tracing::warn!("the client listed {} roots; only the first {MAX_ROOTS} are used", MAX_ROOTS + beyond);
        }
        ClientRoots::Listed(resolved.into())
    }
}

/// The local path of a `file://` URI, percent-decoded; `None` for anything else.
fn local_path(uri: &str) -> Option<PathBuf> {
    let rest = uri.strip_prefix("file://")?;
    let path = match rest.strip_prefix("localhost") {
        Some(path) => path,
        None => rest,
    };
    if !path.starts_with('/') {
        return None;
    }
    let bytes = path.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            decoded.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    if decoded.contains(&0) {
        return None;
    }
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStringExt;
        Some(PathBuf::from(std::ffi::OsString::from_vec(decoded)))
    }
    #[cfg(not(unix))]
    {
        String::from_utf8(decoded).ok().map(PathBuf::from)
    }
}

/// A directory one call may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The directory on the host.
    pub host: PathBuf,
    /// The grant it lies in: an index into [`Grants::dirs`]. The runtime opens the mount
    /// through that grant's handle, never by `host` path, so a symlink a plugin plants between
    /// two calls cannot redirect it.
    pub grant: usize,
    /// Its path below the grant (empty for the granted directory itself): plain names only.
    pub beneath: PathBuf,
    /// Where the plugin sees it.
    pub guest: String,
    /// Whether the plugin may write in it.
    pub write: bool,
    /// The client's name for it, when it came from a root.
    pub name: Option<String>,
}

impl Grants {
    /// The directories a call may see, given what the client said about its roots.
    ///
    /// Without the roots grant, or for a client that offers no roots, that is the granted
    /// directories as written. Otherwise it is each root that lies within a grant (with that
    /// grant's write permission), plus each grant that lies within a root; both appear at
    /// their own host paths, so the paths the model knows from the client work unchanged.
    pub fn mounts(&self, roots: &ClientRoots) -> Vec<Mount> {
        let listed = match roots {
            ClientRoots::Withheld => return Vec::new(),
            ClientRoots::Listed(listed) if self.roots => listed,
            _ => {
                return self
                    .dirs
                    .iter()
                    .enumerate()
                    .map(|(grant, d)| Mount {
                        host: d.path.clone(),
                        grant,
                        beneath: PathBuf::new(),
                        guest: d.guest.clone(),
                        write: d.write,
                        name: None,
                    })
                    .collect();
            }
        };
        let mut mounts: Vec<Mount> = Vec::new();
        let mut add = |host: &Path, grant: usize, name: Option<&String>| {
            let dir = &self.dirs[grant];
            let (Some(guest), Ok(beneath)) = (host.to_str(), host.strip_prefix(&dir.path)) else {
                tracing::warn!("{} is not valid UTF-8 and cannot be shown to a plugin", host.display());
                return;
            };
            let mount = Mount {
                host: host.into(),
                grant,
                beneath: beneath.into(),
                guest: guest.into(),
                write: dir.write,
                name: name.cloned(),
            };
            match mounts.iter_mut().find(|m| m.host == host) {
                // Reached through two nested grants: the writable one is the one to open it by.
                Some(existing) if mount.write && !existing.write => {
                    *existing = Mount { name: existing.name.take(), ..mount }
                }
                Some(_) => {}
                None => mounts.push(mount),
            }
        };
        for root in listed.iter() {
            for (i, grant) in self.dirs.iter().enumerate() {
                if root.path.starts_with(&grant.path) {
                    add(&root.path, i, root.name.as_ref());
                } else if grant.path.starts_with(&root.path) {
                    add(&grant.path, i, root.name.as_ref());
                }
            }
        }
        mounts
    }
}

#[cfg(test)]
mod tests {
    use super::super::DirGrant;
    use super::*;

    fn grants(dirs: &[(&Path, bool)], roots: bool) -> Grants {
        Grants {
            dirs: dirs
                .iter()
                .map(|&(p, write)| DirGrant { path: p.into(), guest: p.to_str().unwrap().into(), write })
                .collect(),
            roots,
            ..Grants::default()
        }
    }

    fn listed(paths: &[&Path]) -> ClientRoots {
        ClientRoots::Listed(paths.iter().map(|p| ClientRoot { path: p.to_path_buf(), name: None }).collect())
    }

    fn hosts(mounts: &[Mount]) -> Vec<(&Path, bool)> {
        mounts.iter().map(|m| (m.host.as_path(), m.write)).collect()
    }

    #[test]
    fn roots_narrow_grants() {
        let (srv, srv_a, srv_a_b, home) =
            (Path::new("/srv"), Path::new("/srv/a"), Path::new("/srv/a/b"), Path::new("/home"));
        let g = grants(&[(srv, false), (srv_a_b, true)], true);
        assert_eq!(hosts(&g.mounts(&ClientRoots::NotOffered)), vec![(srv, false), (srv_a_b, true)]);
        assert!(g.mounts(&listed(&[])).is_empty());
        assert!(g.mounts(&listed(&[home])).is_empty());
        assert_eq!(hosts(&g.mounts(&listed(&[srv_a]))), vec![(srv_a, false), (srv_a_b, true)]);
        assert_eq!(hosts(&g.mounts(&listed(&[Path::new("/")]))), vec![(srv, false), (srv_a_b, true)]);
        let deep = g.mounts(&listed(&[Path::new("/srv/a/b/c")]));
        assert_eq!(hosts(&deep), vec![(Path::new("/srv/a/b/c"), true)]);
        // Opened through the writable grant it lies in, by the path below that grant.
        assert_eq!((deep[0].grant, deep[0].beneath.as_path()), (1, Path::new("c")));
        let mid = g.mounts(&listed(&[srv_a]));
        assert_eq!((mid[0].grant, mid[0].beneath.as_path()), (0, Path::new("a")));
        assert_eq!((mid[1].grant, mid[1].beneath.as_path()), (1, Path::new("")));
        // Prefixes are compared by component: /srvx is not inside /srv.
        assert!(g.mounts(&listed(&[Path::new("/srvx")])).is_empty());
        let fixed = grants(&[(srv, false)], false);
        assert_eq!(hosts(&fixed.mounts(&listed(&[home]))), vec![(srv, false)]);
        // Completion sees nothing, narrowed to roots or not.
        assert!(fixed.mounts(&ClientRoots::Withheld).is_empty() && g.mounts(&ClientRoots::Withheld).is_empty());
    }

    #[test]
    fn a_long_list_of_roots_is_cut_to_the_first_ones() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        let uris: Vec<String> = (0..MAX_ROOTS + 10)
            .map(|n| {
                std::fs::create_dir(real.join(format!("d{n}"))).unwrap();
                format!("file://{}/d{n}", real.display())
            })
            .collect();
        let ClientRoots::Listed(roots) = ClientRoots::from_uris(uris.iter().map(|u| (u.as_str(), None))) else {
            panic!()
        };
        assert_eq!(roots.len(), MAX_ROOTS);
        assert_eq!(roots[MAX_ROOTS - 1].path, real.join(format!("d{}", MAX_ROOTS - 1)));
    }

    #[test]
    fn uris_resolve_to_canonical_directories() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        std::fs::create_dir(real.join("a b")).unwrap();
        std::fs::write(real.join("file"), "").unwrap();
        let uri = |p: &str| format!("file://{}/{p}", real.display());
        let inputs = [uri("a%20b"), uri("a%20b/../a%20b"), uri("file"), uri("missing"), "https://x/y".into()];
        let ClientRoots::Listed(roots) = ClientRoots::from_uris(inputs.iter().map(|u| (u.as_str(), Some("n")))) else {
            panic!()
        };
        assert_eq!(roots.iter().map(|r| r.path.clone()).collect::<Vec<_>>(), vec![real.join("a b")]);
        assert_eq!(local_path("file://localhost/tmp").unwrap(), Path::new("/tmp"));
        assert!(local_path("file://otherhost/tmp").is_none());
        assert!(local_path("file:///a%00b").is_none());
    }
}
