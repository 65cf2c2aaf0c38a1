//! The backup file's format: what [`write_backup`] writes and
//! [`read_backup`] reads and verifies.
//!
//! The file is self-checking: a header (the magic `LHBACKUP`, a format
//! version, the data dir's identity, the highest token then, the floor then,
//! the time), the records, and a trailer with their count and digest, then
//! a CRC of the whole file.
//!
//! Its own module, below both of its users: the embedded store writes a
//! backup (`sled`, for `Store::backup`), and the tools read one to restore
//! it (`repair`, which opens the embedded store). Neither needs the other
//! for the format.

use std::io::{self, Read, Write};
use std::path::Path;

use crate::manifest::{record_hash, Checkpoint};
use crate::wal::{Kind, Record, StoreId};
use leasehold_core::error::{Error, Result};

const BACKUP_MAGIC: &[u8; 8] = b"LHBACKUP";
const BACKUP_VERSION: u8 = 1;
const TRAILER: u8 = 0xff;

/// A backup, read and verified.
pub struct Backup {
    /// The data dir it was taken of.
    pub store_id: StoreId,
    /// The highest token issued on it when the backup was taken.
    pub max_token: u64,
    /// Its floor then.
    pub floor: u64,
    /// When, in ms since the Unix epoch.
    pub unix_ms: u64,
    /// Every record.
    pub records: Vec<Record>,
    /// The data dir's signing keys (its `signing-keys.pem`), if it had
    /// them: a backup holds private keys, and is as secret as the data dir.
    pub signing_keys: Option<Vec<u8>>,
}

/// The tree byte of the signing keys' entry: after the records, before the
/// trailer, counted and digested like them.
const KEYS_ENTRY: u8 = 3;

/// Writes a backup of `records` (with the checkpoint `c` they belong to)
/// to `out`, in the self-checking format [`read_backup`] reads.
pub fn write_backup(
    c: &Checkpoint,
    records: impl Iterator<Item = Result<Record>>,
    signing_keys: Option<&[u8]>,
    out: &mut dyn Write,
) -> Result<()> {
    let mut w = Summed::new(out);
    let io = |e: io::Error| Error::storage(format!("backup: {e}"));
    let mut head = BACKUP_MAGIC.to_vec();
    head.push(BACKUP_VERSION);
    head.extend_from_slice(&c.store_id);
    for n in [c.max_token, c.floor, leasehold_core::clock::wall_unix_ms()] {
        head.extend_from_slice(&n.to_le_bytes());
    }
    w.write_all(&head).map_err(io)?;
    let (mut count, mut digest) = (0u64, 0u64);
    let keys = signing_keys.map(|k| {
        Ok(Record {
            kind: Kind::Lease, // not read: the entry's tree byte is KEYS_ENTRY
            key: crate::datadir::KEYS_FILE.as_bytes().to_vec(),
            value: k.to_vec(),
        })
    });
    let entries = records
        .map(|r| r.map(|r| (r.kind as u8, r)))
        .chain(keys.map(|k: Result<Record>| k.map(|k| (KEYS_ENTRY, k))));
    for r in entries {
        let (tree, r) = r?;
        digest = digest.wrapping_add(record_hash(tree, &r.key, &r.value));
        count += 1;
        let mut b = Vec::with_capacity(9 + r.key.len() + r.value.len());
        b.push(tree);
        b.extend_from_slice(&(r.key.len() as u32).to_le_bytes());
        b.extend_from_slice(&(r.value.len() as u32).to_le_bytes());
        b.extend_from_slice(&r.key);
        b.extend_from_slice(&r.value);
        w.write_all(&b).map_err(io)?;
    }
    let mut t = vec![TRAILER];
    t.extend_from_slice(&count.to_le_bytes());
    t.extend_from_slice(&digest.to_le_bytes());
    w.write_all(&t).map_err(io)?;
    let sum = w.sum.clone().finalize();
    w.inner.write_all(&sum.to_le_bytes()).map_err(io)?;
    Ok(())
}

/// Reads and verifies a backup file: a truncated, damaged or foreign file
/// is refused, naming what is wrong.
pub fn read_backup(file: &Path) -> Result<Backup> {
    let bad = |why: &str| Error::storage(format!("backup {}: {why}", file.display()));
    let mut bytes = Vec::new();
    std::fs::File::open(file)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|e| Error::storage(format!("cannot read backup {}: {e}", file.display())))?;
    let head = 8 + 1 + 16 + 24;
    if bytes.len() < head + 17 + 4 || &bytes[..8] != BACKUP_MAGIC {
        return Err(bad("not a leasehold backup, or truncated"));
    }
    if bytes[8] != BACKUP_VERSION {
        return Err(bad(&format!("format version {} is not known", bytes[8])));
    }
    let (body, sum) = bytes.split_at(bytes.len() - 4);
    if crc32fast::hash(body).to_le_bytes() != sum {
        return Err(bad("fails its checksum: truncated or damaged"));
    }
    let n = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
    let mut b = Backup {
        store_id: body[9..25].try_into().expect("16 bytes"),
        max_token: n(25),
        floor: n(33),
        unix_ms: n(41),
        records: Vec::new(),
        signing_keys: None,
    };
    let mut at = head;
    let (mut count, mut digest) = (0u64, 0u64);
    loop {
        let kind = *body
            .get(at)
            .ok_or_else(|| bad("ends without its trailer"))?;
        if kind == TRAILER {
            if body.len() != at + 17 || (n(at + 1), n(at + 9)) != (count, digest) {
                return Err(bad("its trailer does not match its records"));
            }
            return Ok(b);
        }
        let tree = kind;
        let kind = match kind {
            1 | KEYS_ENTRY => Kind::Lease,
            2 => Kind::Value,
            _ => return Err(bad("a record of unknown kind")),
        };
        let len = |a: usize| {
            body.get(a..a + 4)
                .map(|s| u32::from_le_bytes(s.try_into().expect("4 bytes")) as usize)
        };
        let (k, v) = (len(at + 1), len(at + 5));
        let (Some(k), Some(v)) = (k, v) else {
            return Err(bad("a record is cut short"));
        };
        let start = at + 9;
        let (Some(key), Some(value)) = (
            body.get(start..start + k),
            body.get(start + k..start + k + v),
        ) else {
            return Err(bad("a record is cut short"));
        };
        digest = digest.wrapping_add(record_hash(tree, key, value));
        count += 1;
        if tree == KEYS_ENTRY {
            b.signing_keys = Some(value.to_vec());
        } else {
            b.records.push(Record {
                kind,
                key: key.to_vec(),
                value: value.to_vec(),
            });
        }
        at = start + k + v;
    }
}

/// A writer that keeps a CRC of what went through it.
struct Summed<'a, W: Write + ?Sized> {
    inner: &'a mut W,
    sum: crc32fast::Hasher,
}

impl<'a, W: Write + ?Sized> Summed<'a, W> {
    fn new(inner: &'a mut W) -> Self {
        Summed {
            inner,
            sum: crc32fast::Hasher::new(),
        }
    }
}

impl<W: Write + ?Sized> Write for Summed<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.sum.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
