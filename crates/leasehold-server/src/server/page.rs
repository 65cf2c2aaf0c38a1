//! Page tokens of `ListLeases` and `ListKeys`.
//!
//! A page token carries the point a listing resumes after (the last job or
//! key of the page) in a form the server checks before it uses it, so a
//! token it did not issue for that listing (garbled, truncated, made up,
//! or from another listing) is refused with INVALID_ARGUMENT naming
//! `page_token`, instead of silently listing from somewhere else:
//!
//! ```text
//! token    = base64url, without padding, of: version | resume | check
//! version  1 byte: 1
//! resume   the last job name (ListLeases) or key (ListKeys) of the page
//! check    4 bytes, big-endian: CRC-32 of a fixed label, the version,
//!          the listing (which list; the prefix; ListKeys' job) and resume
//! ```
//!
//! The check covers the listing, so a token is good only with the prefix
//! (and, for `ListKeys`, the job) of the request that got it; `page_size`
//! may change from page to page. It needs no key, so every frontend of an
//! etcd cluster accepts the tokens of every other, and tokens outlive
//! restarts. It is a check, not a signature: a token made up on purpose
//! can pass it, and gains its maker nothing, since it only chooses where
//! that maker's own listing resumes.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

use crate::error::{Error, Result};

/// The version of the token format.
const VERSION: u8 = 1;

/// Which listing a token belongs to: what its check covers.
enum Listing<'a> {
    Leases { prefix: &'a str },
    Keys { job: &'a str, prefix: &'a [u8] },
    History { job: &'a str },
}

impl Listing<'_> {
    fn check(&self, version: u8, resume: &[u8]) -> u32 {
        let mut h = crc32fast::Hasher::new();
        h.update(b"leasehold page token\0");
        h.update(&[version]);
        let mut part = |bytes: &[u8]| {
            h.update(&(bytes.len() as u64).to_be_bytes());
            h.update(bytes);
        };
        match self {
            Listing::Leases { prefix } => {
                part(b"ListLeases");
                part(prefix.as_bytes());
            }
            Listing::Keys { job, prefix } => {
                part(b"ListKeys");
                part(job.as_bytes());
                part(prefix);
            }
            Listing::History { job } => {
                part(b"GetHistory");
                part(job.as_bytes());
            }
        }
        part(resume);
        h.finalize()
    }

    fn token(&self, resume: &[u8]) -> String {
        let mut raw = Vec::with_capacity(resume.len() + 5);
        raw.push(VERSION);
        raw.extend_from_slice(resume);
        raw.extend_from_slice(&self.check(VERSION, resume).to_be_bytes());
        URL_SAFE_NO_PAD.encode(raw)
    }

    /// The resume point of `token`; `None` for the empty token (the first
    /// page).
    fn resume(&self, token: &[u8]) -> Result<Option<Vec<u8>>> {
        if token.is_empty() {
            return Ok(None);
        }
        let refuse = |why: &str| {
            Error::invalid(
                "page_token",
                format!(
                    "was not issued by this server for this listing ({why}): pass the \
                     next_page_token of the previous page, with the same prefix and job, or \
                     leave page_token empty for the first page"
                ),
            )
        };
        let raw = URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|_| refuse("not base64url"))?;
        let [version, rest @ ..] = raw.as_slice() else {
            return Err(refuse("empty"));
        };
        if *version != VERSION {
            return Err(refuse(&format!("unknown version {version}")));
        }
        let Some(split) = rest.len().checked_sub(4) else {
            return Err(refuse("too short"));
        };
        let (resume, check) = rest.split_at(split);
        if check != self.check(*version, resume).to_be_bytes() {
            return Err(refuse("its check does not match"));
        }
        Ok(Some(resume.to_vec()))
    }
}

/// The token of a `ListLeases` page that ended with `last_job`.
pub fn leases_token(prefix: &str, last_job: &str) -> String {
    Listing::Leases { prefix }.token(last_job.as_bytes())
}

/// The job a `ListLeases` page resumes after, from the request's token;
/// `None` for the first page.
pub fn leases_after(prefix: &str, token: &str) -> Result<Option<String>> {
    let resume = Listing::Leases { prefix }.resume(token.as_bytes())?;
    resume
        .map(|r| String::from_utf8(r).map_err(|_| Error::invalid("page_token", "is corrupt")))
        .transpose()
}

/// The token of a `ListKeys` page of `job` that ended with `last_key`.
pub fn keys_token(job: &str, prefix: &[u8], last_key: &[u8]) -> Vec<u8> {
    Listing::Keys { job, prefix }.token(last_key).into_bytes()
}

/// The key a `ListKeys` page resumes after, from the request's token;
/// `None` for the first page.
pub fn keys_after(job: &str, prefix: &[u8], token: &[u8]) -> Result<Option<Vec<u8>>> {
    Listing::Keys { job, prefix }.resume(token)
}

/// The token of a `GetHistory` page of `job` whose oldest tenure was
/// `last_token`'s.
pub fn history_token(job: &str, last_token: u64) -> String {
    Listing::History { job }.token(&last_token.to_be_bytes())
}

/// The token a `GetHistory` page resumes below, from the request's page
/// token; `None` for the first page.
pub fn history_before(job: &str, token: &str) -> Result<Option<u64>> {
    let resume = Listing::History { job }.resume(token.as_bytes())?;
    resume
        .map(|r| {
            <[u8; 8]>::try_from(r.as_slice())
                .map(u64::from_be_bytes)
                .map_err(|_| Error::invalid("page_token", "is corrupt"))
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_are_bound_to_their_listing() {
        let t = leases_token("fleet/", "fleet/099");
        assert_eq!(
            leases_after("fleet/", &t).unwrap().as_deref(),
            Some("fleet/099")
        );
        assert_eq!(leases_after("fleet/", "").unwrap(), None);
        assert!(leases_after("fleet", &t).is_err());
        assert!(t
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));

        let k = keys_token("j", b"cfg/", b"cfg/\xff\x00");
        assert_eq!(
            keys_after("j", b"cfg/", &k).unwrap().as_deref(),
            Some(&b"cfg/\xff\x00"[..])
        );
        assert!(keys_after("j2", b"cfg/", &k).is_err());
        assert!(keys_after("j", b"", &k).is_err());
        // The two lists do not take each other's tokens, even for the same
        // resume point.
        let lk = keys_token("", b"", b"a");
        let ll = leases_token("", "a");
        assert_ne!(lk, ll.as_bytes());
        assert!(leases_after("", std::str::from_utf8(&lk).unwrap()).is_err());
        assert!(keys_after("", b"", ll.as_bytes()).is_err());
    }

    #[test]
    fn anything_else_is_refused_naming_page_token() {
        let t = leases_token("", "job");
        for bad in [
            "job".to_owned(),
            "x".to_owned(),
            "====".to_owned(),
            t[..t.len() - 1].to_owned(),
            format!("{t}A"),
            URL_SAFE_NO_PAD.encode([2, b'j', 0, 0, 0, 0]),
            URL_SAFE_NO_PAD.encode([1, 0, 0]),
        ] {
            let e = leases_after("", &bad).unwrap_err();
            assert!(
                matches!(&e, Error::InvalidArgument { field, .. } if field == "page_token"),
                "{bad:?}: {e}"
            );
        }
    }
}
