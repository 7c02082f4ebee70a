//! System V shared memory: `shmget`, `shmctl`, `shmat` and `shmdt`.

use std::ffi::c_void;
use std::fmt;

use hugeshm_parse::size::format_exact;
use rustix::mm::Advice;

use crate::mm::{placed, vma, Mapping};
use crate::page::{base_page_size, huge_page_log2, round_up, HUGE_SHIFT};
use crate::SysError;

/// Flags for [`shm_get`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShmFlags {
    /// `IPC_CREAT`: create the segment if the key has none.
    pub create: bool,
    /// `IPC_EXCL`: with `create`, fail with `EEXIST` if it already exists.
    pub exclusive: bool,
    /// `SHM_HUGETLB` with this page size (in the `SHM_HUGE_SHIFT` bits).
    pub huge_page_size: Option<u64>,
    /// Permission bits (`0o600` by default); only the low 9 bits are used.
    pub mode: u32,
}

impl Default for ShmFlags {
    fn default() -> Self {
        ShmFlags {
            create: false,
            exclusive: false,
            huge_page_size: None,
            mode: 0o600,
        }
    }
}

impl ShmFlags {
    /// Flags that create a new segment (`IPC_CREAT|IPC_EXCL`, mode 0600),
    /// with huge pages of the given size when `Some`.
    pub fn create_new(huge_page_size: Option<u64>) -> Self {
        ShmFlags {
            create: true,
            exclusive: true,
            huge_page_size,
            mode: 0o600,
        }
    }
}

impl fmt::Display for ShmFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.create {
            f.write_str("IPC_CREAT|")?;
        }
        if self.exclusive {
            f.write_str("IPC_EXCL|")?;
        }
        if let Some(h) = self.huge_page_size {
            write!(f, "SHM_HUGETLB|{}|", format_exact(h))?;
        }
        write!(f, "{:04o}", self.mode & 0o777)
    }
}

fn format_key(key: i32) -> String {
    if key == IPC_PRIVATE {
        "IPC_PRIVATE".to_owned()
    } else {
        format!("{:#x}", key as u32)
    }
}

/// `shmget(key, size, flags)`: returns the shmid of a System V segment.
///
/// Use [`IPC_PRIVATE`] as the key for a fresh anonymous segment. With
/// `huge_page_size`, huge pages are reserved at this call (no
/// `SHM_NORESERVE`), so an exhausted pool fails here with `ENOMEM`; the
/// kernel rounds the backing up to the huge page size.
pub fn shm_get(key: i32, size: u64, flags: ShmFlags) -> Result<i32, SysError> {
    let call = || format!("shmget(key={}, size={size}, {flags})", format_key(key));
    let size_t = usize::try_from(size)
        .map_err(|_| SysError::invalid(call(), "size does not fit in size_t"))?;
    let mut shmflg = (flags.mode & 0o777) as i32;
    if flags.create {
        shmflg |= libc::IPC_CREAT;
    }
    if flags.exclusive {
        shmflg |= libc::IPC_EXCL;
    }
    if let Some(h) = flags.huge_page_size {
        let log2 = huge_page_log2(&call(), h)?;
        shmflg |= libc::SHM_HUGETLB | ((log2 as i32) << HUGE_SHIFT);
    }
    // SAFETY: shmget takes only integer arguments and touches no memory of
    // this process.
    let id = unsafe { libc::shmget(key, size_t, shmflg) };
    if id < 0 {
        return Err(SysError::last_os(call()));
    }
    Ok(id)
}

/// `shmctl(shmid, IPC_RMID)`: marks the segment for removal; it is destroyed
/// once the last attachment is gone (immediately when nattch is 0).
pub fn shm_remove(shmid: i32) -> Result<(), SysError> {
    // SAFETY: IPC_RMID ignores the buffer argument, so null is valid.
    let rc = unsafe { libc::shmctl(shmid, libc::IPC_RMID, std::ptr::null_mut()) };
    if rc < 0 {
        return Err(SysError::last_os(format!(
            "shmctl(shmid={shmid}, IPC_RMID)"
        )));
    }
    Ok(())
}

