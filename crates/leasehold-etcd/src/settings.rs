//! The settings every frontend on one prefix must share.
//!
//! Frontends on one prefix decide together on one set of jobs, so some of
//! their settings are rules of the whole: a lease granted by a frontend
//! with `--max-ttl 60s` cannot be renewed through one with `--max-ttl
//! 30s`, and a frontend without `--policy` would let anonymous callers
//! write with a principal's live token and delete its jobs. The first
//! frontend records them under `{prefix}settings` (one small text record);
//! every frontend after it compares its own at start-up and **refuses to
//! start when one differs, naming each setting**. To change them, restart
//! every frontend with the new ones, the first with
//! `--replace-shared-settings`, which records its own.
//!
//! A policy is recorded as present or absent, not by its contents: each
//! frontend reloads its policy file on its own, and a fleet rolls a new
//! policy out one frontend at a time.

use std::time::Duration;

use super::client::{create_is, mod_is, put_op, range_req};
use super::EtcdNode;
use leasehold_core::error::{Error, Result};

/// What the frontends on one prefix must agree on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedSettings {
    /// `--min-ttl`.
    pub min_ttl: Duration,
    /// `--max-ttl`.
    pub max_ttl: Duration,
    /// `--history-per-job`.
    pub history_per_job: usize,
    /// `--max-keys-per-job`.
    pub max_keys_per_job: usize,
    /// Whether `--policy` is given.
    pub policy: bool,
}

const FIRST_LINE: &str = "leasehold-settings 1";

impl SharedSettings {
    /// Each setting as (flag, value as the record keeps it).
    fn fields(&self) -> [(&'static str, String); 5] {
        [
            ("--min-ttl", format!("{}ms", self.min_ttl.as_millis())),
            ("--max-ttl", format!("{}ms", self.max_ttl.as_millis())),
            ("--history-per-job", self.history_per_job.to_string()),
            ("--max-keys-per-job", self.max_keys_per_job.to_string()),
            (
                "--policy",
                if self.policy { "given" } else { "not given" }.to_owned(),
            ),
        ]
    }

    fn encode(&self) -> Vec<u8> {
        let mut t = format!("{FIRST_LINE}\n");
        for (k, v) in self.fields() {
            t.push_str(&format!("{k} {v}\n"));
        }
        t.into_bytes()
    }

    /// How `recorded` (a record's bytes) differs from these settings: one
    /// line per setting, empty when they agree. A setting this version
    /// knows and the record lacks counts as different.
    fn differences(&self, recorded: &[u8]) -> Vec<String> {
        let text = String::from_utf8_lossy(recorded);
        let mut lines = text.lines();
        if lines.next() != Some(FIRST_LINE) {
            return vec![format!(
                "the record is not of a format this version reads ({:?})",
                text.lines().next().unwrap_or("")
            )];
        }
        let theirs: Vec<(&str, &str)> = lines.filter_map(|l| l.split_once(' ')).collect();
        self.fields()
            .into_iter()
            .filter_map(|(k, mine)| {
                let other = theirs.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
                (other != Some(mine.as_str())).then(|| {
                    format!(
                        "{k}: {mine} here, {} on the frontends already serving",
                        other.unwrap_or("unset")
                    )
                })
            })
            .collect()
    }
}

impl EtcdNode {
    /// Records `mine` under the prefix if nothing is recorded yet (or
    /// `replace`), and otherwise refuses when they differ from what is
    /// recorded, naming each setting.
    pub async fn agree_on_settings(&self, mine: &SharedSettings, replace: bool) -> Result<()> {
        let key = self.inner.keys.settings();
        for _ in 0..super::MAX_TRIES {
            let r = self.failed(
                self.inner
                    .etcd
                    .range(range_req(key.clone(), Vec::new(), 1))
                    .await,
            )?;
            let compare = match r.kvs.first() {
                None => create_is(key.clone(), 0),
                Some(kv) => {
                    let diff = mine.differences(&kv.value);
                    if diff.is_empty() {
                        return Ok(());
                    }
                    if !replace {
                        return Err(Error::InvalidArgument {
                            field: "settings".into(),
                            message: format!(
                                "this frontend's settings differ from those the frontends on \
                                 its prefix share (recorded in etcd under {:?}): {}. Start it \
                                 with the same settings, or, to change them, restart every \
                                 frontend with the new ones, the first with \
                                 --replace-shared-settings",
                                String::from_utf8_lossy(&key),
                                diff.join("; ")
                            ),
                        });
                    }
                    tracing::warn!(
                        changes = %diff.join("; "),
                        "replacing the settings the frontends on this prefix share"
                    );
                    mod_is(key.clone(), kv.mod_revision)
                }
            };
            let req = super::client::pb::TxnRequest {
                compare: vec![compare],
                success: vec![put_op(key.clone(), mine.encode(), 0)],
                failure: Vec::new(),
            };
            if self.failed(self.inner.etcd.txn(req).await)?.succeeded {
                return Ok(());
            }
            // Another frontend recorded first: compare with theirs.
        }
        Err(super::contention("recording the shared settings"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s() -> SharedSettings {
        SharedSettings {
            min_ttl: Duration::from_secs(2),
            max_ttl: Duration::from_secs(3600),
            history_per_job: 100,
            max_keys_per_job: 10_000,
            policy: true,
        }
    }

    #[test]
    fn the_same_settings_agree_and_each_difference_is_named() {
        assert!(s().differences(&s().encode()).is_empty());
        let other = SharedSettings {
            max_ttl: Duration::from_secs(30),
            policy: false,
            ..s()
        };
        let d = s().differences(&other.encode());
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(
            d[0].starts_with("--max-ttl: 3600000ms here, 30000ms"),
            "{d:?}"
        );
        assert!(d[1].starts_with("--policy: given here, not given"), "{d:?}");
        assert_eq!(s().differences(b"something else").len(), 1);
    }
}
