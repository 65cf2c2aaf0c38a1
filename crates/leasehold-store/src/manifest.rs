//! The manifest: what a healthy start of the embedded store must find.
//!
//! A small text file in the data dir, `leasehold.manifest`, rewritten
//! atomically (a new file, `fdatasync`, `rename`, `fsync` of the directory)
//! at every checkpoint: start-up, when the log is half full or many keys
//! wait for sled, and a clean
//! stop. It names the data dir's identity, the checkpoint's generation,
//! how many records sled holds and their digest, the highest token ever
//! issued on this data dir, and the token floor. sled keeps the same
//! figures in a record written in the same transaction as the checkpoint's
//! data ([`Checkpoint`]), and the log's header names the generation, so
//! each of the three files vouches for the others:
//!
//! - sled's data must hash to the digest sled's own record names (a lost
//!   blob, a torn page, a record from another state);
//! - sled's generation must be the manifest's, or one above it (a crash
//!   after sled's part of a checkpoint and before the manifest's);
//! - the log's generation must be sled's, or one below it while the
//!   manifest still names the older one (a crash before the log's reset).
//!
//! The text form is for operators (`leasehold check` prints it); its last
//! line is a CRC of the lines before it, so a damaged manifest is refused,
//! never half read.

use std::fs::File;
use std::io::{self, Write as _};
use std::path::Path;

use crate::wal::StoreId;

/// The manifest's file in the data dir.
pub const FILE: &str = "leasehold.manifest";
const FIRST_LINE: &str = "leasehold-manifest 1";

/// What one checkpoint made durable: kept in sled (with the data) and in
/// the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Checkpoint {
    /// The data dir's identity.
    pub store_id: StoreId,
    /// The checkpoint's generation: up by one at every checkpoint.
    pub generation: u64,
    /// Lease records in sled.
    pub leases: u64,
    /// Value records in sled (tombstones included).
    pub values: u64,
    /// The order-independent digest of every record in sled (see
    /// [`record_hash`]).
    pub digest: u64,
    /// The highest token ever issued on this data dir, as far as this
    /// checkpoint holds.
    pub max_token: u64,
    /// Every job's next grant gets a token above this: set by `recover`
    /// and `restore`, never lowered.
    pub floor: u64,
    /// A job created from now on (one sled holds no record of) gets its
    /// first token above this: raised by each deletion of a job to the
    /// deleted job's newest token, never lowered. `max_token` is at least
    /// this.
    pub new_job_floor: u64,
    /// When the checkpoint was made, in milliseconds since the Unix epoch.
    /// For people only: no rule reads it.
    pub unix_ms: u64,
    /// How the data dir was last recovered or restored, if it was: a line
    /// for the operator (and the WARN at every start).
    pub recovered: Option<String>,
}

/// The digest contribution of one record: two CRC-32s with different
/// seeds over (tree, key, value). Digests add these up (wrapping), so a
/// record's replacement is a subtraction and an addition.
pub fn record_hash(tree: u8, key: &[u8], value: &[u8]) -> u64 {
    let mut out = 0u64;
    for seed in [0x4c48_4d31u32, 0x9e37_79b9] {
        let mut h = crc32fast::Hasher::new_with_initial(seed);
        h.update(&[tree]);
        h.update(&(key.len() as u32).to_le_bytes());
        h.update(key);
        h.update(value);
        out = out << 32 | u64::from(h.finalize());
    }
    out
}

