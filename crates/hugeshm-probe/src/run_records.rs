//! The files `hugeshm run` leaves in `/dev/shm` (`hugeshm-run.<pid>.<addr>`,
//! format in `hugeshm_parse::run_record`), looked up one name at a time
//! from what is live (the pid and start address of a mapping the scan
//! found; `/dev/shm` is never listed for them, so what other users create
//! there neither hides a record nor costs a reader anything) and read the
//! way a root reader must read a file anyone could have planted: opened
//! without following a link and without blocking (`O_NOFOLLOW|O_NONBLOCK`:
//! a FIFO does not hang the scan), checked after opening (`fstat`: a
//! regular file of at most [`MAX_RUN_RECORD_BYTES`]), read up to that
//! bound, text only. Whose it is and whether it matches the process is the
//! doctor's to judge.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};

use hugeshm_parse::run_record::{file_name, MAX_RUN_RECORD_BYTES};

use crate::Probe;

/// One record file, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunRecordFile {
    /// Its path as the host names it (`/dev/shm/hugeshm-run.4242.7f...`).
    pub path: String,
    /// The pid and address its name says.
    pub named: (u32, u64),
    /// Its text and owner uid, or why it could not be read.
    pub read: Result<(String, u32), String>,
}

impl Probe {
    /// The record of process `pid`'s mapping at `address`: the one name
    /// `/dev/shm/hugeshm-run.<pid>.<address in hex>` (under the fs root),
    /// as the writer names it; `None` when there is no such file.
    pub fn run_record(&self, pid: u32, address: u64) -> Option<RunRecordFile> {
        let name = file_name(pid, address);
        let read = match read_record(&self.roots.fs.join("dev/shm").join(&name)) {
            Err(Missing) => return None,
            Ok(r) => Ok(r),
            Err(Refused(why)) => Err(why),
        };
        Some(RunRecordFile {
            path: format!("/dev/shm/{name}"),
            named: (pid, address),
            read,
        })
    }
}

/// Why a record was not read.
enum NotRead {
    /// No file of that name.
    Missing,
    /// Something there that is not a record to read (said).
    Refused(String),
}
use NotRead::{Missing, Refused};

fn read_record(path: &std::path::Path) -> Result<(String, u32), NotRead> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) => Missing,
            Some(libc::ELOOP) => Refused("a symbolic link".to_owned()),
            _ => Refused(format!("cannot open: {e}")),
        })?;
    read_open(f).map_err(Refused)
}

fn read_open(f: std::fs::File) -> Result<(String, u32), String> {
    let md = f.metadata().map_err(|e| format!("cannot stat: {e}"))?;
    if !md.file_type().is_file() {
        return Err("not a regular file".to_owned());
    }
    if md.len() > MAX_RUN_RECORD_BYTES {
        return Err(format!(
            "{} bytes, more than a record ever has ({MAX_RUN_RECORD_BYTES})",
            md.len()
        ));
    }
    let mut buf = Vec::new();
    f.take(MAX_RUN_RECORD_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(|e| format!("cannot read: {e}"))?;
    if buf.len() as u64 > MAX_RUN_RECORD_BYTES {
        return Err(format!("longer than {MAX_RUN_RECORD_BYTES} bytes"));
    }
    let text = String::from_utf8(buf).map_err(|_| "not text".to_owned())?;
    Ok((text, md.uid()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Roots;

    #[test]
    fn one_name_is_looked_up_and_links_fifos_and_big_files_are_not_read() {
        let root = std::env::temp_dir().join(format!("hugeshm-probe-rr-{}", std::process::id()));
        let shm = root.join("dev/shm");
        std::fs::create_dir_all(&shm).unwrap();
        std::fs::write(shm.join("hugeshm-run.1.1000"), "hugeshm-run-record 1\n").unwrap();
        std::os::unix::fs::symlink("/etc/shadow", shm.join("hugeshm-run.2.2000")).unwrap();
        let fifo = std::process::Command::new("mkfifo")
            .arg(shm.join("hugeshm-run.3.3000"))
            .status()
            .unwrap();
        assert!(fifo.success());
        std::fs::write(shm.join("hugeshm-run.4.4000"), vec![b'x'; 70000]).unwrap();
        std::fs::write(shm.join("hugeshm-run.5.5000"), [0xff, 0xfe]).unwrap();
        // Another name of pid 1 is not its record at 0x1000.
        std::fs::write(shm.join("hugeshm-run.1.01000"), "x").unwrap();
        let probe = Probe::new(Roots {
            fs: root.clone(),
            ..Roots::default()
        });
        let got: Vec<Option<RunRecordFile>> = [(1, 0x1000), (2, 0x2000), (3, 0x3000)]
            .into_iter()
            .chain([(4, 0x4000), (5, 0x5000), (6, 0x6000), (1, 0x2000)])
            .map(|(p, a)| probe.run_record(p, a))
            .collect();
        let _ = std::fs::remove_dir_all(&root);
        let reads: Vec<Option<(u32, Result<String, String>)>> = got
            .into_iter()
            .map(|r| r.map(|r| (r.named.0, r.read.map(|(t, _)| t))))
            .collect();
        assert_eq!(reads[0], Some((1, Ok("hugeshm-run-record 1\n".to_owned()))));
        assert_eq!(reads[1], Some((2, Err("a symbolic link".to_owned()))));
        assert_eq!(reads[2], Some((3, Err("not a regular file".to_owned()))));
        let big = reads[3].clone().unwrap().1.unwrap_err();
        assert!(big.contains("more than a record"), "{big}");
        assert_eq!(reads[4], Some((5, Err("not text".to_owned()))));
        assert_eq!(reads[5], None, "no file: no record");
        assert_eq!(reads[6], None, "no file: no record");
    }
}
