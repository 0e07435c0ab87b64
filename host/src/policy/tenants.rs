//! Tenants as the operator configures them: a `[tenants.<id>]` table in the policy file, or
//! a `tenant.toml` in a tenant's own folder under a tenants directory. Each names where its
//! plugins come from, the host names it answers to, and its own grants and limits, in the
//! same shape as the policy file's (see [`PolicyFile`]).
//!
//! Parsing is pure, like the policy file's: sources and hosts are checked, nothing is read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use http::uri::Authority;
use serde::Deserialize;

use super::auth::AuthEntry;
use super::config::PluginEntry;
use super::{LimitOverrides, Limits, NeedsMode, PolicyError, PolicyFile, QuotaOverrides, Quotas, parse_sha256};

/// The name of a tenant's own file in its folder under a tenants directory.
pub const TENANT_FILE: &str = "tenant.toml";

/// One tenant's table, `[tenants.<id>]` or a `tenant.toml`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TenantEntry {
    /// Plugin directories and `.wasm` files.
    #[serde(default)]
    sources: Vec<PathBuf>,
    /// Host names whose requests to `/mcp` are this tenant's.
    #[serde(default)]
    hosts: Vec<String>,
    /// The SHA-256 (hex) of a bearer token for this tenant's admin routes alone.
    admin_token_sha256: Option<String>,
    needs_beyond_grants: Option<NeedsMode>,
    #[serde(default)]
    limits: LimitOverrides,
    #[serde(default)]
    quotas: QuotaOverrides,
    auth: Option<AuthEntry>,
    #[serde(default)]
    plugins: BTreeMap<String, PluginEntry>,
}

/// A tenant, parsed and checked.
#[derive(Debug)]
pub struct TenantFile {
    /// The tenant's id, as it appears in `/t/{id}/mcp`.
    pub id: String,
    /// Where its plugins come from: directories of components and single `.wasm` files.
    pub sources: Vec<PathBuf>,
    /// Host names (lowercase, without a port) routed to this tenant.
    pub hosts: Vec<String>,
    /// The SHA-256 of the token that administers this tenant (and no other).
    pub admin_token: Option<[u8; 32]>,
    /// Its grants and limits.
    pub policy: PolicyFile,
}

/// Whether `id` can name a tenant: 1 to 63 lowercase letters, digits, `-` and `_`, starting
/// with a letter or digit (it is a URL path segment and a label in logs).
fn check_id(id: &str) -> Result<(), String> {
    let mut chars = id.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !(first_ok && rest_ok && id.len() <= 63) {
        return Err(format!(
            "{id:?} is not a tenant id (1 to 63 of a-z, 0-9, - and _, starting with a letter or digit)"
        ));
    }
    Ok(())
}

impl TenantEntry {
    /// Check one tenant of a policy file (`path`); the tenant's limits apply on top of the
    /// file's defaults (command-line limits included), and its plugins' on top of those; its
    /// quotas on top of the file's.
    pub(super) fn check(
        self,
        id: &str,
        path: &Path,
        base_dir: &Path,
        (defaults, quotas): (Limits, Quotas),
        needs: NeedsMode,
    ) -> Result<TenantFile, PolicyError> {
        let failed = |message: String| PolicyError::Tenant { path: path.into(), tenant: id.into(), message };
        check_id(id).map_err(failed)?;
        if self.sources.is_empty() {
            return Err(failed("it has no sources (plugin directories or .wasm files)".into()));
        }
        let mut hosts = Vec::with_capacity(self.hosts.len());
        for host in &self.hosts {
            let authority: Authority =
                host.parse().map_err(|_| failed(format!("hosts: {host:?} is not a host name")))?;
            if authority.port().is_some() || authority.as_str().contains('@') {
                return Err(failed(format!("hosts: {host:?} must be a bare host name, without port or user")));
            }
            hosts.push(authority.host().to_ascii_lowercase());
        }
        let admin_token =
            match self.admin_token_sha256.as_deref() {
                Some(hex) => Some(parse_sha256(hex).ok_or_else(|| {
                    failed(format!("admin_token_sha256: {hex:?} is not a SHA-256 in hex (64 digits)"))
                })?),
                None => None,
            };
        let auth =
            self.auth.map(|auth| auth.check(base_dir)).transpose().map_err(|e| failed(format!("[auth]: {e}")))?;
        let defaults = defaults.with(&self.limits).map_err(|e| failed(format!("[limits]: {e}")))?;
        let quotas = quotas.with(&self.quotas).map_err(|e| failed(format!("[quotas]: {e}")))?;
        let needs = self.needs_beyond_grants.unwrap_or(needs);
        let mut policy = PolicyFile::of_plugins(path, base_dir, (defaults, quotas), needs, self.plugins)
            .map_err(|e| failed(e.to_string()))?;
        policy.set_auth(auth);
        let sources = self.sources.iter().map(|s| base_dir.join(s)).collect();
        Ok(TenantFile { id: id.into(), sources, hosts, admin_token, policy })
    }
}

