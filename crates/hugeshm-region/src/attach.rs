//! Finding named regions again: [`Locator`] (where a region lives, what an
//! attacher expects of it, which host to read), the header checks an
//! attach makes, and inspect / attach / remove by name.
//!
//! An attach is three steps: the backend finds and opens the
//! object and reads its header bytes; this module checks them against
//! the object and the expectations; the backend maps the object, and the
//! pages the kernel serves are checked against the header.

use std::path::{Path, PathBuf};
use std::time::Instant;

use hugeshm_parse::size::format_bytes;
use hugeshm_probe::Probe;

use crate::backend::{self, Inspected, Opened, Place};
use crate::error::RegionError;
use crate::handle::Region;
use crate::header::{self, Decoded, HeaderState, RegionHeader, HEADER_BYTES};
use crate::holders::Holders;
use crate::inspect::RegionInfo;
use crate::model::{Backend, Expect, NamedObject, RegionState, Trust};
use crate::naming::{sysv_key, validate_name};
use crate::report::AttachReport;

/// Where a named region lives, what an attacher expects of it, and the
/// host reader (`/proc` and `/sys` roots; the live host by default).
///
/// ```no_run
/// use hugeshm_region::{Backend, Locator};
/// # fn main() -> Result<(), hugeshm_region::RegionError> {
/// // Attach from any process; refuse unless it is 1 GiB on 2 MiB pages.
/// let (region, report) = Locator::new("sga", Backend::Sysv)
///     .expect_size(1 << 30)
///     .expect_page_size(2 << 20)
///     .attach_with_report()?;
/// println!("created by pid {} at {:#x}", report.header.creator_pid, report.address);
/// region.close()?;
/// // Remove it once nobody holds it.
/// for obj in Locator::new("sga", Backend::Sysv).remove()? {
///     println!("removed {obj}");
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Locator {
    pub(crate) name: String,
    pub(crate) backend: Backend,
    pub(crate) directory: Option<PathBuf>,
    expect_size: Option<u64>,
    expect_page_size: Option<u64>,
    pmd_sharing: bool,
    probe: Probe,
    owner: Option<u32>,
    mode: u32,
}

impl Locator {
    /// The region `name` of `backend`.
    pub fn new(name: &str, backend: Backend) -> Self {
        Locator {
            name: name.to_owned(),
            backend,
            directory: None,
            expect_size: None,
            expect_page_size: None,
            pmd_sharing: true,
            probe: Probe::default(),
            owner: None,
            mode: 0o600,
        }
    }

    /// Accept a region owned by `uid` (default: this process's effective
    /// uid; root's is accepted too, as root may write anything anyway).
    /// Attach, inspect and remove refuse an object another user owns
    /// ([`RegionError::Untrusted`]): its header proves nothing. A SysV
    /// segment is its creator's (`cuid`) where a user other than root
    /// created it. [`list_regions_on`](crate::list_regions_on) takes the
    /// same uid to read that user's headers.
    pub fn owner(mut self, uid: u32) -> Self {
        self.owner = Some(uid);
        self
    }

    /// Accept write access for group or others as far as `mode` grants it
    /// (default 0600: an object that group or others may write is
    /// refused, [`RegionError::Untrusted`]).
    pub fn mode(mut self, mode: u32) -> Self {
        self.mode = mode;
        self
    }

    fn trust(&self) -> Trust {
        Trust {
            uid: self
                .owner
                .unwrap_or_else(|| rustix::process::geteuid().as_raw()),
            mode: self.mode,
        }
    }

    /// Refuses what this locator does not trust.
    pub(crate) fn check_trust(&self, info: &RegionInfo) -> Result<(), RegionError> {
        match info.owner {
            Some(owner) => RegionError::check_trust(
                &self.trust(),
                owner,
                &info.object.to_string(),
                &self.name,
                self.backend,
            ),
            None => Ok(()),
        }
    }

    /// Reads the host through `probe` (its `/proc` and `/sys` roots): the
    /// mounts searched for files, the processes scanned for holders.
    pub fn probe(mut self, probe: Probe) -> Self {
        self.probe = probe;
        self
    }

    /// Looks only in this directory (file backends), or on this
    /// device-dax (`dax`), as the builder's
    /// [`directory`](crate::RegionBuilder::directory).
    pub fn directory(mut self, dir: impl Into<PathBuf>) -> Self {
        self.directory = Some(dir.into());
        self
    }

