//! Prebuilt instances: a request worker with nothing to do builds, ahead of time, the fresh
//! instance the next call to the plugin it last served will run in.
//!
//! Instantiating a component takes ~10 µs, about a third of what the server spends on a
//! trivial call, and it used to sit between reading a request and answering it. A worker
//! that goes idle after a call (tokio's before-park hook, or the idle poller finding a quiet
//! round) now builds one instance of that plugin and keeps it; the next call to the same
//! plugin version on that worker takes it instead of instantiating. A loaded worker never
//! parks, so it builds none and pays nothing.
//!
//! Every instance still serves exactly one call: a spare is built from the plugin's
//! [`Blueprint`] with a placeholder call state (no mounts, no events, no caller), and the
//! call that takes it replaces that state with its own before any guest code runs for it.
//! An instantiation that touched the sandbox (opened a WASI resource, wrote to stderr), did
//! not finish in one poll or failed is never used: the plugin version is then not prebuilt
//! again, and its calls instantiate as before. What a build cost is charged to the call
//! that takes it, against its CPU deadline and its tenant's quota, as an inline build would
//! be: its wall time, since it is one poll on an idle worker (reading the thread's CPU clock
//! is a system call, ~0.4 µs, and an inline build's short poll is charged its wall time
//! too). A build that took [`BUILD_LIMIT`] (its thread preempted, or guest code that runs
//! that long, which is interrupted) is dropped, not charged; a version whose builds take
//! that long twice in a row is not prebuilt for [`SLOW_PAUSE`], then tried again: on a busy
//! machine a preempted thread says little about the next build, and an instantiation that
//! is always slow costs one dropped build a pause.
//!
//! A plugin version whose calls run long (they move off the workers, see `offload`), or
//! whose builds are too slow for an idle worker, has its spares built by the prebuild
//! thread instead: one at a time, kept in the version's own slot, and taken by its next call
//! on any worker, which queues the next build at once so that it is made while that call
//! runs. These are the interpreter-carrying components (Python, JavaScript, Go), where an
//! instantiation is 0.2-1 ms of a 1-3 ms call. A version paused only because its workers were
//! preempted while building goes back to them as soon as the thread builds it in under half
//! the limit of CPU time. The thread's builds may take up to the plugin's CPU budget (an
//! instantiation that needs more could serve no call) and are charged their CPU time, since
//! the thread may be preempted for any while.
//!
//! Each worker keeps at most one spare, each version at most one built ahead, and the
//! engine at most `spare_instances` in all: its pool has that many slots beyond
//! `max_instances`, so a spare never takes a slot a call could have had.

use std::cell::RefCell;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak, mpsc};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use wasmtime::component::{Instance, InstancePre};
use wasmtime::{Store, UpdateDeadline};

use super::Events;
use super::NoEvents;
use super::engine::RuntimeInner;
use super::fs::GrantDirs;
use super::limits::thread_cpu;
use super::sandbox::{CallState, Sandbox};
use super::stderr::CallStderr;
use crate::policy::{Grants, Mount};

/// The longest an idle worker spends building one spare, since its connections wait for
/// it: an instantiation whose guest code runs longer is not prebuilt.
const BUILD_LIMIT: Duration = Duration::from_micros(500);

/// Builds in a row that took [`BUILD_LIMIT`] after which a plugin version is not prebuilt
/// for [`SLOW_PAUSE`].
const SLOW_BUILDS: u8 = 2;

/// How long a version whose builds were slow is not prebuilt.
const SLOW_PAUSE: Duration = Duration::from_secs(1);

/// What every call's sandbox of one plugin version is built from.
pub(crate) struct Blueprint {
    pub runtime: Arc<RuntimeInner>,
    pub pre: InstancePre<CallState>,
    pub plugin: Arc<str>,
    pub tenant: Arc<str>,
    pub grants: Arc<Grants>,
    /// The granted directories, opened once for every call to open its mounts beneath.
    pub dirs: Arc<GrantDirs>,
    /// Set once a prebuilt instance of this version could not be used: it is not tried again.
    refused: AtomicBool,
    /// Its builds that took [`BUILD_LIMIT`].
    slow: SlowBuilds,
    /// The spare the prebuild thread built, which a call on any worker may take.
    ahead: Mutex<Option<Spare>>,
    /// Whether `ahead` holds one: the common case, a version built on the workers, reads
    /// this and takes no lock.
    ahead_ready: AtomicBool,
    /// Whether a build of this version is queued on the prebuild thread or under way.
    ahead_queued: AtomicBool,
}

