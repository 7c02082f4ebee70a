//! Step 7: what the kernel gave (this process's `/proc/self/smaps`,
//! `pagemap` and `numa_maps`, read by [`crate::verify`]) judged against
//! the plan, check by check, in the order the report has always listed
//! them: the page size (transparent huge pages, DAX entries and
//! `MAP_SYNC`, or the pages smaps shows), residency, page-table sharing,
//! the nodes. Under `only` a page size or placement other than asked
//! fails; under `try` it is the region's fall-back or a warning.

use std::collections::BTreeMap;

use hugeshm_fix::{DaxCause, Fix};
use hugeshm_parse::pagemap::Tally;
use hugeshm_parse::size::format_bytes;
use hugeshm_probe::HostSnapshot;
use hugeshm_sys::{MemPolicy, PMD_SHARE_ALIGN};

use crate::error::RegionError;
use crate::handle::Region;
use crate::model::{Fallback, Placement, Policy, PrefaultMethod};
use crate::pool::{Backing, Plan};
use crate::prefault::Outcome;
use crate::verify::{self, Verification};

use super::RegionBuilder;

/// What step 7 found: the verification (for DAX, its page size and
/// residency from `pagemap`), why the region is not on the pages asked
/// for, the warnings, and the bytes on each NUMA node.
#[derive(Debug)]
pub(super) struct Verdict {
    pub(super) verification: Verification,
    pub(super) fallback: Option<Fallback>,
    pub(super) warnings: Vec<String>,
    pub(super) node_bytes: BTreeMap<u32, u64>,
    policy: Policy,
}

impl RegionBuilder {
    /// Verifies a region just pre-faulted by `outcome` against its plan.
    pub(super) fn verify_new(
        &self,
        r: &Region,
        plan: &Plan,
        outcome: &Outcome,
        host: &HostSnapshot,
        pmd_size: Option<u64>,
    ) -> Result<Verdict, RegionError> {
        let mut verdict = Verdict::new(plan, r.verify_with(pmd_size)?, self.policy);
        let faulted = outcome.method != PrefaultMethod::None;
        if !faulted && matches!(plan.backing, Backing::Thp(_)) {
            verdict.thp_not_yet();
        } else if plan.backing == Backing::Dax {
            // DAX pages are the device's: smaps says 4 kB whatever the
            // fault size. The entries are judged from pagemap (once
            // pre-faulted), and MAP_SYNC from smaps.
            let tally = if faulted {
                Some(verify::dax_windows(r.addr() as u64, r.len() as u64)?)
            } else {
                None
            };
            verdict.dax(plan, tally.as_ref(), &r.object_text())?;
        } else {
            verdict.page_size(plan)?;
        }
        verdict.residency(plan, faulted);
        verdict.pmd_sharing(plan, r.aligned_for_pmd_sharing());
        // Where the pages went; a bound region with pages elsewhere fails
        // `only`.
        verdict.node_bytes = verify::node_bytes(r.addr() as u64);
        verdict.nodes(
            self.mbind_policy(host).as_ref(),
            &self.numa,
            &r.object_text(),
        )?;
        Ok(verdict)
    }
}

impl Verdict {
    /// Nothing found yet: the plan's own fall-back and warnings.
    pub(super) fn new(plan: &Plan, verification: Verification, policy: Policy) -> Verdict {
        Verdict {
            verification,
            fallback: plan.fallback.clone(),
            warnings: plan.warnings.clone(),
            node_bytes: BTreeMap::new(),
            policy,
        }
    }

    /// Transparent huge pages show only once faulted: without a pre-fault
    /// there is nothing to verify yet.
    fn thp_not_yet(&mut self) {
        self.warnings.push(
            "not pre-faulted: transparent huge page use shows only after first touch".to_owned(),
        );
    }