impl Checkpoint {
    /// The binary form kept in sled.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(88);
        b.push(2);
        b.extend_from_slice(&self.store_id);
        for n in [
            self.generation,
            self.leases,
            self.values,
            self.digest,
            self.max_token,
            self.floor,
            self.unix_ms,
            self.new_job_floor,
        ] {
            b.extend_from_slice(&n.to_le_bytes());
        }
        if let Some(r) = &self.recovered {
            b.extend_from_slice(r.as_bytes());
        }
        b
    }

    /// Decodes what [`Checkpoint::encode`] wrote, or the first format (1,
    /// without `new_job_floor`).
    pub fn decode(b: &[u8]) -> Option<Checkpoint> {
        let fields = match b.first() {
            Some(1) => 7,
            Some(2) => 8,
            _ => return None,
        };
        if b.len() < 17 + fields * 8 {
            return None;
        }
        let n = |i: usize| {
            let at = 17 + i * 8;
            u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
        };
        let rest = &b[17 + fields * 8..];
        Some(Checkpoint {
            store_id: b[1..17].try_into().ok()?,
            generation: n(0),
            leases: n(1),
            values: n(2),
            digest: n(3),
            max_token: n(4),
            floor: n(5),
            unix_ms: n(6),
            new_job_floor: if fields > 7 { n(7) } else { 0 },
            recovered: if rest.is_empty() {
                None
            } else {
                Some(String::from_utf8(rest.to_vec()).ok()?)
            },
        })
    }

    /// The manifest's text.
    pub fn to_text(&self) -> String {
        let mut t = format!(
            "{FIRST_LINE}\nstore_id {}\ngeneration {}\nleases {}\nvalues {}\ndigest {:016x}\n\
             max_token {}\nfloor {}\ncheckpoint_unix_ms {}\n",
            hex(&self.store_id),
            self.generation,
            self.leases,
            self.values,
            self.digest,
            self.max_token,
            self.floor,
            self.unix_ms,
        );
        if self.new_job_floor > 0 {
            t.push_str(&format!("new_job_floor {}\n", self.new_job_floor));
        }
        if let Some(r) = &self.recovered {
            t.push_str(&format!("recovered {}\n", r.replace('\n', " ")));
        }
        let sum = crc32fast::hash(t.as_bytes());
        t.push_str(&format!("crc32 {sum:08x}\n"));
        t
    }

    /// Parses [`Checkpoint::to_text`]; the error says which line is wrong.
    pub fn from_text(t: &str) -> Result<Checkpoint, String> {
        let Some(t) = t.strip_suffix('\n') else {
            return Err("it does not end with a newline: truncated".to_owned());
        };
        let Some(body_end) = t.rfind('\n').map(|i| i + 1) else {
            return Err("it has no checksum line: truncated".to_owned());
        };
        let (body, last) = t.split_at(body_end);
        let sum = last
            .strip_prefix("crc32 ")
            .filter(|h| h.len() == 8)
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or("its last line is not its checksum: truncated or edited")?;
        if crc32fast::hash(body.as_bytes()) != sum {
            return Err("it fails its checksum: damaged or edited".to_owned());
        }
        let mut lines = body.lines();
        if lines.next() != Some(FIRST_LINE) {
            return Err(format!("its first line is not `{FIRST_LINE}`"));
        }
        let mut c = Checkpoint::default();
        let mut seen = 0;
        for (i, line) in lines.enumerate() {
            let (k, v) = line
                .split_once(' ')
                .ok_or_else(|| format!("line {} has no value", i + 2))?;
            let num = || {
                v.parse::<u64>()
                    .map_err(|_| format!("line {} ({k}) is not a number", i + 2))
            };
            match k {
                "store_id" => {
                    c.store_id = unhex(v).ok_or_else(|| format!("line {} ({k}) is bad", i + 2))?
                }
                "generation" => c.generation = num()?,
                "leases" => c.leases = num()?,
                "values" => c.values = num()?,
                "digest" => {
                    c.digest = u64::from_str_radix(v, 16)
                        .map_err(|_| format!("line {} ({k}) is bad", i + 2))?
                }
                "max_token" => c.max_token = num()?,
                "floor" => c.floor = num()?,
                "new_job_floor" => c.new_job_floor = num()?,
                "checkpoint_unix_ms" => c.unix_ms = num()?,
                "recovered" => c.recovered = Some(v.to_owned()),
                _ => return Err(format!("line {} names an unknown field `{k}`", i + 2)),
            }
            seen += 1;
        }
        if seen < 8 {
            return Err("fields are missing".to_owned());
        }
        Ok(c)
    }
}

/// What the data dir holds in place of a manifest.
pub enum Found {
    /// No manifest file.
    Missing,
    /// A manifest that checks out.
    Ok(Checkpoint),
    /// A manifest that does not; the string says why.
    Damaged(String),
}

/// Reads the manifest in `dir`. Reads only.
pub fn read(dir: &Path) -> io::Result<Found> {
    match std::fs::read(dir.join(FILE)) {
        Ok(b) => Ok(match String::from_utf8(b) {
            Ok(t) => match Checkpoint::from_text(&t) {
                Ok(c) => Found::Ok(c),
                Err(why) => Found::Damaged(why),
            },
            Err(_) => Found::Damaged("it is not text".to_owned()),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Found::Missing),
        Err(e) => Err(e),
    }
}

/// Writes the manifest in `dir` atomically and durably.
pub fn write(dir: &Path, c: &Checkpoint) -> io::Result<()> {
    let tmp = dir.join(format!("{FILE}.new"));
    let mut f = File::create(&tmp)?;
    f.write_all(c.to_text().as_bytes())?;
    f.sync_data()?;
    std::fs::rename(&tmp, dir.join(FILE))?;
    File::open(dir)?.sync_all()
}

/// Lower-case hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<StoreId> {
    if s.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_any_change() {
        let c = Checkpoint {
            store_id: [7; 16],
            generation: 9,
            leases: 3,
            values: 4,
            digest: 0xdead_beef_0102_0304,
            max_token: 41,
            floor: 1 << 32,
            unix_ms: 1_764_560_000_000,
            new_job_floor: 40,
            recovered: Some("restored from backup.lhb".into()),
        };
        assert_eq!(Checkpoint::decode(&c.encode()), Some(c.clone()));
        // The first binary format, without a new-job floor, still reads.
        let mut v1 = c.encode();
        v1[0] = 1;
        v1.drain(17 + 7 * 8..17 + 8 * 8);
        let old = Checkpoint::decode(&v1).unwrap();
        assert_eq!((old.new_job_floor, old.recovered), (0, c.recovered.clone()));
        let t = c.to_text();
        assert_eq!(Checkpoint::from_text(&t).unwrap(), c);
        for i in 0..t.len() {
            let mut b = t.clone().into_bytes();
            b[i] ^= 0x01;
            if let Ok(s) = String::from_utf8(b) {
                assert!(Checkpoint::from_text(&s).is_err(), "byte {i} flipped");
            }
        }
        for cut in [0, 10, t.len() / 2, t.len() - 3] {
            assert!(Checkpoint::from_text(&t[..cut]).is_err(), "cut at {cut}");
        }
    }
}
