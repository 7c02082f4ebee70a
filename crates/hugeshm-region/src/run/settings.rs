//! `HUGESHM_RUN`: what `hugeshm run` asks of the interposer, as one
//! environment variable.
//!
//! ```text
//! HUGESHM_RUN=v1;target=path:/usr/lib/postgresql/15/bin/postgres;min=67108864;page=2097152;policy=only;numa=interleave;prefault=all;private=0
//! ```
//!
//! (`;fallback=thp` follows where `--fallback thp` was given.)
//!
//! The value comes from the environment of a process that may be root or
//! the server's user, so it is read strictly: the `v1` mark first, then
//! `key=value` fields separated by `;`, each key once, only known keys,
//! every number in range, at most [`MAX_SETTINGS_BYTES`]. `target` is
//! required; the others default to what `hugeshm run` defaults to.

use std::fmt;
use std::path::PathBuf;

use hugeshm_parse::size::format_bytes;

use crate::model::{Placement, Policy};

/// The environment variable the settings travel in.
pub const SETTINGS_ENV: &str = "HUGESHM_RUN";

/// The longest value read.
pub const MAX_SETTINGS_BYTES: usize = 8192;

/// The smallest `--min-size` (smaller mappings are a server's own
/// bookkeeping, thread stacks and the like: never changed).
pub const MIN_MIN_BYTES: u64 = 2 << 20;

/// The default `--min-size`: 64 MiB.
pub const DEFAULT_MIN_BYTES: u64 = 64 << 20;

/// The most pre-fault threads.
pub const MAX_THREADS: usize = 4096;

/// Which process the interposer acts in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The process whose executable (`/proc/self/exe`) is this canonical
    /// path.
    Path(PathBuf),
    /// The process whose executable's file name is this.
    Name(String),
}

impl Target {
    /// Whether `exe` (what `/proc/self/exe` reads, as bytes) is the target.
    pub fn matches(&self, exe: &[u8]) -> bool {
        use std::os::unix::ffi::OsStrExt;
        match self {
            Target::Path(p) => p.as_os_str().as_bytes() == exe,
            Target::Name(n) => {
                let base = exe.rsplit(|b| *b == b'/').next().unwrap_or(exe);
                n.as_bytes() == base
            }
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Path(p) => write!(f, "{}", p.display()),
            Target::Name(n) => f.write_str(n),
        }
    }
}

/// `--page-size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunPageSize {
    /// The host's default huge page size (`Hugepagesize`), or the huge
    /// page size the server asked for where it asks for one; base pages on
    /// a host without huge pages. What `hugeshm run` defaults to.
    Default,
    /// What the server asked for.
    Keep,
    /// This huge page size (bytes).
    Huge(u64),
}

impl fmt::Display for RunPageSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunPageSize::Default => f.write_str("default"),
            RunPageSize::Keep => f.write_str("keep"),
            RunPageSize::Huge(p) => f.write_str(&format_bytes(*p)),
        }
    }
}

/// `--prefault`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunPrefault {
    /// No pre-fault: pages are faulted as the server touches them.
    Off,
    /// `MADV_POPULATE_WRITE` with this many threads (`None`: one per CPU
    /// of the nodes the mapping is placed on, else every CPU the server
    /// may use).
    Threads(Option<usize>),
    /// One `mmap` with `MAP_POPULATE`: the kernel faults it all on the
    /// calling thread (what PostgreSQL's proposed `shmem_populate` does).
    Populate,
}

/// What the interposer does in the target.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Settings {
    /// The process to act in.
    pub target: Target,
    /// Mappings and segments of at least this many bytes are changed.
    pub min_bytes: u64,
    /// The page size to put them on.
    pub page_size: RunPageSize,
    /// `try` (fall back and say so) or `only` (fail the call with `ENOMEM`).
    pub policy: Policy,
    /// Where their pages go (`mbind` before the first touch).
    pub numa: Placement,
    /// Whether and how to pre-fault them before the call returns.
    pub prefault: RunPrefault,
    /// Private anonymous mappings too (an InnoDB buffer pool).
    pub private: bool,
    /// After a `try` fell back to base pages, collapse a shared mapping
    /// onto 2 MiB transparent huge pages once it is pre-faulted
    /// (`--fallback thp`).
    pub fallback_thp: bool,
}

impl Settings {
    /// Settings with the defaults for `target`.
    pub fn new(target: Target) -> Self {
        Settings {
            target,
            min_bytes: DEFAULT_MIN_BYTES,
            page_size: RunPageSize::Default,
            policy: Policy::Try,
            numa: Placement::Default,
            prefault: RunPrefault::Off,
            private: false,
            fallback_thp: false,
        }
    }

