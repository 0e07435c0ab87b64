//! The tenants a server hosts, kept in step with their configuration.
//!
//! A tenant is an id, the host names routed to it, and its own [`Loader`] (sources, policy,
//! catalog) and [`Shared`] (sessions, subscriptions, list-change notices): nothing of one
//! tenant is reachable from another's. They come from the policy file's `[tenants.<id>]`
//! tables and from the folders of a tenants directory; with neither, the server has one
//! tenant, [`DEFAULT_TENANT`], serving the command line's plugins under the file's top-level
//! policy.
//!
//! The registry publishes the set on a watch channel, like the loader publishes catalogs.
//! Reading the configuration again (the file or the directory changed, or the operator asked)
//! starts new tenants, reconfigures the others in place (their sessions and in-flight calls
//! carry on) and drops removed ones: calls they are running finish on what they started
//! with. A configuration that fails to parse changes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use thiserror::Error;
use tokio::sync::{Mutex, watch};
use tokio_util::sync::CancellationToken;

use crate::auth::Authenticator;
use crate::loader::{DEFAULT_TENANT, Loader, Sources, Status};
use crate::mcp::{Shared, StateCodec};
use crate::policy::{
    LimitOverrides, Limits, NeedsMode, Policy, PolicyError, PolicyFile, Quotas, TENANT_FILE, TenantFile,
};
use crate::runtime::PluginRuntime;
use crate::watch::{Change, FileWatch, settle};

/// Why the tenants' configuration cannot be used.
#[derive(Debug, Error)]
pub enum TenantsError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("cannot read the tenants directory {path}: {source}")]
    Dir { path: PathBuf, source: std::io::Error },
    #[error("tenant {0} is configured twice (in the policy file and the tenants directory)")]
    Duplicate(String),
    #[error("no tenant {0}")]
    Unknown(String),
    #[error("several tenants are configured ({0}); name one with --tenant")]
    Ambiguous(String),
    #[error("tenant {0}: {1}")]
    Auth(String, String),
    #[error("tenant {0}: {1}")]
    Folder(String, String),
}

/// Where the tenants' configuration comes from.
#[derive(Debug, Clone, Default)]
pub struct TenantsConfig {
    /// The policy file.
    pub policy: Option<PathBuf>,
    /// A directory with one folder per tenant.
    pub dir: Option<PathBuf>,
    /// Limits given on the command line.
    pub flags: LimitOverrides,
    /// The command line's plugins: the default tenant's sources.
    pub sources: Sources,
    /// Watch plugin sources and the configuration for changes.
    pub watch: bool,
}

/// One tenant, as it is being served.
pub struct Tenant {
    pub id: Arc<str>,
    /// Host names (lowercase) whose `/mcp` requests are this tenant's.
    pub hosts: Vec<String>,
    /// The SHA-256 of the token that administers this tenant alone, if it has one.
    pub admin_token: Option<[u8; 32]>,
    /// The resource server guarding the tenant's endpoint, if it takes tokens.
    pub auth: Option<Arc<Authenticator>>,
    pub loader: Arc<Loader>,
    pub shared: Arc<Shared>,
    /// Stops the tenant's watcher when it is removed.
    stop: CancellationToken,
}

/// The tenants being served, by id.
#[derive(Default)]
pub struct TenantSet {
    pub tenants: BTreeMap<Arc<str>, Arc<Tenant>>,
}

impl TenantSet {
    /// Keep `running` (if the tenant runs) as it is: its configuration could not be taken.
    fn keep(&mut self, running: Option<&Arc<Tenant>>) {
        if let Some(running) = running {
            self.tenants.insert(running.id.clone(), running.clone());
        }
    }

    /// The default tenant, when it is the only one: no tenants are configured.
    pub fn default_tenant(&self) -> Option<&Arc<Tenant>> {
        self.tenants.get(DEFAULT_TENANT).filter(|_| self.tenants.len() == 1)
    }

    /// The tenant a host name is routed to, if any.
    pub fn by_host(&self, host: &str) -> Option<&Arc<Tenant>> {
        self.tenants.values().find(|t| t.hosts.iter().any(|h| h == host))
    }
}

/// One tenant's configuration, parsed.
struct Spec {
    id: String,
    hosts: Vec<String>,
    admin_token: Option<[u8; 32]>,
    sources: Sources,
    /// `None`: a default tenant without a policy file (nothing granted, default limits).
    policy: Option<PolicyFile>,
}

