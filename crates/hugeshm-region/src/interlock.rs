//! The crash interlock: what is behind a region's name, who holds it, and
//! how a region that nobody holds is reclaimed.
//!
//! ## Who holds a region
//!
//! * **sysv**: `shm_nattch > 0`, or a `/proc/PID/maps` line of the
//!   segment (`/SYSV<key>`, inode = shmid).
//! * **hugetlbfs, posix**: every `Region` holds a shared
//!   `flock` on the file for as long as it lives, the creator from before
//!   the file has a name (it is created unnamed with `O_TMPFILE`, locked,
//!   then linked in place). A probe's `LOCK_EX|LOCK_NB` fails while anyone
//!   holds it: that works across pid namespaces and needs no `/proc` scan.
//!   `/proc/PID/maps` (device and inode) names the pids.
//! * **memfd**: processes that map the memfd (device and inode from the
//!   record), and the record's process while its
//!   descriptor still is that memfd.
//! * Any backend: a region whose creation has not finished (header
//!   `initializing`, or not written yet) is held while its creator runs
//!   (pid and start time; for a SysV segment without a header, `shm_cpid`).
//!
//! ## What `create` does when the name exists
//!
//! | found | default | `Reclaim::Reuse` | `Reclaim::Recreate` |
//! |---|---|---|---|
//! | held by a live process | `AlreadyExists` naming the pids | same | same |
//! | not a hugeshm region, damaged header, another name's SysV key | `NotOurs` | same | same |
//! | header of a newer layout | `NewerLayout` | same | same |
//! | `ready`, nobody holds it | `Orphaned` | attach, keep contents | destroy, create |
//! | `initializing` / no header, creator dead | `Orphaned` (crashed) | `Incomplete` | destroy, create |
//! | memfd record, nobody holds the memfd | `Orphaned` (stale) | `Stale` | replace the record, create |
//!
//! Creation claims the name atomically before it reserves memory
//! (`shmget(IPC_CREAT|IPC_EXCL)`, `linkat` of the locked `O_TMPFILE`,
//! `linkat` of the memfd record), so of many concurrent creators exactly
//! one wins and the others see a live holder: `AlreadyExists`.
//!
//! Reclaiming re-checks just before it removes anything (`shm_nattch == 0`
//! from `IPC_STAT`; the probe's exclusive `flock` is held across the
//! `unlink`; the memfd record is removed only if it is unchanged), so a
//! process that attaches meanwhile is not robbed of its region except in a
//! window of a few instructions for SysV, where the kernel offers no lock.

use hugeshm_probe::Probe;

use crate::backend;
use crate::error::RegionError;
use crate::holders::Holders;
use crate::model::Trust;

pub use crate::inspect::RegionInfo;
pub use crate::model::RegionState;

/// Every hugeshm region on the host `probe` reads. The header of an
/// object is read only when it is this user's (or `owner`'s, when named:
/// as [`Locator::owner`](crate::Locator::owner)) or root's: SysV segments
/// with a hugeshm header (each one with resident memory is attached
/// read-only for a moment to read its first bytes; on the live host only),
/// `hugeshm.*` files in `/dev/shm`, on every hugetlbfs and DAX mount,
/// device-dax regions, and memfd records. Every other user's object is
/// listed as the kernel shows it, its header unread (state `untrusted`):
/// a named SysV segment from `/proc/sysvipc/shm` (name `key-XXXXXXXX`,
/// never attached), a file or record from its directory entry and
/// `fstat` (with the page size of its file system). Root's SysV segment
/// that this user may not read is `unreadable`. Includes orphans (state
/// `crashed`, `stale`, or `ready` with `held == false`). Sorted by name,
/// then backend.
pub fn list_regions_on(probe: &Probe, owner: Option<u32>) -> Result<Vec<RegionInfo>, RegionError> {
    let holders = Holders::lazy(probe);
    let trust = Trust::listing(owner);
    let mut out: Vec<RegionInfo> = backend::listable()
        .iter()
        .flat_map(|ops| ops.list(&holders, &trust))
        .collect();
    out.sort_by(|a, b| (&a.name, a.backend.as_str()).cmp(&(&b.name, b.backend.as_str())));
    Ok(out)
}

/// The SysV regions of [`list_regions_on`] only (what the doctor needs of
/// the regions made to be kept): no directory is listed, so what other
/// users create in `/dev/shm` or on a hugetlbfs mount costs nothing here.
pub fn list_sysv_regions_on(probe: &Probe) -> Result<Vec<RegionInfo>, RegionError> {
    let holders = Holders::lazy(probe);
    let mut out = backend::sysv_ops().list(&holders, &Trust::listing(None));
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// [`list_regions_on`] the live host.
pub fn list_regions() -> Result<Vec<RegionInfo>, RegionError> {
    list_regions_on(&Probe::default(), None)
}
