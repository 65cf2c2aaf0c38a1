//! The etcd transactions that make each decision, built from what it was
//! decided on. Pure: the comparisons re-check, inside etcd, everything the
//! decision in [`super::decide`] relied on, and the operations are the
//! change. A transaction whose comparisons fail changes nothing; the
//! caller reads again and decides again.

use super::client::{
    create_is, delete_op, delete_range_op, lease_is, mod_is, pb, put_op, range_op, value_below,
    value_is, version_is,
};
use super::keys::{
    encode_value, token_below, HolderRec, Holding, JobState, Keys, Meta, MetaRec, Owned, TokenRec,
};
use super::queue::{grant_compares, Place};
use leasehold_core::lease::{HolderId, JobName, Published, TenureEnd, Token};
use leasehold_core::record::{encode_history, HistoryPut, ValueRecord};

/// A grant of the free lease with `holder_rec` and `token_rec` (see
/// [`super::decide::grant`]), its holder key bound to the new etcd lease
/// `lease`: the holder key is still absent, the token counter unchanged
/// since `st` was read, and nobody is ahead in line. Takes the waiter's key
/// out of line when it queued.
pub fn grant(
    keys: &Keys,
    job: &str,
    st: &JobState,
    place: Option<&Place>,
    holder_rec: &HolderRec,
    token_rec: &TokenRec,
    lease: i64,
) -> pb::TxnRequest {
    let (hk, tk) = (keys.holder(job), keys.token(job));
    let mut compare = vec![create_is(hk, 0), mod_is(tk, st.token_mod)];
    compare.extend(grant_compares(keys, job, place));
    let mut success = grant_puts(keys, job, holder_rec, token_rec, lease).to_vec();
    if let Some(p) = place {
        success.push(delete_op(p.key.clone()));
    }
    pb::TxnRequest {
        compare,
        success,
        failure: Vec::new(),
    }
}

/// What every grant puts: the token counter's record, the holder key on
/// the grant's etcd lease, and the grant's untold key (on that lease too:
/// untold until the holder asks again, [`told_again`]).
fn grant_puts(
    keys: &Keys,
    job: &str,
    holder_rec: &HolderRec,
    token_rec: &TokenRec,
    lease: i64,
) -> [pb::RequestOp; 3] {
    [
        put_op(keys.token(job), token_rec.encode(), 0),
        put_op(keys.holder(job), holder_rec.encode(), lease),
        put_op(
            keys.untold(job),
            holder_rec.token.0.to_be_bytes().to_vec(),
            lease,
        ),
    ]
}

/// A transfer of the live holding `h` to the waiter at `place`, granted
/// with `holder_rec` and `token_rec` on the new etcd lease `lease`: the
/// holder key is still exactly `h`, the token counter unchanged since `st`
/// was read, and the successor's waiter key still the one read. The
/// holder key is put again (never deleted, so the job is never free in
/// between), with a new untold key, and the waiter key is deleted.
#[allow(clippy::too_many_arguments)]
pub fn transfer(
    keys: &Keys,
    job: &str,
    st: &JobState,
    h: &Holding,
    place: &Place,
    holder_rec: &HolderRec,
    token_rec: &TokenRec,
    lease: i64,
) -> pb::TxnRequest {
    let mut compare = still(keys.holder(job), h);
    compare.push(mod_is(keys.token(job), st.token_mod));
    compare.push(create_is(place.key.clone(), place.rev));
    let mut success = grant_puts(keys, job, holder_rec, token_rec, lease).to_vec();
    success.push(delete_op(place.key.clone()));
    if place.preferred {
        success.push(preferred_grant(keys, job, holder_rec.token));
    }
    pb::TxnRequest {
        compare,
        success,
        failure: Vec::new(),
    }
}

/// The put that marks the grant of `token` as a preferred candidate's
/// (see `Keys::preferred_grant`).
pub fn preferred_grant(keys: &Keys, job: &str, token: Token) -> pb::RequestOp {
    put_op(keys.preferred_grant(job), token.0.to_be_bytes().to_vec(), 0)
}

