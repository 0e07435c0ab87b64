//! Where plugins come from, and keeping the served set in step with them: the initial load,
//! hot swap, and the operator's controls (status, reload, load, unload).
//!
//! A reload reads the policy file and every source again. A plugin whose bytes and grants did
//! not change is reused as it is; one whose grants changed is re-sandboxed without
//! recompiling; a new or changed one is compiled off the reactor (or taken from the compile
//! cache), linked and validated; the whole set must then build a catalog. Only then is the
//! catalog published, atomically: calls already running keep the version they started on.
//! A plugin that fails to load or validate never replaces a working version, and a policy
//! file that fails to parse never replaces the policy in force.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use thiserror::Error;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::catalog::{Catalog, Offerings, Published, Publisher};
use crate::policy::{Needs, NeedsMode, Policy, QuotaOverrides, sidecar_path};
use crate::runtime::{Account, Plugin, PluginRuntime, Usage, digest};
use crate::telemetry::Load;
use crate::watch::{DirWatch, settle};

/// What to serve: the bundled examples, plugin directories, single plugin files, and the
/// files the operator loaded through the admin endpoint.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    pub bundled: bool,
    pub dirs: Vec<PathBuf>,
    pub files: Vec<PathBuf>,
    /// Loaded by the operator (absolute); each replaces any other plugin of its name, and it
    /// is kept when the tenant's configured sources change.
    pub loaded: Vec<PathBuf>,
}

impl Sources {
    /// Every plugin file, in a stable order (each directory sorted, then the files, then the
    /// loaded ones), each file once however many sources name it, and none whose name a
    /// loaded file takes; and the directories that could not be read, each with why.
    fn files(&self) -> (Vec<PathBuf>, Vec<(&Path, String)>) {
        let replaced: BTreeSet<String> = self.loaded.iter().map(|p| plugin_name(p)).collect();
        let (mut all, mut unreadable) = (Vec::new(), Vec::new());
        for dir in &self.dirs {
            match std::fs::read_dir(dir) {
                Ok(entries) => {
                    let mut found: Vec<PathBuf> = entries
                        .filter_map(|e| e.ok().map(|e| e.path()))
                        .filter(|p| p.extension().is_some_and(|e| e == "wasm") && p.is_file())
                        .collect();
                    found.sort();
                    all.extend(found);
                }
                Err(e) => {
                    unreadable.push((dir.as_path(), format!("cannot read plugin directory {}: {e}", dir.display())))
                }
            }
        }
        all.extend(self.files.iter().cloned());
        all.retain(|p| !replaced.contains(&plugin_name(p)));
        all.extend(self.loaded.iter().cloned());
        // `dir` and `dir/calc.wasm` both given, or `./p` and `p`: one file, one plugin.
        let mut seen = std::collections::HashSet::new();
        all.retain(|p| seen.insert(std::fs::canonicalize(p).unwrap_or_else(|_| p.clone())));
        (all, unreadable)
    }

    /// Whether a bundled plugin is served: not when a loaded file takes its name.
    fn bundles(&self, name: &str) -> bool {
        self.bundled && !self.loaded.iter().any(|p| plugin_name(p) == name)
    }

    /// The directories to watch for changes (unsorted, possibly repeated).
    fn watched(&self) -> Vec<PathBuf> {
        let mut watched: Vec<PathBuf> = self.dirs.clone();
        watched.extend(self.files.iter().chain(&self.loaded).filter_map(|f| f.parent().map(Path::to_path_buf)));
        watched
    }
}

/// The `plugin` label of loads that failed for a file whose name is no plugin name (none
/// starts with `_`).
pub const INVALID_NAME: &str = "_invalid_name";

/// The tenant of a server configured without tenants.
pub const DEFAULT_TENANT: &str = "default";

/// The least and the most time between two relists of a tenant's plugins.
const RELIST_PAUSE: Duration = Duration::from_secs(1);
const RELIST_PAUSE_AT_MOST: Duration = Duration::from_secs(30);

/// The largest plugin file read: far beyond any real component (an interpreter with its
/// standard library is tens of MiB), short of a device that never ends.
const MAX_COMPONENT_BYTES: u64 = 1 << 30;

/// A plugin file's bytes. Only a regular file (a symbolic link to one is followed) up to
/// [`MAX_COMPONENT_BYTES`]: a FIFO would block the read for good, `/dev/zero` would fill
/// memory.
pub fn read_component(path: &Path) -> std::io::Result<Vec<u8>> {
    crate::files::read_regular(path, MAX_COMPONENT_BYTES)
}

