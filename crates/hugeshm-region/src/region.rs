//! [`RegionBuilder`] and [`Region`]: create (plan, reserve, pre-fault,
//! verify, lock), attach, destroy.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use hugeshm_parse::size::format_bytes;
use hugeshm_probe::{Probe, Roots};
use rustix::fs::{Mode, OFlags};

use crate::error::RegionError;
use crate::memlock;
use crate::naming::{object_file_name, sysv_key, validate_name};
use crate::pool::{self, Backing, HostExtra, Plan, Request, ThpMode};
use crate::prefault::{self, available_cpus, Progress};
use crate::report::AllocationReport;
use crate::sys::{self, Mapping, ShmAttachment, ShmFlags, SysError};
use crate::types::{Backend, PageSize, Policy, PrefaultMethod};
use crate::verify::{self, Verification};

/// `statfs.f_type` of tmpfs.
const TMPFS_MAGIC: u64 = 0x0102_1994;
/// `statfs.f_type` of hugetlbfs.
const HUGETLBFS_MAGIC: u64 = 0x9584_58f6;

/// Builds a [`Region`]: size, backend, page size, policy, pre-fault
/// threads, mlock, mode, name, progress.
///
/// ```no_run
/// use hugeshm_region::{Backend, PageSize, Policy, RegionBuilder};
///
/// # fn main() -> Result<(), hugeshm_region::RegionError> {
/// let (region, report) = RegionBuilder::new(1 << 30)
///     .name("sga")
///     .backend(Backend::Sysv)
///     .page_size(PageSize::HUGE_2M)
///     .policy(Policy::Only)
///     .prefault_threads(2)
///     .create()?;
/// println!("{} pages, {:.1} GB/s", report.verified_page_size_bytes, report.prefault_gbps);
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
            .finish()
    }
}

impl RegionBuilder {
    /// A request for `size_bytes` bytes (rounded up to a page multiple).
    ///
    /// Defaults: `anon` backend, largest page size that fits, policy `try`,
    /// pre-fault threads = the CPUs this process may use, no mlock, mode
    /// 0600, anonymous (no name).
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

    /// Permission bits of the SysV segment or file (default 0600; the
    /// umask does not apply). Ignored for memfd and anon.
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

    /// Creates, pre-faults, verifies and (optionally) locks the region.
    ///
    /// On error nothing is left behind: no SysV segment, file, memfd,
    /// mapping or huge page reservation.
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
        let req = Request {
            backend: self.backend,
            page_size: self.page_size,
            policy: self.policy,
            requested_bytes: self.size,
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

        let region = match self.materialize(&plan, method, &host) {
            Ok(r) => r,
            Err(e @ RegionError::PoolShortfall { .. })
                if self.policy == Policy::Try && plan.is_huge() =>
            {
                plan = pool::fallback_plan(&req, &extra, &e)?;
                self.materialize(&plan, method, &host)?
            }
            Err(e) => return Err(e),
        };
        let guard = CreateGuard(Some(region));
        let setup_seconds = t0.elapsed().as_secs_f64();

        let r = guard.region();
        // SAFETY: the region was just mapped read-write by this call and
        // has not been handed out, so nothing else in this process accesses
        // it; its length is a multiple of its page size.
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

        if self.mlock {
            r.mlock()?;
        }
        let region = guard.disarm();
        let prefault_seconds = outcome.seconds;
        let report = AllocationReport {
            name: self.name.clone(),
            backend: self.backend,
            requested_bytes: self.size,
            size_bytes: plan.size_bytes,
            rounded_up: plan.size_bytes > self.size,
            requested_page_size: self.page_size,
            page_size_bytes: plan.page_size,
            policy: self.policy,
            fell_back,
            reason,
            shortfall: plan.shortfall.clone(),
            warnings,
            prefault_threads: outcome.threads,
            prefault_method: outcome.method,
            setup_seconds,
            prefault_seconds,
            prefault_gbps: prefault::gbps(plan.size_bytes, prefault_seconds),
            ready_seconds: setup_seconds + prefault_seconds,
            verified_page_size_bytes: v.page_size_bytes,
            resident_bytes: v.resident_bytes,
            thp_bytes: v.thp_bytes,
            mlocked: self.mlock,
            shmid: region.shmid(),
            sysv_key: region.sysv_key(),
            path: region.path().map(|p| p.display().to_string()),
            pid: std::process::id(),
            address: region.addr() as u64,
        };
        Ok((region, report))
    }

