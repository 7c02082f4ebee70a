//! `/proc/PID/numa_maps`.
//!
//! One mapping per line: the start address (hex), the memory policy, then
//! blank-separated `key=value` items and bare flags:
//!
//! ```text
//! 7fc6ada00000 default file=/SYSV0000abcd\040(deleted) huge dirty=1 N0=1 kernelpagesize_kB=2048
//! 7f0000000000 bind:0-1 file=/SYSV00000000\040(deleted) huge dirty=512 N0=256 N1=256 kernelpagesize_kB=2048
//! 55f15da58000 default file=/usr/bin/cat mapped=2 N0=2 kernelpagesize_kB=4
//! 7ffd1000 interleave:0-3 anon=3 dirty=3 active=0 N0=3 kernelpagesize_kB=4
//! ```
//!
//! The policy is printed by the kernel's `mpol_to_str`: a mode name
//! (`default`, `prefer`, `bind`, `interleave`, `weighted interleave`, `local`,
//! `prefer (many)`), optional flags after `=` (`static`, `relative`,
//! `balancing`, joined by `|`) and an optional node list after `:`. Two mode
//! names contain a space, so the policy is one or more tokens; see [`parse`].
//!
//! Page counts (`anon=`, `dirty=`, `N<node>=`, ...) are in pages of
//! `kernelpagesize_kB` — huge pages for hugetlb mappings.

use crate::error::{kb_to_bytes, parse_u64, ParseError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

const PATH: &str = "/proc/PID/numa_maps";

/// The page size assumed when `kernelpagesize_kB` is absent.
const DEFAULT_PAGE_SIZE: u64 = 4096;

/// One line of `/proc/PID/numa_maps`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct NumaMapsEntry {
    /// Start address of the mapping.
    pub start: u64,
    /// The memory policy exactly as printed (`default`, `bind:0-1`,
    /// `interleave=static:0-3`, `prefer (many):1,3`, `weighted interleave:0-1`, ...).
    pub policy: String,
    /// `file=`: the backing file with the kernel's `\NNN` octal escapes
    /// decoded (`\040` is a space). A ` (deleted)` suffix is kept as printed.
    pub file: Option<String>,
    /// `huge`: a hugetlb mapping.
    pub huge: bool,
    /// `heap`: the process heap.
    pub heap: bool,
    /// `stack`: the main thread's stack.
    pub stack: bool,
    /// `anon=`: anonymous pages.
    pub anon_pages: Option<u64>,
    /// `dirty=`: dirty pages.
    pub dirty_pages: Option<u64>,
    /// `mapped=`: pages mapped (when they differ from anon and dirty pages).
    pub mapped_pages: Option<u64>,
    /// `N<node>=<pages>`: pages on each NUMA node.
    pub node_pages: BTreeMap<u32, u64>,
    /// `kernelpagesize_kB`, in bytes.
    pub kernel_page_size_bytes: Option<u64>,
}

impl NumaMapsEntry {
    /// pages per node × page size (4096 when kernelpagesize_kB is absent)
    pub fn node_bytes(&self) -> BTreeMap<u32, u64> {
        let page = self.kernel_page_size_bytes.unwrap_or(DEFAULT_PAGE_SIZE);
        self.node_pages
            .iter()
            .map(|(&node, &pages)| (node, pages.saturating_mul(page)))
            .collect()
    }
}

/// The bare flags `show_numa_map` prints.
const FLAGS: [&str; 3] = ["heap", "stack", "huge"];

/// The `key=` items `show_numa_map` prints (besides `N<node>=`).
const KEYS: [&str; 9] = [
    "file",
    "anon",
    "dirty",
    "mapped",
    "mapmax",
    "swapcache",
    "active",
    "writeback",
    "kernelpagesize_kB",
];

/// The words of `mpol_to_str`'s mode names (`weighted interleave`,
/// `prefer (many)`, ...).
const MODE_WORDS: [&str; 6] = [
    "default",
    "prefer",
    "bind",
    "interleave",
    "weighted",
    "local",
];

/// Mode names that are complete on their own: a token after one of these
/// (without its own `:`/`=`) does not continue the policy unless it starts
/// with `(`, as in `prefer (many)`.
const COMPLETE_MODES: [&str; 5] = ["default", "local", "prefer", "bind", "interleave"];

