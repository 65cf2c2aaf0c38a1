//! The write-ahead log in front of sled: the durable half of a group commit.
//!
//! # Why leasehold keeps its own log
//!
//! A durable write used to wait for the device twice: sled's `flush` ends
//! in a `sync_file_range` of its log, and that does not reach the drive's
//! cache, so an `fdatasync` had to follow. This log makes a group commit one
//! `pwrite` plus one `fdatasync` of a file that never changes size, on the
//! flusher thread, with no hand-off to another thread. sled becomes the
//! checkpoint: records are applied to it after they are durable here, and it
//! is flushed only when the log fills up, at a clean shutdown, and at start-up
//! after the log is replayed.
//!
//! # Format
//!
//! One file of fixed size, filled with zeros when it is created, so that
//! writes never allocate blocks and an `fdatasync` never has metadata to
//! write. It starts with a header (magic, generation, CRC) and then holds
//! records from byte [`HEADER`] on:
//!
//! ```text
//! len u32 | crc u32 | kind u8 | key_len u32 | key | value
//! ```
//!
//! `len` counts the bytes after the CRC. The CRC covers the file's
//! generation, `len` and the body, so a record left over from an earlier
//! generation (the file is reused after every checkpoint) never reads as
//! valid. Replay stops at the first record that does not check out: a crash
//! in the middle of a write loses a suffix, never a record in the middle.
//!
//! **The generation goes up at every reset, including the one at every
//! start-up**, so records written after a crash can never be mistaken for
//! continuations of records written before it.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Where records start: the header keeps a block to itself.
pub const HEADER: u64 = 4096;
const MAGIC: &[u8; 8] = b"LHWAL\x00\x00\x01";
/// Bytes before a record's body: `len` and `crc`.
const RECORD_HEAD: usize = 8;

/// What a record stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A lease record, under the job's name.
    Lease = 1,
    /// A value record, under its store key.
    Value = 2,
}

/// One logged put.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Which tree it belongs to.
    pub kind: Kind,
    /// The key in that tree.
    pub key: Vec<u8>,
    /// The encoded record.
    pub value: Vec<u8>,
}

/// The log file. Single writer: the store calls it from the flusher thread.
pub struct Wal {
    file: File,
    path: PathBuf,
    size: u64,
    generation: u64,
    /// Where the next record goes.
    end: u64,
    buf: Vec<u8>,
}

impl Wal {
    /// Opens the log at `path`, creating it with `size` bytes if it does not
    /// exist, and returns it with the records of its current generation, in
    /// the order they were written. Call [`Wal::reset`] once the records
    /// are safely elsewhere, before appending.
    pub fn open(path: &Path, size: u64) -> io::Result<(Wal, Vec<Record>)> {
        let existing = std::fs::metadata(path).ok().map(|m| m.len());
        let size = match existing {
            Some(len) if len >= HEADER * 2 => len,
            _ => {
                create_zeroed(path, size.max(HEADER * 2))?;
                size.max(HEADER * 2)
            }
        };
        let file = File::options().read(true).write(true).open(path)?;
        let mut wal = Wal {
            file,
            path: path.to_owned(),
            size,
            generation: 0,
            end: HEADER,
            buf: Vec::new(),
        };
        let mut bytes = vec![0u8; size as usize];
        wal.file.read_exact_at(&mut bytes, 0)?;
        let records = match decode_header(&bytes) {
            Some(generation) => {
                wal.generation = generation;
                let (records, end) = scan(&bytes, generation);
                wal.end = end;
                records
            }
            None if bytes.iter().all(|b| *b == 0) => Vec::new(),
            None => {
                // A header torn by a crash during a reset: the reset came
                // right after a checkpoint, so no record here is needed, but
                // the generation is unknown. Zero the file so that no old
                // record can ever read as valid again.
                tracing::warn!(path = %path.display(), "write-ahead log header unreadable; clearing the log");
                wal.file.write_all_at(&vec![0u8; size as usize], 0)?;
                wal.file.sync_data()?;
                Vec::new()
            }
        };
        Ok((wal, records))
    }

    /// Starts a new, empty generation, durably. Every record in the file
    /// is void afterwards; call it only when they are all safe elsewhere.
    pub fn reset(&mut self) -> io::Result<()> {
        self.generation += 1;
        let mut h = Vec::with_capacity(20);
        h.extend_from_slice(MAGIC);
        h.extend_from_slice(&self.generation.to_le_bytes());
        h.extend_from_slice(&crc(&h).to_le_bytes());
        self.file.write_all_at(&h, 0)?;
        self.file.sync_data()?;
        self.end = HEADER;
        Ok(())
    }