/// Who builds a spare, which decides how long its build may take and what it is charged.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Builder {
    /// An idle request worker, whose connections wait meanwhile: one poll of at most
    /// [`BUILD_LIMIT`] of wall time, charged its wall time.
    Worker,
    /// The prebuild thread: up to the plugin's CPU budget, charged the thread's CPU time.
    Ahead,
}

/// The thread that builds spares ahead for versions whose calls run long or whose builds
/// are slow, started when the first is needed. It ends with the engine.
#[derive(Default)]
pub(crate) struct Prebuilder {
    queue: OnceLock<Option<mpsc::Sender<Weak<Blueprint>>>>,
}

impl Prebuilder {
    /// Queue a build of `blueprint`'s next spare; false if the thread could not be started.
    fn queue(&self, blueprint: Weak<Blueprint>) -> bool {
        let sender = self.queue.get_or_init(|| {
            let (sender, builds) = mpsc::channel::<Weak<Blueprint>>();
            let started = std::thread::Builder::new().name("capsule-prebuild".into()).spawn(move || {
                // A start function that calls the host gets the same runtime context as on
                // a worker: no reactor is reached for, since a build that waits is refused.
                let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                    return;
                };
                let _context = runtime.enter();
                for blueprint in builds {
                    if let Some(blueprint) = blueprint.upgrade() {
                        blueprint.fill_ahead();
                    }
                }
            });
            match started {
                Ok(_) => Some(sender),
                Err(e) => {
                    tracing::warn!(
                        "cannot start the prebuild thread; calls that run long build their own instances: {e}"
                    );
                    None
                }
            }
        });
        sender.as_ref().is_some_and(|sender| sender.send(blueprint).is_ok())
    }
}

/// A fresh instance built ahead of its call.
pub(crate) struct Spare {
    /// The plugin version it is an instance of.
    blueprint: Weak<Blueprint>,
    store: Store<CallState>,
    instance: Instance,
    /// What its build took, charged to the call that takes it.
    cost: Duration,
    /// Counted among the engine's spares while it lives.
    _counted: Counted,
}

impl Spare {
    /// The store and instance for a call with this state, which replaces the placeholder
    /// before any guest code runs for the call, and what building them cost.
    pub fn start(self, mut state: CallState) -> (Store<CallState>, Instance, Duration) {
        let Spare { mut store, instance, cost, .. } = self;
        let placeholder = store.data_mut();
        state.limiter.peak = placeholder.limiter.peak;
        state.adopt_resources(placeholder);
        *placeholder = state;
        (store, instance, cost)
    }

    /// Where the standard streams it opened while it was built write: the call's stderr must
    /// be the same buffer.
    pub fn stderr(&self) -> CallStderr {
        self.store.data().stderr.clone()
    }
}

/// One of the engine's spares, counted for as long as it lives.
struct Counted(Arc<RuntimeInner>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.spares.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A version's builds that took [`BUILD_LIMIT`]: after [`SLOW_BUILDS`] of them in a row, it
/// is not prebuilt for [`SLOW_PAUSE`]. Times are passed in, so that the rule is tested
/// without waiting.
struct SlowBuilds {
    since: Instant,
    in_a_row: AtomicU8,
    /// Microseconds after `since` until which no spare is built; zero for none. Written only
    /// when it changes: every worker's builds of the version read it.
    paused_until: AtomicU64,
}

impl SlowBuilds {
    fn new(now: Instant) -> Self {
        SlowBuilds { since: now, in_a_row: AtomicU8::new(0), paused_until: AtomicU64::new(0) }
    }

    fn micros(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.since).as_micros()).unwrap_or(u64::MAX)
    }

    /// Whether a spare may be built at `now`.
    fn allow(&self, now: Instant) -> bool {
        let until = self.paused_until.load(Ordering::Relaxed);
        until == 0 || self.micros(now) >= until
    }

    /// Count a build that ended at `now`, slow or not; true if that starts a pause.
    fn record(&self, slow: bool, now: Instant) -> bool {
        if !slow {
            if self.in_a_row.load(Ordering::Relaxed) != 0 {
                self.in_a_row.store(0, Ordering::Relaxed);
            }
            if self.paused_until.load(Ordering::Relaxed) != 0 {
                self.paused_until.store(0, Ordering::Relaxed);
            }
            return false;
        }
        let before = self.in_a_row.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_add(1)));
        if before.unwrap_or(u8::MAX).saturating_add(1) < SLOW_BUILDS {
            return false;
        }
        self.paused_until.store(self.micros(now + SLOW_PAUSE).max(1), Ordering::Relaxed);
        true
    }
}

