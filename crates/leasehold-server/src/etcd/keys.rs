//! Where the etcd backend keeps what, and how records are encoded.
//!
//! Every key starts with the configured prefix (default `leasehold/`).
//! Under it, per job:
//!
//! | key | value | etcd lease | deleted |
//! |---|---|---|---|
//! | `j/{job}\0h` | the holder record: token, TTL, holder | the grant's own etcd lease | by the lease's expiry, or by `Release`'s transaction |
//! | `j/{job}\0t` | the token record: newest token, released or not, last holder | none | never: the token counter is never deleted or reset |
//! | `v/{job}\0{key}` | a fenced value: token, version, value or tombstone | none | never (a delete writes a tombstone) |
//! | `w/{job}\0{id}` | a waiting `Acquire`'s place in line (its holder) | the frontend's session lease | when the waiter is granted or gives up, or its frontend dies |
//!
//! A job name never contains a control character, so `\0` ends it: the
//! range `[j/{job}\0, j/{job}\x01)` holds exactly the job's own two keys,
//! and no other job's name can start with `{job}\0`. Job keys sort by job
//! name (UTF-8 byte order is character order), so listing jobs is one
//! range read.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::lease::Token;
use crate::store::ValueRecord;

/// The key layout under one prefix.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: Vec<u8>,
}

impl Keys {
    /// The layout under `prefix`.
    pub fn new(prefix: &str) -> Keys {
        Keys {
            prefix: prefix.as_bytes().to_vec(),
        }
    }

    fn key(&self, space: &[u8], job: &str, rest: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.prefix.len() + 2 + job.len() + 1 + rest.len());
        k.extend_from_slice(&self.prefix);
        k.extend_from_slice(space);
        k.extend_from_slice(job.as_bytes());
        k.push(0);
        k.extend_from_slice(rest);
        k
    }

    /// The job's holder key.
    pub fn holder(&self, job: &str) -> Vec<u8> {
        self.key(b"j/", job, b"h")
    }

    /// The job's token key.
    pub fn token(&self, job: &str) -> Vec<u8> {
        self.key(b"j/", job, b"t")
    }

    /// The range of the job's holder and token keys.
    pub fn job_range(&self, job: &str) -> (Vec<u8>, Vec<u8>) {
        let start = self.key(b"j/", job, b"");
        let mut end = start.clone();
        *end.last_mut().expect("non-empty") = 1;
        (start, end)
    }

    /// The range of every job key whose job starts with `prefix`, from
    /// just after job `after` when given.
    pub fn jobs_range(&self, prefix: &str, after: Option<&str>) -> (Vec<u8>, Vec<u8>) {
        let mut p = self.prefix.clone();
        p.extend_from_slice(b"j/");
        p.extend_from_slice(prefix.as_bytes());
        let end = prefix_end(&p);
        let start = match after {
            // Past every key of `after` ("{after}\0h", "{after}\0t").
            Some(a) => {
                let mut s = self.key(b"j/", a, b"");
                *s.last_mut().expect("non-empty") = 1;
                s.max(p)
            }
            None => p,
        };
        (start, end)
    }

    /// Every job key of every job.
    pub fn all_jobs(&self) -> (Vec<u8>, Vec<u8>) {
        self.jobs_range("", None)
    }

    /// Splits a job key into (job, kind byte `h` or `t`).
    pub fn parse_job_key<'a>(&self, key: &'a [u8]) -> Option<(&'a str, u8)> {
        let rest = key
            .strip_prefix(self.prefix.as_slice())?
            .strip_prefix(b"j/")?;
        let nul = rest.iter().position(|b| *b == 0)?;
        let job = std::str::from_utf8(&rest[..nul]).ok()?;
        match &rest[nul + 1..] {
            [kind] => Some((job, *kind)),
            _ => None,
        }
    }

    /// The key of a fenced value.
    pub fn value(&self, job: &str, key: &[u8]) -> Vec<u8> {
        self.key(b"v/", job, key)
    }

    /// The range of the job's values whose key starts with `prefix`, from
    /// just after `after` when given.
    pub fn values_range(
        &self,
        job: &str,
        prefix: &[u8],
        after: Option<&[u8]>,
    ) -> (Vec<u8>, Vec<u8>) {
        let p = self.value(job, prefix);
        let end = prefix_end(&p);
        let start = match after {
            Some(a) => {
                let mut s = self.value(job, a);
                s.push(0); // the smallest key after `a`
                s.max(p)
            }
            None => p,
        };
        (start, end)
    }

    /// The user key of a value key of `job`.
    pub fn value_user_key<'a>(&self, job: &str, key: &'a [u8]) -> Option<&'a [u8]> {
        let head = self.value(job, b"");
        key.strip_prefix(head.as_slice())
    }

    /// A waiter's key.
    pub fn waiter(&self, job: &str, id: &str) -> Vec<u8> {
        self.key(b"w/", job, id.as_bytes())
    }

    /// The range of the job's waiters.
    pub fn waiters_range(&self, job: &str) -> (Vec<u8>, Vec<u8>) {
        let start = self.key(b"w/", job, b"");
        let end = prefix_end(&start);
        (start, end)
    }
}

