//! The policy file (TOML): parsing, resolution and every check that can be made before a
//! plugin runs. Unknown keys are errors, so a typo never silently grants or limits nothing.
//!
//! Parsing is pure ([`PolicyFile::parse`]): every rule that needs no file system is checked
//! there, so a policy can be checked on a machine that lacks its directories and secrets.
//! [`PolicyFile::resolve`] then does the I/O: directories are made canonical and must exist,
//! and secrets are read.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use thiserror::Error;

use super::auth::AuthEntry;
use super::tenants::{TenantEntry, TenantFile};
use super::{
    AuthConfig, DirGrant, Grants, HostRule, LimitOverrides, Limits, NeedsMode, QuotaOverrides, Quotas, Secret,
    SecretSource,
};

/// Why a policy file cannot be used. The server refuses to start with one (and a reload
/// keeps the previous policy).
#[derive(Debug, Error)]
pub enum PolicyError {
    #[error("cannot read the policy file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("policy file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("policy file {path}: plugin {plugin}: {message}")]
    Plugin { path: PathBuf, plugin: String, message: String },
    #[error("policy file {path}: [limits]: {message}")]
    Limits { path: PathBuf, message: String },
    #[error("policy file {path}: [quotas]: {message}")]
    Quotas { path: PathBuf, message: String },
    #[error("policy file {path}: [auth]: {message}")]
    Auth { path: PathBuf, message: String },
    #[error("command-line limits: {0}")]
    Flags(String),
    #[error("{path}: tenant {tenant}: {message}")]
    Tenant { path: PathBuf, tenant: String, message: String },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    needs_beyond_grants: NeedsMode,
    #[serde(default)]
    limits: LimitOverrides,
    #[serde(default)]
    quotas: QuotaOverrides,
    auth: Option<AuthEntry>,
    #[serde(default)]
    plugins: BTreeMap<String, PluginEntry>,
    #[serde(default)]
    tenants: BTreeMap<String, TenantEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PluginEntry {
    #[serde(default)]
    dirs: Vec<DirEntry>,
    #[serde(default)]
    roots: bool,
    #[serde(default)]
    network: Vec<String>,
    #[serde(default)]
    tcp: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    secrets: BTreeMap<String, SecretSource>,
    #[serde(default)]
    limits: LimitOverrides,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DirEntry {
    path: PathBuf,
    #[serde(default)]
    write: bool,
    guest: Option<String>,
}

/// The policy in force: grants and limits for every plugin, by name.
#[derive(Debug, Clone)]
pub struct Policy {
    source: Option<PathBuf>,
    defaults: Limits,
    needs: NeedsMode,
    quotas: Quotas,
    plugins: BTreeMap<String, Arc<Grants>>,
}

impl Policy {
    /// No policy file: nothing granted to anyone, and for every plugin the default limits
    /// with the command line's `flags` over them.
    pub fn empty(flags: &LimitOverrides) -> Result<Policy, PolicyError> {
        let defaults = Limits::default().with(flags).map_err(PolicyError::Flags)?;
        Ok(Policy {
            source: None,
            defaults,
            needs: NeedsMode::default(),
            quotas: Quotas::default(),
            plugins: BTreeMap::new(),
        })
    }

    /// Read a policy file. `base` is the limits before the file's `[limits]`; `flags` are
    /// the command line's, which win over the file's `[limits]` but not over a plugin's own.
    pub fn open(path: &Path, base: Limits, flags: &LimitOverrides) -> Result<Policy, PolicyError> {
        let text = crate::files::read_text(path, crate::files::MAX_CONFIG_BYTES)
            .map_err(|source| PolicyError::Read { path: path.into(), source })?;
        Policy::parse(&text, path, base, flags)
    }

    /// Parse a policy file's text and resolve it; relative paths in it are relative to
    /// `path`'s directory.
    pub fn parse(text: &str, path: &Path, base: Limits, flags: &LimitOverrides) -> Result<Policy, PolicyError> {
        PolicyFile::parse(text, path, base, flags)?.resolve()
    }

    /// The file this policy came from, if any.
    pub fn source(&self) -> Option<&Path> {
        self.source.as_deref()
    }

    /// The policy with only the granted directories that exist here, for running plugins
    /// under a policy from [`PolicyFile::resolve_here`].
    pub fn present(&self) -> Policy {
        let mut policy = self.clone();
        for grants in policy.plugins.values_mut() {
            if grants.dirs.iter().any(|d| !d.path.is_dir()) {
                let mut kept = (**grants).clone();
                kept.dirs.retain(|d| d.path.is_dir());
                *grants = Arc::new(kept);
            }
        }
        policy
    }

    /// What `plugin` is granted: its entry, or nothing but the default limits.
    pub fn grants(&self, plugin: &str) -> Arc<Grants> {
        self.plugins
            .get(plugin)
            .cloned()
            .unwrap_or_else(|| Arc::new(Grants { limits: self.defaults, ..Grants::default() }))
    }

    /// The plugins the policy has an entry for.
    pub fn named(&self) -> impl Iterator<Item = &str> {
        self.plugins.keys().map(String::as_str)
    }

    /// What to do with a plugin that declares needs beyond its grants.
    pub fn needs_mode(&self) -> NeedsMode {
        self.needs
    }

    /// The tenant's quotas.
    pub fn quotas(&self) -> Quotas {
        self.quotas
    }
}

/// A policy file parsed and checked without touching the file system.
#[derive(Debug)]
pub struct PolicyFile {
    path: PathBuf,
    defaults: Limits,
    needs: NeedsMode,
    quotas: Quotas,
    auth: Option<AuthConfig>,
    plugins: BTreeMap<String, PluginGrants>,
    tenants: Vec<TenantFile>,
}

/// One plugin's grants as the file states them: paths not yet resolved, secrets not yet read.
#[derive(Debug)]
pub(super) struct PluginGrants {
    dirs: Vec<DirEntry>,
    roots: bool,
    network: Arc<[HostRule]>,
    tcp: Arc<[SocketAddr]>,
    env: BTreeMap<String, String>,
    secrets: BTreeMap<String, SecretSource>,
    limits: Limits,
}

impl PolicyFile {
    /// Parse and check a policy file's text. `base` is the limits before the file's
    /// `[limits]`; `flags` are the command line's, which win over the file's `[limits]` but
    /// not over a plugin's own. Relative paths are relative to `path`'s directory.
    pub fn parse(text: &str, path: &Path, base: Limits, flags: &LimitOverrides) -> Result<PolicyFile, PolicyError> {
        if let Some(message) = empty(text) {
            return Err(PolicyError::Parse { path: path.into(), message });
        }
        let file: File =
            toml::from_str(text).map_err(|e| PolicyError::Parse { path: path.into(), message: e.to_string() })?;
        let defaults = base
            .with(&file.limits)
            .map_err(|message| PolicyError::Limits { path: path.into(), message })?
            .with(flags)
            .map_err(PolicyError::Flags)?;
        let quotas = Quotas::default()
            .with(&file.quotas)
            .map_err(|message| PolicyError::Quotas { path: path.into(), message })?;
        let base_dir = path.parent().unwrap_or(Path::new("."));
        let auth = file
            .auth
            .map(|auth| auth.check(base_dir))
            .transpose()
            .map_err(|message| PolicyError::Auth { path: path.into(), message })?;
        if !file.tenants.is_empty()
            && let Some(plugin) = file.plugins.keys().next()
        {
            return Err(PolicyError::Plugin {
                path: path.into(),
                plugin: plugin.clone(),
                message: "a top-level [plugins.*] entry grants the single default tenant, which a file with \
                          [tenants] does not have; grant it inside [tenants.<id>.plugins]"
                    .into(),
            });
        }
        if !file.tenants.is_empty() && auth.is_some() {
            return Err(PolicyError::Auth {
                path: path.into(),
                message: "a top-level [auth] guards the single default tenant, which a file with [tenants] does \
                          not have; give each tenant its own [tenants.<id>.auth]"
                    .into(),
            });
        }
        let mut tenants = Vec::with_capacity(file.tenants.len());
        for (id, entry) in file.tenants {
            tenants.push(entry.check(&id, path, base_dir, (defaults, quotas), file.needs_beyond_grants)?);
        }
        TenantFile::check_unshared(&tenants)?;
        let mut policy =
            PolicyFile::of_plugins(path, base_dir, (defaults, quotas), file.needs_beyond_grants, file.plugins)?;
        policy.tenants = tenants;
        policy.auth = auth;
        Ok(policy)
    }

    /// A policy of these plugin entries (a file's, or one tenant's).
    pub(super) fn of_plugins(
        path: &Path,
        base_dir: &Path,
        (defaults, quotas): (Limits, Quotas),
        needs: NeedsMode,
        entries: BTreeMap<String, PluginEntry>,
    ) -> Result<PolicyFile, PolicyError> {
        let mut plugins = BTreeMap::new();
        for (name, entry) in entries {
            let grants = entry.check(base_dir, defaults).map_err(|message| PolicyError::Plugin {
                path: path.into(),
                plugin: name.clone(),
                message,
            })?;
            plugins.insert(name, grants);
        }
        Ok(PolicyFile { path: path.into(), defaults, needs, quotas, auth: None, plugins, tenants: Vec::new() })
    }

    /// The file this policy was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The limits of a plugin without its own.
    pub fn defaults(&self) -> Limits {
        self.defaults
    }

    /// What to do with a plugin that declares needs beyond its grants.
    pub fn needs(&self) -> NeedsMode {
        self.needs
    }

    /// The quotas of the tenant this policy is.
    pub fn quotas(&self) -> Quotas {
        self.quotas
    }

    /// Authorization settings of the tenant this policy is, if its endpoint takes tokens.
    pub fn auth(&self) -> Option<&AuthConfig> {
        self.auth.as_ref()
    }

    pub(super) fn set_auth(&mut self, auth: Option<AuthConfig>) {
        self.auth = auth;
    }

    /// The largest memory limit of any plugin, its tenants' included.
    pub fn max_memory(&self) -> usize {
        let own = self.plugins.values().map(|g| g.limits.memory).fold(self.defaults.memory, usize::max);
        self.tenants.iter().map(|t| t.policy.max_memory()).fold(own, usize::max)
    }

    /// Whether the file grants the single default tenant anything (plugins, or `[auth]`),
    /// which a server with tenants does not have.
    pub fn speaks_for_default_tenant(&self) -> bool {
        !self.plugins.is_empty() || self.auth.is_some()
    }

    /// Take the file's tenants out of it.
    pub fn take_tenants(&mut self) -> Vec<TenantFile> {
        std::mem::take(&mut self.tenants)
    }

    /// Resolve the file against this machine: directories made canonical (they must exist),
    /// secrets read. A file's tenants are resolved on their own ([`TenantFile`]).
    pub fn resolve(self) -> Result<Policy, PolicyError> {
        self.resolve_with(None)
    }

    /// Resolve as far as this machine allows, to describe the policy elsewhere than where it
    /// will serve (`capsule check`): a directory that is not here stays as written (run a
    /// plugin under [`Policy::present`]) and a secret that cannot be read is granted empty,
    /// each said in the list returned.
    pub fn resolve_here(self) -> Result<(Policy, Vec<String>), PolicyError> {
        let mut unavailable = Vec::new();
        let policy = self.resolve_with(Some(&mut unavailable))?;
        Ok((policy, unavailable))
    }

    fn resolve_with(self, mut unavailable: Option<&mut Vec<String>>) -> Result<Policy, PolicyError> {
        let mut plugins = BTreeMap::new();
        for (name, grants) in self.plugins {
            let grants = grants.resolve(&name, unavailable.as_deref_mut()).map_err(|message| PolicyError::Plugin {
                path: self.path.clone(),
                plugin: name.clone(),
                message,
            })?;
            plugins.insert(name, Arc::new(grants));
        }
        Ok(Policy { source: Some(self.path), defaults: self.defaults, needs: self.needs, quotas: self.quotas, plugins })
    }
}

impl PluginEntry {
    /// Every check that needs no file system; paths become relative to `base_dir`.
    pub(super) fn check(self, base_dir: &Path, defaults: Limits) -> Result<PluginGrants, String> {
        let mut dirs = Vec::with_capacity(self.dirs.len());
        for dir in self.dirs {
            if let Some(guest) = &dir.guest
                && (!guest.starts_with('/') || guest.split('/').any(|c| c == ".." || c == "."))
            {
                return Err(format!("guest path {guest:?} must be absolute, without . or .."));
            }
            dirs.push(DirEntry { path: base_dir.join(&dir.path), ..dir });
        }
        if self.roots && dirs.is_empty() {
            return Err("roots = true narrows the plugin's directories to the client's roots, but it has no dirs; \
                 grant the directories the roots may fall in"
                .into());
        }
        let network = self
            .network
            .iter()
            .map(|rule| rule.parse::<HostRule>().map_err(|e| format!("network: {e}")))
            .collect::<Result<Arc<[_]>, _>>()?;
        let tcp = self.tcp.iter().map(|rule| parse_tcp(rule)).collect::<Result<Arc<[_]>, _>>()?;
        for name in self.env.keys().chain(self.secrets.keys()) {
            check_env_name(name)?;
        }
        if let Some(name) = self.env.keys().find(|name| self.secrets.contains_key(*name)) {
            return Err(format!("{name} is both an env value and a secret"));
        }
        let secrets = self.secrets.into_iter().map(|(name, source)| (name, source.relative_to(base_dir))).collect();
        let limits = defaults.with(&self.limits).map_err(|e| format!("limits: {e}"))?;
        Ok(PluginGrants { dirs, roots: self.roots, network, tcp, env: self.env, secrets, limits })
    }
}

impl PluginGrants {
    /// Resolve `plugin`'s grants. With `unavailable`, what this machine lacks is noted there
    /// rather than failing (see [`PolicyFile::resolve_here`]).
    fn resolve(self, plugin: &str, mut unavailable: Option<&mut Vec<String>>) -> Result<Grants, String> {
        let mut dirs = Vec::with_capacity(self.dirs.len());
        for dir in self.dirs {
            let found = refuse_planted_links(&dir.path)
                .and_then(|()| {
                    std::fs::canonicalize(&dir.path).map_err(|e| format!("directory {}: {e}", dir.path.display()))
                })
                .and_then(|path| match path.is_dir() {
                    true => Ok(path),
                    false => Err(format!("{} is not a directory", path.display())),
                });
            let path = match (found, unavailable.as_deref_mut()) {
                (Ok(path), _) => path,
                // Described as written: see `Policy::present`.
                (Err(e), Some(unavailable)) => {
                    unavailable.push(format!("plugin {plugin}: {e}"));
                    dir.path
                }
                (Err(e), None) => return Err(e),
            };
            let guest = match dir.guest {
                Some(guest) => guest,
                None => path
                    .to_str()
                    .ok_or_else(|| format!("{} is not valid UTF-8; give it a guest path", path.display()))?
                    .to_owned(),
            };
            dirs.push(DirGrant { path, guest, write: dir.write });
        }
        let mut secrets = Vec::with_capacity(self.secrets.len());
        for (name, source) in self.secrets {
            let value = match (source.read(), unavailable.as_deref_mut()) {
                (Ok(value), _) => value,
                (Err(e), Some(unavailable)) => {
                    unavailable.push(format!("plugin {plugin}: secret {name}: {e}"));
                    Secret::new(String::new())
                }
                (Err(e), None) => return Err(format!("secret {name}: {e}")),
            };
            secrets.push((name, value));
        }
        Ok(Grants {
            dirs,
            roots: self.roots,
            network: self.network,
            tcp: self.tcp,
            env: self.env.into_iter().collect(),
            secrets,
            limits: self.limits,
        })
    }
}

/// Refuse a granted directory reached through a symbolic link owned by the user Capsule runs
/// as. A plugin with a writable grant can make such a link (swap a directory granted inside
/// its own for `pub -> /etc`); calls never follow it, but the next reading of the policy
/// would resolve the grant through it, to wherever it leads. Links the plugins cannot have
/// made (another user's: root's `/tmp` on macOS) are followed; for one of Capsule's own user,
/// the operator names the directory it leads to.
fn refuse_planted_links(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let Ok(absolute) = std::path::absolute(path) else { return Ok(()) };
    let me = rustix::process::geteuid().as_raw();
    let planted = absolute.ancestors().find(|step| {
        std::fs::symlink_metadata(step).is_ok_and(|meta| meta.file_type().is_symlink() && meta.uid() == me)
    });
    match planted {
        None => Ok(()),
        Some(link) => Err(format!(
            "directory {}: {} is a symbolic link owned by the user Capsule runs as, which a plugin with a \
             writable grant could have made; grant the directory it leads to by its own path",
            path.display(),
            link.display()
        )),
    }
}

fn check_env_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.contains(['=', '\0']) {
        return Err(format!("{name:?} is not a valid environment variable name"));
    }
    Ok(())
}

/// An empty file is refused, not read as "no policy": a file being rewritten in place is
/// empty for a moment, and applying that moment would drop its `[auth]`, grants and limits
/// (a reload keeps the policy in force instead). A comment says "nothing" on purpose.
pub(crate) fn empty(text: &str) -> Option<String> {
    text.trim().is_empty().then(|| {
        "the file is empty (still being written?); a file that means no policy needs at least a comment".to_owned()
    })
}

/// A raw TCP grant: an IP address and port (`10.0.0.5:5432`, `[::1]:6379`). Names are not
/// accepted: plugins get no DNS, so a grant is exactly the address connected to.
fn parse_tcp(rule: &str) -> Result<SocketAddr, String> {
    rule.parse::<SocketAddr>()
        .ok()
        .filter(|addr| addr.port() != 0 && !addr.ip().is_unspecified())
        .ok_or_else(|| format!("tcp: {rule:?} is not an IP address and port (write 10.0.0.5:5432 or [::1]:6379)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Policy, PolicyError> {
        Policy::parse(text, &std::env::temp_dir().join("capsule.toml"), Limits::default(), &LimitOverrides::default())
    }

    #[test]
    fn an_empty_file_is_refused_and_a_comment_grants_nothing() {
        for text in ["", " \n\t\n"] {
            assert!(parse(text).unwrap_err().to_string().contains("the file is empty"));
        }
        let policy = parse("# nothing granted\n").unwrap();
        let grants = policy.grants("anything");
        assert!(grants.dirs.is_empty() && grants.network.is_empty() && grants.env.is_empty());
        assert_eq!(grants.limits, Limits::default());
    }

    #[test]
    fn unknown_keys_are_errors() {
        for text in [
            "colour = 1",
            "[plugins.a]\ndirectories = []",
            "[plugins.a]\ndirs = [{ path = \".\", writable = true }]",
            "[limits]\nmemory = 3",
            "[plugins.a.limits]\ncpu = 3",
        ] {
            let error = parse(text).unwrap_err().to_string();
            assert!(error.contains("unknown field"), "{text}: {error}");
        }
    }

    #[test]
    fn dirs_are_canonical_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!("[plugins.a]\ndirs = [{{ path = {:?}, write = true }}]", dir.path().join("x/../"));
        std::fs::create_dir(dir.path().join("x")).unwrap();
        let grants = parse(&text).unwrap().grants("a");
        let canonical = dir.path().canonicalize().unwrap();
        assert_eq!(
            grants.dirs,
            vec![DirGrant { guest: canonical.to_str().unwrap().into(), path: canonical, write: true }]
        );
        let missing = format!("[plugins.a]\ndirs = [{{ path = {:?} }}]", dir.path().join("missing"));
        assert!(parse(&missing).unwrap_err().to_string().contains("plugin a: directory"));
        let bad_guest = format!("[plugins.a]\ndirs = [{{ path = {:?}, guest = \"/a/../b\" }}]", dir.path());
        assert!(parse(&bad_guest).unwrap_err().to_string().contains("guest path"));
        assert!(parse("[plugins.a]\nroots = true").unwrap_err().to_string().contains("has no dirs"));
    }

    #[test]
    fn limits_stack_defaults_flags_and_plugin() {
        let text = "[limits]\nmemory_mib = 32\ncpu_ms = 100\n[plugins.a.limits]\nconcurrency = 2\ncpu_ms = 50";
        let flags = LimitOverrides { cpu_ms: Some(200), ..LimitOverrides::default() };
        let policy = Policy::parse(text, Path::new("/x/capsule.toml"), Limits::default(), &flags).unwrap();
        let other = policy.grants("b").limits;
        assert_eq!((other.memory, other.cpu.as_millis()), (32 << 20, 200));
        let a = policy.grants("a").limits;
        assert_eq!((a.memory, a.cpu.as_millis(), a.concurrency), (32 << 20, 50, 2));
        assert!(parse("[plugins.a.limits]\nconcurrency = 0").is_err());
        assert_eq!(a.reserved_instances(), 2, "the default reserve, within its concurrency");
        let none = parse("[plugins.a.limits]\nreserve = 0").unwrap().grants("a").limits;
        assert_eq!(none.reserved_instances(), 0);
        let capped = parse("[plugins.a.limits]\nreserve = 9\nconcurrency = 3").unwrap().grants("a").limits;
        assert_eq!(capped.reserved_instances(), 3, "no more than it may use");
        assert!(parse("[plugins.a.limits]\nreserve = 10001").is_err());
    }

    #[test]
    fn limits_that_would_overflow_are_errors() {
        for text in [
            "[limits]\nmemory_mib = 18014398509481984",
            "[limits]\noutput_kib = 18014398509481984",
            "[plugins.a.limits]\nmemory_mib = 4097",
            "[plugins.a.limits]\ncpu_ms = 18446744073709551615",
            "[limits]\ntimeout_ms = 0",
        ] {
            let error = parse(text).unwrap_err().to_string();
            assert!(error.contains("out of range"), "{text}: {error}");
        }
        assert_eq!(parse("[limits]\nmemory_mib = 4096").unwrap().grants("a").limits.memory, 4 << 30);
    }

    #[test]
    fn secrets_come_from_files_and_never_print() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "s3cret\n").unwrap();
        let text = "[plugins.a]\nsecrets = { TOKEN = { file = \"token\" } }";
        let policy =
            Policy::parse(text, &dir.path().join("capsule.toml"), Limits::default(), &Default::default()).unwrap();
        let grants = policy.grants("a");
        assert_eq!(grants.secrets[0].1.expose(), "s3cret");
        assert!(!format!("{policy:?}").contains("s3cret"));
        for (twofold, expected) in [
            ("{ env = \"X\", file = \"/etc/shadow\" }", "one of the two"),
            ("{ env = \"X\", typo = 1 }", "unknown field `typo`"),
            ("{}", "one of the two"),
        ] {
            let error = parse(&format!("[plugins.a]\nsecrets = {{ T = {twofold} }}")).unwrap_err().to_string();
            assert!(error.contains(expected), "{twofold}: {error}");
        }
        let unset = "[plugins.a]\nsecrets = { T = { env = \"CAPSULE_TEST_SURELY_UNSET\" } }";
        assert!(parse(unset).unwrap_err().to_string().contains("is not set"));
        assert!(parse("[plugins.a]\nenv = { \"A=B\" = \"x\" }").is_err());
    }

    #[test]
    fn a_policy_is_checked_without_its_directories_and_resolved_with_them() {
        let text = "[plugins.a]\ndirs = [{ path = \"/surely/not/here\", guest = \"/data\" }]\n\
                    secrets = { TOKEN = { file = \"/surely/not/here/token\" } }\n\
                    [plugins.b]\ntcp = [\"10.0.0.5:5432\"]";
        let path = Path::new("/elsewhere/capsule.toml");
        let (base, flags) = (Limits::default(), LimitOverrides::default());
        let file = PolicyFile::parse(text, path, base, &flags).expect("no file system needed to check it");
        let error = PolicyFile::parse(text, path, base, &flags).unwrap().resolve().unwrap_err().to_string();
        assert!(error.contains("plugin a") && error.contains("/surely/not/here"), "{error}");
        // Described on a machine without them: what is missing is said, the rest stands.
        let (policy, unavailable) = file.resolve_here().unwrap();
        assert_eq!(policy.grants("a").dirs[0].guest, "/data");
        assert!(policy.present().grants("a").dirs.is_empty() && policy.grants("b").tcp.len() == 1);
        assert_eq!(unavailable.len(), 2, "{unavailable:?}");
        assert!(unavailable[0].contains("plugin a: directory /surely/not/here"), "{unavailable:?}");
        assert!(unavailable[1].contains("plugin a: secret TOKEN"), "{unavailable:?}");
        // What can be wrong without looking at the machine is found without looking at it.
        let bad_guest = "[plugins.a]\ndirs = [{ path = \"/surely/not/here\", guest = \"data/../x\" }]";
        let error = PolicyFile::parse(bad_guest, path, base, &flags).unwrap_err().to_string();
        assert!(error.contains("must be absolute"), "{error}");
        let roots_without_dirs = "[plugins.a]\nroots = true";
        assert!(PolicyFile::parse(roots_without_dirs, path, base, &flags).is_err());
    }

    #[test]
    fn tcp_grants_are_addresses_and_ports() {
        let grants = parse("[plugins.a]\ntcp = [\"10.0.0.5:5432\", \"[::1]:6379\"]").unwrap().grants("a");
        let expected: Vec<SocketAddr> = vec!["10.0.0.5:5432".parse().unwrap(), "[::1]:6379".parse().unwrap()];
        assert_eq!(&grants.tcp[..], &expected[..]);
        for bad in ["db.internal:5432", "10.0.0.5", "10.0.0.5:0", "0.0.0.0:80"] {
            let error = parse(&format!("[plugins.a]\ntcp = [{bad:?}]")).unwrap_err().to_string();
            assert!(error.contains("is not an IP address and port"), "{bad}: {error}");
        }
    }
}