thread_local! {
    /// This worker's spare, if it has one.
    static SPARE: RefCell<Option<Spare>> = const { RefCell::new(None) };
    /// The plugin version this worker last served a short call of, until it goes idle. Not
    /// held: a version swapped out meanwhile is not built again.
    static WANTED: RefCell<Option<Weak<Blueprint>>> = const { RefCell::new(None) };
}

impl Blueprint {
    pub fn new(
        runtime: Arc<RuntimeInner>,
        pre: InstancePre<CallState>,
        plugin: Arc<str>,
        tenant: Arc<str>,
        grants: Arc<Grants>,
        dirs: Arc<GrantDirs>,
    ) -> Self {
        Blueprint {
            runtime,
            pre,
            plugin,
            tenant,
            grants,
            dirs,
            refused: AtomicBool::new(false),
            slow: SlowBuilds::new(Instant::now()),
            ahead: Mutex::new(None),
            ahead_ready: AtomicBool::new(false),
            ahead_queued: AtomicBool::new(false),
        }
    }

    /// The same plugin version under other grants and their directories: another sandbox,
    /// whose spares are its own.
    pub fn with_grants(&self, grants: Arc<Grants>, dirs: Arc<GrantDirs>) -> Blueprint {
        Blueprint::new(self.runtime.clone(), self.pre.clone(), self.plugin.clone(), self.tenant.clone(), grants, dirs)
    }

    /// A call's store data: its directories (the grants narrowed to `mounts`), where its
    /// events go, and its stderr (a prebuilt instance's, or a new one). Fails only if a
    /// granted directory cannot be opened.
    pub fn state(&self, mounts: Vec<Mount>, events: Events, stderr: Option<CallStderr>) -> Result<CallState, String> {
        self.state_with(mounts, events, stderr, None)
    }

    fn state_with(
        &self,
        mounts: Vec<Mount>,
        events: Events,
        stderr: Option<CallStderr>,
        placeholder_dir: Option<BorrowedFd<'_>>,
    ) -> Result<CallState, String> {
        let config = &self.runtime.config;
        CallState::new(Sandbox {
            plugin: self.plugin.clone(),
            tenant: self.tenant.clone(),
            grants: &self.grants,
            dirs: &self.dirs,
            mounts,
            events,
            event_limit: config.event_limit,
            stderr,
            stderr_limit: config.stderr_limit,
            placeholder_dir,
            table_elements: config.table_elements,
            clock: &self.runtime.clock,
        })
    }

    /// A fresh store for a call with this state, its memory and tables capped.
    pub fn store(&self, state: CallState) -> Store<CallState> {
        let mut store = Store::new(&self.runtime.engine, state);
        store.limiter(|state| &mut state.limiter);
        store
    }

    /// Say that a call of this version has just ended on this thread. A short one: if the
    /// thread goes idle before serving another, it builds a spare for the next, unless this
    /// version's builds are too slow for that lately. A long one, or a slow build: the
    /// prebuild thread builds it.
    pub fn served(self: &Arc<Self>, long: bool) {
        if self.runtime.config.spare_instances == 0 || self.refused.load(Ordering::Relaxed) {
            return;
        }
        if !long && self.slow.allow(Instant::now()) {
            let _ = WANTED.try_with(|wanted| *wanted.borrow_mut() = Some(Arc::downgrade(self)));
        } else {
            self.build_ahead();
        }
    }

