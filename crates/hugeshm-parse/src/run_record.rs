//! The record `hugeshm run` leaves for each mapping it changed in a server:
//! `/dev/shm/hugeshm-run.<pid>.<address in hex>`, one small text file.
//!
//! ```text
//! hugeshm-run-record 1
//! pid 4242
//! start_ticks 987654
//! uid 105
//! exe /usr/lib/postgresql/15/bin/postgres
//! object anon
//! address 0x7f3a40000000
//! size 4297064448
//! requested 4297064448
//! page_size_asked 2097152
//! page_size 2097152
//! policy try
//! numa interleave=0,1
//! prefault populate_write 2 1.250000
//! resident 4297064448
//! verified_page_size 2097152
//! node 0 2148532224
//! node 1 2148532224
//! ```
//!
//! `object` is `anon`, `private` or `sysv` (then a `shmid` line follows);
//! `fallback` and `warning` lines (text, `%XX`-escaped: no control byte,
//! no `%` unescaped) appear where the mapping is not on the pages asked
//! for or something is worth saying. The server's user writes the file;
//! the doctor, often root, reads it: the parser is strict (known keys
//! only, each scalar once, every number in range, texts bounded) and its
//! errors name the line and the key, never the content.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::ParseError;

const PATH: &str = "hugeshm run record";

/// The first line of every record of this version.
pub const FIRST_LINE: &str = "hugeshm-run-record 1";

/// File name prefix of the records (in `/dev/shm`).
pub const RUN_RECORD_PREFIX: &str = "hugeshm-run.";

/// The largest record a reader accepts (a real one is under 1 KiB).
pub const MAX_RUN_RECORD_BYTES: u64 = 64 << 10;

/// The longest text value (a path, a fall-back reason).
const MAX_TEXT: usize = 4096;

/// The most `warning` lines.
const MAX_WARNINGS: usize = 8;

/// The most `node` lines, and the bound of a node id: Linux has at most
/// 1024 nodes (`MAX_NUMNODES`, `CONFIG_NODES_SHIFT` 10).
const MAX_NODES: usize = 1024;

/// What the changed mapping is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum RunObject {
    /// Shared anonymous memory (`mmap MAP_SHARED|MAP_ANONYMOUS`).
    Anon,
    /// Private anonymous memory (`mmap MAP_PRIVATE|MAP_ANONYMOUS`, `--private`).
    Private,
    /// A System V segment (`shmget` + `shmat`).
    Sysv {
        /// Its shmid.
        shmid: u64,
    },
}

impl RunObject {
    /// `anon`, `private`, `sysv`.
    pub fn as_str(&self) -> &'static str {
        match self {
            RunObject::Anon => "anon",
            RunObject::Private => "private",
            RunObject::Sysv { .. } => "sysv",
        }
    }
}

/// How the mapping was pre-faulted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunPrefault {
    /// `populate_write`, `touch` or `map_populate`.
    pub method: String,
    /// Threads that faulted it.
    pub threads: u32,
    /// Seconds it took.
    pub seconds: f64,
}

/// One record (exhaustive: the writer, `hugeshm run`'s interposer, fills
/// every field; a new field is a new record version).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The server process that made the mapping.
    pub pid: u32,
    /// Its start time (clock ticks after boot, `/proc/PID/stat` field 22):
    /// a reused pid is not taken for it.
    pub start_ticks: u64,
    /// Its uid (the record file's owner must be the same).
    pub uid: u32,
    /// Its executable.
    pub exe: String,
    /// What the mapping is.
    pub object: RunObject,
    /// Its start address in the server.
    pub address: u64,
    /// Its length as mapped (rounded up to `page_size`).
    pub size_bytes: u64,
    /// The length the server asked for.
    pub requested_bytes: u64,
    /// The page size the server asked for.
    pub page_size_asked_bytes: u64,
    /// The page size it was given.
    pub page_size_bytes: u64,
    /// `try` or `only`.
    pub policy: String,
    /// The NUMA placement (`default`, `interleave=0,1`, `bind=1`, ...).
    pub numa: String,
    /// The pre-fault, when there was one.
    pub prefault: Option<RunPrefault>,
    /// Bytes resident right after (from the server's smaps).
    pub resident_bytes: u64,
    /// The page size smaps showed right after.
    pub verified_page_size_bytes: u64,
    /// Bytes per NUMA node right after (numa_maps).
    pub nodes: BTreeMap<u32, u64>,
    /// Why it is not on the pages asked for (`--policy try`).
    pub fallback: Option<String>,
    /// What else is worth saying.
    pub warnings: Vec<String>,
}

