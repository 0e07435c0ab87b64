//! A loaded plugin: its linked component, which interfaces it exports, what it provides, and
//! the calls into it. Every call gets a fresh store and instance, dropped when it returns.

use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use wasmtime::component::{Component, ComponentExportIndex, Instance, InstancePre, TypedFunc};
use wasmtime::{PoolConcurrencyLimitError, Store, Trap, UpdateDeadline};

use tokio::sync::Semaphore;

use super::bindings::{self, completion, prompts, resources, tools, types};
use super::engine::RuntimeInner;
use super::error::{CallError, ExportMismatch, LoadError};
use super::fs::GrantDirs;
use super::limits::{CpuMeter, MemoryLimitExceeded};
use super::offload::{Long, Offload};
use super::output::OutputSize;
use super::pool::Reservation;
use super::quota::Account;
use super::sandbox::CallState;
use super::spare::{Blueprint, Spare};
use super::stderr::crash_cause;
use super::{Events, NoEvents};
use crate::policy::{ClientRoots, Grants, Needs};
use crate::telemetry::PluginMeters;

/// The most a plugin's lists (tools, resources and templates, prompts), each read once at
/// load, may take: they are held for as long as the plugin is served.
const MANIFEST_LIMIT: usize = 8 << 20;
/// One call into a fresh instance. Boxed and `Send`, so that a long call can move to a thread
/// of its own (see `offload`).
type CallFuture<'a, R> = Pin<Box<dyn Future<Output = wasmtime::Result<R>> + Send + 'a>>;
/// Says that what a call borrows (`'c`) outlives its borrow of the store (`'a`), which a
/// closure's signature cannot say otherwise.
type Outlives<'a, 'c> = std::marker::PhantomData<&'a &'c ()>;

/// The tools export's `call`, typed. The bindings' `GuestIndices::load` type-checks every
/// function of the interface in every fresh instance (about 2.5% of a server's CPU per call,
/// measured); a component's types do not change between its instances, so `call` is checked
/// with exactly these types once, when the plugin loads (`read_manifest`), and each call then
/// only looks the function up.
type ToolCall<'a> =
    TypedFunc<(&'a str, &'a str, &'a types::RequestContext), (Result<types::CallOutcome, types::Error>,)>;

/// The tools export: the bindings' indices (for `list`), and where its `call` is.
#[derive(Clone)]
struct ToolsExport {
    indices: tools::GuestIndices,
    call: ComponentExportIndex,
}

impl ToolsExport {
    fn new(pre: &InstancePre<CallState>) -> wasmtime::Result<ToolsExport> {
        let indices = tools::GuestIndices::new(pre)?;
        let component = pre.component();
        let call = component
            .get_export_index(None, bindings::TOOLS)
            .and_then(|tools| component.get_export_index(Some(&tools), "call"))
            .ok_or_else(|| wasmtime::format_err!("no `call` function"))?;
        Ok(ToolsExport { indices, call })
    }
}

/// CPU time after which a call runs on a thread of its own (see `offload`).
const OFFLOAD_AFTER: std::time::Duration = std::time::Duration::from_micros(500);

/// Whether a call that has used `used` of CPU, `built` of it on a spare's build, has
/// computed past `OFFLOAD_AFTER`. A spare's build is charged to the call but says nothing of
/// how long the call computes: it ran before the call, and an idle worker's is charged its
/// wall time, which a preemption stretches to near `OFFLOAD_AFTER` by itself.
fn computed_long(used: std::time::Duration, built: std::time::Duration) -> bool {
    used.saturating_sub(built) >= OFFLOAD_AFTER
}

/// Calls in a row that computed past `OFFLOAD_AFTER` after which a plugin's calls start on a
/// thread of their own. One is not enough: a short call is now and then charged that much (a
/// spare whose build was preempted, an inline instantiation that met a burst of page faults
/// or of the network's soft interrupts), and starting the next on a fresh thread, at a lower
/// priority, turned one slow call into several (BENCHMARKS "Offload cascades").
const LONG_STREAK: u8 = 2;

/// How many of a plugin's last calls in a row computed past `OFFLOAD_AFTER`, up to
/// `LONG_STREAK`.
#[derive(Default)]
struct LongStreak(AtomicU8);

impl LongStreak {
    /// Whether the plugin's calls are expected to run long: its last `LONG_STREAK` did.
    fn runs_long(&self) -> bool {
        self.0.load(Ordering::Relaxed) >= LONG_STREAK
    }

    /// Count a caller's call that ended, long or not. Written only when it changes: every
    /// worker's calls to the plugin read it.
    fn count(&self, went_long: bool) {
        let streak = self.0.load(Ordering::Relaxed);
        let next = if went_long { (streak + 1).min(LONG_STREAK) } else { 0 };
        if next != streak {
            self.0.store(next, Ordering::Relaxed);
        }
    }
}

impl Clone for LongStreak {
    fn clone(&self) -> Self {
        LongStreak(AtomicU8::new(self.0.load(Ordering::Relaxed)))
    }
}

/// What a plugin provides, read once when it loads.
#[derive(Debug, Clone, Default)]
pub struct Manifest {
    pub tools: Vec<types::Tool>,
    pub resources: Vec<types::Resource>,
    pub templates: Vec<types::ResourceTemplate>,
    pub prompts: Vec<types::Prompt>,
    /// Whether the plugin exports `completion`.
    pub completion: bool,
}

/// A compiled, linked plugin. Cheap to share behind an `Arc`; calls may run concurrently.
pub struct Plugin {
    /// The tenant it is loaded for, whose quotas its calls count against; its instance
    /// reserve is this tenant's plugin's.
    account: Arc<Account>,
    /// Its compiled component, shared with every other plugin of the same bytes.
    component: Arc<Component>,
    digest: String,
    /// What its calls' sandboxes are built from: its name, grants, directories and linked
    /// component.
    sandbox: Arc<Blueprint>,
    /// One permit per call allowed to run at once.
    slots: Arc<Semaphore>,
    /// The instances kept for this plugin, and its way to the shared ones.
    reservation: Arc<Reservation>,
    needs: Option<Needs>,
    tools: Option<ToolsExport>,
    resources: Option<resources::GuestIndices>,
    prompts: Option<prompts::GuestIndices>,
    completion: Option<completion::GuestIndices>,
    manifest: Manifest,
    /// Whether its calls are expected to compute past `OFFLOAD_AFTER`: then the next starts
    /// on a thread of its own rather than holding a request worker for its first half
    /// millisecond.
    long_streak: LongStreak,
    /// Its sandbox series, found at its first call.
    meters: OnceLock<PluginMeters>,
}

/// Whose doing a call is: a caller's counts against the tenant's quotas.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Charge {
    Caller,
    Load,
}