/// The resource server a tenant's policy asks for, if it has `[auth]`.
fn guard(policy: Option<&PolicyFile>) -> Result<Option<Arc<Authenticator>>, String> {
    policy.and_then(PolicyFile::auth).map(|config| Authenticator::new(config.clone()).map(Arc::new)).transpose()
}

/// Resolve a tenant's policy against this machine.
fn resolve(policy: Option<PolicyFile>, flags: &LimitOverrides) -> Result<Policy, PolicyError> {
    match policy {
        Some(file) => file.resolve(),
        None => Policy::empty(flags),
    }
}

/// Every tenant's configuration as read, before any tenant starts: the engine is sized from
/// it ([`Configuration::max_memory`]), then the tenants start on it.
pub struct Configuration(Vec<Spec>, BTreeSet<String>);

impl Configuration {
    /// Read the policy file and the tenants directory.
    pub fn read(config: &TenantsConfig) -> Result<Configuration, TenantsError> {
        read(config).map(|(specs, with_file)| Configuration(specs, with_file))
    }

    /// Every tenant's plugin sources.
    pub fn sources(&self) -> Vec<Sources> {
        self.0.iter().map(|spec| spec.sources.clone()).collect()
    }

    /// The largest memory limit any tenant's policy grants: what each sandbox's memory slot
    /// must hold.
    pub fn max_memory(&self, flags: &LimitOverrides) -> Result<usize, TenantsError> {
        let base = Limits::default().with(flags).map_err(PolicyError::Flags)?.memory;
        Ok(self.0.iter().filter_map(|s| s.policy.as_ref()).map(PolicyFile::max_memory).fold(base, usize::max))
    }

    /// The policy of one tenant, resolved as far as this machine allows (with what it lacks):
    /// the one named, or the only one (the default tenant when none are configured).
    pub fn policy_of(
        self,
        tenant: Option<&str>,
        flags: &LimitOverrides,
    ) -> Result<(Policy, Vec<String>), TenantsError> {
        let Configuration(mut specs, _) = self;
        let at = match tenant {
            Some(id) => specs.iter().position(|s| s.id == id).ok_or_else(|| TenantsError::Unknown(id.into()))?,
            None if specs.len() == 1 => 0,
            None => {
                let ids: Vec<&str> = specs.iter().map(|s| s.id.as_str()).collect();
                return Err(TenantsError::Ambiguous(ids.join(", ")));
            }
        };
        Ok(match specs.swap_remove(at).policy {
            Some(file) => file.resolve_here()?,
            None => (Policy::empty(flags)?, Vec::new()),
        })
    }
}

/// The server's tenants.
pub struct Tenants {
    runtime: PluginRuntime,
    codec: StateCodec,
    config: TenantsConfig,
    stop: CancellationToken,
    published: watch::Sender<Arc<TenantSet>>,
    /// Why the configuration on disk is not the one in force, if it is not.
    error: Mutex<Option<String>>,
    /// The tenant folders that had a `tenant.toml` at the last reading: one found without
    /// it is most likely being saved (renamed away, then written), not meant to open up.
    with_file: std::sync::Mutex<BTreeSet<String>>,
}

impl Tenants {
    /// Start every tenant of `read` (the configuration `config` names, as read at start). A
    /// policy that cannot be resolved is an error here (the server does not start); later it
    /// only keeps the one in force. Their plugins load in the background ([`Loader::start`]).
    pub fn start(
        runtime: PluginRuntime,
        codec: StateCodec,
        config: TenantsConfig,
        Configuration(specs, with_file): Configuration,
        stop: CancellationToken,
    ) -> Result<Arc<Tenants>, TenantsError> {
        let tenants = Arc::new(Tenants {
            runtime,
            codec,
            config,
            stop,
            published: watch::Sender::new(Arc::default()),
            error: Mutex::new(None),
            with_file: std::sync::Mutex::new(with_file),
        });
        let mut set = TenantSet::default();
        for Spec { id, hosts, admin_token, sources, policy } in specs {
            let auth = guard(policy.as_ref()).map_err(|e| TenantsError::Auth(id.clone(), e))?;
            let policy = resolve(policy, &tenants.config.flags)?;
            let tenant = tenants.start_one(id, (hosts, admin_token, auth), sources, policy);
            set.tenants.insert(tenant.id.clone(), tenant);
        }
        tenants.published.send_replace(Arc::new(set));
        Ok(tenants)
    }

