//! Steps 5 and 6 on a region just made: placed (`mbind`) before any page
//! is touched, its header written (state `initializing`) and pre-faulted.
//! A fault the kernel refuses on hugetlb pages becomes
//! [`RegionError::FaultRefused`], a tmpfs that ran out of space `NoSpace`.

use std::time::Instant;

use hugeshm_probe::HostSnapshot;
use hugeshm_sys::MemPolicy;

use crate::backend;
use crate::error::RegionError;
use crate::handle::Region;
use crate::model::PrefaultMethod;
use crate::pool::{self, Backing, Plan};
use crate::prefault::{self, Outcome};
use crate::testhook::checkpoint;

use super::RegionBuilder;

/// How to pre-fault: method, threads, and the CPUs they run on (empty:
/// wherever the scheduler puts them).
pub(super) struct Fault<'a> {
    pub(super) method: PrefaultMethod,
    pub(super) threads: usize,
    pub(super) cpus: &'a [u32],
}

impl RegionBuilder {
    /// Places `region` by the builder's NUMA policy, then writes its header
    /// and pre-faults it: the pre-fault's outcome and the setup time (from
    /// `t0` to the start of the pre-fault).
    pub(super) fn place_and_fault(
        &self,
        region: &Region,
        plan: &Plan,
        fault: &Fault<'_>,
        host: &HostSnapshot,
        t0: Instant,
    ) -> Result<(Outcome, f64), RegionError> {
        // Placed before any page is touched (the header's included).
        if let Some(p) = self.mbind_policy(host) {
            region
                .mapping()
                .mbind(&p, matches!(p, MemPolicy::Bind(_)))?;
        }
        let setup_seconds = t0.elapsed().as_secs_f64();
        // The creating thread writes the header (state `initializing`, so
        // a crash from then on leaves a region that says so) first thing,
        // on the run that holds the header's page, while the other threads
        // fault theirs; no progress is reported before it is written.
        // Other processes cannot attach it before it is ready.
        let outcome = prefault::prefault_after(
            region.mapping(),
            plan.page_size as usize,
            fault.threads,
            fault.cpus,
            fault.method,
            self.progress.as_ref(),
            || {
                region.write_header()?;
                checkpoint("header-written");
                Ok(())
            },
        )
        .map_err(|e| self.fault_error(region, plan, host, e))?;
        Ok((outcome, setup_seconds))
    }

    /// What a failed pre-fault is. On hugetlb pages, one the kernel
    /// refused is [`RegionError::FaultRefused`] with what it faulted
    /// before: the region's resident bytes (`MADV_POPULATE_WRITE` does not
    /// say how far it got). A tmpfs file that ran out of space is
    /// `NoSpace` with the numbers. Anything else is itself.
    fn fault_error(
        &self,
        region: &Region,
        plan: &Plan,
        host: &HostSnapshot,
        e: RegionError,
    ) -> RegionError {
        if plan.backing != Backing::Hugetlb {
            return match (&plan.dir, e) {
                (Some(dir), RegionError::Prefault { source, .. })
                    if matches!(
                        source.errno(),
                        Some(libc::EFAULT) | Some(libc::ENOSPC) | Some(libc::ENOMEM)
                    ) =>
                {
                    backend::file::out_of_space(&host.mounts, dir, plan.size_bytes)
                }
                (_, e) => e,
            };
        }
        let resident = region
            .verify_with(None)
            .map(|v| v.resident_bytes)
            .unwrap_or(0);
        pool::fault_refused(&self.probe, plan, resident, e)
    }
}
