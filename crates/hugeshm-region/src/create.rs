//! [`RegionBuilder`]: create a region, in the numbered steps of the crate
//! docs: look at the name (the interlock), plan from one host snapshot,
//! check memlock, claim the name and map (the backend's `BackendOps::create`), write the
//! header, pre-fault, verify, lock, mark ready.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use hugeshm_fix::{DaxCause, Fix};
use hugeshm_parse::size::format_bytes;
use hugeshm_probe::Probe;

use crate::attach::{bytes_text, size_matches, Locator};
use crate::backend::{self, Inspected, Spec};
use crate::error::RegionError;
use crate::handle::{CreateGuard, Region};
use crate::header::{self, HeaderState, HEADER_BYTES};
use crate::memlock;
use crate::model::{
    Backend, Fallback, NamedObject, PageSize, Placement, Policy, PrefaultMethod, Reclaim,
    RegionState,
};
use crate::naming::validate_name;
use crate::placement;
use crate::pool::{self, Backing, HostExtra, Plan, Request};
use crate::prefault::{self, available_cpus, Progress};
use crate::report::{AllocationReport, Reclaimed};
use crate::testhook::checkpoint;
use crate::verify::{self, Verification};
use hugeshm_sys::{MemPolicy, PMD_SHARE_ALIGN};

/// Builds a [`Region`]: size, backend, page size, policy, pre-fault
/// threads, mlock, mode, name, progress, what to do with an orphan of the
/// same name, page-table sharing.
///
/// ```no_run
/// use hugeshm_region::{Backend, PageSize, Policy, Reclaim, RegionBuilder};
///
/// # fn main() -> Result<(), hugeshm_region::RegionError> {
/// let (region, report) = RegionBuilder::new(1 << 30)
///     .name("sga")
///     .backend(Backend::Sysv)
///     .page_size(PageSize::HUGE_2M)
///     .policy(Policy::Only)
///     .prefault_threads(2)
///     // After a crash: attach to the old region and keep its contents.
///     .reclaim(Reclaim::Reuse)
///     .create()?;
/// println!(
///     "{} pages, {:.1} GB/s, page tables shared: {}",
///     report.verified_page_size_bytes, report.prefault_gbps, report.aligned_for_pmd_sharing
/// );
/// drop(region); // unmapped; the named segment stays until `hugeshm rm sga`
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RegionBuilder {
    size: u64,
    backend: Backend,
    page_size: PageSize,
    policy: Policy,
    prefault_threads: Option<usize>,
    mlock: bool,
    mode: u32,
    name: Option<String>,
    directory: Option<PathBuf>,
    progress: Option<Progress>,
    reclaim: Reclaim,
    pmd_sharing: bool,
    probe: Probe,
    owner: Option<u32>,
    numa: Placement,
}

impl std::fmt::Debug for RegionBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegionBuilder")
            .field("size", &self.size)
            .field("backend", &self.backend)
            .field("page_size", &self.page_size)
            .field("policy", &self.policy)
            .field("prefault_threads", &self.prefault_threads)
            .field("mlock", &self.mlock)
            .field("mode", &format_args!("{:04o}", self.mode))
            .field("name", &self.name)
            .field("directory", &self.directory)
            .field("progress", &self.progress.is_some())
            .field("reclaim", &self.reclaim)
            .field("pmd_sharing", &self.pmd_sharing)
            .field("probe", &self.probe.roots)
            .field("owner", &self.owner)
            .field("numa", &self.numa)
            .finish()
    }
}

/// What `create` made of a region of the same name nobody held.
enum Resolved {
    Reused(Box<(Region, AllocationReport)>),
    Removed(Reclaimed),
}

