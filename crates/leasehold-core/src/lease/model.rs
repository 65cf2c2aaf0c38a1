//! A reference model of the lease rules, and a checker that runs the real
//! [`LeaseTable`] beside it.
//!
//! The model is the simplest statement of what a job's lease promises: a
//! newest token, and a holder with a deadline. The property tests feed it
//! random operations; the fuzz target (`fuzz/`) feeds it operations decoded
//! from the fuzzer's bytes. Compiled for tests and with the `model`
//! feature only.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::lease::{
    Acquire, Effects, Floors, HolderId, JobName, LeaseRecord, LeaseTable, Limits, Token,
};

/// How many jobs and holders the operations range over.
pub const JOBS: u8 = 3;
/// See [`JOBS`].
pub const HOLDERS: u8 = 3;

/// One step of a scenario.
#[derive(Debug, Clone)]
pub enum Op {
    /// `holder` asks for `job` (not waiting).
    Acquire {
        /// The job, below [`JOBS`].
        job: u8,
        /// The holder, below [`HOLDERS`].
        holder: u8,
        /// The TTL.
        ttl_ms: u64,
    },
    /// `holder` renews with the job's newest token plus `token_delta`.
    Renew {
        /// The job.
        job: u8,
        /// The holder.
        holder: u8,
        /// -1, 0 or 1 from the newest token.
        token_delta: i8,
        /// The TTL.
        ttl_ms: u64,
    },
    /// `holder` releases with the newest token plus `token_delta`.
    Release {
        /// The job.
        job: u8,
        /// The holder.
        holder: u8,
        /// -1, 0 or 1 from the newest token.
        token_delta: i8,
    },
    /// A fenced write with the newest token plus `token_delta`.
    Write {
        /// The job.
        job: u8,
        /// -1, 0 or 1 from the newest token.
        token_delta: i8,
    },
    /// Time passes.
    Advance {
        /// How much.
        ms: u64,
    },
    /// The server restarts from what was persisted.
    Restart,
}

/// Decodes operations from arbitrary bytes, four bytes each; any input is
/// a valid scenario.
pub fn from_bytes(data: &[u8]) -> Vec<Op> {
    data.chunks_exact(4)
        .map(|b| {
            let job = b[1] % JOBS;
            let holder = b[2] % HOLDERS;
            let delta = (b[3] % 3) as i8 - 1;
            let ttl_ms = 100 + (u64::from(b[3]) * 12);
            match b[0] % 6 {
                0 => Op::Acquire {
                    job,
                    holder,
                    ttl_ms,
                },
                1 => Op::Renew {
                    job,
                    holder,
                    token_delta: delta,
                    ttl_ms,
                },
                2 => Op::Release {
                    job,
                    holder,
                    token_delta: delta,
                },
                3 => Op::Write {
                    job,
                    token_delta: delta,
                },
                4 => Op::Advance {
                    ms: u64::from(u16::from_le_bytes([b[2], b[3]])) % 2000,
                },
                _ => Op::Restart,
            }
        })
        .collect()
}

#[derive(Debug, Default, Clone)]
struct Model {
    token: u64,
    /// The holder and its deadline.
    holder: Option<(u8, Instant)>,
}

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

fn name(j: u8) -> JobName {
    Limits::default().job(&format!("j{j}")).expect("valid job")
}

fn holder(h: u8) -> HolderId {
    Limits::default()
        .holder(&format!("h{h}"))
        .expect("valid holder")
}

fn granted(a: &Acquire) -> Option<u64> {
    match a {
        Acquire::Granted(v) => Some(v.token.0),
        Acquire::Busy { .. } | Acquire::Exhausted(_) => None,
    }
}

