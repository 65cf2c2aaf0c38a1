//! The start-up read of every lease record in sled, on two threads: one
//! reads the tree from its first key up, the other from its last key down,
//! and they stop where they meet. Most of a start on a large store is
//! sled's own iteration (reading and decoding its pages, a node clone at
//! each page); two ends share it without knowing anything of the keys'
//! distribution.
//!
//! **Every record is read exactly once.** Each side claims the keys it
//! read, a batch at a time, under one lock, and keeps only the keys short
//! of the other side's furthest claim; a side stops at the first key it
//! could not keep. The claims are two ranges that never overlap, and
//! nothing lies between them once both sides stopped, because each side
//! reads its keys in order.

use std::sync::Mutex;

use super::checkpoint::TREE_LEASES;
use super::open::Problem;
use crate::decode_lease;
use crate::manifest::record_hash;
use leasehold_core::lease::{HolderId, JobName, LeaseRecord};

/// The holders decoded so far, one copy each, up to a bound (a data dir
/// with more distinct holders shares the first ones only).
#[derive(Default)]
struct Holders {
    kept: std::collections::HashSet<HolderId>,
    /// The last record's: a fleet's leases come one after another, and a
    /// comparison costs less than a hash.
    last: Option<HolderId>,
}

impl Holders {
    const MOST: usize = 65_536;

    fn share(&mut self, h: HolderId) -> HolderId {
        if let Some(last) = self.last.as_ref().filter(|l| **l == h) {
            return last.clone();
        }
        let h = match self.kept.get(h.as_str()) {
            Some(kept) => kept.clone(),
            None => {
                if self.kept.len() < Self::MOST {
                    self.kept.insert(h.clone());
                }
                h
            }
        };
        self.last = Some(h.clone());
        h
    }
}

/// What reading the leases tree found.
#[derive(Default)]
pub(super) struct Scanned {
    /// Lease records read.
    pub leases: u64,
    /// The sum of their [`record_hash`]es.
    pub digest: u64,
    /// Their keys' and values' bytes.
    pub live_bytes: u64,
    /// The highest token among them.
    pub max_token: u64,
    /// Every lease, in key order; `None` when a key is not a name (the
    /// server's first read then goes to sled, and fails naming it).
    pub decoded: Option<Vec<(JobName, LeaseRecord)>>,
    /// Records that do not decode, and a tree sled cannot read through.
    pub problems: Vec<Problem>,
}

impl Scanned {
    fn take(&mut self, k: &[u8], v: &[u8], holders: &mut Holders) {
        self.digest = self.digest.wrapping_add(record_hash(TREE_LEASES, k, v));
        self.live_bytes += (k.len() + v.len()) as u64;
        self.leases += 1;
        match decode_lease(v) {
            Ok(mut l) => {
                // One copy of each holder for the leases it holds, made as
                // they are decoded: each record's own copy is dropped at
                // once, and its memory goes to the next record's, not left
                // in holes between the leases kept (the lease table shares
                // them the same way).
                l.holder = l.holder.map(|h| holders.share(h));
                self.max_token = self.max_token.max(l.token.0);
                if let Some(d) = self.decoded.as_mut() {
                    match std::str::from_utf8(k) {
                        Ok(name) => d.push((JobName::from_trusted(name.into()), l)),
                        Err(_) => self.decoded = None,
                    }
                }
            }
            Err(e) => self.problems.push(Problem::new("db", e.to_string())),
        }
    }

    /// Adds `other`'s findings; `other` read the keys after this one's.
    fn join(mut self, other: Scanned) -> Scanned {
        self.leases += other.leases;
        self.digest = self.digest.wrapping_add(other.digest);
        self.live_bytes += other.live_bytes;
        self.max_token = self.max_token.max(other.max_token);
        self.decoded = match (self.decoded, other.decoded) {
            (Some(mut a), Some(b)) => {
                a.extend(b);
                Some(a)
            }
            _ => None,
        };
        self.problems.extend(other.problems);
        self
    }
}

/// How far each side has claimed: the forward side every key up to and
/// including `up`, the backward side every key from `down` on.
#[derive(Default)]
struct Claims {
    up: Option<sled::IVec>,
    down: Option<sled::IVec>,
}

/// Records a side reads before it claims them: few enough that the other
/// side seldom reads past the meeting point for nothing, many enough that
/// the lock is taken rarely.
const BATCH: usize = 256;

/// Stores of at least this many leases (by sled's checkpoint record) are
/// read on two threads.
pub(super) const TWO_FROM: u64 = 65_536;

/// Reads every record of `tree` (sled's leases tree), on two threads when
/// the machine has more than one core and the store is large. `expected`
/// (sled's checkpoint record's count) sizes the list of leases up front.
pub(super) fn leases(tree: &sled::Tree, expected: u64) -> Scanned {
    // A second thread reads into an allocator arena of its own: worth it
    // only where it saves a noticeable part of a second.
    let two =
        expected >= TWO_FROM && std::thread::available_parallelism().is_ok_and(|n| n.get() > 1);
    leases_on(tree, expected, two)
}

fn leases_on(tree: &sled::Tree, expected: u64, two: bool) -> Scanned {
    let claims = Mutex::new(Claims::default());
    // Capped, so that a damaged checkpoint record cannot make it reserve
    // more than a very large store would.
    let reserve = usize::try_from(expected).unwrap_or(0).min(1 << 24);
    if !two {
        return side(tree, true, &claims, reserve);
    }
    std::thread::scope(|s| {
        let down = std::thread::Builder::new()
            .name("leasehold-scan".into())
            .spawn_scoped(s, || side(tree, false, &claims, 0));
        let up = side(tree, true, &claims, reserve);
        match down {
            Ok(down) => match down.join() {
                Ok(down) => up.join(down),
                Err(panic) => std::panic::resume_unwind(panic),
            },
            // No thread: the forward side read the whole tree alone.
            Err(_) => up,
        }
    })
}