/// Refuse `path` unless it is in one of `dirs`: first as written (absolute, no `..`), so
/// that nothing outside is even looked at and whether it exists is not told; then as the
/// file system resolves it, so that a symbolic link does not lead out.
fn confine(path: &Path, dirs: &[PathBuf]) -> Result<(), ControlError> {
    let plain = path.is_absolute() && path.components().all(|c| c != std::path::Component::ParentDir);
    let within = plain
        && dirs.iter().any(|dir| {
            path.starts_with(dir) || std::fs::canonicalize(dir).is_ok_and(|canonical| path.starts_with(canonical))
        });
    if within { Ok(()) } else { Err(ControlError::Outside { path: path.into(), dirs: dirs.to_vec() }) }
}

/// A plugin's name is its file's stem, and it names the plugin in scopes (`plugins.<name>`),
/// metrics, logs and terminals: 1 to 64 ASCII letters, digits, `-` and `_`, starting with a
/// letter or digit. So no name runs into another at a dot (`calc.evil` would be covered by
/// the scope `plugins.calc`), and none carries spaces, quotes or control characters.
pub fn check_name(name: &str) -> Result<(), String> {
    let valid = name.len() <= 64
        && name.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if valid {
        return Ok(());
    }
    Err(format!(
        "{:?} is not a plugin name: a plugin file's name (before .wasm) is 1 to 64 ASCII letters, digits, '-' \
         and '_', starting with a letter or digit",
        name.chars().take(80).collect::<String>()
    ))
}

fn plugin_name(path: &Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| path.display().to_string())
}

/// One plugin as the operator sees it.
#[derive(Debug, Clone, Serialize)]
pub struct PluginStatus {
    /// The plugin's name (its file stem).
    pub name: String,
    /// Where it comes from: a file path, or `bundled`.
    pub source: String,
    /// The version being served, if any.
    pub serving: Option<Version>,
    /// Why the latest version on disk is not the one served (or why nothing is).
    pub last_error: Option<String>,
    /// Needs the plugin declares that its grants do not cover.
    pub needs_beyond_grants: Vec<String>,
}

/// A served plugin version.
#[derive(Debug, Clone, Serialize)]
pub struct Version {
    /// SHA-256 of the component, in hex.
    pub sha256: String,
    pub tools: usize,
    pub resources: usize,
    pub templates: usize,
    pub prompts: usize,
}

impl Version {
    fn of(plugin: &Plugin) -> Version {
        let m = plugin.manifest();
        Version {
            sha256: plugin.digest().to_owned(),
            tools: m.tools.len(),
            resources: m.resources.len(),
            templates: m.templates.len(),
            prompts: m.prompts.len(),
        }
    }
}

/// A tenant's plugin status: what the admin endpoint's `GET /admin/plugins` returns.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// The tenant these plugins serve.
    pub tenant: String,
    /// The policy file, if the server has one.
    pub policy: Option<PathBuf>,
    /// Why the policy file on disk is not the one in force, if it is not.
    pub policy_error: Option<String>,
    /// Plugin instances alive in the whole server: one per call in progress, zero at rest.
    pub live_instances: usize,
    /// The tenant's quotas, as written.
    pub quotas: QuotaOverrides,
    /// What the tenant uses of them now.
    pub usage: Usage,
    pub plugins: Vec<PluginStatus>,
}

/// Why an operator's request was refused.
#[derive(Debug, Error)]
pub enum ControlError {
    #[error("{0} is not a .wasm file")]
    NotWasm(PathBuf),
    #[error("{0}")]
    Name(String),
    #[error("{} is not in this tenant's plugin directories ({}): its own token loads only from them", path.display(), dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", "))]
    Outside { path: PathBuf, dirs: Vec<PathBuf> },
    #[error("cannot use {path}: {source}")]
    Path { path: PathBuf, source: std::io::Error },
    #[error("no plugin named {0} is loaded")]
    UnknownPlugin(String),
    #[error("plugin {name} did not load: {reason}")]
    Failed { name: String, reason: String },
}

struct State {
    sources: Sources,
    policy: Policy,
    policy_error: Option<String>,
    /// Names the operator unloaded; skipped until loaded again.
    unloaded: BTreeSet<String>,
    plugins: Vec<PluginStatus>,
}

