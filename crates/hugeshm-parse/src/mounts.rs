//! `/proc/mounts` (also `/proc/PID/mounts`): hugetlbfs and tmpfs mounts.

use crate::error::ParseError;
use crate::size::parse_size;
use serde::{Deserialize, Serialize};

const PATH: &str = "/proc/mounts";

/// One mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Mount {
    /// The mounted device or name (`hugetlbfs`, `tmpfs`, `/dev/pmem0`).
    pub source: String,
    /// Where it is mounted, octal escapes decoded.
    pub target: String,
    /// File system type.
    pub fstype: String,
    /// Options in order; `("ro", None)`, `("pagesize", Some("2M"))`.
    pub options: Vec<(String, Option<String>)>,
}

impl Mount {
    /// The value of a `key=value` option, or `Some("")` for a bare flag.
    pub fn option(&self, key: &str) -> Option<&str> {
        self.options
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_deref().unwrap_or(""))
    }

    /// Whether this is a hugetlbfs mount.
    pub fn is_hugetlbfs(&self) -> bool {
        self.fstype == "hugetlbfs"
    }

    /// Whether this is a tmpfs mount (`/dev/shm` is one).
    pub fn is_tmpfs(&self) -> bool {
        self.fstype == "tmpfs"
    }

    /// hugetlbfs `pagesize=`; `None` when absent (the default huge page size)
    /// or unreadable.
    pub fn hugetlbfs_page_size(&self) -> Option<u64> {
        self.option("pagesize").and_then(parse_size)
    }

    /// `size=` in bytes where it is absolute (hugetlbfs prints bytes, tmpfs `NNNk`).
    pub fn size_bytes(&self) -> Option<u64> {
        self.option("size").and_then(parse_size)
    }

    /// Whether the mount is DAX (`dax` or `dax=always`).
    pub fn is_dax(&self) -> bool {
        matches!(self.option("dax"), Some("") | Some("always"))
    }

    /// Whether the mount is `dax=inode`: a file on it is DAX only with its
    /// own flag (`FS_XFLAG_DAX`, `chattr +x`), else in the page cache.
    pub fn is_dax_inode(&self) -> bool {
        self.option("dax") == Some("inode")
    }

    /// Whether files on the mount may be DAX: [`Mount::is_dax`] or
    /// [`Mount::is_dax_inode`].
    pub fn may_dax(&self) -> bool {
        self.is_dax() || self.is_dax_inode()
    }
}

/// The mount a path lives on: the longest mount point that is a prefix of
/// it (component-wise: `/mnt/pmem1/f` is on `/mnt/pmem1`, not `/mnt/pmem`).
/// The path is taken as given (canonicalize it first to follow symlinks).
pub fn mount_of<'a>(mounts: &'a [Mount], path: &std::path::Path) -> Option<&'a Mount> {
    mounts
        .iter()
        .filter(|m| path.starts_with(&m.target))
        .max_by_key(|m| m.target.len())
}

/// Decodes the kernel's octal escapes (`\040` for space).
pub fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            let oct = &b[i + 1..i + 4];
            if oct.iter().all(|c| (b'0'..=b'7').contains(c)) {
                let v = (oct[0] - b'0') as u32 * 64
                    + (oct[1] - b'0') as u32 * 8
                    + (oct[2] - b'0') as u32;
                if v <= 255 {
                    out.push(v as u8);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses `/proc/mounts`.
pub fn parse(text: &str) -> Result<Vec<Mount>, ParseError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 {
            return Err(ParseError::at(
                PATH,
                i + 1,
                format!("expected \"source target fstype options ...\", found {line:?}"),
            ));
        }
        let options = f[3]
            .split(',')
            .filter(|o| !o.is_empty())
            .map(|o| match o.split_once('=') {
                Some((k, v)) => (k.to_string(), Some(unescape(v))),
                None => (o.to_string(), None),
            })
            .collect();
        out.push(Mount {
            source: unescape(f[0]),
            target: unescape(f[1]),
            fstype: f[2].to_string(),
            options,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0
tmpfs /dev/shm tmpfs rw,relatime,size=24684092k 0 0
hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0
none /mnt/huge\\0401g hugetlbfs rw,relatime,uid=1000,gid=1000,mode=1770,pagesize=1024M,size=4294967296,min_size=1073741824 0 0
tmpfs /mnt/interleaved tmpfs rw,relatime,size=1048576k,huge=within_size,mpol=interleave:0-1 0 0
/dev/pmem0 /mnt/pmem ext4 rw,relatime,dax=always 0 0
/dev/pmem1 /mnt/pmem1 ext4 rw,relatime,stripe=512,dax=inode 0 0
";

    #[test]
    fn real_text() {
        let m = parse(TEXT).unwrap();
        assert_eq!(m.len(), 7);
        assert!(m[1].is_tmpfs());
        assert_eq!(m[1].size_bytes(), Some(24684092 * 1024));
        assert!(m[2].is_hugetlbfs());
        assert_eq!(m[2].hugetlbfs_page_size(), Some(2 << 20));
        assert_eq!(m[3].target, "/mnt/huge 1g");
        assert_eq!(m[3].hugetlbfs_page_size(), Some(1 << 30));
        assert_eq!(m[3].size_bytes(), Some(4 << 30));
        assert_eq!(m[3].option("min_size"), Some("1073741824"));
        assert_eq!(m[3].option("mode"), Some("1770"));
        assert_eq!(m[3].option("uid"), Some("1000"));
        assert_eq!(m[4].option("huge"), Some("within_size"));
        assert_eq!(m[4].option("mpol"), Some("interleave:0-1"));
        assert!(m[5].is_dax());
        assert!(!m[5].is_dax_inode() && m[5].may_dax());
        assert!(!m[6].is_dax() && m[6].is_dax_inode() && m[6].may_dax());
        assert!(!m[1].may_dax());
        assert_eq!(m[0].option("nosuid"), Some(""));
        assert_eq!(m[0].option("absent"), None);
    }

    #[test]
    fn a_path_is_on_its_longest_mount_point() {
        let mut m = parse(TEXT).unwrap();
        m.push(parse("/dev/root / ext4 rw 0 0\n").unwrap().remove(0));
        let on = |p: &str| mount_of(&m, std::path::Path::new(p)).map(|m| m.target.as_str());
        assert_eq!(on("/mnt/pmem1/data"), Some("/mnt/pmem1"));
        assert_eq!(on("/mnt/pmem/data"), Some("/mnt/pmem"));
        assert_eq!(on("/mnt/pmem"), Some("/mnt/pmem"));
        assert_eq!(on("/mnt/pmem10/x"), Some("/"));
        assert_eq!(on("/dev/shm/hugeshm.a"), Some("/dev/shm"));
        assert_eq!(mount_of(&m[..2], std::path::Path::new("/home")), None);
    }

    #[test]
    fn malformed() {
        let e = parse("proc /proc proc rw 0 0\nbroken line\n").unwrap_err();
        assert_eq!(e.line, Some(2));
        assert_eq!(unescape("a\\040b\\"), "a b\\");
        assert_eq!(unescape("\\04"), "\\04");
        assert_eq!(unescape("\\777x"), "\\777x");
    }
}
