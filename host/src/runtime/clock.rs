//! The epoch clock: what interrupts running guest code.
//!
//! Every store's epoch deadline is one tick ahead, so when the engine's epoch advances a
//! running guest stops at its next check and the host decides (the deadline callback in
//! `plugin`) whether it yields, moves to a thread of its own, or is stopped.
//!
//! The epoch advances only when some guest code has run a whole tick without a break. Each
//! thread that runs guest code has a [`Runner`] slot saying since when its current run
//! (one poll of a call) has gone on; the clock's thread looks at the slots and advances the
//! epoch once a run is a tick old, then every tick while runs that long go on. Most calls
//! are over in tens of microseconds, so under a steady load of them the clock looks every
//! `watch` (waking earlier only to check on a run it saw start) instead of every tick: each
//! wake-up of its thread preempts a busy worker on a loaded machine, and waking every tick
//! cost 4000 context switches and timer interrupts a second, 6% of the server's CPU on the
//! benchmark machine. A run is caught within `watch` of its start at worst. With no store
//! alive and none made since its last look, the thread parks: an idle server wakes nobody.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::thread::Thread;
use std::time::{Duration, Instant};

use wasmtime::Engine;

/// Advances an engine's epoch while guest code runs long; stops its thread when dropped.
pub(crate) struct EpochClock {
    shared: Arc<Shared>,
}

struct Shared {
    /// What a run's start is measured from.
    origin: Instant,
    /// Stores alive now.
    live: AtomicUsize,
    /// Stores made so far: the clock parks only after a look with none alive and none made.
    made: AtomicU64,
    /// Epoch increments so far.
    ticks: AtomicU64,
    stopped: AtomicBool,
    thread: OnceLock<Thread>,
    /// The runner of every thread that has run guest code (dead ones pruned at each look).
    runners: Mutex<Vec<Weak<Runner>>>,
}

/// One thread's guest code, as the clock sees it.
#[derive(Default)]
struct Runner {
    /// When the run in progress started (nanoseconds since the clock's origin, plus one); zero
    /// between runs.
    since: AtomicU64,
}

thread_local! {
    /// This thread's runner for each clock it has run guest code for (nearly always one).
    static RUNNERS: RefCell<Vec<(Weak<Shared>, Arc<Runner>)>> = const { RefCell::new(Vec::new()) };
}

impl Shared {
    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// This thread's runner, registered with the clock on the thread's first run.
    fn runner(self: &Arc<Self>) -> Arc<Runner> {
        RUNNERS.with_borrow_mut(|runners| {
            let found = runners.iter().position(|(clock, _)| std::ptr::eq(clock.as_ptr(), Arc::as_ptr(self)));
            let index = found.unwrap_or_else(|| {
                runners.retain(|(clock, _)| clock.strong_count() > 0);
                let runner = Arc::new(Runner::default());
                self.runners.lock().unwrap_or_else(PoisonError::into_inner).push(Arc::downgrade(&runner));
                runners.push((Arc::downgrade(self), runner));
                runners.len() - 1
            });
            runners[index].1.clone()
        })
    }

    /// When the oldest run in progress started, if one is.
    fn oldest_run(&self) -> Option<u64> {
        let mut runners = self.runners.lock().unwrap_or_else(PoisonError::into_inner);
        runners.retain(|runner| runner.strong_count() > 0);
        runners
            .iter()
            .filter_map(Weak::upgrade)
            .filter_map(|runner| runner.since.load(Ordering::Relaxed).checked_sub(1))
            .min()
    }
}

impl EpochClock {
    /// Start the clock's thread for `engine`: a run is interrupted once it is `tick` old and
    /// every `tick` after; while no run is that old, the clock looks every `watch`.
    pub fn start(engine: &Engine, tick: Duration, watch: Duration) -> std::io::Result<EpochClock> {
        let shared = Arc::new(Shared {
            origin: Instant::now(),
            live: AtomicUsize::new(0),
            made: AtomicU64::new(0),
            ticks: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
            thread: OnceLock::new(),
            runners: Mutex::default(),
        });
        let (weak, clock) = (engine.weak(), shared.clone());
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let (tick, watch) = (nanos(tick), nanos(watch).max(nanos(tick)));
        let handle = std::thread::Builder::new().name("capsule-epoch".into()).spawn(move || {
            let mut made = clock.made.load(Ordering::SeqCst);
            let mut next = clock.now().saturating_add(watch);
            loop {
                let now = clock.now();
                if next > now {
                    std::thread::sleep(Duration::from_nanos(next - now));
                }
                let Some(engine) = weak.upgrade() else { return };
                let now = clock.now();
                next = match clock.oldest_run() {
                    Some(since) if now.saturating_sub(since) >= tick => {
                        engine.increment_epoch();
                        clock.ticks.fetch_add(1, Ordering::Relaxed);
                        now.saturating_add(tick)
                    }
                    // Most runs end well within a tick: look again when this one would be a
                    // tick old, to catch it then if it is not over.
                    Some(since) => since.saturating_add(tick),
                    None => now.saturating_add(watch),
                };
                drop(engine);
                // A store made between these loads and `park` has unparked this thread
                // already, so `park` returns at once and the loop sees it.
                while clock.live.load(Ordering::SeqCst) == 0 && clock.made.load(Ordering::SeqCst) == made {
                    if clock.stopped.load(Ordering::SeqCst) {
                        return;
                    }
                    std::thread::park();
                    next = clock.now().saturating_add(watch);
                }
                made = clock.made.load(Ordering::SeqCst);
            }
        })?;
        let _ = shared.thread.set(handle.thread().clone());
        Ok(EpochClock { shared })
    }

