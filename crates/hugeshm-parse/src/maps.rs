//! `/proc/PID/maps` (and the header lines of `/proc/PID/smaps`).
//!
//! One mapping per line:
//!
//! ```text
//! 7fc6ada00000-7fc6adc00000 rw-s 00000000 00:11 0                          /SYSV0000abcd (deleted)
//! ```
//!
//! `start-end` and `offset` are hex, `perms` is `rwxp`/`rwxs` with `-` for a
//! missing right, `dev` is `major:minor` in hex, `inode` is decimal, and the
//! pathname is the rest of the line after the padding (it may contain spaces
//! and is empty for anonymous memory). The kernel appends ` (deleted)` to
//! files that were unlinked, which is how SysV segments (`/SYSV<key>`), memfds
//! (`/memfd:<name>`) and anonymous `MAP_HUGETLB` mappings (`/anon_hugepage`)
//! always appear.

use crate::error::ParseError;
use serde::{Deserialize, Serialize};

const PATH: &str = "/proc/PID/maps";

/// The suffix the kernel adds to the pathname of an unlinked file.
const DELETED: &str = " (deleted)";

/// The permission column (`rw-s`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Perms {
    /// `r`: readable.
    pub read: bool,
    /// `w`: writable.
    pub write: bool,
    /// `x`: executable.
    pub exec: bool,
    /// `s` (shared, `MAP_SHARED`) rather than `p` (private, copy-on-write).
    pub shared: bool,
}

impl Perms {
    /// The column of a mapping with these rights, shared or private.
    pub fn new(read: bool, write: bool, exec: bool, shared: bool) -> Self {
        Perms {
            read,
            write,
            exec,
            shared,
        }
    }
}

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MapsEntry {
    /// First address of the mapping.
    pub start: u64,
    /// One past the last address of the mapping.
    pub end: u64,
    /// The permission column.
    pub perms: Perms,
    /// Offset in the file (or, for SysV shm, in the segment), in bytes.
    pub offset: u64,
    /// Device major number (0 for anonymous memory).
    pub dev_major: u32,
    /// Device minor number.
    pub dev_minor: u32,
    /// Inode number (0 for anonymous memory; the shmid for SysV segments).
    pub inode: u64,
    /// The pathname without the ` (deleted)` suffix; `None` when empty
    /// (anonymous memory). Pseudo-paths such as `[heap]` are kept as printed.
    pub pathname: Option<String>,
    /// The pathname ended with ` (deleted)`.
    pub deleted: bool,
}

impl MapsEntry {
    /// Length of the mapping in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }
}

/// Splits off the first blank-separated field, returning it and the text after it.
fn next_field(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start_matches([' ', '\t']);
    if s.is_empty() {
        return None;
    }
    Some(match s.find([' ', '\t']) {
        Some(i) => s.split_at(i),
        None => (s, ""),
    })
}

/// Parses a hex number (no `0x`).
fn hex_u64(path: &str, line: usize, what: &str, text: &str) -> Result<u64, ParseError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ParseError::at(
            path,
            line,
            format!("{what}: expected a hex number, found {text:?}"),
        ));
    }
    u64::from_str_radix(text, 16).map_err(|_| {
        ParseError::at(
            path,
            line,
            format!("{what}: {text:?} does not fit in 64 bits"),
        )
    })
}

/// Parses a hex device number part.
fn hex_u32(path: &str, line: usize, what: &str, text: &str) -> Result<u32, ParseError> {
    let v = hex_u64(path, line, what, text)?;
    u32::try_from(v).map_err(|_| {
        ParseError::at(
            path,
            line,
            format!("{what}: {text:?} does not fit in 32 bits"),
        )
    })
}

/// Parses the four-character permission column.
fn parse_perms(path: &str, line: usize, text: &str) -> Result<Perms, ParseError> {
    let bad = || {
        ParseError::at(
            path,
            line,
            format!(
                "perms: expected \"rwxp\" or \"rwxs\" with '-' for missing rights, found {text:?}"
            ),
        )
    };
    let b = text.as_bytes();
    let [r, w, x, s] = b else {
        return Err(bad());
    };
    let flag = |c: u8, yes: u8| -> Result<bool, ParseError> {
        match c {
            b'-' => Ok(false),
            c if c == yes => Ok(true),
            _ => Err(bad()),
        }
    };
    let shared = match s {
        b's' => true,
        b'p' => false,
        _ => return Err(bad()),
    };
    Ok(Perms {
        read: flag(*r, b'r')?,
        write: flag(*w, b'w')?,
        exec: flag(*x, b'x')?,
        shared,
    })
}