/// What `shmctl(IPC_STAT)` says about a System V segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ShmStat {
    /// The key it was created with (0 for `IPC_PRIVATE` or after `IPC_RMID`).
    pub key: i32,
    /// Size in bytes as requested at creation (`shm_segsz`).
    pub size: u64,
    /// Number of current attachments.
    pub nattch: u64,
    /// Pid of the creator.
    pub cpid: i32,
    /// Pid of the last `shmat`/`shmdt`.
    pub lpid: i32,
    /// Owner uid.
    pub uid: u32,
    /// Owner gid.
    pub gid: u32,
    /// Creator uid (`shm_perm.cuid`): keeps the owner's rights whoever
    /// the segment is given to (`IPC_SET`).
    pub cuid: u32,
    /// Permission bits plus [`SHM_DEST`] / [`SHM_LOCKED`].
    pub mode: u32,
    /// Time of the last `shmat` (seconds since the epoch, 0: never).
    pub atime: i64,
    /// Time of the last `shmdt` (0: never).
    pub dtime: i64,
}

impl ShmStat {
    /// True when `IPC_RMID` was done but attachments remain (`SHM_DEST`).
    pub fn marked_for_removal(&self) -> bool {
        self.mode & SHM_DEST != 0
    }
}

/// `shmctl(shmid, IPC_STAT)`.
pub fn shm_stat(shmid: i32) -> Result<ShmStat, SysError> {
    let mut ds = std::mem::MaybeUninit::<libc::shmid_ds>::zeroed();
    // SAFETY: ds points to a properly sized and aligned shmid_ds the kernel
    // fills in.
    let rc = unsafe { libc::shmctl(shmid, libc::IPC_STAT, ds.as_mut_ptr()) };
    if rc < 0 {
        return Err(SysError::last_os(format!(
            "shmctl(shmid={shmid}, IPC_STAT)"
        )));
    }
    // SAFETY: IPC_STAT succeeded and filled the struct; it was zeroed before
    // (all-zero is a valid shmid_ds), so padding is initialized too.
    let ds = unsafe { ds.assume_init() };
    #[cfg(target_env = "musl")]
    let key = ds.shm_perm.__ipc_perm_key;
    #[cfg(not(target_env = "musl"))]
    let key = ds.shm_perm.__key;
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    Ok(ShmStat {
        key: key as i32,
        size: ds.shm_segsz as u64,
        nattch: ds.shm_nattch as u64,
        cpid: ds.shm_cpid as i32,
        lpid: ds.shm_lpid as i32,
        uid: ds.shm_perm.uid as u32,
        gid: ds.shm_perm.gid as u32,
        cuid: ds.shm_perm.cuid as u32,
        mode: u32::from(ds.shm_perm.mode),
        atime: ds.shm_atime as i64,
        dtime: ds.shm_dtime as i64,
    })
}

/// `shmat(shmid, NULL, 0)`: attaches a segment read-write at an address
/// chosen by the kernel; the [`Mapping`] detaches (`shmdt`) when released,
/// which does not remove the segment ([`shm_remove`] does).
///
/// Its [`len`](Mapping::len) and [`page_size`](Mapping::page_size) are
/// what the kernel mapped, read back from the mapping (see
/// [`shm_attach_placed`]): the segment size rounded up to the segment's
/// page size, and that page size (the huge page size of a `SHM_HUGETLB`
/// segment).
pub fn shm_attach(shmid: i32) -> Result<Mapping, SysError> {
    shm_attach_placed(shmid, None)
}