/// Runs `ops` against a fresh [`LeaseTable`] and the model; the first
/// disagreement is an error.
pub fn check(ops: &[Op]) -> Result<(), String> {
    let mut now = Instant::now();
    let mut table = LeaseTable::new();
    let mut model: HashMap<u8, Model> = HashMap::new();
    let mut stored: HashMap<u8, LeaseRecord> = HashMap::new();
    let ms = Duration::from_millis;
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Acquire {
                job: j,
                holder: h,
                ttl_ms,
            } => {
                let m = model.entry(j).or_default();
                let expect = match m.holder.filter(|(_, d)| *d > now) {
                    Some((lh, _)) if lh == h => Some(m.token),
                    Some(_) => None,
                    None => Some(m.token + 1),
                };
                let (a, fx) = table.acquire(&name(j), &holder(h), ms(ttl_ms), now, None, false);
                ensure!(
                    granted(&a) == expect,
                    "step {i} {op:?}: got {a:?}, model {expect:?}"
                );
                if let Some(t) = expect {
                    m.token = t;
                    m.holder = Some((h, now + ms(ttl_ms)));
                }
                if let Some(r) = fx.persist {
                    stored.insert(j, r);
                }
            }
            Op::Renew {
                job: j,
                holder: h,
                token_delta,
                ttl_ms,
            } => {
                let m = model.entry(j).or_default();
                let token = (m.token as i64 + i64::from(token_delta)).max(1) as u64;
                let ok =
                    matches!(m.holder, Some((lh, d)) if lh == h && d > now) && token == m.token;
                let r = table.renew(&name(j), &holder(h), Token(token), ms(ttl_ms), now);
                ensure!(r.is_ok() == ok, "step {i} {op:?}: got {r:?}, model ok={ok}");
                if let Ok((v, fx)) = r {
                    ensure!(
                        v.token.0 == m.token,
                        "step {i}: a renewal changed the token"
                    );
                    m.holder = Some((h, now + ms(ttl_ms)));
                    if let Some(r) = fx.persist {
                        stored.insert(j, r);
                    }
                }
            }
            Op::Release {
                job: j,
                holder: h,
                token_delta,
            } => {
                let m = model.entry(j).or_default();
                let token = (m.token as i64 + i64::from(token_delta)).max(1) as u64;
                let ours =
                    matches!(m.holder, Some((lh, d)) if lh == h && d > now) && token == m.token;
                let r = table.release(&name(j), &holder(h), Token(token), now);
                if ours {
                    let fx = r.map_err(|e| {
                        format!("step {i} {op:?}: the live holder's release failed: {e}")
                    })?;
                    m.holder = None;
                    if let Some(r) = fx.persist {
                        stored.insert(j, r);
                    }
                } else if let Ok(fx) = r {
                    ensure!(
                        fx == Effects::default(),
                        "step {i} {op:?}: a refused or repeated release changed something"
                    );
                }
            }
            Op::Write {
                job: j,
                token_delta,
            } => {
                let m = model.entry(j).or_default();
                let token = (m.token as i64 + i64::from(token_delta)).max(1) as u64;
                let live = m.holder.is_some_and(|(_, d)| d > now);
                let ok = token == m.token && live;
                let r = table.check_write(&name(j), Token(token), None, now);
                ensure!(r.is_ok() == ok, "step {i} {op:?}: got {r:?}, model {m:?}");
                if token > m.token {
                    ensure!(
                        matches!(r, Err(Error::UnknownToken { .. })),
                        "step {i}: a token never issued was not refused as unknown: {r:?}"
                    );
                }
            }
            Op::Advance { ms: d } => now += ms(d),
            Op::Restart => {
                // Only what was persisted survives; held leases are live for
                // their stored TTL from start-up; tokens go on.
                table = LeaseTable::restore(
                    stored.iter().map(|(j, r)| (name(*j), r.clone())),
                    Floors::default(),
                    now,
                );
                for (j, m) in model.iter_mut() {
                    let Some(r) = stored.get(j) else {
                        ensure!(
                            m.token == 0,
                            "step {i}: job {j} was granted but never stored"
                        );
                        continue;
                    };
                    ensure!(
                        r.token.0 == m.token,
                        "step {i}: the newest token of job {j} was not stored"
                    );
                    match (&r.holder, m.holder.filter(|(_, d)| *d > now)) {
                        (Some(h), Some((mh, d))) => {
                            ensure!(
                                *h == holder(mh),
                                "step {i}: job {j} stored the wrong holder"
                            );
                            ensure!(
                                now + r.ttl >= d,
                                "step {i}: a restart shortened job {j}'s lease"
                            );
                            m.holder = Some((mh, now + r.ttl));
                        }
                        (Some(h), None) => {
                            // Expired before the restart: live again, which
                            // is conservative (no early takeover).
                            let mh = (0..HOLDERS)
                                .find(|x| holder(*x) == *h)
                                .ok_or("unknown holder")?;
                            m.holder = Some((mh, now + r.ttl));
                        }
                        (None, Some(_)) => {
                            return Err(format!("step {i}: job {j}'s live lease was not stored"))
                        }
                        (None, None) => m.holder = None,
                    }
                }
            }
        }
    }
    Ok(())
}