    /// Writes `records` after the last one and makes them durable: one
    /// `pwrite`, one `fdatasync`. Returns `false`, writing nothing, when
    /// they do not fit in the space left.
    pub fn append<'a>(
        &mut self,
        records: impl IntoIterator<Item = &'a Record>,
    ) -> io::Result<bool> {
        self.buf.clear();
        for r in records {
            encode(&mut self.buf, self.generation, r);
        }
        if self.end + self.buf.len() as u64 > self.size {
            return Ok(false);
        }
        if self.buf.is_empty() {
            return Ok(true);
        }
        self.file.write_all_at(&self.buf, self.end)?;
        self.file.sync_data()?;
        self.end += self.buf.len() as u64;
        Ok(true)
    }

    /// Bytes of records in the current generation.
    pub fn used(&self) -> u64 {
        self.end - HEADER
    }

    /// Bytes available for records in an empty generation.
    pub fn capacity(&self) -> u64 {
        self.size - HEADER
    }

    /// The file's path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn crc(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

fn decode_header(bytes: &[u8]) -> Option<u64> {
    let h = bytes.get(..20)?;
    if &h[..8] != MAGIC || crc(&h[..16]).to_le_bytes() != h[16..20] {
        return None;
    }
    Some(u64::from_le_bytes(h[8..16].try_into().ok()?))
}

fn encode(buf: &mut Vec<u8>, generation: u64, r: &Record) {
    let body_len = 1 + 4 + r.key.len() + r.value.len();
    let start = buf.len();
    buf.extend_from_slice(&(body_len as u32).to_le_bytes());
    buf.extend_from_slice(&[0; 4]);
    buf.push(r.kind as u8);
    buf.extend_from_slice(&(r.key.len() as u32).to_le_bytes());
    buf.extend_from_slice(&r.key);
    buf.extend_from_slice(&r.value);
    let sum = record_crc(
        generation,
        &buf[start..start + 4],
        &buf[start + RECORD_HEAD..],
    );
    buf[start + 4..start + 8].copy_from_slice(&sum.to_le_bytes());
}

fn record_crc(generation: u64, len: &[u8], body: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&generation.to_le_bytes());
    h.update(len);
    h.update(body);
    h.finalize()
}

/// The valid records of `generation` from [`HEADER`] on, and where they end.
fn scan(bytes: &[u8], generation: u64) -> (Vec<Record>, u64) {
    let mut out = Vec::new();
    let mut at = HEADER as usize;
    while let Some(head) = bytes.get(at..at + RECORD_HEAD) {
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
        let sum = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
        let Some(body) = bytes.get(at + RECORD_HEAD..at + RECORD_HEAD + len) else {
            break;
        };
        if len < 5 || record_crc(generation, &head[..4], body) != sum {
            break;
        }
        let kind = match body[0] {
            1 => Kind::Lease,
            2 => Kind::Value,
            _ => break,
        };
        let key_len = u32::from_le_bytes(body[1..5].try_into().expect("4 bytes")) as usize;
        let Some(key) = body.get(5..5 + key_len) else {
            break;
        };
        out.push(Record {
            kind,
            key: key.to_vec(),
            value: body[5 + key_len..].to_vec(),
        });
        at += RECORD_HEAD + len;
    }
    (out, at as u64)
}