/// One side's read: forward from the first key, or backward from the
/// last, until it meets what the other side claimed (or the tree's end).
fn side(tree: &sled::Tree, forward: bool, claims: &Mutex<Claims>, reserve: usize) -> Scanned {
    let mut out = Scanned {
        decoded: Some(Vec::with_capacity(reserve)),
        ..Scanned::default()
    };
    let mut holders = Holders::default();
    let mut iter = tree.iter();
    let mut batch: Vec<(sled::IVec, sled::IVec)> = Vec::with_capacity(BATCH);
    loop {
        let mut ended = false;
        while batch.len() < BATCH {
            let kv = if forward {
                iter.next()
            } else {
                iter.next_back()
            };
            match kv {
                Some(Ok(kv)) => batch.push(kv),
                Some(Err(e)) => {
                    out.problems.push(Problem::new(
                        "db",
                        format!("sled cannot read every record: {e}"),
                    ));
                    ended = true;
                    break;
                }
                None => {
                    ended = true;
                    break;
                }
            }
        }
        // Keep what the other side has not claimed, and claim it.
        {
            let mut c = claims.lock().expect("scan claims lock");
            let other = if forward { &c.down } else { &c.up };
            if let Some(o) = other {
                let before = batch.len();
                batch.retain(|(k, _)| if forward { k < o } else { k > o });
                ended |= batch.len() < before;
            }
            if let Some((k, _)) = batch.last() {
                let mine = if forward { &mut c.up } else { &mut c.down };
                *mine = Some(k.clone());
            }
        }
        for (k, v) in batch.drain(..) {
            out.take(&k, &v, &mut holders);
        }
        if ended {
            break;
        }
    }
    if !forward {
        if let Some(d) = out.decoded.as_mut() {
            d.reverse();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode_lease;
    use leasehold_core::lease::Token;

    fn record(i: u64) -> LeaseRecord {
        LeaseRecord {
            issued: Default::default(),
            holder: Some(HolderId::from_trusted(format!("w{}", i % 3))),
            token: Token(i + 1),
            ttl: std::time::Duration::from_secs(9),
            owner: None,
            value: Default::default(),
        }
    }

    /// A tree of `names`, each with a lease whose token is its position + 1.
    fn tree(names: &[String]) -> sled::Tree {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let t = db.open_tree("leases").unwrap();
        for (i, n) in names.iter().enumerate() {
            t.insert(n.as_bytes(), encode_lease(&record(i as u64)))
                .unwrap();
        }
        t
    }

    /// Both sides together read every record once, in key order, and
    /// count, hash and decode exactly what one side alone does: for
    /// empty, tiny and larger trees, names evenly spread or all but one
    /// under one prefix, read many times over (where the sides meet
    /// varies from run to run).
    #[test]
    fn two_sides_read_every_record_once_in_order() {
        let shapes: Vec<Vec<String>> = vec![
            vec![],
            vec!["a".into()],
            vec!["a".into(), "b".into()],
            (0..BATCH + 1).map(|i| format!("job-{i:05}")).collect(),
            (0..5_000).map(|i| format!("job-{i:05}")).collect(),
            (0..5_000)
                .map(|i| format!("a/{i:05}"))
                .chain(["z".to_string()])
                .collect(),
        ];
        for names in shapes {
            let t = tree(&names);
            let alone = leases_on(&t, 0, false);
            let mut sorted = names.clone();
            sorted.sort();
            let read: Vec<String> = alone
                .decoded
                .as_ref()
                .unwrap()
                .iter()
                .map(|(n, _)| n.as_str().to_owned())
                .collect();
            assert_eq!(read, sorted);
            for _ in 0..20 {
                let both = leases_on(&t, names.len() as u64, true);
                assert!(both.problems.is_empty());
                assert_eq!(both.leases, names.len() as u64);
                assert_eq!(both.digest, alone.digest);
                assert_eq!(both.live_bytes, alone.live_bytes);
                assert_eq!(both.max_token, alone.max_token);
                assert_eq!(both.decoded, alone.decoded);
            }
        }
    }

    /// A key that is not a name drops the list of leases on either side,
    /// and the records are still all counted.
    #[test]
    fn a_key_that_is_not_a_name_drops_the_list() {
        let mut names: Vec<String> = (0..2_000).map(|i| format!("job-{i:05}")).collect();
        names.sort();
        let t = tree(&names);
        t.insert([0xff, 0xfe], encode_lease(&record(7))).unwrap();
        let both = leases_on(&t, 0, true);
        assert!(both.decoded.is_none());
        assert_eq!(both.leases, 2_001);
        assert!(both.problems.is_empty());
    }

    /// A value that does not decode is a problem, named once.
    #[test]
    fn a_record_that_does_not_decode_is_a_problem() {
        let names: Vec<String> = (0..2_000).map(|i| format!("job-{i:05}")).collect();
        let t = tree(&names);
        t.insert("job-01000", &b"\xffnot a lease"[..]).unwrap();
        let both = leases_on(&t, 0, true);
        assert_eq!(both.problems.len(), 1, "{:?}", both.problems);
        assert_eq!(both.leases, 2_000);
    }
}