    /// A spare of this version for a call: this thread's, or the one built ahead. A spare of
    /// it that cannot be used is dropped, and this version is not prebuilt again. `long`:
    /// the call is expected to run long, so the next spare built ahead is queued at once.
    pub fn take_spare(self: &Arc<Self>, long: bool) -> Option<Spare> {
        let local = SPARE
            .try_with(|slot| {
                let mut slot = slot.borrow_mut();
                let mine = slot.as_ref().is_some_and(|spare| std::ptr::eq(spare.blueprint.as_ptr(), Arc::as_ptr(self)));
                if mine { slot.take() } else { None }
            })
            .ok()
            .flatten();
        let mut spare = local.or_else(|| self.take_ahead(long))?;
        if !spare.store.data_mut().untouched() {
            tracing::debug!(plugin = %self.plugin, "its instantiation touched the sandbox: its calls are not prebuilt");
            self.refused.store(true, Ordering::Relaxed);
            return None;
        }
        Some(spare)
    }

    /// The spare built ahead, if one is ready. For a call expected to run long the next is
    /// queued at once, to be built while this one serves its call. Otherwise the call's end
    /// decides (`served`): a short call's version built ahead once (after a call that ran
    /// long, or preempted builds) goes back to its workers' idle builds, rather than keep
    /// the prebuild thread waking for every call.
    fn take_ahead(self: &Arc<Self>, long: bool) -> Option<Spare> {
        if !self.ahead_ready.load(Ordering::Acquire) {
            return None;
        }
        let spare = {
            let mut ahead = self.ahead.lock().unwrap_or_else(PoisonError::into_inner);
            self.ahead_ready.store(false, Ordering::Relaxed);
            ahead.take()
        };
        if long {
            self.build_ahead();
        }
        spare
    }

    /// Queue a build of this version on the prebuild thread, unless a spare built ahead is
    /// waiting or one is queued already.
    fn build_ahead(self: &Arc<Self>) {
        if self.ahead_ready.load(Ordering::Acquire) || self.ahead_queued.swap(true, Ordering::AcqRel) {
            return;
        }
        if !self.runtime.prebuilder.queue(Arc::downgrade(self)) {
            self.ahead_queued.store(false, Ordering::Release);
        }
    }

    /// On the prebuild thread: build this version's next spare and leave it for a call.
    fn fill_ahead(self: &Arc<Self>) {
        if !self.refused.load(Ordering::Relaxed)
            && let Some(spare) = self.build(Builder::Ahead)
        {
            *self.ahead.lock().unwrap_or_else(PoisonError::into_inner) = Some(spare);
            self.ahead_ready.store(true, Ordering::Release);
        }
        self.ahead_queued.store(false, Ordering::Release);
    }

