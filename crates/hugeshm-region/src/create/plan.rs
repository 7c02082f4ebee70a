//! Steps 2 and 3, the plan: the request as the planner sees it, the plan
//! checked against the pools, the cgroup and the nodes ([`pool::checked`]),
//! the memlock limit, how to pre-fault ([`Planned`]), and whether the
//! general memory can take a region that is not on the hugetlb pool or a
//! DAX device ([`memory_check`], just before the object is made).

use hugeshm_probe::HostSnapshot;
use hugeshm_sys::MemPolicy;

use crate::backend;
use crate::error::RegionError;
use crate::header::{self, HEADER_BYTES};
use crate::memlock;
use crate::model::{Backend, Placement, PrefaultMethod};
use crate::pool::{self, Backing, HostExtra, Plan, Request};
use crate::prefault::{self, available_cpus};
use crate::verify;

use super::fault::Fault;
use super::RegionBuilder;

/// What steps 2 and 3 decided, for the steps after them: the host as it
/// was read, the request and its checked plan, and how to pre-fault.
pub(super) struct Planned {
    pub(super) host: HostSnapshot,
    pub(super) extra: HostExtra,
    pub(super) req: Request,
    pub(super) plan: Plan,
    /// The CPUs to pre-fault from (empty: wherever the scheduler puts the
    /// threads).
    pub(super) cpus: Vec<u32>,
    pub(super) threads: usize,
    pub(super) method: PrefaultMethod,
    /// The header's generation.
    pub(super) generation: u64,
}

impl Planned {
    /// How to pre-fault.
    pub(super) fn fault(&self) -> Fault<'_> {
        Fault {
            method: self.method,
            threads: self.threads,
            cpus: &self.cpus,
        }
    }
}

