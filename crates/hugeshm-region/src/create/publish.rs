//! Step 8 and the report: what `create` tells its caller about the region
//! it made (or reused).

use crate::handle::Region;
use crate::model::{Fallback, PrefaultMethod};
use crate::prefault;
use crate::report::{AllocationReport, Reclaimed};
use crate::verify::Verification;

use super::RegionBuilder;

impl RegionBuilder {
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
