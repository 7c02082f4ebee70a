//! Writing and removing the records the doctor reads
//! (`/dev/shm/hugeshm-run.<pid>.<address>`; format and reader in
//! `hugeshm_parse::run_record`).
//!
//! The server's user writes them: mode 0644 (the doctor, often another
//! user, reads them; nothing in them is secret: it is what `/proc/PID/
//! smaps` says to anyone allowed to read it), published whole and
//! atomically (`O_TMPFILE` + `linkat`, which neither follows a link
//! planted at the name nor replaces what is there). `/dev/shm` is sticky:
//! only the owner removes a record. A record whose process is gone is
//! removed by the next `hugeshm run` process of the same user that writes
//! one (and ignored by the doctor meanwhile).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use hugeshm_parse::run_record::{self, RunRecord};

use crate::error::RegionError;
use crate::header::{liveness, Liveness};
use crate::memfd_record::publish_text;

/// Where the records live.
pub const RUN_RECORD_DIR: &str = "/dev/shm";

/// The most directory entries [`sweep`] looks at.
const SWEEP_LIMIT: usize = 4096;

/// The record file of process `pid`'s mapping at `address`.
pub fn record_path(pid: u32, address: u64) -> PathBuf {
    Path::new(RUN_RECORD_DIR).join(run_record::file_name(pid, address))
}

/// Whether `path` is a regular file owned by `uid` (not following a link).
fn owned_file(path: &Path, uid: u32) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file() && m.uid() == uid)
}

/// Removes the records of user `uid` whose process is gone; once per
/// process.
pub(crate) fn sweep(uid: u32) {
    static DONE: AtomicBool = AtomicBool::new(false);
    if DONE.swap(true, Ordering::Relaxed) {
        return;
    }
    let Ok(rd) = std::fs::read_dir(RUN_RECORD_DIR) else {
        return;
    };
    for entry in rd.take(SWEEP_LIMIT).flatten() {
        let name = entry.file_name();
        let Some((pid, _)) = name.to_str().and_then(run_record::parse_file_name) else {
            continue;
        };
        let path = entry.path();
        if liveness(pid, None) == Liveness::Dead && owned_file(&path, uid) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Writes `rec`; the error says why not (the mapping is in place anyway).
pub(crate) fn write(rec: &RunRecord) -> Result<PathBuf, RegionError> {
    sweep(rec.uid);
    let path = record_path(rec.pid, rec.address);
    let text = rec.format();
    if publish_text(&path, &text, 0o644)? {
        return Ok(path);
    }
    // Something has the name: a record of this pid's earlier life (a
    // reused pid) or one this process lost track of, if it is this user's
    // regular file; anything else is left alone.
    if !owned_file(&path, rec.uid) {
        return Err(RegionError::Unsupported(format!(
            "{} exists and is not a record of uid {}: no record written",
            path.display(),
            rec.uid
        )));
    }
    std::fs::remove_file(&path).map_err(|e| RegionError::io(path.display().to_string(), e))?;
    if publish_text(&path, &text, 0o644)? {
        Ok(path)
    } else {
        Err(RegionError::Unsupported(format!(
            "{} appeared again while it was replaced: no record written",
            path.display()
        )))
    }
}

/// Removes the record of `pid`'s mapping at `address`, if it is `uid`'s.
pub fn remove(pid: u32, address: u64, uid: u32) {
    let path = record_path(pid, address);
    if owned_file(&path, uid) {
        let _ = std::fs::remove_file(&path);
    }
}

/// After `pid`'s mapping at `address` was split (a huge page in it went
/// onto base pages): its record is removed and each piece left, `(start,
/// length)`, gets one of its own, what the whole's said for its range
/// (resident bytes and the node split in proportion). Whether each was
/// written.
pub fn split(pid: u32, address: u64, uid: u32, pieces: &[(u64, u64)]) -> Vec<bool> {
    let path = record_path(pid, address);
    // Opened as the other records are checked: no link followed, no FIFO
    // waited on, a regular file of `uid`'s.
    let text = hugeshm_sys::OpenCheck::read()
        .open(&path)
        .ok()
        .filter(|f| f.uid() == uid)
        .and_then(|f| {
            let mut text = String::new();
            std::io::Read::read_to_string(
                &mut std::io::Read::take(std::fs::File::from(f.into_fd()), 64 << 10),
                &mut text,
            )
            .ok()
            .map(|_| text)
        });
    remove(pid, address, uid);
    let Some(whole) = text.and_then(|t| hugeshm_parse::run_record::parse(&t).ok()) else {
        return vec![false; pieces.len()];
    };
    let part = |v: u64, len: u64| {
        (u128::from(v) * u128::from(len) / u128::from(whole.size_bytes.max(1))) as u64
    };
    pieces
        .iter()
        .map(|&(start, len)| {
            let mut rec = whole.clone();
            rec.address = start;
            rec.size_bytes = len;
            rec.requested_bytes = whole.requested_bytes.min(len);
            rec.resident_bytes = part(whole.resident_bytes, len).min(len);
            rec.nodes = whole
                .nodes
                .iter()
                .map(|(n, b)| (*n, part(*b, len)))
                .collect();
            write(&rec).is_ok()
        })
        .collect()
}
