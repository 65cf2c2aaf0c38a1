//! The write-ahead log in front of sled: the durable half of a group commit.
//!
//! # Why leasehold keeps its own log
//!
//! A durable write used to wait for the device twice: sled's `flush` ends
//! in a `sync_file_range` of its log, and that does not reach the drive's
//! cache, so an `fdatasync` had to follow. This log makes a group commit one
//! `pwrite` plus one `fdatasync` of a file that never changes size, on the
//! flusher thread, with no hand-off to another thread. The `pwrite` goes
//! past the page cache (`O_DIRECT`, whole blocks) where the file system
//! allows it. sled becomes the
//! checkpoint: records are applied to it after they are durable here, and it
//! is flushed only when the log fills up, at a clean shutdown, and at start-up
//! after the log is replayed.
//!
//! # Format
//!
//! One file of fixed size, filled with zeros when it is created, so that
//! writes never allocate blocks and an `fdatasync` never has metadata to
//! write. It starts with a header (magic, generation, the data dir's store
//! id, the file's size, CRC) and then holds one *batch* per group commit,
//! each at an offset that is a multiple of [`ALIGN`]:
//!
//! ```text
//! batch:  len u32 | crc u32 | head_crc u32 | payload (len bytes) | head_crc u32 | zeros to ALIGN
//! record: kind u8 | key_len u32 | value_len u32 | key | value
//! ```
//!
//! `crc` covers the generation, `len` and the payload; `head_crc` covers the
//! generation, `len` and `crc`, so a batch's start can be recognised without
//! reading its payload, and is repeated at the end, so that a batch's last
//! sector is never all zeros once written. A batch left over from an
//! earlier generation never reads as valid.
//!
//! # What damage looks like, and what a crash looks like
//!
//! **Everything past the last batch is zero**: the file is created zeroed,
//! and [`Wal::reset`] zeroes what the old generation used before it writes
//! the new header. A crash during a batch's `pwrite` can therefore leave
//! only one kind of trace: the last batch, partly written, where the parts
//! that never reached the disk are still zero (a disk writes whole
//! sectors). That batch was never acknowledged, and replay ends before it.
//! Anything else is damage, and [`Wal::open`] refuses it:
//!
//! - a batch that fails its CRC and has no zeroed sector, or is followed by
//!   a valid batch or by bytes that are not zero;
//! - a header that does not check out, from another data dir, or naming a
//!   size the file no longer has (a truncated log).
//!
//! **The generation goes up at every reset, including the one at every
//! start-up**, and the store checks it against the manifest and sled, so a
//! log from yesterday is told apart from today's.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Where batches start: the header keeps a block to itself.
pub const HEADER: u64 = 4096;
/// Batches start at multiples of this, so that a batch's head never spans
/// two sectors and damage can be searched for cheaply.
pub const ALIGN: u64 = 32;
/// A disk writes whole sectors of at least this size: a sector of a torn
/// batch is either all new or all old (zero).
const SECTOR: u64 = 512;
const MAGIC: &[u8; 8] = b"LHWAL\x00\x00\x02";
/// The first format: records without batches, no store id. Read once at
/// start-up, then the log is rewritten in the current format.
const MAGIC_V1: &[u8; 8] = b"LHWAL\x00\x00\x01";
/// magic, generation, store id, size, CRC.
const HEADER_LEN: usize = 8 + 8 + 16 + 8 + 4;
/// A batch's `len`, `crc` and `head_crc`.
const BATCH_HEAD: usize = 12;
/// The copy of `head_crc` after a batch's payload.
const BATCH_TAIL: usize = 4;
/// A record's `kind`, `key_len` and `value_len`.
const RECORD_HEAD: usize = 9;
/// A batch written past the page cache goes from a multiple of this to a
/// multiple of this, from a buffer aligned to it: what `O_DIRECT` needs on
/// every device (a 512-byte device takes it too).
const BLOCK: u64 = 4096;
/// The most room a direct write's buffer keeps between writes.
const KEEP_BUF: usize = 1 << 20;

/// A data dir's identity: random, made when the data dir is created, kept in
/// the log's header, sled and the manifest.
pub type StoreId = [u8; 16];

/// What a record stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A lease record, under the job's name.
    Lease = 1,
    /// A value record, under its store key.
    Value = 2,
    /// The new-job floor (a token, u64 little-endian; the key is empty),
    /// raised by a job's deletion.
    Floor = 3,
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

/// Why the log cannot be opened.
#[derive(Debug)]
pub enum OpenError {
    /// The file system said no.
    Io(io::Error),
    /// The file is not what a healthy log looks like; the string says how.
    Damaged(String),
}