/// How a call's run ended.
enum Ended<T> {
    /// The guest returned, or failed.
    Ran(T),
    /// Its wall-clock limit passed first.
    WallClock,
    /// Its request was cancelled first.
    Cancelled,
}

/// The hostcall fuel of a call whose output limit is `output` bytes. Fuel counts what a lift
/// allocates (every list element at its size in memory, every string's bytes), which for a
/// result within the output limit is at most a few times what it takes on the wire.
fn hostcall_fuel(output: usize) -> usize {
    output.saturating_mul(16).saturating_add(1 << 20).min(128 << 20)
}

/// Run `release` once the current task has had its turn: the call's answer is on its way to
/// the client (the task awaiting it runs first) before the instance is torn down. Measured
/// at c=1 and c=8 as a few percent more calls a second (BENCHMARKS, session 23).
fn after_answer(release: impl FnOnce() + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn(async move {
            tokio::task::yield_now().await;
            release();
        })),
        Err(_) => release(),
    }
}

fn open_dirs(plugin: &str, grants: &Grants) -> Result<Arc<GrantDirs>, LoadError> {
    GrantDirs::open(grants).map(Arc::new).map_err(|reason| LoadError::Policy { plugin: plugin.to_owned(), reason })
}

fn reserve(
    runtime: &RuntimeInner,
    tenant: &Account,
    plugin: &str,
    grants: &Grants,
) -> Result<Arc<Reservation>, LoadError> {
    let reserve = grants.limits.reserved_instances();
    // One account per tenant's plugin: tenants never share a reserve.
    let account: Arc<str> = format!("{}/{plugin}", tenant.tenant()).into();
    runtime
        .pool
        .reserve(&account, reserve, tenant.quotas().instances)
        .map(Arc::new)
        .map_err(|e| LoadError::Policy { plugin: plugin.to_string(), reason: e.to_string() })
}

