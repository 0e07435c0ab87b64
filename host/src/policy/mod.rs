//! The operator's policy: what each plugin may touch, and how much it may use.
//!
//! Nothing is granted by default. A plugin with no entry in the policy file gets clocks and
//! randomness, and the default limits. An entry grants it, by name:
//!
//! - directories, read-only or read-write, optionally narrowed per call to the client's
//!   roots (see [`Grants::mounts`]);
//! - outbound HTTP to listed hosts ([`HostRule`]);
//! - named environment values and secrets;
//! - its own limits (memory, CPU deadline, wall-clock timeout, concurrency, output size).
//!
//! A plugin may declare what it needs ([`Needs`], a custom section in the component); needs
//! beyond the grants are reported at load, as a warning or a refusal by the operator's choice.
//!
//! This layer is plain data and checks: the runtime enforces it, and it knows nothing of MCP.

mod auth;
mod config;
mod fs;
mod needs;
mod net;
mod quota;
mod tenants;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use auth::{ALGORITHMS, ApiKey, AuthConfig, IntrospectionConfig, audience_names};
pub use config::{Policy, PolicyError, PolicyFile};
pub use fs::{ClientRoot, ClientRoots, Mount};
pub use needs::{NEEDS_SECTION, Needs, NeedsError, NeedsMode, sidecar_path};
pub use net::{HostRule, HostRuleError};
pub use quota::{CpuQuota, QuotaOverrides, Quotas, RateQuota};
pub use tenants::{TENANT_FILE, TenantFile};

/// What one plugin is granted. Built from the policy file; immutable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    /// Directories the plugin may see (canonical host paths).
    pub dirs: Vec<DirGrant>,
    /// Whether the directories are narrowed to the client's roots on each call.
    pub roots: bool,
    /// Hosts the plugin may send HTTP requests to.
    pub network: Arc<[HostRule]>,
    /// Addresses the plugin may open raw TCP connections to (`wasi:sockets`).
    pub tcp: Arc<[SocketAddr]>,
    /// Environment values, as the plugin sees them.
    pub env: Vec<(String, String)>,
    /// Secrets, passed to the plugin as environment values; never printed or logged.
    pub secrets: Vec<(String, Secret)>,
    /// The plugin's limits.
    pub limits: Limits,
}

/// A directory grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirGrant {
    /// The directory on the host, canonicalized when the policy was read.
    pub path: PathBuf,
    /// Where the plugin sees it (without the roots grant; with it, roots appear at their own
    /// paths).
    pub guest: String,
    /// Whether the plugin may create, change and delete files in it.
    pub write: bool,
}

/// A secret's value. Its `Debug` form is redacted so it cannot reach a log by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

    /// The value itself, for the sandbox that receives it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// Where a secret's value comes from, as a policy file names it: an environment variable
/// (`{ env = "NAME" }`) or a file (`{ file = "path" }`, relative to the policy file, trailing
/// newline dropped). Read only when the policy is put in force, never while checking it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "SecretEntry")]
pub enum SecretSource {
    Env { env: String },
    File { file: PathBuf },
}

/// A secret source as written: exactly one of its two keys, and no other.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SecretEntry {
    env: Option<String>,
    file: Option<PathBuf>,
}

impl TryFrom<SecretEntry> for SecretSource {
    type Error = &'static str;

    fn try_from(entry: SecretEntry) -> Result<Self, Self::Error> {
        match (entry.env, entry.file) {
            (Some(env), None) => Ok(SecretSource::Env { env }),
            (None, Some(file)) => Ok(SecretSource::File { file }),
            _ => Err("a secret is { env = \"NAME\" } or { file = \"path\" }, one of the two"),
        }
    }
}

impl SecretSource {
    /// The source with a relative file made relative to `base` (the policy file's directory).
    fn relative_to(self, base: &Path) -> SecretSource {
        match self {
            SecretSource::File { file } => SecretSource::File { file: base.join(file) },
            env => env,
        }
    }

    /// Read the value.
    pub fn read(&self) -> Result<Secret, String> {
        match self {
            SecretSource::Env { env } => std::env::var(env)
                .map(Secret)
                .map_err(|_| format!("environment variable {env} is not set (or not UTF-8)")),
            // A regular file: a FIFO would hold the policy's reading until someone writes.
            SecretSource::File { file } => crate::files::read_text(file, MAX_SECRET_BYTES)
                .map(|text| Secret(text.trim_end_matches(['\n', '\r']).to_owned()))
                .map_err(|e| format!("cannot read {}: {e}", file.display())),
        }
    }
}