impl From<io::Error> for OpenError {
    fn from(e: io::Error) -> Self {
        OpenError::Io(e)
    }
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Io(e) => write!(f, "{e}"),
            OpenError::Damaged(why) => write!(f, "{why}"),
        }
    }
}

/// What [`Wal::open`] found.
#[derive(Debug)]
pub struct Replay {
    /// The records of the current generation, in the order written.
    pub records: Vec<Record>,
    /// The current generation.
    pub generation: u64,
    /// The data dir's identity; `None` in a log of the first format.
    pub store_id: Option<StoreId>,
    /// Bytes of a torn last batch that replay left out (0 after a clean
    /// stop, or a crash between batches).
    pub torn: u64,
}

/// The log file. Single writer: the store calls it from one thread at a
/// time, under its lock.
pub struct Wal {
    file: File,
    path: PathBuf,
    size: u64,
    generation: u64,
    store_id: StoreId,
    /// Where the next batch goes.
    end: u64,
    /// Bytes from [`HEADER`] up to here may be non-zero: what
    /// [`Wal::reset`] zeroes.
    dirty: u64,
    buf: Vec<u8>,
    /// Batches written past the page cache, where the file system allows.
    direct: Option<Direct>,
}

/// The log opened with `O_DIRECT`, for [`Wal::append`].
///
/// A buffered `pwrite` and `fdatasync` cost the flusher the page cache's
/// write-back of the block (about half of the CPU a sync cost it, by
/// perf): a direct write hands the block to the device itself, and the
/// `fdatasync` that follows has only the device's cache to flush.
///
/// A batch starts at any multiple of [`ALIGN`], so the direct write starts
/// at the beginning of the batch's first block and carries again the
/// bytes before the batch in that block (kept in `tail`), unchanged, and
/// zeros after it to the end of its last block, which are zero on the disk
/// already. A crash during the write leaves each sector old or new: the
/// rewritten bytes are the same either way, and the batch is torn as a
/// buffered write would tear it.
struct Direct {
    file: File,
    /// The bytes from the start of the block that holds [`Wal::end`] up to
    /// it.
    tail: Vec<u8>,
    /// Room for one write and a block more, so that it can start aligned.
    buf: Vec<u8>,
}

impl Direct {
    /// The log at `path` opened for direct writes, or `None` where the
    /// file system has no `O_DIRECT` (tmpfs).
    fn open(path: &Path) -> Option<Direct> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = File::options()
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .ok()?;
        Some(Direct {
            file,
            tail: Vec::new(),
            buf: Vec::new(),
        })
    }

    /// Writes `batch` at `end` in one direct `pwrite` of whole blocks.
    /// Returns `Ok(false)`, writing nothing, when that cannot be done
    /// here: the write would pass `size` (the file's last block is not
    /// whole), or the file system refuses the alignment.
    fn write(&mut self, batch: &[u8], end: u64, size: u64) -> io::Result<bool> {
        let start = end / BLOCK * BLOCK;
        let stop = (end + batch.len() as u64).div_ceil(BLOCK) * BLOCK;
        if stop > size || end - start != self.tail.len() as u64 {
            return Ok(false);
        }
        let n = (stop - start) as usize;
        if self.buf.len() < n + BLOCK as usize {
            self.buf = vec![0; n + BLOCK as usize];
        }
        let off = self.buf.as_ptr().align_offset(BLOCK as usize);
        if off >= BLOCK as usize {
            return Ok(false);
        }
        let out = &mut self.buf[off..off + n];
        let (before, rest) = out.split_at_mut(self.tail.len());
        before.copy_from_slice(&self.tail);
        rest[..batch.len()].copy_from_slice(batch);
        rest[batch.len()..].fill(0);
        match self.file.write_at(out, start) {
            Ok(w) if w == n => {}
            Ok(w) => {
                return Err(io::Error::other(format!(
                    "a direct write of the log wrote {w} of {n} bytes"
                )))
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Ok(false),
            Err(e) => return Err(e),
        }
        let new_end = end + batch.len() as u64;
        let from = (new_end / BLOCK * BLOCK - start) as usize;
        self.tail.clear();
        self.tail
            .extend_from_slice(&out[from..(new_end - start) as usize]);
        if self.buf.len() > KEEP_BUF {
            // A burst's large batch: its room is not kept for good.
            self.buf = Vec::new();
        }
        Ok(true)
    }
}

impl Wal {
    /// Creates a new, empty log of `size` bytes at `path`, durably, for the
    /// data dir `store_id`, at `generation`. Fails if the file exists.
    pub fn create(path: &Path, size: u64, store_id: StoreId, generation: u64) -> io::Result<Wal> {
        let size = size.max(HEADER * 2) / ALIGN * ALIGN;
        create_zeroed(path, size)?;
        let file = File::options().read(true).write(true).open(path)?;
        let mut wal = Wal {
            file,
            path: path.to_owned(),
            size,
            generation,
            store_id,
            end: HEADER,
            dirty: HEADER,
            buf: Vec::new(),
            direct: Direct::open(path),
        };
        wal.write_header()?;
        Ok(wal)
    }

