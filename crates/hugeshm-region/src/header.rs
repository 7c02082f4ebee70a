//! The region header: the first 4 KiB of every region.
//!
//! Every region `create` makes (every backend, named or not) starts with a
//! header page; the caller's data starts at [`HEADER_BYTES`]
//! ([`Region::data_offset`](crate::Region::data_offset)) and runs to the
//! end of the mapping ([`Region::data_len`](crate::Region::data_len) =
//! size − 4 KiB). The header counts in the region's size: a 1 GiB region
//! on 1 GiB pages stays one page, with 1 GiB − 4 KiB of data. (Putting the
//! header anywhere else would cost a whole extra huge page.) Keeping it in
//! the first 4 KiB rather than the first huge page leaves the data
//! 4 KiB-aligned but not huge-page-aligned.
//!
//! ## Layout, version 1 (little-endian)
//!
//! | offset | bytes | field |
//! |---:|---:|---|
//! | 0 | 8 | magic `HUGESHM\0` |
//! | 8 | 4 | layout version (1) |
//! | 12 | 4 | header bytes = data offset (4096) |
//! | 16 | 4 | state: 0 not written, 1 initializing, 2 ready |
//! | 20 | 4 | backend: 1 sysv, 2 memfd, 3 hugetlbfs, 4 posix, 5 anon |
//! | 24 | 4 | flags: bit 0 hugetlb, bit 1 transparent huge pages, bit 2 kept (made to outlive its creator) |
//! | 28 | 4 | creator pid |
//! | 32 | 8 | creator start time (clock ticks after boot, `/proc/PID/stat` field 22) |
//! | 40 | 8 | creation time, nanoseconds since the Unix epoch |
//! | 48 | 8 | size in bytes (the whole region, header included) |
//! | 56 | 8 | bytes the creator asked for |
//! | 64 | 8 | page size in bytes |
//! | 72 | 8 | generation: a random nonce, new for every region |
//! | 80 | 4 | creator uid |
//! | 84 | 4 | name length (0: anonymous) |
//! | 88 | 256 | name, UTF-8, zero padded |
//! | 344 | 8 | checksum: FNV-1a 64 of bytes 0..344 with the state word as 0 |
//! | 352 | 3744 | reserved, zero |
//!
//! `create` writes every field but the state, then stores state 1
//! (*initializing*) before the pre-fault, and 2 (*ready*) once the region
//! is verified (and locked, if asked). Each state change is one aligned
//! 32-bit atomic store with release ordering; readers load the state with
//! acquire ordering before they read the other fields, so a reader that
//! sees *initializing* or *ready* sees the complete header.
//!
//! The creator's start time next to its pid tells a live creator from a
//! dead one whose pid was reused. Pids are those of the creator's pid
//! namespace: processes in other pid namespaces cannot judge liveness
//! (they see [`Liveness::Unknown`] or a wrong process), as with
//! PostgreSQL's interlock.
//!
//! What a reader concludes from the bytes: all zero → the
//! header was never written (the creator died right after creating the
//! object, or is about to write it); another magic → not a hugeshm region;
//! a newer layout version → refused with both versions (checked before the
//! checksum, which a newer layout may define differently); a checksum or
//! field that does not add up → damaged.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::model::Backend;

/// Bytes reserved for the header at the start of every region: the data
/// offset.
pub const HEADER_BYTES: u64 = 4096;

/// The layout version this library writes and the newest it reads.
pub const LAYOUT_VERSION: u32 = 1;

/// The first 8 bytes of every region.
pub const MAGIC: [u8; 8] = *b"HUGESHM\0";

/// Offset of the 32-bit state word.
pub(crate) const STATE_OFFSET: usize = 16;

/// Bytes of the header that carry fields (the rest of the 4 KiB is zero).
pub(crate) const USED_BYTES: usize = 352;

const CHECKSUM_OFFSET: usize = 344;
const NAME_OFFSET: usize = 88;
const NAME_CAPACITY: usize = 256;

const STATE_NONE: u32 = 0;
const STATE_INITIALIZING: u32 = 1;
const STATE_READY: u32 = 2;

const FLAG_HUGETLB: u32 = 1;
const FLAG_THP: u32 = 2;
const FLAG_KEPT: u32 = 4;