    /// Creates the object and maps it, per the plan. Cleans up after itself
    /// on error.
    fn materialize(
        &self,
        plan: &Plan,
        method: PrefaultMethod,
        host: &hugeshm_probe::HostSnapshot,
    ) -> Result<Region, RegionError> {
        let size = plan.size_bytes;
        let len = size as usize;
        let huge = (plan.backing == Backing::Hugetlb).then_some(plan.page_size);
        let mk = |mem: Mem, object: Object| Region {
            mem,
            object,
            backend: self.backend,
            name: self.name.clone(),
            page_size: plan.page_size,
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
                    Some(libc::EEXIST) => RegionError::AlreadyExists {
                        name: self.name.clone().unwrap_or_default(),
                        backend: Backend::Sysv,
                        object: format!("SysV key {:#010x}", key as u32),
                    },
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
                let att = sys::shm_attach(shmid)?;
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
                sys::set_len(fd.as_fd(), size)?;
                let map = sys::mmap_fd(fd.as_fd(), len, 0)
                    .map_err(|e| map_reserve_error(e, huge, plan))?;
                Ok(mk(Mem::Map(map), Object::Memfd { fd }))
            }
            Backend::Anon => {
                let map = sys::mmap_anon(len, true, huge)
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
                let file_name = match &self.name {
                    Some(n) => object_file_name(n),
                    None => temp_file_name(),
                };
                let path = dir.join(file_name);
                let fd = rustix::fs::open(
                    &path,
                    OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
                    Mode::from_bits_truncate(self.mode),
                )
                .map_err(|e| match e {
                    rustix::io::Errno::EXIST => RegionError::AlreadyExists {
                        name: self.name.clone().unwrap_or_default(),
                        backend: self.backend,
                        object: path.display().to_string(),
                    },
                    rustix::io::Errno::ACCESS | rustix::io::Errno::PERM => {
                        RegionError::Permission {
                            what: format!("create {}", path.display()),
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
                                call: format!("open({}, O_CREAT|O_EXCL)", path.display()),
                                errno: e.raw_os_error(),
                            }),
                        }
                    }
                    e => RegionError::io(path.display().to_string(), e.into()),
                })?;
                let undo = UndoUnlink(Some(path.clone()));
                rustix::fs::fchmod(&fd, Mode::from_bits_truncate(self.mode))
                    .map_err(|e| RegionError::io(path.display().to_string(), e.into()))?;
                sys::set_len(fd.as_fd(), size)?;
                let map = if fstype == "hugetlbfs" {
                    sys::mmap_fd(fd.as_fd(), len, 0)
                        .map_err(|e| map_reserve_error(e, huge, plan))?
                } else {
                    let advise_only = plan.backing == Backing::Thp(ThpMode::Advise)
                        && method != PrefaultMethod::None;
                    if !advise_only {
                        // Blocks now, so a full tmpfs is ENOSPC here, not
                        // SIGBUS on first touch. (With huge=advise fallocate
                        // would allocate base pages; those regions are filled
                        // by MADV_POPULATE_WRITE after MADV_HUGEPAGE, which
                        // fails with an error rather than SIGBUS.)
                        sys::fallocate(fd.as_fd(), size).map_err(|e| match e.errno() {
                            Some(libc::ENOSPC) => {
                                let free = fs_free_bytes(&dir).ok().flatten().unwrap_or(0);
                                no_space(&path, &fstype, size, free)
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
                let linked = self.name.is_some();
                if !linked {
                    std::fs::remove_file(&path)
                        .map_err(|e| RegionError::io(path.display().to_string(), e))?;
                }
                undo.disarm();
                Ok(mk(Mem::Map(map), Object::File { path, fd, linked }))
            }
        }
    }
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

/// The kernel object behind a region.
#[derive(Debug)]
enum Object {
    Sysv {
        shmid: i32,
        key: i32,
        removed: bool,
    },
    File {
        path: PathBuf,
        fd: OwnedFd,
        linked: bool,
    },
    Memfd {
        fd: OwnedFd,
    },
    Anon,
}

/// A mapped shared memory region.
///
/// Owns its mapping (and its fd or SysV attachment) and unmaps it on drop,
/// printing a failed unmap on stderr ([`Region::close`] returns it instead).
/// Dropping never removes a named object (`sysv`, `hugetlbfs`, `posix`):
/// it stays for other processes until [`Region::destroy`] or [`remove`](crate::remove).
/// Anonymous regions (no name, `memfd`, `anon`) vanish with their last
/// mapping.
///
/// The memory may be shared with other processes, which can write to it at
/// any time, so `Region` hands out no `&[u8]`: use the raw pointer, or the
/// copying [`Region::read_at`] / [`Region::write_at`].
#[derive(Debug)]
pub struct Region {
    // Declared first: unmapped before the fd closes.
    mem: Mem,
    object: Object,
    backend: Backend,
    name: Option<String>,
    page_size: u64,
}

impl Region {
    /// Attaches an existing named region (`sysv` by key, `hugetlbfs` and
    /// `posix` by path). `memfd` and `anon` regions have no name another
    /// process can use: see [`Region::attach_path`] and `fork`.
    pub fn attach(name: &str, backend: Backend) -> Result<Region, RegionError> {
        crate::locate::Locator::new(name, backend).attach()
    }

    /// Attaches a SysV segment by shmid.
    pub fn attach_shmid(shmid: i32) -> Result<Region, RegionError> {
        let stat = sys::shm_stat(shmid)?;
        let att = sys::shm_attach(shmid)?;
        let mut region = Region {
            mem: Mem::Shm(att),
            object: Object::Sysv {
                shmid,
                key: stat.key,
                removed: stat.marked_for_removal(),
            },
            backend: Backend::Sysv,
            name: None,
            page_size: sys::base_page_size() as u64,
        };
        region.page_size = region.verify()?.kernel_page_size_bytes;
        Ok(region)
    }

    /// Attaches a region file by path: a hugetlbfs or tmpfs file, or a
    /// memfd through `/proc/PID/fd/N` of a process that holds it.
    pub fn attach_path(path: impl AsRef<Path>) -> Result<Region, RegionError> {
        let path = path.as_ref();
        let fd = rustix::fs::open(path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| RegionError::io(path.display().to_string(), e.into()))?;
        let st = rustix::fs::fstat(&fd)
            .map_err(|e| RegionError::io(path.display().to_string(), e.into()))?;
        let size = st.st_size as u64;
        if size == 0 {
            return Err(RegionError::Unsupported(format!(
                "{}: empty file, not a region",
                path.display()
            )));
        }
        let len = usize::try_from(size).map_err(|_| RegionError::InvalidSize {
            requested_bytes: size,
            reason: "does not fit in usize".to_owned(),
        })?;
        let hugetlb_page = sys::hugetlbfs_page_size(fd.as_fd());
        let map = sys::mmap_fd(fd.as_fd(), len, 0)?;
        let via_proc = path.starts_with("/proc") && path.to_string_lossy().contains("/fd/");
        let backend = if via_proc {
            Backend::Memfd
        } else if hugetlb_page.is_some() {
            Backend::Hugetlbfs
        } else {
            Backend::Posix
        };
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix(crate::naming::OBJECT_PREFIX))
            .filter(|_| !via_proc)
            .map(str::to_owned);
        let object = if via_proc {
            Object::Memfd { fd }
        } else {
            Object::File {
                path: path.to_owned(),
                fd,
                linked: true,
            }
        };
        Ok(Region {
            page_size: map.page_size() as u64,
            mem: Mem::Map(map),
            object,
            backend,
            name,
        })
    }

    /// Relabels an attached region (the locator knows name and backend).
    pub(crate) fn labelled(mut self, name: &str, backend: Backend) -> Region {
        self.name = Some(name.to_owned());
        self.backend = backend;
        self
    }

    /// Start address. Accessing memory through it is the caller's
    /// responsibility (`unsafe`); it is valid until the region is dropped.
    pub fn as_ptr(&self) -> *mut u8 {
        self.mem.ptr()
    }

    /// Start address as an integer.
    pub fn addr(&self) -> usize {
        self.mem.ptr() as usize
    }

    /// Mapped length in bytes (a multiple of the page size).
    pub fn len(&self) -> usize {
        self.mem.len()
    }

    /// Always false: regions are never empty.
    pub fn is_empty(&self) -> bool {
        self.mem.len() == 0
    }

    /// The page size the region was created (or, attached, found) with.
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
            Object::Memfd { fd } => Some(PathBuf::from(format!(
                "/proc/{}/fd/{}",
                std::process::id(),
                fd.as_raw_fd()
            ))),
            _ => None,
        }
    }