    /// The environment variable's value ([`Settings::parse`] reads it
    /// back).
    pub fn encode(&self) -> String {
        let target = match &self.target {
            Target::Path(p) => format!("path:{}", escape(p.as_os_str().as_encoded_bytes())),
            Target::Name(n) => format!("name:{}", escape(n.as_bytes())),
        };
        let page = match self.page_size {
            RunPageSize::Default => "default".to_owned(),
            RunPageSize::Keep => "keep".to_owned(),
            RunPageSize::Huge(p) => p.to_string(),
        };
        let prefault = match self.prefault {
            RunPrefault::Off => "off".to_owned(),
            RunPrefault::Threads(None) => "all".to_owned(),
            RunPrefault::Threads(Some(n)) => n.to_string(),
            RunPrefault::Populate => "populate".to_owned(),
        };
        let fallback = if self.fallback_thp {
            ";fallback=thp"
        } else {
            ""
        };
        format!(
            "v1;target={target};min={};page={page};policy={};numa={};prefault={prefault};private={}{fallback}",
            self.min_bytes,
            self.policy,
            self.numa,
            u8::from(self.private)
        )
    }

    /// Reads [`Settings::encode`]'s text; the error says which field is
    /// wrong (never quoting more than the key).
    pub fn parse(text: &str) -> Result<Settings, String> {
        if text.len() > MAX_SETTINGS_BYTES {
            return Err(format!("longer than {MAX_SETTINGS_BYTES} bytes"));
        }
        let mut fields = text.split(';');
        if fields.next() != Some("v1") {
            return Err("does not start with v1".to_owned());
        }
        let mut s = Settings::new(Target::Name(String::new()));
        let mut seen: Vec<&str> = Vec::new();
        for field in fields {
            let (key, value) = field
                .split_once('=')
                .ok_or_else(|| "a field is not key=value".to_owned())?;
            let key = match key {
                "target" | "min" | "page" | "policy" | "numa" | "prefault" | "private"
                | "fallback" => key,
                _ => return Err("unknown key".to_owned()),
            };
            if seen.contains(&key) {
                return Err(format!("{key} given twice"));
            }
            seen.push(key);
            let bad = |what: &str| format!("{key}: {what}");
            let number = |v: &str| -> Result<u64, String> {
                if v.is_empty() || v.len() > 20 || !v.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad("not a number"));
                }
                v.parse().map_err(|_| bad("out of range"))
            };
            match key {
                "target" => {
                    s.target = match value.split_once(':') {
                        Some(("path", p)) => {
                            let p = unescape(p).ok_or_else(|| bad("not escaped text"))?;
                            let p = PathBuf::from(std::ffi::OsString::from(
                                String::from_utf8(p).map_err(|_| bad("not UTF-8"))?,
                            ));
                            if !p.is_absolute() {
                                return Err(bad("not an absolute path"));
                            }
                            Target::Path(p)
                        }
                        Some(("name", n)) => {
                            let n = String::from_utf8(
                                unescape(n).ok_or_else(|| bad("not escaped text"))?,
                            )
                            .map_err(|_| bad("not UTF-8"))?;
                            if n.is_empty() || n.contains('/') || n.len() > 255 {
                                return Err(bad("not a file name"));
                            }
                            Target::Name(n)
                        }
                        _ => return Err(bad("not path:PATH or name:NAME")),
                    }
                }
                "min" => {
                    s.min_bytes = number(value)?;
                    if !(MIN_MIN_BYTES..=1 << 50).contains(&s.min_bytes) {
                        return Err(bad("out of range"));
                    }
                }
                "page" => {
                    s.page_size = if value == "keep" {
                        RunPageSize::Keep
                    } else if value == "default" {
                        RunPageSize::Default
                    } else {
                        let p = number(value)?;
                        if !p.is_power_of_two() || !((2 << 20)..=(16 << 30)).contains(&p) {
                            return Err(bad("not a huge page size"));
                        }
                        RunPageSize::Huge(p)
                    }
                }
                "policy" => {
                    s.policy = match value {
                        "try" => Policy::Try,
                        "only" => Policy::Only,
                        _ => return Err(bad("not try or only")),
                    }
                }
                "numa" => {
                    if value.len() > 256 {
                        return Err(bad("too long"));
                    }
                    s.numa = value.parse().map_err(|_| bad("not a placement"))?;
                    let nodes = match &s.numa {
                        Placement::Bind(n)
                        | Placement::Interleave(n)
                        | Placement::WeightedInterleave(n) => n.clone(),
                        Placement::Preferred(n) => vec![*n],
                        Placement::PerNode => return Err(bad("per-node is not for run")),
                        _ => Vec::new(),
                    };
                    if nodes.len() > 64 || nodes.iter().any(|&n| n >= 1024) {
                        return Err(bad("out of range"));
                    }
                }
                "fallback" => {
                    s.fallback_thp = match value {
                        "base" => false,
                        "thp" => true,
                        _ => return Err(bad("not base or thp")),
                    }
                }
                "prefault" => {
                    s.prefault = match value {
                        "off" => RunPrefault::Off,
                        "all" => RunPrefault::Threads(None),
                        "populate" => RunPrefault::Populate,
                        v => {
                            let n = number(v)?;
                            if !(1..=MAX_THREADS as u64).contains(&n) {
                                return Err(bad("out of range"));
                            }
                            RunPrefault::Threads(Some(n as usize))
                        }
                    }
                }
                "private" => {
                    s.private = match value {
                        "0" => false,
                        "1" => true,
                        _ => return Err(bad("not 0 or 1")),
                    }
                }
                _ => unreachable!("keys checked above"),
            }
        }
        if !seen.contains(&"target") {
            return Err("no target".to_owned());
        }
        Ok(s)
    }
}