/// The key of a `key=value` token whose key is a plain identifier
/// (`[A-Za-z0-9_]+`); `None` for anything else (`(many)=static:0-1`, `huge`).
fn ident_key(tok: &str) -> Option<&str> {
    let (key, _) = tok.split_once('=')?;
    let ident = !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    ident.then_some(key)
}

/// Whether `key` is `N<digits>`.
fn is_node_key(key: &str) -> bool {
    key.strip_prefix('N')
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether `tok` is one of the items the kernel prints after the policy.
fn is_known_item(tok: &str) -> bool {
    FLAGS.contains(&tok) || ident_key(tok).is_some_and(|k| KEYS.contains(&k) || is_node_key(k))
}

/// Whether the policy read so far (`policy`) continues with `tok`.
fn continues_policy(policy: &str, tok: &str) -> bool {
    if is_known_item(tok) {
        return false;
    }
    if let Some(key) = ident_key(tok) {
        // "interleave=static:0-1" after "weighted" is policy; "newkey=1" is
        // an item a newer kernel added.
        if !MODE_WORDS.contains(&key) {
            return false;
        }
    }
    if tok.starts_with('(') {
        // "prefer (many)..."
        return true;
    }
    // "weighted interleave...": the last token is an unfinished mode name.
    let last = policy.rsplit(' ').next().unwrap_or(policy);
    !last.contains([':', '=', '(', ')']) && !COMPLETE_MODES.contains(&last)
}

/// Decodes the kernel's `\NNN` (three octal digits) escapes; any other
/// backslash is kept as it is.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if let &[b'\\', d0 @ b'0'..=b'3', d1 @ b'0'..=b'7', d2 @ b'0'..=b'7', ..] = &b[i..] {
            out.push((d0 - b'0') * 64 + (d1 - b'0') * 8 + (d2 - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    match String::from_utf8(out) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

/// Parses one line (1-based `n`).
fn parse_line(n: usize, line: &str) -> Result<NumaMapsEntry, ParseError> {
    let mut toks = line.split_whitespace().peekable();
    let addr = toks.next().unwrap_or("");
    if addr.is_empty() || !addr.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ParseError::at(
            PATH,
            n,
            format!("start address: expected a hex number, found {addr:?}"),
        ));
    }
    let start = u64::from_str_radix(addr, 16).map_err(|_| {
        ParseError::at(
            PATH,
            n,
            format!("start address: {addr:?} does not fit in 64 bits"),
        )
    })?;

    let mut policy = match toks.next() {
        Some(t) if !is_known_item(t) => t.to_string(),
        _ => {
            return Err(ParseError::at(
                PATH,
                n,
                format!("no memory policy after the address in {line:?}"),
            ))
        }
    };
    while let Some(tok) = toks.next_if(|t| continues_policy(&policy, t)) {
        policy.push(' ');
        policy.push_str(tok);
    }

    let mut e = NumaMapsEntry {
        start,
        policy,
        ..NumaMapsEntry::default()
    };
    for tok in toks {
        let Some((key, value)) = tok.split_once('=') else {
            match tok {
                "huge" => e.huge = true,
                "heap" => e.heap = true,
                "stack" => e.stack = true,
                _ => {}
            }
            continue;
        };
        let count = || parse_u64(PATH, n, key, value);
        match key {
            "file" => e.file = Some(unescape(value)),
            "anon" => e.anon_pages = Some(count()?),
            "dirty" => e.dirty_pages = Some(count()?),
            "mapped" => e.mapped_pages = Some(count()?),
            "kernelpagesize_kB" => {
                e.kernel_page_size_bytes = Some(kb_to_bytes(PATH, n, key, count()?)?)
            }
            _ if is_node_key(key) => {
                let node = key.get(1..).unwrap_or("").parse::<u32>().map_err(|_| {
                    ParseError::at(
                        PATH,
                        n,
                        format!("{key}: node number does not fit in 32 bits"),
                    )
                })?;
                e.node_pages.insert(node, count()?);
            }
            // Other keys (mapmax, swapcache, active, writeback, new ones): ignored.
            _ => {}
        }
    }
    Ok(e)
}

/// Parses `/proc/PID/numa_maps`. Blank lines are skipped.
///
/// The policy is the token after the address plus every following token that
/// continues it: one starting with `(` (`prefer (many)`), or any token after
/// an unfinished mode name such as `weighted` — but never a bare flag
/// (`huge`, `heap`, `stack`) nor a `key=value` item whose key is a plain
/// identifier, so unknown items added by future kernels are not swallowed.
pub fn parse(text: &str) -> Result<Vec<NumaMapsEntry>, ParseError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| parse_line(i + 1, l))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Linux 6.18: a hugetlb memfd, a SysV `SHM_HUGETLB` segment, shared and
    /// private anonymous `MAP_HUGETLB` mappings, a deleted /dev/shm file and a
    /// memfd with spaces in their names, vvar/vdso lines with nothing but the
    /// policy.
    const REAL: &str = r"55a76cbc5000 default file=/tmp/hp/hp dirty=1 N0=1 kernelpagesize_kB=4