/// Parses one maps-format line (shared with smaps); `path` and `line` for errors.
pub(crate) fn parse_line(path: &str, line_no: usize, line: &str) -> Result<MapsEntry, ParseError> {
    let missing = |what: &str| {
        ParseError::at(
            path,
            line_no,
            format!(
                "expected \"start-end perms offset dev inode [path]\", {what} missing in {line:?}"
            ),
        )
    };
    let (range, rest) = next_field(line).ok_or_else(|| missing("address range"))?;
    let (perms, rest) = next_field(rest).ok_or_else(|| missing("perms"))?;
    let (offset, rest) = next_field(rest).ok_or_else(|| missing("offset"))?;
    let (dev, rest) = next_field(rest).ok_or_else(|| missing("device"))?;
    let (inode, rest) = next_field(rest).ok_or_else(|| missing("inode"))?;

    let (start, end) = range.split_once('-').ok_or_else(|| {
        ParseError::at(
            path,
            line_no,
            format!("address range: expected \"start-end\", found {range:?}"),
        )
    })?;
    let start = hex_u64(path, line_no, "start address", start)?;
    let end = hex_u64(path, line_no, "end address", end)?;
    if start > end {
        return Err(ParseError::at(
            path,
            line_no,
            format!("address range: start {start:#x} is above end {end:#x}"),
        ));
    }
    let perms = parse_perms(path, line_no, perms)?;
    let offset = hex_u64(path, line_no, "offset", offset)?;
    let (major, minor) = dev.split_once(':').ok_or_else(|| {
        ParseError::at(
            path,
            line_no,
            format!("device: expected \"major:minor\" in hex, found {dev:?}"),
        )
    })?;
    let dev_major = hex_u32(path, line_no, "device major", major)?;
    let dev_minor = hex_u32(path, line_no, "device minor", minor)?;
    let inode = inode.parse::<u64>().map_err(|_| {
        ParseError::at(
            path,
            line_no,
            format!("inode: expected a whole number, found {inode:?}"),
        )
    })?;

    // A line holds no newline and has lost its `\r` to `lines()`: the
    // rest is the name as the kernel printed it.
    Ok(entry_from_fields(
        start,
        end,
        perms,
        offset,
        (dev_major, dev_minor),
        inode,
        Some(rest),
    ))
}

/// The pathname column after the inode: without the padding and the
/// ` (deleted)` suffix, and whether the suffix was there.
fn split_name(rest: &str) -> (Option<String>, bool) {
    // Only the padding is removed: a file name may itself end in blanks.
    let name = rest.trim_start_matches([' ', '\t']);
    let (name, deleted) = match name.strip_suffix(DELETED) {
        Some(n) => (n, true),
        None => (name, false),
    };
    let pathname = if name.is_empty() {
        None
    } else {
        Some(name.to_string())
    };
    (pathname, deleted)
}

/// The entry the maps text would give for a mapping known by its fields
/// (`PROCMAP_QUERY` returns these): `name` is the name as the kernel
/// returns it, which the text escapes (a newline is printed as `\012`,
/// and a line's trailing `\r` is lost on reading), so that both ways of
/// reading a process's mappings give equal entries.
pub fn entry_from_fields(
    start: u64,
    end: u64,
    perms: Perms,
    offset: u64,
    (dev_major, dev_minor): (u32, u32),
    inode: u64,
    name: Option<&str>,
) -> MapsEntry {
    let (pathname, deleted) = match name {
        Some(n) if n.contains('\n') => {
            let printed = n.replace('\n', "\\012");
            split_name(printed.strip_suffix('\r').unwrap_or(&printed))
        }
        Some(n) => split_name(n.strip_suffix('\r').unwrap_or(n)),
        None => (None, false),
    };
    MapsEntry {
        start,
        end,
        perms,
        offset,
        dev_major,
        dev_minor,
        inode,
        pathname,
        deleted,
    }
}

/// Whether a mapping is one that [`parse_candidates`] keeps: shared, or
/// on a device with major number 0 with a pathname that is not a
/// `[pseudo]` name.
pub fn is_candidate(m: &MapsEntry) -> bool {
    m.perms.shared
        || (m.dev_major == 0 && m.pathname.as_deref().is_some_and(|n| !n.starts_with('[')))
}