    /// Build a spare instance: one poll, with the clock able to interrupt a start function
    /// that runs on.
    fn build(self: &Arc<Self>, builder: Builder) -> Option<Spare> {
        let runtime = &self.runtime;
        if builder == Builder::Worker && !self.slow.allow(Instant::now()) {
            return None;
        }
        let limit = runtime.config.spare_instances;
        if runtime.spares.fetch_add(1, Ordering::Relaxed) >= limit {
            runtime.spares.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        let counted = Counted(runtime.clone());
        // A placeholder has no mounts. When a call's may differ (the plugin has granted
        // directories), it has an empty directory instead, so that a start function that
        // asks for its directories, and may keep the answer, leaves a trace and its
        // instance is not used.
        let placeholder_dir = if self.grants.dirs.is_empty() {
            None
        } else if let Some(dir) = runtime.placeholder_dir() {
            Some(dir)
        } else {
            self.refused.store(true, Ordering::Relaxed);
            return None;
        };
        let state = self.state_with(Vec::new(), Arc::new(NoEvents), None, placeholder_dir).ok()?;
        let mut store = self.store(state);
        // The clock ticks for every call computing on the engine, so a tick during a build
        // says nothing about it; only how long it has gone on does.
        store.set_epoch_deadline(1);
        // Reading the thread's CPU clock is a system call: the workers' builds go without.
        let cpu_started = if builder == Builder::Ahead { thread_cpu() } else { 0 };
        let started = Instant::now();
        let spent = move || match builder {
            Builder::Worker => started.elapsed(),
            Builder::Ahead => Duration::from_nanos(thread_cpu().saturating_sub(cpu_started)),
        };
        let limit = match builder {
            Builder::Worker => BUILD_LIMIT,
            Builder::Ahead => self.grants.limits.cpu,
        };
        store.epoch_deadline_callback(move |_| {
            Ok(if spent() >= limit { UpdateDeadline::Interrupt } else { UpdateDeadline::Continue(1) })
        });
        let built = runtime.clock.runs().run(|| {
            let build = std::pin::pin!(self.pre.instantiate_async(&mut store));
            build.poll(&mut Context::from_waker(Waker::noop()))
        });
        let cost = spent();
        match built {
            Poll::Ready(_) if builder == Builder::Worker && cost >= BUILD_LIMIT => {
                // Preempted, most likely (interrupted by a tick, if a call computes), or a
                // start function that runs on: dropped, not charged to a call.
                if self.slow.record(true, started + cost) {
                    tracing::debug!(plugin = %self.plugin, "its instantiation took {cost:?}: its calls are not prebuilt for {SLOW_PAUSE:?}");
                }
                None
            }
            Poll::Ready(Ok(instance)) => {
                // A build the prebuild thread made in under half the limit of CPU time would
                // have fitted an idle worker's turn: the worker builds that paused this
                // version were preempted, not slow. The pause ends, so that a version of
                // short calls goes back to its workers' idle builds instead of waking this
                // thread for every call (a context switch a call, which on a guest with slow
                // wake-ups cost more than the build).
                if builder == Builder::Worker || cost < BUILD_LIMIT / 2 {
                    self.slow.record(false, started + cost);
                }
                store.data_mut().detach_clock();
                Some(Spare { blueprint: Arc::downgrade(self), store, instance, cost, _counted: counted })
            }
            Poll::Ready(Err(e)) => {
                tracing::debug!(plugin = %self.plugin, "cannot prebuild an instance, its calls are not prebuilt: {e:#}");
                self.refused.store(true, Ordering::Relaxed);
                None
            }
            Poll::Pending => {
                tracing::debug!(plugin = %self.plugin, "its instantiation waits: its calls are not prebuilt");
                self.refused.store(true, Ordering::Relaxed);
                None
            }
        }
    }
}

/// The current thread is ending: its spare goes now, while the thread's locals still live. A
/// store dropped with them logs (wasmtime, at trace level) into a subscriber whose own
/// locals may be gone already, which aborted the process at exit under `CAPSULE_LOG=trace`.
pub fn worker_stopped() {
    let _ = SPARE.try_with(|slot| slot.try_borrow_mut().map(|mut slot| slot.take()));
}

/// The current thread has nothing to do: build the spare its last call asked for, and drop
/// a spare of a plugin version no longer loaded. Tokio's before-park hook of the request
/// workers, and the idle poller's quiet round.
pub fn worker_idle() {
    let Ok(wanted) = WANTED.try_with(|wanted| wanted.borrow_mut().take().and_then(|wanted| wanted.upgrade())) else {
        return;
    };
    let _ = SPARE.try_with(|slot| {
        let mut slot = slot.borrow_mut();
        let current = slot.as_ref().map(|spare| spare.blueprint.as_ptr());
        match wanted {
            Some(wanted) if current != Some(Arc::as_ptr(&wanted)) => {
                // The old one goes first, so that its slot is free for the new one.
                *slot = None;
                *slot = wanted.build(Builder::Worker);
            }
            _ if slot.as_ref().is_some_and(|spare| spare.blueprint.strong_count() == 0) => *slot = None,
            _ => {}
        }
    });
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    use super::{SLOW_PAUSE, SPARE, SlowBuilds, worker_idle};
    use crate::policy::{ClientRoots, Grants, Quotas};
    use crate::runtime::{Account, NoEvents, Plugin, PluginRuntime, RuntimeConfig, types};

    /// Calls of the tenant's `calc` that ran in a prebuilt instance.
    fn prebuilt(runtime: &PluginRuntime) -> u64 {
        let text = runtime.config().metrics.render();
        let series = r#"capsule_sandbox_prebuilt_total{tenant="t",plugin="calc"} "#;
        text.lines().find_map(|line| line.strip_prefix(series)).map_or(0, |count| count.parse().unwrap())
    }

    async fn add(plugin: &Plugin) {
        let context = types::RequestContext::first(types::ClientCapabilities::NONE);
        let outcome = plugin
            .call_tool("add", r#"{"a":1,"b":2}"#, &context, &ClientRoots::NotOffered, Arc::new(NoEvents))
            .await
            .expect("the call ran");
        assert!(matches!(outcome, Ok(types::CallOutcome::Complete(_))), "add did not complete");
    }

    /// A runtime that may keep one spare, and `calc` loaded into it for tenant `t`.
    async fn calc_runtime() -> (PluginRuntime, Plugin) {
        let runtime =
            PluginRuntime::new(RuntimeConfig { spare_instances: 1, ..RuntimeConfig::default() }).expect("a runtime");
        let plugin = load_calc(&runtime).await;
        (runtime, plugin)
    }

    async fn load_calc(runtime: &PluginRuntime) -> Plugin {
        let bytes = crate::bundled::BUNDLED.iter().find(|(name, _)| *name == "calc").expect("calc is bundled").1;
        let account = Account::new("t", Quotas::default());
        runtime.load(&account, "calc", (Arc::from(bytes), None), Arc::new(Grants::default())).await.expect("calc")
    }

    /// An idle moment in which this thread builds the spare its last call of `plugin` asked
    /// for. A loaded machine (the other tests) may preempt that build past `BUILD_LIMIT`, and
    /// such a build is dropped, as it should be; the version is then asked for again, its slow
    /// builds forgotten, and the moment repeated.
    fn idle_builds_for(plugin: &Plugin) {
        let blueprint = plugin.blueprint();
        for _ in 0..100 {
            worker_idle();
            let built = SPARE.with_borrow(|slot| {
                slot.as_ref().is_some_and(|spare| std::ptr::eq(spare.blueprint.as_ptr(), Arc::as_ptr(blueprint)))
            });
            if built {
                return;
            }
            blueprint.slow.record(false, Instant::now());
            blueprint.served(false);
        }
        panic!("no idle build was quick enough in 100 tries");
    }

    /// This test's thread is the worker: it goes idle when the test says so.
    #[test]
    fn an_idle_worker_prebuilds_for_the_version_it_served_and_drops_it_with_that_version() {
        let thread = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        thread.block_on(async {
            let (runtime, first) = calc_runtime().await;
            add(&first).await;
            assert_eq!((prebuilt(&runtime), runtime.spares()), (0, 0), "nothing is built before an idle moment");
            idle_builds_for(&first);
            assert_eq!(runtime.spares(), 1);
            add(&first).await;
            assert_eq!((prebuilt(&runtime), runtime.spares()), (1, 0), "the call took the spare");
            add(&first).await;
            assert_eq!(prebuilt(&runtime), 1, "without an idle moment between, a call builds its own");

            // A reload is another version: it never takes the old one's spare.
            idle_builds_for(&first);
            let second = load_calc(&runtime).await;
            add(&second).await;
            assert_eq!((prebuilt(&runtime), runtime.spares()), (1, 1));
            idle_builds_for(&second);
            assert_eq!(runtime.spares(), 1, "the new version's spare took the old one's place");
            add(&second).await;
            assert_eq!(prebuilt(&runtime), 2);

            // A spare of a version no longer loaded goes at the next idle moment.
            idle_builds_for(&second);
            assert_eq!(runtime.spares(), 1);
            drop(second);
            worker_idle();
            assert_eq!(runtime.spares(), 0);
            drop(first);
        });
    }

    /// A call that runs long has the prebuild thread build the next one's instance, which a
    /// call on any thread takes; taking it queues the next build.
    #[test]
    fn calls_that_run_long_take_instances_the_prebuild_thread_built() {
        let thread = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        thread.block_on(async {
            let (runtime, plugin) = calc_runtime().await;
            // Describing this many numbers takes well over the half millisecond that makes a
            // call long.
            let values: Vec<String> = (0..50_000).map(|i| format!("{}.5", i % 977)).collect();
            let arguments = format!(r#"{{"values":[{}]}}"#, values.join(","));
            let context = types::RequestContext::first(types::ClientCapabilities::NONE);
            let describe = async || {
                let outcome = plugin
                    .call_tool("statistics", &arguments, &context, &ClientRoots::NotOffered, Arc::new(NoEvents))
                    .await
                    .expect("the call ran");
                assert!(matches!(outcome, Ok(types::CallOutcome::Complete(_))), "statistics did not complete");
            };
            // Ready, not merely counted: a spare is counted from the start of its build.
            let built_ahead = async || {
                let deadline = Instant::now() + Duration::from_secs(10);
                while !plugin.blueprint().ahead_ready.load(Ordering::Acquire) {
                    assert!(Instant::now() < deadline, "no spare was built ahead");
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            };
            describe().await;
            assert_eq!(prebuilt(&runtime), 0);
            built_ahead().await;
            describe().await;
            assert_eq!(prebuilt(&runtime), 1, "the second call took the spare built ahead");
            built_ahead().await;
            assert_eq!(runtime.spares(), 1, "one spare ahead a version at most");
            // It is the version's: it goes with it (once the prebuild thread, which may still
            // hold the version for a moment after storing the spare, lets go of it too).
            drop(plugin);
            let deadline = Instant::now() + Duration::from_secs(10);
            while runtime.spares() != 0 {
                assert!(Instant::now() < deadline, "the spare outlived its version");
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        });
    }

    /// Worker builds that were slow only because their thread was preempted pause a version
    /// of short calls; the prebuild thread then builds its next instance, finds that it
    /// takes little CPU time, and ends the pause, so that the version's calls go back to
    /// their workers' idle builds instead of waking that thread each.
    #[test]
    fn a_pause_ends_when_the_prebuild_thread_builds_fast() {
        let thread = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        thread.block_on(async {
            let (runtime, plugin) = calc_runtime().await;
            let blueprint = plugin.blueprint().clone();
            // A loaded machine can make the prebuild thread's build slow too, which rightly
            // keeps the pause; the pause is then set again and the next call's end asks for
            // another build. Only a fast build clears a pause before its end (`allow(now)`).
            let mut tries = 0;
            loop {
                let now = Instant::now();
                blueprint.slow.record(true, now);
                assert!(blueprint.slow.record(true, now), "two preempted builds pause it");
                add(&plugin).await;
                let deadline = Instant::now() + Duration::from_secs(10);
                while !blueprint.ahead_ready.load(Ordering::Acquire) {
                    assert!(Instant::now() < deadline, "the paused version's next instance was not built ahead");
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                if blueprint.slow.allow(now) {
                    break;
                }
                tries += 1;
                assert!(tries < 20, "no build on the prebuild thread was fast enough to end the pause");
            }
            let taken = prebuilt(&runtime);
            add(&plugin).await;
            assert_eq!(prebuilt(&runtime), taken + 1, "the call took the instance built ahead");
            assert!(
                !blueprint.ahead_queued.load(Ordering::Acquire) && !blueprint.ahead_ready.load(Ordering::Acquire),
                "a short call's end queues nothing on the prebuild thread once the pause is over"
            );
            idle_builds_for(&plugin);
            add(&plugin).await;
            assert_eq!(prebuilt(&runtime), taken + 2, "the worker's idle build served the next call");
        });
    }

    /// Two slow builds in a row pause a version's prebuilding for a while, not for good: a
    /// worker preempted twice on a busy machine must not end its spares until a reload.
    #[test]
    fn slow_builds_pause_prebuilding_then_it_resumes() {
        let start = Instant::now();
        let slow = SlowBuilds::new(start);
        let at = |ms| start + Duration::from_millis(ms);
        assert!(slow.allow(start));
        assert!(!slow.record(true, at(1)), "one slow build is not a pause");
        assert!(!slow.record(false, at(2)));
        assert!(!slow.record(true, at(3)), "a fast build between resets the count");
        assert!(slow.record(true, at(4)), "the second in a row starts a pause");
        assert!(!slow.allow(at(5)));
        let end = at(4) + SLOW_PAUSE;
        assert!(!slow.allow(end - Duration::from_millis(1)));
        assert!(slow.allow(end), "the pause ends");
        assert!(slow.record(true, end), "still slow: paused again at once");
        assert!(!slow.allow(end + Duration::from_millis(1)));
        let later = end + SLOW_PAUSE;
        assert!(slow.allow(later));
        assert!(!slow.record(false, later));
        assert!(slow.allow(later) && !slow.record(true, later), "a fast build clears the pause and the count");
    }
}