    /// A DAX region: its entries from `pagemap` (`tally`, once
    /// pre-faulted): all PMDs give the plan's page size, 4 KiB entries are
    /// [`RegionError::DaxSmallFaults`]; then `MAP_SYNC` unless the policy
    /// is `off`.
    fn dax(&mut self, plan: &Plan, tally: Option<&Tally>, object: &str) -> Result<(), RegionError> {
        if let Some(t) = tally {
            self.verification.resident_bytes = t.present * 4096;
            if t.windows > 0 && t.pmd == t.windows {
                self.verification.page_size_bytes = plan.page_size;
            } else if t.pte > 0 {
                let err = RegionError::DaxSmallFaults {
                    object: object.to_owned(),
                    pte_windows: t.pte,
                    windows: t.windows,
                    fix: Box::new(Fix::AlignDax {
                        causes: vec![DaxCause::Extents],
                        path: object.to_owned(),
                        offset: 0,
                        namespace: None,
                        region: true,
                    }),
                };
                self.fall_back(err.to_string(), None, err)?;
            }
        }
        if self.policy != Policy::Off && !self.verification.map_sync {
            let reason = format!(
                "{object} is not mapped MAP_SYNC (the file system or, on a dax=inode mount, the file is not DAX): writes are made durable with msync, not by flushing CPU caches"
            );
            self.fall_back(reason.clone(), None, RegionError::Unsupported(reason))?;
        }
        Ok(())
    }

    /// The page size smaps shows: smaller than planned is
    /// [`RegionError::Verification`] (the plan's shortfall kept under
    /// `try`), larger (transparent huge pages) a warning.
    fn page_size(&mut self, plan: &Plan) -> Result<(), RegionError> {
        let v = &self.verification;
        if v.page_size_bytes < plan.page_size {
            let err = RegionError::Verification {
                asked_page_size_bytes: plan.page_size,
                verified_page_size_bytes: v.page_size_bytes,
                resident_bytes: v.resident_bytes,
                size_bytes: plan.size_bytes,
                detail: if v.thp_bytes > 0 {
                    format!(
                        "only {} of {} bytes are on transparent huge pages",
                        v.thp_bytes, plan.size_bytes
                    )
                } else {
                    String::new()
                },
            };
            let shortfall = self.fallback.take().and_then(|f| f.shortfall);
            self.fall_back(err.to_string(), shortfall, err)?;
        } else if v.page_size_bytes > plan.page_size {
            let warning = format!(
                "asked for {} pages, the kernel used {} (transparent huge pages)",
                format_bytes(plan.page_size),
                format_bytes(v.page_size_bytes)
            );
            self.warnings.push(warning);
        }
        Ok(())
    }

    /// Fewer bytes resident than the region after a pre-fault (DAX pages
    /// are the device's, not counted in Rss).
    fn residency(&mut self, plan: &Plan, faulted: bool) {
        let resident = self.verification.resident_bytes;
        if faulted && plan.backing != Backing::Dax && resident < plan.size_bytes {
            self.warnings.push(format!(
                "only {resident} of {} bytes resident after the pre-fault",
                plan.size_bytes
            ));
        }
    }

    /// A hugetlb region of 1 GiB or more on smaller pages that did not get
    /// a 1 GiB-aligned address: its page tables are not shared.
    fn pmd_sharing(&mut self, plan: &Plan, aligned: bool) {
        if plan.backing == Backing::Hugetlb
            && plan.size_bytes >= PMD_SHARE_ALIGN as u64
            && plan.page_size < PMD_SHARE_ALIGN as u64
            && !aligned
        {
            self.warnings.push(
                "not at a 1 GiB-aligned address: every attached process builds its own page \
                 tables for the region"
                    .to_owned(),
            );
        }
    }

    /// Pages of a region bound to some nodes (`bound`, the policy it was
    /// placed with) that are on others: [`RegionError::Misplaced`].
    fn nodes(
        &mut self,
        bound: Option<&MemPolicy>,
        placement: &Placement,
        object: &str,
    ) -> Result<(), RegionError> {
        let Some(MemPolicy::Bind(nodes)) = bound else {
            return Ok(());
        };
        let misplaced: u64 = self
            .node_bytes
            .iter()
            .filter(|(n, _)| !nodes.contains(n))
            .map(|(_, b)| *b)
            .sum();
        if misplaced > 0 {
            let err = RegionError::Misplaced {
                object: object.to_owned(),
                placement: placement.to_string(),
                misplaced_bytes: misplaced,
                nodes: self.node_bytes.iter().map(|(n, b)| (*n, *b)).collect(),
            };
            if self.policy == Policy::Only {
                return Err(err);
            }
            self.warnings.push(err.to_string());
        }
        Ok(())
    }