impl RegionBuilder {
    /// A request for `size_bytes` bytes (rounded up to a page multiple),
    /// the 4 KiB [header](crate::header) included: the data are
    /// `size − 4 KiB` ([`Region::data_len`]). Requests of at most 4 KiB
    /// are raised to 4 KiB + 1 byte, so there is always data.
    ///
    /// Defaults: `anon` backend, largest page size that fits, policy `try`,
    /// pre-fault threads = the CPUs this process may use, no mlock, mode
    /// 0600, anonymous (no name), refuse to reclaim, page-table sharing on.
    pub fn new(size_bytes: u64) -> Self {
        RegionBuilder {
            size: size_bytes,
            backend: Backend::Anon,
            page_size: PageSize::Largest,
            policy: Policy::Try,
            prefault_threads: None,
            mlock: false,
            mode: 0o600,
            name: None,
            directory: None,
            progress: None,
            reclaim: Reclaim::Refuse,
            pmd_sharing: true,
            probe: Probe::default(),
            owner: None,
            numa: Placement::Default,
        }
    }

    /// Where the pages come from on a host with several NUMA nodes (see
    /// [`Placement`]): `mbind` before any page is touched (`bind` strict,
    /// so a page elsewhere is an error). The pool check counts the pages
    /// free on those nodes, node by node. With [`Placement::Default`] the
    /// caller's own policy (`numactl --membind`) is honoured and checked
    /// the same way.
    pub fn numa(mut self, placement: Placement) -> Self {
        self.numa = placement;
        self
    }

    /// The policy to `mbind` the mapping with ([`placement::mbind_policy`]).
    fn mbind_policy(&self, host: &hugeshm_probe::HostSnapshot) -> Option<MemPolicy> {
        placement::mbind_policy(&self.numa, host)
    }

    /// The policy to check the plan against ([`placement::effective_policy`]).
    fn effective_policy(&self, host: &hugeshm_probe::HostSnapshot) -> Option<(MemPolicy, String)> {
        placement::effective_policy(&self.numa, host)
    }

    /// The CPUs to pre-fault from ([`placement::fault_cpus`]).
    fn fault_cpus(&self, host: &hugeshm_probe::HostSnapshot) -> Vec<u32> {
        placement::fault_cpus(&self.numa, host)
    }

    /// The probe it reads the host with.
    pub(crate) fn probe_ref(&self) -> &Probe {
        &self.probe
    }

    /// The size asked for.
    pub(crate) fn size_bytes(&self) -> u64 {
        self.size
    }

    /// This request for another size.
    pub(crate) fn sized(mut self, size_bytes: u64) -> Self {
        self.size = size_bytes;
        self
    }

    /// The name, if any.
    pub(crate) fn name_ref(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The page size asked for.
    pub(crate) fn page_size_ref(&self) -> PageSize {
        self.page_size
    }

    /// When a region of this name exists: accept (reuse, recreate) one
    /// owned by `uid` (default: this process's effective uid). One that
    /// another user owns, or that group or others may write beyond
    /// [`mode`](RegionBuilder::mode), is refused
    /// ([`RegionError::Untrusted`]): its header proves nothing.
    pub fn owner(mut self, uid: u32) -> Self {
        self.owner = Some(uid);
        self
    }

    /// Reads the host through `probe` (its `/proc` and `/sys` roots): the
    /// pools, mounts and limits the plan is made from, the processes
    /// scanned for holders of an existing region. Default: the live host.
    /// (What the kernel then gives this process is verified in its own
    /// `/proc/self`, whatever the roots.)
    pub fn probe(mut self, probe: Probe) -> Self {
        self.probe = probe;
        self
    }

    /// The backend.
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// The page size.
    pub fn page_size(mut self, page_size: PageSize) -> Self {
        self.page_size = page_size;
        self
    }

    /// The policy.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Pre-fault threads; `0` skips the pre-fault (hugetlb memory is still
    /// reserved, so later faults cannot fail; base pages are then faulted
    /// on first touch).
    pub fn prefault_threads(mut self, threads: usize) -> Self {
        self.prefault_threads = Some(threads);
        self
    }

    /// `mlock` the region after the pre-fault (checked against
    /// `RLIMIT_MEMLOCK` before anything is created).
    pub fn mlock(mut self, mlock: bool) -> Self {
        self.mlock = mlock;
        self
    }

    /// Permission bits of the SysV segment, file or memfd record (default
    /// 0600; the umask does not apply). Ignored for anon.
    pub fn mode(mut self, mode: u32) -> Self {
        self.mode = mode;
        self
    }

    /// Names the region (see [the naming rules](crate::naming)). Without a
    /// name the region is anonymous and vanishes with its last mapping.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The directory for file backends: for `hugetlbfs` a hugetlbfs mount
    /// of the page size (instead of searching `/proc/mounts`), for `posix`
    /// a tmpfs directory (instead of `/dev/shm`), for `dax` a directory on
    /// a `-o dax` mount (instead of the first one) or a device-dax
    /// (`/dev/dax0.0`: the region takes the device from offset 0, its page
    /// size is the device's `align`, and it must fit the device).
    pub fn directory(mut self, dir: impl Into<PathBuf>) -> Self {
        self.directory = Some(dir.into());
        self
    }

    /// Progress of the pre-fault: `(done_bytes, total_bytes)`, called once
    /// when it starts (often with 0 bytes done) and then from the pre-fault
    /// threads (serialized, growing).
    pub fn progress(mut self, f: impl Fn(u64, u64) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(f));
        self
    }