    /// The file descriptor of file and memfd regions (to pass to a child).
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        match &self.object {
            Object::File { fd, .. } | Object::Memfd { fd } => Some(fd.as_fd()),
            _ => None,
        }
    }

    /// Copies `buf.len()` bytes at `offset` out of the region.
    pub fn read_at(&self, offset: usize, buf: &mut [u8]) -> Result<(), RegionError> {
        Ok(match &self.mem {
            Mem::Map(m) => m.read_at(offset, buf),
            Mem::Shm(a) => a.read_at(offset, buf),
        }?)
    }

    /// Copies `data` into the region at `offset`.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<(), RegionError> {
        Ok(match &mut self.mem {
            Mem::Map(m) => m.write_at(offset, data),
            Mem::Shm(a) => a.write_at(offset, data),
        }?)
    }

    /// Sets every byte to `byte`.
    pub fn fill(&mut self, byte: u8) {
        match &mut self.mem {
            Mem::Map(m) => m.fill(byte),
            Mem::Shm(a) => a.fill(byte),
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

    /// Removes the named object (SysV `IPC_RMID`, unlinks the file) and
    /// unmaps. Other processes that have it mapped keep their mapping; the
    /// memory is freed when the last one goes. An object someone else
    /// removed already is not an error.
    pub fn destroy(self) -> Result<(), RegionError> {
        let Region { mem, object, .. } = self;
        let mut first_err: Option<RegionError> = None;
        match &object {
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
                if let Err(e) = std::fs::remove_file(path) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        first_err = Some(RegionError::io(path.display().to_string(), e));
                    }
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

    /// Unmaps now (keeping any named object), returning a failed unmap
    /// instead of printing it.
    pub fn close(self) -> Result<(), RegionError> {
        let Region { mem, object, .. } = self;
        let r = mem.release();
        drop(object);
        Ok(r?)
    }
}