/// Adds to a grant's transaction `req` the creation of its job: `meta`
/// unchanged since it was read as `m` (so the new-job floor the token was
/// chosen above, and the count the quota was checked against, hold), and
/// one more job in it.
pub fn count_new_job(keys: &Keys, req: &mut pb::TxnRequest, m: &Meta) {
    let mk = keys.meta();
    req.compare.push(match m.mod_revision {
        0 => create_is(mk.clone(), 0),
        rev => mod_is(mk.clone(), rev),
    });
    let rec = MetaRec {
        jobs: m.rec.jobs + 1,
        ..m.rec
    };
    req.success.push(put_op(mk, rec.encode(), 0));
}

/// Adds to `req` the change of `principal`'s count of the jobs it owns
/// ([`Keys::owned`]) from `read` to `to`, if it is unchanged since it was
/// read (`read.mod_revision` 0: it did not exist).
pub fn count_owned(keys: &Keys, req: &mut pb::TxnRequest, principal: &str, read: Owned, to: u64) {
    let ok = keys.owned(principal);
    req.compare.push(match read.mod_revision {
        0 => create_is(ok.clone(), 0),
        rev => mod_is(ok.clone(), rev),
    });
    req.success.push(put_op(ok, to.to_string().into_bytes(), 0));
}

/// Deletes a job read as `st` (its token key was there, its holder key
/// absent): its holder and token keys, every value key and its history,
/// and puts
/// `meta` as `rec` (the floor raised to the job's token, one job less), if
/// the holder key is still absent, the token key unchanged, and `meta`
/// unchanged since it was read as `m`.
pub fn delete_job(
    keys: &Keys,
    job: &str,
    st: &JobState,
    m: &Meta,
    rec: &MetaRec,
) -> pb::TxnRequest {
    let (hk, tk, mk) = (keys.holder(job), keys.token(job), keys.meta());
    let (js, je) = keys.job_range(job);
    let (vs, ve) = keys.values_range(job, b"", None);
    let (hs, he) = keys.history_range(job);
    pb::TxnRequest {
        compare: vec![
            create_is(hk, 0),
            mod_is(tk, st.token_mod),
            match m.mod_revision {
                0 => create_is(mk.clone(), 0),
                rev => mod_is(mk.clone(), rev),
            },
        ],
        success: vec![
            delete_range_op(js, je),
            delete_range_op(vs, ve),
            delete_range_op(hs, he),
            delete_op(keys.preferred_grant(job)),
            put_op(mk, rec.encode(), 0),
        ],
        failure: Vec::new(),
    }
}

/// Moves the holding `h` to the new etcd lease `lease` with record `rec`
/// (a new TTL), if the holder key is still exactly `h`.
pub fn move_holding(
    keys: &Keys,
    job: &str,
    h: &Holding,
    rec: &HolderRec,
    lease: i64,
) -> pb::TxnRequest {
    let hk = keys.holder(job);
    pb::TxnRequest {
        compare: still(hk.clone(), h),
        success: vec![put_op(hk, rec.encode(), lease)],
        failure: Vec::new(),
    }
}

/// Ends the holding `h` as its etcd lease's expiry would, if the holder
/// key is still exactly `h`: deletes the holder key (a transaction that
/// only deletes, which etcd takes even when out of space).
pub fn expire_holding(keys: &Keys, job: &str, h: &Holding) -> pb::TxnRequest {
    let hk = keys.holder(job);
    pb::TxnRequest {
        compare: still(hk.clone(), h),
        success: vec![delete_op(hk)],
        failure: Vec::new(),
    }
}

/// The broken rule "renew-bumps-token": moves the holding `h` as
/// [`move_holding`] does, with `rec` (a new token), and puts the token
/// counter's `token_rec` with it.
pub fn bump_token(
    keys: &Keys,
    job: &str,
    h: &Holding,
    rec: &HolderRec,
    token_rec: &TokenRec,
    lease: i64,
) -> pb::TxnRequest {
    let mut req = move_holding(keys, job, h, rec, lease);
    req.success
        .push(put_op(keys.token(job), token_rec.encode(), 0));
    req
}