    /// What to do when a region of this name exists and no live process
    /// holds it (see [`Reclaim`] and the [interlock](crate::interlock)).
    /// A region a live process holds is never touched: `create` fails with
    /// [`RegionError::AlreadyExists`] naming the pids.
    pub fn reclaim(mut self, reclaim: Reclaim) -> Self {
        self.reclaim = reclaim;
        self
    }

    /// Place hugetlb regions of 1 GiB or more at a 1 GiB-aligned address so
    /// that every process attached shares the page-table pages (default
    /// true; see [`hugeshm_sys::PMD_SHARE_ALIGN`]).
    pub fn pmd_sharing(mut self, on: bool) -> Self {
        self.pmd_sharing = on;
        self
    }

    fn locator(&self) -> Option<Locator> {
        let name = self.name.as_deref()?;
        if !self.backend.attachable_by_name() {
            return None;
        }
        let mut l = Locator::new(name, self.backend)
            .pmd_sharing(self.pmd_sharing)
            .probe(self.probe.clone())
            .mode(self.mode);
        if let Some(uid) = self.owner {
            l = l.owner(uid);
        }
        if let Some(d) = &self.directory {
            l = l.directory(d.clone());
        }
        Some(l)
    }

    fn inspect_existing(&self) -> Result<Option<Inspected>, RegionError> {
        match self.locator() {
            Some(l) => Ok(l.inspect_all(&l.holders())?.into_iter().next()),
            None => Ok(None),
        }
    }

