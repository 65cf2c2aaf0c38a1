//! Giving memory back to the system after a burst.
//!
//! A burst of calls that hold memory while open (10,000 waiting Acquires,
//! 40,000 watches: about 14 KiB each, most of it HTTP/2 and task state)
//! leaves that memory free but kept by glibc's allocator once they end: the
//! freed chunks are scattered among live ones, below the top of the heap,
//! so the allocator's own trimming never reaches them. Measured with
//! `leasehold-bench isolation`, the server's RSS stayed at 10 to 47 times
//! what it was before the burst. `malloc_trim(0)` returns those pages.
//!
//! So every [`EVERY`] a task asks the allocator how much it holds free,
//! and trims when that is more than [`SLACK`]: a steady server never
//! trims (its free memory is reused at once), one after a burst trims once.
//! The trim runs on a blocking thread; it takes each arena's lock in turn,
//! for a few milliseconds on a large heap.

use std::time::Duration;

use tokio::sync::watch;

/// How often the allocator is asked.
pub const EVERY: Duration = Duration::from_secs(5);

/// Free memory the allocator may keep without a trim.
pub const SLACK: usize = 32 << 20;

/// Trims the allocator whenever it keeps more than [`SLACK`] free, until
/// `closing` turns true.
pub async fn give_back(mut closing: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            _ = closing.wait_for(|c| *c) => return,
        }
        let _ = tokio::task::spawn_blocking(trim_if_slack).await;
    }
}

/// One look at the allocator, and a trim if it keeps too much free.
/// Returns the free bytes it held before, and whether it trimmed.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn trim_if_slack() -> (usize, bool) {
    // SAFETY: mallinfo2 and malloc_trim only read and adjust the
    // allocator's own state, under its locks.
    let free = unsafe { libc::mallinfo2() }.fordblks;
    if free <= SLACK {
        return (free, false);
    }
    // SAFETY: as above.
    unsafe { libc::malloc_trim(0) };
    tracing::debug!(free, "gave free memory back to the system");
    (free, true)
}

/// Other allocators return memory on their own.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim_if_slack() -> (usize, bool) {
    (0, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After a burst of small allocations is freed, the allocator holds it
    /// free, and a look trims it.
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn a_burst_freed_is_trimmed() {
        // The allocator is the whole process's: the tests running beside
        // this one allocate, free and trim in it (a server's give_back),
        // which moved the figures under this test (it failed once so).
        // So the measurement runs alone, in a child of this test binary.
        const CHILD: &str = "LEASEHOLD_MEMORY_TEST_ALONE";
        const NAME: &str = "server::memory::tests::a_burst_freed_is_trimmed";
        if std::env::var_os(CHILD).is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", NAME, "--test-threads=1"])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{said}");
            assert!(said.contains("1 passed"), "the child ran no test:\n{said}");
            return;
        }
        // Interleave kept and freed chunks, as open calls leave them.
        let mut kept = Vec::new();
        let mut freed = Vec::new();
        for i in 0..200_000 {
            let v = vec![i as u8; 512];
            if i % 16 == 0 {
                kept.push(v);
            } else {
                freed.push(v);
            }
        }
        drop(freed);
        let (free, trimmed) = trim_if_slack();
        assert!(free > SLACK, "only {free} bytes free");
        assert!(trimmed);
        let (after, _) = trim_if_slack();
        assert!(after <= free, "{after} > {free}");
        assert_eq!(kept.len(), 12_500);
    }
}