impl RunRecord {
    /// Decimal GB/s of the pre-fault, 0 without one.
    pub fn prefault_gbps(&self) -> f64 {
        match &self.prefault {
            Some(p) if p.seconds > 0.0 => self.size_bytes as f64 / 1e9 / p.seconds,
            _ => 0.0,
        }
    }

    /// The record's file name: `hugeshm-run.<pid>.<address in hex>`.
    pub fn file_name(&self) -> String {
        file_name(self.pid, self.address)
    }

    /// The record as text (what [`parse`] reads back).
    pub fn format(&self) -> String {
        let mut s = String::new();
        let mut line = |k: &str, v: &str| {
            s.push_str(k);
            s.push(' ');
            s.push_str(v);
            s.push('\n');
        };
        line("hugeshm-run-record", "1");
        line("pid", &self.pid.to_string());
        line("start_ticks", &self.start_ticks.to_string());
        line("uid", &self.uid.to_string());
        line("exe", &escape(&self.exe));
        line("object", self.object.as_str());
        if let RunObject::Sysv { shmid } = self.object {
            line("shmid", &shmid.to_string());
        }
        line("address", &format!("{:#x}", self.address));
        line("size", &self.size_bytes.to_string());
        line("requested", &self.requested_bytes.to_string());
        line("page_size_asked", &self.page_size_asked_bytes.to_string());
        line("page_size", &self.page_size_bytes.to_string());
        line("policy", &self.policy);
        line("numa", &self.numa);
        if let Some(p) = &self.prefault {
            line(
                "prefault",
                &format!("{} {} {:.6}", p.method, p.threads, p.seconds),
            );
        }
        line("resident", &self.resident_bytes.to_string());
        line(
            "verified_page_size",
            &self.verified_page_size_bytes.to_string(),
        );
        for (n, b) in &self.nodes {
            line("node", &format!("{n} {b}"));
        }
        if let Some(f) = &self.fallback {
            line("fallback", &escape(f));
        }
        for w in self.warnings.iter().take(MAX_WARNINGS) {
            line("warning", &escape(w));
        }
        s
    }
}

/// `hugeshm-run.<pid>.<address in hex>`.
pub fn file_name(pid: u32, address: u64) -> String {
    format!("{RUN_RECORD_PREFIX}{pid}.{address:x}")
}

/// The pid and address a record's file name names; `None` for any other
/// name (extra characters, leading zeros, a name too long included).
pub fn parse_file_name(name: &str) -> Option<(u32, u64)> {
    let rest = name.strip_prefix(RUN_RECORD_PREFIX)?;
    let (pid, addr) = rest.split_once('.')?;
    let canonical = |s: &str, radix_ok: fn(char) -> bool| {
        !s.is_empty()
            && s.len() <= 16
            && s.chars().all(radix_ok)
            && (s == "0" || !s.starts_with('0'))
    };
    if !canonical(pid, |c| c.is_ascii_digit())
        || !canonical(addr, |c| matches!(c, '0'..='9' | 'a'..='f'))
    {
        return None;
    }
    Some((pid.parse().ok()?, u64::from_str_radix(addr, 16).ok()?))
}

/// `%XX` for every byte outside printable ASCII (space included as is),
/// and for `%`. (A text with control characters is written, but not read
/// back: [`parse`] refuses them; writers replace them first.)
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Undoes [`escape`]; `None` for a raw control byte, a bad escape, or text
/// that is not UTF-8 once decoded.
fn unescape(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = text.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b if (0x20..0x7f).contains(&b) => {
                out.push(b);
                i += 1;
            }
            _ => return None,
        }
    }
    String::from_utf8(out).ok()
}

/// A word of the record's own vocabulary: `[a-z0-9=,_-]`, 1 to 64 bytes.
fn word(v: &str) -> Option<String> {
    (!v.is_empty()
        && v.len() <= 64
        && v.bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'=' | b',' | b'_' | b'-')))
    .then(|| v.to_owned())
}