    /// `only` fails with `err`; otherwise the region falls back for
    /// `reason` (with the pool's `shortfall`, if one is known).
    fn fall_back(
        &mut self,
        reason: String,
        shortfall: Option<crate::model::Shortfall>,
        err: RegionError,
    ) -> Result<(), RegionError> {
        if self.policy == Policy::Only {
            return Err(err);
        }
        self.fallback = Some(Fallback { reason, shortfall });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Shortfall;

    const MIB2: u64 = 2 << 20;
    const OBJECT: &str = "/mnt/pmem/hugeshm.db";

    fn plan(backing: Backing, page_size: u64, size_bytes: u64) -> Plan {
        Plan {
            page_size,
            size_bytes,
            backing,
            dir: None,
            fallback: None,
            warnings: vec!["from the plan".to_owned()],
        }
    }

    /// What smaps showed: `page` pages, `resident` bytes.
    fn seen(page: u64, resident: u64) -> Verification {
        Verification {
            page_size_bytes: page,
            kernel_page_size_bytes: page,
            resident_bytes: resident,
            hugetlb: false,
            thp_bytes: 0,
            locked_bytes: 0,
            mapped_bytes: resident,
            map_sync: false,
        }
    }

    fn shortfall() -> Shortfall {
        Shortfall {
            page_size_bytes: MIB2,
            required: 4,
            available: 1,
            free: 1,
            reserved: 0,
            nr_hugepages: 1,
            node: None,
            fix: hugeshm_fix::Fix::RetryOrCheckLimits {
                page_size_bytes: MIB2,
                available: 1,
            },
        }
    }

    #[test]
    fn smaller_pages_fail_only_and_are_the_fall_back_under_try() {
        let p = plan(Backing::Hugetlb, MIB2, 8 << 20);
        let mut only = Verdict::new(&p, seen(4096, 8 << 20), Policy::Only);
        let e = only.page_size(&p).unwrap_err();
        assert!(
            matches!(
                e,
                RegionError::Verification {
                    asked_page_size_bytes: MIB2,
                    verified_page_size_bytes: 4096,
                    ..
                }
            ),
            "{e}"
        );
        // Under try, the plan's shortfall stays with the new reason.
        let mut planned = p.clone();
        planned.fallback = Some(Fallback {
            reason: "the plan's".to_owned(),
            shortfall: Some(shortfall()),
        });
        let mut v = Verdict::new(&planned, seen(4096, 8 << 20), Policy::Try);
        v.page_size(&planned).unwrap();
        let fallback = v.fallback.unwrap();
        assert_eq!(fallback.reason, e.to_string());
        assert_eq!(fallback.shortfall, Some(shortfall()));
        assert_eq!(v.warnings, vec!["from the plan".to_owned()]);
    }

    #[test]
    fn larger_pages_are_a_warning() {
        let p = plan(Backing::Thp(crate::pool::ThpMode::Always), 4096, 8 << 20);
        let mut v = Verdict::new(&p, seen(MIB2, 8 << 20), Policy::Only);
        v.page_size(&p).unwrap();
        assert_eq!(
            v.warnings[1],
            "asked for 4 KiB pages, the kernel used 2 MiB (transparent huge pages)"
        );
        assert!(v.fallback.is_none());
    }

    #[test]
    fn dax_entries_come_from_pagemap_and_map_sync_from_smaps() {
        let p = plan(Backing::Dax, MIB2, 8 << 20);
        let mut all_pmd = Tally::default();
        (all_pmd.windows, all_pmd.pmd, all_pmd.present) = (4, 4, 2048);
        let mut synced = seen(4096, 0);
        synced.map_sync = true;
        let mut v = Verdict::new(&p, synced.clone(), Policy::Only);
        v.dax(&p, Some(&all_pmd), OBJECT).unwrap();
        assert_eq!(v.verification.page_size_bytes, MIB2);
        assert_eq!(v.verification.resident_bytes, 8 << 20);
        assert!(v.fallback.is_none());

        let mut small = Tally::default();
        (small.windows, small.pmd, small.pte, small.present) = (4, 3, 1, 2048);
        let e = Verdict::new(&p, synced.clone(), Policy::Only)
            .dax(&p, Some(&small), OBJECT)
            .unwrap_err();
        assert!(
            matches!(&e, RegionError::DaxSmallFaults { object, pte_windows: 1, windows: 4, .. } if object == OBJECT),
            "{e}"
        );
        let mut v = Verdict::new(&p, synced, Policy::Try);
        v.dax(&p, Some(&small), OBJECT).unwrap();
        assert_eq!(v.fallback.unwrap().reason, e.to_string());

        // Not MAP_SYNC: only fails, try says so, off does not ask.
        let unsynced = seen(4096, 0);
        let e = Verdict::new(&p, unsynced.clone(), Policy::Only)
            .dax(&p, None, OBJECT)
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with(&format!("{OBJECT} is not mapped MAP_SYNC")),
            "{e}"
        );
        let mut v = Verdict::new(&p, unsynced.clone(), Policy::Try);
        v.dax(&p, None, OBJECT).unwrap();
        assert_eq!(v.fallback.unwrap().reason, e.to_string());
        let mut v = Verdict::new(&p, unsynced, Policy::Off);
        v.dax(&p, None, OBJECT).unwrap();
        assert!(v.fallback.is_none());
    }

