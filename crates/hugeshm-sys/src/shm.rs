//! System V shared memory: `shmget`, `shmctl`, `shmat` and `shmdt`.

use std::ffi::c_void;
use std::fmt;

use rustix::mm::Advice;

use crate::{
    base_page_size, format_size, huge_page_log2, placed, round_up, Mapping, Release, SysError,
    HUGE_SHIFT, IPC_PRIVATE, SHM_DEST,
};

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
            write!(f, "SHM_HUGETLB|{}|", format_size(h))?;
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
    /// Permission bits plus [`SHM_DEST`] / [`SHM_LOCKED`].
    pub mode: u32,
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
        mode: u32::from(ds.shm_perm.mode),
    })
}

/// `shmat(shmid, NULL, 0)`: attaches a segment read-write at an address
/// chosen by the kernel; the [`Mapping`] detaches (`shmdt`) when released,
/// which does not remove the segment ([`shm_remove`] does). Its length is
/// the segment size from `IPC_STAT`.
pub fn shm_attach(shmid: i32) -> Result<Mapping, SysError> {
    shm_attach_placed(shmid, None)
}

/// [`shm_attach`] at an address that is a multiple of `align` (e.g.
/// [`PMD_SHARE_ALIGN`]): `shmat(shmid, addr, SHM_REMAP)` over the aligned
/// part of a reservation of `size + align` bytes, the rest released.
/// `None` lets the kernel choose.
pub fn shm_attach_placed(shmid: i32, align: Option<usize>) -> Result<Mapping, SysError> {
    let stat = shm_stat(shmid)?;
    let call = || {
        format!(
            "shmat(shmid={shmid}, size={}{})",
            stat.size,
            match align {
                Some(a) => format!(", SHM_REMAP at a multiple of {}", format_size(a as u64)),
                None => String::new(),
            }
        )
    };
    let len = usize::try_from(stat.size)
        .map_err(|_| SysError::invalid(call(), "segment size does not fit in usize"))?;
    if len == 0 {
        return Err(SysError::invalid(call(), "segment size is zero"));
    }
    // The kernel rounds the attachment up to the segment's page size; the
    // reservation only needs the length rounded to base pages plus the
    // alignment, which covers any page size up to the alignment.
    let rounded = round_up(len, base_page_size())
        .ok_or_else(|| SysError::invalid(call(), "length overflows"))?;
    let ptr = placed(&call, rounded, base_page_size(), align, |at| {
        let (addr, flags) = match at {
            Some(a) => (a as *const c_void, libc::SHM_REMAP),
            None => (std::ptr::null(), 0),
        };
        // SAFETY: either a null address (the kernel picks a fresh range) or
        // SHM_REMAP onto this call's own PROT_NONE reservation (see
        // `placed`); the result is owned by the attachment.
        let p = unsafe { libc::shmat(shmid, addr, flags) };
        if p as isize == -1 {
            return Err(SysError::last_os(call()));
        }
        Ok(p)
    })?;
    Ok(Mapping {
        ptr,
        len,
        page_size: base_page_size(),
        release: Release::Shmdt { shmid },
        sync: false,
    })
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