/// Where a region is in its creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HeaderState {
    /// Created, being pre-faulted and verified: not ready for use.
    Initializing,
    /// Created, pre-faulted and verified.
    Ready,
}

impl HeaderState {
    /// `initializing` or `ready`.
    pub fn as_str(self) -> &'static str {
        match self {
            HeaderState::Initializing => "initializing",
            HeaderState::Ready => "ready",
        }
    }

    pub(crate) fn word(self) -> u32 {
        match self {
            HeaderState::Initializing => STATE_INITIALIZING,
            HeaderState::Ready => STATE_READY,
        }
    }
}

impl std::fmt::Display for HeaderState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The header of a region, as written by its creator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RegionHeader {
    /// Layout version.
    pub layout_version: u32,
    /// Creation state.
    pub state: HeaderState,
    /// Where the data starts (4096).
    pub data_offset: u64,
    /// The backend the creator used.
    pub backend: Backend,
    /// Whether the memory comes from the hugetlb pool.
    pub hugetlb: bool,
    /// Whether the creator asked for transparent huge pages (tmpfs).
    pub thp: bool,
    /// Made to outlive its creator (`hugeshm create` without `--hold`,
    /// [`RegionBuilder::keep`](crate::RegionBuilder::keep)): nobody holding
    /// it is how it waits for its users, not a crash.
    #[serde(default)]
    pub kept: bool,
    /// The creating process (in its pid namespace).
    pub creator_pid: u32,
    /// Its start time, clock ticks after boot: with the pid, identifies the
    /// process even after the pid is reused.
    pub creator_start_ticks: u64,
    /// Its uid.
    pub creator_uid: u32,
    /// Creation time, nanoseconds since the Unix epoch.
    pub created_unix_ns: u64,
    /// Size of the region in bytes, header included.
    pub size_bytes: u64,
    /// Bytes the creator asked for.
    pub requested_bytes: u64,
    /// Page size in bytes.
    pub page_size_bytes: u64,
    /// A random nonce, new for every region: tells two regions of the same
    /// name apart (hex in JSON, where 64-bit integers lose precision).
    #[serde(with = "hex_u64")]
    pub generation: u64,
    /// The region's name (`None` for an anonymous region).
    pub name: Option<String>,
}

impl RegionHeader {
    /// Data bytes: `size_bytes - data_offset`.
    pub fn data_bytes(&self) -> u64 {
        self.size_bytes.saturating_sub(self.data_offset)
    }

    /// The creation time.
    pub fn created(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_nanos(self.created_unix_ns)
    }

    /// Whether the creating process still runs (same pid and start time).
    pub fn creator_liveness(&self) -> Liveness {
        liveness(self.creator_pid, Some(self.creator_start_ticks))
    }
}

/// Serializes a `u64` as 16 hex digits.
mod hex_u64 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{v:016x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let s = String::deserialize(d)?;
        u64::from_str_radix(s.trim_start_matches("0x"), 16).map_err(serde::de::Error::custom)
    }
}

/// What the first bytes of an object say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decoded {
    /// No header yet: the magic and state are zero.
    Unwritten,
    /// Not a hugeshm region: the magic differs (shown as hex).
    Foreign {
        /// The first 8 bytes, hex.
        magic: String,
    },
    /// A hugeshm header of a newer layout.
    Newer {
        /// Its version.
        version: u32,
    },
    /// Our magic and version, but fields that do not add up.
    Damaged(String),
    /// A complete header.
    Valid(RegionHeader),
}

fn backend_code(b: Backend) -> u32 {
    match b {
        Backend::Sysv => 1,
        Backend::Memfd => 2,
        Backend::Hugetlbfs => 3,
        Backend::Posix => 4,
        Backend::Anon => 5,
        Backend::Dax => 6,
    }
}

