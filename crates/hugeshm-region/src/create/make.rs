//! Step 4, and the `try` fall-back over steps 4 to 6: claim the name,
//! create and map the object (the backend's operations), under a guard
//! that destroys it on an error; when the kernel refuses huge pages (at
//! the reservation or at fault time), `try` starts over, whole, on base
//! pages.

use std::time::Instant;

use hugeshm_probe::HostSnapshot;

use crate::backend::{self, Spec};
use crate::error::RegionError;
use crate::handle::{CreateGuard, Region};
use crate::header;
use crate::model::{Policy, PrefaultMethod};
use crate::pool::{self, Backing, Plan};
use crate::prefault::Outcome;
use crate::testhook::checkpoint;

use super::fault::Fault;
use super::plan::{memory_check, Planned};
use super::RegionBuilder;

/// A region made and pre-faulted (steps 4 to 6), not yet verified: guarded
/// (destroyed on drop), with the plan it was made by (the base-page one
/// after a `try` fall-back), the pre-fault's outcome and the setup time.
pub(super) struct Made {
    pub(super) guard: CreateGuard,
    pub(super) plan: Plan,
    pub(super) outcome: Outcome,
    pub(super) setup_seconds: f64,
}

impl RegionBuilder {
    /// Steps 4 to 6 for the plan. Huge pages the kernel refuses, at the
    /// reservation (ENOMEM: a pool that changed since the plan) or at
    /// fault time (a hugetlb cgroup limit), fail `only` with the numbers
    /// and make `try` start over, whole, on base pages.
    pub(super) fn make_or_fall_back(&self, p: &Planned, t0: Instant) -> Result<Made, RegionError> {
        let fault = p.fault();
        match self.make_and_fault(&p.plan, &fault, &p.host, p.generation, t0) {
            Ok((guard, outcome, setup_seconds)) => Ok(Made {
                guard,
                plan: p.plan.clone(),
                outcome,
                setup_seconds,
            }),
            Err(e) if self.policy == Policy::Try && p.plan.is_huge() && refused(&e) => {
                let plan = pool::fallback_plan(&p.req, &p.extra, &e)?;
                let (guard, outcome, setup_seconds) =
                    self.make_and_fault(&plan, &fault, &p.host, p.generation, t0)?;
                Ok(Made {
                    guard,
                    plan,
                    outcome,
                    setup_seconds,
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Claims the name, reserves and maps (the backend's operations), then
    /// places it, writes the header (state `initializing`) and pre-faults
    /// ([`place_and_fault`](RegionBuilder::place_and_fault)): the region,
    /// guarded (destroyed on drop), the pre-fault's outcome and the setup
    /// time. Nothing is left behind on an error.
    pub(super) fn make_and_fault(
        &self,
        plan: &Plan,
        fault: &Fault<'_>,
        host: &HostSnapshot,
        generation: u64,
        t0: Instant,
    ) -> Result<(CreateGuard, Outcome, f64), RegionError> {
        memory_check(plan, self.backend, fault.method, host)?;
        let region = self.materialize(plan, fault.method, fault.threads, host, generation)?;
        let guard = CreateGuard::new(region);
        checkpoint("mapped");
        let (outcome, setup_seconds) =
            self.place_and_fault(guard.region(), plan, fault, host, t0)?;
        Ok((guard, outcome, setup_seconds))
    }

    /// The 1 GiB alignment for page-table sharing, when it applies.
    fn align_for(&self, plan: &Plan) -> Option<usize> {
        plan.pmd_share_align()
            .filter(|_| self.pmd_sharing)
            .or_else(|| plan.block_align())
    }

    /// Creates and maps the object for `plan` through its backend's operations,
    /// claiming the name first (before any memory is reserved). Its header
    /// is not written yet.
    fn materialize(
        &self,
        plan: &Plan,
        method: PrefaultMethod,
        threads: usize,
        host: &HostSnapshot,
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
        hdr.kept = self.keep && self.name.is_some();
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

/// Whether the kernel refused huge pages: at the reservation (a pool
/// shortfall the system call found) or at fault time.
fn refused(e: &RegionError) -> bool {
    matches!(
        e,
        RegionError::PoolShortfall { .. } | RegionError::FaultRefused { .. }
    )
}
