//! Steps 4 to 6: claim the name, create and map the object (the
//! backend's operations), place it (`mbind`), write the header and
//! pre-fault. A fault the kernel refuses on hugetlb pages becomes
//! [`RegionError::FaultRefused`], a full tmpfs `NoSpace`; nothing is left
//! behind.

use std::time::Instant;

use hugeshm_sys::MemPolicy;

use crate::backend::{self, Spec};
use crate::error::RegionError;
use crate::handle::{CreateGuard, Region};
use crate::header;
use crate::model::PrefaultMethod;
use crate::pool::{self, Backing, Plan};
use crate::prefault;
use crate::testhook::checkpoint;

use super::plan::memory_check;
use super::RegionBuilder;

impl RegionBuilder {
    /// Claims the name, reserves and maps (the backend's operations), writes the
    /// header (state `initializing`) and pre-faults: the region, guarded
    /// (destroyed on drop), the pre-fault's outcome and the setup time. A
    /// fault the kernel refuses on hugetlb pages is
    /// [`RegionError::FaultRefused`]; nothing is left behind.
    pub(super) fn make_and_fault(
        &self,
        plan: &Plan,
        fault: &Fault<'_>,
        host: &hugeshm_probe::HostSnapshot,
        generation: u64,
        t0: Instant,
    ) -> Result<(CreateGuard, prefault::Outcome, f64), RegionError> {
        memory_check(plan, self.backend, fault.method, host)?;
        let region = self.materialize(plan, fault.method, fault.threads, host, generation)?;
        let guard = CreateGuard::new(region);
        checkpoint("mapped");
        // Placed before any page is touched (the header's included).
        if let Some(p) = self.mbind_policy(host) {
            guard
                .region()
                .mapping()
                .mbind(&p, matches!(p, MemPolicy::Bind(_)))?;
        }
        let hugetlb = plan.backing == Backing::Hugetlb;
        // What the kernel faulted before it refused: the region's resident
        // bytes (MADV_POPULATE_WRITE does not say how far it got). A tmpfs
        // file that ran out of space is NoSpace with the numbers.
        let refused = |region: &Region, e: RegionError| {
            if !hugetlb {
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
        };
        let setup_seconds = t0.elapsed().as_secs_f64();
        // The creating thread writes the header (state `initializing`, so
        // a crash from then on leaves a region that says so) first thing,
        // on the run that holds the header's page, while the other threads
        // fault theirs; no progress is reported before it is written.
        // Other processes cannot attach it before it is ready.
        let region = guard.region();
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
        .map_err(|e| refused(region, e))?;
        Ok((guard, outcome, setup_seconds))
    }

    /// The 1 GiB alignment for page-table sharing, when it applies.
    fn align_for(&self, plan: &Plan) -> Option<usize> {
        plan.pmd_share_align().filter(|_| self.pmd_sharing)
    }

    /// Creates and maps the object for `plan` through its backend's operations,
    /// claiming the name first (before any memory is reserved). Its header
    /// is not written yet.
    fn materialize(
        &self,
        plan: &Plan,
        method: PrefaultMethod,
        threads: usize,
        host: &hugeshm_probe::HostSnapshot,
        generation: u64,
    ) -> Result<Region, RegionError> {
        let huge = plan.backing == Backing::Hugetlb;
        let mut hdr = header::new_header(
            self.name.as_deref(),
            self.backend,
            plan.size_bytes,
            self.size,
            plan.page_size,
            generation,
        );
        hdr.hugetlb = huge;
        hdr.thp = matches!(plan.backing, Backing::Thp(_));
        let spec = Spec {
            name: self.name.as_deref(),
            backend: self.backend,
            plan,
            mode: self.mode,
            align: self.align_for(plan),
            method,
            threads,
            header: &hdr,
            host,
            probe: &self.probe,
            policy: self.policy,
        };
        let made = backend::ops(self.backend).create(&spec)?;
        Ok(Region::created(made, hdr, self.backend))
    }
}

/// How to pre-fault: method, threads, and the CPUs they run on (empty:
/// wherever the scheduler puts them).
pub(super) struct Fault<'a> {
    pub(super) method: PrefaultMethod,
    pub(super) threads: usize,
    pub(super) cpus: &'a [u32],
}

/// Whether the kernel refused huge pages: at the reservation (a pool
/// shortfall the system call found) or at fault time.
pub(super) fn refused(e: &RegionError) -> bool {
    matches!(
        e,
        RegionError::PoolShortfall { .. } | RegionError::FaultRefused { .. }
    )
}
