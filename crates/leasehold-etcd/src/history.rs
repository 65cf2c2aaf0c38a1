//! A job's history of leaders on etcd: `GetHistory` (the tenures, read
//! with the job's records at one revision; an expiry followed by another
//! holder's grant shows as a takeover, and a tenure that ran out with no
//! end recorded yet as expired now), and which tenures of a job's earlier
//! life a grant that creates it again trims (`history_past`). The records
//! themselves, and the trim of each grant, are `txn`'s.

use std::time::Duration;

use leasehold_core::clock;
use leasehold_core::error::{Error, Result};
use leasehold_core::lease::{JobName, TenureEnd, Token};
use leasehold_core::record::{self, decode_history, Tenure, ValueRecord};

use super::client::{range_req, ranges};
use super::{keys, EtcdNode};

impl EtcdNode {
    /// Up to `limit` tenures of `job`'s history with a token below
    /// `before` (all when `None`), newest first, read with the job's
    /// records at one revision. A tenure that ran out with no end recorded
    /// yet (the frontends record an expiry as they see the holder key go)
    /// shows as expired now.
    pub async fn history(
        &self,
        job: &JobName,
        before: Option<Token>,
        limit: usize,
    ) -> Result<Vec<Tenure>> {
        self.bounded(
            "GetHistory",
            Duration::ZERO,
            self.history_unbounded(job, before, limit),
        )
        .await
    }

    /// The work of [`EtcdNode::history`], which bounds it.
    async fn history_unbounded(
        &self,
        job: &JobName,
        before: Option<Token>,
        limit: usize,
    ) -> Result<Vec<Tenure>> {
        let k = &self.inner.keys;
        let prefix = k.history_prefix(job.as_str());
        let end = match before {
            Some(t) if t == Token::NONE => return Ok(Vec::new()),
            // `before`'s own tenure too: it says whether the one before it
            // was taken over.
            Some(t) => k.history(job.as_str(), t, 2),
            None => keys::prefix_end(&prefix),
        };
        let (js, je) = k.job_range(job.as_str());
        let reads = vec![range_req(js, je, 0), range_req(prefix.clone(), end, 0)];
        let r = self.failed(self.inner.etcd.read_txn(reads).await)?;
        let mut rs = ranges(r).into_iter();
        let job_kvs = rs.next().map(|r| r.kvs).unwrap_or_default();
        let st = k.job(job.as_str(), &job_kvs)?;
        let records: Vec<(Vec<u8>, ValueRecord)> = rs
            .next()
            .map(|r| r.kvs)
            .unwrap_or_default()
            .into_iter()
            .map(|kv| {
                let rest = kv.key[prefix.len()..].to_vec();
                let token = rest
                    .get(..8)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, u64::from_be_bytes);
                let rec = ValueRecord {
                    token: Token(token),
                    version: 1,
                    value: Some(kv.value),
                };
                (rest, rec)
            })
            .collect();
        let mut tenures = decode_history(&records).map_err(|e| {
            Error::Storage(format!("the history of job {job:?} does not decode: {e}"))
        })?;
        // An expiry followed by another holder's grant was a takeover.
        for i in 1..tenures.len() {
            let next_holder = tenures[i].holder.clone();
            let prev = &mut tenures[i - 1];
            if matches!(prev.end, Some((TenureEnd::Expired, _))) && prev.holder != next_holder {
                prev.end = prev.end.map(|(_, at)| (TenureEnd::TakenOver, at));
            }
        }
        if let Some(b) = before {
            tenures.retain(|t| t.token < b);
        }
        tenures.reverse();
        tenures.truncate(limit);
        if let (None, Some(t)) = (&st.holder, &st.token) {
            if !t.released {
                if let Some(open) = tenures
                    .iter_mut()
                    .find(|x| x.token == t.token && x.end.is_none())
                {
                    open.end = Some((TenureEnd::Expired, clock::wall_unix_ms()));
                }
            }
        }
        Ok(tenures)
    }

    /// The tokens of `job`'s recorded tenures beyond its newest `kept`,
    /// oldest first.
    pub(super) async fn history_past(&self, job: &JobName, kept: u64) -> Result<Vec<Token>> {
        let prefix = self.inner.keys.history_prefix(job.as_str());
        let mut req = range_req(prefix.clone(), keys::prefix_end(&prefix), 0);
        req.keys_only = true;
        let r = self.failed(self.inner.etcd.range(req).await)?;
        Ok(record::tenures_beyond(
            r.kvs
                .iter()
                .filter_map(|kv| record::history_token(&kv.key, prefix.len())),
            kept,
        ))
    }
}
