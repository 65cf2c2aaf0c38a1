//! The free space of the data dir's file system: how much a put must leave
//! free, and the `statvfs` query (cached while far from full) that refuses
//! a put before sled sees it, so that a full disk never stops sled itself.
//!
//! Apart because it is the store's only question to the file system
//! outside its own files, and the tools ask it too ([`free_bytes`]).

use std::path::Path;

use super::{SledStore, SEGMENT_SIZE};
use leasehold_core::error::{Error, Result};

/// The free space a put needs beyond its own size. sled may start a new
/// segment at any write, and a write that fails inside sled stops the whole
/// store until it is reopened (which itself needs space); refusing the put
/// up front keeps the store, and reads, working on a full disk.
pub(super) const RESERVE: u64 = 2 * SEGMENT_SIZE as u64;

/// Free space above which a `statvfs` result is reused for up to
/// [`SPACE_FRESH`]: filling that much within that time would take a writer
/// of several GB/s. Nearer to full, every put asks the file system again.
const SPACE_TRUSTED: u64 = 256 * 1024 * 1024;
const SPACE_FRESH: std::time::Duration = std::time::Duration::from_millis(100);

impl SledStore {
    /// Refuses a put of about `bytes` when the data dir's file system is
    /// too full for it, before sled sees it.
    pub(super) fn ensure_space(&self, bytes: usize) -> Result<()> {
        let free = self.free().map_err(|e| {
            Error::storage(format!("cannot stat data dir {}: {e}", self.dir.display()))
        })?;
        let needed = RESERVE + bytes as u64;
        if free < needed {
            return Err(Error::NoSpace { free, needed });
        }
        Ok(())
    }

    /// The free bytes of the data dir's file system: asked anew unless the
    /// last answer is recent and far from full (see [`SPACE_TRUSTED`]).
    pub(super) fn free(&self) -> std::io::Result<u64> {
        let now = leasehold_core::clock::now();
        let mut last = self.space.lock().expect("space lock");
        if let Some((at, free)) = *last {
            if free > SPACE_TRUSTED && now.saturating_duration_since(at) < SPACE_FRESH {
                return Ok(free);
            }
        }
        let free = free_bytes(&self.dir)?;
        *last = Some((now, free));
        Ok(free)
    }
}

/// Bytes available to this process in the file system holding `dir`.
pub(crate) fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    // SAFETY: statvfs is plain old data; all-zero is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a valid NUL-terminated string and `st` a valid,
    // writable statvfs for the call's duration.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}
