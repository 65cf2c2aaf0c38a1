//! Domain newtypes and the input limits that validate them.
//!
//! Proto types stop at the server boundary: requests are turned into these
//! types by [`Limits`], which is the only place that decides what input is
//! acceptable. A value of one of these types is valid by construction.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};

/// A fencing token: the epoch of a grant. Zero means "never granted".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Token(pub u64);

impl Token {
    /// The token of a job that was never granted.
    pub const NONE: Token = Token(0);

    /// The token that follows this one.
    /// `None` after `u64::MAX`, the last token: no job reaches it at a
    /// million grants a second in half a million years, but a token floor
    /// (a restore with `--floor`) or a damaged etcd record can put a job
    /// there, and a grant must then be refused, never repeat a token
    /// ([`crate::lease::rules::next_token`]).
    pub fn next(self) -> Option<Token> {
        self.0.checked_add(1).map(Token)
    }

    /// The last token a job can be granted.
    pub const LAST: Token = Token(u64::MAX);
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A validated job name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobName(Name);

/// A string of up to [`Name::INLINE`] bytes kept inline, a longer one on
/// the heap: 24 bytes either way, as a `String` is. The lease table finds
/// a job by comparing names in its B-tree's nodes: inline, a comparison
/// reads the node, where a `String` is a pointer to chase (a cache miss
/// each, about forty a lookup among a million jobs). It also spares short
/// names an allocation. Compares, hashes and prints exactly as its `str`.
#[derive(Clone)]
pub(crate) struct Name(Repr);

#[derive(Clone)]
enum Repr {
    Inline(u8, [u8; Name::INLINE]),
    Heap(Box<str>),
}

impl Name {
    /// The longest name kept inline.
    pub const INLINE: usize = 22;

    /// The name as a string.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Inline(len, bytes) => {
                // SAFETY: the bytes are a whole `str`'s, copied in `from`.
                unsafe { std::str::from_utf8_unchecked(&bytes[..usize::from(*len)]) }
            }
            Repr::Heap(s) => s,
        }
    }
}

impl From<String> for Name {
    fn from(s: String) -> Self {
        if s.len() <= Name::INLINE {
            let mut bytes = [0; Name::INLINE];
            bytes[..s.len()].copy_from_slice(s.as_bytes());
            Name(Repr::Inline(s.len() as u8, bytes))
        } else {
            Name(Repr::Heap(s.into_boxed_str()))
        }
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Repr::Inline(la, a), Repr::Inline(lb, b)) => la == lb && a == b,
            _ => self.as_str() == other.as_str(),
        }
    }
}

/// An inline name's bytes as two big-endian integers and its length,
/// which order as its `str` does: the bytes past the length are zero, the
/// smallest byte, so a name that is a prefix of another is below it, or
/// equal up to the length, which then decides. Two integer comparisons
/// instead of a call to `memcmp`: a lookup among a million jobs makes
/// about forty comparisons, and a `KeepAlive` message a hundred lookups.
fn inline_key(len: u8, bytes: &[u8; Name::INLINE]) -> (u128, u64, u8) {
    let (head, tail) = bytes.split_at(16);
    let mut low = [0u8; 8];
    low[..tail.len()].copy_from_slice(tail);
    (
        u128::from_be_bytes(head.try_into().expect("16 bytes")),
        u64::from_be_bytes(low),
        len,
    )
}

impl Eq for Name {}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Name {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match (&self.0, &other.0) {
            (Repr::Inline(la, a), Repr::Inline(lb, b)) => {
                inline_key(*la, a).cmp(&inline_key(*lb, b))
            }
            _ => self.as_str().cmp(other.as_str()),
        }
    }
}