    /// Creates, pre-faults, verifies and (optionally) locks the region.
    ///
    /// A named region claims its name first, atomically, so that of
    /// several processes creating the same name exactly one succeeds; the
    /// others get [`RegionError::AlreadyExists`] naming the winner. When
    /// the name exists already, see [`reclaim`](RegionBuilder::reclaim).
    ///
    /// On error nothing is left behind: no SysV segment, file, memfd,
    /// record, mapping or huge page reservation.
    pub fn create(mut self) -> Result<(Region, AllocationReport), RegionError> {
        let t0 = Instant::now();
        if self.numa == Placement::PerNode {
            return Err(RegionError::Unsupported(
                "--numa per-node makes one region per node: create them with \
                 RegionBuilder::create_per_node (hugeshm create --numa per-node)"
                    .to_owned(),
            ));
        }
        if let Some(n) = &self.name {
            validate_name(n)?;
        }
        if self.mode & !0o777 != 0 {
            return Err(RegionError::Unsupported(format!(
                "mode {:o}: only permission bits (0..=0777) are allowed",
                self.mode
            )));
        }
        let named = self.locator().is_some();
        let mut reclaimed = None;
        let mut attempt = 0;
        loop {
            attempt += 1;
            if let Some(found) = self.inspect_existing()? {
                match self.resolve(found, t0)? {
                    Resolved::Reused(done) => return Ok(*done),
                    Resolved::Removed(r) => {
                        // A device-dax region is recreated on its device
                        // unless another place is given (it is found by
                        // name, without --device).
                        if self.backend == Backend::Dax
                            && self.directory.is_none()
                            && backend::devdax::is_char_device(std::path::Path::new(
                                &r.previous_object,
                            ))
                        {
                            self.directory = Some(PathBuf::from(&r.previous_object));
                        }
                        reclaimed = Some(r)
                    }
                }
            }
            match self.create_new(t0, reclaimed.clone()) {
                // Lost a race for the name: look at what is there now.
                Err(RegionError::AlreadyExists { state: None, .. }) if named && attempt < 4 => {
                    continue
                }
                // A concurrent creator of the same name may hold the pages:
                // the name conflict is then the real error.
                Err(e @ RegionError::PoolShortfall { .. }) if named && attempt < 4 => {
                    if self.inspect_existing()?.is_some() {
                        continue;
                    }
                    return Err(e);
                }
                r => return r,
            }
        }
    }

    /// Decides about a region of the same name (see the table in
    /// [`interlock`](crate::interlock)).
    fn resolve(&self, found: Inspected, t0: Instant) -> Result<Resolved, RegionError> {
        let info = &found.info;
        // Never reuse or remove what another user owns or may write.
        if let Some(l) = self.locator() {
            l.check_trust(info)?;
        }
        let object = info.object.to_string();
        let name = info.name.clone();
        match info.state {
            RegionState::Foreign | RegionState::Damaged | RegionState::Collision => {
                return Err(RegionError::NotOurs {
                    object,
                    reason: info.detail.clone().unwrap_or_default(),
                })
            }
            RegionState::Newer => {
                return Err(RegionError::NewerLayout {
                    object,
                    found: info.layout_version.unwrap_or(0),
                    supported: header::LAYOUT_VERSION,
                })
            }
            _ => {}
        }
        if info.held {
            return Err(RegionError::AlreadyExists {
                name,
                backend: self.backend,
                object,
                holders: info.holders.clone(),
                state: Some(info.state),
            });
        }
        match (self.reclaim, info.state) {
            // A memfd record whose memfd is gone: there is nothing left to
            // reclaim, so it is replaced without being asked.
            (Reclaim::Refuse, RegionState::Stale) => {
                let previous = Reclaimed {
                    action: Reclaim::Recreate,
                    previous_state: RegionState::Stale,
                    previous_object: object,
                    previous_header: info.header.clone(),
                };
                backend::remove_unheld(found)?;
                Ok(Resolved::Removed(previous))
            }
            (Reclaim::Refuse, state) => Err(RegionError::Orphaned {
                name,
                backend: self.backend,
                object,
                state: if info.truncated().is_some() {
                    RegionState::Damaged
                } else {
                    state
                },
                creator_pid: info.creator_pid,
            }),
            (Reclaim::Reuse, RegionState::Ready) => {
                let previous = Reclaimed {
                    action: Reclaim::Reuse,
                    previous_state: info.state,
                    previous_object: object,
                    previous_header: info.header.clone(),
                };
                // Release the probe's lock before attaching.
                drop(found);
                self.reuse(previous, t0)
                    .map(|done| Resolved::Reused(Box::new(done)))
            }
            (Reclaim::Reuse, RegionState::Stale) => Err(RegionError::Stale {
                name,
                record: match &info.object {
                    NamedObject::Memfd { record, .. } => record.clone(),
                    other => other.to_string(),
                },
                creator_pid: info.creator_pid.unwrap_or(0),
            }),
            (Reclaim::Reuse, _) => Err(RegionError::Incomplete {
                name,
                backend: self.backend,
                object,
                creator_pid: info.creator_pid,
                creator_alive: false,
                header_written: info.header.is_some(),
            }),
            (Reclaim::Recreate, state) => {
                let previous = Reclaimed {
                    action: Reclaim::Recreate,
                    previous_state: state,
                    previous_object: object,
                    previous_header: info.header.clone(),
                };
                backend::remove_unheld(found)?;
                Ok(Resolved::Removed(previous))
            }
        }
    }

