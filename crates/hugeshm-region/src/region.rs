//! [`RegionBuilder`] and [`Region`]: create (claim the name, plan, reserve,
//! write the header, pre-fault, verify, lock, mark ready), attach, close,
//! destroy.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hugeshm_parse::size::format_bytes;
use hugeshm_probe::{dev_major, dev_minor, Probe, Roots};
use rustix::fs::{FlockOperation, Mode, OFlags};

use crate::error::RegionError;
use crate::header::{
    self, Decoded, HeaderState, Liveness, RegionHeader, HEADER_BYTES, STATE_OFFSET, USED_BYTES,
};
use crate::interlock::{self, Holders, Inspected, RegionState};
use crate::locate::Locator;
use crate::memfd_record::{self, memfd_record_path, MemfdRecord};
use crate::memlock;
use crate::naming::{object_file_name, sysv_key, validate_name};
use crate::pool::{self, Backing, HostExtra, Plan, Request, ThpMode};
use crate::prefault::{self, available_cpus, Progress};
use crate::report::{AllocationReport, Reclaimed};
use crate::sys::{self, Mapping, ShmAttachment, ShmFlags, SysError, PMD_SHARE_ALIGN};
use crate::types::{Backend, PageSize, Policy, PrefaultMethod, Reclaim};
use crate::verify::{self, Verification};

/// `statfs.f_type` of tmpfs.
const TMPFS_MAGIC: u64 = 0x0102_1994;
/// `statfs.f_type` of hugetlbfs.
const HUGETLBFS_MAGIC: u64 = 0x9584_58f6;