impl std::hash::Hash for Name {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// A validated holder identity: a name plus a UUID made per elector.
///
/// Shared, not copied: a clone is a reference count, and the lease table
/// keeps one copy of each holder for all the leases it holds (a fleet's
/// holder holds thousands).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HolderId(Thin);

/// A shared string behind one thin pointer: 8 bytes where an `Arc<str>`
/// takes 16. A held lease names its holder, and a million held leases
/// are a million copies of the pointer (the string is shared).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Thin(Arc<Box<str>>);

impl From<String> for Thin {
    fn from(s: String) -> Thin {
        Thin(Arc::new(s.into_boxed_str()))
    }
}

impl AsRef<str> for Thin {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Thin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_ref(), f)
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

macro_rules! name_type {
    ($t:ident) => {
        impl $t {
            /// The name as a string.
            pub fn as_str(&self) -> &str {
                self.0.as_ref()
            }

            /// Wraps a name read back from a store, which was validated
            /// before it was written. Never for input: that goes through
            /// [`Limits`].
            pub fn from_trusted(s: String) -> Self {
                $t(s.into())
            }
        }

        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::borrow::Borrow<str> for $t {
            fn borrow(&self) -> &str {
                self.as_str()
            }
        }

        impl AsRef<str> for $t {
            fn as_ref(&self) -> &str {
                self.as_str()
            }
        }
    };
}
name_type!(JobName);
name_type!(HolderId);

/// Separates the principal from the client's holder string in a holder
/// bound to its principal (a server with a policy stores every holder so).
/// A control character, which no validated name contains.
pub const BIND: char = '\u{1f}';

impl HolderId {
    /// This holder bound to `principal`, as a server with a policy stores
    /// it: `{principal}`, [`BIND`], `{holder}`.
    pub fn bound_to(&self, principal: &str) -> HolderId {
        // Not `format!`: this runs on every call with a policy.
        let mut s = String::with_capacity(principal.len() + BIND.len_utf8() + self.as_str().len());
        s.push_str(principal);
        s.push(BIND);
        s.push_str(self.as_str());
        HolderId(s.into())
    }

    /// Whether the two are one copy of the name (not only equal).
    #[cfg(test)]
    pub(crate) fn same_copy(&self, other: &HolderId) -> bool {
        Arc::ptr_eq(&self.0 .0, &other.0 .0)
    }

    /// Whether another copy of this holder exists (the lease table's
    /// own copy is then in use).
    pub(crate) fn shared(&self) -> bool {
        Arc::strong_count(&self.0 .0) > 1
    }

    /// The principal this holder is bound to, if it is bound (see [`BIND`]).
    pub fn principal(&self) -> Option<&str> {
        self.as_str().split_once(BIND).map(|(p, _)| p)
    }

    /// The holder as its client named it: without the principal it is
    /// bound to, if any.
    pub fn unbound(&self) -> &str {
        let s = self.as_str();
        s.split_once(BIND).map_or(s, |(_, h)| h)
    }
}

/// The limits on every request field. Configurable at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// The shortest TTL a lease may have.
    pub min_ttl: Duration,
    /// The longest TTL a lease may have.
    pub max_ttl: Duration,
    /// The longest an `Acquire` may wait.
    pub max_wait: Duration,
    /// The longest job or holder name, in bytes.
    pub max_name_bytes: usize,
    /// The longest key, in bytes.
    pub max_key_bytes: usize,
    /// The largest value, in bytes.
    pub max_value_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            min_ttl: Duration::from_millis(100),
            max_ttl: Duration::from_secs(3600),
            max_wait: Duration::from_secs(3600),
            max_name_bytes: 256,
            max_key_bytes: 1024,
            max_value_bytes: 64 * 1024,
        }
    }
}

/// The error for a field of `len` bytes over its limit of `limit` bytes:
/// one wording wherever a size is refused, whether the field was decoded
/// or only its length was read (a message too large to decode).
pub fn too_long(field: impl Into<Cow<'static, str>>, len: usize, limit: usize) -> Error {
    Error::invalid(field, format!("is {len} bytes, the limit is {limit} bytes"))
}

