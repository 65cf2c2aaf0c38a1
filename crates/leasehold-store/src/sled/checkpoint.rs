//! The checkpoint: the logged puts applied to sled in one transaction with
//! sled's checkpoint record, sled made durable (its blobs and its log
//! file), the log reset to its next generation, and the manifest written,
//! in the order start-up relies on (see the parent module's docs).
//!
//! Apart from the store's state because it is the one place where sled's
//! trees change while the store is open.

use std::fs::File;
use std::sync::atomic::Ordering;

use super::{Open, SledStore};
use crate::decode_lease;
use crate::manifest::{self, record_hash};
use crate::wal::Wal;
use leasehold_core::error::{Error, Result};

/// The checkpoint record, in sled's default tree, written in the same
/// transaction as each checkpoint's data.
pub(super) const CHECKPOINT_KEY: &[u8] = b"leasehold/checkpoint";
/// Trees, as numbered in record digests.
pub(super) const TREE_LEASES: u8 = 1;
pub(super) const TREE_VALUES: u8 = 2;

impl SledStore {
    /// Applies the logged puts to sled, forgets them in the overlay, and
    /// checkpoints.
    pub(super) fn checkpoint_open(&self, o: &Open, wal: &mut Wal) -> Result<()> {
        // Before sled changes: a read from sled that a caller made before
        // this point must be made again (see `recheck_value`).
        self.read_epoch.fetch_add(1, Ordering::AcqRel);
        let upto = o.checkpoint(wal)?;
        self.pending().trim(upto);
        Ok(())
    }
}

impl Open {
    /// How many keys the next checkpoint applies to sled.
    pub(super) fn logged_keys(&self) -> usize {
        self.logged.lock().expect("logged lock").keys()
    }

    /// Applies the logged puts to sled in one transaction with the new
    /// checkpoint record, makes sled durable, starts the log's next
    /// generation, and writes the manifest, leaving `logged` empty. Returns
    /// the sequence number the applied puts reach.
    ///
    /// The order is what start-up relies on: sled (data and record
    /// together, atomically) first, because until it is durable the log is
    /// the only copy; then the log's reset; then the manifest. A crash
    /// between two steps leaves sled one generation ahead, which
    /// [`Open::inspected`] accepts.
    pub(super) fn checkpoint(&self, wal: &mut Wal) -> Result<u64> {
        self.first_leases.lock().expect("first leases lock").take();
        use sled::Transactional as _;
        let _gate = self.gate.write().expect("gate lock");
        // No backup holds it back now.
        self.preempt.store(false, Ordering::Release);
        self.held_since.lock().expect("held lock").take();
        let l = std::mem::take(&mut *self.logged.lock().expect("logged lock"));
        let base = self.ckpt.lock().expect("checkpoint lock").clone();
        let generation = self.manifest_generation.load(Ordering::Acquire) + 1;
        let meta: &sled::Tree = &self.db;
        let (next, grown, touched) = (&self.leases, &self.values, meta)
            .transaction(|(lt, vt, mt)| {
                // Bytes of keys and values sled holds, up or down, and
                // bytes put or removed.
                let mut grown = 0i64;
                let mut touched = 0u64;
                let mut c = base.clone();
                c.generation = generation;
                c.unix_ms = leasehold_core::clock::wall_unix_ms();
                c.new_job_floor = c.new_job_floor.max(l.new_job_floor);
                c.max_token = c.max_token.max(c.new_job_floor);
                for (tree, t, map) in [(TREE_LEASES, lt, &l.leases), (TREE_VALUES, vt, &l.values)] {
                    for (k, v) in map {
                        if v.is_empty() {
                            if let Some(old) = t.remove(k.as_slice())? {
                                grown -= (k.len() + old.len()) as i64;
                                touched += (k.len() + old.len()) as u64;
                                c.digest = c.digest.wrapping_sub(record_hash(tree, k, &old));
                                match tree {
                                    TREE_LEASES => c.leases -= 1,
                                    _ => c.values -= 1,
                                }
                            }
                            continue;
                        }
                        grown += (k.len() + v.len()) as i64;
                        touched += (k.len() + v.len()) as u64;
                        match t.insert(k.as_slice(), v.as_slice())? {
                            Some(old) => {
                                grown -= (k.len() + old.len()) as i64;
                                c.digest = c.digest.wrapping_sub(record_hash(tree, k, &old))
                            }
                            None if tree == TREE_LEASES => c.leases += 1,
                            None => c.values += 1,
                        }
                        c.digest = c.digest.wrapping_add(record_hash(tree, k, v));
                        if tree == TREE_LEASES {
                            if let Ok(r) = decode_lease(v) {
                                c.max_token = c.max_token.max(r.token.0);
                            }
                        }
                    }
                }
                mt.insert(CHECKPOINT_KEY, c.encode())?;
                Ok((c, grown, touched))
            })
            .map_err(|e: sled::transaction::TransactionError<()>| {
                Error::storage(format!("checkpoint into sled: {e:?}"))
            })?;
        // sled's flush writes its log and any blob files; the blobs are
        // made durable before the log that points to them.
        self.live.fetch_add(grown as u64, Ordering::AcqRel);
        self.absorbed.fetch_add(touched, Ordering::AcqRel);
        self.db.flush().map_err(Error::storage)?;
        sync_blobs(&self.blobs).map_err(Error::storage)?;
        self.log.sync_data().map_err(Error::storage)?;
        wal.reset(next.generation)
            .map_err(|e| Error::storage(format!("cannot reset {}: {e}", wal.path().display())))?;
        manifest::write(&self.dir, &next).map_err(|e| {
            Error::storage(format!(
                "cannot write {}: {e}",
                self.dir.join(manifest::FILE).display()
            ))
        })?;
        self.manifest_generation
            .store(next.generation, Ordering::Release);
        *self.ckpt.lock().expect("checkpoint lock") = next;
        Ok(l.upto)
    }
}

/// Makes the blob files in `blobs` durable, and their directory entries.
pub(super) fn sync_blobs(blobs: &std::path::Path) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(blobs) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut any = false;
    for entry in entries {
        // sled deletes a blob file once no page refers to it, from its
        // own threads and at any time: one gone since the listing holds
        // nothing that needs syncing.
        match File::open(entry?.path()) {
            Ok(f) => f.sync_data()?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        }
        any = true;
    }
    if any {
        File::open(blobs)?.sync_all()?;
    }
    Ok(())
}
