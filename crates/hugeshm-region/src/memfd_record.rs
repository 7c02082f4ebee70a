//! Finding a memfd region by name, without a broker: the record file.
//!
//! A memfd has no name another process can open. Its creator therefore
//! publishes a small text file, `/dev/shm/hugeshm-memfd.<name>`, with the
//! permission bits of the region (0600 by default), saying which process
//! holds the memfd on which descriptor:
//!
//! ```text
//! hugeshm-memfd-record 1
//! pid 4242
//! start_ticks 987654
//! fd 5
//! dev 0:15
//! ino 2051
//! generation 9f3ac0de11223344
//! uid 0
//! size 1073741824
//! ```
//!
//! An attacher reads it, checks that the process still runs (pid *and*
//! start time, so a reused pid is not mistaken for it) and opens
//! `/proc/<pid>/fd/<fd>`: opening that link reopens the memfd itself, from
//! any process allowed to inspect the holder (same uid, or root:
//! `PTRACE_MODE_READ` on the holder). The region header's generation must
//! equal the record's, so a descriptor number reused for another file is
//! never taken for the region.
//!
//! When the creator is gone but other processes still hold the memfd, the
//! attacher finds one of them: every `/proc/PID/maps` line with the
//! record's device and inode, then that process's `/proc/PID/fd/*` entry
//! for the same inode (hugeshm's own attachers keep the descriptor open
//! for as long as they are attached). When nobody holds it, the memory is
//! gone and the record is *stale*: attach says so, and create refuses
//! until told to reclaim.
//!
//! The record appears atomically, complete: it is written to an unnamed
//! `O_TMPFILE` in `/dev/shm` and linked in place with `linkat`, which fails
//! if the name exists: that is the `O_EXCL` that makes exactly one of
//! several concurrent creators win. The `hugeshm-memfd.` prefix cannot
//! clash with a posix region's file, `hugeshm.<name>`.
//!
//! The last holder to close a memfd region removes the record; so does
//! [`Region::destroy`](crate::Region::destroy). A process killed while
//! holding it leaves the record behind (stale once nobody holds the
//! memfd).

use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::RegionError;
use crate::model::Owner;
use hugeshm_sys as sys;

/// Where memfd records live.
pub(crate) const MEMFD_RECORD_DIR: &str = "/dev/shm";

/// Prefix of memfd record files.
pub(crate) const MEMFD_RECORD_PREFIX: &str = "hugeshm-memfd.";

const FIRST_LINE: &str = "hugeshm-memfd-record 1";

/// The record path of memfd region `name`: `/dev/shm/hugeshm-memfd.<name>`.
pub fn memfd_record_path(name: &str) -> PathBuf {
    Path::new(MEMFD_RECORD_DIR).join(format!("{MEMFD_RECORD_PREFIX}{name}"))
}

/// What a memfd record says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub(crate) struct MemfdRecord {
    /// The process holding the memfd (the creator).
    pub pid: u32,
    /// Its start time (clock ticks after boot).
    pub start_ticks: u64,
    /// The descriptor number in that process.
    pub fd: i32,
    /// Device of the memfd (as in `/proc/PID/maps`).
    pub dev: (u32, u32),
    /// Inode of the memfd.
    pub ino: u64,
    /// The region's generation (as in its header).
    pub generation: u64,
    /// Creator uid.
    pub uid: u32,
    /// Region size in bytes.
    pub size_bytes: u64,
}

impl MemfdRecord {
    /// `/proc/<pid>/fd/<fd>`.
    pub fn fd_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/fd/{}", self.pid, self.fd))
    }

    pub(crate) fn format(&self) -> String {
        format!(
            "{FIRST_LINE}\npid {}\nstart_ticks {}\nfd {}\ndev {}:{}\nino {}\ngeneration {:016x}\nuid {}\nsize {}\n",
            self.pid,
            self.start_ticks,
            self.fd,
            self.dev.0,
            self.dev.1,
            self.ino,
            self.generation,
            self.uid,
            self.size_bytes
        )
    }

    /// Parses a record; the error names the line.
    pub(crate) fn parse(text: &str) -> Result<MemfdRecord, String> {
        let mut lines = text.lines();
        if lines.next() != Some(FIRST_LINE) {
            return Err(format!("the first line is not {FIRST_LINE:?}"));
        }
        let mut rec = MemfdRecord {
            pid: 0,
            start_ticks: 0,
            fd: -1,
            dev: (0, 0),
            ino: 0,
            generation: 0,
            uid: 0,
            size_bytes: 0,
        };
        let mut seen = 0u32;
        for (i, line) in lines.enumerate() {
            let bad = || format!("line {} is not a record field", i + 2);
            let (k, v) = line.split_once(' ').ok_or_else(bad)?;
            let num = |v: &str| v.parse::<u64>().map_err(|_| bad());
            match k {
                "pid" => rec.pid = v.parse().map_err(|_| bad())?,
                "start_ticks" => rec.start_ticks = num(v)?,
                "fd" => rec.fd = v.parse().map_err(|_| bad())?,
                "dev" => {
                    let (a, b) = v.split_once(':').ok_or_else(bad)?;
                    rec.dev = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                }
                "ino" => rec.ino = num(v)?,
                "generation" => rec.generation = u64::from_str_radix(v, 16).map_err(|_| bad())?,
                "uid" => rec.uid = v.parse().map_err(|_| bad())?,
                "size" => rec.size_bytes = num(v)?,
                // Unknown keys: from a newer version, ignored.
                _ => continue,
            }
            seen += 1;
        }
        if seen < 8 || rec.pid == 0 || rec.fd < 0 {
            return Err("incomplete record".to_owned());
        }
        Ok(rec)
    }
}