    /// Attach refuses a region whose size differs (the size it was created
    /// with, or the size asked for then, or that rounded up to its page
    /// size): [`RegionError::HeaderMismatch`] with both numbers.
    pub fn expect_size(mut self, bytes: u64) -> Self {
        self.expect_size = Some(bytes);
        self
    }

    /// Attach refuses a region on other pages.
    pub fn expect_page_size(mut self, bytes: u64) -> Self {
        self.expect_page_size = Some(bytes);
        self
    }

    /// Map hugetlb regions of 1 GiB or more at a 1 GiB-aligned address so
    /// page tables are shared (default true; see
    /// [`hugeshm_sys::PMD_SHARE_ALIGN`]).
    pub fn pmd_sharing(mut self, on: bool) -> Self {
        self.pmd_sharing = on;
        self
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The backend.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub(crate) fn expectations(&self) -> Expect {
        Expect {
            name: Some(self.name.clone()),
            backend: Some(self.backend),
            size: self.expect_size,
            page_size: self.expect_page_size,
            pmd_sharing: self.pmd_sharing,
            trust: self.trust(),
        }
    }

    fn place(&self) -> Place<'_> {
        Place {
            name: &self.name,
            backend: self.backend,
            directory: self.directory.as_deref(),
            pmd_sharing: self.pmd_sharing,
            trust: self.trust(),
        }
    }

    pub(crate) fn not_found(&self) -> RegionError {
        RegionError::NotFound {
            name: self.name.clone(),
            backend: self.backend,
            looked: backend::ops(self.backend).looked(&self.place(), &self.probe),
        }
    }

    /// Every object that carries the name (more than one only when files
    /// of the name sit on several hugetlbfs mounts), inspected.
    pub(crate) fn inspect_all(&self, holders: &Holders<'_>) -> Result<Vec<Inspected>, RegionError> {
        validate_name(&self.name)?;
        backend::ops(self.backend).inspect(&self.place(), holders)
    }

