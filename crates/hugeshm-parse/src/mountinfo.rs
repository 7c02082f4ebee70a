//! `/proc/PID/mountinfo`: every mount of a process's mount namespace, with
//! the root of each mount inside its file system and the super block's
//! options (where cgroup v1 names its controllers).
//!
//! ```text
//! 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//! (1)(2)(3)   (4)   (5)      (6)       (7)   (8) (9)    (10)        (11)
//! ```
//!
//! (1) mount id, (2) parent id, (3) `major:minor`, (4) root, (5) mount point,
//! (6) mount options, (7) zero or more optional fields, (8) `-`, (9) file
//! system type, (10) source, (11) super block options. Paths carry the
//! kernel's octal escapes (`\040` for a space), decoded here.

use crate::error::{parse_u64, ParseError};
use crate::mounts::unescape;
use serde::{Deserialize, Serialize};

const PATH: &str = "/proc/PID/mountinfo";

/// One line of `mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MountInfo {
    /// Unique id of the mount.
    pub mount_id: u32,
    /// Id of the parent mount (its own id for the root of the namespace).
    pub parent_id: u32,
    /// Device major number (`st_dev` of files on it).
    pub major: u32,
    /// Device minor number.
    pub minor: u32,
    /// The directory of the file system that is this mount's root (`/`
    /// for a whole file system; a cgroup path for a cgroup bind mount).
    pub root: String,
    /// Where it is mounted, relative to the process's root.
    pub mount_point: String,
    /// Per-mount options (`rw`, `nosuid`, `relatime`, ...).
    pub mount_options: Vec<String>,
    /// Optional fields (`shared:1`, `master:2`, ...).
    pub optional_fields: Vec<String>,
    /// File system type (`cgroup2`, `cgroup`, `hugetlbfs`, `ext4`, ...).
    pub fstype: String,
    /// The mounted device or name (`cgroup2`, `/dev/vda`, `none`).
    pub source: String,
    /// Super block options in order (`rw`, `hugetlb`, `name=systemd`,
    /// `pagesize=2M`); cgroup v1 lists its controllers here.
    pub super_options: Vec<String>,
}

impl MountInfo {
    /// Whether a super block option is set: a bare flag (`hugetlb`) or the
    /// key of a `key=value` option (`name`).
    pub fn has_super_option(&self, key: &str) -> bool {
        self.super_options
            .iter()
            .any(|o| o == key || o.split_once('=').is_some_and(|(k, _)| k == key))
    }

    /// The value of a `key=value` super block option (`name=systemd` →
    /// `Some("systemd")`), `Some("")` for a bare flag.
    pub fn super_option(&self, key: &str) -> Option<&str> {
        self.super_options
            .iter()
            .find_map(|o| match o.split_once('=') {
                Some((k, v)) if k == key => Some(v),
                None if o == key => Some(""),
                _ => None,
            })
    }

    /// Whether this is a cgroup v1 hierarchy (`cgroup`).
    pub fn is_cgroup_v1(&self) -> bool {
        self.fstype == "cgroup"
    }

    /// Whether this is the cgroup v2 (unified) hierarchy (`cgroup2`).
    pub fn is_cgroup_v2(&self) -> bool {
        self.fstype == "cgroup2"
    }
}

fn bad(line: usize, what: &str, raw: &str) -> ParseError {
    ParseError::at(PATH, line, format!("{what}, found {raw:?}"))
}

fn u32_field(line: usize, what: &str, text: &str) -> Result<u32, ParseError> {
    let v = parse_u64(PATH, line, what, text)?;
    u32::try_from(v).map_err(|_| ParseError::at(PATH, line, format!("{what}: {v} is too large")))
}

fn options(text: &str) -> Vec<String> {
    text.split(',')
        .filter(|o| !o.is_empty())
        .map(unescape)
        .collect()
}