    /// Opens the existing log at `path` and returns it with the records of
    /// its current generation. Reads only: call [`Wal::reset`] once the
    /// records are safely elsewhere, before appending. A log of the first
    /// format is read too; `store_id` is then the one its next header gets.
    pub fn open(path: &Path, store_id: StoreId) -> Result<(Wal, Replay), OpenError> {
        let file = File::options().read(true).write(true).open(path)?;
        let len = file.metadata()?.len();
        let mut bytes = vec![0u8; len as usize];
        file.read_exact_at(&mut bytes, 0)?;
        let replay = read(&bytes)?;
        let end = HEADER + replay.records_len;
        let last_nonzero = bytes[HEADER as usize..]
            .iter()
            .rposition(|b| *b != 0)
            .map_or(HEADER, |i| HEADER + i as u64 + 1);
        let wal = Wal {
            file,
            path: path.to_owned(),
            size: len / ALIGN * ALIGN,
            generation: replay.generation,
            store_id: replay.store_id.unwrap_or(store_id),
            end,
            // A first-format log is zeroed whole at its first reset.
            dirty: if replay.store_id.is_none() {
                len
            } else {
                last_nonzero.max(end)
            },
            buf: Vec::new(),
            direct: Direct::open(path).map(|mut d| {
                d.tail = bytes[(end / BLOCK * BLOCK) as usize..end as usize].to_vec();
                d
            }),
        };
        Ok((
            wal,
            Replay {
                records: replay.records,
                generation: replay.generation,
                store_id: replay.store_id,
                torn: replay.torn,
            },
        ))
    }

    /// Starts generation `generation`, empty, durably: zeroes what the old
    /// one used, then writes the new header. Every record in the file is
    /// void afterwards; call it only when they are all safe elsewhere.
    pub fn reset(&mut self, generation: u64) -> io::Result<()> {
        // Zeros first: a crash before the new header leaves the old
        // generation empty, never a new header over old bytes.
        if self.dirty > HEADER {
            let zeros = vec![0u8; (self.dirty - HEADER).min(1 << 20) as usize];
            let mut at = HEADER;
            while at < self.dirty {
                let n = zeros.len().min((self.dirty - at) as usize);
                self.file.write_all_at(&zeros[..n], at)?;
                at += n as u64;
            }
            self.file.sync_data()?;
        }
        self.generation = generation;
        self.write_header()?;
        self.end = HEADER;
        self.dirty = HEADER;
        // Direct writes again, if the last generation's end took a
        // buffered one.
        self.direct = Direct::open(&self.path);
        Ok(())
    }

    fn write_header(&mut self) -> io::Result<()> {
        let mut h = Vec::with_capacity(HEADER_LEN);
        h.extend_from_slice(MAGIC);
        h.extend_from_slice(&self.generation.to_le_bytes());
        h.extend_from_slice(&self.store_id);
        h.extend_from_slice(&self.size.to_le_bytes());
        h.extend_from_slice(&crc(&h).to_le_bytes());
        self.file.write_all_at(&h, 0)?;
        self.file.sync_data()
    }

