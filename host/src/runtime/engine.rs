//! The shared engine: configuration, the epoch clock, the linker, and compilation.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::bindings;
use super::cache::{CompileCache, digest};
use super::clock::EpochClock;
use super::error::LoadError;
use super::fs::vanished_dir;
use super::plugin::Plugin;
use super::pool::InstancePool;
use super::quota::Account;
use super::sandbox::CallState;
use super::spare::Prebuilder;
use crate::policy::{Grants, Needs};
use crate::telemetry::Metrics;

/// How often the epoch advances while guest code runs without a break: how often a computing
/// plugin yields to other tasks, its CPU time is checked against its deadline, and a call past
/// its first half millisecond moves off the request workers (see `offload`).
const EPOCH_TICK: Duration = Duration::from_micros(250);

/// How often the clock looks for guest code that has run a tick, while none has: the longest
/// a computing call runs before its first interruption, so it bounds how long a call not
/// yet known to be long holds a worker, part of what other clients wait (the battery
/// benchmark measures it). Each look wakes a thread, and most calls end well inside it
/// (see `clock`).
const EPOCH_WATCH: Duration = Duration::from_millis(1);

/// The largest component accepted: core instances (a Rust component has a handful: its
/// module, the WASI adapter and shims; a dynamically linked Python one a dozen or so),
/// linear memories and tables. A bigger component is refused when it loads.
const CORE_INSTANCES_PER_COMPONENT: u32 = 32;
const MEMORIES_PER_COMPONENT: u32 = 2;
const TABLES_PER_COMPONENT: u32 = 8;

/// Engine-wide settings. Per-plugin limits (memory, CPU, timeout, concurrency, output) come
/// from the policy; these bound the engine as a whole.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The most linear memory any plugin may be granted, in bytes: the size of each
    /// sandbox's memory slot. A plugin granted more is refused at load.
    pub max_memory: usize,
    /// Plugin instances that may exist at once, across all plugins, for calls.
    pub max_instances: u32,
    /// Instances idle workers may build ahead for the next call (see `spare`), beyond
    /// `max_instances`; zero builds none.
    pub spare_instances: u32,
    /// Table elements a call may allocate.
    pub table_elements: usize,
    /// Bytes of plugin stderr kept per call (the newest) and logged when the call ends.
    pub stderr_limit: usize,
    /// Log and progress messages forwarded per call; the rest are dropped.
    pub event_limit: u32,
    /// Where compiled components are kept between runs; `None` compiles every time.
    pub compile_cache: Option<CompileCache>,
    /// Where calls, sandboxes and the compile cache are counted.
    pub metrics: Arc<Metrics>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            max_memory: 64 << 20,
            max_instances: 128,
            spare_instances: 0,
            table_elements: 20_000,
            stderr_limit: 64 << 10,
            event_limit: 1_000,
            compile_cache: None,
            metrics: Arc::default(),
        }
    }
}

/// What [`PluginRuntime::inspect`] learns about a component.
#[derive(Debug)]
pub struct Inspection {
    pub sha256: String,
    /// Interfaces it imports (what it could ask the host for).
    pub imports: Vec<String>,
    /// Interfaces it exports.
    pub exports: Vec<String>,
    /// Why this host cannot link it, if it cannot.
    pub link_error: Option<String>,
}

/// Pool slots beyond the instances and spares, for reading a plugin's lists when every
/// instance is in use: a swap or a relist must not be dropped because the version it
/// replaces is busy.
const LOAD_SLOTS: u32 = 2;

pub(crate) struct RuntimeInner {
    pub engine: Engine,
    pub linker: Linker<CallState>,
    pub config: RuntimeConfig,
    /// Counts the stores alive, one per running call, and interrupts them.
    pub clock: EpochClock,
    /// Who may use the engine's instances.
    pub pool: InstancePool,
    /// Spare instances alive now, at most `config.spare_instances`.
    pub spares: AtomicU32,
    /// The pool's slots kept for loads (see [`LOAD_SLOTS`]).
    pub load_slots: Arc<tokio::sync::Semaphore>,
    /// Builds spares for calls that run long or build slowly.
    pub prebuilder: Prebuilder,
    /// The empty directory spares of plugins with granted directories are built with
    /// (`fs::vanished_dir`), made when the first is; without it they are not prebuilt.
    placeholder_dir: OnceLock<Option<OwnedFd>>,
    /// Components in use, by SHA-256: a component served by several tenants (or reloaded
    /// while its old version still runs) is compiled, or read from the cache, once.
    pub components: Mutex<HashMap<String, Weak<Component>>>,
}