/// [`shm_attach`] at an address that is a multiple of `align` (a power of
/// two, e.g. [`PMD_SHARE_ALIGN`](crate::PMD_SHARE_ALIGN)); `None` lets the
/// kernel choose.
///
/// Neither `IPC_STAT` nor `/proc/sysvipc/shm` says a segment's page size,
/// and `shmat` maps the segment rounded up to it (a segment of 1 GiB pages
/// and 1 GiB + 4 KiB maps 2 GiB). So the segment is first attached where
/// the kernel chooses, which sizes the mapping itself, and that mapping is
/// read back (`PROCMAP_QUERY`, else `/proc/self/smaps`): its length `L`
/// and page size `P`, checked against the segment size. When its address
/// is a multiple of `align` (always when `align <= P`), that attachment is
/// the result. Otherwise `align` is a multiple of `P`, and the segment is
/// attached again with `SHM_REMAP` at the first multiple of `align` inside
/// a fresh reservation of `L + align` bytes, which holds all `L` bytes;
/// the first attachment is then detached. It keeps the segment, and so its
/// size and page size, alive in between: a shmid names one segment for as
/// long as it exists.
pub fn shm_attach_placed(shmid: i32, align: Option<usize>) -> Result<Mapping, SysError> {
    let stat = shm_stat(shmid)?;
    let call = || {
        format!(
            "shmat(shmid={shmid}, size={}{})",
            stat.size,
            match align {
                Some(a) => format!(", SHM_REMAP at a multiple of {}", format_exact(a as u64)),
                None => String::new(),
            }
        )
    };
    if let Some(a) = align.filter(|a| !a.is_power_of_two()) {
        return Err(SysError::invalid(
            call(),
            format!("alignment {a} is not a power of two"),
        ));
    }
    // SAFETY: a null address lets the kernel choose a fresh range of the
    // size it decides; the attachment is owned by `first` from here on.
    let p = unsafe { libc::shmat(shmid, std::ptr::null(), 0) };
    if p as isize == -1 {
        return Err(SysError::last_os(call()));
    }
    let mut first = attachment(shmid, p, base_page_size(), base_page_size(), &call)?;
    // On an error `first` drops: detached.
    let (len, page) =
        attached_extent(&first, stat.size).map_err(|e| SysError::invalid(call(), e))?;
    first.set_extent(len, page);
    let a = match align {
        Some(a) if first.addr() % a != 0 => a,
        _ => return Ok(first),
    };
    // The kernel's address is a multiple of `page` (a power of two), so
    // `a` is a larger power of two: a multiple of it, as `placed` checks.
    let ptr = placed(&call, len, page, Some(a), |at| {
        // `placed` only lets the kernel choose for an alignment it gives
        // anyway, which `first` would have had.
        let at = at.ok_or_else(|| SysError::invalid(call(), "no address to place it at"))?;
        // SAFETY: SHM_REMAP onto this call's own PROT_NONE reservation,
        // which `placed` made `len + a` bytes long for the `len` bytes the
        // kernel maps of this segment (read back from `first` above, which
        // keeps the segment alive); the result is owned by the attachment.
        let p = unsafe { libc::shmat(shmid, at as *const c_void, libc::SHM_REMAP) };
        if p as isize == -1 {
            return Err(SysError::last_os(call()));
        }
        Ok(p)
    })?;
    let placed = attachment(shmid, ptr.as_ptr().cast(), len, page, &call)?;
    match attached_extent(&placed, stat.size) {
        Ok(extent) if extent == (len, page) => {}
        Ok((l, p)) => {
            return Err(SysError::invalid(
                call(),
                format!(
                    "mapped {l} bytes of {} pages at {:#x}, the first attachment {len} bytes \
                     of {} pages",
                    format_exact(p as u64),
                    placed.addr(),
                    format_exact(page as u64)
                ),
            ))
        }
        Err(e) => return Err(SysError::invalid(call(), e)),
    }
    first.release()?;
    Ok(placed)
}

/// The attachment at `p` (as `shmat` returned it) as a [`Mapping`] that
/// detaches it when dropped.
fn attachment(
    shmid: i32,
    p: *mut c_void,
    len: usize,
    page_size: usize,
    call: &dyn Fn() -> String,
) -> Result<Mapping, SysError> {
    let ptr = std::ptr::NonNull::new(p.cast::<u8>())
        .ok_or_else(|| SysError::invalid(call(), "kernel returned address 0"))?;
    Ok(Mapping::shm_attachment(ptr, len, page_size, shmid))
}

/// The length and page size of the mapping that starts at `m`'s address,
/// read back from the kernel, checked to be the segment of `size` bytes
/// rounded up to that page size (what `shmat` maps).
fn attached_extent(m: &Mapping, size: u64) -> Result<(usize, usize), String> {
    let addr = m.addr();
    let (start, end, page) = vma::of_own(addr as u64)?;
    let extent = end.checked_sub(start).map(usize::try_from);
    let (len, page) = match (extent, usize::try_from(page)) {
        (Some(Ok(l)), Ok(p)) if start == addr as u64 && p.is_power_of_two() => (l, p),
        _ => {
            return Err(format!(
                "the mapping at {addr:#x} reads back as {start:#x}-{end:#x} with {page}-byte pages"
            ))
        }
    };
    let want = usize::try_from(size)
        .ok()
        .and_then(|s| round_up(s, page))
        .filter(|w| *w > 0);
    if want != Some(len) {
        return Err(format!(
            "the attachment at {addr:#x} is {len} bytes of {} pages, not the segment's {size} \
             bytes rounded up to that page size",
            format_exact(page as u64)
        ));
    }
    Ok((len, page))
}