fn optional<I>(
    plugin: &str,
    pre: &InstancePre<CallState>,
    export: &'static str,
    indices: impl FnOnce(&InstancePre<CallState>) -> wasmtime::Result<I>,
) -> Result<Option<I>, LoadError> {
    if pre.component().get_export_index(None, export).is_none() {
        return Ok(None);
    }
    indices(pre).map(Some).map_err(|e| LoadError::BadExport {
        plugin: plugin.to_owned(),
        export,
        reason: format!("{e:#}"),
    })
}

/// A compiled component's import and export names.
pub(super) fn interface_names(component: &Component, engine: &wasmtime::Engine) -> (Vec<String>, Vec<String>) {
    let ty = component.component_type();
    let imports = ty.imports(engine).map(|(name, _)| name.to_owned()).collect();
    let exports = ty.exports(engine).map(|(name, _)| name.to_owned()).collect();
    (imports, exports)
}

/// [`bindings::with_version_note`] for a compiled component.
fn with_version_note(component: &Component, engine: &wasmtime::Engine, reason: String) -> String {
    let (imports, exports) = interface_names(component, engine);
    bindings::with_version_note(imports.iter().chain(&exports).map(String::as_str), reason)
}

impl Plugin {
    pub(crate) async fn link(
        runtime: Arc<RuntimeInner>,
        account: &Arc<Account>,
        name: &str,
        digest: String,
        component: Arc<Component>,
        grants: Arc<Grants>,
        needs: Option<Needs>,
    ) -> Result<Plugin, LoadError> {
        let pre = runtime.linker.instantiate_pre(&component).map_err(|e| LoadError::Link {
            plugin: name.to_owned(),
            reason: with_version_note(&component, &runtime.engine, format!("{e:#}")),
        })?;
        let dirs = open_dirs(name, &grants)?;
        let reservation = reserve(&runtime, account, name, &grants)?;
        let mut plugin = Plugin {
            account: account.clone(),
            component,
            digest,
            slots: Arc::new(Semaphore::new(grants.limits.concurrency as usize)),
            reservation,
            needs,
            tools: optional(name, &pre, bindings::TOOLS, ToolsExport::new)?,
            resources: optional(name, &pre, bindings::RESOURCES, resources::GuestIndices::new)?,
            prompts: optional(name, &pre, bindings::PROMPTS, prompts::GuestIndices::new)?,
            completion: optional(name, &pre, bindings::COMPLETION, completion::GuestIndices::new)?,
            sandbox: Arc::new(Blueprint::new(runtime, pre, name.into(), account.tenant().clone(), grants, dirs)),
            manifest: Manifest::default(),
            long_streak: LongStreak::default(),
            meters: OnceLock::new(),
        };
        if plugin.tools.is_none()
            && plugin.resources.is_none()
            && plugin.prompts.is_none()
            && plugin.completion.is_none()
        {
            let (imports, exports) = interface_names(&plugin.component, &plugin.sandbox.runtime.engine);
            let why = bindings::version_note(imports.iter().chain(&exports).map(String::as_str), true)
                .unwrap_or_else(|| "was it built against the Capsule WIT package?".into());
            return Err(LoadError::NoExports { plugin: name.to_owned(), why });
        }
        plugin.manifest = plugin.read_manifest().await?;
        Ok(plugin)
    }

    /// The plugin's name (its file stem).
    pub fn name(&self) -> &str {
        &self.sandbox.plugin
    }

    /// The SHA-256 of the component, in hex: which version of the plugin this is.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The account of the tenant it serves.
    pub fn account(&self) -> &Arc<Account> {
        &self.account
    }

    /// What the plugin provides.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// What the plugin is granted.
    pub fn grants(&self) -> &Arc<Grants> {
        &self.sandbox.grants
    }

    /// What the plugin declares it needs, if it declares anything.
    pub fn needs(&self) -> Option<&Needs> {
        self.needs.as_ref()
    }

    /// Whether `grants` are exactly the ones this plugin runs under: the same policy entry,
    /// and each granted directory still the one opened at load.
    pub fn has_grants(&self, grants: &Grants) -> bool {
        *self.sandbox.grants == *grants && self.sandbox.dirs.is_current(grants)
    }