/// The smallest key after every key that starts with `p` (etcd's prefix
/// range end); `\0` (all keys) when `p` is all `0xff`.
pub fn prefix_end(p: &[u8]) -> Vec<u8> {
    let mut end = p.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The holder key's value: who holds the live grant, with which token and
/// TTL. Exactly these bytes are compared by `CheckedWrite`'s and
/// `Release`'s transactions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderRec {
    /// The grant's token.
    pub token: Token,
    /// The grant's TTL, whole seconds.
    pub ttl: Duration,
    /// The holder.
    pub holder: String,
}

impl HolderRec {
    /// `{token} {ttl seconds} {holder}`.
    pub fn encode(&self) -> Vec<u8> {
        format!("{} {} {}", self.token.0, self.ttl.as_secs(), self.holder).into_bytes()
    }

    /// The inverse of [`HolderRec::encode`].
    pub fn decode(b: &[u8]) -> Result<HolderRec> {
        let s = std::str::from_utf8(b).map_err(|_| corrupt("holder record", b))?;
        let mut it = s.splitn(3, ' ');
        let (Some(t), Some(ttl), Some(holder)) = (it.next(), it.next(), it.next()) else {
            return Err(corrupt("holder record", b));
        };
        Ok(HolderRec {
            token: Token(t.parse().map_err(|_| corrupt("holder record", b))?),
            ttl: Duration::from_secs(ttl.parse().map_err(|_| corrupt("holder record", b))?),
            holder: holder.to_owned(),
        })
    }
}

/// The token key's value: the job's newest token, whether its holder
/// released it, and who that holder was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRec {
    /// The newest token issued. Only ever goes up.
    pub token: Token,
    /// The grant of `token` was released (rather than still held, or
    /// expired).
    pub released: bool,
    /// The holder of `token`.
    pub holder: String,
}

impl TokenRec {
    /// `{token} {g|r} {holder}`.
    pub fn encode(&self) -> Vec<u8> {
        let state = if self.released { 'r' } else { 'g' };
        format!("{} {state} {}", self.token.0, self.holder).into_bytes()
    }

    /// The inverse of [`TokenRec::encode`].
    pub fn decode(b: &[u8]) -> Result<TokenRec> {
        let s = std::str::from_utf8(b).map_err(|_| corrupt("token record", b))?;
        let mut it = s.splitn(3, ' ');
        let (Some(t), Some(state), Some(holder)) = (it.next(), it.next(), it.next()) else {
            return Err(corrupt("token record", b));
        };
        Ok(TokenRec {
            token: Token(t.parse().map_err(|_| corrupt("token record", b))?),
            released: match state {
                "r" => true,
                "g" => false,
                _ => return Err(corrupt("token record", b)),
            },
            holder: holder.to_owned(),
        })
    }
}

/// A fenced value: 8 bytes of token (big-endian, first, so that etcd can
/// compare the stored token byte-wise: see [`token_below`]), 8 bytes of
/// version, one byte 1 for a value or 0 for a tombstone, then the value.
pub fn encode_value(rec: &ValueRecord) -> Vec<u8> {
    let v = rec.value.as_deref().unwrap_or_default();
    let mut b = Vec::with_capacity(17 + v.len());
    b.extend_from_slice(&rec.token.0.to_be_bytes());
    b.extend_from_slice(&rec.version.to_be_bytes());
    b.push(rec.value.is_some() as u8);
    b.extend_from_slice(v);
    b
}