/// The largest value a holder may publish with its lease (`Lease.value`).
pub const MAX_LEASE_VALUE_BYTES: usize = 1024;

/// A lease's published value (`Lease.value`): where to reach its holder,
/// for routing. Advisory: the token fences, never the value. `None` when
/// empty, so that a lease without one costs nothing.
pub type Published = Option<Arc<[u8]>>;

/// The most slots a counted lease may have (`AcquireRequest.slots`).
pub const MAX_SLOTS: u32 = 100;

/// The fenced key, under a counted job's own name, that keeps its count
/// of slots (decimal text), fixed by its first counted grant. Only the
/// line's turn writes under a counted job's own name: its token is never
/// told to anyone, so the key cannot clash with a user's.
pub const SLOTS_KEY: &[u8] = b"slots";

/// The name of slot `slot` of the counted job `job`: `{job}#{slot}`, a
/// job of its own. Checked against the name limit as any job name is,
/// naming `job`.
pub fn slot_job(limits: &Limits, job: &JobName, slot: u32) -> Result<JobName> {
    let name = format!("{job}#{slot}");
    if name.len() > limits.max_name_bytes {
        return Err(Error::invalid(
            "job",
            format!(
                "its slot names, such as {name:?}, are {} bytes, over the limit of {} bytes: \
                 a counted lease's job name leaves room for \"#\" and the slot number",
                name.len(),
                limits.max_name_bytes
            ),
        ));
    }
    Ok(JobName(name.into()))
}

/// The largest page a list call returns.
pub const MAX_PAGE_SIZE: u32 = 1000;
/// The page size of a list call that names none.
pub const DEFAULT_PAGE_SIZE: u32 = 100;

impl Limits {
    /// Checks that the limits make sense together.
    pub fn validate(&self) -> Result<()> {
        if self.min_ttl.is_zero() {
            return Err(Error::invalid("min_ttl", "must be above zero"));
        }
        if self.max_ttl < self.min_ttl {
            return Err(Error::invalid(
                "max_ttl",
                format!("{:?} is below min_ttl {:?}", self.max_ttl, self.min_ttl),
            ));
        }
        for (field, v) in [
            ("max_name_bytes", self.max_name_bytes),
            ("max_key_bytes", self.max_key_bytes),
            ("max_value_bytes", self.max_value_bytes),
        ] {
            if v == 0 {
                return Err(Error::invalid(field, "must be above zero"));
            }
        }
        // One length is the store's own (its history keys): names stay
        // below it.
        if self.max_name_bytes >= u16::MAX as usize {
            return Err(Error::invalid(
                "max_name_bytes",
                format!("must be at most {}", u16::MAX - 1),
            ));
        }
        Ok(())
    }

    /// Validates a job name: 1 to `max_name_bytes` bytes, no control
    /// characters, and no format characters (Unicode category Cf: bidi
    /// controls, zero-width spaces and joiners), which would let two
    /// different names look alike on a page or in a log.
    pub fn job(&self, s: &str) -> Result<JobName> {
        self.name("job", s).map(|s| JobName(s.into()))
    }

    /// Validates a holder identity, with the same rules as a job name.
    pub fn holder(&self, s: &str) -> Result<HolderId> {
        self.name("holder", s).map(|s| HolderId(s.into()))
    }

    fn name(&self, field: &'static str, s: &str) -> Result<String> {
        if s.is_empty() {
            return Err(Error::invalid(field, "must not be empty"));
        }
        if s.len() > self.max_name_bytes {
            return Err(too_long(field, s.len(), self.max_name_bytes));
        }
        if let Some(c) = s.chars().find(|c| c.is_control()) {
            return Err(Error::invalid(
                field,
                format!("must not contain control characters (found {c:?})"),
            ));
        }
        // No ASCII character is a format character: most names are
        // ASCII, and every renewal validates two of them.
        if let Some(c) = s.chars().find(|c| !c.is_ascii() && is_format(*c)) {
            return Err(Error::invalid(
                field,
                format!(
                    "must not contain invisible format characters such as bidi controls or \
                     zero-width spaces (found U+{:04X}): two names that look alike must be \
                     the same name",
                    c as u32
                ),
            ));
        }
        Ok(s.to_owned())
    }