/// Tells every frontend that the holder of `h` asked again since the grant
/// (a repeated `Acquire` or a `Renew`), if the holder key is still exactly
/// `h`, so that no give-back of the grant ([`give_back`]) ends it: the
/// holder key is put once more, unchanged and on the same etcd lease (its
/// version goes past 1, which frontends before the untold key read), and
/// the grant's untold key is deleted.
pub fn told_again(keys: &Keys, job: &str, h: &Holding) -> pb::TxnRequest {
    let hk = keys.holder(job);
    pb::TxnRequest {
        compare: still(hk.clone(), h),
        success: vec![
            put_op(hk, h.raw.clone(), h.lease),
            delete_op(keys.untold(job)),
        ],
        failure: Vec::new(),
    }
}

/// [`told_again`] without a write: only the untold key's deletion, if the
/// holder key is still exactly `h`. For an etcd out of space (its NOSPACE
/// alarm), which refuses every transaction that puts but takes one that
/// only deletes: a renewal must never need a write. The deletion alone
/// keeps the grant from being given back, since [`give_back`] compares the
/// untold key too.
pub fn told_again_by_deletion(keys: &Keys, job: &str, h: &Holding) -> pb::TxnRequest {
    pb::TxnRequest {
        compare: still(keys.holder(job), h),
        success: vec![delete_op(keys.untold(job))],
        failure: Vec::new(),
    }
}

/// [`release`], only if the holder never asked again since the grant: the
/// holder key was never put again (its version is still 1) and the grant's
/// untold key still holds its token. The give-back of a grant whose caller
/// was never told of it, which must not end a grant its holder asked for
/// again. Either mark alone tells that the holder asked again: the version
/// is what frontends before the untold key put, and the untold key's
/// deletion is all a renewal can do while etcd is out of space. A grant
/// made before untold keys existed has none, and is never given back (its
/// etcd lease runs out). When the comparisons fail, the transaction reads
/// the untold key (see [`untold_gone`]).
pub fn give_back(
    keys: &Keys,
    job: &str,
    st: &JobState,
    h: &Holding,
    holder: &HolderId,
    token: Token,
) -> pb::TxnRequest {
    let mut req = release(keys, job, st, h, holder, token);
    let uk = keys.untold(job);
    req.compare.push(version_is(keys.holder(job), 1));
    req.compare
        .push(value_is(uk.clone(), token.0.to_be_bytes().to_vec()));
    req.failure.push(range_op(uk));
    req
}

/// Whether a [`give_back`] transaction that failed found the untold key no
/// longer holding `token`: the holder asked again (or the grant ended), and
/// reading again cannot help.
pub fn untold_gone(r: &pb::TxnResponse, token: Token) -> bool {
    let untold = r.responses.iter().find_map(|op| match &op.response {
        Some(pb::response_op::Response::ResponseRange(rr)) => Some(rr),
        _ => None,
    });
    match untold {
        Some(rr) => !rr
            .kvs
            .iter()
            .any(|kv| kv.value == token.0.to_be_bytes().as_slice()),
        None => false,
    }
}

/// Releases the holding `h` of (`holder`, `token`) of a job read as `st`:
/// marks the token record released and deletes the holder key, if it is
/// still exactly `h` (so the job is the one read: a job is deleted and
/// created again only while nobody holds it, and its owner stays).
pub fn release(
    keys: &Keys,
    job: &str,
    st: &JobState,
    h: &Holding,
    holder: &HolderId,
    token: Token,
) -> pb::TxnRequest {
    let (hk, tk) = (keys.holder(job), keys.token(job));
    let rec = TokenRec {
        token,
        released: true,
        holder: holder.to_string(),
        owner: st.token.as_ref().and_then(|t| t.owner.clone()),
    };
    pb::TxnRequest {
        compare: still(hk.clone(), h),
        success: vec![put_op(tk, rec.encode(), 0), delete_op(hk)],
        failure: Vec::new(),
    }
}