impl RegionBuilder {
    /// Steps 2 and 3 for a new region: one read of the host through the
    /// probe, the plan checked against it (under the placement's policy),
    /// a size this process can map, the memlock limit when `mlock` is
    /// asked, and the pre-fault's threads, CPUs and method.
    pub(super) fn plan_new(&self) -> Result<Planned, RegionError> {
        let base = hugeshm_sys::base_page_size() as u64;
        let host = self.probe.host_for_regions();
        let extra = HostExtra {
            base,
            pmd_size: verify::pmd_size(&self.probe),
        };
        placement_supported(&self.numa, &host)?;
        let (req, plan) = self.checked_plan(&host, &extra, self.effective_policy(&host))?;
        if usize::try_from(plan.size_bytes).is_err() {
            return Err(RegionError::InvalidSize {
                requested_bytes: self.size,
                reason: "does not fit in this process's address space".to_owned(),
                fix: None,
            });
        }
        if self.mlock {
            memlock::check_memlock(plan.size_bytes)?;
        }
        let cpus = self.fault_cpus(&host);
        let threads = fault_threads(self.prefault_threads, &cpus);
        Ok(Planned {
            host,
            extra,
            req,
            plan,
            cpus,
            threads,
            method: fault_method(threads),
            generation: header::new_generation(),
        })
    }

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

/// Refuses a placement the kernel cannot make: weighted interleave before
/// Linux 6.9.
fn placement_supported(numa: &Placement, host: &HostSnapshot) -> Result<(), RegionError> {
    if matches!(numa, Placement::WeightedInterleave(_)) && !host.weighted_interleave {
        return Err(RegionError::Unsupported(
            "--numa weighted-interleave needs Linux 6.9 or later (this kernel has no \
             /sys/kernel/mm/mempolicy/weighted_interleave): use --numa interleave"
                .to_owned(),
        ));
    }
    Ok(())
}

/// Pre-fault threads: as many as asked, else one per CPU to fault from,
/// else one per CPU this process may use.
pub(super) fn fault_threads(asked: Option<usize>, cpus: &[u32]) -> usize {
    asked.unwrap_or_else(|| {
        if cpus.is_empty() {
            available_cpus()
        } else {
            cpus.len()
        }
    })
}

/// How to pre-fault with `threads` threads: not at all with none, else
/// the best way this kernel has.
pub(super) fn fault_method(threads: usize) -> PrefaultMethod {
    if threads == 0 {
        PrefaultMethod::None
    } else {
        prefault::method_for_kernel()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(backing: Backing, size_bytes: u64) -> Plan {
        Plan {
            page_size: if backing == Backing::Hugetlb {
                2 << 20
            } else {
                4096
            },
            size_bytes,
            backing,
            dir: None,
            fallback: None,
            warnings: Vec::new(),
        }
    }

    /// A host with `available_kib` of MemAvailable.
    fn host(available_kib: u64) -> HostSnapshot {
        let mut h = HostSnapshot::default();
        h.meminfo = Some(
            hugeshm_parse::meminfo::parse(&format!(
                "MemTotal: 4194304 kB\nMemAvailable: {available_kib} kB\n"
            ))
            .unwrap(),
        );
        h
    }

    #[test]
    fn memory_outside_the_pools_must_be_available() {
        let big = plan(Backing::Base, 64 << 20);
        let small_host = host(16 << 10); // 16 MiB
        let fault = PrefaultMethod::PopulateWrite;
        match memory_check(&big, Backend::Anon, fault, &small_host).unwrap_err() {
            RegionError::NotEnoughMemory {
                needed_bytes,
                available_bytes,
                on_demand_possible,
                ..
            } => {
                assert_eq!((needed_bytes, available_bytes), (64 << 20, 16 << 20));
                assert!(on_demand_possible);
            }
            e => panic!("{e}"),
        }
        // Not pre-faulted: anonymous memory comes on demand, but a tmpfs
        // file is allocated whole at create.
        memory_check(&big, Backend::Anon, PrefaultMethod::None, &small_host).unwrap();
        let e = memory_check(&big, Backend::Posix, PrefaultMethod::None, &small_host);
        assert!(
            matches!(
                e,
                Err(RegionError::NotEnoughMemory {
                    on_demand_possible: false,
                    ..
                })
            ),
            "{e:?}"
        );
        // Enough, hugetlb or DAX pages (not the general memory), or no
        // meminfo to tell.
        memory_check(&big, Backend::Anon, fault, &host(1 << 20)).unwrap();
        memory_check(
            &plan(Backing::Hugetlb, 64 << 20),
            Backend::Anon,
            fault,
            &small_host,
        )
        .unwrap();
        memory_check(
            &plan(Backing::Dax, 64 << 20),
            Backend::Dax,
            fault,
            &small_host,
        )
        .unwrap();
        memory_check(&big, Backend::Anon, fault, &HostSnapshot::default()).unwrap();
    }

    #[test]
    fn pre_fault_threads_follow_the_request_then_the_cpus() {
        assert_eq!(fault_threads(Some(3), &[0, 1]), 3);
        assert_eq!(fault_threads(Some(0), &[0, 1]), 0);
        assert_eq!(fault_threads(None, &[4, 5, 6]), 3);
        assert_eq!(fault_threads(None, &[]), available_cpus());
        assert_eq!(fault_method(0), PrefaultMethod::None);
        assert_eq!(fault_method(2), prefault::method_for_kernel());
    }

    #[test]
    fn weighted_interleave_needs_a_kernel_that_has_it() {
        let mut h = HostSnapshot::default();
        let weighted = Placement::WeightedInterleave(vec![0, 1]);
        let e = placement_supported(&weighted, &h).unwrap_err();
        assert!(e.to_string().contains("needs Linux 6.9 or later"), "{e}");
        placement_supported(&Placement::Interleave(vec![0, 1]), &h).unwrap();
        h.weighted_interleave = true;
        placement_supported(&weighted, &h).unwrap();
    }
}