    /// Validates a TTL: within `min_ttl..=max_ttl`. `None` means the field
    /// was not set.
    pub fn ttl(&self, ttl: Option<Duration>) -> Result<Duration> {
        let ttl = ttl.ok_or_else(|| Error::invalid("ttl", "is required"))?;
        if ttl < self.min_ttl || ttl > self.max_ttl {
            return Err(Error::invalid(
                "ttl",
                format!(
                    "{:?} is outside the allowed range {:?} to {:?}",
                    ttl, self.min_ttl, self.max_ttl
                ),
            ));
        }
        Ok(ttl)
    }

    /// Validates how long an `Acquire` may wait: unset means zero.
    pub fn wait(&self, wait: Option<Duration>) -> Result<Duration> {
        let wait = wait.unwrap_or_default();
        if wait > self.max_wait {
            return Err(Error::invalid(
                "wait",
                format!("{:?} is above the limit of {:?}", wait, self.max_wait),
            ));
        }
        Ok(wait)
    }

    /// Validates a token in a request: zero is never issued.
    pub fn token(&self, token: u64) -> Result<Token> {
        if token == 0 {
            return Err(Error::invalid(
                "token",
                "must not be 0: tokens start at 1 (use the token from your grant)",
            ));
        }
        Ok(Token(token))
    }