    /// Writes `records` as one batch after the last one and makes them
    /// durable: one `pwrite` (`O_DIRECT` where the file system allows,
    /// past the page cache), one `fdatasync`. Returns `false`, writing nothing, when
    /// they do not fit in the space left.
    pub fn append<'a>(
        &mut self,
        records: impl IntoIterator<Item = &'a Record>,
    ) -> io::Result<bool> {
        self.buf.clear();
        self.buf.extend_from_slice(&[0; BATCH_HEAD]);
        for r in records {
            self.buf.push(r.kind as u8);
            self.buf
                .extend_from_slice(&(r.key.len() as u32).to_le_bytes());
            self.buf
                .extend_from_slice(&(r.value.len() as u32).to_le_bytes());
            self.buf.extend_from_slice(&r.key);
            self.buf.extend_from_slice(&r.value);
        }
        if self.buf.len() == BATCH_HEAD {
            return Ok(true);
        }
        let payload = self.buf.len() - BATCH_HEAD;
        if payload > u32::MAX as usize {
            return Ok(false);
        }
        let padded = align((self.buf.len() + BATCH_TAIL) as u64);
        if self.end + padded > self.size {
            return Ok(false);
        }
        let len = (payload as u32).to_le_bytes();
        let sum = batch_crc(self.generation, &len, &self.buf[BATCH_HEAD..]);
        let head = head_crc(self.generation, &len, sum);
        self.buf[..4].copy_from_slice(&len);
        self.buf[4..8].copy_from_slice(&sum.to_le_bytes());
        self.buf[8..12].copy_from_slice(&head.to_le_bytes());
        self.buf.extend_from_slice(&head.to_le_bytes());
        self.buf.resize(padded as usize, 0);
        let direct = match &mut self.direct {
            Some(d) => d.write(&self.buf, self.end, self.size)?,
            None => false,
        };
        if !direct {
            // Buffered, and no direct write after it: the tail kept for
            // one would not have this batch.
            self.direct = None;
            self.file.write_all_at(&self.buf, self.end)?;
        }
        self.file.sync_data()?;
        self.end += padded;
        self.dirty = self.dirty.max(self.end);
        Ok(true)
    }

    /// Gives a log of the first format, which names no data dir, the
    /// identity its next header will carry.
    pub fn set_store_id(&mut self, store_id: StoreId) {
        self.store_id = store_id;
    }

    /// Bytes of batches in the current generation.
    pub fn used(&self) -> u64 {
        self.end - HEADER
    }

    /// Bytes available for batches in an empty generation.
    pub fn capacity(&self) -> u64 {
        self.size - HEADER
    }

    /// Where the next batch goes: the end of every batch that was made
    /// durable.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// The current generation.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The file's path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Zeroes the log at `path` from `from` to its end, durably, if its
/// header is of `generation`: the batches whose write or sync failed, which
/// the file (or the page cache) may still hold although they were never
/// made durable, and were answered as discarded. Nothing reads them back.
pub fn discard_after(path: &Path, generation: u64, from: u64) -> io::Result<()> {
    let file = File::options().read(true).write(true).open(path)?;
    let mut h = [0u8; HEADER_LEN];
    file.read_exact_at(&mut h, 0)?;
    let current = (&h[..8] == MAGIC
        && crc(&h[..HEADER_LEN - 4]).to_le_bytes() == h[HEADER_LEN - 4..])
        .then(|| u64::from_le_bytes(h[8..16].try_into().expect("8 bytes")));
    if current != Some(generation) {
        // Reset since: nothing of that generation is read any more.
        return Ok(());
    }
    let len = file.metadata()?.len();
    let zeros = vec![0u8; 1 << 20];
    let mut at = from.max(HEADER);
    while at < len {
        let n = zeros.len().min((len - at) as usize);
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    file.sync_data()
}

fn align(n: u64) -> u64 {
    n.div_ceil(ALIGN) * ALIGN
}

fn crc(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

fn batch_crc(generation: u64, len: &[u8], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&generation.to_le_bytes());
    h.update(len);
    h.update(payload);
    h.finalize()
}

fn head_crc(generation: u64, len: &[u8], sum: u32) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&generation.to_le_bytes());
    h.update(len);
    h.update(&sum.to_le_bytes());
    h.finalize()
}

/// What [`read`] found: the records, and the bytes their batches take.
struct Read {
    records: Vec<Record>,
    records_len: u64,
    generation: u64,
    store_id: Option<StoreId>,
    torn: u64,
}