/// Parses a record (at most [`MAX_RUN_RECORD_BYTES`]).
pub fn parse(text: &str) -> Result<RunRecord, ParseError> {
    if text.len() as u64 > MAX_RUN_RECORD_BYTES {
        return Err(ParseError::file(
            PATH,
            format!("longer than {MAX_RUN_RECORD_BYTES} bytes"),
        ));
    }
    let mut lines = text.lines();
    if lines.next() != Some(FIRST_LINE) {
        return Err(ParseError::at(
            PATH,
            1,
            format!("the first line is not {FIRST_LINE:?}"),
        ));
    }
    let mut r = RunRecord {
        pid: 0,
        start_ticks: 0,
        uid: 0,
        exe: String::new(),
        object: RunObject::Anon,
        address: 0,
        size_bytes: 0,
        requested_bytes: 0,
        page_size_asked_bytes: 0,
        page_size_bytes: 0,
        policy: String::new(),
        numa: String::new(),
        prefault: None,
        resident_bytes: 0,
        verified_page_size_bytes: 0,
        nodes: BTreeMap::new(),
        fallback: None,
        warnings: Vec::new(),
    };
    let mut seen: Vec<&str> = Vec::new();
    let mut object: Option<&str> = None;
    let mut shmid: Option<u64> = None;
    for (i, line) in lines.enumerate() {
        let n = i + 2;
        let (key, value) = line
            .split_once(' ')
            .ok_or_else(|| ParseError::at(PATH, n, "not a `key value` line"))?;
        let bad = |what: &str| ParseError::at(PATH, n, format!("{key}: {what}"));
        let repeatable = matches!(key, "node" | "warning");
        if !repeatable {
            if seen.contains(&key) {
                return Err(bad("given twice"));
            }
            seen.push(match key {
                "pid" | "start_ticks" | "uid" | "exe" | "object" | "shmid" | "address" | "size"
                | "requested" | "page_size_asked" | "page_size" | "policy" | "numa"
                | "prefault" | "resident" | "verified_page_size" | "fallback" => key,
                _ => return Err(ParseError::at(PATH, n, "unknown key")),
            });
        }
        let num = |v: &str| -> Result<u64, ParseError> {
            if v.is_empty() || v.len() > 20 || !v.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad("not a number"));
            }
            v.parse().map_err(|_| bad("out of range"))
        };
        let small = |v: &str| -> Result<u32, ParseError> {
            u32::try_from(num(v)?).map_err(|_| bad("out of range"))
        };
        let text = |v: &str| -> Result<String, ParseError> {
            if v.len() > MAX_TEXT * 3 {
                return Err(bad("too long"));
            }
            let t = unescape(v).ok_or_else(|| bad("not escaped text"))?;
            if t.len() > MAX_TEXT {
                return Err(bad("too long"));
            }
            // Shown on terminals: no control character, escaped or not.
            if t.chars().any(char::is_control) {
                return Err(bad("a control character"));
            }
            Ok(t)
        };
        let page = |v: &str| -> Result<u64, ParseError> {
            let p = num(v)?;
            if !p.is_power_of_two() || p < 4096 {
                return Err(bad("not a page size"));
            }
            Ok(p)
        };
        match key {
            "pid" => {
                r.pid = small(value)?;
                if r.pid == 0 {
                    return Err(bad("pid 0"));
                }
            }
            "start_ticks" => r.start_ticks = num(value)?,
            "uid" => r.uid = small(value)?,
            "exe" => r.exe = text(value)?,
            "object" => {
                object = Some(match value {
                    "anon" | "private" | "sysv" => value,
                    _ => return Err(bad("not anon, private or sysv")),
                })
            }
            "shmid" => shmid = Some(num(value)?),
            "address" => {
                let hex = value.strip_prefix("0x").ok_or_else(|| bad("not 0x hex"))?;
                if hex.is_empty() || hex.len() > 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(bad("not 0x hex"));
                }
                r.address = u64::from_str_radix(hex, 16).map_err(|_| bad("out of range"))?;
            }
            "size" => r.size_bytes = num(value)?,
            "requested" => r.requested_bytes = num(value)?,
            "page_size_asked" => r.page_size_asked_bytes = page(value)?,
            "page_size" => r.page_size_bytes = page(value)?,
            "policy" => {
                r.policy = match value {
                    "try" | "only" => value.to_owned(),
                    _ => return Err(bad("not try or only")),
                }
            }
            "numa" => r.numa = word(value).ok_or_else(|| bad("not a placement"))?,
            "prefault" => {
                let mut f = value.split(' ');
                let (Some(m), Some(t), Some(s), None) = (f.next(), f.next(), f.next(), f.next())
                else {
                    return Err(bad("not `METHOD THREADS SECONDS`"));
                };
                let seconds: f64 =
                    if s.len() <= 24 && s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
                        s.parse().map_err(|_| bad("seconds not a number"))?
                    } else {
                        return Err(bad("seconds not a number"));
                    };
                r.prefault = Some(RunPrefault {
                    method: word(m).ok_or_else(|| bad("not a method"))?,
                    threads: small(t)?,
                    seconds,
                });
            }
            "resident" => r.resident_bytes = num(value)?,
            "verified_page_size" => r.verified_page_size_bytes = page(value)?,
            "node" => {
                let (node, bytes) = value
                    .split_once(' ')
                    .ok_or_else(|| bad("not `NODE BYTES`"))?;
                if r.nodes.len() >= MAX_NODES {
                    return Err(bad("too many"));
                }
                let node = small(node)?;
                if node as usize >= MAX_NODES {
                    return Err(bad("not a node id (Linux has fewer than 1024)"));
                }
                if r.nodes.insert(node, num(bytes)?).is_some() {
                    return Err(bad("a node given twice"));
                }
            }
            "fallback" => r.fallback = Some(text(value)?),
            "warning" => {
                if r.warnings.len() >= MAX_WARNINGS {
                    return Err(bad("too many"));
                }
                r.warnings.push(text(value)?);
            }
            _ => return Err(ParseError::at(PATH, n, "unknown key")),
        }
    }
    for required in [
        "pid",
        "start_ticks",
        "uid",
        "exe",
        "object",
        "address",
        "size",
        "requested",
        "page_size_asked",
        "page_size",
        "policy",
        "numa",
        "resident",
        "verified_page_size",
    ] {
        if !seen.contains(&required) {
            return Err(ParseError::file(PATH, format!("no {required} line")));
        }
    }
    r.object = match (object, shmid) {
        (Some("sysv"), Some(shmid)) => RunObject::Sysv { shmid },
        (Some("sysv"), None) => return Err(ParseError::file(PATH, "a sysv record without shmid")),
        (Some(_), Some(_)) => return Err(ParseError::file(PATH, "shmid in a record not sysv")),
        (Some("private"), None) => RunObject::Private,
        _ => RunObject::Anon,
    };
    if r.size_bytes == 0 || r.size_bytes % r.page_size_bytes != 0 {
        return Err(ParseError::file(
            PATH,
            "size is not a positive multiple of page_size",
        ));
    }
    if r.address % 4096 != 0 || r.address.checked_add(r.size_bytes).is_none() {
        return Err(ParseError::file(PATH, "address is not a mapping's"));
    }
    // Counts of the mapping's bytes are bounded by its size.
    if r.resident_bytes > r.size_bytes {
        return Err(ParseError::file(PATH, "resident is more than size"));
    }
    let placed = r
        .nodes
        .values()
        .try_fold(0u64, |sum, &b| sum.checked_add(b));
    if placed.is_none_or(|sum| sum > r.size_bytes) {
        return Err(ParseError::file(PATH, "the nodes hold more than size"));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> RunRecord {
        RunRecord {
            pid: 4242,
            start_ticks: 987654,
            uid: 105,
            exe: "/usr/lib/postgresql/15/bin/post gres é%".to_owned(),
            object: RunObject::Sysv { shmid: 32769 },
            address: 0x7f3a_4000_0000,
            size_bytes: 8 << 20,
            requested_bytes: (8 << 20) - 100,
            page_size_asked_bytes: 4096,
            page_size_bytes: 2 << 20,
            policy: "only".to_owned(),
            numa: "interleave=0,1".to_owned(),
            prefault: Some(RunPrefault {
                method: "populate_write".to_owned(),
                threads: 2,
                seconds: 0.25,
            }),
            resident_bytes: 8 << 20,
            verified_page_size_bytes: 2 << 20,
            nodes: [(0, 4 << 20), (1, 4 << 20)].into_iter().collect(),
            fallback: Some("pool short; 4 KiB".to_owned()),
            warnings: vec!["w1".to_owned()],
        }
    }

    #[test]
    fn a_record_reads_back_as_written_with_hostile_text_escaped() {
        let r = record();
        let text = r.format();
        assert!(
            text.contains("exe /usr/lib/postgresql/15/bin/post gres %C3%A9%25\n"),
            "{text}"
        );
        assert_eq!(parse(&text).unwrap(), r);
        assert_eq!(r.file_name(), "hugeshm-run.4242.7f3a40000000");
        assert_eq!(
            parse_file_name(&r.file_name()),
            Some((4242, 0x7f3a_4000_0000))
        );
        assert!((r.prefault_gbps() - (8u64 << 20) as f64 / 1e9 / 0.25).abs() < 1e-9);
    }

    #[test]
    fn file_names_other_than_ours_are_not_records() {
        for n in [
            "hugeshm-run.",
            "hugeshm-run.12",
            "hugeshm-run.12.",
            "hugeshm-run.012.1000",
            "hugeshm-run.12.01000",
            "hugeshm-run.12.1000.x",
            "hugeshm-run.12.ABC",
            "hugeshm-run.99999999999999999.1000",
            "hugeshm-memfd.x",
        ] {
            assert_eq!(parse_file_name(n), None, "{n}");
        }
        assert_eq!(parse_file_name("hugeshm-run.1.0"), Some((1, 0)));
    }

    #[test]
    fn anything_else_is_refused_naming_the_line_not_the_content() {
        let good = record().format();
        let cases: Vec<(String, &str)> = vec![
            (
                good.replacen("hugeshm-run-record 1", "hugeshm-run-record 2", 1),
                "first line",
            ),
            (format!("{good}pid 1\n"), "given twice"),
            (format!("{good}color \u{1b}[31m\n"), "unknown key"),
            (
                good.replace("size 8388608", "size 8388609"),
                "multiple of page_size",
            ),
            (
                good.replace("page_size 2097152", "page_size 3000000"),
                "not a page size",
            ),
            (good.replace("uid 105", "uid 99999999999"), "out of range"),
            (good.replace("uid 105", "uid -1"), "not a number"),
            (
                good.replace("numa interleave=0,1", "numa \u{1b}[2J"),
                "not a placement",
            ),
            (
                good.replace("fallback pool", "fallback \u{7}pool"),
                "not escaped text",
            ),
            (
                good.replace("fallback pool", "fallback %zzpool"),
                "not escaped text",
            ),
            (
                good.replace("policy only", "policy maybe"),
                "not try or only",
            ),
            (good.replace("shmid 32769\n", ""), "without shmid"),
            (
                good.replace("address 0x7f3a40000000", "address 0xffffffffffffffff"),
                "not a mapping",
            ),
            (good.replace("resident 8388608\n", ""), "no resident"),
            (format!("{good}{}", "warning w\n".repeat(8)), "too many"),
            // Counts bounded by the size and by what Linux can have.
            (
                good.replace("resident 8388608", "resident 8388609"),
                "resident is more than size",
            ),
            (
                good.replace("node 1 4194304", "node 1 4194305"),
                "the nodes hold more than size",
            ),
            (
                format!(
                    "{good}{}",
                    (2..1024)
                        .map(|n| format!("node {n} 18446744073709551615\n"))
                        .collect::<String>()
                ),
                "the nodes hold more than size",
            ),
            (
                good.replace("node 1 4194304", "node 1024 0"),
                "not a node id",
            ),
            (
                format!("{good}fallback {}\n", "x".repeat(MAX_TEXT + 1)),
                "given twice",
            ),
            (
                good.replace(
                    "warning w1",
                    &format!("warning {}", "x".repeat(MAX_TEXT + 1)),
                ),
                "too long",
            ),
            (
                format!("{good}{}", "x".repeat(MAX_RUN_RECORD_BYTES as usize)),
                "longer than",
            ),
        ];
        for (text, want) in cases {
            let e = parse(&text).unwrap_err().to_string();
            assert!(e.contains(want), "{want}: {e}");
            assert!(!e.contains('\u{1b}') && !e.contains('\u{7}'), "{e}");
        }
    }
}
