//! The bulk lane: listings run on threads of their own, at the lowest CPU
//! priority, so that on a saturated server renewals come first.
//!
//! A page of `ListKeys`, `GetHistory` or `ListLeases` scans and decodes up
//! to a thousand records; sixty-four loops of them kept both cores busy
//! and a leader's renewals waited behind them in the runtime's queues
//! (p99 45x its quiet value, BENCHMARKS.md, "Isolation, second pass").
//! Those scans run here instead, on [`THREADS`] threads at nice 19: the
//! kernel gives them only the CPU that the server's own threads (which
//! read every connection and serve renewals) leave, and the handler that
//! waits for its page costs its runtime nothing while it waits. On an
//! idle server a page costs what it did, plus a hand-over between threads.

use std::future::Future;
use std::sync::LazyLock;

/// The bulk lane's threads.
pub const THREADS: usize = 2;

/// The niceness of the bulk lane's threads: the lowest priority.
const NICE: libc::c_int = 19;

static LANE: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(THREADS)
        .thread_name("leasehold-bulk")
        .enable_all()
        .on_thread_start(|| {
            // SAFETY: setpriority on this thread (PRIO_PROCESS with a
            // thread id sets that thread's niceness on Linux); a failure
            // leaves it at the default priority.
            unsafe {
                let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
                libc::setpriority(libc::PRIO_PROCESS, tid, NICE);
            }
        })
        .build()
        .expect("the bulk lane's runtime")
});

/// Runs `work` on the bulk lane and waits for its result. If the lane's
/// task panics, so does the caller.
pub async fn run<T, F>(work: F) -> T
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    match LANE.spawn(work).await {
        Ok(t) => t,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}