/// Keeps one tenant's catalog in step with its sources and its policy.
pub struct Loader {
    runtime: PluginRuntime,
    /// The tenant, and what it uses of its quotas.
    account: Arc<Account>,
    publisher: Publisher,
    /// Held for a whole reload: reloads (watcher and operator) never interleave.
    state: Mutex<State>,
    /// Tells the watcher that the sources changed, so it watches the directories they name.
    rewatch: tokio::sync::Notify,
    /// Ends the loader's tasks (the tenant is gone, or the server stops).
    stop: CancellationToken,
}

impl Loader {
    /// Start loading everything, publishing an empty catalog at once and each plugin as it
    /// joins (compiling an interpreter plugin can take many seconds, and the server answers
    /// meanwhile). `first_load` ends when every plugin has loaded or failed. With `watch`,
    /// the sources are watched before they are first read, so no change is missed.
    pub fn start(
        runtime: PluginRuntime,
        tenant: &str,
        (sources, watch): (Sources, bool),
        policy: Policy,
        stop: CancellationToken,
    ) -> Arc<Loader> {
        let account = Account::new(tenant, policy.quotas());
        let dirs = sources.watched();
        let state = State { sources, policy, policy_error: None, unloaded: BTreeSet::new(), plugins: Vec::new() };
        let publisher = Publisher::loading();
        let loader = Arc::new(Loader {
            runtime,
            account,
            publisher,
            state: Mutex::new(state),
            rewatch: tokio::sync::Notify::new(),
            stop,
        });
        let relister = loader.clone();
        let span = tracing::info_span!("tenant", id = %tenant);
        let task = async move {
            loop {
                let names = tokio::select! {
                    names = relister.publisher.relists().next() => names,
                    () = relister.stop.cancelled() => return,
                };
                let reading = relister.relist(&names).await;
                // A plugin that says its lists changed on every call must not keep a core
                // reading them: relists take at most a tenth of the time, and the requests
                // made meanwhile are one relist.
                let pause = (reading * 9).clamp(RELIST_PAUSE, RELIST_PAUSE_AT_MOST);
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    () = relister.stop.cancelled() => return,
                }
            }
        };
        tokio::spawn(task.instrument(span.clone()));
        if watch && let Err(e) = loader.watch(dirs) {
            tracing::error!(tenant, "cannot watch the plugin sources: {e}");
        }
        let first = loader.clone();
        let task = async move {
            let started = std::time::Instant::now();
            let status = first.reload().await;
            let served = status.plugins.iter().filter(|p| p.serving.is_some()).count();
            tracing::info!(
                "plugins loaded: {served} of {} served, in {} ms",
                status.plugins.len(),
                started.elapsed().as_millis()
            );
            // After the summary, so that whatever waited for the load logs after it.
            first.publisher.loaded();
        };
        tokio::spawn(task.instrument(span));
        loader
    }

    /// Wait for the first load to end.
    pub async fn first_load(&self) {
        self.publisher.subscribe().first_load(Duration::MAX).await;
    }

    /// Read the lists of the plugins `names` again (they said a list changed) and swap the
    /// result in; clients hear only of lists that really changed. A plugin whose lists can no
    /// longer be read, or now collide, keeps the lists it had. Returns how long reading them
    /// took.
    async fn relist(&self, names: &BTreeSet<String>) -> Duration {
        // The lists are read without holding the loader's state: a plugin's list functions
        // may take their whole time limit, and reloads and the status must not wait for them.
        let started = std::time::Instant::now();
        let old = self.publisher.current();
        let mut fresh = Vec::new();
        for offered in old.offerings().iter().filter(|o| names.contains(o.plugin().name())) {
            let relisted = match offered.plugin().relisted().await {
                Ok(plugin) => offerings_of(Arc::new(plugin), &old).await,
                Err(e) => Err(e.to_string()),
            };
            match relisted {
                Ok(relisted) => fresh.push((offered.clone(), relisted)),
                Err(e) => tracing::error!("plugin {}: reading its lists again failed: {e}", offered.plugin().name()),
            }
        }
        let reading = started.elapsed();
        let mut state = self.state.lock().await;
        // Each plugin's new lists go in on their own, and only over the version they were
        // read from: a reload meanwhile may have replaced it.
        let mut catalog = self.publisher.current();
        let mut changed = false;
        for (from, relisted) in fresh {
            let name = from.plugin().name();
            let mut offerings = catalog.offerings().to_vec();
            let Some(at) = offerings.iter().position(|o| Arc::ptr_eq(o.plugin(), from.plugin())) else { continue };
            offerings[at] = relisted;
            match Catalog::build(offerings) {
                Ok(next) => (catalog, changed) = (Arc::new(next), true),
                Err(e) => {
                    tracing::error!("plugin {name}: its lists read again cannot be served: {e}; keeping its lists")
                }
            }
        }
        for status in state.plugins.iter_mut().filter(|s| names.contains(&s.name)) {
            if let Some(plugin) = catalog.plugins().iter().find(|p| p.name() == status.name) {
                status.serving = Some(Version::of(plugin));
            }
        }
        if changed {
            self.publisher.publish(Arc::unwrap_or_clone(catalog));
        }
        reading
    }

    /// The tenant's account: its quotas and what it uses of them.
    pub fn account(&self) -> &Arc<Account> {
        &self.account
    }

    /// The catalogs this loader publishes, for a server to serve.
    pub fn subscribe(&self) -> Published {
        self.publisher.subscribe()
    }

    /// The plugins and the policy, as the operator sees them.
    pub async fn status(&self) -> Status {
        let state = self.state.lock().await;
        self.status_of(&state)
    }

    fn status_of(&self, state: &State) -> Status {
        Status {
            tenant: self.account.tenant().to_string(),
            policy: state.policy.source().map(Path::to_path_buf),
            policy_error: state.policy_error.clone(),
            live_instances: self.runtime.live_instances(),
            quotas: state.policy.quotas().written(),
            usage: self.account.usage(),
            plugins: state.plugins.clone(),
        }
    }

    /// Read every source again and swap the result in.
    pub async fn reload(&self) -> Status {
        let mut state = self.state.lock().await;
        self.reload_locked(&mut state).await;
        self.status_of(&state)
    }

    /// The configuration could not be read: keep the policy in force, and say why.
    pub async fn policy_failed(&self, error: String) {
        self.state.lock().await.policy_error = Some(error);
    }

    /// Serve from these sources under this policy from now on (the policy file changed).
    /// A policy that could not be read keeps the one in force, and says why in the status.
    pub async fn reconfigure(&self, sources: Sources, policy: Result<Policy, String>) -> Status {
        let mut state = self.state.lock().await;
        match policy {
            Ok(policy) => {
                self.account.set(policy.quotas());
                state.policy = policy;
                state.policy_error = None;
            }
            Err(e) => {
                tracing::error!(tenant = %self.account.tenant(), "{e}; keeping the policy in force");
                state.policy_error = Some(e);
            }
        }
        let mut sources = sources;
        sources.loaded = std::mem::take(&mut state.sources.loaded);
        if state.sources.watched() != sources.watched() {
            self.rewatch.notify_one();
        }
        state.sources = sources;
        self.reload_locked(&mut state).await;
        self.status_of(&state)
    }

    /// Serve the plugin in `path` from now on (replacing one of the same name).
    /// `confined` (a tenant's own token asks) to the tenant's plugin directories.
    pub async fn load(&self, path: &Path, confined: bool) -> Result<Status, ControlError> {
        if path.extension().is_none_or(|e| e != "wasm") {
            return Err(ControlError::NotWasm(path.into()));
        }
        let mut state = self.state.lock().await;
        if confined {
            confine(path, &state.sources.dirs)?;
        }
        let path = std::fs::canonicalize(path).map_err(|source| ControlError::Path { path: path.into(), source })?;
        if confined {
            confine(&path, &state.sources.dirs)?;
        }
        let name = plugin_name(&path);
        check_name(&name).map_err(ControlError::Name)?;
        let before = (state.sources.loaded.clone(), state.unloaded.remove(&name));
        // The newest file loaded under a name is the one served.
        state.sources.loaded.retain(|f| plugin_name(f) != name);
        state.sources.loaded.push(path.clone());
        self.rewatch.notify_one();
        self.reload_locked(&mut state).await;
        let source = path.display().to_string();
        let Some(PluginStatus { last_error: Some(reason), .. }) = state.plugins.iter().find(|p| p.source == source)
        else {
            return Ok(self.status_of(&state));
        };
        let failed = ControlError::Failed { name: name.clone(), reason: reason.clone() };
        // A load that failed changes nothing: the plugin's source stays what it was (a
        // watched directory keeps swapping it), and a new name is not kept to be tried again.
        let (loaded, was_unloaded) = before;
        state.sources.loaded = loaded;
        if was_unloaded {
            state.unloaded.insert(name);
        }
        self.rewatch.notify_one();
        self.reload_locked(&mut state).await;
        Err(failed)
    }

    /// Stop serving the plugin `name`. Calls running on it finish.
    pub async fn unload(&self, name: &str) -> Result<Status, ControlError> {
        let mut state = self.state.lock().await;
        if !state.plugins.iter().any(|p| p.name == name) {
            return Err(ControlError::UnknownPlugin(name.into()));
        }
        state.sources.files.retain(|f| plugin_name(f) != name);
        state.sources.loaded.retain(|f| plugin_name(f) != name);
        state.unloaded.insert(name.to_owned());
        self.reload_locked(&mut state).await;
        Ok(self.status_of(&state))
    }

    async fn reload_locked(&self, state: &mut State) {
        // A trace of its own (not under the tenant's long-lived span), at error level so that
        // the reload's log records carry its trace id under any filter.
        let span = crate::telemetry::TraceContext::new(None).root(|trace_id| {
            tracing::error_span!(
                parent: None,
                "reload",
                otel.name = "capsule.reload",
                tenant = %self.account.tenant(),
                trace_id = trace_id
            )
        });
        let started = std::time::Instant::now();
        let reload = async {
            let old = self.publisher.current();
            let Some(found) = read_sources(&state.sources, &state.unloaded, &state.plugins).await else { return };
            // During the first load, each plugin is served as soon as it joins.
            let progress = (!self.publisher.is_loaded()).then_some(&self.publisher);
            let (new, plugins) = build(&self.runtime, &self.account, found, &state.policy, &old, progress).await;
            // An entry no plugin answers to is most likely a typo, whose plugin then runs with
            // nothing granted and the default limits.
            let unserved: Vec<&str> = state.policy.named().filter(|n| !plugins.iter().any(|p| p.name == *n)).collect();
            if !unserved.is_empty() {
                tracing::warn!(
                    "the policy has entries for {}, which no plugin source provides; check their spelling",
                    unserved.join(", ")
                );
            }
            state.plugins = plugins;
            // Publish even when no list changed: a new version may behave differently behind
            // the same definitions, and new calls must get it. Servers tell their clients what
            // changed.
            self.publisher.publish(new);
        };
        reload.instrument(span).await;
        self.runtime.config().metrics.reload(self.account.tenant(), started.elapsed());
    }

    /// Watch the plugin directories (`dirs` at first), and reload on every change, until the
    /// loader stops. The policy file is the tenant registry's to watch.
    fn watch(self: &Arc<Self>, dirs: Vec<PathBuf>) -> notify::Result<()> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut watch = DirWatch::new(tx)?;
        watch.set(&dirs);
        let loader = self.clone();
        let span = tracing::info_span!("tenant", id = %self.account.tenant());
        let task = async move {
            loop {
                let change = tokio::select! {
                    () = loader.stop.cancelled() => return,
                    () = loader.rewatch.notified() => {
                        watch.set(&loader.state.lock().await.sources.watched());
                        continue;
                    }
                    event = rx.recv() => match event {
                        Some(change) => change,
                        None => return,
                    },
                };
                settle(&mut rx, change).await;
                watch.renew();
                loader.reload().await;
            }
        };
        // The task outlives the caller's span: the reloads it logs still name the tenant.
        tokio::spawn(task.instrument(span));
        Ok(())
    }
}