    /// Attaches an orphan whose header is `ready`, keeping its contents,
    /// if it is the region asked for.
    fn reuse(
        &self,
        previous: Reclaimed,
        t0: Instant,
    ) -> Result<(Region, AllocationReport), RegionError> {
        let loc = self.locator().expect("reuse is for named regions");
        let mut region = loc.attach()?;
        let h = region.header.clone();
        let object = region.object_text();
        if !size_matches(self.size, &h) {
            return Err(RegionError::HeaderMismatch {
                object,
                field: "size".to_owned(),
                expected: bytes_text(self.size),
                found: bytes_text(h.size_bytes),
            });
        }
        let base = hugeshm_sys::base_page_size() as u64;
        let page_ok = match self.page_size.bytes() {
            None => true,
            Some(want) => {
                let want = if self.policy == Policy::Off {
                    base
                } else {
                    want
                };
                h.page_size_bytes == want
                    || (self.policy == Policy::Try && h.page_size_bytes == base)
            }
        };
        if !page_ok {
            return Err(RegionError::HeaderMismatch {
                object,
                field: "page size".to_owned(),
                expected: bytes_text(self.page_size.bytes().unwrap_or(0)),
                found: bytes_text(h.page_size_bytes),
            });
        }
        if self.mlock {
            memlock::check_memlock(h.size_bytes)?;
        }
        let setup_seconds = t0.elapsed().as_secs_f64();
        let threads = self.prefault_threads.unwrap_or_else(available_cpus);
        let method = if threads == 0 {
            PrefaultMethod::None
        } else {
            prefault::method_for_kernel()
        };
        // Maps the existing pages into this process; the pre-fault keeps
        // contents even while other processes write.
        let outcome = prefault::prefault(
            region.mapping(),
            h.page_size_bytes as usize,
            threads,
            &[],
            method,
            self.progress.as_ref(),
        )?;
        let v = region.verify_with(verify::pmd_size(&self.probe))?;
        if self.mlock {
            region.mlock()?;
        }
        let fell_back =
            self.page_size.bytes().is_some_and(|b| b > base) && h.page_size_bytes == base;
        region.set_name(loc.name());
        let report = self.report(
            &region,
            &v,
            ReportParts {
                page_size_bytes: h.page_size_bytes,
                fallback: fell_back.then(|| Fallback {
                    reason: "reused an existing region that is on base pages".to_owned(),
                    shortfall: None,
                }),
                node_bytes: verify::node_bytes(region.addr() as u64),
                cpus: Vec::new(),
                warnings: vec![format!(
                    "reused the existing region: created by pid {} {} ago, contents kept",
                    h.creator_pid,
                    age_text(h.created())
                )],
                threads: outcome.threads,
                method: outcome.method,
                setup_seconds,
                prefault_seconds: outcome.seconds,
                reclaimed: Some(previous),
            },
        );
        Ok((region, report))
    }

    /// Creates a region that does not exist yet.
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