    /// Validates a key: 1 to `max_key_bytes` bytes.
    pub fn key<'a>(&self, key: &'a [u8]) -> Result<&'a [u8]> {
        if key.is_empty() {
            return Err(Error::invalid("key", "must not be empty"));
        }
        self.key_len("key", key)
    }

    /// Validates a key prefix (may be empty).
    pub fn key_prefix<'a>(&self, prefix: &'a [u8]) -> Result<&'a [u8]> {
        self.key_len("prefix", prefix)
    }

    fn key_len<'a>(&self, field: &'static str, key: &'a [u8]) -> Result<&'a [u8]> {
        if key.len() > self.max_key_bytes {
            return Err(too_long(field, key.len(), self.max_key_bytes));
        }
        Ok(key)
    }

    /// Validates a value's size.
    pub fn value<'a>(&self, value: &'a [u8]) -> Result<&'a [u8]> {
        if value.len() > self.max_value_bytes {
            return Err(too_long("value", value.len(), self.max_value_bytes));
        }
        Ok(value)
    }

    /// Validates a lease's published value (`Lease.value`): at most
    /// [`MAX_LEASE_VALUE_BYTES`]; empty is none.
    pub fn lease_value(&self, value: &[u8]) -> Result<Published> {
        if value.len() > MAX_LEASE_VALUE_BYTES {
            return Err(too_long("value", value.len(), MAX_LEASE_VALUE_BYTES));
        }
        Ok((!value.is_empty()).then(|| Arc::from(value)))
    }

    /// Validates `AcquireRequest.slots`: 0 and 1 are the ordinary lease
    /// of one holder (`None`), 2 to [`MAX_SLOTS`] a counted lease.
    pub fn slots(&self, n: u32) -> Result<Option<u32>> {
        match n {
            0 | 1 => Ok(None),
            n if n > MAX_SLOTS => Err(Error::invalid(
                "slots",
                format!("{n} is above the limit of {MAX_SLOTS}"),
            )),
            n => Ok(Some(n)),
        }
    }

    /// Validates a page size: 0 means the default.
    pub fn page_size(&self, n: u32) -> Result<usize> {
        match n {
            0 => Ok(DEFAULT_PAGE_SIZE as usize),
            n if n > MAX_PAGE_SIZE => Err(Error::invalid(
                "page_size",
                format!("{n} is above the limit of {MAX_PAGE_SIZE}"),
            )),
            n => Ok(n as usize),
        }
    }

    /// Validates `ListWaiters`'s `limit`: 0 means the default page size,
    /// and the largest page is its most.
    pub fn limit(&self, n: u32) -> Result<usize> {
        self.page_size(n).map_err(|_| {
            Error::invalid(
                "limit",
                format!("{n} is above the limit of {MAX_PAGE_SIZE}"),
            )
        })
    }

    /// Validates a job-name prefix for listing (may be empty).
    pub fn job_prefix(&self, prefix: &str) -> Result<()> {
        if prefix.len() > self.max_name_bytes {
            return Err(too_long("prefix", prefix.len(), self.max_name_bytes));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_errors_name_field_and_limit() {
        let l = Limits::default();
        assert!(l.job("bridge_health").is_ok());
        let e = l.job("").unwrap_err();
        assert_eq!(e, Error::invalid("job", "must not be empty"));
        let e = l.holder(&"x".repeat(257)).unwrap_err();
        assert!(e.to_string().contains("holder"), "{e}");
        assert!(e.to_string().contains("256"), "{e}");
        assert!(l.job("a\nb").is_err());
        assert_eq!(l.job(&"x".repeat(256)).unwrap().as_str().len(), 256);
    }

    #[test]
    fn the_format_character_search_agrees_with_a_scan_of_every_range() {
        assert!(FORMAT
            .windows(2)
            .all(|w| w[0].0 <= w[0].1 && w[0].1 < w[1].0));
        for c in (0..=0x10FFFF).filter_map(char::from_u32) {
            let scan = FORMAT
                .iter()
                .any(|&(lo, hi)| (lo..=hi).contains(&(c as u32)));
            assert_eq!(is_format(c), scan, "U+{:04X}", c as u32);
        }
    }

    #[test]
    fn names_with_invisible_format_characters_are_refused() {
        let l = Limits::default();
        // A right-to-left override, a zero-width space and joiner, a
        // byte-order mark, a tag character.
        for c in [
            '\u{202E}',
            '\u{200B}',
            '\u{200D}',
            '\u{FEFF}',
            '\u{E0041}',
            '\u{2066}',
        ] {
            let e = l.holder(&format!("worker{c}1")).unwrap_err();
            let text = e.to_string();
            assert!(
                text.contains("holder") && text.contains("format characters"),
                "{text}"
            );
            assert!(text.contains(&format!("U+{:04X}", c as u32)), "{text}");
            assert!(l.job(&format!("billing/{c}x")).is_err());
        }
        // Letters of any script stay good names.
        for ok in ["billing/é", "ジョブ", "עבודה/1", "работа"] {
            assert!(l.job(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn ttl_range_is_inclusive() {
        let l = Limits::default();
        assert!(l.ttl(Some(Duration::from_millis(100))).is_ok());
        assert!(l.ttl(Some(Duration::from_secs(3600))).is_ok());
        let e = l.ttl(Some(Duration::from_millis(99))).unwrap_err();
        assert!(e.to_string().contains("100ms"), "{e}");
        assert!(l.ttl(Some(Duration::from_secs(3601))).is_err());
        assert!(l.ttl(None).is_err());
    }

    #[test]
    fn keys_values_tokens_pages() {
        let l = Limits::default();
        assert!(l.key(b"").is_err());
        assert!(l.key(&[0u8; 1024]).is_ok());
        assert!(l.key(&[0u8; 1025]).is_err());
        assert!(l.value(&[0u8; 65536]).is_ok());
        let e = l.value(&[0u8; 65537]).unwrap_err();
        assert!(e.to_string().contains("65536"), "{e}");
        assert!(l.token(0).is_err());
        assert_eq!(l.token(7).unwrap(), Token(7));
        assert_eq!(l.page_size(0).unwrap(), 100);
        assert_eq!(l.slots(0).unwrap(), None);
        assert_eq!(l.slots(1).unwrap(), None);
        assert_eq!(l.slots(100).unwrap(), Some(100));
        let e = l.slots(101).unwrap_err().to_string();
        assert!(e.contains("slots") && e.contains("100"), "{e}");
        let job = l.job("nightly").unwrap();
        assert_eq!(slot_job(&l, &job, 7).unwrap().as_str(), "nightly#7");
        let long = l.job(&"j".repeat(254)).unwrap();
        assert!(slot_job(&l, &long, 0).is_ok());
        let e = slot_job(&l, &long, 10).unwrap_err().to_string();
        assert!(e.contains("job") && e.contains("256"), "{e}");
        assert!(l.page_size(1001).is_err());
    }

    #[test]
    fn limits_must_be_coherent() {
        let mut l = Limits::default();
        assert!(l.validate().is_ok());
        l.max_ttl = Duration::from_millis(10);
        assert!(l.validate().is_err());
    }
}

#[cfg(test)]
mod name_tests {
    use super::Name;
    use std::collections::{BTreeMap, HashMap};

    /// Inline or not, a name is its `str`: the same text, the same order,
    /// the same hash (maps keyed by names are searched with `&str`).
    #[test]
    fn a_name_is_its_str_inline_or_on_the_heap() {
        let mut texts: Vec<String> = (0..=40).map(|n| "j".repeat(n)).collect();
        // Multi-byte characters across the inline limit: 21 + 2 bytes.
        texts.push(format!("{}é", "x".repeat(Name::INLINE - 1)));
        texts.push(format!("{}é", "x".repeat(Name::INLINE - 2)));
        texts.extend(
            [
                "b/2",
                "b/10",
                "a",
                "ab",
                "a\u{0}",
                "a\u{0}b",
                "a\u{1}",
                "\u{0}",
                "Z",
                "ä",
                "scale-00000001",
                "scale-00000010",
                "scale-000000010",
            ]
            .map(String::from),
        );
        // Names that differ only past the first 16 bytes, in the last
        // inline bytes, and at the inline limit.
        for tail in ["", "a", "b", "ab", "zzzzzz", "zzzzzy"] {
            texts.push(format!("{}{tail}", "q".repeat(16)));
        }
        assert_eq!(std::mem::size_of::<Name>(), 24);
        let names: Vec<Name> = texts.iter().cloned().map(Name::from).collect();
        let mut by_name = BTreeMap::new();
        let mut hashed = HashMap::new();
        for (t, n) in texts.iter().zip(&names) {
            assert_eq!(n.as_str(), t);
            assert_eq!(format!("{n:?}"), format!("{t:?}"));
            let job = super::JobName(n.clone());
            by_name.insert(job.clone(), t.clone());
            hashed.insert(job, t.clone());
        }
        for t in &texts {
            assert_eq!(by_name.get(t.as_str()), Some(t));
            assert_eq!(hashed.get(t.as_str()), Some(t));
        }
        for (a, x) in texts.iter().zip(&names) {
            for (b, y) in texts.iter().zip(&names) {
                assert_eq!(x.cmp(y), a.as_str().cmp(b.as_str()), "{a:?} against {b:?}");
                assert_eq!(x == y, a == b);
            }
        }
    }
}

/// Unicode's format characters (general category Cf, as of Unicode 15.1):
/// invisible, and some reorder the text around them.
const FORMAT: &[(u32, u32)] = &[
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
];

/// Whether `c` is a format character ([`FORMAT`], sorted and disjoint:
/// one binary search).
fn is_format(c: char) -> bool {
    let c = c as u32;
    let i = FORMAT.partition_point(|&(_, hi)| hi < c);
    FORMAT.get(i).is_some_and(|&(lo, _)| lo <= c)
}