/// Load (or reuse) one plugin under its grants, and hold its declared needs to them. The
/// second value lists needs beyond the grants that were only warned about.
async fn load_one(
    runtime: &PluginRuntime,
    account: &Arc<Account>,
    policy: &Policy,
    name: &str,
    (bytes, sha256, needs): Contents,
    earlier: Option<&Arc<Plugin>>,
) -> Result<(Arc<Plugin>, Vec<String>), String> {
    check_name(name)?;
    // The same bytes with another sidecar declaration are loaded again, to carry it.
    match earlier.filter(|p| p.digest() == sha256 && p.needs() == needs.as_ref()) {
        Some(same) => regranted(runtime, policy, name, same),
        None => {
            let grants = policy.grants(name);
            let plugin = runtime.load(account, name, (bytes, needs), grants).await.map_err(|e| e.to_string())?;
            let plugin = match earlier {
                Some(earlier) => plugin.sharing_places_with(earlier),
                None => plugin,
            };
            within_needs_mode(policy, name, Arc::new(plugin))
        }
    }
}

/// `plugin` under the grants `policy` gives it now: itself when they are the ones it has,
/// else the same version sandboxed anew. A version kept serving when its replacement fails
/// goes through this too, so that taking a grant away never waits for a file that loads.
fn regranted(
    runtime: &PluginRuntime,
    policy: &Policy,
    name: &str,
    plugin: &Arc<Plugin>,
) -> Result<(Arc<Plugin>, Vec<String>), String> {
    let grants = policy.grants(name);
    if plugin.has_grants(&grants) {
        return within_needs_mode(policy, name, Arc::clone(plugin));
    }
    runtime.check_grants(name, &grants).map_err(|e| e.to_string())?;
    within_needs_mode(policy, name, Arc::new(plugin.with_grants(grants).map_err(|e| e.to_string())?))
}

