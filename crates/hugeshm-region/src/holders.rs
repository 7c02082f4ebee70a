//! Who maps what: every process's shared-memory mappings from one pass over
//! `/proc/*/maps` of the probe's `/proc` root (the candidate mappings only,
//! read by `PROCMAP_QUERY` where the kernel has it), made on first use.

use std::cell::OnceCell;
use std::collections::HashMap;

use hugeshm_probe::{Probe, SysvMapping};

/// Pids by SysV shmid and by file (device, inode), scanned when first
/// asked (processes whose maps cannot be read are skipped).
#[derive(Debug)]
pub(crate) struct Holders<'p> {
    probe: &'p Probe,
    cell: OnceCell<Scanned>,
}

#[derive(Debug, Default)]
struct Scanned {
    shm: HashMap<u64, Vec<u32>>,
    files: HashMap<(u32, u32, u64), Vec<u32>>,
}

impl Scanned {
    fn scan(probe: &Probe) -> Scanned {
        let mut h = Scanned::default();
        let Ok(list) = probe.processes() else {
            return h;
        };
        // Only the mappings that can be shared memory, by PROCMAP_QUERY
        // where the kernel has it (no maps text formatted for the rest).
        let how = probe.maps_read();
        // A mapping named like a SysV attachment counts only where the
        // kernel vouches for it (its device, IPC namespace, key and count of
        // attachments): a user's look-alike file holds nothing of ours.
        let sysv = probe.sysv_attachments(probe.sysv_segments().ok().as_deref());
        for pid in list.pids {
            let Ok(maps) = probe.pid(pid).maps_candidates(how) else {
                continue;
            };
            for e in maps {
                if e.inode == 0 {
                    continue;
                }
                let list = match sysv.of(probe, pid, &e) {
                    Some(SysvMapping::Here(shmid)) => h.shm.entry(shmid).or_default(),
                    Some(SysvMapping::Elsewhere { .. } | SysvMapping::LookAlike) => continue,
                    None => h
                        .files
                        .entry((e.dev_major, e.dev_minor, e.inode))
                        .or_default(),
                };
                if list.last() != Some(&pid) {
                    list.push(pid);
                }
            }
        }
        h
    }
}

impl<'p> Holders<'p> {
    /// Scans the probe's `/proc` when first asked.
    pub(crate) fn lazy(probe: &'p Probe) -> Holders<'p> {
        Holders {
            probe,
            cell: OnceCell::new(),
        }
    }

    /// The probe the scan reads.
    pub(crate) fn probe(&self) -> &'p Probe {
        self.probe
    }

    fn get(&self) -> &Scanned {
        self.cell.get_or_init(|| Scanned::scan(self.probe))
    }

    /// Pids that map SysV segment `shmid`.
    pub(crate) fn shm(&self, shmid: i32) -> Vec<u32> {
        self.get()
            .shm
            .get(&(shmid as u64))
            .cloned()
            .unwrap_or_default()
    }

    /// Pids that map the file `dev`/`ino`.
    pub(crate) fn file(&self, dev: (u32, u32), ino: u64) -> Vec<u32> {
        self.get()
            .files
            .get(&(dev.0, dev.1, ino))
            .cloned()
            .unwrap_or_default()
    }
}