/// Reads a whole log file, or says why it is damaged.
fn read(bytes: &[u8]) -> Result<Read, OpenError> {
    let damaged = |why: String| Err(OpenError::Damaged(why));
    if (bytes.len() as u64) < HEADER * 2 {
        return damaged(format!(
            "the file is {} bytes, shorter than any log leasehold writes: truncated",
            bytes.len()
        ));
    }
    let magic = &bytes[..8];
    if magic == MAGIC_V1 {
        return read_v1(bytes);
    }
    if magic != MAGIC {
        return damaged(if bytes[..HEADER as usize].iter().all(|b| *b == 0) {
            "its header is zeros: the log was never finished, or was overwritten".to_owned()
        } else {
            "its header is not a leasehold log header".to_owned()
        });
    }
    let h = &bytes[..HEADER_LEN];
    if crc(&h[..HEADER_LEN - 4]).to_le_bytes() != h[HEADER_LEN - 4..] {
        return damaged("its header fails its checksum".to_owned());
    }
    let generation = u64::from_le_bytes(h[8..16].try_into().expect("8 bytes"));
    let store_id: StoreId = h[16..32].try_into().expect("16 bytes");
    let size = u64::from_le_bytes(h[32..40].try_into().expect("8 bytes"));
    if size != bytes.len() as u64 / ALIGN * ALIGN {
        return damaged(format!(
            "the file is {} bytes but its header says {size}: truncated or extended",
            bytes.len()
        ));
    }
    let mut records = Vec::new();
    let mut at = HEADER as usize;
    let mut torn = 0;
    loop {
        match batch_at(bytes, at, generation) {
            Batch::Valid(next, mut recs) => {
                records.append(&mut recs);
                at = next;
            }
            Batch::Zero => {
                if let Some(i) = nonzero_after(bytes, at) {
                    // The head of a batch that never reached the disk, with
                    // later sectors of it that did: torn, unless a whole
                    // valid batch follows.
                    if let Some(q) = valid_batch_after(bytes, at + ALIGN as usize, generation) {
                        return damaged(format!(
                            "bytes at offset {at} are zero but a valid batch follows at offset \
                             {q}: records in the middle of the log were lost"
                        ));
                    }
                    let last = bytes.iter().rposition(|b| *b != 0).unwrap_or(i);
                    torn = (last + 1 - at) as u64;
                }
                break;
            }
            Batch::Bad { extent } => {
                if let Some(q) = valid_batch_after(bytes, at + ALIGN as usize, generation) {
                    return damaged(format!(
                        "the batch at offset {at} is damaged but a valid batch follows at offset \
                         {q}: a record in the middle of the log is corrupt"
                    ));
                }
                let Some(end) = extent else {
                    return damaged(format!(
                        "the batch at offset {at} has a damaged head (a torn write leaves zeros, \
                         not other bytes)"
                    ));
                };
                let end = end.min(bytes.len());
                if let Some(i) = nonzero_after(bytes, align(end as u64) as usize) {
                    return damaged(format!(
                        "the batch at offset {at} is damaged and bytes follow it at offset {i}: \
                         not a torn write"
                    ));
                }
                // The head's sector was written (the head checks out); a
                // torn write left some later sector of the batch zero.
                let after_head = (at as u64 / SECTOR + 1) * SECTOR;
                if !has_zero_sector(bytes, after_head as usize, end) {
                    return damaged(format!(
                        "the batch at offset {at} fails its checksum but every sector of it was \
                         written: damaged after it was made durable"
                    ));
                }
                torn = (end - at) as u64;
                break;
            }
        }
    }
    Ok(Read {
        records_len: at as u64 - HEADER,
        records,
        generation,
        store_id: Some(store_id),
        torn,
    })
}

/// Reads what can be read of the log at `path`, damaged or not: the
/// records of the valid batches before any damage, the generation if the
/// header is readable, and what is wrong, if anything.
#[allow(clippy::type_complexity)]
pub fn salvage(path: &Path) -> io::Result<(Vec<Record>, Option<u64>, Option<String>)> {
    let bytes = std::fs::read(path)?;
    match read(&bytes) {
        Ok(r) => Ok((r.records, Some(r.generation), None)),
        Err(OpenError::Io(e)) => Err(e),
        Err(OpenError::Damaged(why)) => {
            let h = bytes.get(..HEADER_LEN);
            let generation = h
                .filter(|h| {
                    &h[..8] == MAGIC
                        && crc(&h[..HEADER_LEN - 4]).to_le_bytes() == h[HEADER_LEN - 4..]
                })
                .map(|h| u64::from_le_bytes(h[8..16].try_into().expect("8 bytes")));
            let mut records = Vec::new();
            if let Some(g) = generation {
                let mut at = HEADER as usize;
                while let Batch::Valid(next, mut recs) = batch_at(&bytes, at, g) {
                    records.append(&mut recs);
                    at = next;
                }
            }
            Ok((records, generation, Some(why)))
        }
    }
}

enum Batch {
    /// A valid batch: where the next one starts, and its records.
    Valid(usize, Vec<Record>),
    /// Zeros where a batch's head would be.
    Zero,
    /// Not valid; `extent` is where it would end, if its head checks out.
    Bad { extent: Option<usize> },
}

fn batch_at(bytes: &[u8], at: usize, generation: u64) -> Batch {
    let Some(head) = bytes.get(at..at + BATCH_HEAD) else {
        return Batch::Zero;
    };
    if head.iter().all(|b| *b == 0) {
        return Batch::Zero;
    }
    let len = &head[..4];
    let sum = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
    let hsum = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
    if head_crc(generation, len, sum) != hsum {
        return Batch::Bad { extent: None };
    }
    let n = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
    let end = at + BATCH_HEAD + n + BATCH_TAIL;
    let (Some(payload), Some(tail)) = (
        bytes.get(at + BATCH_HEAD..end - BATCH_TAIL),
        bytes.get(end - BATCH_TAIL..end),
    ) else {
        return Batch::Bad { extent: Some(end) };
    };
    if batch_crc(generation, len, payload) != sum || tail != hsum.to_le_bytes() {
        return Batch::Bad { extent: Some(end) };
    }
    match parse_records(payload) {
        Some(records) => Batch::Valid(align(end as u64) as usize, records),
        // A payload whose checksum passes but does not parse was written
        // wrong, not torn: treat it as damage.
        None => Batch::Bad { extent: None },
    }
}