/// Puts `rec` under the value key `vk`: the holder key is still exactly
/// `h` (so the lease is live and `rec.token` is the job's newest), and the
/// key either still does not exist, or still holds a token `<=` ours and is
/// unchanged since it was read at mod revision `existing` (so the version
/// is right). With no `h` (the broken rule "no-fence" admitted the
/// write), neither the holder key nor the key's token is compared.
pub fn write(
    keys: &Keys,
    job: &str,
    h: Option<&Holding>,
    vk: &[u8],
    existing: Option<i64>,
    rec: &ValueRecord,
) -> pb::TxnRequest {
    let mut compare = Vec::new();
    if let Some(h) = h {
        compare.push(value_is(keys.holder(job), h.raw.clone()));
    }
    match existing {
        Some(rev) => {
            if h.is_some() {
                compare.push(value_below(vk.to_vec(), token_below(rec.token)));
            }
            compare.push(mod_is(vk.to_vec(), rev));
        }
        None => compare.push(create_is(vk.to_vec(), 0)),
    }
    pb::TxnRequest {
        compare,
        success: vec![put_op(vk.to_vec(), encode_value(rec), 0)],
        failure: Vec::new(),
    }
}

/// The put of one history record of `job`.
pub fn history_put(keys: &Keys, job: &JobName, put: &HistoryPut) -> pb::RequestOp {
    let (token, part) = match put {
        HistoryPut::Grant { token, .. } => (*token, 0),
        HistoryPut::End { token, .. } => (*token, 1),
    };
    let payload = encode_history(job, put).1.value.unwrap_or_default();
    put_op(keys.history(job.as_str(), token, part), payload, 0)
}

/// The put of a tenure's end, only if no end of it is recorded yet (a
/// transaction inside the transaction: its comparison failing does not
/// fail the outer one).
pub fn history_end_if_absent(
    keys: &Keys,
    job: &JobName,
    token: Token,
    how: TenureEnd,
    at_unix_ms: u64,
) -> pb::RequestOp {
    let put = HistoryPut::End {
        token,
        how,
        at_unix_ms,
    };
    pb::RequestOp {
        request: Some(pb::request_op::Request::RequestTxn(pb::TxnRequest {
            compare: vec![create_is(keys.history(job.as_str(), token, 1), 0)],
            success: vec![history_put(keys, job, &put)],
            failure: Vec::new(),
        })),
    }
}

/// What a grant of `token` to `holder` adds to the job's history, in its
/// own transaction: the end of the tenure before it if that ran out and
/// no end is recorded yet, the grant, and the removal of the tenure `keep`
/// tokens older (`keep` 0: no history). Only that one tenure: a job's
/// tokens go up by one a grant, except where a job created again jumps
/// above the new-job floor, and the tenures of its earlier life (below
/// the jump) are kept. The grant that creates a job removes, instead, the
/// tokens in `older_out`: the oldest of its earlier life, past `keep - 1`
/// (see `EtcdNode::grant`).
#[allow(clippy::too_many_arguments)]
pub fn grant_history(
    keys: &Keys,
    job: &JobName,
    st: &JobState,
    token: Token,
    holder: &HolderId,
    ttl: std::time::Duration,
    value: &Published,
    keep: u64,
    at_unix_ms: u64,
    older_out: &[Token],
) -> Vec<pb::RequestOp> {
    if keep == 0 {
        return Vec::new();
    }
    let mut ops = Vec::new();
    if let Some(t) = st
        .token
        .as_ref()
        .filter(|t| !t.released && t.token > Token::NONE)
    {
        ops.push(history_end_if_absent(
            keys,
            job,
            t.token,
            TenureEnd::Expired,
            at_unix_ms,
        ));
    }
    ops.push(history_put(
        keys,
        job,
        &HistoryPut::Grant {
            token,
            holder: holder.clone(),
            at_unix_ms,
            ttl,
            value: value.clone(),
        },
    ));
    let out = token
        .0
        .checked_sub(keep)
        .filter(|t| *t > 0 && st.token.is_some());
    for t in out.map(Token).iter().chain(older_out) {
        ops.push(delete_range_op(
            keys.history(job.as_str(), *t, 0),
            keys.history(job.as_str(), *t, 2),
        ));
    }
    ops
}