impl RuntimeInner {
    /// The empty directory of placeholders (see the field), made on first need so that a
    /// server without granted directories never touches the temporary directory.
    pub fn placeholder_dir(&self) -> Option<BorrowedFd<'_>> {
        let made = self.placeholder_dir.get_or_init(|| {
            vanished_dir()
                .inspect_err(|e| {
                    tracing::warn!(
                        "cannot make an empty directory; plugins with granted directories are not prebuilt: {e}"
                    );
                })
                .ok()
        });
        made.as_ref().map(AsFd::as_fd)
    }
}

/// Compiles components and hands out [`Plugin`]s that run calls in fresh sandboxes.
/// Cheap to clone.
#[derive(Clone)]
pub struct PluginRuntime {
    inner: Arc<RuntimeInner>,
}

impl PluginRuntime {
    /// Build the engine and start its epoch ticker.
    pub fn new(config: RuntimeConfig) -> Result<Self, LoadError> {
        let engine_error = |e: wasmtime::Error| LoadError::Engine(format!("{e:#}"));
        let mut pool = PoolingAllocationConfig::new();
        let instances = config.max_instances.max(1);
        // Every pooled resource is sized for `instances` of the largest component accepted,
        // so only component instances are scarce and the instance pool decides who gets one.
        // Spares have slots of their own.
        let slots = instances + config.spare_instances + LOAD_SLOTS;
        pool.total_component_instances(slots)
            .total_core_instances(slots * CORE_INSTANCES_PER_COMPONENT)
            .total_memories(slots * MEMORIES_PER_COMPONENT)
            .total_tables(slots * TABLES_PER_COMPONENT)
            .total_stacks(slots)
            .max_memory_size(config.max_memory)
            .table_elements(config.table_elements)
            .max_core_instances_per_component(CORE_INSTANCES_PER_COMPONENT)
            .max_memories_per_component(MEMORIES_PER_COMPONENT)
            .max_tables_per_component(TABLES_PER_COMPONENT)
            .max_component_instance_size(4 << 20)
            // Keep small memories resident and reset them by scanning dirty pages: a fresh
            // instance per call then costs microseconds, not an madvise round trip.
            .linear_memory_keep_resident(2 << 20)
            .table_keep_resident(64 << 10)
            .pagemap_scan(Enabled::Auto);
        let mut wasm = Config::new();
        wasm.epoch_interruption(true)
            .max_wasm_stack(512 << 10)
            .async_stack_size(2 << 20)
            .memory_reservation((config.max_memory as u64).max(64 << 20))
            .memory_guard_size(64 << 20)
            .memory_reservation_for_growth(0)
            .wasm_backtrace_max_frames(std::num::NonZeroUsize::new(16))
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&wasm).map_err(engine_error)?;

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(engine_error)?;
        super::fs::refuse_special_files(&mut linker).map_err(engine_error)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).map_err(engine_error)?;
        bindings::Plugin::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state).map_err(engine_error)?;

        let clock = EpochClock::start(&engine, EPOCH_TICK, EPOCH_WATCH)
            .map_err(|e| LoadError::Engine(format!("cannot start the epoch thread: {e}")))?;

        let pool = InstancePool::new(instances);
        Ok(PluginRuntime {
            inner: Arc::new(RuntimeInner {
                engine,
                linker,
                config,
                clock,
                pool,
                spares: AtomicU32::new(0),
                load_slots: Arc::new(tokio::sync::Semaphore::new(LOAD_SLOTS as usize)),
                prebuilder: Prebuilder::default(),
                placeholder_dir: OnceLock::new(),
                components: Mutex::default(),
            }),
        })
    }

    /// How many plugin instances are alive: one per call in progress. Every call drops its
    /// instance when it ends, however it ends, so at rest this is zero.
    pub fn live_instances(&self) -> usize {
        self.inner.clock.live()
    }

    /// Spare instances alive now (see `spare`).
    #[cfg(test)]
    pub(crate) fn spares(&self) -> u32 {
        self.inner.spares.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether instance memory is reset by scanning dirty pages (Linux 6.7+), which keeps a
    /// fresh instance per call cheap; without it resets fall back to madvise.
    pub fn fast_memory_reset() -> bool {
        PoolingAllocationConfig::is_pagemap_scan_available()
    }

    /// The limits in force.
    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    /// Compile a component. CPU-heavy and blocking: run it off the async reactor.
    pub fn compile(&self, name: &str, bytes: &[u8]) -> Result<Component, LoadError> {
        Component::from_binary(&self.inner.engine, bytes)
            .map_err(|e| LoadError::Compile { plugin: name.to_owned(), reason: format!("{e:#}") })
    }

    /// Compile a component (or take the one already in use, or the compile cache's) on the
    /// blocking pool, then link it, check its exports and read its tools, resources and
    /// prompts, sandboxed as `grants` say. `account` is the tenant the plugin is loaded for:
    /// its calls count against the tenant's quotas, and its reserve of instances is the
    /// tenant's plugin's, apart from other tenants'. `needs` is what the plugin declares (read
    /// by the caller, as a sidecar file may hold it); the plugin carries it for the operator.
    pub async fn load(
        &self,
        account: &Arc<Account>,
        name: &str,
        (bytes, needs): (Arc<[u8]>, Option<Needs>),
        grants: Arc<Grants>,
    ) -> Result<Plugin, LoadError> {
        self.check_grants(name, &grants)?;
        let runtime = self.clone();
        let owned = name.to_owned();
        let (component, sha256) = tokio::task::spawn_blocking(move || {
            // Hashed once: the digest names the cache entry and identifies the plugin.
            let sha256 = digest(&bytes);
            let component = runtime.component(&owned, &sha256, &bytes)?;
            Ok::<_, LoadError>((component, sha256))
        })
        .await
        .map_err(|e| LoadError::Engine(format!("compile task failed: {e}")))??;
        Plugin::link(self.inner.clone(), account, name, sha256, component, grants, needs).await
    }

    /// Put the compilation of these bytes (whose [`digest`] is `sha256`) in the compile
    /// cache; `false` if it was there already. Blocking.
    pub fn precompile(&self, name: &str, sha256: &str, bytes: &[u8]) -> Result<bool, LoadError> {
        let engine = &self.inner.engine;
        let cache =
            self.inner.config.compile_cache.as_ref().ok_or_else(|| LoadError::Engine("no compile cache".into()))?;
        if cache.contains(engine, sha256) {
            return Ok(false);
        }
        cache.store(engine, sha256, &self.compile(name, bytes)?);
        Ok(true)
    }

    /// The compiled component of these bytes: the one in use if there is one, else the
    /// compile cache's, else compiled now. Blocking.
    fn component(&self, name: &str, sha256: &str, bytes: &[u8]) -> Result<Arc<Component>, LoadError> {
        let in_use = |components: &HashMap<String, Weak<Component>>| components.get(sha256).and_then(Weak::upgrade);
        if let Some(component) = in_use(&self.inner.components.lock().unwrap_or_else(PoisonError::into_inner)) {
            return Ok(component);
        }
        let engine = &self.inner.engine;
        let cache = self.inner.config.compile_cache.as_ref();
        let cached = cache.and_then(|cache| cache.load(engine, sha256));
        if cache.is_some() {
            self.inner.config.metrics.compile_cache(cached.is_some());
        }
        let component = match cached {
            Some(component) => component,
            None => {
                let component = self.compile(name, bytes)?;
                if let Some(cache) = cache {
                    cache.store(engine, sha256, &component);
                }
                component
            }
        };
        let mut components = self.inner.components.lock().unwrap_or_else(PoisonError::into_inner);
        // Another load may have finished the same component meanwhile: keep one.
        if let Some(component) = in_use(&components) {
            return Ok(component);
        }
        components.retain(|_, component| component.strong_count() > 0);
        let component = Arc::new(component);
        components.insert(sha256.to_owned(), Arc::downgrade(&component));
        Ok(component)
    }

    /// What a component imports and exports, and whether this host can link it: everything
    /// knowable without running it.
    pub fn inspect(&self, name: &str, bytes: &[u8]) -> Result<Inspection, LoadError> {
        let component = self.compile(name, bytes)?;
        let engine = &self.inner.engine;
        let (imports, exports) = super::plugin::interface_names(&component, engine);
        let names = || imports.iter().chain(&exports).map(String::as_str);
        let link_error = self
            .inner
            .linker
            .instantiate_pre(&component)
            .err()
            .map(|e| super::bindings::with_version_note(names(), format!("{e:#}")));
        Ok(Inspection { sha256: digest(bytes), imports, exports, link_error })
    }

    /// Whether this engine can honour `grants` (a memory limit larger than the sandbox slots
    /// cannot be, without a restart).
    pub fn check_grants(&self, name: &str, grants: &Grants) -> Result<(), LoadError> {
        let max = self.inner.config.max_memory;
        if grants.limits.memory > max {
            return Err(LoadError::Policy {
                plugin: name.to_owned(),
                reason: format!(
                    "its memory limit of {} MiB exceeds the server's maximum of {} MiB (restart with a higher --max-memory)",
                    grants.limits.memory >> 20,
                    max >> 20
                ),
            });
        }
        Ok(())
    }
}