/// `plugin` with the needs it declares beyond its grants, unless the policy refuses those.
fn within_needs_mode(policy: &Policy, name: &str, plugin: Arc<Plugin>) -> Result<(Arc<Plugin>, Vec<String>), String> {
    let beyond = plugin.needs().map(|needs| needs.beyond(plugin.grants())).unwrap_or_default();
    if !beyond.is_empty() && policy.needs_mode() == NeedsMode::Refuse {
        return Err(format!(
            "{name}: refused, it declares needs beyond its grants (needs_beyond_grants = \"refuse\"): {}",
            beyond.join("; ")
        ));
    }
    Ok((plugin, beyond))
}

/// A plugin's bytes, their SHA-256 and its declared needs.
pub type Contents = (Arc<[u8]>, String, Option<Needs>);

/// A plugin's name, where it comes from, and its contents (or why they could not be read).
pub struct Candidate {
    pub name: String,
    pub source: String,
    pub bytes: Result<Contents, String>,
}

/// A plugin's bytes, their digest and its declared needs (embedded, or in `sidecar`'s text).
fn hashed(bytes: Arc<[u8]>, sidecar: Option<&str>) -> Result<Contents, String> {
    let needs = Needs::declared(&bytes, sidecar).map_err(|e| e.to_string())?;
    let sha256 = digest(&bytes);
    Ok((bytes, sha256, needs))
}