/// Parses `/proc/PID/mountinfo`.
pub fn parse(text: &str) -> Result<Vec<MountInfo>, ParseError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = raw.split_whitespace().collect();
        let Some(sep) = f.iter().position(|t| *t == "-") else {
            return Err(bad(n, "expected the \" - \" separator", raw));
        };
        if sep < 6 || f.len() < sep + 3 {
            return Err(bad(
                n,
                "expected \"ID PARENT MAJ:MIN ROOT MOUNT-POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER-OPTIONS\"",
                raw,
            ));
        }
        let (major, minor) = f[2]
            .split_once(':')
            .ok_or_else(|| bad(n, "expected MAJOR:MINOR", f[2]))?;
        out.push(MountInfo {
            mount_id: u32_field(n, "mount id", f[0])?,
            parent_id: u32_field(n, "parent id", f[1])?,
            major: u32_field(n, "major", major)?,
            minor: u32_field(n, "minor", minor)?,
            root: unescape(f[3]),
            mount_point: unescape(f[4]),
            mount_options: options(f[5]),
            optional_fields: f[6..sep].iter().map(|s| s.to_string()).collect(),
            fstype: f[sep + 1].to_string(),
            source: unescape(f[sep + 2]),
            // A super block without options (rare) leaves the field out.
            super_options: f.get(sep + 3).map(|s| options(s)).unwrap_or_default(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hybrid host (cgroup v1 controllers and the unified hierarchy
    /// under /sys/fs/cgroup/unified) as Linux 6.18 prints it, plus a
    /// hugetlb v1 hierarchy, a hugetlbfs mount with a space in its name and
    /// a container's bind mount of a cgroup subtree.
    const TEXT: &str = "22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:7 master:3 - cgroup cgroup rw,cpu,cpuacct
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
42 31 0:39 / /sys/fs/cgroup/hugetlb rw,nosuid,nodev,noexec,relatime shared:20 - cgroup cgroup rw,hugetlb
50 27 0:40 / /mnt/huge\\0401g rw,relatime - hugetlbfs none rw,pagesize=1024M
61 60 0:38 /kubepods/pod1/ctr /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw,nsdelegate
";

    #[test]
    fn real_text() {
        let m = parse(TEXT).unwrap();
        assert_eq!(m.len(), 10);
        assert_eq!((m[0].mount_id, m[0].parent_id), (22, 27));
        assert_eq!((m[0].major, m[0].minor), (0, 21));
        assert_eq!(m[1].optional_fields, ["shared:1"]);
        assert_eq!(m[1].source, "/dev/vda");
        assert_eq!(m[1].mount_options, ["rw", "relatime"]);
        assert_eq!(m[1].super_options, ["rw", "discard"]);
        assert!(m[3].is_cgroup_v1() && m[3].has_super_option("cpu"));
        assert!(!m[3].has_super_option("hugetlb"));
        assert_eq!(m[4].optional_fields, ["shared:7", "master:3"]);
        assert!(m[4].has_super_option("cpuacct"));
        assert_eq!(m[4].mount_point, "/sys/fs/cgroup/cpu,cpuacct");
        assert_eq!(m[5].super_option("name"), Some("systemd"));
        assert!(m[5].has_super_option("name"));
        assert!(m[6].is_cgroup_v2());
        assert_eq!(m[6].mount_point, "/sys/fs/cgroup/unified");
        assert!(m[7].has_super_option("hugetlb"));
        assert_eq!(m[7].super_option("hugetlb"), Some(""));
        assert_eq!(m[8].mount_point, "/mnt/huge 1g");
        assert_eq!(m[8].super_option("pagesize"), Some("1024M"));
        assert_eq!(m[9].root, "/kubepods/pod1/ctr");
        assert_eq!(m[9].mount_point, "/sys/fs/cgroup");
        assert_eq!(m[9].super_option("absent"), None);
    }

    #[test]
    fn no_super_options() {
        let m = parse("1 0 0:1 / / rw - rootfs rootfs\n").unwrap();
        assert!(m[0].super_options.is_empty());
    }

    #[test]
    fn malformed() {
        for (text, line) in [
            ("22 27 0:21 / /proc rw,relatime proc proc rw\n", 1),
            ("22 27 0:21 / /proc rw - proc proc rw\n22 27 0:21 /\n", 2),
            ("22 27 0:21 / /proc rw - proc\n", 1),
            ("x 27 0:21 / /proc rw - proc proc rw\n", 1),
            ("22 27 021 / /proc rw - proc proc rw\n", 1),
            ("22 27 0:x / /proc rw - proc proc rw\n", 1),
            ("22 99999999999 0:1 / /proc rw - proc proc rw\n", 1),
            ("22 - 0:1 / /proc rw - proc proc rw\n", 1),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, Some(line), "{text:?}: {e}");
            assert!(e.to_string().starts_with("/proc/PID/mountinfo:"), "{e}");
        }
        // Truncated in the middle of the last line's super options: still a mount.
        let m = parse("41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 r").unwrap();
        assert_eq!(m[0].super_options, ["r"]);
        assert!(parse("").unwrap().is_empty());
    }
}
