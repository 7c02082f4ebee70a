//! `/proc/sysvipc/shm`: every System V shared memory segment on the host.
//!
//! The file does not say whether a segment is on huge pages: only an attached
//! process's smaps does.

use crate::error::{parse_i64, parse_u64, ParseError};
use serde::{Deserialize, Serialize};

const PATH: &str = "/proc/sysvipc/shm";

/// `SHM_DEST` in the mode: removed with `IPC_RMID`, gone when the last process detaches.
pub const SHM_DEST: u32 = 0o1000;
/// `SHM_LOCKED` in the mode: locked with `SHM_LOCK`.
pub const SHM_LOCKED: u32 = 0o2000;

/// One segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ShmSegment {
    /// The key (`IPC_PRIVATE` = 0).
    pub key: i32,
    /// The id, as `ipcs -m` and `ipcrm -m` use it.
    pub shmid: i32,
    /// Mode bits, permissions plus `SHM_DEST` / `SHM_LOCKED`.
    pub perms: u32,
    /// Size in bytes as asked for at `shmget` (not rounded to the page size).
    pub size_bytes: u64,
    /// Creator pid.
    pub cpid: u32,
    /// Pid of the last `shmat`/`shmdt`.
    pub lpid: u32,
    /// Number of attachments.
    pub nattch: u64,
    /// Owner uid.
    pub uid: u32,
    /// Owner gid.
    pub gid: u32,
    /// Creator uid.
    pub cuid: u32,
    /// Creator gid.
    pub cgid: u32,
    /// Last attach time (seconds since the epoch, 0 = never).
    pub atime: i64,
    /// Last detach time.
    pub dtime: i64,
    /// Last change time.
    pub ctime: i64,
    /// Resident bytes (`rss` column). For hugetlb segments kernels report 0 here.
    pub rss_bytes: Option<u64>,
    /// Swapped bytes.
    pub swap_bytes: Option<u64>,
}

impl ShmSegment {
    /// Marked for removal (`IPC_RMID`) but still attached somewhere.
    pub fn marked_for_destruction(&self) -> bool {
        self.perms & SHM_DEST != 0
    }

    /// Locked in memory with `SHM_LOCK`.
    pub fn locked(&self) -> bool {
        self.perms & SHM_LOCKED != 0
    }
}

/// Parses `/proc/sysvipc/shm`, locating columns by the header's names.
pub fn parse(text: &str) -> Result<Vec<ShmSegment>, ParseError> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((_, header)) = lines.next() else {
        return Err(ParseError::file(PATH, "empty file, expected a header line"));
    };
    let cols: Vec<&str> = header.split_whitespace().collect();
    let col = |name: &str| cols.iter().position(|c| *c == name);
    let need = |name: &str| {
        col(name).ok_or_else(|| {
            ParseError::at(
                PATH,
                1,
                format!("header has no {name:?} column: {header:?}"),
            )
        })
    };
    let (ikey, iid, iperms, isize) = (need("key")?, need("shmid")?, need("perms")?, need("size")?);
    let (icpid, ilpid, inatt) = (need("cpid")?, need("lpid")?, need("nattch")?);
    let (iuid, igid, icuid, icgid) = (need("uid")?, need("gid")?, need("cuid")?, need("cgid")?);
    let (iat, idt, ict) = (col("atime"), col("dtime"), col("ctime"));
    let (irss, iswap) = (col("rss"), col("swap"));

    let mut out = Vec::new();
    for (i, line) in lines {
        let n = i + 1;
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < cols.len() {
            return Err(ParseError::at(
                PATH,
                n,
                format!(
                    "expected {} columns, found {}: {line:?}",
                    cols.len(),
                    f.len()
                ),
            ));
        }
        let u = |idx: usize, what: &str| parse_u64(PATH, n, what, f[idx]);
        let u32_ = |idx: usize, what: &str| -> Result<u32, ParseError> {
            u32::try_from(u(idx, what)?)
                .map_err(|_| ParseError::at(PATH, n, format!("{what}: {} too large", f[idx])))
        };
        let i32_ = |idx: usize, what: &str| -> Result<i32, ParseError> {
            i32::try_from(parse_i64(PATH, n, what, f[idx])?)
                .map_err(|_| ParseError::at(PATH, n, format!("{what}: {} out of range", f[idx])))
        };
        let time = |idx: Option<usize>, what: &str| {
            idx.map(|i| parse_i64(PATH, n, what, f[i])).transpose()
        };
        let perms = u32::from_str_radix(f[iperms], 8).map_err(|_| {
            ParseError::at(
                PATH,
                n,
                format!("perms: expected octal, found {:?}", f[iperms]),
            )
        })?;
        out.push(ShmSegment {
            key: i32_(ikey, "key")?,
            shmid: i32_(iid, "shmid")?,
            perms,
            size_bytes: u(isize, "size")?,
            cpid: u32_(icpid, "cpid")?,
            lpid: u32_(ilpid, "lpid")?,
            nattch: u(inatt, "nattch")?,
            uid: u32_(iuid, "uid")?,
            gid: u32_(igid, "gid")?,
            cuid: u32_(icuid, "cuid")?,
            cgid: u32_(icgid, "cgid")?,
            atime: time(iat, "atime")?.unwrap_or(0),
            dtime: time(idt, "dtime")?.unwrap_or(0),
            ctime: time(ict, "ctime")?.unwrap_or(0),
            rss_bytes: irss.map(|i| u(i, "rss")).transpose()?,
            swap_bytes: iswap.map(|i| u(i, "swap")).transpose()?,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap
         0          3  1600              4194304  1234  1234      1     0     0     0     0 1763720000          0 1763720000                     0                     0
1234567890          4   600              1048576  1240  1250      0  1000  1000  1000  1000 1763720001 1763720002 1763720000               1048576                     0
   -559038737       5  2600            134217728  1300  1300      2    26    26    26    26 1763720003          0 1763720003                     0                     0
";

    #[test]
    fn real_text() {
        let s = parse(TEXT).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].shmid, 3);
        assert_eq!(s[0].perms & 0o777, 0o600);
        assert!(s[0].marked_for_destruction());
        assert_eq!(s[0].size_bytes, 4 << 20);
        assert_eq!(s[1].key, 1234567890);
        assert_eq!(s[1].nattch, 0);
        assert_eq!(s[1].rss_bytes, Some(1 << 20));
        assert_eq!(s[1].dtime, 1763720002);
        assert_eq!(s[2].key, -559038737);
        assert!(s[2].locked());
        assert!(!s[2].marked_for_destruction());
        assert!(parse(TEXT.lines().next().unwrap()).unwrap().is_empty());
    }

    #[test]
    fn malformed() {
        assert!(parse("").is_err());
        assert!(parse("key shmid\n").is_err());
        let head = TEXT.lines().next().unwrap();
        let e = parse(&format!("{head}\n 0 3 1600 4194304\n")).unwrap_err();
        assert_eq!(e.line, Some(2));
        let e = parse(&format!(
            "{head}\n 0 3 1900 4194304 1 1 1 0 0 0 0 0 0 0 0 0\n"
        ))
        .unwrap_err();
        assert!(e.to_string().contains("octal"), "{e}");
        assert!(parse(&format!("{head}\n 0 3 600 -5 1 1 1 0 0 0 0 0 0 0 0 0\n")).is_err());
    }
}