    fn create_new(
        &self,
        t0: Instant,
        reclaimed: Option<Reclaimed>,
    ) -> Result<(Region, AllocationReport), RegionError> {
        let base = hugeshm_sys::base_page_size() as u64;
        let host = self.probe.host_for_regions();
        let extra = HostExtra {
            base,
            pmd_size: verify::pmd_size(&self.probe),
        };
        if matches!(self.numa, Placement::WeightedInterleave(_)) && !host.weighted_interleave {
            return Err(RegionError::Unsupported(
                "--numa weighted-interleave needs Linux 6.9 or later (this kernel has no \
                 /sys/kernel/mm/mempolicy/weighted_interleave): use --numa interleave"
                    .to_owned(),
            ));
        }
        let (req, mut plan) = self.checked_plan(&host, &extra, self.effective_policy(&host))?;
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
        let threads = self.prefault_threads.unwrap_or_else(|| {
            if cpus.is_empty() {
                available_cpus()
            } else {
                cpus.len()
            }
        });
        let method = if threads == 0 {
            PrefaultMethod::None
        } else {
            prefault::method_for_kernel()
        };
        let generation = header::new_generation();
        let fault = Fault {
            method,
            threads,
            cpus: &cpus,
        };

        // Huge pages the kernel refuses, at the reservation (ENOMEM: a
        // pool that changed since the plan) or at fault time (a hugetlb
        // cgroup limit), fail `only` with the numbers and make `try` start
        // over, whole, on base pages.
        let (mut guard, outcome, setup_seconds) =
            match self.make_and_fault(&plan, &fault, &host, generation, t0) {
                Ok(done) => done,
                Err(e) if self.policy == Policy::Try && plan.is_huge() && refused(&e) => {
                    plan = pool::fallback_plan(&req, &extra, &e)?;
                    self.make_and_fault(&plan, &fault, &host, generation, t0)?
                }
                Err(e) => return Err(e),
            };
        let r = guard.region();

        let mut warnings = plan.warnings.clone();
        let mut fallback = plan.fallback.clone();
        let mut v = r.verify_with(extra.pmd_size)?;
        // Transparent huge pages show only once faulted: without a
        // pre-fault there is nothing to verify yet.
        let unverifiable =
            outcome.method == PrefaultMethod::None && matches!(plan.backing, Backing::Thp(_));
        if unverifiable {
            warnings.push(
                "not pre-faulted: transparent huge page use shows only after first touch"
                    .to_owned(),
            );
        } else if plan.backing == Backing::Dax {
            // DAX pages are the device's: smaps says 4 kB whatever the
            // fault size. The entries are judged from pagemap (once
            // pre-faulted), and MAP_SYNC from smaps.
            if outcome.method != PrefaultMethod::None {
                let t = verify::dax_windows(r.addr() as u64, r.len() as u64)?;
                v.resident_bytes = t.present * 4096;
                if t.windows > 0 && t.pmd == t.windows {
                    v.page_size_bytes = plan.page_size;
                } else if t.pte > 0 {
                    let err = RegionError::DaxSmallFaults {
                        object: r.object_text(),
                        pte_windows: t.pte,
                        windows: t.windows,
                        fix: Box::new(Fix::AlignDax {
                            causes: vec![DaxCause::Extents],
                            path: r.object_text(),
                            offset: 0,
                            namespace: None,
                            region: true,
                        }),
                    };
                    if self.policy == Policy::Only {
                        return Err(err);
                    }
                    fallback = Some(Fallback {
                        reason: err.to_string(),
                        shortfall: None,
                    });
                }
            }
            if self.policy != Policy::Off && !v.map_sync {
                let reason = format!(
                    "{} is not mapped MAP_SYNC (the file system or, on a dax=inode mount, the file is not DAX): writes are made durable with msync, not by flushing CPU caches",
                    r.object_text()
                );
                if self.policy == Policy::Only {
                    return Err(RegionError::Unsupported(reason));
                }
                fallback = Some(Fallback {
                    reason,
                    shortfall: None,
                });
            }
        } else if v.page_size_bytes < plan.page_size {
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
            if self.policy == Policy::Only {
                return Err(err);
            }
            fallback = Some(Fallback {
                reason: err.to_string(),
                shortfall: fallback.and_then(|f| f.shortfall),
            });
        } else if v.page_size_bytes > plan.page_size {
            warnings.push(format!(
                "asked for {} pages, the kernel used {} (transparent huge pages)",
                format_bytes(plan.page_size),
                format_bytes(v.page_size_bytes)
            ));
        }
        // DAX pages are the device's, not counted in Rss.
        if outcome.method != PrefaultMethod::None
            && plan.backing != Backing::Dax
            && v.resident_bytes < plan.size_bytes
        {
            warnings.push(format!(
                "only {} of {} bytes resident after the pre-fault",
                v.resident_bytes, plan.size_bytes
            ));
        }
        if plan.backing == Backing::Hugetlb
            && plan.size_bytes >= PMD_SHARE_ALIGN as u64
            && plan.page_size < PMD_SHARE_ALIGN as u64
            && !r.aligned_for_pmd_sharing()
        {
            warnings.push(
                "not at a 1 GiB-aligned address: every attached process builds its own page \
                 tables for the region"
                    .to_owned(),
            );
        }

        // Where the pages went; a bound region with pages elsewhere fails
        // `only`.
        let node_bytes = verify::node_bytes(r.addr() as u64);
        if let Some(MemPolicy::Bind(nodes)) = self.mbind_policy(&host) {
            let misplaced: u64 = node_bytes
                .iter()
                .filter(|(n, _)| !nodes.contains(n))
                .map(|(_, b)| *b)
                .sum();
            if misplaced > 0 {
                let err = RegionError::Misplaced {
                    object: r.object_text(),
                    placement: self.numa.to_string(),
                    misplaced_bytes: misplaced,
                    nodes: node_bytes.iter().map(|(n, b)| (*n, *b)).collect(),
                };
                if self.policy == Policy::Only {
                    return Err(err);
                }
                warnings.push(err.to_string());
            }
        }
        if self.mlock {
            r.mlock()?;
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
            &v,
            ReportParts {
                page_size_bytes: plan.page_size,
                fallback,
                warnings,
                node_bytes,
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

    /// Claims the name, reserves and maps (the backend's operations), writes the
    /// header (state `initializing`) and pre-faults: the region, guarded
    /// (destroyed on drop), the pre-fault's outcome and the setup time. A
    /// fault the kernel refuses on hugetlb pages is
    /// [`RegionError::FaultRefused`]; nothing is left behind.
    fn make_and_fault(
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

    fn report(&self, region: &Region, v: &Verification, p: ReportParts) -> AllocationReport {
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
/// The parts of an [`AllocationReport`] that differ between a new and a
/// reused region.
/// How to pre-fault: method, threads, and the CPUs they run on (empty:
/// wherever the scheduler puts them).
struct Fault<'a> {
    method: PrefaultMethod,
    threads: usize,
    cpus: &'a [u32],
}

struct ReportParts {
    page_size_bytes: u64,
    cpus: Vec<u32>,
    fallback: Option<Fallback>,
    warnings: Vec<String>,
    node_bytes: std::collections::BTreeMap<u32, u64>,
    threads: usize,
    method: PrefaultMethod,
    setup_seconds: f64,
    prefault_seconds: f64,
    reclaimed: Option<Reclaimed>,
}

/// Whether the kernel refused huge pages: at the reservation (a pool
/// shortfall the system call found) or at fault time.
fn refused(e: &RegionError) -> bool {
    matches!(
        e,
        RegionError::PoolShortfall { .. } | RegionError::FaultRefused { .. }
    )
}

fn age_text(t: std::time::SystemTime) -> String {
    let s = t.elapsed().map(|d| d.as_secs()).unwrap_or(0);
    match s {
        0..=119 => format!("{s} s"),
        120..=7199 => format!("{} min", s / 60),
        _ => format!("{} h", s / 3600),
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
