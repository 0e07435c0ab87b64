//! Reading a local file Capsule is told to read (a policy, a tenant's file, a sidecar, a
//! secret, a token, a plugin) no further than a limit. Only a regular file is read, and the
//! file is looked at before it is opened and again once open: a FIFO would hold the reading
//! thread until someone writes to it, `/dev/zero` would fill memory, and opening some devices
//! acts (a FIFO swapped in between is opened without waiting for a writer). A symbolic link to a
//! regular file is followed, as Kubernetes mounts ConfigMaps and Secrets through links.

use std::io::{Error, ErrorKind, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The most bytes a configuration file (a policy, a tenant's file, a sidecar) may hold.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The bytes of the regular file at `path`, refused past `limit`.
pub fn read_regular(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::MetadataExt;
    let not_regular = || Error::new(ErrorKind::InvalidInput, "not a regular file");
    // Looked at before it is opened: opening some devices does something (a watchdog starts,
    // a terminal becomes the controlling one).
    let seen = std::fs::metadata(path)?;
    if !seen.is_file() {
        return Err(not_regular());
    }
    let flags = rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(flags.bits() as i32).open(path)?;
    // And asked again of the file opened, in case the path was swapped in between.
    let opened = file.metadata()?;
    if !opened.is_file() || (opened.dev(), opened.ino()) != (seen.dev(), seen.ino()) {
        return Err(not_regular());
    }
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(Error::new(ErrorKind::InvalidData, format!("longer than {}", size(limit))));
    }
    Ok(bytes)
}

/// The text of the regular file at `path`, refused past `limit` bytes or when not UTF-8.
pub fn read_text(path: &Path, limit: u64) -> std::io::Result<String> {
    String::from_utf8(read_regular(path, limit)?)
        .map_err(|_| Error::new(ErrorKind::InvalidData, "stream did not contain valid UTF-8"))
}

/// [`read_text`], with `None` when there is no file at `path`: for files that are optional.
pub fn read_text_if_present(path: &Path, limit: u64) -> std::io::Result<Option<String>> {
    match read_text(path, limit) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether the file at `path` grants any access to users other than its owner: for a file
/// that holds a secret, which the log then warns of.
pub fn open_to_others(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o077 != 0)
}

fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_within_the_limit_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("policy.toml");
        std::fs::write(&file, "x = 1\n").unwrap();
        assert_eq!(read_text(&file, 6).unwrap(), "x = 1\n");
        let refused = read_text(&file, 5).unwrap_err();
        assert_eq!(refused.to_string(), "longer than 5 bytes");
        let link = dir.path().join("link.toml");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_text(&link, MAX_CONFIG_BYTES).unwrap(), "x = 1\n");
        // A FIFO nobody writes to is refused at once instead of holding the thread.
        let fifo = dir.path().join("fifo.toml");
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::RUSR, 0).unwrap();
        assert_eq!(read_text(&fifo, MAX_CONFIG_BYTES).unwrap_err().to_string(), "not a regular file");
        assert_eq!(read_text(Path::new("/dev/zero"), MAX_CONFIG_BYTES).unwrap_err().to_string(), "not a regular file");
        assert!(read_text(dir.path(), MAX_CONFIG_BYTES).is_err());
        std::fs::write(&file, [0xff, 0xfe]).unwrap();
        assert!(read_text(&file, MAX_CONFIG_BYTES).is_err());
        assert_eq!(size(1 << 30), "1024 MiB");
    }
}