    /// The same plugin under other grants (its directories opened again): no recompiling or
    /// relisting. Calls running on `self` keep their grants.
    pub fn with_grants(&self, grants: Arc<Grants>) -> Result<Plugin, LoadError> {
        let name = self.name();
        let dirs = open_dirs(name, &grants)?;
        let slots = self.places_for(grants.limits.concurrency);
        let reservation = reserve(&self.sandbox.runtime, &self.account, name, &grants)?;
        Ok(self.sandboxed(Arc::new(self.sandbox.with_grants(grants, dirs)), slots, reservation))
    }

    /// This version taking its callers' places from `earlier`, a version of the plugin it
    /// replaces, when both allow as many calls at once: during a swap the calls of both
    /// count against one limit, not one each.
    pub fn sharing_places_with(mut self, earlier: &Plugin) -> Plugin {
        self.slots = earlier.places_for(self.sandbox.grants.limits.concurrency);
        self
    }

    /// The callers' places of a version allowing `concurrency` calls at once that stands
    /// beside this one: this version's own when the number is the same, so that the calls
    /// of both count against one limit, else places of its own.
    fn places_for(&self, concurrency: u32) -> Arc<Semaphore> {
        if concurrency == self.sandbox.grants.limits.concurrency {
            self.slots.clone()
        } else {
            Arc::new(Semaphore::new(concurrency as usize))
        }
    }

    /// The same plugin with its lists read again (a plugin's lists may change while it
    /// runs; it says so with `host.list-changed`). It shares this version's sandbox (and so
    /// its spare instances) and concurrency limit, and calls running on `self` are unaffected.
    pub async fn relisted(&self) -> Result<Plugin, LoadError> {
        let mut plugin = self.sandboxed(self.sandbox.clone(), self.slots.clone(), self.reservation.clone());
        plugin.manifest = plugin.read_manifest().await?;
        Ok(plugin)
    }

    /// What its calls' sandboxes are built from, for the spare instances' tests.
    #[cfg(test)]
    pub(crate) fn blueprint(&self) -> &Arc<Blueprint> {
        &self.sandbox
    }

    /// This plugin's compiled component and lists, run in this sandbox, with these call slots
    /// and instance reservation.
    fn sandboxed(&self, sandbox: Arc<Blueprint>, slots: Arc<Semaphore>, reservation: Arc<Reservation>) -> Plugin {
        Plugin {
            account: self.account.clone(),
            component: self.component.clone(),
            digest: self.digest.clone(),
            sandbox,
            slots,
            reservation,
            needs: self.needs.clone(),
            tools: self.tools.clone(),
            resources: self.resources.clone(),
            prompts: self.prompts.clone(),
            completion: self.completion.clone(),
            manifest: self.manifest.clone(),
            long_streak: self.long_streak.clone(),
            meters: OnceLock::new(),
        }
    }

