//! Steps 2 and 3, the plan: the request as the planner sees it, the plan
//! checked against the pools, the cgroup and the nodes ([`pool::checked`]),
//! and whether the general memory can take a region that is not on the
//! hugetlb pool or a DAX device ([`memory_check`]).

use hugeshm_sys::MemPolicy;

use crate::backend;
use crate::error::RegionError;
use crate::header::HEADER_BYTES;
use crate::model::{Backend, PrefaultMethod};
use crate::pool::{self, Backing, HostExtra, Plan, Request};

use super::RegionBuilder;

impl RegionBuilder {
    /// The plan for this request, checked before anything is created:
    /// the pools, the hugetlb cgroup's room, and the pools of the nodes
    /// `numa` places it on. `only` fails with the numbers; `try` falls back
    /// whole to base pages.
    pub(crate) fn checked_plan(
        &self,
        host: &hugeshm_probe::HostSnapshot,
        extra: &HostExtra,
        numa: Option<(MemPolicy, String)>,
    ) -> Result<(Request, Plan), RegionError> {
        let directory = match &self.directory {
            Some(d) => Some((d.clone(), backend::file::dir_hugetlbfs_page_size(d)?)),
            None => None,
        };
        // The header takes the first 4 KiB: leave at least one byte of data.
        let requested = if self.size == 0 {
            0
        } else {
            self.size.max(HEADER_BYTES + 1)
        };
        // A dax region's "directory" may be a device-dax.
        let device = match (&self.directory, self.backend) {
            (Some(d), Backend::Dax) => backend::devdax::resolve(d, &self.probe)?,
            _ => None,
        };
        let req = Request {
            backend: self.backend,
            page_size: self.page_size,
            policy: self.policy,
            requested_bytes: requested,
            directory,
            device,
        };
        let plan = pool::checked(&req, host, extra, &self.probe, numa.as_ref())?;
        Ok((req, plan))
    }
}

/// A region whose pages come from the general memory (base pages,
/// transparent huge pages: not the hugetlb pool, not a DAX device) may be
/// allocated at create (pre-fault; for a tmpfs file, its `fallocate` too)
/// only where `MemAvailable` covers it: beyond that the faults drive the
/// host into reclaim and the OOM killer, which picks whichever process it
/// likes, a database's included.
pub(crate) fn memory_check(
    plan: &Plan,
    backend: Backend,
    method: PrefaultMethod,
    host: &hugeshm_probe::HostSnapshot,
) -> Result<(), RegionError> {
    if matches!(plan.backing, Backing::Hugetlb | Backing::Dax) {
        return Ok(());
    }
    // tmpfs files (posix, and hugetlbfs fallen back to /dev/shm) are
    // allocated whole at create unless the pre-fault allocates them.
    let tmpfs_file = matches!(backend, Backend::Posix | Backend::Hugetlbfs);
    if method == PrefaultMethod::None && !tmpfs_file {
        return Ok(());
    }
    let available = host.meminfo.as_ref().and_then(|m| m.mem_available_bytes);
    match available {
        Some(a) if plan.size_bytes > a => Err(RegionError::NotEnoughMemory {
            needed_bytes: plan.size_bytes,
            page_size_bytes: plan.page_size,
            available_bytes: a,
            on_demand_possible: !tmpfs_file,
        }),
        _ => Ok(()),
    }
}
