//! Step 8 and the report: the region locked (if asked) and marked
//! `ready`, and what `create` tells its caller about the region it made
//! (or reused).

use crate::error::RegionError;
use crate::handle::Region;
use crate::header::HeaderState;
use crate::model::{Fallback, PrefaultMethod};
use crate::pool::Backing;
use crate::prefault;
use crate::report::{AllocationReport, Reclaimed};
use crate::testhook::checkpoint;
use crate::verify::Verification;

use super::make::Made;
use super::verify::Verdict;
use super::RegionBuilder;

impl RegionBuilder {
    /// Step 8 for a region made and verified: `mlock`ed if asked, then
    /// `ready` in one aligned atomic store (the header made durable on
    /// DAX), no longer destroyed on drop; and its report (`cpus`: the
    /// CPUs it was pre-faulted from).
    pub(super) fn publish(
        &self,
        made: Made,
        verdict: Verdict,
        cpus: Vec<u32>,
        reclaimed: Option<Reclaimed>,
    ) -> Result<(Region, AllocationReport), RegionError> {
        let Made {
            mut guard,
            plan,
            outcome,
            setup_seconds,
        } = made;
        if self.mlock {
            guard.region().mlock()?;
        }
        checkpoint("verified");
        // Verified (and locked): ready, in one aligned atomic store.
        guard.region_mut().set_state(HeaderState::Ready)?;
        if plan.backing == Backing::Dax {
            guard.region().persist_header()?;
        }
        checkpoint("ready");
        let region = guard.disarm();
        let report = self.report(
            &region,
            &verdict.verification,
            ReportParts {
                page_size_bytes: plan.page_size,
                fallback: verdict.fallback,
                warnings: verdict.warnings,
                node_bytes: verdict.node_bytes,
                cpus,
                threads: outcome.threads,
                method: outcome.method,
                setup_seconds,
                prefault_seconds: outcome.seconds,
                reclaimed,
            },
        );
        Ok((region, report))
    }

    /// The report of a region this builder made or reused.
    pub(super) fn report(
        &self,
        region: &Region,
        v: &Verification,
        p: ReportParts,
    ) -> AllocationReport {
        AllocationReport {
            name: self.name.clone(),
            backend: self.backend,
            requested_bytes: self.size,
            size_bytes: region.len() as u64,
            rounded_up: region.len() as u64 > self.size,
            requested_page_size: self.page_size,
            page_size_bytes: p.page_size_bytes,
            policy: self.policy,
            fallback: p.fallback,
            warnings: p.warnings,
            placement: self.numa.clone(),
            node_bytes: p
                .node_bytes
                .into_iter()
                .map(|(n, b)| (n.to_string(), b))
                .collect(),
            prefault_threads: p.threads,
            prefault_cpus: p.cpus,
            prefault_method: p.method,
            setup_seconds: p.setup_seconds,
            prefault_seconds: p.prefault_seconds,
            prefault_gbps: prefault::gbps(region.len() as u64, p.prefault_seconds),
            ready_seconds: p.setup_seconds + p.prefault_seconds,
            verified_page_size_bytes: v.page_size_bytes,
            map_sync: v.map_sync,
            resident_bytes: v.resident_bytes,
            thp_bytes: v.thp_bytes,
            mlocked: self.mlock,
            shmid: region.shmid(),
            sysv_key: region.sysv_key(),
            path: region.path().map(|p| p.display().to_string()),
            pid: std::process::id(),
            address: region.addr() as u64,
            header: Some(region.header.clone()),
            data_offset: region.data_offset() as u64,
            data_bytes: region.data_len() as u64,
            aligned_for_pmd_sharing: region.aligned_for_pmd_sharing(),
            pmd_shareable_bytes: region.pmd_shareable_bytes(),
            reclaimed: p.reclaimed,
            memfd_record: region.memfd_record().map(|p| p.display().to_string()),
        }
    }
}

/// The parts of an [`AllocationReport`] that differ between a new and a
/// reused region.
pub(super) struct ReportParts {
    pub(super) page_size_bytes: u64,
    pub(super) cpus: Vec<u32>,
    pub(super) fallback: Option<Fallback>,
    pub(super) warnings: Vec<String>,
    pub(super) node_bytes: std::collections::BTreeMap<u32, u64>,
    pub(super) threads: usize,
    pub(super) method: PrefaultMethod,
    pub(super) setup_seconds: f64,
    pub(super) prefault_seconds: f64,
    pub(super) reclaimed: Option<Reclaimed>,
}