/// Parses `/proc/PID/maps`. Blank lines are skipped.
pub fn parse(text: &str) -> Result<Vec<MapsEntry>, ParseError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| parse_line(PATH, i + 1, l))
        .collect()
}

/// Whether a raw maps line can be shared memory or huge pages: shared
/// (`s` in the permission column), or on a device whose major number is 0
/// (hugetlbfs, tmpfs, anonymous `MAP_HUGETLB`) with a pathname that is not
/// a `[pseudo]` name. Private mappings of files on disks (libraries,
/// executables: most lines) and plain anonymous memory are not. A line
/// whose columns cannot be found this way is a candidate, so that the full
/// parse reports it.
fn may_be_shared_memory(line: &str) -> bool {
    let mut fields = line.split_ascii_whitespace();
    let (Some(_range), Some(perms), Some(_offset), Some(dev), Some(_inode)) = (
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
    ) else {
        return true;
    };
    match perms.as_bytes() {
        [_, _, _, b's'] => return true,
        [_, _, _, b'p'] => {}
        _ => return true,
    }
    let Some((major, _)) = dev.split_once(':') else {
        return true;
    };
    if major.bytes().any(|b| b != b'0') {
        return !major.bytes().all(|b| b.is_ascii_hexdigit());
    }
    fields.next().is_some_and(|name| !name.starts_with('['))
}