/// The holder key is still exactly the holding: same bytes, same lease.
fn still(hk: Vec<u8>, h: &Holding) -> Vec<pb::Compare> {
    vec![value_is(hk.clone(), h.raw.clone()), lease_is(hk, h.lease)]
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use leasehold_core::lease::Limits;
    use pb::compare::{CompareResult, CompareTarget, TargetUnion};
    use pb::request_op::Request;

    fn holding(token: u64, holder: &str) -> Holding {
        let rec = HolderRec {
            issued: Default::default(),
            token: Token(token),
            ttl: Duration::from_secs(5),
            holder: holder.into(),
            value: None,
            sharing: Default::default(),
        };
        Holding {
            raw: rec.encode(),
            rec,
            lease: 42,
            version: 1,
        }
    }

    /// A comparison as (key, target, result, operand) for assertions.
    fn cmp(c: &pb::Compare) -> (Vec<u8>, i32, i32, String) {
        let operand = match &c.target_union {
            Some(TargetUnion::CreateRevision(r)) => format!("create {r}"),
            Some(TargetUnion::ModRevision(r)) => format!("mod {r}"),
            Some(TargetUnion::Lease(l)) => format!("lease {l}"),
            Some(TargetUnion::Value(v)) => format!("value {v:?}"),
            other => format!("{other:?}"),
        };
        (c.key.clone(), c.target, c.result, operand)
    }

    /// An operation as (put or delete, key, value, lease).
    fn op(o: &pb::RequestOp) -> (&'static str, Vec<u8>, Vec<u8>, i64) {
        match o.request.as_ref().unwrap() {
            Request::RequestPut(p) => ("put", p.key.clone(), p.value.clone(), p.lease),
            Request::RequestDeleteRange(d) => {
                assert!(d.range_end.is_empty(), "one key");
                ("delete", d.key.clone(), Vec::new(), 0)
            }
            other => panic!("{other:?}"),
        }
    }

    const EQ: i32 = CompareResult::Equal as i32;

    #[test]
    fn a_grant_checks_the_holder_absent_the_counter_unchanged_and_the_line() {
        let k = Keys::new("lh/");
        let st = JobState {
            token_mod: 17,
            ..JobState::default()
        };
        let h = holding(4, "a");
        let t = TokenRec {
            token: Token(4),
            released: false,
            holder: "a".into(),
            owner: None,
        };
        let t0 = grant(&k, "j", &st, None, &h.rec, &t, 99);
        let c: Vec<_> = t0.compare.iter().map(cmp).collect();
        assert_eq!(
            c[0],
            (
                k.holder("j"),
                CompareTarget::Create as i32,
                EQ,
                "create 0".into()
            )
        );
        assert_eq!(
            c[1],
            (k.token("j"), CompareTarget::Mod as i32, EQ, "mod 17".into())
        );
        assert_eq!(t0.compare[2..], grant_compares(&k, "j", None)[..]);
        let ops: Vec<_> = t0.success.iter().map(op).collect();
        assert_eq!(
            ops,
            [
                ("put", k.token("j"), t.encode(), 0),
                ("put", k.holder("j"), h.rec.encode(), 99),
                ("put", k.untold("j"), 4u64.to_be_bytes().to_vec(), 99),
            ]
        );
        assert!(t0.failure.is_empty());

        let place = Place {
            key: k.waiter("j", "me", false),
            rev: 30,
            preferred: false,
        };
        let t1 = grant(&k, "j", &st, Some(&place), &h.rec, &t, 99);
        assert_eq!(t1.compare[2..], grant_compares(&k, "j", Some(&place))[..]);
        assert_eq!(
            op(&t1.success[3]),
            ("delete", place.key.clone(), Vec::new(), 0)
        );
    }

    #[test]
    fn a_release_and_a_move_compare_the_exact_holding() {
        let k = Keys::new("lh/");
        let h = holding(4, "a");
        let still = [
            (
                k.holder("j"),
                CompareTarget::Value as i32,
                EQ,
                format!("value {:?}", h.raw),
            ),
            (
                k.holder("j"),
                CompareTarget::Lease as i32,
                EQ,
                "lease 42".into(),
            ),
        ];
        let a = Limits::default().holder("a").unwrap();
        let r = release(&k, "j", &JobState::default(), &h, &a, Token(4));
        assert_eq!(r.compare.iter().map(cmp).collect::<Vec<_>>(), still);
        let released = TokenRec {
            token: Token(4),
            released: true,
            holder: "a".into(),
            owner: None,
        };
        assert_eq!(
            r.success.iter().map(op).collect::<Vec<_>>(),
            [
                ("put", k.token("j"), released.encode(), 0),
                ("delete", k.holder("j"), Vec::new(), 0),
            ]
        );

        let longer = HolderRec {
            ttl: Duration::from_secs(9),
            ..h.rec.clone()
        };
        let m = move_holding(&k, "j", &h, &longer, 77);
        assert_eq!(m.compare.iter().map(cmp).collect::<Vec<_>>(), still);
        assert_eq!(
            m.success.iter().map(op).collect::<Vec<_>>(),
            [("put", k.holder("j"), longer.encode(), 77)]
        );
    }

    #[test]
    fn telling_a_grant_deletes_its_untold_key_and_a_give_back_compares_it() {
        let k = Keys::new("lh/");
        let h = holding(4, "a");
        let told = told_again(&k, "j", &h);
        assert_eq!(
            told.success.iter().map(op).collect::<Vec<_>>(),
            [
                ("put", k.holder("j"), h.raw.clone(), 42),
                ("delete", k.untold("j"), Vec::new(), 0),
            ]
        );
        // Out of space, only the deletion: nothing that etcd refuses.
        let deleted = told_again_by_deletion(&k, "j", &h);
        assert_eq!(deleted.compare, told.compare);
        assert_eq!(
            deleted.success.iter().map(op).collect::<Vec<_>>(),
            [("delete", k.untold("j"), Vec::new(), 0)]
        );
        let a = Limits::default().holder("a").unwrap();
        let g = give_back(&k, "j", &JobState::default(), &h, &a, Token(4));
        let c: Vec<_> = g.compare.iter().map(cmp).collect();
        assert_eq!(
            c[c.len() - 1],
            (
                k.untold("j"),
                CompareTarget::Value as i32,
                EQ,
                format!("value {:?}", 4u64.to_be_bytes().to_vec())
            )
        );
        assert_eq!(c[c.len() - 2].0, k.holder("j"));
        assert_eq!(c[c.len() - 2].1, CompareTarget::Version as i32);
        let read = |kvs: Vec<pb::KeyValue>| pb::TxnResponse {
            succeeded: false,
            responses: vec![pb::ResponseOp {
                response: Some(pb::response_op::Response::ResponseRange(
                    pb::RangeResponse {
                        kvs,
                        ..Default::default()
                    },
                )),
            }],
            ..Default::default()
        };
        let untold = |t: u64| pb::KeyValue {
            key: k.untold("j"),
            value: t.to_be_bytes().to_vec(),
            ..Default::default()
        };
        assert!(untold_gone(&read(Vec::new()), Token(4)));
        assert!(untold_gone(&read(vec![untold(5)]), Token(4)));
        assert!(!untold_gone(&read(vec![untold(4)]), Token(4)));
    }

    #[test]
    fn a_write_compares_the_holding_the_stored_token_and_the_revision() {
        let k = Keys::new("lh/");
        let h = holding(4, "a");
        let vk = k.value("j", b"key");
        let rec = ValueRecord {
            token: Token(4),
            version: 3,
            value: Some(b"v".to_vec()),
        };
        let live = (
            k.holder("j"),
            CompareTarget::Value as i32,
            EQ,
            format!("value {:?}", h.raw),
        );

        let over = write(&k, "j", Some(&h), &vk, Some(55), &rec);
        assert_eq!(
            over.compare.iter().map(cmp).collect::<Vec<_>>(),
            [
                live.clone(),
                (
                    vk.clone(),
                    CompareTarget::Value as i32,
                    CompareResult::Less as i32,
                    format!("value {:?}", token_below(Token(4)))
                ),
                (vk.clone(), CompareTarget::Mod as i32, EQ, "mod 55".into()),
            ]
        );
        assert_eq!(
            over.success.iter().map(op).collect::<Vec<_>>(),
            [("put", vk.clone(), encode_value(&rec), 0)]
        );

        let new = write(&k, "j", Some(&h), &vk, None, &rec);
        assert_eq!(
            new.compare.iter().map(cmp).collect::<Vec<_>>(),
            [
                live,
                (
                    vk.clone(),
                    CompareTarget::Create as i32,
                    EQ,
                    "create 0".into()
                )
            ]
        );
    }
}