    fn start_one(
        &self,
        id: String,
        (hosts, admin_token, auth): (Vec<String>, Option<[u8; 32]>, Option<Arc<Authenticator>>),
        sources: Sources,
        policy: Policy,
    ) -> Arc<Tenant> {
        let stop = self.stop.child_token();
        let loader = Loader::start(self.runtime.clone(), &id, (sources, self.config.watch), policy, stop.clone());
        let metrics = self.runtime.config().metrics.clone();
        let shared = Shared::new(loader.subscribe(), self.codec.scoped(&id), metrics);
        Arc::new(Tenant { id: id.into(), hosts, admin_token, auth, loader, shared, stop })
    }

    /// Read the configuration again, remembering which tenant folders have their file.
    fn read_each(&self) -> Result<(Vec<Spec>, Vec<Refused>), TenantsError> {
        let mut with_file = self.with_file.lock().unwrap_or_else(|e| e.into_inner());
        let (specs, refusals, found) = read_each(&self.config, &with_file)?;
        *with_file = found;
        Ok((specs, refusals))
    }

    /// The tenants now.
    pub fn current(&self) -> Arc<TenantSet> {
        self.published.borrow().clone()
    }

    /// Where every tenant's metrics are counted, and the server's own.
    pub fn metrics(&self) -> &Arc<crate::telemetry::Metrics> {
        &self.runtime.config().metrics
    }

    /// Follow the set of tenants.
    pub fn subscribe(&self) -> watch::Receiver<Arc<TenantSet>> {
        self.published.subscribe()
    }

    /// One tenant, by id.
    pub fn get(&self, id: &str) -> Result<Arc<Tenant>, TenantsError> {
        self.current().tenants.get(id).cloned().ok_or_else(|| TenantsError::Unknown(id.into()))
    }

    /// Wait until every tenant there is now has ended its first load; returns how many
    /// plugins are served in all.
    pub async fn first_load(&self) -> usize {
        let set = self.current();
        let mut served = 0;
        for tenant in set.tenants.values() {
            tenant.loader.first_load().await;
            served += tenant.shared.catalog().plugins().len();
        }
        served
    }

    /// The one tenant of a server that has exactly one.
    pub fn only(&self) -> Option<Arc<Tenant>> {
        let set = self.current();
        (set.tenants.len() == 1).then(|| set.tenants.values().next().cloned()).flatten()
    }

    /// Why the configuration on disk is not in force, if it is not.
    pub async fn error(&self) -> Option<String> {
        self.error.lock().await.clone()
    }

    /// Every tenant's status.
    pub async fn statuses(&self) -> Vec<Status> {
        let mut statuses = Vec::new();
        for tenant in self.current().tenants.values() {
            statuses.push(tenant.loader.status().await);
        }
        statuses
    }