/// `%XX` for every byte but `[A-Za-z0-9/._+-]`.
fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"/._+-".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn unescape(text: &str) -> Option<Vec<u8>> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                out.push(u8::from_str_radix(text.get(i + 1..i + 3)?, 16).ok()?);
                i += 3;
            }
            c if c.is_ascii_alphanumeric() || b"/._+-".contains(&c) => {
                out.push(c);
                i += 1;
            }
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_read_back_as_written() {
        let mut s = Settings::new(Target::Path("/opt/my server;x=1/bin/pg%".into()));
        s.min_bytes = 128 << 20;
        s.page_size = RunPageSize::Huge(1 << 30);
        s.policy = Policy::Only;
        s.numa = "interleave=0,1".parse().unwrap();
        s.prefault = RunPrefault::Threads(Some(8));
        s.private = true;
        s.fallback_thp = true;
        let text = s.encode();
        assert!(text.ends_with(";fallback=thp"), "{text}");
        assert_eq!(Settings::parse(&text).unwrap(), s);
        for (t, p) in [
            (Target::Name("postgres".into()), RunPrefault::Populate),
            (Target::Name("mysqld".into()), RunPrefault::Threads(None)),
            (Target::Name("x".into()), RunPrefault::Off),
        ] {
            let mut s = Settings::new(t);
            s.prefault = p;
            assert_eq!(Settings::parse(&s.encode()).unwrap(), s);
        }
        let t = Target::Name("postgres".into());
        assert!(t.matches(b"/usr/lib/postgresql/15/bin/postgres"));
        assert!(!t.matches(b"/usr/lib/postgresql/15/bin/pg_ctl"));
        let t = Target::Path("/usr/bin/a".into());
        assert!(t.matches(b"/usr/bin/a") && !t.matches(b"/usr/bin/a (deleted)"));
    }

    #[test]
    fn anything_else_is_refused() {
        let good = "v1;target=name:postgres";
        assert!(Settings::parse(good).is_ok());
        for (text, want) in [
            ("", "v1"),
            ("v2;target=name:x", "v1"),
            ("v1", "no target"),
            ("v1;target=name:x;target=name:y", "given twice"),
            ("v1;target=name:x;colour=red", "unknown key"),
            ("v1;target=name:x;min", "key=value"),
            ("v1;target=name:a/b", "not a file name"),
            ("v1;target=path:relative", "absolute"),
            ("v1;target=path:/a b", "escaped"),
            ("v1;target=name:%zz", "escaped"),
            ("v1;target=name:x;min=1024", "out of range"),
            ("v1;target=name:x;min=-1", "not a number"),
            (
                "v1;target=name:x;min=99999999999999999999999",
                "not a number",
            ),
            ("v1;target=name:x;page=3000000", "huge page size"),
            ("v1;target=name:x;page=4096", "huge page size"),
            ("v1;target=name:x;policy=off", "try or only"),
            ("v1;target=name:x;numa=per-node", "per-node"),
            ("v1;target=name:x;numa=bind=5000", "out of range"),
            ("v1;target=name:x;numa=sideways", "placement"),
            ("v1;target=name:x;prefault=0", "out of range"),
            ("v1;target=name:x;prefault=5000", "out of range"),
            ("v1;target=name:x;private=yes", "0 or 1"),
            ("v1;target=name:x;fallback=hugetlb", "base or thp"),
        ] {
            let e = Settings::parse(text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        let long = format!("v1;target=name:{}", "x".repeat(MAX_SETTINGS_BYTES));
        assert!(Settings::parse(&long).unwrap_err().contains("longer"));
    }
}