/// Largest record read: a record is about 150 bytes.
const MAX_RECORD_BYTES: usize = 4096;

/// Reads a record and who owns its file; `Ok(None)` when there is none.
///
/// `/dev/shm` is writable by everyone, so the record is opened through the
/// checked open (no link followed, a FIFO not waited on: either is
/// `NotOurs`), must be a regular file of at most 4 KiB, and a malformed one
/// is refused without quoting its content.
pub(crate) fn read(path: &Path) -> Result<Option<(MemfdRecord, Owner)>, RegionError> {
    let what = || path.display().to_string();
    let not_ours = |reason: String| RegionError::NotOurs {
        object: what(),
        reason,
    };
    let Some(file) = crate::checked_open::open_checked(path, sys::OpenCheck::read())? else {
        return Ok(None);
    };
    let st = *file.stat();
    if st.st_size as u64 > MAX_RECORD_BYTES as u64 {
        return Err(not_ours(format!(
            "{} bytes, more than a memfd record ever has ({MAX_RECORD_BYTES})",
            st.st_size
        )));
    }
    let buf = file
        .read_all(MAX_RECORD_BYTES)
        .map_err(|e| match e.errno() {
            Some(libc::EFBIG) => not_ours(format!("longer than {MAX_RECORD_BYTES} bytes")),
            _ => RegionError::Sys(e),
        })?;
    let text = std::str::from_utf8(&buf).map_err(|_| not_ours("not UTF-8 text".to_owned()))?;
    let rec = MemfdRecord::parse(text)
        .map_err(|e| not_ours(format!("not a hugeshm memfd record: {e}")))?;
    #[allow(clippy::unnecessary_cast)]
    let owner = Owner {
        uid: st.st_uid as u32,
        mode: st.st_mode as u32 & 0o777,
    };
    Ok(Some((rec, owner)))
}

/// Publishes a record atomically: `Ok(false)` when a record of that name
/// exists already (another creator won).
pub(crate) fn publish(path: &Path, rec: &MemfdRecord, mode: u32) -> Result<bool, RegionError> {
    publish_text(path, &rec.format(), mode)
}

/// Publishes `text` at `path` atomically, with exactly `mode`: written to
/// an `O_TMPFILE` in the same directory and linked in place (`linkat`
/// neither follows nor replaces what is at `path`); `Ok(false)` when
/// something exists there already. Also the `hugeshm run` records'.
pub(crate) fn publish_text(path: &Path, text: &str, mode: u32) -> Result<bool, RegionError> {
    let dir = path.parent().unwrap_or(Path::new(MEMFD_RECORD_DIR));
    let io = |e: std::io::Error| RegionError::io(path.display().to_string(), e);
    let fd = sys::open_tmpfile(dir, mode)?;
    rustix::fs::fchmod(&fd, rustix::fs::Mode::from_bits_truncate(mode))
        .map_err(|e| io(e.into()))?;
    let mut file = std::fs::File::from(fd);
    file.write_all(text.as_bytes()).map_err(io)?;
    sys::link_tmpfile(file.as_fd(), path).map_err(RegionError::Sys)
}

/// Removes the record at `path` if it still describes `generation`.
pub(crate) fn remove_if(path: &Path, generation: u64) -> Result<bool, RegionError> {
    match read(path) {
        Ok(Some((r, _))) if r.generation == generation => match std::fs::remove_file(path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(RegionError::io(path.display().to_string(), e)),
        },
        Ok(_) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let r = MemfdRecord {
            pid: 4242,
            start_ticks: 987_654,
            fd: 5,
            dev: (0, 15),
            ino: 2051,
            generation: 0x9f3a_c0de_1122_3344,
            uid: 0,
            size_bytes: 1 << 30,
        };
        let t = r.format();
        assert!(t.starts_with("hugeshm-memfd-record 1\npid 4242\n"), "{t}");
        assert!(t.contains("generation 9f3ac0de11223344\n"));
        assert_eq!(MemfdRecord::parse(&t).unwrap(), r);
        assert_eq!(r.fd_path(), PathBuf::from("/proc/4242/fd/5"));
        // Newer keys are ignored; missing ones are an error naming why.
        let more = format!("{t}future 1\n");
        assert_eq!(MemfdRecord::parse(&more).unwrap(), r);
        assert!(MemfdRecord::parse("hugeshm-memfd-record 1\npid 1\n")
            .unwrap_err()
            .contains("incomplete"));
        assert!(MemfdRecord::parse("something else").is_err());
        let e = MemfdRecord::parse("hugeshm-memfd-record 1\npid x\n").unwrap_err();
        assert_eq!(e, "line 2 is not a record field");
        // Never echoes what a foreign file holds.
        let e = MemfdRecord::parse("hugeshm-memfd-record 1\nsecret token\n").unwrap_err();
        assert!(!e.contains("secret") && !e.contains("token"), "{e}");
        assert!(MemfdRecord::parse("hugeshm-memfd-record 1\npid 4294967296\n").is_err());
        assert_eq!(
            memfd_record_path("db"),
            PathBuf::from("/dev/shm/hugeshm-memfd.db")
        );
    }
}
