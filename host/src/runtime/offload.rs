//! Long guest computations off the request workers.
//!
//! A call starts on the worker that took its request: that is cheapest, and most calls are
//! over in well under a millisecond. A call that has computed past a threshold is marked long
//! (by its epoch callback), and the rest of it runs on a thread of its own, at a lower OS
//! priority than the workers: the worker hands its duties on (`block_in_place`) and waits for
//! that thread. There the OS shares the cores between the call and everything else, as it
//! would a busy process, instead of the call sharing a worker tick by tick with the requests
//! queued behind it: one tenant's long calls then cost the others a share of the CPU, not a
//! wait in a queue.
//!
//! While a call runs on its own thread, the task that awaits it is blocked, so what must go on
//! meanwhile (forwarding the call's notifications, streaming the response) runs in other
//! tasks, and cancellation reaches the call through its epoch callback.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::runtime::{Handle, RuntimeFlavor};

/// The niceness of a long call's thread.
const LONG_CALL_NICE: i32 = 10;

/// Set once a call has computed long enough to leave the workers.
#[derive(Clone, Default)]
pub(crate) struct Long(Arc<AtomicBool>);

impl Long {
    pub fn mark(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

pin_project_lite::pin_project! {
    /// `future`, moved to a thread of its own once `long` is set.
    pub(crate) struct Offload<F> {
        long: Long,
        #[pin]
        future: F,
    }
}

impl<F> Offload<F> {
    pub fn new(long: Long, future: F) -> Self {
        Offload { long, future }
    }
}

impl<F> Future for Offload<F>
where
    F: Future + Send,
    F::Output: Send,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        // A current-thread runtime (tests, tools) has no other worker to hand the rest to.
        if this.long.is_set()
            && let Ok(handle) = Handle::try_current()
            && handle.runtime_flavor() == RuntimeFlavor::MultiThread
        {
            // Taken by whichever thread runs it: the long call's own, or this one if the
            // system has no thread to spare.
            let future = std::sync::Mutex::new(Some(this.future));
            let run = || future.lock().unwrap_or_else(|e| e.into_inner()).take().map(|f| handle.block_on(f));
            let output = tokio::task::block_in_place(|| {
                std::thread::scope(|scope| {
                    let thread = std::thread::Builder::new().name("capsule-long-call".into());
                    let spawned = thread.spawn_scoped(scope, || {
                        // Below the request workers: interactive work first, and the
                        // kernel's default slice rather than theirs.
                        let _ = rustix::process::setpriority_process(None, LONG_CALL_NICE);
                        let _ = crate::sched::set_slice(None);
                        run()
                    });
                    match spawned {
                        Ok(running) => running.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                        Err(e) => {
                            tracing::warn!("no thread for a long call ({e}); it runs on its request worker");
                            run()
                        }
                    }
                })
            });
            return Poll::Ready(output.expect("a long call's future is run once"));
        }
        this.future.poll(cx)
    }
}