impl TenantFile {
    /// Parse a tenant's own `tenant.toml` (at `path`, in the tenant's folder); without
    /// sources, the tenant serves the `.wasm` files of its folder.
    /// `inherited` are the policy file's limits, quotas and needs mode (or the defaults),
    /// which the tenant's own apply on top of, as for a tenant the policy file lists.
    pub fn parse(
        id: &str,
        text: Option<&str>,
        path: &Path,
        (base, quotas, needs): (Limits, Quotas, NeedsMode),
        flags: &LimitOverrides,
    ) -> Result<TenantFile, PolicyError> {
        let refused = |message| PolicyError::Tenant { path: path.into(), tenant: id.into(), message };
        let mut entry: TenantEntry = match text {
            Some(text) => match super::config::empty(text) {
                Some(message) => return Err(refused(message)),
                None => toml::from_str(text).map_err(|e| refused(e.to_string()))?,
            },
            None => TenantEntry::default(),
        };
        let folder = path.parent().unwrap_or(Path::new("."));
        if entry.sources.is_empty() {
            entry.sources.push(PathBuf::from("."));
        }
        let defaults = base.with(flags).map_err(PolicyError::Flags)?;
        entry.check(id, path, folder, (defaults, quotas), needs)
    }

    /// Refuse a host name, or an `[auth]` resource, given to two tenants: a token issued
    /// for one tenant's resource would be taken by the other, and the other's metadata would
    /// name a resource that is not its own (RFC 9728, section 3.3).
    pub fn check_unshared(tenants: &[TenantFile]) -> Result<(), PolicyError> {
        let mut seen: BTreeMap<(&str, &str), &str> = BTreeMap::new();
        for tenant in tenants {
            let hosts = tenant.hosts.iter().map(|host| ("host", host.as_str()));
            let resource = tenant.policy.auth().map(|auth| ("resource", auth.resource.as_str()));
            for (what, name) in hosts.chain(resource) {
                if let Some(other) = seen.insert((what, name), &tenant.id) {
                    return Err(PolicyError::Tenant {
                        path: tenant.policy.path().into(),
                        tenant: tenant.id.clone(),
                        message: format!("{what} {name} is also tenant {other}'s"),
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<PolicyFile, PolicyError> {
        PolicyFile::parse(text, Path::new("/etc/capsule/capsule.toml"), Limits::default(), &LimitOverrides::default())
    }

    #[test]
    fn tenants_are_parsed_without_the_file_system() {
        let text = r#"
            needs_beyond_grants = "refuse"
            [limits]
            memory_mib = 32
            [quotas]
            calls_per_minute = 60
            [tenants.acme]
            sources = ["acme", "/opt/shared/calc.wasm"]
            hosts = ["MCP.Acme.example"]
            admin_token_sha256 = "ABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABAB"
            [tenants.acme.limits]
            cpu_ms = 100
            [tenants.acme.quotas]
            concurrent_calls = 2
            [tenants.acme.plugins.files]
            dirs = [{ path = "/srv/acme", guest = "/data" }]
            [tenants.globex]
            sources = ["globex"]
            needs_beyond_grants = "warn"
        "#;
        let mut file = parse(text).unwrap();
        let [acme, globex] = &file.take_tenants()[..] else { panic!("two tenants") };
        assert_eq!(acme.id, "acme");
        assert_eq!(acme.sources, [PathBuf::from("/etc/capsule/acme"), PathBuf::from("/opt/shared/calc.wasm")]);
        assert_eq!(acme.hosts, ["mcp.acme.example"]);
        assert_eq!(acme.admin_token, Some([0xab; 32]));
        assert_eq!(globex.admin_token, None);
        assert_eq!(acme.policy.needs(), NeedsMode::Refuse);
        assert_eq!(globex.policy.needs(), NeedsMode::Warn);
        let defaults = acme.policy.defaults();
        assert_eq!((defaults.memory, defaults.cpu.as_millis()), (32 << 20, 100));
        assert_eq!(globex.policy.defaults().cpu, Limits::default().cpu);
        let (acme_quotas, globex_quotas) = (acme.policy.quotas(), globex.policy.quotas());
        assert_eq!((acme_quotas.concurrent_calls, globex_quotas.concurrent_calls), (Some(2), None));
        assert!(acme_quotas.rate.is_some() && globex_quotas.rate.is_some());
    }

    #[test]
    fn bad_tenants_are_refused() {
        for (text, expected) in [
            ("[tenants.Acme]\nsources = [\"a\"]", "is not a tenant id"),
            ("[tenants.\"a/b\"]\nsources = [\"a\"]", "is not a tenant id"),
            ("[tenants.a]\nhosts = [\"x\"]", "no sources"),
            ("[tenants.a]\nsources = [\"a\"]\nhosts = [\"x:80\"]", "bare host name"),
            (
                "[tenants.a]\nsources = [\"a\"]\nhosts = [\"x\"]\n[tenants.b]\nsources = [\"b\"]\nhosts = [\"X\"]",
                "also tenant a's",
            ),
            (
                "[tenants.a]\nsources = [\"a\"]\n[tenants.a.auth]\nresource = \"https://m.example/t/a/mcp\"\n\
                 api_keys = [{ subject = \"x\", sha256 = \"0000000000000000000000000000000000000000000000000000000000000000\", scopes = [] }]\n\
                 [tenants.b]\nsources = [\"b\"]\n[tenants.b.auth]\nresource = \"https://m.example/t/a/mcp/\"\n\
                 api_keys = [{ subject = \"y\", sha256 = \"0000000000000000000000000000000000000000000000000000000000000000\", scopes = [] }]",
                "resource https://m.example/t/a/mcp is also tenant a's",
            ),
            ("[tenants.a]\nsources = [\"a\"]\n[tenants.a.plugins.p]\nroots = true", "has no dirs"),
            ("[tenants.a]\nsources = [\"a\"]\ncolour = 1", "unknown field"),
            ("[tenants.a]\nsources = [\"a\"]\nadmin_token_sha256 = \"12ab\"", "not a SHA-256"),
            ("[tenants.a]\nsources = [\"a\"]\n[tenants.a.quotas]\ninstances = 0", "[quotas]: instances"),
            ("[plugins.p]\n[tenants.a]\nsources = [\"a\"]", "default tenant"),
            (
                "[auth]\nresource = \"https://mcp.example/mcp\"\napi_keys = [{ subject = \"s\", sha256 = \"abababababababababababababababababababababababababababababababab\", scopes = [] }]\n[tenants.a]\nsources = [\"a\"]",
                "top-level [auth] guards the single default tenant",
            ),
        ] {
            let error = parse(text).unwrap_err().to_string();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }

    fn inherited() -> (Limits, Quotas, NeedsMode) {
        (Limits::default(), Quotas::default(), NeedsMode::default())
    }

    #[test]
    fn a_tenant_folder_serves_itself_by_default() {
        let path = Path::new("/srv/tenants/acme/tenant.toml");
        let tenant = TenantFile::parse("acme", None, path, inherited(), &LimitOverrides::default()).unwrap();
        assert_eq!(tenant.sources, [PathBuf::from("/srv/tenants/acme/.")]);
        let text = "hosts = [\"acme.test\"]\n[plugins.calc.limits]\nconcurrency = 2";
        let tenant = TenantFile::parse("acme", Some(text), path, inherited(), &LimitOverrides::default()).unwrap();
        assert_eq!(tenant.hosts, ["acme.test"]);
        assert!(TenantFile::parse("Acme", None, path, inherited(), &LimitOverrides::default()).is_err());
        // An empty `tenant.toml` is one being written, not a tenant without `[auth]`.
        let empty = TenantFile::parse("acme", Some("\n"), path, inherited(), &LimitOverrides::default());
        assert!(empty.is_err_and(|e| e.to_string().contains("the file is empty")));
    }
}