/// Creates `path` as `size` zero bytes, durably (file and directory entry).
fn create_zeroed(path: &Path, size: u64) -> io::Result<()> {
    let tmp = path.with_extension("new");
    let f = File::create(&tmp)?;
    let chunk = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < size {
        let n = chunk.len().min((size - at) as usize);
        f.write_all_at(&chunk[..n], at)?;
        at += n as u64;
    }
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(i: u32) -> Record {
        Record {
            kind: if i % 2 == 0 { Kind::Lease } else { Kind::Value },
            key: format!("key-{i}").into_bytes(),
            value: vec![i as u8; (i % 7) as usize * 10],
        }
    }

    #[test]
    fn records_come_back_in_order_until_a_reset() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("wal");
        let (mut w, got) = Wal::open(&p, 64 * 1024).unwrap();
        assert!(got.is_empty());
        w.reset().unwrap();
        let all: Vec<Record> = (0..50).map(rec).collect();
        assert!(w.append(&all[..20]).unwrap());
        assert!(w.append(&all[20..]).unwrap());
        drop(w);
        let (mut w, got) = Wal::open(&p, 1).unwrap();
        assert_eq!(got, all);
        assert_eq!(
            w.capacity(),
            64 * 1024 - HEADER,
            "an existing log keeps its size"
        );
        w.reset().unwrap();
        assert!(w.append(&all[..3]).unwrap());
        drop(w);
        // Records of the old generation that lie beyond the new ones are
        // not taken for new ones.
        let (_, got) = Wal::open(&p, 1).unwrap();
        assert_eq!(got, all[..3]);
    }

    #[test]
    fn a_torn_record_ends_the_replay_and_a_full_log_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("wal");
        let (mut w, _) = Wal::open(&p, 3 * HEADER).unwrap();
        w.reset().unwrap();
        let all: Vec<Record> = (0..10).map(rec).collect();
        assert!(w.append(&all).unwrap());
        let used = w.used();
        let big = Record {
            kind: Kind::Value,
            key: b"big".to_vec(),
            value: vec![7; (w.capacity() - used) as usize],
        };
        assert!(!w.append([&big]).unwrap(), "does not fit");
        assert_eq!(w.used(), used, "nothing was written");
        drop(w);
        // Flip a byte inside the fifth record.
        let f = File::options().write(true).open(&p).unwrap();
        let mut at = HEADER as usize;
        let mut buf = Vec::new();
        for r in &all[..4] {
            buf.clear();
            encode(&mut buf, 1, r);
            at += buf.len();
        }
        f.write_all_at(&[0xff], at as u64 + 10).unwrap();
        let (_, got) = Wal::open(&p, 1).unwrap();
        assert_eq!(got, all[..4]);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

        /// Whatever a crash does to the bytes after the header (a byte
        /// flipped anywhere, a tail never written), replay returns a prefix
        /// of what was appended, in order, and never panics.
        #[test]
        fn damage_anywhere_leaves_a_prefix(
            sizes in proptest::collection::vec(0usize..300, 1..40),
            flip in proptest::prelude::any::<proptest::sample::Index>(),
            cut in proptest::prelude::any::<proptest::sample::Index>(),
            byte in 1u8..=255,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("wal");
            let (mut w, _) = Wal::open(&p, 64 * 1024).unwrap();
            w.reset().unwrap();
            let all: Vec<Record> = sizes
                .iter()
                .enumerate()
                .map(|(i, n)| Record {
                    kind: if i % 3 == 0 { Kind::Lease } else { Kind::Value },
                    key: format!("k{i}").into_bytes(),
                    value: vec![i as u8; *n],
                })
                .collect();
            for chunk in all.chunks(7) {
                proptest::prop_assert!(w.append(chunk).unwrap());
            }
            let end = w.end;
            drop(w);
            let f = File::options().read(true).write(true).open(&p).unwrap();
            // A flipped byte among the records...
            let at = HEADER + flip.index((end - HEADER) as usize) as u64;
            let mut old = [0u8];
            f.read_exact_at(&mut old, at).unwrap();
            f.write_all_at(&[old[0] ^ byte], at).unwrap();
            // ...and zeros from a point on, as if the rest never reached
            // the disk.
            let from = HEADER + cut.index((end - HEADER) as usize + 1) as u64;
            f.write_all_at(&vec![0u8; (end - from) as usize], from).unwrap();
            let (_, got) = Wal::open(&p, 1).unwrap();
            proptest::prop_assert!(got.len() <= all.len());
            proptest::prop_assert_eq!(&got[..], &all[..got.len()]);
        }
    }

    #[test]
    fn a_torn_header_clears_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("wal");
        let (mut w, _) = Wal::open(&p, 16 * 1024).unwrap();
        w.reset().unwrap();
        assert!(w.append(&[rec(1), rec(2)]).unwrap());
        drop(w);
        File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .write_all_at(&[0xff], 9)
            .unwrap();
        let (mut w, got) = Wal::open(&p, 1).unwrap();
        assert!(got.is_empty());
        // Whatever generation comes next, the old records stay void.
        w.reset().unwrap();
        drop(w);
        let (_, got) = Wal::open(&p, 1).unwrap();
        assert!(got.is_empty());
    }
}