    /// A scan of holders over this locator's host.
    pub(crate) fn holders(&self) -> Holders<'_> {
        Holders::lazy(&self.probe)
    }

    /// The region as found (state, header, holders) without attaching it
    /// read-write; [`RegionError::NotFound`] if there is none.
    /// Refuses ([`RegionError::Untrusted`]) an object this locator does
    /// not trust ([`owner`](Locator::owner), [`mode`](Locator::mode)).
    pub fn inspect(&self) -> Result<RegionInfo, RegionError> {
        let info = self
            .inspect_all(&self.holders())?
            .into_iter()
            .next()
            .map(|i| i.info)
            .ok_or_else(|| self.not_found())?;
        self.check_trust(&info)?;
        Ok(info)
    }

    /// The objects holding the region.
    pub fn locate(&self) -> Result<Vec<NamedObject>, RegionError> {
        let found: Vec<NamedObject> = self
            .inspect_all(&self.holders())?
            .into_iter()
            .map(|i| i.info.object)
            .collect();
        if found.is_empty() {
            return Err(self.not_found());
        }
        Ok(found)
    }

    /// Pids that have `obj` mapped (from every `/proc/PID/maps`; processes
    /// in other pid namespaces are not visible).
    pub fn attached_pids(&self, obj: &NamedObject) -> Result<Vec<u32>, RegionError> {
        let holders = self.holders();
        Ok(match obj {
            NamedObject::Sysv { shmid, .. } => holders.shm(*shmid),
            NamedObject::File { path, .. } => {
                use std::os::unix::fs::MetadataExt;
                let md = std::fs::metadata(path).map_err(|e| RegionError::io(path, e))?;
                holders.file(
                    (
                        hugeshm_probe::dev_major(md.dev()),
                        hugeshm_probe::dev_minor(md.dev()),
                    ),
                    md.ino(),
                )
            }
            NamedObject::Memfd { .. } => {
                self.inspect_all(&holders)?
                    .into_iter()
                    .next()
                    .ok_or_else(|| self.not_found())?
                    .info
                    .holders
            }
        })
    }

    /// Attaches the region read-write: finds it, checks its header (magic,
    /// layout version, state `ready`, name, backend, size and page size
    /// against the object and against the expectations) and maps it (1
    /// GiB-aligned for page-table sharing when it is hugetlb and 1 GiB or
    /// more).
    pub fn attach(&self) -> Result<Region, RegionError> {
        validate_name(&self.name)?;
        let ops = backend::ops(self.backend);
        let holders = self.holders();
        let exp = self.expectations();
        let opened = ops
            .open(&self.place(), &holders)?
            .ok_or_else(|| self.not_found())?;
        finish(opened, self.backend, &exp)
    }

    /// [`attach`](Locator::attach), then what it found: header, the page
    /// size `/proc/self/smaps` shows, the processes attached, the address
    /// and whether it can share page tables.
    pub fn attach_with_report(&self) -> Result<(Region, AttachReport), RegionError> {
        let t0 = Instant::now();
        let region = self.attach()?;
        let attach_seconds = t0.elapsed().as_secs_f64();
        let v = region.verify_with(crate::verify::pmd_size(&self.probe))?;
        let holders = self.holders();
        let (holders_list, nattch) = match region.shmid() {
            Some(id) => (
                holders.shm(id),
                hugeshm_sys::shm_stat(id).ok().map(|s| s.nattch),
            ),
            None => match region.dev_ino() {
                Some((dev, ino)) => (holders.file(dev, ino), None),
                None => (vec![std::process::id()], None),
            },
        };
        let h = region.header().clone();
        let report = AttachReport {
            name: region.name().map(str::to_owned),
            backend: region.backend(),
            object: region.object_text(),
            creator: h.creator_liveness(),
            size_bytes: region.len() as u64,
            data_offset: region.data_offset() as u64,
            data_bytes: region.data_len() as u64,
            page_size_bytes: h.page_size_bytes,
            verified_page_size_bytes: v.page_size_bytes,
            hugetlb: v.hugetlb,
            resident_bytes: v.resident_bytes,
            region_allocated_bytes: region.allocated_bytes(),
            holders: holders_list,
            nattch,
            pid: std::process::id(),
            address: region.addr() as u64,
            aligned_for_pmd_sharing: region.aligned_for_pmd_sharing(),
            pmd_shareable_bytes: region.pmd_shareable_bytes(),
            attach_seconds,
            shmid: region.shmid(),
            sysv_key: region.sysv_key(),
            path: region.path().map(|p| p.display().to_string()),
            state: RegionState::Ready,
            header: h,
        };
        Ok((region, report))
    }

    /// Removes the region, refusing while any process holds it (SysV
    /// `nattch`, a file's lock or any `/proc/PID/maps` mapping it, a memfd's
    /// holders), naming the pids, and refusing objects that are not
    /// hugeshm regions. A memfd region's record is removed once nobody
    /// holds the memfd (the memory is already gone then). Returns what was
    /// removed.
    pub fn remove(&self) -> Result<Vec<NamedObject>, RegionError> {
        let holders = self.holders();
        let found = self.inspect_all(&holders)?;
        if found.is_empty() {
            return Err(self.not_found());
        }
        self.check_removable(&found)?;
        let mut removed = Vec::new();
        for i in found {
            let obj = i.info.object.clone();
            backend::remove_unheld(i)?;
            removed.push(obj);
        }
        Ok(removed)
    }

    /// Whether the region exists and [`remove`](Locator::remove) would
    /// remove it now; the error `remove` would give when it would not.
    pub(crate) fn remove_check(&self) -> Result<bool, RegionError> {
        let found = self.inspect_all(&self.holders())?;
        self.check_removable(&found)?;
        Ok(!found.is_empty())
    }

    /// Refuses foreign, damaged, untrusted and held objects.
    fn check_removable(&self, found: &[Inspected]) -> Result<(), RegionError> {
        for i in found {
            let info = &i.info;
            self.check_trust(info)?;
            match info.state {
                RegionState::Foreign | RegionState::Damaged | RegionState::Collision => {
                    return Err(RegionError::NotOurs {
                        object: info.object.to_string(),
                        reason: info.detail.clone().unwrap_or_default(),
                    })
                }
                _ if info.held => {
                    return Err(RegionError::InUse {
                        name: self.name.clone(),
                        backend: self.backend,
                        object: info.object.to_string(),
                        pids: info.holders.clone(),
                        nattch: info.nattch,
                    })
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// This locator for another name (a per-node part).
    pub(crate) fn renamed(&self, name: &str) -> Locator {
        Locator {
            name: name.to_owned(),
            expect_size: None,
            expect_page_size: None,
            ..self.clone()
        }
    }

    /// The probe it reads the host with.
    pub(crate) fn probe_ref(&self) -> &Probe {
        &self.probe
    }
}

/// Removes the named region `name` of `backend` (default locations, the
/// live host), refusing while processes hold it; see [`Locator::remove`].
pub fn remove(name: &str, backend: Backend) -> Result<Vec<NamedObject>, RegionError> {
    Locator::new(name, backend).remove()
}

impl Region {
    /// Attaches an existing named region from any process: `sysv` by key,
    /// `hugetlbfs` and `posix` by path, `memfd` through its record. The
    /// header is checked; see [`Locator::attach`] (which also takes
    /// expectations and the host reader).
    pub fn attach(name: &str, backend: Backend) -> Result<Region, RegionError> {
        Locator::new(name, backend).attach()
    }

    /// Attaches a SysV segment by shmid (e.g. an anonymous region's, in a
    /// child). The header is checked.
    pub fn attach_shmid(shmid: i32) -> Result<Region, RegionError> {
        let exp = Expect::default();
        let opened = backend::sysv::open_shmid(shmid, None, true, &exp.trust)?;
        finish(opened, Backend::Sysv, &exp)
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
        let opened = backend::file::open_path(path, "", backend, &Probe::default())?;
        finish(opened, backend, &Expect::default())
    }
}

/// Checks an opened object's header, maps it and checks the pages the
/// kernel serves against the header.
pub(crate) fn finish(
    opened: Opened,
    backend: Backend,
    exp: &Expect,
) -> Result<Region, RegionError> {
    RegionError::check_trust(
        &exp.trust,
        opened.owner,
        &opened.object_text,
        exp.name.as_deref().unwrap_or_default(),
        exp.backend.unwrap_or(backend),
    )?;
    let h = check_header(&opened, exp, backend)?;
    let object = opened.object_text.clone();
    let (made, hugetlb_page) = backend::ops(backend).map(opened, exp)?;
    check_kernel_pages(&h, &object, hugetlb_page)?;
    Ok(Region::from_parts(made, h))
}

fn round_up(v: u64, page: u64) -> u64 {
    v.div_ceil(page.max(1)) * page.max(1)
}

/// `N bytes (X MiB)`, for mismatch messages.
pub(crate) fn bytes_text(b: u64) -> String {
    format!("{b} bytes ({})", format_bytes(b))
}

/// Whether a size asked for fits a region's header: the size it has, the
/// size asked for then, or that rounded up to its page size.
pub(crate) fn size_matches(asked: u64, h: &RegionHeader) -> bool {
    asked == h.size_bytes
        || asked == h.requested_bytes
        || round_up(asked.max(HEADER_BYTES + 1), h.page_size_bytes) == h.size_bytes
}

/// Checks an opened object's header bytes against what the object is and
/// what the caller expects.
fn check_header(
    opened: &Opened,
    exp: &Expect,
    backend: Backend,
) -> Result<RegionHeader, RegionError> {
    let object = opened.object_text.as_str();
    let name = exp.name.clone().unwrap_or_default();
    let backend = exp.backend.unwrap_or(backend);
    match header::decode(&opened.head) {
        Decoded::Unwritten => {
            let (pid, live) = opened.creator;
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
            if let Some(g) = opened.generation {
                if h.generation != g {
                    return Err(RegionError::NotOurs {
                        object: object.to_owned(),
                        reason: format!(
                            "its header has generation {:016x}, the record {g:016x}: another region",
                            h.generation
                        ),
                    });
                }
            }
            let mismatch = |field: &str, expected: String, found: String| {
                Err(RegionError::HeaderMismatch {
                    object: object.to_owned(),
                    field: field.to_owned(),
                    expected,
                    found,
                })
            };
            if h.size_bytes != opened.size {
                return mismatch(
                    "size (header against the object)",
                    bytes_text(h.size_bytes),
                    bytes_text(opened.size),
                );
            }
            if let Some(b) = exp.backend {
                if h.backend != b {
                    return mismatch("backend", b.to_string(), h.backend.to_string());
                }
            }
            if let Some(s) = exp.size {
                if !size_matches(s, &h) {
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
