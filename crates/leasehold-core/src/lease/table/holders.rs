//! One copy of each holder's name for all the leases it holds.
//!
//! A fleet's holder holds thousands of leases, and a holder string
//! (`name@uuid`, 40 bytes and more) on the heap for each was a third of a
//! held lease's memory. The table keeps each name once ([`Holders::intern`])
//! and its holdings share it. Names nobody holds any more are dropped in
//! sweeps, each when the set has doubled since the last, so that their
//! cost is spread over the inserts that made them needed.

use std::collections::HashSet;

use crate::lease::HolderId;

/// The fewest names kept before the first sweep.
const FIRST_SWEEP: usize = 1024;

#[derive(Debug, Default)]
pub(super) struct Holders {
    names: HashSet<HolderId>,
    /// How many names the last sweep left.
    kept: usize,
    /// The name interned last: a fleet's leases, restored in order, ask
    /// for it again and again, and a comparison costs less than a hash.
    last: Option<HolderId>,
}

impl Holders {
    /// The table's copy of `holder`: the one already kept, else `holder`
    /// itself, kept from now on.
    pub(super) fn intern(&mut self, holder: &HolderId) -> HolderId {
        if let Some(last) = self.last.as_ref().filter(|l| *l == holder) {
            return last.clone();
        }
        if let Some(h) = self.names.get(holder.as_str()) {
            self.last = Some(h.clone());
            return h.clone();
        }
        if self.names.len() >= 2 * self.kept.max(FIRST_SWEEP) {
            // Only the set's own copy left: nobody holds with it.
            self.names.retain(HolderId::shared);
            self.kept = self.names.len();
        }
        self.names.insert(holder.clone());
        self.last = Some(holder.clone());
        holder.clone()
    }

    /// How many names are kept (some may be held by nobody until the
    /// next sweep).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.names.len()
    }
}