/// Parses the lines of `/proc/PID/maps` that can be shared memory or huge
/// pages (see the module docs): shared mappings, and private mappings
/// with a path on a device with major number 0 (hugetlbfs, tmpfs,
/// `/anon_hugepage`). What a scan for segments needs, at a fraction of
/// the cost of [`parse`] on a process with many libraries mapped. Line
/// numbers in errors are those of the whole text.
pub fn parse_candidates(text: &str) -> Result<Vec<MapsEntry>, ParseError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && may_be_shared_memory(l))
        .map(|(i, l)| parse_line(PATH, i + 1, l))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/proc/PID/maps` on Linux 6.18 of a process holding a hugetlb memfd, a
    /// SysV `SHM_HUGETLB` segment, shared and private anonymous `MAP_HUGETLB`
    /// mappings, a deleted /dev/shm file with a space and a non-huge memfd.
    const REAL: &str = "55a76cbc5000-55a76cbc6000 r--p 00000000 fe:00 9978057                    /tmp/hp/hp
55a76cbc6000-55a76cbc7000 r-xp 00001000 fe:00 9978057                    /tmp/hp/hp
55a778045000-55a778066000 rw-p 00000000 00:00 0                          [heap]
7fc6ad800000-7fc6ada00000 rw-s 00000000 00:11 6430                       /memfd:pool (deleted)
7fc6ada00000-7fc6adc00000 rw-s 00000000 00:11 0                          /SYSV0000abcd (deleted)
7fc6adc00000-7fc6ade00000 rw-s 00000000 00:11 6428                       /anon_hugepage (deleted)
7fc6ade00000-7fc6ae000000 rw-p 00000000 00:11 6427                       /anon_hugepage (deleted)
7fc6ae120000-7fc6ae123000 rw-p 00000000 00:00 0 
7fc6ae149000-7fc6ae29f000 r-xp 00026000 fe:00 326269                     /usr/lib/x86_64-linux-gnu/libc.so.6
7fc6ae30c000-7fc6ae30d000 rw-s 00000000 00:1b 2                          /dev/shm/x y (deleted)
7fc6ae30d000-7fc6ae30e000 rw-s 00000000 00:01 1046                       /memfd:plain pool (deleted)
7fc6ae316000-7fc6ae318000 r-xp 00000000 00:00 0                          [vdso]
7ffe2e561000-7ffe2e582000 rw-p 00000000 00:00 0                          [stack]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
";

    #[test]
    fn candidates_are_the_shared_and_huge_lines() {
        let all = parse(REAL).unwrap();
        let some = parse_candidates(REAL).unwrap();
        let want: Vec<MapsEntry> = all
            .iter()
            .filter(|m| {
                m.perms.shared
                    || (m.dev_major == 0
                        && m.pathname.as_deref().is_some_and(|p| !p.starts_with('[')))
            })
            .cloned()
            .collect();
        assert_eq!(some, want);
        let paths: Vec<&str> = some.iter().filter_map(|m| m.pathname.as_deref()).collect();
        assert_eq!(
            paths,
            [
                "/memfd:pool",
                "/SYSV0000abcd",
                "/anon_hugepage",
                "/anon_hugepage",
                "/dev/shm/x y",
                "/memfd:plain pool"
            ]
        );
        // A private file on a hugetlbfs mount (device 00:xx) is kept; a
        // library on a disk is not; a line whose columns cannot be found
        // is parsed, and so reported, with its line number.
        let text = "7f0000000000-7f0000200000 rw-p 00000000 00:2f 12 /mnt/huge/f\n\
                    7f0000200000-7f0000201000 r--p 00000000 fe:00 9 /usr/lib/libc.so.6\n\
                    7f0000201000-7f0000202000 rw-p 00000000 00:00 0 [heap]\n";
        let m = parse_candidates(text).unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].pathname.as_deref(), Some("/mnt/huge/f"));
        let err = parse_candidates("7f0000000000-7f0000200000 rw-p\nnonsense x\n").unwrap_err();
        assert_eq!(err.line, Some(1), "{err}");
        let err = parse_candidates("7f00-7f01 rw-q 0 00:01 5 /x\n").unwrap_err();
        assert!(err.to_string().contains("perms"), "{err}");
    }

    /// The fields of each line of `REAL` (as `PROCMAP_QUERY` gives them)
    /// make the entry the text parse makes; a newline in a name is
    /// printed as `\012` by the kernel, and so by `entry_from_fields`.
    #[test]
    fn fields_make_the_text_entry() {
        let text = format!(
            "{REAL}7f0000000000-7f0000001000 rw-s 00000000 00:1b 7 /dev/shm/a\\012b (deleted)\n"
        );
        let all = parse(&text).unwrap();
        for (m, line) in all.iter().zip(text.lines()) {
            // The name the kernel returns: the text's, unescaped.
            let name = line
                .splitn(6, ' ')
                .nth(5)
                .map(|n| n.trim_start().replace("\\012", "\n"))
                .filter(|n| !n.is_empty());
            let e = entry_from_fields(
                m.start,
                m.end,
                m.perms,
                m.offset,
                (m.dev_major, m.dev_minor),
                m.inode,
                name.as_deref(),
            );
            assert_eq!(&e, m, "{line}");
            assert_eq!(is_candidate(&e), may_be_shared_memory(line), "{line}");
        }
        assert_eq!(
            all.last().unwrap().pathname.as_deref(),
            Some("/dev/shm/a\\012b")
        );
        assert!(all.last().unwrap().deleted);
    }

    #[test]
    fn real_text() {
        let m = parse(REAL).unwrap();
        assert_eq!(m.len(), 14);

        let exe = &m[1];
        assert_eq!(exe.start, 0x55a76cbc6000);
        assert_eq!(exe.end, 0x55a76cbc7000);
        assert_eq!(exe.size_bytes(), 4096);
        assert_eq!(
            exe.perms,
            Perms {
                read: true,
                write: false,
                exec: true,
                shared: false
            }
        );
        assert_eq!(exe.offset, 0x1000);
        assert_eq!((exe.dev_major, exe.dev_minor), (0xfe, 0));
        assert_eq!(exe.inode, 9978057);
        assert_eq!(exe.pathname.as_deref(), Some("/tmp/hp/hp"));
        assert!(!exe.deleted);

        assert_eq!(m[2].pathname.as_deref(), Some("[heap]"));

        let memfd = &m[3];
        assert_eq!(memfd.pathname.as_deref(), Some("/memfd:pool"));
        assert!(memfd.deleted);
        assert!(memfd.perms.shared);
        assert_eq!(memfd.size_bytes(), 2 << 20);
        assert_eq!((memfd.dev_major, memfd.dev_minor), (0, 0x11));

        let sysv = &m[4];
        assert_eq!(sysv.pathname.as_deref(), Some("/SYSV0000abcd"));
        assert!(sysv.deleted);
        assert_eq!(sysv.inode, 0);

        assert_eq!(m[5].pathname.as_deref(), Some("/anon_hugepage"));
        assert!(m[5].perms.shared);
        assert_eq!(m[6].pathname.as_deref(), Some("/anon_hugepage"));
        assert!(!m[6].perms.shared);
        assert!(m[6].deleted);

        let anon = &m[7];
        assert_eq!(anon.pathname, None);
        assert!(!anon.deleted);
        assert_eq!((anon.dev_major, anon.dev_minor, anon.inode), (0, 0, 0));

        assert_eq!(m[9].pathname.as_deref(), Some("/dev/shm/x y"));
        assert!(m[9].deleted);
        assert_eq!(m[10].pathname.as_deref(), Some("/memfd:plain pool"));

        let vsyscall = &m[13];
        assert_eq!(vsyscall.start, 0xffffffffff600000);
        assert_eq!(
            vsyscall.perms,
            Perms {
                read: false,
                write: false,
                exec: true,
                shared: false
            }
        );
    }

    #[test]
    fn pathname_edge_cases() {
        let l = |s: &str| parse_line(PATH, 1, s).unwrap();
        // No trailing blank after the inode.
        assert_eq!(l("1000-2000 rw-p 00000000 00:00 0").pathname, None);
        // A name that merely contains "(deleted)" elsewhere, and trailing blanks kept.
        let e = l("1000-2000 rw-s 00000000 00:05 7 /dev/shm/a (deleted) b ");
        assert_eq!(e.pathname.as_deref(), Some("/dev/shm/a (deleted) b "));
        assert!(!e.deleted);
        // A deleted file whose own name ends in " (deleted)".
        let e = l("1000-2000 rw-s 00000000 00:05 7 /dev/shm/a (deleted) (deleted)");
        assert_eq!(e.pathname.as_deref(), Some("/dev/shm/a (deleted)"));
        assert!(e.deleted);
        // Named anonymous memory (PR_SET_VMA_ANON_NAME).
        assert_eq!(
            l("1000-2000 rw-p 00000000 00:00 0   [anon:pool]")
                .pathname
                .as_deref(),
            Some("[anon:pool]")
        );
        // Short (32-bit style) addresses and a wide major number.
        let e = l("08048000-08049000 r-xp 00000000 103:02 12 /bin/x");
        assert_eq!((e.start, e.dev_major, e.dev_minor), (0x08048000, 0x103, 2));
        // Empty mapping is not an error.
        assert_eq!(l("1000-1000 ---p 00000000 00:00 0").size_bytes(), 0);
    }

    #[test]
    fn malformed() {
        for bad in [
            "2000-1000 rw-p 00000000 00:00 0",
            "1000 rw-p 00000000 00:00 0",
            "1000- rw-p 00000000 00:00 0",
            "-1000 rw-p 00000000 00:00 0",
            "0x1000-0x2000 rw-p 00000000 00:00 0",
            "1000-1g00 rw-p 00000000 00:00 0",
            "1000-11112222333344445 rw-p 00000000 00:00 0",
            "1000-2000 rw-x 00000000 00:00 0",
            "1000-2000 rw- 00000000 00:00 0",
            "1000-2000 rwxps 00000000 00:00 0",
            "1000-2000 wr-p 00000000 00:00 0",
            "1000-2000 rw-p zz 00:00 0",
            "1000-2000 rw-p 00000000 0000 0",
            "1000-2000 rw-p 00000000 00:1000000000 0",
            "1000-2000 rw-p 00000000 :00 0",
            "1000-2000 rw-p 00000000 00:00 -1",
            "1000-2000 rw-p 00000000 00:00",
            "1000-2000 rw-p",
            "1000-2000",
            "garbage",
            "1000-2000 rw-p 00000000 00:00 x /path",
            "1000-2000 rw-p 00000000 00:00 0x10",
            "1000-2000 r\u{e9}-p 00000000 00:00 0",
        ] {
            let text = format!("1000-2000 rw-p 00000000 00:00 0\n{bad}\n");
            let e = parse(&text).unwrap_err();
            assert_eq!(e.path, "/proc/PID/maps", "{bad:?}");
            assert_eq!(e.line, Some(2), "{bad:?}: {e}");
        }
        let e = parse_line("/proc/PID/smaps", 7, "nope").unwrap_err();
        assert_eq!((e.path.as_str(), e.line), ("/proc/PID/smaps", Some(7)));
    }

    #[test]
    fn empty_and_truncated() {
        assert_eq!(parse("").unwrap(), vec![]);
        assert_eq!(parse("\n").unwrap(), vec![]);
        // Every prefix parses or fails, never panics; a cut in the pathname
        // cannot be detected, but a cut before it is an error.
        for end in 0..=REAL.len() {
            if REAL.is_char_boundary(end) {
                let _ = parse(&REAL[..end]);
            }
        }
        assert!(parse("55a76cbc5000-55a76cbc6000 r--p 0000").is_err());
    }
}