55a778045000 default heap anon=2 dirty=2 active=0 N0=2 kernelpagesize_kB=4
7fc6ad800000 default file=/memfd:pool\040(deleted) huge dirty=1 N0=1 kernelpagesize_kB=2048
7fc6ada00000 default file=/SYSV0000abcd\040(deleted) huge dirty=1 N0=1 kernelpagesize_kB=2048
7fc6adc00000 default file=/anon_hugepage\040(deleted) huge dirty=1 N0=1 kernelpagesize_kB=2048
7fc6ade00000 default file=/anon_hugepage\040(deleted) huge anon=1 dirty=1 N0=1 kernelpagesize_kB=2048
7fc6ae123000 default file=/usr/lib/x86_64-linux-gnu/libc.so.6 mapped=37 mapmax=6 N0=37 kernelpagesize_kB=4
7fc6ae30c000 default file=/dev/shm/x\040y\040(deleted) dirty=1 active=0 N0=1 kernelpagesize_kB=4
7fc6ae30d000 default file=/memfd:plain\040pool\040(deleted) dirty=1 active=0 N0=1 kernelpagesize_kB=4
7fc6ae310000 default
7ffe2e561000 default stack anon=4 dirty=4 active=1 N0=4 kernelpagesize_kB=4
";

    #[test]
    fn real_text() {
        let m = parse(REAL).unwrap();
        assert_eq!(m.len(), 11);

        let exe = &m[0];
        assert_eq!(exe.start, 0x55a76cbc5000);
        assert_eq!(exe.policy, "default");
        assert_eq!(exe.file.as_deref(), Some("/tmp/hp/hp"));
        assert!(!exe.huge && !exe.heap && !exe.stack);
        assert_eq!(exe.dirty_pages, Some(1));
        assert_eq!(exe.anon_pages, None);
        assert_eq!(exe.kernel_page_size_bytes, Some(4096));
        assert_eq!(exe.node_bytes(), BTreeMap::from([(0, 4096)]));

        assert!(m[1].heap);
        assert_eq!(m[1].file, None);
        assert_eq!(m[1].anon_pages, Some(2));

        let memfd = &m[2];
        assert_eq!(memfd.file.as_deref(), Some("/memfd:pool (deleted)"));
        assert!(memfd.huge);
        assert_eq!(memfd.kernel_page_size_bytes, Some(2 << 20));
        assert_eq!(memfd.node_pages, BTreeMap::from([(0, 1)]));
        assert_eq!(memfd.node_bytes(), BTreeMap::from([(0, 2 << 20)]));

        assert_eq!(m[3].file.as_deref(), Some("/SYSV0000abcd (deleted)"));
        assert_eq!(m[5].anon_pages, Some(1));
        assert_eq!(m[6].mapped_pages, Some(37));
        assert_eq!(m[7].file.as_deref(), Some("/dev/shm/x y (deleted)"));
        assert_eq!(m[8].file.as_deref(), Some("/memfd:plain pool (deleted)"));

        let vvar = &m[9];
        assert_eq!(vvar.policy, "default");
        assert!(vvar.node_pages.is_empty());
        assert_eq!(vvar.kernel_page_size_bytes, None);
        assert!(vvar.node_bytes().is_empty());

        assert!(m[10].stack);
    }

    #[test]
    fn policies() {
        let pol = |line: &str| parse(line).unwrap().remove(0).policy;
        assert_eq!(
            pol("7f00 bind:0-1 file=/SYSV00000000\\040(deleted) huge dirty=512 N0=256 N1=256"),
            "bind:0-1"
        );
        assert_eq!(
            pol("7f00 interleave:0-3 anon=3 dirty=3 active=0 N0=3 kernelpagesize_kB=4"),
            "interleave:0-3"
        );
        assert_eq!(
            pol("7f00 interleave=static:0-3 anon=3"),
            "interleave=static:0-3"
        );
        assert_eq!(
            pol("7f00 bind=relative|balancing:0,2 anon=3"),
            "bind=relative|balancing:0,2"
        );
        assert_eq!(pol("7f00 prefer:1 heap anon=3"), "prefer:1");
        assert_eq!(pol("7f00 prefer=static:1 anon=3"), "prefer=static:1");
        assert_eq!(pol("7f00 local stack anon=3"), "local");
        assert_eq!(
            pol("7f00 prefer (many):0-1 anon=3 N0=1 N1=2"),
            "prefer (many):0-1"
        );
        assert_eq!(
            pol("7f00 prefer (many)=static:0-1 huge N1=2"),
            "prefer (many)=static:0-1"
        );
        assert_eq!(pol("7f00 prefer (many)"), "prefer (many)");
        assert_eq!(
            pol("7f00 weighted interleave:0-1 anon=3 N0=1 N1=2"),
            "weighted interleave:0-1"
        );
        assert_eq!(
            pol("7f00 weighted interleave=static:0-1 file=/x"),
            "weighted interleave=static:0-1"
        );
        assert_eq!(pol("7f00 weighted interleave"), "weighted interleave");
        // A bare flag added by a future kernel after a complete mode is not policy.
        assert_eq!(pol("7f00 default newflag anon=1"), "default");
        assert_eq!(pol("7f00 bind:0 newflag anon=1"), "bind:0");
        // Unknown key=value items are not policy either.
        assert_eq!(pol("7f00 weighted future=1 anon=1"), "weighted");

        let e = parse("7f00 prefer (many):0-1 huge anon=3 N0=1 N1=2 kernelpagesize_kB=2048")
            .unwrap()
            .remove(0);
        assert!(e.huge);
        assert_eq!(e.anon_pages, Some(3));
        assert_eq!(e.node_bytes(), BTreeMap::from([(0, 2 << 20), (1, 4 << 20)]));
    }

    /// Linux 6.18: one page under each policy mode `mbind` can set.
    const REAL_POLICIES: &str =
        "7f3cb2157000 prefer:0 anon=1 dirty=1 active=0 N0=1 kernelpagesize_kB=4