fn parse_records(mut p: &[u8]) -> Option<Vec<Record>> {
    let mut out = Vec::new();
    while !p.is_empty() {
        let head = p.get(..RECORD_HEAD)?;
        let kind = match head[0] {
            1 => Kind::Lease,
            2 => Kind::Value,
            3 => Kind::Floor,
            _ => return None,
        };
        let klen = u32::from_le_bytes(head[1..5].try_into().ok()?) as usize;
        let vlen = u32::from_le_bytes(head[5..9].try_into().ok()?) as usize;
        let key = p.get(RECORD_HEAD..RECORD_HEAD + klen)?;
        let value = p.get(RECORD_HEAD + klen..RECORD_HEAD + klen + vlen)?;
        out.push(Record {
            kind,
            key: key.to_vec(),
            value: value.to_vec(),
        });
        p = &p[RECORD_HEAD + klen + vlen..];
    }
    Some(out)
}

/// The offset of the first valid batch of `generation` at or after `from`.
fn valid_batch_after(bytes: &[u8], from: usize, generation: u64) -> Option<usize> {
    let mut q = align(from as u64) as usize;
    while q + BATCH_HEAD <= bytes.len() {
        if let Batch::Valid(..) = batch_at(bytes, q, generation) {
            return Some(q);
        }
        q += ALIGN as usize;
    }
    None
}

/// The offset of the first non-zero byte at or after `from`.
fn nonzero_after(bytes: &[u8], from: usize) -> Option<usize> {
    bytes
        .get(from..)?
        .iter()
        .position(|b| *b != 0)
        .map(|i| from + i)
}

/// Whether some sector overlapping `[from, to)` is zero over that overlap.
fn has_zero_sector(bytes: &[u8], from: usize, to: usize) -> bool {
    if from >= to {
        return false;
    }
    let mut s = from as u64 / SECTOR * SECTOR;
    while (s as usize) < to {
        let a = (s as usize).max(from);
        let b = ((s + SECTOR) as usize).min(to);
        if bytes[a..b].iter().all(|x| *x == 0) {
            return true;
        }
        s += SECTOR;
    }
    false
}

