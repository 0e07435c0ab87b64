//! The epoch clock: what interrupts running guest code.
//!
//! Every store's epoch deadline is one tick ahead, so when the engine's epoch advances a
//! running guest stops at its next check and the host decides (the deadline callback in
//! `plugin`) whether it yields, moves to a thread of its own, or is stopped. The clock's
//! thread advances the epoch every tick while stores are alive or being made, and parks once
//! a whole tick has passed without any: an idle server then wakes nobody. (Ticking freely,
//! it cost an idle server 4000 wake-ups a second, 7% of a core on the benchmark machine.)
//! Under steady load a store is made within almost every tick, so the clock never parks and a
//! call's start costs two atomic adds.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Duration;

use wasmtime::Engine;

/// Advances an engine's epoch while it has stores; stops its thread when dropped.
pub(crate) struct EpochClock {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    /// Stores alive now.
    live: AtomicUsize,
    /// Stores made so far: the clock parks only after a tick in which none was.
    made: AtomicU64,
    /// Epoch increments so far.
    ticks: AtomicU64,
    stopped: AtomicBool,
    thread: OnceLock<Thread>,
}

impl EpochClock {
    /// Start the clock's thread for `engine`.
    pub fn start(engine: &Engine, tick: Duration) -> std::io::Result<EpochClock> {
        let shared = Arc::new(Shared::default());
        let (weak, clock) = (engine.weak(), shared.clone());
        let handle = std::thread::Builder::new().name("capsule-epoch".into()).spawn(move || {
            let mut made = clock.made.load(Ordering::SeqCst);
            loop {
                std::thread::sleep(tick);
                let Some(engine) = weak.upgrade() else { return };
                engine.increment_epoch();
                drop(engine);
                clock.ticks.fetch_add(1, Ordering::Relaxed);
                // A store made between these loads and `park` has unparked this thread
                // already, so `park` returns at once and the loop sees it.
                while clock.live.load(Ordering::SeqCst) == 0 && clock.made.load(Ordering::SeqCst) == made {
                    if clock.stopped.load(Ordering::SeqCst) {
                        return;
                    }
                    std::thread::park();
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

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(1);

    fn engine() -> Engine {
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        Engine::new(&config).expect("an engine")
    }

    /// Wait until the clock has stopped ticking, and say at which count.
    fn settled(clock: &EpochClock) -> u64 {
        for _ in 0..50 {
            let before = clock.ticks();
            std::thread::sleep(TICK * 20);
            if clock.ticks() == before {
                return before;
            }
        }
        panic!("the clock never stopped ticking ({} ticks)", clock.ticks());
    }

    #[test]
    fn the_clock_ticks_only_while_stores_live() {
        let engine = engine();
        let clock = EpochClock::start(&engine, TICK).expect("the clock starts");
        let idle = settled(&clock);
        assert!(idle <= 2, "an idle clock ticked {idle} times");
        std::thread::sleep(TICK * 30);
        assert_eq!(clock.ticks(), idle, "an idle clock went on ticking");

        let hold = clock.hold();
        assert_eq!(clock.live(), 1);
        std::thread::sleep(TICK * 30);
        assert!(clock.ticks() >= idle + 3, "a store's clock ticked only {} times", clock.ticks() - idle);
        drop(hold);
        assert_eq!(clock.live(), 0);
        let after = settled(&clock);
        std::thread::sleep(TICK * 30);
        assert_eq!(clock.ticks(), after, "the clock went on ticking after the last store");
    }

    #[test]
    fn a_dropped_clock_ends_its_thread() {
        let engine = engine();
        let clock = EpochClock::start(&engine, TICK).expect("the clock starts");
        let thread = clock.shared.clone();
        settled(&clock);
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