/// Reads the first `buf.len()` bytes of a segment through a read-only
/// attachment, without allocating memory in it where possible:
///
/// 1. `pread` of the segment's file through `/proc/self/map_files`
///    (needs `CAP_SYS_ADMIN` or `CAP_CHECKPOINT_RESTORE`): a page that does
///    not exist reads as zeros and stays absent;
/// 2. else, if `mincore` says the first page is resident (accurate for
///    tmpfs-backed segments; for hugetlb it only sees this process's page
///    tables), a plain read;
/// 3. else, with `allow_fault`, `MADV_POPULATE_READ` of the first page (an
///    error, never SIGBUS, when it cannot be had) and a read. This may
///    allocate the segment's first page (from its reservation).
///
/// Returns false when none of these applied (`buf` untouched).
pub fn shm_peek(shmid: i32, buf: &mut [u8], allow_fault: bool) -> Result<bool, SysError> {
    let stat = shm_stat(shmid)?;
    let call = || format!("shmat(shmid={shmid}, SHM_RDONLY)");
    let len = usize::try_from(stat.size)
        .map_err(|_| SysError::invalid(call(), "segment size does not fit in usize"))?;
    if buf.len() > len {
        return Err(SysError::invalid(
            call(),
            format!("peek of {} bytes in a segment of {len}", buf.len()),
        ));
    }
    // SAFETY: a null address lets the kernel choose a fresh range; the
    // attachment is read-only and detached below before returning.
    let addr = unsafe { libc::shmat(shmid, std::ptr::null(), libc::SHM_RDONLY) };
    if addr as isize == -1 {
        return Err(SysError::last_os(call()));
    }
    let result = peek_attached(addr.cast::<u8>(), len, buf, allow_fault);
    // SAFETY: addr is the address shmat returned above; nothing references
    // the attachment any more.
    let rc = unsafe { libc::shmdt(addr) };
    if rc < 0 {
        return Err(SysError::last_os(format!(
            "shmdt(shmid={shmid}, addr={:#x})",
            addr as usize
        )));
    }
    result
}

/// Copies `buf.len()` bytes from `addr` with volatile byte reads. Only
/// called by [`peek_attached`] on its live attachment, which is at least
/// `buf.len()` bytes long (checked by [`shm_peek`]).
fn read_volatile_into(addr: *const u8, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        // SAFETY: i < buf.len() <= the attachment's length (shm_peek checks
        // it); volatile because other processes may write concurrently.
        *b = unsafe { std::ptr::read_volatile(addr.add(i)) };
    }
}

fn peek_attached(
    addr: *mut u8,
    len: usize,
    buf: &mut [u8],
    allow_fault: bool,
) -> Result<bool, SysError> {
    // 1. The file behind the mapping, read without faulting.
    let prefix = format!("{:x}-", addr as usize);
    if let Ok(rd) = std::fs::read_dir("/proc/self/map_files") {
        let entry = rd.filter_map(|e| e.ok()).find(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix))
        });
        if let Some(e) = entry {
            if let Ok(f) = std::fs::File::open(e.path()) {
                use std::os::unix::fs::FileExt;
                let mut got = 0;
                while got < buf.len() {
                    match f.read_at(&mut buf[got..], got as u64) {
                        Ok(0) => break,
                        Ok(n) => got += n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(_) => break,
                    }
                }
                if got == buf.len() {
                    return Ok(true);
                }
            }
        }
    }
    let first = base_page_size().min(len);
    // 2. Resident in the page cache (tmpfs-backed segments).
    let mut vec = [0u8; 1];
    // SAFETY: addr is the page-aligned start of a live attachment at least
    // `first` bytes long; vec has room for one page's byte.
    let rc = unsafe { libc::mincore(addr.cast::<c_void>(), first, vec.as_mut_ptr()) };
    if rc == 0 && vec[0] & 1 == 1 {
        read_volatile_into(addr, buf);
        return Ok(true);
    }
    // 3. Fault the first page in for reading: an error, never SIGBUS.
    if allow_fault {
        // SAFETY: the first page of the live attachment; a read fault
        // changes no contents.
        let r =
            unsafe { rustix::mm::madvise(addr.cast::<c_void>(), first, Advice::LinuxPopulateRead) };
        if r.is_ok() {
            read_volatile_into(addr, buf);
            return Ok(true);
        }
    }
    Ok(false)
}