/// The most bytes a secret file may hold: a key or a token, not a file that never ends.
const MAX_SECRET_BYTES: u64 = 64 * 1024;

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Per-call limits of one plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Linear memory a call may use, in bytes.
    pub memory: usize,
    /// CPU time a call may spend running plugin code.
    pub cpu: Duration,
    /// Wall-clock time a call may take (covers a plugin blocked waiting on I/O).
    pub timeout: Duration,
    /// Calls of this plugin that may run at once; more are refused, not queued.
    pub concurrency: u32,
    /// Plugin instances kept for this plugin alone (at most `concurrency` of them count), so
    /// that busy neighbours can never take every instance; beyond these it shares the rest.
    pub reserve: u32,
    /// Bytes a call's result may hold (text, binary data and structured content together).
    pub output: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory: 64 << 20,
            cpu: Duration::from_secs(5),
            timeout: Duration::from_secs(30),
            concurrency: 32,
            reserve: 2,
            output: 4 << 20,
        }
    }
}

/// Limits as written in the policy file or on the command line: each one optional, so the
/// layers (built-in defaults, `[limits]`, command-line flags, a plugin's own `limits`) can
/// be stacked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitOverrides {
    /// Linear memory per call, in MiB.
    pub memory_mib: Option<u64>,
    /// CPU time per call, in milliseconds.
    pub cpu_ms: Option<u64>,
    /// Wall-clock time per call, in milliseconds.
    pub timeout_ms: Option<u64>,
    /// Calls running at once.
    pub concurrency: Option<u32>,
    /// Instances kept for this plugin alone; 0 keeps none.
    pub reserve: Option<u32>,
    /// Result size per call, in KiB.
    pub output_kib: Option<u64>,
}

/// The largest memory limit: a 32-bit linear memory holds at most 4 GiB.
pub const MAX_MEMORY_MIB: u64 = 4096;
/// The largest output limit, 1 GiB.
pub const MAX_OUTPUT_KIB: u64 = 1 << 20;
/// The longest CPU deadline or wall-clock timeout, a day.
pub const MAX_MILLIS: u64 = 24 * 60 * 60 * 1000;
/// The most instances a server may have, and so the most one plugin may reserve.
pub const MAX_INSTANCES: u32 = 10_000;

/// A SHA-256 written as 64 hex digits.
pub(crate) fn parse_sha256(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut digest = [0u8; 32];
    for (byte, pair) in digest.iter_mut().zip(hex.as_bytes().chunks(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(digest)
}

/// `value` if it lies in `1..=max`, else why not (`name` as the operator wrote it).
pub fn in_range(name: &str, value: u64, max: u64) -> Result<u64, String> {
    if (1..=max).contains(&value) { Ok(value) } else { Err(format!("{name} = {value} is out of range (1 to {max})")) }
}

impl Limits {
    /// The instances kept for this plugin alone: its reserve, but never more than it may use.
    pub fn reserved_instances(&self) -> u32 {
        self.reserve.min(self.concurrency)
    }

    /// These limits with `overrides` applied; an override out of range (one that would
    /// overflow once converted to bytes, say) is an error, never a wrapped number.
    pub fn with(self, overrides: &LimitOverrides) -> Result<Limits, String> {
        Ok(Limits {
            memory: match overrides.memory_mib {
                Some(m) => (in_range("memory_mib", m, MAX_MEMORY_MIB)? as usize) << 20,
                None => self.memory,
            },
            cpu: match overrides.cpu_ms {
                Some(ms) => Duration::from_millis(in_range("cpu_ms", ms, MAX_MILLIS)?),
                None => self.cpu,
            },
            timeout: match overrides.timeout_ms {
                Some(ms) => Duration::from_millis(in_range("timeout_ms", ms, MAX_MILLIS)?),
                None => self.timeout,
            },
            concurrency: match overrides.concurrency {
                Some(n) => in_range("concurrency", n.into(), u32::MAX.into())? as u32,
                None => self.concurrency,
            },
            reserve: match overrides.reserve {
                Some(0) => 0,
                Some(n) => in_range("reserve", n.into(), MAX_INSTANCES.into())? as u32,
                None => self.reserve,
            },
            output: match overrides.output_kib {
                Some(k) => (in_range("output_kib", k, MAX_OUTPUT_KIB)? as usize) << 10,
                None => self.output,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_file_is_a_short_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("key");
        std::fs::write(&key, "s3cret\n").unwrap();
        assert_eq!(SecretSource::File { file: key }.read().unwrap().expose(), "s3cret");
        let long = dir.path().join("long");
        std::fs::write(&long, "x".repeat(MAX_SECRET_BYTES as usize + 1)).unwrap();
        assert!(SecretSource::File { file: long }.read().unwrap_err().contains("longer than"));
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::RUSR, 0).unwrap();
        assert!(SecretSource::File { file: fifo }.read().unwrap_err().contains("not a regular file"));
        let folder = SecretSource::File { file: dir.path().to_owned() };
        assert!(folder.read().unwrap_err().contains("not a regular file"));
    }
}