    #[test]
    fn too_little_resident_and_unshared_page_tables_are_warnings() {
        let p = plan(Backing::Hugetlb, MIB2, 1 << 30);
        let mut v = Verdict::new(&p, seen(MIB2, 512 << 20), Policy::Only);
        v.residency(&p, false);
        v.pmd_sharing(&p, true);
        assert_eq!(v.warnings.len(), 1);
        v.residency(&p, true);
        v.pmd_sharing(&p, false);
        assert_eq!(
            v.warnings[1..],
            [
                format!(
                    "only {} of {} bytes resident after the pre-fault",
                    512 << 20,
                    1u64 << 30
                ),
                "not at a 1 GiB-aligned address: every attached process builds its own page \
                 tables for the region"
                    .to_owned()
            ]
        );
        // DAX pages are not in Rss; under 1 GiB there is no PMD page to share.
        let dax = plan(Backing::Dax, MIB2, 8 << 20);
        let mut v = Verdict::new(&dax, seen(4096, 0), Policy::Only);
        v.residency(&dax, true);
        v.pmd_sharing(&plan(Backing::Hugetlb, MIB2, 512 << 20), false);
        assert_eq!(v.warnings.len(), 1);
    }

    #[test]
    fn pages_outside_a_bound_placement_fail_only() {
        let p = plan(Backing::Hugetlb, MIB2, 8 << 20);
        let bind = MemPolicy::Bind(vec![0]);
        let placement = Placement::Bind(vec![0]);
        let nodes = BTreeMap::from([(0, 6 << 20), (1, 2 << 20)]);
        let mut only = Verdict::new(&p, seen(MIB2, 8 << 20), Policy::Only);
        only.node_bytes = nodes.clone();
        let e = only.nodes(Some(&bind), &placement, OBJECT).unwrap_err();
        assert!(
            matches!(&e, RegionError::Misplaced { misplaced_bytes, .. } if *misplaced_bytes == 2 << 20),
            "{e}"
        );
        let mut t = Verdict::new(&p, seen(MIB2, 8 << 20), Policy::Try);
        t.node_bytes = nodes.clone();
        t.nodes(Some(&bind), &placement, OBJECT).unwrap();
        assert_eq!(t.warnings[1], e.to_string());
        // All on the bound nodes, or not bound: nothing to say.
        only.nodes(Some(&MemPolicy::Bind(vec![0, 1])), &placement, OBJECT)
            .unwrap();
        only.nodes(Some(&MemPolicy::Interleave(vec![0])), &placement, OBJECT)
            .unwrap();
        only.nodes(None, &placement, OBJECT).unwrap();
        assert_eq!(only.warnings.len(), 1);
    }
}