/// `IPC_PRIVATE`: the key that always creates a new System V segment.
pub const IPC_PRIVATE: i32 = 0;

/// `SHM_DEST`: mode bit of a segment marked for removal (`IPC_RMID`) that
/// is still attached somewhere.
pub const SHM_DEST: u32 = 0o1000;

/// `SHM_LOCKED`: mode bit of a segment locked with `SHM_LOCK`.
pub const SHM_LOCKED: u32 = 0o2000;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base_page_size as page;

    #[test]
    fn sysv_plain_lifecycle() {
        let size = 3 * page() as u64 + 1;
        let id = shm_get(IPC_PRIVATE, size, ShmFlags::create_new(None)).expect("shmget");
        let result = std::panic::catch_unwind(|| {
            let st = shm_stat(id).unwrap();
            assert_eq!(st.size, size);
            assert_eq!(st.nattch, 0);
            assert_eq!(st.cpid, std::process::id() as i32);
            assert_eq!(st.mode & 0o777, 0o600);
            assert!(!st.marked_for_removal());

            assert_eq!((st.lpid, st.atime), (0, 0), "never attached");

            let mut a = shm_attach(id).unwrap();
            // What the kernel maps: the size rounded up to the page size.
            assert_eq!(a.len(), 4 * page());
            assert_eq!(a.page_size(), page());
            let st = shm_stat(id).unwrap();
            assert_eq!(st.lpid, std::process::id() as i32);
            assert!(st.atime > 0);
            // Placed: aligned, the same length, and the kernel's first
            // attachment gone again.
            let b = shm_attach_placed(id, Some(2 << 20)).unwrap();
            assert_eq!(b.addr() % (2 << 20), 0);
            assert_eq!((b.len(), b.page_size()), (4 * page(), page()));
            assert_eq!(shm_stat(id).unwrap().nattch, 2);
            a.write_at(size as usize - 4, b"sysv").unwrap();
            a.touch();
            a.populate_write().unwrap();
            let mut buf = [0u8; 4];
            b.read_at(size as usize - 4, &mut buf).unwrap();
            assert_eq!(&buf, b"sysv");
            b.release().unwrap();
            assert_eq!(shm_stat(id).unwrap().nattch, 1);

            shm_remove(id).unwrap();
            let st = shm_stat(id).unwrap();
            assert!(st.marked_for_removal());
            assert_eq!(st.key, 0);
            drop(a);
            let err = shm_stat(id).unwrap_err();
            assert!(matches!(
                err.errno(),
                Some(libc::EINVAL) | Some(libc::EIDRM)
            ));
            assert_eq!(err.call(), format!("shmctl(shmid={id}, IPC_STAT)"));
        });
        let _ = shm_remove(id);
        if let Err(p) = result {
            std::panic::resume_unwind(p);
        }
    }

    #[test]
    fn shm_flags_name_the_page_size() {
        assert_eq!(
            ShmFlags::create_new(Some(1 << 30)).to_string(),
            "IPC_CREAT|IPC_EXCL|SHM_HUGETLB|1GiB|0600"
        );
        assert_eq!(ShmFlags::default().to_string(), "0600");
    }

    #[test]
    fn sysv_error_message_has_key_size_and_flags() {
        // Non-existent key without IPC_CREAT fails ENOENT.
        let flags = ShmFlags {
            huge_page_size: Some(2 << 20),
            ..ShmFlags::default()
        };
        let err = shm_get(0x7a5e_0001, 4194304, flags).unwrap_err();
        assert_eq!(err.errno(), Some(libc::ENOENT));
        assert_eq!(
            err.to_string(),
            format!(
                "shmget(key=0x7a5e0001, size=4194304, SHM_HUGETLB|2MiB|0600): {}",
                std::io::Error::from_raw_os_error(libc::ENOENT)
            )
        );
        let io: std::io::Error = err.into();
        assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
        assert!(shm_attach(-1).is_err());
        assert!(shm_remove(-1).is_err());
    }
}