7f3cb2158000 bind=balancing:0 anon=1 dirty=1 active=0 N0=1 kernelpagesize_kB=4
7f3cb2159000 prefer (many)=static:0 anon=1 dirty=1 active=0 N0=1 kernelpagesize_kB=4
7f3cb215a000 bind=static:0 anon=1 dirty=1 active=0 N0=1 kernelpagesize_kB=4
7f3cb215b000 weighted interleave:0 anon=1 dirty=1 active=0 N0=1 kernelpagesize_kB=4
7f3cb215c000 prefer (many):0 anon=1 dirty=1 active=0 N0=1 kernelpagesize_kB=4
7f3cb215d000 local anon=1 dirty=1 active=0 N0=1 kernelpagesize_kB=4
7f3cb215e000 interleave:0 anon=1 dirty=1 active=0 N0=1 kernelpagesize_kB=4
7f3cb215f000 bind:0 anon=1 dirty=1 active=0 N0=1 kernelpagesize_kB=4
";

    #[test]
    fn real_policies() {
        let m = parse(REAL_POLICIES).unwrap();
        let policies: Vec<&str> = m.iter().map(|e| e.policy.as_str()).collect();
        assert_eq!(
            policies,
            [
                "prefer:0",
                "bind=balancing:0",
                "prefer (many)=static:0",
                "bind=static:0",
                "weighted interleave:0",
                "prefer (many):0",
                "local",
                "interleave:0",
                "bind:0",
            ]
        );
        for e in &m {
            assert_eq!(e.anon_pages, Some(1));
            assert_eq!(e.dirty_pages, Some(1));
            assert_eq!(e.node_bytes(), BTreeMap::from([(0, 4096)]));
        }
    }

    #[test]
    fn multi_node_and_default_page_size() {
        let e = parse("7f0000000000 bind:0-1 file=/SYSV00000000\\040(deleted) huge dirty=512 N0=256 N1=256 kernelpagesize_kB=2048\n")
            .unwrap()
            .remove(0);
        assert_eq!(e.dirty_pages, Some(512));
        assert_eq!(e.node_pages, BTreeMap::from([(0, 256), (1, 256)]));
        assert_eq!(
            e.node_bytes(),
            BTreeMap::from([(0, 512 << 20), (1, 512 << 20)])
        );
        // No kernelpagesize_kB: 4 KiB pages.
        let e = parse("7f00 default anon=2 N3=2 N12=5\n").unwrap().remove(0);
        assert_eq!(e.node_bytes(), BTreeMap::from([(3, 8192), (12, 5 * 4096)]));
        // Overflow saturates rather than panicking.
        let e = parse("7f00 default N0=18446744073709551615 kernelpagesize_kB=4\n")
            .unwrap()
            .remove(0);
        assert_eq!(e.node_bytes(), BTreeMap::from([(0, u64::MAX)]));
    }

    #[test]
    fn unescape_paths() {
        assert_eq!(unescape(r"/a\040b\011c\012d\134e"), "/a b\tc\nd\\e");
        assert_eq!(unescape(r"/a\075b"), "/a=b");
        // Not an escape: kept as it is.
        assert_eq!(unescape(r"/a\b\04\0400\999\"), "/a\\b\\04 0\\999\\");
        // A byte that is not UTF-8 on its own is replaced, not a panic.
        assert_eq!(unescape(r"/\377"), "/\u{fffd}");
        assert_eq!(unescape(r"/\303\251"), "/é");
        let e = parse("7f00 default file=/dev/shm/a\\040b=c N0=1\n")
            .unwrap()
            .remove(0);
        assert_eq!(e.file.as_deref(), Some("/dev/shm/a b=c"));
    }

    #[test]
    fn unknown_items_ignored() {
        let e = parse("7f00 default file=/x mapmax=3 swapcache=1 active=0 writeback=2 newkey=zz newflag N0=1\n")
            .unwrap()
            .remove(0);
        assert_eq!(e.file.as_deref(), Some("/x"));
        assert_eq!(e.node_pages, BTreeMap::from([(0, 1)]));
    }

    #[test]
    fn malformed() {
        for bad in [
            "default file=/x",
            "7g00 default",
            "0x7f00 default",
            "7f00",
            "7f00 anon=1",
            "7f00 huge anon=1",
            "11112222333344445 default",
            "7f00 default anon=x",
            "7f00 default dirty=-1",
            "7f00 default mapped=",
            "7f00 default N0=1.5",
            "7f00 default N99999999999=1",
            "7f00 default kernelpagesize_kB=4k",
            "7f00 default kernelpagesize_kB=18446744073709551615",
        ] {
            let e = parse(&format!("7f00 default\n{bad}\n")).unwrap_err();
            assert_eq!(e.path, "/proc/PID/numa_maps", "{bad:?}");
            assert_eq!(e.line, Some(2), "{bad:?}: {e}");
        }
    }

    #[test]
    fn empty_and_truncated() {
        assert_eq!(parse("").unwrap(), vec![]);
        assert_eq!(parse("\n \n").unwrap(), vec![]);
        // Cut inside a key: the partial token is an unknown item.
        let e = parse("7f00 default anon=2 kernelpagesi").unwrap().remove(0);
        assert_eq!(e.anon_pages, Some(2));
        assert_eq!(e.kernel_page_size_bytes, None);
        // Cut right after "=": an error.
        assert!(parse("7f00 default anon=").is_err());
        // Every prefix parses or fails, never panics.
        for end in 0..=REAL.len() {
            if REAL.is_char_boundary(end) {
                let _ = parse(&REAL[..end]);
            }
        }
    }
}