    /// Count a store for as long as the hold lives, waking the clock if it sleeps.
    pub fn hold(&self) -> StoreHold {
        self.shared.made.fetch_add(1, Ordering::SeqCst);
        if self.shared.live.fetch_add(1, Ordering::SeqCst) == 0
            && let Some(thread) = self.shared.thread.get()
        {
            // Only an atomic swap unless the thread is parked.
            thread.unpark();
        }
        StoreHold(self.shared.clone())
    }

    /// What times the runs of guest code for this clock.
    pub fn runs(&self) -> Runs {
        Runs(self.shared.clone())
    }

    /// Stores alive now.
    pub fn live(&self) -> usize {
        self.shared.live.load(Ordering::Relaxed)
    }

    /// Epoch increments so far.
    #[cfg(test)]
    fn ticks(&self) -> u64 {
        self.shared.ticks.load(Ordering::Relaxed)
    }
}

impl Drop for EpochClock {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        if let Some(thread) = self.shared.thread.get() {
            thread.unpark();
        }
    }
}

/// One store counted by the clock, for as long as it lives.
pub(crate) struct StoreHold(Arc<Shared>);

impl Drop for StoreHold {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Marks runs of guest code so the clock can tell how long each has gone on.
#[derive(Clone)]
pub(crate) struct Runs(Arc<Shared>);

impl Runs {
    /// Run `f` (a poll of a call) as a run of guest code on this thread.
    pub fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        let runner = self.0.runner();
        runner.since.store(self.0.now().saturating_add(1), Ordering::Relaxed);
        // Cleared even if `f` panics, so the clock does not see a run that never ends.
        let _end = Ended(&runner.since);
        f()
    }
}

/// Clears a runner's start when the run ends.
struct Ended<'a>(&'a AtomicU64);

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(1);
    const WATCH: Duration = Duration::from_millis(4);

    fn engine() -> Engine {
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        Engine::new(&config).expect("an engine")
    }

    /// Busy for `how_long` of wall time, as computing guest code is.
    fn compute(how_long: Duration) {
        let start = Instant::now();
        while start.elapsed() < how_long {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn short_runs_are_never_interrupted() {
        let engine = engine();
        // A tick long enough that no short run is preempted for that long, even on a busy
        // machine.
        let clock =
            EpochClock::start(&engine, Duration::from_millis(50), Duration::from_millis(50)).expect("the clock starts");
        let _hold = clock.hold();
        let runs = clock.runs();
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(300) {
            runs.run(|| compute(Duration::from_micros(20)));
            std::thread::sleep(Duration::from_micros(100));
        }
        assert_eq!(clock.ticks(), 0, "short runs made the clock tick");
    }

    #[test]
    fn a_long_run_is_interrupted_every_tick_and_the_clock_rests_after() {
        let engine = engine();
        let clock = EpochClock::start(&engine, TICK, WATCH).expect("the clock starts");
        let hold = clock.hold();
        assert_eq!(clock.live(), 1);
        clock.runs().run(|| compute(Duration::from_millis(60)));
        let ticks = clock.ticks();
        // At most (60 - 4) / 1 ticks; a busy machine delays the clock's thread.
        assert!(ticks >= 5, "a 60 ms run was interrupted only {ticks} times");
        drop(hold);
        assert_eq!(clock.live(), 0);
        std::thread::sleep(WATCH * 3);
        let after = clock.ticks();
        std::thread::sleep(WATCH * 5);
        assert_eq!(clock.ticks(), after, "the clock went on ticking after the run");
    }

    #[test]
    fn a_run_on_any_thread_is_seen() {
        let engine = engine();
        let clock = EpochClock::start(&engine, TICK, WATCH).expect("the clock starts");
        let _hold = clock.hold();
        let runs = clock.runs();
        std::thread::scope(|scope| {
            scope.spawn(|| runs.run(|| std::thread::sleep(Duration::from_millis(10))));
            scope.spawn(|| {
                for _ in 0..100 {
                    runs.run(|| ());
                }
            });
        });
        assert!(clock.ticks() >= 1, "a 10 ms run on another thread was never interrupted");
    }

    #[test]
    fn a_dropped_clock_ends_its_thread() {
        let engine = engine();
        let clock = EpochClock::start(&engine, TICK, WATCH).expect("the clock starts");
        let thread = clock.shared.clone();
        drop(clock);
        // The thread holds the last other reference; it lets go when it ends.
        for _ in 0..500 {
            if Arc::strong_count(&thread) == 1 {
                return;
            }
            std::thread::sleep(TICK);
        }
        panic!("the clock's thread is still running");
    }
}
