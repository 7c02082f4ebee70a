//! [`RegionBuilder`]: create a region, in the numbered steps of the crate
//! docs, one room per group of steps. `create()` validates the request,
//! then loops: a region of the name is resolved (step 1), else a new one
//! is made (`create_new`, steps 2 to 8, one phase each); a lost race for
//! the name looks again.
//!
//! ```text
//! mod.rs       the builder, its options; create(); create_new(): the phases below, in order
//! existing.rs  1    a region of the same name: the interlock's table (decide), removed or reused
//! plan.rs      2-3  plan_new(): the plan from one host snapshot (pools, cgroup, each node's
//!                   pool), memlock, pre-fault threads and method; memory_check
//! make.rs      4    make_or_fall_back(): claim the name, create and map (BackendOps::create);
//!                   try starts over on base pages when the kernel refuses huge pages
//! fault.rs     5-6  place_and_fault(): mbind, the header (initializing), the pre-fault
//! verify.rs    7    verify_new(): a Verdict, check by check: page size (THP, DAX, MAP_SYNC),
//!                   residency, page-table sharing, nodes
//! publish.rs   8    publish(): mlock, state ready; the AllocationReport
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use hugeshm_probe::Probe;

use crate::backend;
use crate::error::RegionError;
use crate::handle::Region;
use crate::model::{Backend, PageSize, Placement, Policy, Reclaim};
use crate::naming::validate_name;
use crate::placement;
use crate::prefault::Progress;
use crate::report::{AllocationReport, Reclaimed};
use hugeshm_sys::MemPolicy;

mod existing;
mod fault;
mod make;
mod plan;
mod publish;
mod verify;

use existing::Resolved;
pub(crate) use plan::memory_check;

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
    keep: bool,
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
            .field("keep", &self.keep)
            .field("probe", &self.probe.roots)
            .field("owner", &self.owner)
            .field("numa", &self.numa)
            .finish()
    }
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
            keep: false,
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
    /// owned by `uid` (default: this process's effective uid; root's is
    /// accepted too, as root may write anything anyway). One that
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

    /// Marks a named region as made to outlive this process (the header's
    /// [`kept`](crate::RegionHeader::kept)): once its creator exits, `ls`
    /// lists it as kept, not attached (normal), rather than orphaned (what
    /// a crashed or departed holder leaves). Default: false, the creator is
    /// one of its users.
    pub fn keep(mut self, keep: bool) -> Self {
        self.keep = keep;
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

    /// Creates a region that does not exist yet: steps 2 to 8, one phase
    /// each.
    fn create_new(
        &self,
        t0: Instant,
        reclaimed: Option<Reclaimed>,
    ) -> Result<(Region, AllocationReport), RegionError> {
        let planned = self.plan_new()?;
        let made = self.make_or_fall_back(&planned, t0)?;
        let verdict = self.verify_new(
            made.guard.region(),
            &made.plan,
            &made.outcome,
            &planned.host,
            planned.extra.pmd_size,
        )?;
        self.publish(made, verdict, planned.cpus, reclaimed)
    }
}
