//! Whether a backend takes changes: the single node's store (failed and
//! not reopened yet, or its disk too full), or etcd as a frontend sees it
//! (no majority answers, or its NOSPACE alarm is raised). gRPC health and
//! `/healthz` report it.

use std::fmt;
use std::time::Duration;

/// How long the single node waits between attempts to reopen a failed
/// store, and between looks at the free space while the disk is full.
/// Defined here because [`StoreHealth::Failed`] tells the operator.
pub const RETRY: Duration = Duration::from_millis(500);

/// Whether the store takes changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreHealth {
    /// It does.
    Ok,
    /// It failed and refuses every change until it is reopened.
    Failed {
        /// The failure that put it out of service.
        error: String,
    },
    /// The etcd backend cannot take changes now, for `reason` (no
    /// majority of etcd answers, or etcd is out of space); it serves again
    /// by itself once etcd can.
    Unavailable {
        /// Why, in the operator's terms.
        reason: String,
    },
    /// The disk is too full for even the smallest change.
    Full {
        /// Bytes free for the server in the data dir's file system.
        free: u64,
        /// Bytes a change needs free, beyond its own size.
        needed: u64,
    },
}

impl StoreHealth {
    /// Whether the store takes changes.
    pub fn is_ok(&self) -> bool {
        *self == StoreHealth::Ok
    }
}

impl fmt::Display for StoreHealth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreHealth::Ok => write!(f, "ok"),
            StoreHealth::Failed { error } => write!(
                f,
                "the store failed and refuses changes until it is reopened \
                 (retried every {RETRY:?}): {error}"
            ),
            StoreHealth::Unavailable { reason } => write!(f, "{reason}"),
            StoreHealth::Full { free, needed } => write!(
                f,
                "disk full: no change can be made; {free} bytes are free and a change needs \
                 at least {needed} beyond its own size; reads and renewals go on"
            ),
        }
    }
}