    /// Read the configuration again: start new tenants, reconfigure the rest in place, drop
    /// removed ones. Returns every tenant's status afterwards.
    pub async fn reload(&self) -> Vec<Status> {
        let mut error = self.error.lock().await;
        let (specs, refusals) = match self.read_each() {
            Ok(read) => {
                *error = None;
                read
            }
            Err(e) => {
                tracing::error!("{e}; keeping the tenants and policies in force");
                *error = Some(e.to_string());
                for tenant in self.current().tenants.values() {
                    tenant.loader.policy_failed(e.to_string()).await;
                }
                return self.statuses().await;
            }
        };
        let old = self.current();
        let mut set = TenantSet::default();
        // A tenant whose own file is refused keeps what it has; the others are not held up.
        for Refused { id, error: refused } in refusals {
            tracing::error!(tenant = %id, "{refused}; keeping the tenant's configuration in force");
            let running = old.tenants.get(id.as_str());
            if let Some(running) = running {
                running.loader.policy_failed(refused.clone()).await;
            }
            set.keep(running);
            *error = Some(format!("tenant {id}: {refused}"));
        }
        for Spec { id, hosts, admin_token, sources, policy } in specs {
            let running = old.tenants.get(id.as_str());
            // A tenant kept as it was (its file refused) keeps its host names and its
            // resource: no other tenant may take one of them meanwhile.
            let resource = policy.as_ref().and_then(PolicyFile::auth).map(|auth| auth.resource.as_str());
            let names = hosts.iter().map(|host| ("host", host.as_str())).chain(resource.map(|r| ("resource", r)));
            let held = names.into_iter().find_map(|(what, name)| {
                let holds = |kept: &Tenant| match what {
                    "host" => kept.hosts.iter().any(|host| host == name),
                    _ => kept.auth.as_ref().is_some_and(|auth| auth.config().resource == name),
                };
                set.tenants.values().find(|kept| *kept.id != *id && holds(kept)).map(|kept| (what, name, &kept.id))
            });
            if let Some((what, name, holder)) = held {
                let e = format!("{what} {name} is still tenant {holder}'s");
                tracing::error!(tenant = %id, "{e}; the tenant is not changed");
                *error = Some(format!("tenant {id}: {e}"));
                set.keep(running);
                continue;
            }
            // A resource server whose settings did not change keeps its cached keys.
            let wanted = policy.as_ref().and_then(PolicyFile::auth);
            let auth = match running.and_then(|r| r.auth.as_ref()) {
                Some(same) if Some(same.config()) == wanted => Ok(Some(same.clone())),
                _ => guard(policy.as_ref()),
            };
            let policy = resolve(policy, &self.config.flags).map_err(|e| e.to_string());
            let auth = match auth {
                Ok(auth) => auth,
                Err(e) => {
                    tracing::error!(tenant = %id, "{e}; the tenant is not changed");
                    *error = Some(e);
                    set.keep(running);
                    continue;
                }
            };
            let tenant = match (running, policy) {
                (Some(running), policy) => {
                    running.loader.reconfigure(sources, policy).await;
                    let same_auth = match (&running.auth, &auth) {
                        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                        (None, None) => true,
                        _ => false,
                    };
                    if running.hosts == hosts && running.admin_token == admin_token && same_auth {
                        running.clone()
                    } else {
                        let Tenant { id, loader, shared, stop, .. } = &**running;
                        Arc::new(Tenant {
                            id: id.clone(),
                            hosts,
                            admin_token,
                            auth,
                            loader: loader.clone(),
                            shared: shared.clone(),
                            stop: stop.clone(),
                        })
                    }
                }
                (None, Ok(policy)) => {
                    tracing::info!(tenant = %id, "new tenant");
                    self.start_one(id, (hosts, admin_token, auth), sources, policy)
                }
                (None, Err(e)) => {
                    tracing::error!(tenant = %id, "tenant not started: {e}");
                    *error = Some(e);
                    continue;
                }
            };
            set.tenants.insert(tenant.id.clone(), tenant);
        }
        for gone in old.tenants.values().filter(|t| !set.tenants.contains_key(&t.id)) {
            tracing::info!(tenant = %gone.id, "tenant removed; its running calls finish");
            gone.stop.cancel();
        }
        self.published.send_replace(Arc::new(set));
        self.statuses().await
    }

    /// Read one tenant's configuration again and reconfigure it (its sources are read again
    /// too). A tenant the configuration no longer has is left to [`Tenants::reload`].
    pub async fn reload_one(&self, id: &str) -> Result<Status, TenantsError> {
        let tenant = self.get(id)?;
        let read = self.read_each().and_then(|(specs, refusals)| match refusals.into_iter().find(|r| r.id == id) {
            Some(Refused { id, error }) => Err(TenantsError::Folder(id, error)),
            None => Ok(specs.into_iter().find(|s| s.id == id)),
        });
        let spec = match read {
            Ok(spec) => spec,
            Err(e) => {
                tracing::error!(tenant = %id, "{e}; keeping its policy in force");
                tenant.loader.policy_failed(e.to_string()).await;
                return Ok(tenant.loader.reload().await);
            }
        };
        Ok(match spec {
            Some(Spec { sources, policy, .. }) => {
                let policy = resolve(policy, &self.config.flags).map_err(|e| e.to_string());
                tenant.loader.reconfigure(sources, policy).await
            }
            None => tenant.loader.reload().await,
        })
    }

