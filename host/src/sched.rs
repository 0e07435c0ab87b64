//! What Capsule asks of the kernel's CPU scheduler for its own threads.
//!
//! A request worker runs in bursts of tens of microseconds. On a busy machine a worker that
//! wakes with a request can wait out the whole time slice of whatever holds its CPU, which is
//! 1.4 ms by default on a 2-core Linux 6.x: a request served in 0.2 ms then takes 1.6.
//! Linux's EEVDF scheduler (6.12 and later) lets a thread ask for a shorter slice. It then
//! gets an earlier deadline, so it preempts a thread that has run longer when it wakes, and
//! its share of the CPU stays what its nice value gives. Other kernels take the request and
//! ignore it. It is the operator's choice (`serve --worker-slice`), off by default: the same
//! preemption cuts the batching that heavy load lives on (BENCHMARKS.md, "Short slices").
//! Long calls leave the workers with the kernel's default slice back (`runtime::offload`).

use std::io;
use std::time::Duration;

/// Ask for `slice` for the calling thread (`None`: the kernel's default). The kernel holds
/// a slice to 0.1-100 ms. A thread whose policy is not the default time-sharing one (an
/// operator's real-time setting, say) is left as it is, and so is its nice value.
pub fn set_slice(slice: Option<Duration>) -> io::Result<()> {
    imp::set_slice(slice)
}

#[cfg(target_os = "linux")]
mod imp {
    use std::io;
    use std::time::Duration;

    pub fn set_slice(slice: Option<Duration>) -> io::Result<()> {
        const SIZE: u32 = size_of::<libc::sched_attr>() as u32;
        // SAFETY: all-zero bytes are a valid `sched_attr` (integers only).
        let mut attr: libc::sched_attr = unsafe { std::mem::zeroed() };
        // SAFETY: `attr` is a writable `sched_attr` of `SIZE` bytes; pid 0 is this thread.
        if unsafe { libc::syscall(libc::SYS_sched_getattr, 0, &raw mut attr, SIZE, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if !matches!(attr.sched_policy as i32, libc::SCHED_OTHER | libc::SCHED_BATCH) {
            return Ok(());
        }
        attr.size = SIZE;
        attr.sched_flags = 0;
        attr.sched_runtime = slice.map_or(0, |s| u64::try_from(s.as_nanos()).unwrap_or(u64::MAX));
        // SAFETY: `attr` is a valid `sched_attr` of `attr.size` bytes, read by the kernel only.
        if unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &raw const attr, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::io;
    use std::time::Duration;

    pub fn set_slice(_slice: Option<Duration>) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The slice this thread has, as the kernel reports it (`None` where it reports none).
    fn slice_ns() -> Option<u64> {
        let sched = std::fs::read_to_string("/proc/thread-self/sched").ok()?;
        let line = sched.lines().find(|l| l.starts_with("se.slice"))?;
        line.split(':').nth(1)?.trim().parse().ok()
    }

    #[test]
    fn a_thread_gets_the_slice_it_asks_for_and_keeps_its_nice_value() {
        std::thread::spawn(|| {
            let _ = rustix::process::setpriority_process(None, 3);
            let before = slice_ns();
            set_slice(Some(Duration::from_micros(200))).expect("set a slice");
            // Kernels before EEVDF's custom slices report no `se.slice`, or ignore the request.
            if let (Some(before), Some(now)) = (before, slice_ns())
                && now != before
            {
                assert_eq!(now, 200_000);
                set_slice(None).expect("back to the default");
                assert_eq!(slice_ns(), Some(before));
            }
            assert_eq!(rustix::process::getpriority_process(None).expect("nice"), 3);
        })
        .join()
        .expect("the test thread");
    }
}