/// The first format: records one after another, each with its own CRC;
/// replay ends at the first that does not check out.
fn read_v1(bytes: &[u8]) -> Result<Read, OpenError> {
    let h = &bytes[..20];
    if crc(&h[..16]).to_le_bytes() != h[16..20] {
        return Err(OpenError::Damaged(
            "its header (first format) fails its checksum".to_owned(),
        ));
    }
    let generation = u64::from_le_bytes(h[8..16].try_into().expect("8 bytes"));
    let mut out = Vec::new();
    let mut at = HEADER as usize;
    while let Some(head) = bytes.get(at..at + 8) {
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
        let sum = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
        let Some(body) = bytes.get(at + 8..at + 8 + len) else {
            break;
        };
        if len < 5 || batch_crc(generation, &head[..4], body) != sum {
            break;
        }
        let kind = match body[0] {
            1 => Kind::Lease,
            2 => Kind::Value,
            3 => Kind::Floor,
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
        at += 8 + len;
    }
    Ok(Read {
        records: out,
        records_len: 0,
        generation,
        store_id: None,
        torn: 0,
    })
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

    const ID: StoreId = [3; 16];

    fn rec(i: u32) -> Record {
        Record {
            kind: if i % 2 == 0 { Kind::Lease } else { Kind::Value },
            key: format!("key-{i}").into_bytes(),
            value: vec![i as u8 | 1; (i % 7) as usize * 100],
        }
    }

    fn log(dir: &Path, batches: &[&[Record]]) -> (PathBuf, Vec<u64>) {
        let p = dir.join("wal");
        let mut w = Wal::create(&p, 64 * 1024, ID, 1).unwrap();
        let mut ends = vec![];
        for b in batches {
            assert!(w.append(b.iter()).unwrap());
            ends.push(w.end);
        }
        (p, ends)
    }

    fn poke(p: &Path, at: u64, bytes: &[u8]) {
        File::options()
            .write(true)
            .open(p)
            .unwrap()
            .write_all_at(bytes, at)
            .unwrap();
    }

    fn damaged(p: &Path) -> String {
        match Wal::open(p, ID) {
            Err(OpenError::Damaged(why)) => why,
            Err(e) => panic!("io error {e}"),
            Ok((_, r)) => panic!("opened with {} records", r.records.len()),
        }
    }

    #[test]
    fn records_come_back_in_order_until_a_reset() {
        let dir = tempfile::tempdir().unwrap();
        let all: Vec<Record> = (0..50).map(rec).collect();
        let (p, _) = log(dir.path(), &[&all[..20], &all[20..]]);
        let (mut w, r) = Wal::open(&p, [0; 16]).unwrap();
        assert_eq!(r.records, all);
        assert_eq!((r.generation, r.store_id, r.torn), (1, Some(ID), 0));
        w.reset(2).unwrap();
        assert!(w.append(&all[..3]).unwrap());
        drop(w);
        let (_, r) = Wal::open(&p, ID).unwrap();
        assert_eq!(r.records, all[..3], "the old generation is void");
        assert_eq!(r.generation, 2);
    }

    /// Direct writes (whole blocks, the bytes before the batch written
    /// again) leave the file byte for byte as buffered writes do: across
    /// block boundaries, after a reopen in the middle of a block, and at
    /// the end of a file whose last block is not whole, where the write
    /// is buffered.
    #[test]
    fn direct_writes_leave_the_bytes_buffered_writes_do() {
        let dir = tempfile::tempdir().unwrap();
        let size = 16 * BLOCK + 3 * ALIGN;
        let mut files = vec![];
        for direct in [true, false] {
            let p = dir.path().join(format!("wal-{direct}"));
            let mut w = Wal::create(&p, size, ID, 1).unwrap();
            if !direct {
                w.direct = None;
            }
            let mut all = vec![];
            let mut i = 0;
            loop {
                let batch: Vec<Record> = (i..i + 1 + i % 3).map(rec).collect();
                if !w.append(&batch).unwrap() {
                    break;
                }
                all.extend(batch);
                i += 4;
                if i == 40 {
                    assert_eq!(
                        w.direct.is_some(),
                        direct && Direct::open(&p).is_some(),
                        "direct writes where the file system has them"
                    );
                    // Reopened where the log ends, as after a crash.
                    let (again, r) = Wal::open(&p, ID).unwrap();
                    assert_eq!(r.records, all);
                    w = again;
                    if !direct {
                        w.direct = None;
                    }
                }
            }
            assert!(w.end > size - BLOCK, "filled to its last block");
            let (_, r) = Wal::open(&p, ID).unwrap();
            assert_eq!(r.records, all);
            files.push(std::fs::read(&p).unwrap());
        }
        assert!(files[0] == files[1], "the same bytes either way");
    }

    /// A direct write's buffer does not keep a large batch's room.
    #[test]
    fn a_large_batchs_room_is_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("wal");
        let mut w = Wal::create(&p, 8 << 20, ID, 1).unwrap();
        let big = Record {
            kind: Kind::Value,
            key: b"big".to_vec(),
            value: vec![7; 3 << 19],
        };
        assert!(w.append([&big, &rec(1)]).unwrap());
        assert!(w.append([&rec(3)]).unwrap());
        if let Some(d) = &w.direct {
            assert!(d.buf.len() <= KEEP_BUF, "{} bytes kept", d.buf.len());
        }
        let (_, r) = Wal::open(&p, ID).unwrap();
        assert_eq!(r.records, [big, rec(1), rec(3)]);
    }

    #[test]
    fn a_full_log_refuses_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("wal");
        let mut w = Wal::create(&p, 3 * HEADER, ID, 1).unwrap();
        assert!(w.append(&[rec(1)]).unwrap());
        let used = w.used();
        let big = Record {
            kind: Kind::Value,
            key: b"big".to_vec(),
            value: vec![7; (w.capacity() - used) as usize],
        };
        assert!(!w.append([&big]).unwrap(), "does not fit");
        assert_eq!(w.used(), used, "nothing was written");
    }

    /// A crash during a batch's write leaves some of its sectors zero: the
    /// batch is left out, quietly, and the ones before it are kept.
    #[test]
    fn a_torn_last_batch_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let big: Vec<Record> = (0..4)
            .map(|i| Record {
                kind: Kind::Value,
                key: vec![b'k', i],
                value: vec![0xab; 700],
            })
            .collect();
        let (p, ends) = log(dir.path(), &[&[rec(1)], &big]);
        // The second sector of the last batch never reached the disk.
        let sector = (ends[0] / SECTOR + 1) * SECTOR;
        poke(&p, sector, &[0; SECTOR as usize]);
        let (_, r) = Wal::open(&p, ID).unwrap();
        assert_eq!(r.records, vec![rec(1)]);
        assert!(r.torn > 0);
        // Only the head's sector of it reached the disk... or all but it.
        let dir = tempfile::tempdir().unwrap();
        let (p, ends) = log(dir.path(), &[&[rec(1)], &big]);
        poke(&p, ends[0], &[0; 12]);
        let (_, r) = Wal::open(&p, ID).unwrap();
        assert_eq!(r.records, vec![rec(1)]);
    }

    /// Anything else than a torn last batch is damage: a flipped byte in
    /// any batch (the last one included), a truncated file, a damaged
    /// header, lost bytes in the middle.
    #[test]
    fn damage_is_refused_with_a_reason() {
        let all: Vec<Record> = (0..30).map(rec).collect();
        let batches: Vec<&[Record]> = all.chunks(5).collect();
        for case in 0..6 {
            let dir = tempfile::tempdir().unwrap();
            let (p, ends) = log(dir.path(), &batches);
            let why = match case {
                0 => {
                    poke(&p, HEADER + 40, &[0xee]);
                    damaged(&p)
                }
                1 => {
                    // Inside the last batch.
                    poke(&p, ends[ends.len() - 2] + 30, &[0xee]);
                    damaged(&p)
                }
                2 => {
                    File::options()
                        .write(true)
                        .open(&p)
                        .unwrap()
                        .set_len(HEADER * 3)
                        .unwrap();
                    damaged(&p)
                }
                3 => {
                    poke(&p, 9, &[0xee]);
                    damaged(&p)
                }
                4 => {
                    // A whole batch zeroed, with batches after it.
                    poke(&p, ends[1], &vec![0; (ends[2] - ends[1]) as usize]);
                    damaged(&p)
                }
                _ => {
                    poke(&p, ends[ends.len() - 1] + 100, &[1]);
                    let (_, r) = Wal::open(&p, ID).unwrap();
                    assert_eq!(r.records, all, "a stray byte past the end loses nothing");
                    continue;
                }
            };
            assert!(!why.is_empty(), "case {case}");
        }
    }

    /// A log of the first format is read, and zeroed whole at its reset.
    #[test]
    fn a_first_format_log_is_read_then_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("wal");
        let mut bytes = vec![0u8; 3 * HEADER as usize];
        let mut h = MAGIC_V1.to_vec();
        h.extend_from_slice(&5u64.to_le_bytes());
        h.extend_from_slice(&crc(&h).to_le_bytes());
        bytes[..20].copy_from_slice(&h);
        let r = rec(2);
        let mut body = vec![r.kind as u8];
        body.extend_from_slice(&(r.key.len() as u32).to_le_bytes());
        body.extend_from_slice(&r.key);
        body.extend_from_slice(&r.value);
        let len = (body.len() as u32).to_le_bytes();
        let at = HEADER as usize;
        bytes[at..at + 4].copy_from_slice(&len);
        bytes[at + 4..at + 8].copy_from_slice(&batch_crc(5, &len, &body).to_le_bytes());
        bytes[at + 8..at + 8 + body.len()].copy_from_slice(&body);
        std::fs::write(&p, &bytes).unwrap();
        let (mut w, got) = Wal::open(&p, ID).unwrap();
        assert_eq!((got.records, got.store_id), (vec![r], None));
        w.reset(6).unwrap();
        drop(w);
        let (_, got) = Wal::open(&p, ID).unwrap();
        assert_eq!((got.records.len(), got.store_id), (0, Some(ID)));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

        /// Whatever happens to one byte after the header, replay either
        /// refuses the log or returns every record appended: a flipped
        /// byte never silently loses an acknowledged record.
        #[test]
        fn a_flipped_byte_is_refused_or_harmless(
            sizes in proptest::collection::vec(1usize..300, 1..40),
            flip in proptest::prelude::any::<proptest::sample::Index>(),
            byte in 1u8..=255,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let all: Vec<Record> = sizes
                .iter()
                .enumerate()
                .map(|(i, n)| Record {
                    kind: if i % 3 == 0 { Kind::Lease } else { Kind::Value },
                    key: format!("k{i}").into_bytes(),
                    value: vec![(i as u8) | 0x80; *n],
                })
                .collect();
            let batches: Vec<&[Record]> = all.chunks(7).collect();
            let (p, ends) = log(dir.path(), &batches);
            let end = *ends.last().unwrap();
            let at = HEADER + flip.index((end - HEADER) as usize) as u64;
            let f = File::options().read(true).write(true).open(&p).unwrap();
            let mut old = [0u8];
            f.read_exact_at(&mut old, at).unwrap();
            f.write_all_at(&[old[0] ^ byte], at).unwrap();
            match Wal::open(&p, ID) {
                Err(OpenError::Damaged(_)) => {}
                Err(e) => proptest::prop_assert!(false, "io error {}", e),
                // Only padding was hit.
                Ok((_, r)) => proptest::prop_assert_eq!(r.records, all),
            }
        }
    }
}