    /// Watch the policy file and the tenants directory, and reload on every change to them,
    /// until the server stops.
    pub fn watch(self: &Arc<Self>) -> notify::Result<()> {
        use notify::Watcher;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        // The policy file is followed through its links, where a ConfigMap's flip happens.
        let mut policy = match &self.config.policy {
            Some(path) => {
                tracing::info!("watching {} for configuration changes", path.display());
                Some(FileWatch::new(std::slice::from_ref(path), tx.clone())?)
            }
            None => None,
        };
        let folders = match &self.config.dir {
            Some(dir) => {
                // The watcher reports absolute paths, whatever it was given: compare with those.
                let absolute = std::path::absolute(dir).map_err(notify::Error::io)?;
                let tx = tx.clone();
                let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                    if let Ok(event) = event
                        && !event.kind.is_access()
                        && event.paths.iter().any(|p| is_tenant_configuration(&absolute, p))
                    {
                        let _ = tx.send(Change::of(&event.kind));
                    }
                })?;
                // A tenant's folder holds its `tenant.toml`: one level down matters.
                watcher.watch(dir, notify::RecursiveMode::Recursive)?;
                tracing::info!("watching {} for configuration changes", dir.display());
                Some(watcher)
            }
            None => None,
        };
        drop(tx);
        let (tenants, stop) = (self.clone(), self.stop.clone());
        tokio::spawn(async move {
            let _folders = folders;
            loop {
                let change = tokio::select! {
                    () = stop.cancelled() => return,
                    event = rx.recv() => match event {
                        Some(change) => change,
                        None => return,
                    },
                };
                settle(&mut rx, change).await;
                if let Some(policy) = &mut policy {
                    policy.refresh();
                }
                tenants.reload().await;
            }
        });
        Ok(())
    }
}

/// Whether a changed path in the tenants directory `dir` is configuration: a tenant's folder
/// or its `tenant.toml` (plugin files are the tenants' own watchers' business).
fn is_tenant_configuration(dir: &Path, path: &Path) -> bool {
    path.parent() == Some(dir)
        || (path.file_name().is_some_and(|n| n == TENANT_FILE) && path.parent().and_then(Path::parent) == Some(dir))
}

/// Read every tenant's configuration (pure but for reading the files); any tenant whose own
/// file cannot be used is an error. Also the tenant folders that have a `tenant.toml`.
fn read(config: &TenantsConfig) -> Result<(Vec<Spec>, BTreeSet<String>), TenantsError> {
    let (specs, refusals, with_file) = read_each(config, &BTreeSet::new())?;
    match refusals.into_iter().next() {
        Some(Refused { id, error }) => Err(TenantsError::Folder(id, error)),
        None => Ok((specs, with_file)),
    }
}

/// What [`read_each`] finds: the tenants that can be used, the folders refused, and the
/// folders that have their `tenant.toml`.
type ReadEach = (Vec<Spec>, Vec<Refused>, BTreeSet<String>);

/// Read every tenant's configuration: those that can be used, and the tenant folders whose
/// own `tenant.toml` cannot (an error in the policy file, shared by all, is an error); and
/// the folders that have one. A folder of `had_file` found without its file is refused.
fn read_each(config: &TenantsConfig, had_file: &BTreeSet<String>) -> Result<ReadEach, TenantsError> {
    let mut refusals = Vec::new();
    let base = Limits::default();
    let mut file = match &config.policy {
        Some(path) => {
            let text = crate::files::read_text(path, crate::files::MAX_CONFIG_BYTES)
                .map_err(|source| PolicyError::Read { path: path.clone(), source })?;
            Some(PolicyFile::parse(&text, path, base, &config.flags)?)
        }
        None => None,
    };
    let mut tenants: Vec<TenantFile> = file.as_mut().map(PolicyFile::take_tenants).unwrap_or_default();
    let mut with_file = BTreeSet::new();
    if let Some(dir) = &config.dir {
        // A tenant folder's settings start from the policy file's, as a listed tenant's do.
        let inherited = file.as_ref().map_or((base, Quotas::default(), NeedsMode::default()), |file| {
            (file.defaults(), file.quotas(), file.needs())
        });
        for tenant in read_dir(dir, inherited, &config.flags, (had_file, &mut with_file))? {
            match tenant {
                Ok(tenant) if tenants.iter().any(|t| t.id == tenant.id) => {
                    return Err(TenantsError::Duplicate(tenant.id));
                }
                Ok(tenant) => tenants.push(tenant),
                Err(refused) => refusals.push(refused),
            }
        }
        TenantFile::check_unshared(&tenants)?;
    }
    // A tenant folder whose file is refused still makes this a server with tenants.
    let with_tenants = !tenants.is_empty() || !refusals.is_empty();
    if with_tenants && let Some(file) = file.as_ref().filter(|file| file.speaks_for_default_tenant()) {
        // Its plugins' grants and its [auth] would be dropped without a word, leaving the
        // tenants' endpoints open.
        return Err(PolicyError::Parse {
            path: file.path().into(),
            message: "top-level [plugins.*] and [auth] are the single default tenant's, and with tenants there is \
                      none; put them in each tenant's own file or [tenants.<id>] table"
                .into(),
        }
        .into());
    }
    if !with_tenants {
        let sources = config.sources.clone();
        return Ok((
            vec![Spec { id: DEFAULT_TENANT.into(), hosts: Vec::new(), admin_token: None, sources, policy: file }],
            refusals,
            with_file,
        ));
    }
    let specs = tenants
        .into_iter()
        .map(|t| {
            let (dirs, files) = t.sources.into_iter().partition(|p| p.extension().is_none_or(|e| e != "wasm"));
            Spec {
                id: t.id,
                hosts: t.hosts,
                admin_token: t.admin_token,
                sources: Sources { dirs, files, ..Sources::default() },
                policy: Some(t.policy),
            }
        })
        .collect();
    Ok((specs, refusals, with_file))
}