    async fn read_manifest(&self) -> Result<Manifest, LoadError> {
        let listing = |what: &'static str| {
            let plugin = self.name().to_owned();
            move |source: CallError| match source {
                CallError::Mismatch { export, reason } => LoadError::BadExport { plugin, export, reason },
                source => LoadError::Listing { plugin, what, source },
            }
        };
        let mut manifest = Manifest { completion: self.completion.is_some(), ..Manifest::default() };
        if let Some(ToolsExport { indices: ix, call }) = &self.tools {
            manifest.tools = self
                .run(Charge::Load, &ClientRoots::NotOffered, Arc::new(NoEvents), |store, instance, _| {
                    Box::pin(async move {
                        let _checked: ToolCall<'_> = instance
                            .get_typed_func(&mut *store, call)
                            .map_err(ExportMismatch::of(bindings::TOOLS_CALL))?;
                        ix.load(&mut *store, instance)
                            .map_err(ExportMismatch::of(bindings::TOOLS))?
                            .call_list(store)
                            .await
                    })
                })
                .await
                .and_then(|tools| self.within(tools, MANIFEST_LIMIT))
                .map_err(listing("tools"))?;
        }
        if let Some(ix) = &self.resources {
            (manifest.resources, manifest.templates) = self
                .run(Charge::Load, &ClientRoots::NotOffered, Arc::new(NoEvents), |store, instance, _| {
                    Box::pin(async move {
                        let guest = ix.load(&mut *store, instance).map_err(ExportMismatch::of(bindings::RESOURCES))?;
                        let resources = guest.call_list(&mut *store).await?;
                        Ok((resources, guest.call_templates(store).await?))
                    })
                })
                .await
                .and_then(|lists| self.within(lists, MANIFEST_LIMIT))
                .map_err(listing("resources"))?;
        }
        if let Some(ix) = &self.prompts {
            manifest.prompts = self
                .run(Charge::Load, &ClientRoots::NotOffered, Arc::new(NoEvents), |store, instance, _| {
                    Box::pin(async move {
                        ix.load(&mut *store, instance)
                            .map_err(ExportMismatch::of(bindings::PROMPTS))?
                            .call_list(store)
                            .await
                    })
                })
                .await
                .and_then(|prompts| self.within(prompts, MANIFEST_LIMIT))
                .map_err(listing("prompts"))?;
        }
        if let Some(ix) = &self.completion {
            // Type-check the export now rather than on the first completion request.
            self.run(Charge::Load, &ClientRoots::NotOffered, Arc::new(NoEvents), |store, instance, _| {
                Box::pin(
                    async move { ix.load(store, instance).map(drop).map_err(ExportMismatch::of(bindings::COMPLETION)) },
                )
            })
            .await
            .map_err(listing("completion"))?;
        }
        Ok(manifest)
    }

    /// Call a tool. The outer error is a sandbox fault; the inner one the plugin's own.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: &str,
        context: &types::RequestContext,
        roots: &ClientRoots,
        events: Events,
    ) -> Result<Result<types::CallOutcome, types::Error>, CallError> {
        let call = &self.tools.as_ref().ok_or(CallError::Unsupported("tools"))?.call;
        let outcome = self
            .run(Charge::Caller, roots, events, |store, instance, _| {
                Box::pin(async move {
                    let func = instance
                        .get_func(&mut *store, call)
                        .ok_or_else(|| wasmtime::format_err!("the tools export has no `call` function"))?;
                    // SAFETY: `read_manifest` type-checked this export of this component with
                    // `ToolCall`'s types when the plugin loaded, and the plugin does not load
                    // otherwise; every instance of a component has its types.
                    let typed: ToolCall<'_> = unsafe { TypedFunc::new_unchecked(func) };
                    let (outcome,) = typed.call_async(&mut *store, (name, arguments, context)).await?;
                    Ok(outcome)
                })
            })
            .await?;
        self.capped(outcome)
    }

    /// Read a resource.
    pub async fn read_resource(
        &self,
        uri: &str,
        context: &types::RequestContext,
        roots: &ClientRoots,
        events: Events,
    ) -> Result<Result<types::ReadOutcome, types::Error>, CallError> {
        let ix = self.resources.as_ref().ok_or(CallError::Unsupported("resources"))?;
        let outcome = self
            .run(Charge::Caller, roots, events, |store, instance, _| {
                Box::pin(async move { ix.load(&mut *store, instance)?.call_read(store, uri, context).await })
            })
            .await?;
        self.capped(outcome)
    }

    /// Render a prompt.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: &[(String, String)],
        context: &types::RequestContext,
        roots: &ClientRoots,
        events: Events,
    ) -> Result<Result<types::GetOutcome, types::Error>, CallError> {
        let ix = self.prompts.as_ref().ok_or(CallError::Unsupported("prompts"))?;
        let outcome = self
            .run(Charge::Caller, roots, events, |store, instance, _| {
                Box::pin(async move { ix.load(&mut *store, instance)?.call_get(store, name, arguments, context).await })
            })
            .await?;
        self.capped(outcome)
    }

    /// Suggest completions.
    pub async fn complete(
        &self,
        reference: &types::Reference,
        argument: &str,
        value: &str,
        context: &[(String, String)],
        events: Events,
    ) -> Result<Result<types::Suggestions, types::Error>, CallError> {
        let ix = self.completion.as_ref().ok_or(CallError::Unsupported("completion"))?;
        // Completion is for typing hints: it sees no directories.
        let outcome = self
            .run(Charge::Caller, &ClientRoots::Withheld, events, |store, instance, _| {
                Box::pin(async move {
                    ix.load(&mut *store, instance)?.call_complete(store, reference, argument, value, context).await
                })
            })
            .await?;
        self.capped(outcome)
    }

    /// Hold a result to the plugin's output limit.
    fn capped<T: OutputSize>(&self, outcome: T) -> Result<T, CallError> {
        self.within(outcome, self.sandbox.grants.limits.output)
    }

    fn within<T: OutputSize>(&self, outcome: T, limit: usize) -> Result<T, CallError> {
        let size = outcome.output_size();
        if size > limit {
            tracing::warn!(plugin = self.name(), "plugin result of {size} bytes discarded: over its output limit");
            return Err(CallError::Output { limit, size });
        }
        Ok(outcome)
    }

    /// Run `call` against a fresh instance in a fresh store, under the plugin's limits, with
    /// the directories its grants and the client's roots allow.
    async fn run<'c, R: Send>(
        &self,
        charge: Charge,
        roots: &ClientRoots,
        events: Events,
        call: impl for<'a> FnOnce(&'a mut Store<CallState>, &'a Instance, Outlives<'a, 'c>) -> CallFuture<'a, R> + Send + 'c,
    ) -> Result<R, CallError> {
        let limits = self.sandbox.grants.limits;
        // A busy plugin is waited for as long as a used-up quota would be (see `quota`). A
        // load (the operator's) takes no place among its callers.
        let slot = match charge {
            Charge::Load => None,
            Charge::Caller => Some(match self.slots.clone().try_acquire_owned() {
                Ok(slot) => slot,
                Err(_) => tokio::time::timeout(self.account.wait(), self.slots.clone().acquire_owned())
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .ok_or(CallError::PluginBusy(limits.concurrency))?,
            }),
        };
        // Loading is the operator's doing: it is charged to no caller's quota.
        let account = (charge == Charge::Caller).then_some(&self.account);
        // Released after the store frees the instance (below).
        let instance_held = match account {
            Some(account) => {
                account.check_cpu().await?;
                Some(account.instance().await?)
            }
            None => None,
        };
        // A load that finds every instance in use waits for a slot kept for loads.
        let (mut lease, load_slot) = match (charge, self.reservation.lease_when_free().await) {
            (_, Ok(lease)) => (Some(lease), None),
            (Charge::Load, Err(_)) => {
                let slots = self.sandbox.runtime.load_slots.clone();
                let waited = tokio::time::timeout(limits.timeout, slots.acquire_owned()).await;
                (None, Some(waited.ok().and_then(Result::ok).ok_or(CallError::Busy)?))
            }
            (Charge::Caller, Err(e)) => return Err(e),
        };
        let sandbox = &self.sandbox;
        let config = &sandbox.runtime.config;
        // A caller's call takes an instance built ahead, if there is one (`spare`).
        let prebuilt = match charge {
            Charge::Caller => sandbox.take_spare(self.long_streak.runs_long()),
            Charge::Load => None,
        };
        let stderr = prebuilt.as_ref().map(Spare::stderr);
        let cancellation = events.cancellation();
        let state = sandbox.state(sandbox.grants.mounts(roots), events, stderr).map_err(CallError::Sandbox)?;
        let meter = CpuMeter::new(account.cloned());
        let (mut store, ready, built) = match prebuilt {
            Some(spare) => {
                let (store, instance, cost) = spare.start(state);
                meter.charge(cost);
                (store, Some(instance), Some(cost))
            }
            None => (sandbox.store(state), None, None),
        };
        // What one lift from the guest may copy into the host (a host call's arguments, the
        // call's result), before the output limit is checked on what was copied: a plugin
        // cannot make the host hold wasmtime's default of 128 MiB a call whatever its limit.
        // A load's lists have their own, larger limit.
        if charge == Charge::Caller {
            store.set_hostcall_fuel(hostcall_fuel(limits.output));
        }
        let cpu = limits.cpu;
        let long = Long::default();
        // A plugin whose last calls were long most likely makes another: a call that starts
        // on a worker holds it (and the requests queued behind) until it is found long.
        if charge == Charge::Caller && self.long_streak.runs_long() {
            long.mark();
        }
        store.set_epoch_deadline(1);
        // On every tick: stop the plugin once it has used its whole CPU budget (host calls
        // included), its tenant has used its quota for the window, or the request was
        // cancelled; past `OFFLOAD_AFTER` of its own CPU, move it off the request workers;
        // and yield, so that a computing plugin never starves the tasks beside it.
        let built_cost = built.unwrap_or_default();
        let (charged, marked) = (meter.clone(), long.clone());
        store.epoch_deadline_callback(move |store| {
            let used = charged.used();
            if used >= cpu || charged.over_quota() || store.data().is_cancelled() {
                return Ok(UpdateDeadline::Interrupt);
            }
            if computed_long(used, built_cost) {
                marked.mark();
            }
            Ok(UpdateDeadline::YieldCustom(1, Box::pin(tokio::task::yield_now())))
        });
        let started = Instant::now();
        let mut instantiated = None;
        // The sandbox build and the guest's run, each a span under the request's. Neither is
        // entered: each is opened and closed around its step, so that no poll of the call
        // pays for entering and leaving them. An instance an idle worker built ahead was not
        // built in this request: that call has no build span, and its guest span, opened
        // here, says `capsule.sandbox.prebuilt` (the build's time is in the instantiate
        // histogram). Otherwise the guest span is opened once the build is done, naming its
        // parent, taken here: a long call's later polls run off the request's worker.
        let (plugin, tenant) = (self.name(), &**self.account.tenant());
        let prebuilt = ready.is_some().then(|| {
            tracing::debug_span!(
                "guest call",
                otel.name = "capsule.guest.call",
                capsule.plugin = plugin,
                capsule.tenant = tenant,
                capsule.sandbox.prebuilt = true
            )
        });
        let build = match ready {
            Some(_) => tracing::Span::none(),
            None => tracing::debug_span!(
                "sandbox build",
                otel.name = "capsule.sandbox.build",
                capsule.plugin = plugin,
                capsule.tenant = tenant
            ),
        };
        let parent = if build.is_disabled() { tracing::Span::none() } else { tracing::Span::current() };
        // Boxed: the timeout, the select and `Offload` below would each hold it in full, and
        // every async layer above copies what it holds when it is moved into its parent
        // (BENCHMARKS.md, "Box the sandbox work").
        let work = Box::pin(meter.meter(sandbox.runtime.clock.runs(), async {
            let instance = match ready {
                Some(instance) => instance,
                None => sandbox.pre.instantiate_async(&mut store).await?,
            };
            drop(build);
            instantiated = Some(started.elapsed());
            let _guest = prebuilt.unwrap_or_else(|| {
                tracing::debug_span!(parent: &parent, "guest call", otel.name = "capsule.guest.call",
                    capsule.plugin = plugin, capsule.tenant = tenant)
            });
            call(&mut store, &instance, std::marker::PhantomData).await
        }));
        // The call watches for its request's cancellation itself: on a thread of its own
        // (`offload`) it blocks the task that awaits it, and a guest waiting in a host call
        // (a sleep, a socket) reaches no tick where the epoch callback would stop it.
        let watched = async {
            tokio::select! {
                biased;
                outcome = tokio::time::timeout(limits.timeout, work) => outcome.map_or(Ended::WallClock, Ended::Ran),
                () = cancellation.cancelled() => Ended::Cancelled,
            }
        };
        let outcome = Offload::new(long.clone(), watched).await;
        let went_long = computed_long(meter.used(), built_cost);
        if charge == Charge::Caller {
            self.long_streak.count(went_long);
        }
        // The sandbox series are of calls: a load's list reads are not counted in them.
        if let Some(instantiated) = instantiated
            && charge == Charge::Caller
        {
            let guest = started.elapsed().saturating_sub(instantiated);
            let peak = store.data().limiter.peak;
            let meters = self.meters.get_or_init(|| config.metrics.plugin(self.account.tenant(), self.name()));
            // A prebuilt instance's build is counted as this call's, as it is charged.
            meters.sandbox(built_cost + instantiated, guest, peak, built.is_some());
        }
        let result = match outcome {
            Ended::Ran(Ok(value)) => Ok(value),
            Ended::Ran(Err(error)) => {
                Err(self.classify(error, &meter, (store.data().is_cancelled(), store.hostcall_fuel())))
            }
            Ended::WallClock => Err((CallError::WallClock(limits.timeout), None)),
            Ended::Cancelled => Err((CallError::Cancelled, None)),
        };
        let stderr = store.data().stderr.text();
        // The instance is freed before the holds on it are released (a tuple drops its
        // fields in order). A long call may leave much memory to give back: that is done off
        // the workers. A short one's teardown (~9 µs) waits until the answer has gone out.
        if let Some(lease) = &mut lease {
            lease.ending();
        }
        let release = move || drop((store, lease, load_slot, instance_held, slot));
        if long.is_set() {
            let _ = tokio::task::spawn_blocking(release).await;
        } else {
            after_answer(release);
        }
        if charge == Charge::Caller {
            sandbox.served(went_long || long.is_set());
        }
        match result {
            Ok(value) => {
                if let Some(stderr) = stderr {
                    tracing::info!(target: "capsule::plugin", plugin = self.name(), "stderr of a call:\n{stderr}");
                }
                Ok(value)
            }
            Err((failure, trace)) => {
                let failure = match (failure, stderr.as_deref().and_then(crash_cause)) {
                    (CallError::Trap(what), Some(cause)) => CallError::Trap(format!("{what}: {cause}")),
                    (failure, _) => failure,
                };
                // One record per failed call: what stopped it, where, and everything it said.
                let trace = trace.map(|t| format!("\n{t}")).unwrap_or_default();
                let stderr = stderr.map(|s| format!("\nits stderr:\n{s}")).unwrap_or_default();
                tracing::warn!(plugin = self.name(), cpu = ?meter.used(), "plugin call failed: {failure}{trace}{stderr}");
                Err(failure)
            }
        }
    }

    /// What stopped a call, and the guest's backtrace when there is one.
    /// `fuel` is the hostcall fuel the call ran with.
    fn classify(
        &self,
        error: wasmtime::Error,
        meter: &CpuMeter,
        (cancelled, fuel): (bool, usize),
    ) -> (CallError, Option<String>) {
        if let Some(e) = error.downcast_ref::<MemoryLimitExceeded>() {
            return (CallError::Memory { limit: e.limit, desired: e.desired }, None);
        }
        if error.downcast_ref::<PoolConcurrencyLimitError>().is_some() {
            return (CallError::Busy, None);
        }
        if let Some(ExportMismatch { export, reason }) = error.downcast_ref::<ExportMismatch>() {
            return (CallError::Mismatch { export, reason: reason.clone() }, None);
        }
        let failure = match error.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) if cancelled => CallError::Cancelled,
            Some(Trap::Interrupt) if meter.over_quota() => match self.account.cpu_left() {
                Err(quota) => CallError::Quota(quota),
                Ok(()) => CallError::Deadline(self.sandbox.grants.limits.cpu),
            },
            Some(Trap::Interrupt) => CallError::Deadline(self.sandbox.grants.limits.cpu),
            Some(Trap::StackOverflow) => CallError::StackOverflow,
            Some(Trap::UnreachableCodeReached) => CallError::Trap("it aborted".into()),
            Some(trap) => CallError::Trap(trap.to_string()),
            // wasmtime's fuel error is not public: it is known by its message.
            None if format!("{error:#}").contains("fuel allocated for hostcalls has been exhausted") => {
                CallError::Copied(fuel)
            }
            None => CallError::Host(format!("{error:#}")),
        };
        (failure, error.downcast_ref::<wasmtime::WasmBacktrace>().map(ToString::to_string))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One long call among short ones does not move the next off the workers (it was most
    /// likely a preempted build or a burst of page faults); two in a row do, and a short one
    /// ends that.
    #[test]
    fn calls_start_off_the_workers_after_two_long_ones_in_a_row() {
        let streak = LongStreak::default();
        streak.count(true);
        assert!(!streak.runs_long(), "one long call is not a plugin that runs long");
        streak.count(false);
        streak.count(true);
        assert!(!streak.runs_long(), "a short call between resets the count");
        streak.count(true);
        assert!(streak.runs_long());
        streak.count(true);
        assert!(streak.clone().runs_long(), "the plugin with its lists read again keeps what was learnt");
        streak.count(false);
        assert!(!streak.runs_long());
    }

    /// A spare's build charged to a call does not send it off the workers: on a busy machine
    /// a preempted build was charged up to 0.5 ms of wall time, and a trivial call taking
    /// such a spare was moved to a fresh thread at the next tick.
    #[test]
    fn a_spare_s_build_does_not_make_a_call_long() {
        let us = std::time::Duration::from_micros;
        assert!(!computed_long(us(480), us(450)), "30 µs of its own");
        assert!(!computed_long(us(499), us(0)));
        assert!(computed_long(us(500), us(0)));
        assert!(computed_long(us(950), us(450)), "500 µs of its own");
        assert!(!computed_long(us(10), us(20)), "never below zero");
    }
}
