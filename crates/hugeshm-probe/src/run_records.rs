//! The files `hugeshm run` leaves in `/dev/shm` (`hugeshm-run.<pid>.<addr>`,
//! format in `hugeshm_parse::run_record`), read the way a root reader must
//! read a file anyone could have planted: opened without following a link
//! and without blocking (`O_NOFOLLOW|O_NONBLOCK`: a FIFO does not hang the
//! scan), checked after opening (`fstat`: a regular file of at most
//! [`MAX_RUN_RECORD_BYTES`]), read up to that bound, text only. Whose it
//! is and whether it matches a live process is the doctor's to judge.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};

use hugeshm_parse::run_record::{parse_file_name, MAX_RUN_RECORD_BYTES};

use crate::Probe;

/// The most record files one scan reads.
pub const MAX_RUN_RECORDS: usize = 1024;

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
    /// The record files in `/dev/shm` (under the fs root), by name, at most
    /// [`MAX_RUN_RECORDS`]; none when the directory cannot be listed.
    pub fn run_records(&self) -> Vec<RunRecordFile> {
        let dir = self.roots.fs.join("dev/shm");
        let Ok(rd) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut names: Vec<(String, (u32, u64))> = rd
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let named = parse_file_name(&name)?;
                Some((name, named))
            })
            .collect();
        names.sort();
        names.truncate(MAX_RUN_RECORDS);
        names
            .into_iter()
            .map(|(name, named)| RunRecordFile {
                path: format!("/dev/shm/{name}"),
                named,
                read: read_record(&dir.join(&name)),
            })
            .collect()
    }
}

fn read_record(path: &std::path::Path) -> Result<(String, u32), String> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => "a symbolic link".to_owned(),
            _ => format!("cannot open: {e}"),
        })?;
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
    fn links_fifos_and_big_files_are_not_read() {
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
        std::fs::write(shm.join("hugeshm-run.x"), "not a record name").unwrap();
        let probe = Probe::new(Roots {
            fs: root.clone(),
            ..Roots::default()
        });
        let got = probe.run_records();
        let _ = std::fs::remove_dir_all(&root);
        let reads: Vec<(u32, Result<String, String>)> = got
            .into_iter()
            .map(|r| (r.named.0, r.read.map(|(t, _)| t)))
            .collect();
        assert_eq!(reads.len(), 5, "{reads:?}");
        assert_eq!(reads[0], (1, Ok("hugeshm-run-record 1\n".to_owned())));
        assert_eq!(reads[1], (2, Err("a symbolic link".to_owned())));
        assert_eq!(reads[2], (3, Err("not a regular file".to_owned())));
        assert!(reads[3]
            .1
            .as_ref()
            .unwrap_err()
            .contains("more than a record"));
        assert_eq!(reads[4], (5, Err("not text".to_owned())));
    }
}