/// The tenants of a tenants directory: one per folder, named by the folder.
fn read_dir(
    dir: &Path,
    inherited: (Limits, Quotas, NeedsMode),
    flags: &LimitOverrides,
    (had_file, with_file): (&BTreeSet<String>, &mut BTreeSet<String>),
) -> Result<Vec<Result<TenantFile, Refused>>, TenantsError> {
    let failed = |source| TenantsError::Dir { path: dir.into(), source };
    let mut folders: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(failed)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    folders.sort();
    let mut tenants = Vec::with_capacity(folders.len());
    for folder in folders {
        let id = folder.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        // Hidden folders (editors' and tools') are not tenants.
        if id.starts_with('.') {
            continue;
        }
        let path = folder.join(TENANT_FILE);
        let text = crate::files::read_text_if_present(&path, crate::files::MAX_CONFIG_BYTES)
            .map_err(|source| PolicyError::Read { path: path.clone(), source });
        let present = !matches!(text, Ok(None));
        let vanished = !present && had_file.contains(&id);
        if present || vanished {
            with_file.insert(id.clone());
        }
        if vanished {
            let error = format!(
                "{} is gone (being saved?): its configuration stays in force; remove the folder to remove \
                 the tenant, or leave a tenant.toml holding a comment to serve it with the defaults",
                path.display()
            );
            tenants.push(Err(Refused { id, error }));
            continue;
        }
        let tenant = text.and_then(|text| TenantFile::parse(&id, text.as_deref(), &path, inherited, flags));
        tenants.push(tenant.map_err(|error| Refused { id, error: error.to_string() }));
    }
    Ok(tenants)
}

/// A tenant whose own file cannot be used: the others are configured without waiting for it.
struct Refused {
    id: String,
    error: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path, policy: &str) -> TenantsConfig {
        let file = dir.join("capsule.toml");
        std::fs::write(&file, policy).unwrap();
        std::fs::create_dir_all(dir.join("tenants/acme")).unwrap();
        TenantsConfig {
            policy: Some(file),
            dir: Some(dir.join("tenants")),
            flags: LimitOverrides::default(),
            sources: Sources::default(),
            watch: false,
        }
    }

    #[test]
    fn tenant_folders_start_from_the_policy_files_settings() {
        let dir = tempfile::tempdir().unwrap();
        let text = "needs_beyond_grants = \"refuse\"\n[limits]\nmemory_mib = 16\ncpu_ms = 100\n\
                    [quotas]\nconcurrent_calls = 1";
        let (specs, _) = read(&config(dir.path(), text)).unwrap();
        let policy = specs[0].policy.as_ref().unwrap();
        assert_eq!(specs[0].id, "acme");
        assert_eq!((policy.defaults().memory, policy.defaults().cpu.as_millis()), (16 << 20, 100));
        assert_eq!(policy.quotas().concurrent_calls, Some(1));
        assert_eq!(policy.needs(), NeedsMode::Refuse);
    }

    #[test]
    fn what_only_the_default_tenant_could_have_is_refused_beside_tenant_folders() {
        let dir = tempfile::tempdir().unwrap();
        let key = "ab".repeat(32);
        for text in [
            "[plugins.calc.limits]\nmemory_mib = 8".to_owned(),
            format!(
                "[auth]\nresource = \"https://mcp.example/mcp\"\n\
                 api_keys = [{{ subject = \"s\", sha256 = \"{key}\", scopes = [] }}]"
            ),
        ] {
            let Err(error) = read(&config(dir.path(), &text)) else { panic!("{text}: accepted") };
            assert!(error.to_string().contains("single default tenant's"), "{text}: {error}");
        }
    }
}