fn backend_from_code(c: u32) -> Option<Backend> {
    Some(match c {
        1 => Backend::Sysv,
        2 => Backend::Memfd,
        3 => Backend::Hugetlbfs,
        4 => Backend::Posix,
        5 => Backend::Anon,
        6 => Backend::Dax,
        _ => return None,
    })
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn checksum(bytes: &[u8; USED_BYTES]) -> u64 {
    let mut copy = [0u8; CHECKSUM_OFFSET];
    copy.copy_from_slice(&bytes[..CHECKSUM_OFFSET]);
    copy[STATE_OFFSET..STATE_OFFSET + 4].fill(0);
    fnv1a64(&copy)
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

/// The header bytes with the state word 0 (the state is stored on its own,
/// atomically).
pub(crate) fn encode(h: &RegionHeader) -> [u8; USED_BYTES] {
    let mut b = [0u8; USED_BYTES];
    b[0..8].copy_from_slice(&MAGIC);
    b[8..12].copy_from_slice(&h.layout_version.to_le_bytes());
    b[12..16].copy_from_slice(&(h.data_offset as u32).to_le_bytes());
    b[20..24].copy_from_slice(&backend_code(h.backend).to_le_bytes());
    let flags = if h.hugetlb { FLAG_HUGETLB } else { 0 }
        | if h.thp { FLAG_THP } else { 0 }
        | if h.kept { FLAG_KEPT } else { 0 };
    b[24..28].copy_from_slice(&flags.to_le_bytes());
    b[28..32].copy_from_slice(&h.creator_pid.to_le_bytes());
    b[32..40].copy_from_slice(&h.creator_start_ticks.to_le_bytes());
    b[40..48].copy_from_slice(&h.created_unix_ns.to_le_bytes());
    b[48..56].copy_from_slice(&h.size_bytes.to_le_bytes());
    b[56..64].copy_from_slice(&h.requested_bytes.to_le_bytes());
    b[64..72].copy_from_slice(&h.page_size_bytes.to_le_bytes());
    b[72..80].copy_from_slice(&h.generation.to_le_bytes());
    b[80..84].copy_from_slice(&h.creator_uid.to_le_bytes());
    let name = h.name.as_deref().unwrap_or("").as_bytes();
    let n = name.len().min(NAME_CAPACITY);
    b[84..88].copy_from_slice(&(n as u32).to_le_bytes());
    b[NAME_OFFSET..NAME_OFFSET + n].copy_from_slice(&name[..n]);
    let sum = checksum(&b);
    b[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 8].copy_from_slice(&sum.to_le_bytes());
    b
}

/// Reads a header from the first bytes of an object. `bytes` may be
/// shorter than [`USED_BYTES`] (a short file): missing bytes read as zero.
pub(crate) fn decode(bytes: &[u8]) -> Decoded {
    let mut b = [0u8; USED_BYTES];
    let n = bytes.len().min(USED_BYTES);
    b[..n].copy_from_slice(&bytes[..n]);
    let state = u32_at(&b, STATE_OFFSET);
    if b[0..8] != MAGIC {
        if b[0..8].iter().all(|&x| x == 0) && state == STATE_NONE {
            return Decoded::Unwritten;
        }
        let magic: String = b[0..8].iter().map(|x| format!("{x:02x}")).collect();
        return Decoded::Foreign { magic };
    }
    if state == STATE_NONE {
        // The creator is writing the fields (or died doing so).
        return Decoded::Unwritten;
    }
    let version = u32_at(&b, 8);
    if version > LAYOUT_VERSION {
        return Decoded::Newer { version };
    }
    if version == 0 {
        return Decoded::Damaged("layout version 0".to_owned());
    }
    let stored = u64_at(&b, CHECKSUM_OFFSET);
    let computed = checksum(&b);
    if stored != computed {
        return Decoded::Damaged(format!(
            "header checksum {stored:016x} does not match its contents ({computed:016x})"
        ));
    }
    let state = match state {
        STATE_INITIALIZING => HeaderState::Initializing,
        STATE_READY => HeaderState::Ready,
        other => return Decoded::Damaged(format!("unknown state {other}")),
    };
    let Some(backend) = backend_from_code(u32_at(&b, 20)) else {
        return Decoded::Damaged(format!("unknown backend code {}", u32_at(&b, 20)));
    };
    let data_offset = u64::from(u32_at(&b, 12));
    let size = u64_at(&b, 48);
    let page = u64_at(&b, 64);
    if data_offset < USED_BYTES as u64 || size < data_offset {
        return Decoded::Damaged(format!(
            "data offset {data_offset} does not fit a region of {size} bytes"
        ));
    }
    if page == 0 || !page.is_power_of_two() || size % page != 0 {
        return Decoded::Damaged(format!(
            "size {size} is not a multiple of the page size {page}"
        ));
    }
    let name_len = u32_at(&b, 84) as usize;
    if name_len > NAME_CAPACITY {
        return Decoded::Damaged(format!("name length {name_len}"));
    }
    let name = match std::str::from_utf8(&b[NAME_OFFSET..NAME_OFFSET + name_len]) {
        Ok("") => None,
        Ok(s) => Some(s.to_owned()),
        Err(_) => return Decoded::Damaged("name is not UTF-8".to_owned()),
    };
    let flags = u32_at(&b, 24);
    Decoded::Valid(RegionHeader {
        layout_version: version,
        state,
        data_offset,
        backend,
        hugetlb: flags & FLAG_HUGETLB != 0,
        thp: flags & FLAG_THP != 0,
        kept: flags & FLAG_KEPT != 0,
        creator_pid: u32_at(&b, 28),
        creator_start_ticks: u64_at(&b, 32),
        creator_uid: u32_at(&b, 80),
        created_unix_ns: u64_at(&b, 40),
        size_bytes: size,
        requested_bytes: u64_at(&b, 56),
        page_size_bytes: page,
        generation: u64_at(&b, 72),
        name,
    })
}

/// A new header for a region this process creates (state initializing;
/// `hugetlb`, `thp` and `kept` false until the caller sets them).
pub(crate) fn new_header(
    name: Option<&str>,
    backend: Backend,
    size_bytes: u64,
    requested_bytes: u64,
    page_size_bytes: u64,
    generation: u64,
) -> RegionHeader {
    let pid = std::process::id();
    RegionHeader {
        layout_version: LAYOUT_VERSION,
        state: HeaderState::Initializing,
        data_offset: HEADER_BYTES,
        backend,
        hugetlb: false,
        thp: false,
        kept: false,
        creator_pid: pid,
        creator_start_ticks: own_start_ticks(),
        creator_uid: rustix::process::geteuid().as_raw(),
        created_unix_ns: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
        size_bytes,
        requested_bytes,
        page_size_bytes,
        generation,
        name: name.map(str::to_owned),
    }
}

/// A random nonce (never 0).
pub(crate) fn new_generation() -> u64 {
    let mut b = [0u8; 8];
    if rustix::rand::getrandom(&mut b[..], rustix::rand::GetRandomFlags::empty()).is_err() {
        // No entropy source: time and pid still tell regions apart.
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        b = (t ^ (u64::from(std::process::id()) << 40)).to_le_bytes();
    }
    u64::from_le_bytes(b).max(1)
}

// ---------------------------------------------------------------------------
// Process liveness
// ---------------------------------------------------------------------------

/// Whether a process is alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Liveness {
    /// Running (same pid and, when known, same start time).
    Alive,
    /// Gone: no such pid, a zombie, or another process under its pid.
    Dead,
    /// Cannot tell (`/proc/PID/stat` unreadable). Treated as alive
    /// wherever a wrong guess would destroy something.
    Unknown,
}

impl Liveness {
    /// Alive or unknown: never treat as gone.
    pub fn maybe_alive(self) -> bool {
        self != Liveness::Dead
    }
}

/// State letter and start time (field 22) from `/proc/PID/stat` text.
pub(crate) fn parse_stat(text: &str) -> Option<(char, u64)> {
    // The command (field 2) is in parentheses and may contain anything,
    // spaces and parentheses included: fields resume after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // Field 3 is the state; field 22 (starttime) is 19 fields further on.
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// This process's start time in clock ticks after boot (0 if unknown).
pub(crate) fn own_start_ticks() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|t| parse_stat(&t))
        .map(|(_, s)| s)
        .unwrap_or(0)
}