/// The inverse of [`encode_value`].
pub fn decode_value(b: &[u8]) -> Result<ValueRecord> {
    if b.len() < 17 || b[16] > 1 {
        return Err(corrupt("value record", b));
    }
    let token = u64::from_be_bytes(b[..8].try_into().expect("8 bytes"));
    let version = u64::from_be_bytes(b[8..16].try_into().expect("8 bytes"));
    Ok(ValueRecord {
        token: Token(token),
        version,
        value: (b[16] == 1).then(|| b[17..].to_vec()),
    })
}

/// The bytes that every encoded value whose token is at most `token`
/// sorts below: etcd's `VALUE < token_below(t)` compare holds exactly when
/// the stored token is `<= t`.
pub fn token_below(token: Token) -> Vec<u8> {
    match token.0.checked_add(1) {
        Some(n) => n.to_be_bytes().to_vec(),
        // Every 8-byte token prefix sorts below 9 bytes of 0xff.
        None => vec![0xff; 9],
    }
}

fn corrupt(what: &str, b: &[u8]) -> Error {
    Error::Storage(format!(
        "etcd holds a {what} leasehold cannot read: {:?}",
        String::from_utf8_lossy(b)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_keys_are_unambiguous_and_ranges_hold_exactly_one_job() {
        let k = Keys::new("lh/");
        assert_eq!(k.holder("a/b"), b"lh/j/a/b\0h");
        let (s, e) = k.job_range("a");
        for own in [k.holder("a"), k.token("a")] {
            assert!(s <= own && own < e);
        }
        for other in [k.holder("a/b"), k.token("ab"), k.holder("a b")] {
            assert!(!(s <= other && other < e), "{other:?}");
        }
        assert_eq!(k.parse_job_key(&k.token("x y")), Some(("x y", b't')));
        assert_eq!(k.parse_job_key(b"lh/v/x\0k"), None);
    }

    #[test]
    fn job_listing_pages_after_a_job_and_stays_in_the_prefix() {
        let k = Keys::new("lh/");
        let (s, e) = k.jobs_range("fleet/", Some("fleet/009"));
        assert!(k.token("fleet/009") < s);
        assert!(s <= k.holder("fleet/010") && k.token("fleet/010") < e);
        assert!(s <= k.holder("fleet/0090"));
        assert!(k.holder("fleet0") >= e);
        let (s, _) = k.jobs_range("b", Some("a"));
        assert_eq!(s, b"lh/j/b", "after a job before the prefix: the prefix");
    }

    #[test]
    fn value_ranges_page_and_stay_in_the_job() {
        let k = Keys::new("lh/");
        let (s, e) = k.values_range("a", b"cfg/", None);
        assert!(s <= k.value("a", b"cfg/1") && k.value("a", b"cfg/1") < e);
        assert!(k.value("ab", b"cfg/1") >= e);
        let (s, _) = k.values_range("a", b"", Some(b"k"));
        assert!(k.value("a", b"k") < s && s <= k.value("a", b"k\0"));
        assert_eq!(
            k.value_user_key("a", &k.value("a", b"k\0x")),
            Some(&b"k\0x"[..])
        );
    }

    #[test]
    fn prefix_end_increments_the_last_byte_below_ff() {
        assert_eq!(prefix_end(b"ab"), b"ac");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), b"\0");
    }

    #[test]
    fn records_round_trip() {
        let h = HolderRec {
            token: Token(7),
            ttl: Duration::from_secs(5),
            holder: "w 1@x".into(),
        };
        assert_eq!(HolderRec::decode(&h.encode()).unwrap(), h);
        let t = TokenRec {
            token: Token(9),
            released: true,
            holder: "a b".into(),
        };
        assert_eq!(TokenRec::decode(&t.encode()).unwrap(), t);
        assert!(TokenRec::decode(b"9 x h").is_err());
        for value in [Some(b"v".to_vec()), None, Some(Vec::new())] {
            let r = ValueRecord {
                token: Token(3),
                version: 4,
                value,
            };
            assert_eq!(decode_value(&encode_value(&r)).unwrap(), r);
        }
    }

    #[test]
    fn token_below_orders_like_the_stored_token() {
        let enc = |t: u64| {
            encode_value(&ValueRecord {
                token: Token(t),
                version: 1,
                value: Some(vec![0xff; 4]),
            })
        };
        let limit = token_below(Token(5));
        assert!(enc(5) < limit && enc(4) < limit && enc(0) < limit);
        assert!(enc(6) >= limit && enc(256) >= limit);
        assert!(enc(u64::MAX) < token_below(Token(u64::MAX)));
    }
}