/// How long an attacher waits for a reclaimer's exclusive lock on a file.
const LOCK_WAIT: Duration = Duration::from_secs(5);

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
        }
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
    /// a tmpfs directory (instead of `/dev/shm`).
    pub fn directory(mut self, dir: impl Into<PathBuf>) -> Self {
        self.directory = Some(dir.into());
        self
    }

    /// Progress of the pre-fault: `(done_bytes, total_bytes)`, called from
    /// the pre-fault threads (serialized, growing).
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
    /// true; see [`sys::PMD_SHARE_ALIGN`]).
    pub fn pmd_sharing(mut self, on: bool) -> Self {
        self.pmd_sharing = on;
        self
    }

    fn locator(&self) -> Option<Locator> {
        let name = self.name.as_deref()?;
        if !self.backend.attachable_by_name() {
            return None;
        }
        let mut l = Locator::new(name, self.backend).pmd_sharing(self.pmd_sharing);
        if let Some(d) = &self.directory {
            l = l.directory(d.clone());
        }
        Some(l)
    }

    fn inspect_existing(&self) -> Result<Option<Inspected>, RegionError> {
        match self.locator() {
            Some(l) => Ok(l.inspect_all(&Holders::lazy())?.into_iter().next()),
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
    pub fn create(self) -> Result<(Region, AllocationReport), RegionError> {
        let t0 = Instant::now();
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
                    Resolved::Removed(r) => reclaimed = Some(r),
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
            (Reclaim::Refuse, state) => Err(RegionError::Orphaned {
                name,
                backend: self.backend,
                object,
                state,
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
                    crate::locate::NamedObject::Memfd { record, .. } => record.clone(),
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
                interlock::remove_unheld(found)?;
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
        let size_ok = self.size == h.requested_bytes
            || self.size == h.size_bytes
            || round_up(self.size.max(HEADER_BYTES + 1), h.page_size_bytes) == h.size_bytes;
        if !size_ok {
            return Err(RegionError::HeaderMismatch {
                object,
                field: "size".to_owned(),
                expected: bytes_text(self.size),
                found: bytes_text(h.size_bytes),
            });
        }
        let base = sys::base_page_size() as u64;
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
        // Maps the existing pages into this process (contents kept).
        // SAFETY: the region was just attached by this call and has not been
        // handed out, so nothing else in this process accesses it; the
        // pre-fault preserves contents (MADV_POPULATE_WRITE, or an atomic
        // fetch_or(0) per page) even while other processes write; its
        // length is a multiple of its page size.
        let outcome = unsafe {
            prefault::prefault(
                region.as_ptr(),
                region.len(),
                h.page_size_bytes as usize,
                threads,
                method,
                self.progress.as_ref(),
            )
        }?;
        let v = region.verify()?;
        if self.mlock {
            region.mlock()?;
        }
        let fell_back =
            self.page_size.bytes().is_some_and(|b| b > base) && h.page_size_bytes == base;
        region.name = Some(loc.name().to_owned());
        let report = self.report(
            &region,
            &v,
            ReportParts {
                page_size_bytes: h.page_size_bytes,
                fell_back,
                reason: fell_back
                    .then(|| "reused an existing region that is on base pages".to_owned()),
                shortfall: None,
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
    fn create_new(
        &self,
        t0: Instant,
        reclaimed: Option<Reclaimed>,
    ) -> Result<(Region, AllocationReport), RegionError> {
        let base = sys::base_page_size() as u64;
        let host = Probe::new(Roots::default()).host();
        let extra = HostExtra {
            base,
            pmd_size: verify::pmd_size(),
        };
        let directory = match &self.directory {
            Some(d) => Some((d.clone(), dir_hugetlbfs_page_size(d)?)),
            None => None,
        };
        // The header takes the first 4 KiB: leave at least one byte of data.
        let requested = if self.size == 0 {
            0
        } else {
            self.size.max(HEADER_BYTES + 1)
        };
        let req = Request {
            backend: self.backend,
            page_size: self.page_size,
            policy: self.policy,
            requested_bytes: requested,
            directory,
        };
        let mut plan = pool::plan(&req, &host, &extra)?;
        if usize::try_from(plan.size_bytes).is_err() {
            return Err(RegionError::InvalidSize {
                requested_bytes: self.size,
                reason: "does not fit in this process's address space".to_owned(),
            });
        }
        if self.mlock {
            memlock::check_memlock(plan.size_bytes)?;
        }
        let threads = self.prefault_threads.unwrap_or_else(available_cpus);
        let method = if threads == 0 {
            PrefaultMethod::None
        } else {
            prefault::method_for_kernel()
        };
        let generation = header::new_generation();

        let region = match self.materialize(&plan, method, &host, generation) {
            Ok(r) => r,
            Err(e @ RegionError::PoolShortfall { .. })
                if self.policy == Policy::Try && plan.is_huge() =>
            {
                plan = pool::fallback_plan(&req, &extra, &e)?;
                self.materialize(&plan, method, &host, generation)?
            }
            Err(e) => return Err(e),
        };
        let mut guard = CreateGuard(Some(region));
        // State `initializing` before the pre-fault: a crash from here on
        // leaves a region that says so.
        guard.region_mut().write_header()?;
        let setup_seconds = t0.elapsed().as_secs_f64();

        let r = guard.region();
        // SAFETY: the region was just mapped read-write by this call and
        // has not been handed out, so nothing else in this process accesses
        // it; its length is a multiple of its page size. (Other processes
        // cannot attach it before it is ready.)
        let outcome = unsafe {
            prefault::prefault(
                r.as_ptr(),
                r.len(),
                plan.page_size as usize,
                threads,
                method,
                self.progress.as_ref(),
            )
        }?;

        let mut warnings = plan.warnings.clone();
        let mut fell_back = plan.fell_back;
        let mut reason = plan.reason.clone();
        let v = r.verify()?;
        // Transparent huge pages show only once faulted: without a
        // pre-fault there is nothing to verify yet.
        let unverifiable =
            outcome.method == PrefaultMethod::None && matches!(plan.backing, Backing::Thp(_));
        if unverifiable {
            warnings.push(
                "not pre-faulted: transparent huge page use shows only after first touch"
                    .to_owned(),
            );
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
            fell_back = true;
            reason = Some(err.to_string());
        } else if v.page_size_bytes > plan.page_size {
            warnings.push(format!(
                "asked for {} pages, the kernel used {} (transparent huge pages)",
                format_bytes(plan.page_size),
                format_bytes(v.page_size_bytes)
            ));
        }
        if outcome.method != PrefaultMethod::None && v.resident_bytes < plan.size_bytes {
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

        if self.mlock {
            r.mlock()?;
        }
        // Verified (and locked): ready, in one aligned atomic store.
        guard.region_mut().set_state(HeaderState::Ready)?;
        let region = guard.disarm();
        let report = self.report(
            &region,
            &v,
            ReportParts {
                page_size_bytes: plan.page_size,
                fell_back,
                reason,
                shortfall: plan.shortfall.clone(),
                warnings,
                threads: outcome.threads,
                method: outcome.method,
                setup_seconds,
                prefault_seconds: outcome.seconds,
                reclaimed,
            },
        );
        Ok((region, report))
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
            fell_back: p.fell_back,
            reason: p.reason,
            shortfall: p.shortfall,
            warnings: p.warnings,
            prefault_threads: p.threads,
            prefault_method: p.method,
            setup_seconds: p.setup_seconds,
            prefault_seconds: p.prefault_seconds,
            prefault_gbps: prefault::gbps(region.len() as u64, p.prefault_seconds),
            ready_seconds: p.setup_seconds + p.prefault_seconds,
            verified_page_size_bytes: v.page_size_bytes,
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
        let huge = plan.backing == Backing::Hugetlb;
        (self.pmd_sharing
            && huge
            && plan.page_size < PMD_SHARE_ALIGN as u64
            && plan.size_bytes >= PMD_SHARE_ALIGN as u64)
            .then_some(PMD_SHARE_ALIGN)
    }

    /// Creates and maps the object for `plan`, claiming the name first
    /// (before any memory is reserved). Its header is not written yet.
    fn materialize(
        &self,
        plan: &Plan,
        method: PrefaultMethod,
        host: &hugeshm_probe::HostSnapshot,
        generation: u64,
    ) -> Result<Region, RegionError> {
        let size = plan.size_bytes;
        let len = size as usize;
        let huge = (plan.backing == Backing::Hugetlb).then_some(plan.page_size);
        let align = self.align_for(plan);
        let mut hdr = header::new_header(
            self.name.as_deref(),
            self.backend,
            size,
            self.size,
            plan.page_size,
            generation,
        );
        hdr.hugetlb = huge.is_some();
        hdr.thp = matches!(plan.backing, Backing::Thp(_));
        let mk = |mem: Mem, object: Object| Region {
            mem,
            object,
            backend: self.backend,
            name: self.name.clone(),
            page_size: plan.page_size,
            header: hdr.clone(),
        };
        let exists = |object: String| RegionError::AlreadyExists {
            name: self.name.clone().unwrap_or_default(),
            backend: self.backend,
            object,
            holders: Vec::new(),
            state: None,
        };
        match self.backend {
            Backend::Sysv => {
                let key = self
                    .name
                    .as_deref()
                    .map(sysv_key)
                    .unwrap_or(sys::IPC_PRIVATE);
                let flags = ShmFlags {
                    create: true,
                    exclusive: true,
                    huge_page_size: huge,
                    mode: self.mode,
                };
                let shmid = sys::shm_get(key, size, flags).map_err(|e| match e.errno() {
                    Some(libc::EEXIST) => exists(format!("SysV key {:#010x}", key as u32)),
                    Some(libc::ENOMEM) if huge.is_some() => {
                        refused_shortfall(plan.page_size, size / plan.page_size, e)
                    }
                    Some(libc::EPERM) if huge.is_some() => RegionError::Permission {
                        what: "SysV shared memory on huge pages (shmget SHM_HUGETLB)".to_owned(),
                        fix: memlock::shm_hugetlb_fix(size),
                        source: Some(e),
                    },
                    Some(libc::EINVAL)
                        if host.sysctl.shmmax.is_some_and(|max| size > max) =>
                    {
                        RegionError::InvalidSize {
                            requested_bytes: size,
                            reason: format!(
                                "larger than kernel.shmmax ({}); to fix: sysctl -w kernel.shmmax={size}",
                                host.sysctl.shmmax.unwrap_or(0)
                            ),
                        }
                    }
                    _ => RegionError::Sys(e),
                })?;
                let undo = UndoShm(Some(shmid));
                let att = sys::shm_attach_placed(shmid, align)?;
                let anonymous = self.name.is_none();
                if anonymous {
                    // Destroyed when the last attachment goes (children that
                    // inherit it over fork keep it alive).
                    sys::shm_remove(shmid)?;
                }
                undo.disarm();
                Ok(mk(
                    Mem::Shm(att),
                    Object::Sysv {
                        shmid,
                        key,
                        removed: anonymous,
                    },
                ))
            }
            Backend::Memfd => {
                let label = match &self.name {
                    Some(n) => object_file_name(n),
                    None => "hugeshm".to_owned(),
                };
                let fd = sys::memfd_create(&label, huge)?;
                sys::flock(fd.as_fd(), FlockOperation::LockShared)?;
                sys::set_len(fd.as_fd(), size)?;
                let (dev, ino) = fd_dev_ino(fd.as_fd(), &label)?;
                let mut undo = UndoUnlink(None);
                let record = match &self.name {
                    Some(n) => {
                        let path = memfd_record_path(n);
                        let rec = MemfdRecord {
                            pid: std::process::id(),
                            start_ticks: hdr.creator_start_ticks,
                            fd: fd.as_raw_fd(),
                            dev,
                            ino,
                            generation,
                            uid: hdr.creator_uid,
                            size_bytes: size,
                        };
                        if !memfd_record::publish(&path, &rec, self.mode)? {
                            return Err(exists(path.display().to_string()));
                        }
                        undo = UndoUnlink(Some(path.clone()));
                        Some(RecordRef {
                            path,
                            generation,
                            dev,
                            ino,
                        })
                    }
                    None => None,
                };
                let map = sys::mmap_fd_placed(fd.as_fd(), len, 0, align)
                    .map_err(|e| map_reserve_error(e, huge, plan))?;
                undo.disarm();
                Ok(mk(Mem::Map(map), Object::Memfd(MemfdHandle { fd, record })))
            }
            Backend::Anon => {
                let map = sys::mmap_anon_placed(len, true, huge, align)
                    .map_err(|e| map_reserve_error(e, huge, plan))?;
                Ok(mk(Mem::Map(map), Object::Anon))
            }
            Backend::Hugetlbfs | Backend::Posix => {
                let dir = plan
                    .dir
                    .clone()
                    .expect("file backends always plan a directory");
                let fstype = check_dir(&dir, huge)?;
                // Space on the file system, before creating anything.
                if let Some(free) = fs_free_bytes(&dir)? {
                    if free < size {
                        return Err(no_space(&dir, &fstype, size, free));
                    }
                }
                let path = self.name.as_ref().map(|n| dir.join(object_file_name(n)));
                let denied = |target: &Path, call: String, e: rustix::io::Errno| {
                    RegionError::Permission {
                        what: format!("create {}", target.display()),
                        fix: if fstype == "hugetlbfs" {
                            format!(
                                "mount the hugetlbfs at {} with options that let uid {} create files \
                                 (e.g. -o uid={},gid={},mode=0770)",
                                dir.display(),
                                rustix::process::geteuid().as_raw(),
                                rustix::process::geteuid().as_raw(),
                                rustix::process::getegid().as_raw()
                            )
                        } else {
                            format!("make {} writable for this user", dir.display())
                        },
                        source: Some(SysError::Os {
                            call,
                            errno: e.raw_os_error(),
                        }),
                    }
                };
                // Unnamed (O_TMPFILE) and locked before it gets its name:
                // nobody ever sees the name without a live holder's lock.
                // Kernels without O_TMPFILE on this file system fall back
                // to O_CREAT|O_EXCL on the name, then the lock.
                let (fd, linked_by_open) = match sys::open_tmpfile(&dir, self.mode) {
                    Ok(fd) => (fd, false),
                    Err(e)
                        if matches!(
                            e.errno(),
                            Some(libc::EOPNOTSUPP) | Some(libc::EISDIR) | Some(libc::EINVAL)
                        ) =>
                    {
                        let target = path.clone().unwrap_or_else(|| dir.join(temp_file_name()));
                        let fd = rustix::fs::open(
                            &target,
                            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
                            Mode::from_bits_truncate(self.mode),
                        )
                        .map_err(|e| match e {
                            rustix::io::Errno::EXIST => exists(target.display().to_string()),
                            rustix::io::Errno::ACCESS | rustix::io::Errno::PERM => denied(
                                &target,
                                format!("open({}, O_CREAT|O_EXCL)", target.display()),
                                e,
                            ),
                            e => RegionError::io(target.display().to_string(), e.into()),
                        })?;
                        if path.is_none() {
                            std::fs::remove_file(&target)
                                .map_err(|e| RegionError::io(target.display().to_string(), e))?;
                        }
                        (fd, path.is_some())
                    }
                    Err(e) if matches!(e.errno(), Some(libc::EACCES) | Some(libc::EPERM)) => {
                        let target = path.clone().unwrap_or_else(|| dir.clone());
                        return Err(denied(
                            &target,
                            e.call().to_owned(),
                            rustix::io::Errno::from_raw_os_error(e.errno().unwrap_or(libc::EACCES)),
                        ));
                    }
                    Err(e) => return Err(RegionError::Sys(e)),
                };
                let mut undo = UndoUnlink(if linked_by_open { path.clone() } else { None });
                let io =
                    |e: rustix::io::Errno| RegionError::io(dir.display().to_string(), e.into());
                rustix::fs::fchmod(&fd, Mode::from_bits_truncate(self.mode)).map_err(io)?;
                sys::flock(fd.as_fd(), FlockOperation::LockShared)?;
                sys::set_len(fd.as_fd(), size)?;
                if let (Some(p), false) = (&path, linked_by_open) {
                    if !sys::link_tmpfile(fd.as_fd(), p)? {
                        return Err(exists(p.display().to_string()));
                    }
                    undo = UndoUnlink(Some(p.clone()));
                }
                let map = if fstype == "hugetlbfs" {
                    sys::mmap_fd_placed(fd.as_fd(), len, 0, align)
                        .map_err(|e| map_reserve_error(e, huge, plan))?
                } else {
                    let advise_only = plan.backing == Backing::Thp(ThpMode::Advise)
                        && method != PrefaultMethod::None;
                    let target = path.clone().unwrap_or_else(|| dir.clone());
                    if !advise_only {
                        // Blocks now, so a full tmpfs is ENOSPC here, not
                        // SIGBUS on first touch. (With huge=advise fallocate
                        // would allocate base pages; those regions are filled
                        // by MADV_POPULATE_WRITE after MADV_HUGEPAGE, which
                        // fails with an error rather than SIGBUS.)
                        sys::fallocate(fd.as_fd(), size).map_err(|e| match e.errno() {
                            Some(libc::ENOSPC) => {
                                let free = fs_free_bytes(&dir).ok().flatten().unwrap_or(0);
                                no_space(&target, &fstype, size, free)
                            }
                            _ => RegionError::Sys(e),
                        })?;
                    }
                    let map = sys::mmap_fd(fd.as_fd(), len, 0)?;
                    if matches!(plan.backing, Backing::Thp(_)) {
                        sys::advise_hugepage(&map)?;
                    }
                    map
                };
                undo.disarm();
                let linked = path.is_some();
                Ok(mk(
                    Mem::Map(map),
                    Object::File {
                        path: path.unwrap_or(dir),
                        fd,
                        linked,
                    },
                ))
            }
        }
    }
}

/// The parts of an [`AllocationReport`] that differ between a new and a
/// reused region.
struct ReportParts {
    page_size_bytes: u64,
    fell_back: bool,
    reason: Option<String>,
    shortfall: Option<pool::Shortfall>,
    warnings: Vec<String>,
    threads: usize,
    method: PrefaultMethod,
    setup_seconds: f64,
    prefault_seconds: f64,
    reclaimed: Option<Reclaimed>,
}

fn round_up(v: u64, page: u64) -> u64 {
    v.div_ceil(page.max(1)) * page.max(1)
}

fn bytes_text(b: u64) -> String {
    format!("{b} bytes ({})", format_bytes(b))
}

fn age_text(t: std::time::SystemTime) -> String {
    let s = t.elapsed().map(|d| d.as_secs()).unwrap_or(0);
    match s {
        0..=119 => format!("{s} s"),
        120..=7199 => format!("{} min", s / 60),
        _ => format!("{} h", s / 3600),
    }
}

fn fd_dev_ino(fd: BorrowedFd<'_>, what: &str) -> Result<((u32, u32), u64), RegionError> {
    let st = rustix::fs::fstat(fd).map_err(|e| RegionError::io(what, e.into()))?;
    #[allow(clippy::unnecessary_cast)]
    let dev = st.st_dev as u64;
    #[allow(clippy::unnecessary_cast)]
    Ok(((dev_major(dev), dev_minor(dev)), st.st_ino as u64))
}

/// A unique name for an anonymous file region (unlinked right after
/// mapping).
fn temp_file_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    format!(
        "hugeshm.tmp-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

fn statfs_type(path: &Path) -> Result<(u64, u64), RegionError> {
    let st = rustix::fs::statfs(path)
        .map_err(|e| RegionError::io(path.display().to_string(), e.into()))?;
    #[allow(clippy::unnecessary_cast)]
    let f_type = st.f_type as u64 & 0xffff_ffff;
    #[allow(clippy::unnecessary_cast)]
    let bsize = st.f_bsize as u64;
    Ok((f_type, bsize))
}

/// The page size of a directory on hugetlbfs, `None` elsewhere.
fn dir_hugetlbfs_page_size(dir: &Path) -> Result<Option<u64>, RegionError> {
    let (t, bsize) = statfs_type(dir)?;
    Ok((t == HUGETLBFS_MAGIC).then_some(bsize))
}

/// Checks that `dir` is hugetlbfs (for huge pages) or tmpfs; returns the
/// file system name.
fn check_dir(dir: &Path, huge: Option<u64>) -> Result<String, RegionError> {
    let (t, bsize) = statfs_type(dir)?;
    let bad = |reason: String| RegionError::UnsuitableDirectory {
        path: dir.display().to_string(),
        reason,
    };
    match huge {
        Some(page) if t == HUGETLBFS_MAGIC && bsize == page => Ok("hugetlbfs".to_owned()),
        Some(page) => Err(bad(format!(
            "not a hugetlbfs mount of {} pages",
            format_bytes(page)
        ))),
        None if t == TMPFS_MAGIC => Ok("tmpfs".to_owned()),
        None => Err(bad(
            "not on tmpfs (posix regions live on tmpfs, e.g. /dev/shm)".to_owned(),
        )),
    }
}

/// Free bytes on a size-limited file system (`None` when it has no limit:
/// tmpfs `size=0`, hugetlbfs without `size=`).
fn fs_free_bytes(dir: &Path) -> Result<Option<u64>, RegionError> {
    let st = rustix::fs::statvfs(dir)
        .map_err(|e| RegionError::io(dir.display().to_string(), e.into()))?;
    if st.f_blocks == 0 || st.f_blocks == u64::MAX {
        return Ok(None);
    }
    let unit = if st.f_frsize > 0 {
        st.f_frsize
    } else {
        st.f_bsize
    };
    Ok(Some(st.f_bavail.saturating_mul(unit)))
}

fn no_space(path: &Path, fstype: &str, needed: u64, free: u64) -> RegionError {
    let mount = Probe::new(Roots::default())
        .host()
        .mounts
        .iter()
        .filter(|m| path.starts_with(&m.target))
        .max_by_key(|m| m.target.len())
        .map(|m| m.target.clone())
        .unwrap_or_else(|| path.display().to_string());
    RegionError::NoSpace {
        path: path.display().to_string(),
        fstype: fstype.to_owned(),
        needed_bytes: needed,
        free_bytes: free,
        fix: format!(
            "free {} on {mount}, or grow it: mount -o remount,size=<bytes> {mount}",
            format_bytes(needed.saturating_sub(free))
        ),
    }
}

/// The shortfall when the kernel refused a reservation (`ENOMEM`): the
/// pool as it is now.
fn refused_shortfall(page: u64, required: u64, err: SysError) -> RegionError {
    let host = Probe::new(Roots::default()).host();
    let default = host.default_page_size();
    let shortfall = match host.pool(page) {
        Some(p) => match pool::check_pool(p, required, default) {
            Err(s) => s,
            Ok(()) => {
                let mut s = pool::check_pool(p, u64::MAX, default).unwrap_err();
                s.required = required;
                s.fix = format!(
                    "the pool now has {} pages available: retry; if it keeps failing, \
                     check hugetlb cgroup limits (hugetlb.{}.rsvd.max) and hugetlbfs size= limits",
                    p.available(),
                    hugeshm_parse::size::page_size_short(page).to_uppercase() + "B"
                );
                s
            }
        },
        None => {
            return RegionError::Sys(err);
        }
    };
    RegionError::PoolShortfall {
        shortfall,
        refused_by: Some(err.to_string()),
    }
}

fn map_reserve_error(e: SysError, huge: Option<u64>, plan: &Plan) -> RegionError {
    match (e.errno(), huge) {
        (Some(libc::ENOMEM), Some(page)) => refused_shortfall(page, plan.size_bytes / page, e),
        _ => RegionError::Sys(e),
    }
}

/// Removes a SysV segment on drop unless disarmed.
struct UndoShm(Option<i32>);
impl UndoShm {
    fn disarm(mut self) {
        self.0 = None;
    }
}
impl Drop for UndoShm {
    fn drop(&mut self) {
        if let Some(id) = self.0 {
            if let Err(e) = sys::shm_remove(id) {
                eprintln!("hugeshm-region: cleanup: {e}");
            }
        }
    }
}

/// Unlinks a file on drop unless disarmed.
struct UndoUnlink(Option<PathBuf>);
impl UndoUnlink {
    fn disarm(mut self) {
        self.0 = None;
    }
}
impl Drop for UndoUnlink {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            if let Err(e) = std::fs::remove_file(&p) {
                eprintln!("hugeshm-region: cleanup: unlink {}: {e}", p.display());
            }
        }
    }
}

/// Destroys a half-made region (object and mapping) unless disarmed.
struct CreateGuard(Option<Region>);
impl CreateGuard {
    fn region(&self) -> &Region {
        self.0.as_ref().expect("armed guard holds its region")
    }
    fn region_mut(&mut self) -> &mut Region {
        self.0.as_mut().expect("armed guard holds its region")
    }
    fn disarm(mut self) -> Region {
        self.0.take().expect("armed guard holds its region")
    }
}
impl Drop for CreateGuard {
    fn drop(&mut self) {
        if let Some(r) = self.0.take() {
            if let Err(e) = r.destroy() {
                eprintln!("hugeshm-region: cleanup after a failed create: {e}");
            }
        }
    }
}

/// The mapping of a region.
#[derive(Debug)]
enum Mem {
    Map(Mapping),
    Shm(ShmAttachment),
}

impl Mem {
    fn ptr(&self) -> *mut u8 {
        match self {
            Mem::Map(m) => m.as_ptr(),
            Mem::Shm(a) => a.as_ptr(),
        }
    }
    fn len(&self) -> usize {
        match self {
            Mem::Map(m) => m.len(),
            Mem::Shm(a) => a.len(),
        }
    }
    fn release(self) -> Result<(), SysError> {
        match self {
            Mem::Map(m) => m.unmap(),
            Mem::Shm(a) => a.detach(),
        }
    }
}

/// The memfd of a memfd region, and (named regions) its record, which the
/// last holder removes when it closes the region.
#[derive(Debug)]
struct MemfdHandle {
    fd: OwnedFd,
    record: Option<RecordRef>,
}

/// The record of a memfd region this process holds.
#[derive(Debug, Clone)]
struct RecordRef {
    path: PathBuf,
    generation: u64,
    dev: (u32, u32),
    ino: u64,
}

impl MemfdHandle {
    /// Removes the record now (destroy).
    fn remove_record(&mut self) -> Result<(), RegionError> {
        if let Some(r) = self.record.take() {
            memfd_record::remove_if(&r.path, r.generation)?;
        }
        Ok(())
    }
}

impl Drop for MemfdHandle {
    /// Runs after the region is unmapped: if no other holder is left (no
    /// other shared lock on the memfd, no other process mapping it), the
    /// memfd dies with this descriptor, and so does its record.
    fn drop(&mut self) {
        let Some(r) = self.record.take() else {
            return;
        };
        if !matches!(
            sys::flock(self.fd.as_fd(), FlockOperation::NonBlockingLockExclusive),
            Ok(true)
        ) {
            return;
        }
        let me = std::process::id();
        if Holders::lazy()
            .file(r.dev, r.ino)
            .into_iter()
            .any(|p| p != me)
        {
            return;
        }
        if let Err(e) = memfd_record::remove_if(&r.path, r.generation) {
            eprintln!("hugeshm-region: removing the memfd record: {e}");
        }
    }
}

/// The kernel object behind a region.
#[derive(Debug)]
enum Object {
    Sysv {
        shmid: i32,
        key: i32,
        removed: bool,
    },
    /// A hugetlbfs or tmpfs file; `fd` holds a shared `flock` (see
    /// [`interlock`](crate::interlock)).
    File {
        path: PathBuf,
        fd: OwnedFd,
        linked: bool,
    },
    /// A memfd; its descriptor holds a shared `flock`.
    Memfd(MemfdHandle),
    Anon,
}

/// What an attacher expects of a region.
#[derive(Debug, Clone)]
pub(crate) struct Expect {
    pub name: Option<String>,
    pub backend: Option<Backend>,
    pub size: Option<u64>,
    pub page_size: Option<u64>,
    pub pmd_sharing: bool,
}

impl Default for Expect {
    fn default() -> Self {
        Expect {
            name: None,
            backend: None,
            size: None,
            page_size: None,
            pmd_sharing: true,
        }
    }
}

/// Checks the header bytes of an object of `object_size` bytes against
/// what the object is and what the caller expects.
fn check_header(
    bytes: &[u8],
    exp: &Expect,
    object: &str,
    object_size: u64,
    backend: Backend,
    unwritten_creator: impl FnOnce() -> (Option<u32>, Liveness),
) -> Result<RegionHeader, RegionError> {
    let name = exp.name.clone().unwrap_or_default();
    let backend = exp.backend.unwrap_or(backend);
    match header::decode(bytes) {
        Decoded::Unwritten => {
            let (pid, live) = unwritten_creator();
            Err(RegionError::Incomplete {
                name,
                backend,
                object: object.to_owned(),
                creator_pid: pid,
                creator_alive: live.maybe_alive(),
                header_written: false,
            })
        }
        Decoded::Foreign { magic } => Err(RegionError::NotOurs {
            object: object.to_owned(),
            reason: format!("no hugeshm header (first bytes {magic})"),
        }),
        Decoded::Newer { version } => Err(RegionError::NewerLayout {
            object: object.to_owned(),
            found: version,
            supported: header::LAYOUT_VERSION,
        }),
        Decoded::Damaged(why) => Err(RegionError::NotOurs {
            object: object.to_owned(),
            reason: format!("damaged header: {why}"),
        }),
        Decoded::Valid(h) => {
            if let Some(want) = &exp.name {
                if h.name.as_deref() != Some(want.as_str()) {
                    return Err(RegionError::NotOurs {
                        object: object.to_owned(),
                        reason: format!(
                            "it holds hugeshm region {:?}, not {want:?}{}",
                            h.name.clone().unwrap_or_default(),
                            if backend == Backend::Sysv {
                                format!(
                                    " (both names hash to SysV key {:#010x}); pick another name",
                                    sysv_key(want) as u32
                                )
                            } else {
                                String::new()
                            }
                        ),
                    });
                }
            }
            if h.state == HeaderState::Initializing {
                return Err(RegionError::Incomplete {
                    name,
                    backend,
                    object: object.to_owned(),
                    creator_pid: Some(h.creator_pid),
                    creator_alive: h.creator_liveness().maybe_alive(),
                    header_written: true,
                });
            }
            let mismatch = |field: &str, expected: String, found: String| {
                Err(RegionError::HeaderMismatch {
                    object: object.to_owned(),
                    field: field.to_owned(),
                    expected,
                    found,
                })
            };
            if h.size_bytes != object_size {
                return mismatch(
                    "size (header against the object)",
                    bytes_text(h.size_bytes),
                    bytes_text(object_size),
                );
            }
            if let Some(b) = exp.backend {
                if h.backend != b {
                    return mismatch("backend", b.to_string(), h.backend.to_string());
                }
            }
            if let Some(s) = exp.size {
                let ok = s == h.size_bytes
                    || s == h.requested_bytes
                    || round_up(s.max(HEADER_BYTES + 1), h.page_size_bytes) == h.size_bytes;
                if !ok {
                    return mismatch("size", bytes_text(s), bytes_text(h.size_bytes));
                }
            }
            if let Some(p) = exp.page_size {
                if p != h.page_size_bytes {
                    return mismatch("page size", bytes_text(p), bytes_text(h.page_size_bytes));
                }
            }
            Ok(h)
        }
    }
}

/// Checks the pages the kernel maps against the header.
fn check_kernel_pages(
    h: &RegionHeader,
    object: &str,
    hugetlb_page: Option<u64>,
) -> Result<(), RegionError> {
    let want = h.hugetlb.then_some(h.page_size_bytes);
    if want != hugetlb_page {
        let text = |p: Option<u64>| match p {
            Some(p) => format!("hugetlb {}", bytes_text(p)),
            None => "not hugetlb".to_owned(),
        };
        return Err(RegionError::HeaderMismatch {
            object: object.to_owned(),
            field: "page size (header against the kernel)".to_owned(),
            expected: text(want),
            found: text(hugetlb_page),
        });
    }
    Ok(())
}

/// Takes a shared lock on a region file, waiting out a reclaimer's brief
/// exclusive one.
fn lock_shared(fd: BorrowedFd<'_>, what: &str) -> Result<(), RegionError> {
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        if sys::flock(fd, FlockOperation::NonBlockingLockShared)? {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(RegionError::Unsupported(format!(
                "{what}: another process has held an exclusive lock on it for {} s (a reclaim \
                 in progress?); retry",
                LOCK_WAIT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn open_error(path: &Path, flags: &str, e: rustix::io::Errno) -> RegionError {
    match e {
        rustix::io::Errno::ACCESS | rustix::io::Errno::PERM => interlock::permission(
            format!("open {}", path.display()),
            Some(SysError::Os {
                call: format!("open({}, {flags})", path.display()),
                errno: e.raw_os_error(),
            }),
        ),
        e => RegionError::io(path.display().to_string(), e.into()),
    }
}

/// A mapped shared memory region.
///
/// ## Layout
///
/// The first 4 KiB are the [header](crate::header); the caller's data are
/// the rest: [`data_offset`](Region::data_offset) (4096) to
/// [`len`](Region::len). [`read_at`](Region::read_at),
/// [`write_at`](Region::write_at) and [`fill`](Region::fill) take offsets
/// into the data; [`as_ptr`](Region::as_ptr) and [`len`](Region::len)
/// describe the whole mapping, header included. Never write the header.
///
/// ## Lifetime
///
/// Owns its mapping (and its fd or SysV attachment) and unmaps it on drop,
/// printing a failed unmap on stderr ([`Region::close`] returns it instead).
/// Dropping never removes a named object (`sysv`, `hugetlbfs`, `posix`):
/// it stays for other processes until [`Region::destroy`] or
/// [`remove`](crate::remove). A `memfd` region lives while some process
/// holds it; the last holder to close it removes its record. `anon`
/// regions vanish with their last mapping.
///
/// The memory may be shared with other processes, which can write to it at
/// any time, so `Region` hands out no `&[u8]`: use the raw pointer, or the
/// copying [`Region::read_at`] / [`Region::write_at`].
#[derive(Debug)]
pub struct Region {
    // Declared first: unmapped before the fd closes (and before a memfd's
    // last-holder check).
    mem: Mem,
    object: Object,
    backend: Backend,
    name: Option<String>,
    page_size: u64,
    header: RegionHeader,
}

impl Region {
    /// Attaches an existing named region from any process: `sysv` by key,
    /// `hugetlbfs` and `posix` by path, `memfd` through its record. The
    /// header is checked; see [`Locator::attach`] (which also takes
    /// expectations: size, page size).
    pub fn attach(name: &str, backend: Backend) -> Result<Region, RegionError> {
        Locator::new(name, backend).attach()
    }

    /// Attaches a SysV segment by shmid (e.g. an anonymous region's, in a
    /// child). The header is checked.
    pub fn attach_shmid(shmid: i32) -> Result<Region, RegionError> {
        Region::attach_sysv(shmid, &Expect::default())
    }

    /// Attaches a region file by path: a hugetlbfs or tmpfs file, or a
    /// memfd through `/proc/PID/fd/N` of a process that holds it. The
    /// header is checked.
    pub fn attach_path(path: impl AsRef<Path>) -> Result<Region, RegionError> {
        let path = path.as_ref();
        let via_proc = path.starts_with("/proc") && path.to_string_lossy().contains("/fd/");
        let backend = if via_proc {
            Backend::Memfd
        } else {
            Backend::Posix
        };
        Region::attach_file(path, backend, &Expect::default())
    }

    pub(crate) fn attach_sysv(shmid: i32, exp: &Expect) -> Result<Region, RegionError> {
        let perm = |what: String, e: SysError| {
            if matches!(e.errno(), Some(libc::EACCES) | Some(libc::EPERM)) {
                interlock::permission(what, Some(e))
            } else {
                RegionError::Sys(e)
            }
        };
        let stat = sys::shm_stat(shmid).map_err(|e| {
            let what = match &exp.name {
                Some(n) => format!(
                    "attach SysV segment key {:#010x}, shmid {shmid} (region {n:?})",
                    sysv_key(n) as u32
                ),
                None => format!("attach SysV segment shmid {shmid}"),
            };
            perm(what, e)
        })?;
        let object = format!("SysV key {:#010x}, shmid {shmid}", stat.key as u32);
        let align =
            (exp.pmd_sharing && stat.size >= PMD_SHARE_ALIGN as u64).then_some(PMD_SHARE_ALIGN);
        let att = sys::shm_attach_placed(shmid, align)
            .map_err(|e| perm(format!("attach {object}"), e))?;
        let mut buf = vec![0u8; USED_BYTES.min(att.len())];
        if buf.len() >= STATE_OFFSET + 4 {
            // The first page may not exist (a foreign segment, or a creator
            // that died before the header): fault it in as an error, not
            // SIGBUS.
            let first = (sys::base_page_size()).min(att.len());
            sys::populate_read_range(&att, 0, first)
                .map_err(|e| perm(format!("read the header of {object}"), e))?;
            let state = sys::load_u32_acquire(&att, STATE_OFFSET)?;
            att.read_at(0, &mut buf)?;
            buf[STATE_OFFSET..STATE_OFFSET + 4].copy_from_slice(&state.to_le_bytes());
        }
        let h = check_header(&buf, exp, &object, stat.size, Backend::Sysv, || {
            let cpid = u32::try_from(stat.cpid).ok().filter(|p| *p != 0);
            (
                cpid,
                cpid.map(|p| header::liveness(p, None))
                    .unwrap_or(Liveness::Unknown),
            )
        })?;
        let region = Region {
            mem: Mem::Shm(att),
            object: Object::Sysv {
                shmid,
                key: stat.key,
                removed: stat.marked_for_removal(),
            },
            backend: h.backend,
            name: h.name.clone(),
            page_size: h.page_size_bytes,
            header: h,
        };
        let v = region.verify()?;
        check_kernel_pages(
            &region.header,
            &object,
            v.hugetlb.then_some(v.kernel_page_size_bytes),
        )?;
        Ok(region)
    }

    /// Opens, locks and checks a region file, then maps it.
    pub(crate) fn attach_file(
        path: &Path,
        backend: Backend,
        exp: &Expect,
    ) -> Result<Region, RegionError> {
        let mut tries = 0;
        let (fd, st) = loop {
            let fd = rustix::fs::open(path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())
                .map_err(|e| match e {
                    rustix::io::Errno::NOENT => RegionError::NotFound {
                        name: exp.name.clone().unwrap_or_default(),
                        backend,
                        looked: path.display().to_string(),
                    },
                    e => open_error(path, "O_RDWR", e),
                })?;
            lock_shared(fd.as_fd(), &path.display().to_string())?;
            let st = rustix::fs::fstat(&fd)
                .map_err(|e| RegionError::io(path.display().to_string(), e.into()))?;
            // A reclaim may have replaced the file between open and lock.
            let same = rustix::fs::stat(path)
                .map(|now| now.st_ino == st.st_ino && now.st_dev == st.st_dev)
                .unwrap_or(false);
            tries += 1;
            if same || path.starts_with("/proc") {
                break (fd, st);
            }
            if tries >= 3 {
                return Err(RegionError::NotFound {
                    name: exp.name.clone().unwrap_or_default(),
                    backend,
                    looked: format!("{} (replaced while attaching)", path.display()),
                });
            }
        };
        let object = path.display().to_string();
        Region::attach_open_file(fd, path, &object, st.st_size as u64, backend, exp, None)
    }

    #[allow(clippy::too_many_arguments)]
    fn attach_open_file(
        fd: OwnedFd,
        path: &Path,
        object: &str,
        size: u64,
        backend: Backend,
        exp: &Expect,
        record: Option<RecordRef>,
    ) -> Result<Region, RegionError> {
        let head = interlock::read_head(fd.as_fd(), path)?;
        let h = check_header(&head, exp, object, size, backend, || {
            // Nobody else holding a lock means nobody is creating it.
            let _ = sys::flock(fd.as_fd(), FlockOperation::Unlock);
            let alone = matches!(
                sys::flock(fd.as_fd(), FlockOperation::NonBlockingLockExclusive),
                Ok(true)
            );
            (
                None,
                if alone {
                    Liveness::Dead
                } else {
                    Liveness::Alive
                },
            )
        })?;
        if let Some(r) = &record {
            if h.generation != r.generation {
                return Err(RegionError::NotOurs {
                    object: object.to_owned(),
                    reason: format!(
                        "its header has generation {:016x}, the record {:016x}: another region",
                        h.generation, r.generation
                    ),
                });
            }
        }
        let hugetlb_page = sys::hugetlbfs_page_size(fd.as_fd()).map(|p| p as u64);
        check_kernel_pages(&h, object, hugetlb_page)?;
        let len = usize::try_from(size).map_err(|_| RegionError::InvalidSize {
            requested_bytes: size,
            reason: "does not fit in usize".to_owned(),
        })?;
        let align = (exp.pmd_sharing
            && hugetlb_page.is_some_and(|p| p < PMD_SHARE_ALIGN as u64)
            && size >= PMD_SHARE_ALIGN as u64)
            .then_some(PMD_SHARE_ALIGN);
        let map = sys::mmap_fd_placed(fd.as_fd(), len, 0, align)?;
        let via_proc = path.starts_with("/proc");
        let object = if via_proc {
            Object::Memfd(MemfdHandle { fd, record })
        } else {
            Object::File {
                path: path.to_owned(),
                fd,
                linked: true,
            }
        };
        Ok(Region {
            mem: Mem::Map(map),
            object,
            backend: h.backend,
            name: h.name.clone(),
            page_size: h.page_size_bytes,
            header: h,
        })
    }

    /// Attaches memfd region `name` through its record: `Ok(None)` when
    /// there is no record, [`RegionError::Stale`] when nobody holds the
    /// memfd any more.
    pub(crate) fn attach_memfd(
        name: &str,
        record_path: &Path,
        exp: &Expect,
    ) -> Result<Option<Region>, RegionError> {
        let Some(rec) = memfd_record::read(record_path)? else {
            return Ok(None);
        };
        let holders = Holders::lazy();
        let Some((fd, fd_path)) = interlock::open_memfd(&rec, &holders, OFlags::RDWR)? else {
            return Err(RegionError::Stale {
                name: name.to_owned(),
                record: record_path.display().to_string(),
                creator_pid: rec.pid,
            });
        };
        let object = format!(
            "memfd record {} ({})",
            record_path.display(),
            fd_path.display()
        );
        lock_shared(fd.as_fd(), &object)?;
        let st = rustix::fs::fstat(&fd).map_err(|e| RegionError::io(&object, e.into()))?;
        let record = RecordRef {
            path: record_path.to_owned(),
            generation: rec.generation,
            dev: rec.dev,
            ino: rec.ino,
        };
        Region::attach_open_file(
            fd,
            &fd_path,
            &object,
            st.st_size as u64,
            Backend::Memfd,
            exp,
            Some(record),
        )
        .map(Some)
    }

    /// Writes the header (state as in `self.header`, normally
    /// `initializing`) into a region this process just created.
    fn write_header(&mut self) -> Result<(), RegionError> {
        // Fault the header page in first, where a failure is an error
        // (MADV_POPULATE_WRITE), not SIGBUS (full tmpfs, hugetlb cgroup
        // limit at fault time).
        if sys::populate_write_supported() {
            let first = (self.page_size as usize).min(self.len());
            // SAFETY: the first page of this region's own live, read-write
            // mapping; populating never changes contents.
            unsafe { sys::populate_write_raw(self.as_ptr(), first) }.map_err(|source| {
                RegionError::Prefault {
                    method: PrefaultMethod::PopulateWrite,
                    offset: 0,
                    source,
                }
            })?;
        }
        let bytes = header::encode(&self.header);
        match &mut self.mem {
            Mem::Map(m) => m.write_at(0, &bytes),
            Mem::Shm(a) => a.write_at(0, &bytes),
        }?;
        self.set_state(self.header.state)
    }

    /// Publishes a header state with one aligned atomic store.
    fn set_state(&mut self, state: HeaderState) -> Result<(), RegionError> {
        match &self.mem {
            Mem::Map(m) => sys::store_u32_release(m, STATE_OFFSET, state.word()),
            Mem::Shm(a) => sys::store_u32_release(a, STATE_OFFSET, state.word()),
        }?;
        self.header.state = state;
        Ok(())
    }

    /// Start address of the mapping (the header). Accessing memory through
    /// it is the caller's responsibility (`unsafe`); it is valid until the
    /// region is dropped.
    pub fn as_ptr(&self) -> *mut u8 {
        self.mem.ptr()
    }

    /// Start address as an integer.
    pub fn addr(&self) -> usize {
        self.mem.ptr() as usize
    }

    /// Mapped length in bytes, header included (a multiple of the page
    /// size).
    pub fn len(&self) -> usize {
        self.mem.len()
    }

    /// Always false: regions are never empty.
    pub fn is_empty(&self) -> bool {
        self.mem.len() == 0
    }

    /// Where the data start: 4096 (after the header).
    pub fn data_offset(&self) -> usize {
        self.header.data_offset as usize
    }

    /// Data bytes: [`len`](Region::len) − [`data_offset`](Region::data_offset).
    pub fn data_len(&self) -> usize {
        self.len().saturating_sub(self.data_offset())
    }

    /// Start of the data (`as_ptr() + data_offset()`), for raw access: the
    /// same rules as [`as_ptr`](Region::as_ptr).
    pub fn data_ptr(&self) -> *mut u8 {
        self.as_ptr().wrapping_add(self.data_offset())
    }

    /// The header, as written (creator) or checked (attacher).
    pub fn header(&self) -> &RegionHeader {
        &self.header
    }

    /// The page size the region was created with.
    pub fn page_size(&self) -> u64 {
        self.page_size
    }

    /// The backend.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The name, for named regions.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// SysV shmid.
    pub fn shmid(&self) -> Option<i32> {
        match self.object {
            Object::Sysv { shmid, .. } => Some(shmid),
            _ => None,
        }
    }

    /// SysV key (0 for `IPC_PRIVATE`).
    pub fn sysv_key(&self) -> Option<i32> {
        match self.object {
            Object::Sysv { key, .. } => Some(key),
            _ => None,
        }
    }

    /// The path another process can open: the file of a `hugetlbfs` or
    /// `posix` region while it is linked, `/proc/PID/fd/N` for a memfd.
    pub fn path(&self) -> Option<PathBuf> {
        match &self.object {
            Object::File {
                path, linked: true, ..
            } => Some(path.clone()),
            Object::Memfd(h) => Some(PathBuf::from(format!(
                "/proc/{}/fd/{}",
                std::process::id(),
                h.fd.as_raw_fd()
            ))),
            _ => None,
        }
    }

    /// The record of a named memfd region.
    pub fn memfd_record(&self) -> Option<&Path> {
        match &self.object {
            Object::Memfd(MemfdHandle {
                record: Some(r), ..
            }) => Some(&r.path),
            _ => None,
        }
    }

    /// The file descriptor of file and memfd regions (to pass to a child).
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        match &self.object {
            Object::File { fd, .. } => Some(fd.as_fd()),
            Object::Memfd(h) => Some(h.fd.as_fd()),
            _ => None,
        }
    }

    /// Device and inode of a file or memfd region (as in `/proc/PID/maps`).
    pub(crate) fn dev_ino(&self) -> Option<((u32, u32), u64)> {
        self.fd().and_then(|fd| fd_dev_ino(fd, "region").ok())
    }

    /// The object, for messages.
    pub(crate) fn object_text(&self) -> String {
        match &self.object {
            Object::Sysv { shmid, key, .. } => {
                format!("SysV key {:#010x}, shmid {shmid}", *key as u32)
            }
            Object::File { path, .. } => path.display().to_string(),
            Object::Memfd(h) => match &h.record {
                Some(r) => format!("memfd record {}", r.path.display()),
                None => format!("memfd fd {}", h.fd.as_raw_fd()),
            },
            Object::Anon => "anonymous mapping".to_owned(),
        }
    }

    /// Whether the mapping can share page tables with other processes:
    /// hugetlb pages smaller than 1 GiB, a 1 GiB-aligned address, at least
    /// one whole GiB (see [`sys::PMD_SHARE_ALIGN`]).
    pub fn aligned_for_pmd_sharing(&self) -> bool {
        self.pmd_shareable_bytes() > 0
    }

    /// Bytes of the mapping whose page tables can be shared.
    pub fn pmd_shareable_bytes(&self) -> u64 {
        sys::pmd_shareable_bytes(
            self.addr(),
            self.len(),
            self.header.hugetlb.then_some(self.page_size),
        )
    }

    fn data_range(&self, what: &str, offset: usize, n: usize) -> Result<usize, RegionError> {
        match offset.checked_add(n) {
            Some(end) if end <= self.data_len() => Ok(self.data_offset() + offset),
            _ => Err(RegionError::Sys(SysError::InvalidArgument {
                call: format!("Region::{what}(offset={offset}, len={n})"),
                reason: format!(
                    "range {offset}+{n} exceeds the data length {}",
                    self.data_len()
                ),
            })),
        }
    }

    /// Copies `buf.len()` bytes at data offset `offset` out of the region.
    pub fn read_at(&self, offset: usize, buf: &mut [u8]) -> Result<(), RegionError> {
        let at = self.data_range("read_at", offset, buf.len())?;
        Ok(match &self.mem {
            Mem::Map(m) => m.read_at(at, buf),
            Mem::Shm(a) => a.read_at(at, buf),
        }?)
    }

    /// Copies `data` into the region at data offset `offset`.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<(), RegionError> {
        let at = self.data_range("write_at", offset, data.len())?;
        Ok(match &mut self.mem {
            Mem::Map(m) => m.write_at(at, data),
            Mem::Shm(a) => a.write_at(at, data),
        }?)
    }

    /// Sets every data byte to `byte` (the header is kept).
    pub fn fill(&mut self, byte: u8) {
        // SAFETY: data_ptr()..data_ptr() + data_len() lies inside this
        // region's live read-write mapping; `&mut self` excludes other
        // accesses from this process and no references into it exist.
        unsafe { std::ptr::write_bytes(self.data_ptr(), byte, self.data_len()) };
    }

    /// Maps every page of the region into this process's page tables by
    /// reading (`MADV_POPULATE_READ`, Linux 5.14+; else one read per page):
    /// what an attached process does to pay its page-table cost up front.
    /// Contents are unchanged; pages that exist are not allocated again.
    pub fn populate_read(&self) -> Result<(), RegionError> {
        let r = match &self.mem {
            Mem::Map(m) => sys::populate_read(m),
            Mem::Shm(a) => sys::populate_read(a),
        };
        match r {
            Err(e) if e.errno() == Some(libc::EINVAL) => {
                let stride = self.page_size as usize;
                std::hint::black_box(match &self.mem {
                    Mem::Map(m) => sys::read_touch(m, stride),
                    Mem::Shm(a) => sys::read_touch(a, stride),
                });
                Ok(())
            }
            r => Ok(r?),
        }
    }

    /// Write-faults every page of the region without changing its contents
    /// (`MADV_POPULATE_WRITE`, else one atomic `fetch_or(0)` per page).
    pub fn touch_all(&mut self) -> Result<(), RegionError> {
        let r = match &self.mem {
            Mem::Map(m) => sys::populate_write(m),
            Mem::Shm(a) => sys::populate_write(a),
        };
        match r {
            Err(e) if e.errno() == Some(libc::EINVAL) => {
                match &mut self.mem {
                    Mem::Map(m) => m.touch(),
                    Mem::Shm(a) => a.touch(),
                }
                Ok(())
            }
            r => Ok(r?),
        }
    }

    /// Reads `/proc/self/smaps` for the region: the page size the kernel
    /// really uses and the resident bytes.
    pub fn verify(&self) -> Result<Verification, RegionError> {
        verify::verify_range(self.addr() as u64, self.len() as u64)
    }

    /// `mlock`s the region (after checking `RLIMIT_MEMLOCK`).
    pub fn mlock(&self) -> Result<(), RegionError> {
        memlock::check_memlock(self.len() as u64)?;
        let r = match &self.mem {
            Mem::Map(m) => sys::mlock(m),
            Mem::Shm(a) => sys::mlock(a),
        };
        r.map_err(|e| match e.errno() {
            Some(libc::ENOMEM) | Some(libc::EPERM) | Some(libc::EAGAIN) => {
                let lim = rustix::process::getrlimit(rustix::process::Resource::Memlock);
                memlock::memlock_error(self.len() as u64, 0, lim.current, lim.maximum, "*")
            }
            _ => RegionError::Sys(e),
        })
    }

    /// Removes the named object (SysV `IPC_RMID`, unlinks the file, removes
    /// a memfd's record) and unmaps. Other processes that have it mapped
    /// keep their mapping; the memory is freed when the last one goes. An
    /// object someone else removed already is not an error.
    pub fn destroy(self) -> Result<(), RegionError> {
        let Region {
            mem, mut object, ..
        } = self;
        let mut first_err: Option<RegionError> = None;
        match &mut object {
            Object::Sysv {
                shmid,
                removed: false,
                ..
            } => {
                if let Err(e) = sys::shm_remove(*shmid) {
                    if !matches!(e.errno(), Some(libc::EINVAL) | Some(libc::EIDRM)) {
                        first_err = Some(e.into());
                    }
                }
            }
            Object::File {
                path, linked: true, ..
            } => {
                if let Err(e) = std::fs::remove_file(&*path) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        first_err = Some(RegionError::io(path.display().to_string(), e));
                    }
                }
            }
            Object::Memfd(h) => {
                if let Err(e) = h.remove_record() {
                    first_err = Some(e);
                }
            }
            _ => {}
        }
        let unmapped = mem.release();
        drop(object);
        match (first_err, unmapped) {
            (Some(e), _) => Err(e),
            (None, Err(e)) => Err(e.into()),
            (None, Ok(())) => Ok(()),
        }
    }

    /// Detaches: unmaps now (keeping any named object), returning a failed
    /// unmap instead of printing it. The last holder of a memfd region
    /// removes its record.
    pub fn close(self) -> Result<(), RegionError> {
        let Region { mem, object, .. } = self;
        let r = mem.release();
        drop(object);
        Ok(r?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_anon_region_has_a_header_and_data() {
        // Works without root: anon, base pages.
        let (mut r, report) = RegionBuilder::new(1)
            .backend(Backend::Anon)
            .page_size(PageSize::Base)
            .policy(Policy::Only)
            .create()
            .unwrap();
        let base = sys::base_page_size();
        assert_eq!(r.len(), 2 * base, "1 byte + the 4 KiB header");
        assert_eq!(r.data_offset(), 4096);
        assert_eq!(r.data_len(), r.len() - 4096);
        assert_eq!(report.data_bytes, r.data_len() as u64);
        let h = report.header.clone().unwrap();
        assert_eq!(h.state, HeaderState::Ready);
        assert_eq!(h.requested_bytes, 1);
        assert_eq!(h.creator_pid, std::process::id());
        assert!(!h.hugetlb && h.name.is_none());
        // The header in memory says the same.
        let mut bytes = vec![0u8; USED_BYTES];
        match &r.mem {
            Mem::Map(m) => m.read_at(0, &mut bytes).unwrap(),
            Mem::Shm(a) => a.read_at(0, &mut bytes).unwrap(),
        }
        assert_eq!(header::decode(&bytes), Decoded::Valid(h));
        // Data-relative access, bounded by the data.
        r.write_at(0, b"first").unwrap();
        r.write_at(r.data_len() - 4, b"last").unwrap();
        assert!(r.write_at(r.data_len() - 3, b"last").is_err());
        let mut b = [0u8; 5];
        r.read_at(0, &mut b).unwrap();
        assert_eq!(&b, b"first");
        r.fill(7);
        r.read_at(0, &mut b).unwrap();
        assert_eq!(b, [7; 5]);
        r.touch_all().unwrap();
        r.populate_read().unwrap();
        assert!(!r.aligned_for_pmd_sharing());
        // Fill never reaches the header.
        let mut magic = [0u8; 8];
        match &r.mem {
            Mem::Map(m) => m.read_at(0, &mut magic).unwrap(),
            Mem::Shm(a) => a.read_at(0, &mut magic).unwrap(),
        }
        assert_eq!(&magic, b"HUGESHM\0");
        r.destroy().unwrap();
    }

    #[test]
    fn placed_mappings_are_aligned() {
        let m = sys::mmap_anon_placed(3 * 4096, true, None, Some(PMD_SHARE_ALIGN)).unwrap();
        assert_eq!(m.addr() % PMD_SHARE_ALIGN, 0);
        assert_eq!(m.len(), 3 * 4096);
        // Base pages never share page tables; hugetlb below 1 GiB does,
        // for whole aligned GiBs only.
        assert_eq!(sys::pmd_shareable_bytes(m.addr(), 1 << 30, None), 0);
        assert_eq!(
            sys::pmd_shareable_bytes(1 << 30, (3 << 29) as usize, Some(2 << 20)),
            1 << 30
        );
        assert_eq!(
            sys::pmd_shareable_bytes((1 << 30) + (2 << 20), 2 << 30, Some(2 << 20)),
            0
        );
        assert_eq!(sys::pmd_shareable_bytes(1 << 30, 1 << 30, Some(1 << 30)), 0);
        m.unmap().unwrap();
        let fd = sys::memfd_create("hugeshm-placed-test", None).unwrap();
        sys::set_len(fd.as_fd(), 8192).unwrap();
        let m = sys::mmap_fd_placed(fd.as_fd(), 8192, 0, Some(PMD_SHARE_ALIGN)).unwrap();
        assert_eq!(m.addr() % PMD_SHARE_ALIGN, 0);
        m.unmap().unwrap();
    }
}
