//! Who created each job, and how many jobs each principal created: what a
//! principal's `max_jobs` counts. A job keeps the owner it was created
//! with until it is deleted, whoever holds it meanwhile.
//!
//! Jobs name their owner by a small number, so that a job stays as small
//! as it was (the number fits in the room its other fields leave). There
//! are as many owners as principals a policy ever named, so the names are
//! never dropped.

use std::collections::HashMap;
use std::sync::Arc;

/// The owners, numbered from 1; 0 is "no owner" (a job created on a
/// server without a policy).
#[derive(Debug, Default)]
pub(super) struct Owners {
    /// Name and jobs owned, for owner `n` at `n - 1`.
    by_id: Vec<(Arc<str>, usize)>,
    ids: HashMap<Arc<str>, u32>,
}

impl Owners {
    /// Counts one more job for `principal` and returns its number (0, and
    /// nothing counted, for `None`).
    pub(super) fn add(&mut self, principal: Option<&str>) -> u32 {
        let Some(p) = principal else { return 0 };
        let id = match self.ids.get(p) {
            Some(id) => *id,
            None => {
                let name: Arc<str> = p.into();
                self.by_id.push((name.clone(), 0));
                let id = u32::try_from(self.by_id.len()).expect("fewer owners than u32::MAX");
                self.ids.insert(name, id);
                id
            }
        };
        self.by_id[id as usize - 1].1 += 1;
        id
    }

    /// Counts one job less for owner `id` (nothing for 0).
    pub(super) fn remove(&mut self, id: u32) {
        if let Some((_, n)) = id
            .checked_sub(1)
            .and_then(|i| self.by_id.get_mut(i as usize))
        {
            *n = n.saturating_sub(1);
        }
    }

    /// The name of owner `id`; `None` for 0.
    pub(super) fn name(&self, id: u32) -> Option<Arc<str>> {
        let i = id.checked_sub(1)?;
        self.by_id.get(i as usize).map(|(name, _)| name.clone())
    }

    /// How many jobs `principal` owns.
    pub(super) fn owned(&self, principal: &str) -> usize {
        self.ids
            .get(principal)
            .map_or(0, |id| self.by_id[*id as usize - 1].1)
    }
}