/// A plugin file's sidecar declaration, if it has one.
pub fn read_sidecar(wasm: &Path) -> Result<Option<String>, String> {
    let path = sidecar_path(wasm);
    crate::files::read_text_if_present(&path, crate::files::MAX_CONFIG_BYTES)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// Read and hash every plugin the sources name. Blocking: run it on the blocking pool.
///
/// A directory that cannot be read keeps the plugins `serving` had from it: it is most
/// likely between the two renames of a release flip (`mv plugins old && mv new plugins`),
/// and a reload in that moment must not take them away. Each is a candidate that failed to
/// read, so the version serving goes on and its status says why.
fn candidates(sources: &Sources, unloaded: &BTreeSet<String>, serving: &[PluginStatus]) -> Vec<Candidate> {
    let bundled = crate::bundled::BUNDLED.iter().filter(|(name, _)| !unloaded.contains(*name) && sources.bundles(name));
    let mut all: Vec<Candidate> = bundled
        .map(|&(name, bytes)| Candidate {
            name: name.to_owned(),
            source: "bundled".into(),
            bytes: hashed(Arc::from(bytes), None),
        })
        .collect();
    let (files, unreadable) = sources.files();
    for path in files {
        let name = plugin_name(&path);
        if unloaded.contains(&name) {
            continue;
        }
        let bytes = read_component(&path).map_err(|e| format!("cannot read {}: {e}", path.display()));
        let bytes = bytes.and_then(|b| {
            hashed(Arc::from(b), read_sidecar(&path)?.as_deref()).map_err(|e| format!("{}: {e}", path.display()))
        });
        all.push(Candidate { name, source: path.display().to_string(), bytes });
    }
    for (dir, error) in unreadable {
        tracing::error!("{error}; its plugins go on serving until it can be read");
        let within = |status: &&PluginStatus| Path::new(&status.source).parent() == Some(dir);
        for status in serving.iter().filter(within).filter(|s| s.serving.is_some()) {
            if !all.iter().any(|c| c.name == status.name) {
                let (name, source) = (status.name.clone(), status.source.clone());
                all.push(Candidate { name, source, bytes: Err(error.clone()) });
            }
        }
    }
    all
}

/// Read and hash the sources off the reactor; `None` (logged) if that task failed.
pub async fn read_sources(
    sources: &Sources,
    unloaded: &BTreeSet<String>,
    serving: &[PluginStatus],
) -> Option<Vec<Candidate>> {
    let (sources, unloaded, serving) = (sources.clone(), unloaded.clone(), serving.to_vec());
    tokio::task::spawn_blocking(move || candidates(&sources, &unloaded, &serving))
        .await
        .inspect_err(|e| tracing::error!("reading the plugin sources failed: {e}"))
        .ok()
}

/// Everything `serve` does to admit one plugin on its own: compile and link it, run its list
/// functions in its sandbox, check its offerings and its needs against `policy`. `capsule
/// check` calls this, so the two cannot disagree. The second value lists needs beyond the
/// grants that were only warned about.
pub async fn admit(
    runtime: &PluginRuntime,
    policy: &Policy,
    name: &str,
    (bytes, needs): (Arc<[u8]>, Option<Needs>),
) -> Result<(Arc<Offerings>, Vec<String>), String> {
    let sha256 = digest(&bytes);
    let account = Account::new(DEFAULT_TENANT, policy.quotas());
    let (plugin, beyond) = load_one(runtime, &account, policy, name, (bytes, sha256, needs), None).await?;
    let offered = offerings_of(plugin, &Catalog::default()).await?;
    Catalog::build(vec![offered.clone()]).map_err(|e| e.to_string())?;
    Ok((offered, beyond))
}

/// The checked offerings of `plugin`: the previous catalog's when it is the same version,
/// else compiled on the blocking pool (schemas are compiled once per plugin version).
async fn offerings_of(plugin: Arc<Plugin>, previous: &Catalog) -> Result<Arc<Offerings>, String> {
    if let Some(kept) = previous.offerings().iter().find(|o| Arc::ptr_eq(o.plugin(), &plugin)) {
        return Ok(kept.clone());
    }
    tokio::task::spawn_blocking(move || Offerings::new(plugin).map(Arc::new).map_err(|e| e.to_string()))
        .await
        .unwrap_or_else(|e| Err(format!("checking the plugin's offerings failed: {e}")))
}

/// Build the catalog from `found` under `policy`, reusing `previous` plugins whose bytes and
/// grants are unchanged and keeping a previous version wherever its replacement fails. With
/// `progress`, each plugin accepted is published at once, with those before it.
///
/// Plugins already serving are placed first, in their order, and newcomers after them: the
/// catalog lets earlier plugins win, so a new file can never take over a serving plugin's
/// tool, prompt or resource; it is refused instead, with the reason in its status.
async fn build(
    runtime: &PluginRuntime,
    account: &Arc<Account>,
    found: Vec<Candidate>,
    policy: &Policy,
    previous: &Catalog,
    progress: Option<&Publisher>,
) -> (Catalog, Vec<PluginStatus>) {
    let serving = |name: &str| previous.plugins().iter().position(|p| p.name() == name).unwrap_or(usize::MAX);
    let mut ordered: Vec<(usize, Candidate)> = found.into_iter().enumerate().collect();
    ordered.sort_by_key(|(at, candidate)| (serving(&candidate.name), *at));
    let mut loaded: Vec<Arc<Offerings>> = Vec::new();
    let mut statuses = Vec::new();
    let mut catalog = Catalog::default();
    for (at, Candidate { name, source, bytes }) in ordered {
        let earlier = previous.offerings().iter().find(|o| o.plugin().name() == name);
        let fresh = match bytes {
            Ok(bytes) => load_one(runtime, account, policy, &name, bytes, earlier.map(|o| o.plugin())).await,
            Err(e) => Err(e),
        };
        let fresh = match fresh {
            Ok((plugin, beyond)) => offerings_of(plugin, previous).await.map(|offered| (offered, beyond)),
            Err(e) => Err(e),
        };
        let mut status = PluginStatus {
            name: name.clone(),
            source,
            serving: None,
            last_error: None,
            needs_beyond_grants: Vec::new(),
        };
        let mut accepted: Option<Arc<Offerings>> = None;
        if let Ok((offered, _)) = &fresh {
            accepted = accept(&loaded, offered, progress, &mut status, &mut catalog);
        }
        if accepted.is_none()
            && let Some(earlier) = earlier
        {
            // The version serving now goes on, but as the policy grants it now. Under the
            // same policy entry it keeps the directories it opened: one of their paths may
            // lead elsewhere now (a link planted by a plugin), and reopening it is refused.
            let serving = earlier.plugin();
            let kept = if **serving.grants() == *policy.grants(&name) {
                within_needs_mode(policy, &name, Arc::clone(serving))
            } else {
                regranted(runtime, policy, &name, serving)
            };
            let fallback = match kept {
                Ok((plugin, _)) => offerings_of(plugin, previous).await,
                Err(e) => Err(e),
            };
            match fallback {
                Ok(offered) => accepted = accept(&loaded, &offered, progress, &mut status, &mut catalog),
                Err(e) => {
                    tracing::error!("plugin {name}: the version serving cannot go on under its grants now: {e}");
                    status.last_error.get_or_insert(e);
                }
            }
        }
        let metrics = &runtime.config().metrics;
        let result = match (&fresh, &accepted) {
            (Err(_), Some(_)) => Some(Load::Kept),
            (_, None) => Some(Load::Failed),
            (Ok((new, _)), Some(kept)) if !Arc::ptr_eq(new, kept) => Some(Load::Kept),
            (Ok((new, _)), Some(_)) => {
                earlier.is_none_or(|e| !Arc::ptr_eq(e.plugin(), new.plugin())).then_some(Load::Loaded)
            }
        };
        if let Some(result) = result {
            // A file name that is no plugin name stays out of the labels (any file dropped in
            // a watched directory would add a series): such failures share one value.
            let label = if check_name(&name).is_ok() { name.as_str() } else { INVALID_NAME };
            metrics.plugin_load(account.tenant(), label, result);
        }
        match (&fresh, &accepted) {
            (Err(e), Some(kept)) => {
                tracing::error!(
                    "plugin {name}: {e}; still serving the previous version (sha256 {})",
                    &kept.plugin().digest()[..12]
                );
                status.last_error = Some(e.clone());
            }
            (Err(e), None) => {
                tracing::error!("plugin not loaded: {e}");
                status.last_error = Some(e.clone());
            }
            (Ok((new, beyond)), Some(kept)) if Arc::ptr_eq(new, kept) => {
                status.needs_beyond_grants = beyond.clone();
                if earlier.is_none_or(|e| !Arc::ptr_eq(e.plugin(), new.plugin())) {
                    let v = Version::of(new.plugin());
                    tracing::info!(
                        "loaded plugin {name} (sha256 {}): {} tools, {} resources, {} templates, {} prompts",
                        &v.sha256[..12],
                        v.tools,
                        v.resources,
                        v.templates,
                        v.prompts
                    );
                    if !beyond.is_empty() {
                        tracing::warn!(
                            "plugin {name} declares needs beyond its grants, so parts of it may fail: {}",
                            beyond.join("; ")
                        );
                    }
                }
            }
            _ => {}
        }
        status.serving = accepted.as_ref().map(|o| Version::of(o.plugin()));
        statuses.push((at, status));
        loaded.extend(accepted);
    }
    for gone in previous.plugins().iter().filter(|p| !loaded.iter().any(|l| l.plugin().name() == p.name())) {
        tracing::info!("plugin {} is no longer served", gone.name());
        runtime.config().metrics.plugin_load(account.tenant(), gone.name(), Load::Removed);
    }
    statuses.sort_by_key(|(at, _)| *at);
    (catalog, statuses.into_iter().map(|(_, status)| status).collect())
}

/// Make `catalog` the one of `loaded` and `offered` after them (published at once with
/// `progress`) and return `offered`, or, when they cannot be served together, note why in
/// `status` and leave `catalog` as it is.
fn accept(
    loaded: &[Arc<Offerings>],
    offered: &Arc<Offerings>,
    progress: Option<&Publisher>,
    status: &mut PluginStatus,
    catalog: &mut Catalog,
) -> Option<Arc<Offerings>> {
    let mut candidate = loaded.to_vec();
    candidate.push(offered.clone());
    match Catalog::build(candidate) {
        Ok(next) => {
            if let Some(publisher) = progress {
                publisher.publish(next.clone());
            }
            *catalog = next;
            Some(offered.clone())
        }
        Err(e) => {
            let name = &status.name;
            tracing::error!("plugin {name} (sha256 {}) not served: {e}", &offered.plugin().digest()[..12]);
            status.last_error.get_or_insert_with(|| e.to_string());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_names_are_plain_words() {
        for good in ["calc", "prompts-only", "demo_rust", "Calc2", "0x", &"a".repeat(64)] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "calc.evil", "q\" error=\"x y", "tk\u{1b}]0;x\u{7}", "-x", "_x", "café", &"a".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