/// Whether process `pid` (started at `start_ticks`, if known) is alive.
pub(crate) fn liveness(pid: u32, start_ticks: Option<u64>) -> Liveness {
    if pid == 0 {
        return Liveness::Unknown;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(text) => match parse_stat(&text) {
            Some(('Z' | 'X' | 'x', _)) => Liveness::Dead,
            Some((_, start)) => match start_ticks {
                Some(want) if want != 0 && want != start => Liveness::Dead,
                _ => Liveness::Alive,
            },
            None => Liveness::Unknown,
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Liveness::Dead,
        Err(_) => Liveness::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RegionHeader {
        RegionHeader {
            layout_version: 1,
            state: HeaderState::Ready,
            data_offset: 4096,
            backend: Backend::Sysv,
            hugetlb: true,
            thp: false,
            kept: false,
            creator_pid: 4242,
            creator_start_ticks: 123_456,
            creator_uid: 1000,
            created_unix_ns: 1_700_000_000_123_456_789,
            size_bytes: 6 << 20,
            requested_bytes: (6 << 20) - 5,
            page_size_bytes: 2 << 20,
            generation: 0xdead_beef_0123_4567,
            name: Some("sga".to_owned()),
        }
    }

    fn with_state(mut b: [u8; USED_BYTES], s: u32) -> [u8; USED_BYTES] {
        b[STATE_OFFSET..STATE_OFFSET + 4].copy_from_slice(&s.to_le_bytes());
        b
    }

    #[test]
    fn roundtrip_and_state_outside_checksum() {
        let h = sample();
        let b = encode(&h);
        assert_eq!(&b[..8], b"HUGESHM\0");
        // Encoded with state 0: not yet published.
        assert_eq!(decode(&b), Decoded::Unwritten);
        assert_eq!(decode(&with_state(b, 2)), Decoded::Valid(h.clone()));
        let Decoded::Valid(init) = decode(&with_state(b, 1)) else {
            panic!()
        };
        assert_eq!(init.state, HeaderState::Initializing);
        assert_eq!(init.data_bytes(), (6 << 20) - 4096);
        let mut anon = sample();
        anon.name = None;
        assert_eq!(
            decode(&with_state(encode(&anon), 2)),
            Decoded::Valid(anon.clone())
        );
        let mut kept = sample();
        kept.kept = true;
        let b = encode(&kept);
        assert_eq!(u32_at(&b, 24), FLAG_HUGETLB | FLAG_KEPT);
        assert_eq!(decode(&with_state(b, 2)), Decoded::Valid(kept));
    }

    #[test]
    fn zero_foreign_newer_damaged() {
        assert_eq!(decode(&[0u8; 4096]), Decoded::Unwritten);
        assert_eq!(decode(&[]), Decoded::Unwritten);
        let Decoded::Foreign { magic } = decode(b"PGSHMEM!and more") else {
            panic!()
        };
        assert_eq!(magic, "504753484d454d21");
        // A foreign object that happens to start with zeros is still
        // foreign once anything but the magic/state is set.
        let mut z = [0u8; 64];
        z[16] = 7;
        assert!(matches!(decode(&z), Decoded::Foreign { .. }));

        let mut b = with_state(encode(&sample()), 2);
        b[8..12].copy_from_slice(&2u32.to_le_bytes());
        // Newer wins over the checksum (a newer layout may sum differently).
        assert_eq!(decode(&b), Decoded::Newer { version: 2 });

        let mut b = with_state(encode(&sample()), 2);
        b[50] ^= 1;
        assert!(matches!(decode(&b), Decoded::Damaged(m) if m.contains("checksum")));
        let b = with_state(encode(&sample()), 9);
        assert!(matches!(decode(&b), Decoded::Damaged(m) if m.contains("state 9")));
    }

    #[test]
    fn stat_fields() {
        let line =
            "4242 (a b) c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_stat(line), Some(('S', 987_654)));
        assert_eq!(parse_stat("garbage"), None);
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        // (The state is the main thread's: running or sleeping.)
        let (_, start) = parse_stat(&own).unwrap();
        assert_eq!(start, own_start_ticks());
        assert_eq!(liveness(std::process::id(), Some(start)), Liveness::Alive);
        assert_eq!(
            liveness(std::process::id(), Some(start + 1)),
            Liveness::Dead
        );
        assert_eq!(liveness(u32::MAX - 1, None), Liveness::Dead);
        assert_ne!(new_generation(), new_generation());
    }

    #[test]
    fn json_generation_is_hex() {
        let j = serde_json::to_value(sample()).unwrap();
        assert_eq!(j["generation"], "deadbeef01234567");
        assert_eq!(j["state"], "ready");
        let back: RegionHeader = serde_json::from_value(j).unwrap();
        assert_eq!(back, sample());
    }
}
