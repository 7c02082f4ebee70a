//! `hugeshm_options`: what `hugeshm_create` is asked for (the C face of
//! `RegionBuilder`).

use std::ffi::{c_char, c_int};
use std::path::PathBuf;
use std::ptr;

use hugeshm_region::{naming, Backend, PageSize, Placement, Policy, Reclaim, RegionBuilder};

use crate::error::{hugeshm_error, HUGESHM_ERROR_INTERNAL, HUGESHM_OK};
use crate::ffi::{arg_mut, arg_str, into_handle, no_panic, take_box};
use crate::types::{
    backend_from_c, hugeshm_backend, hugeshm_policy, hugeshm_reclaim, page_size_from_c,
    policy_from_c, reclaim_from_c,
};

/// The request for a region: size, backend, page size, policy, pre-fault
/// threads, mlock, mode, name, directory, reclaim, page-table sharing, NUMA
/// placement. Made by `hugeshm_options_new`,
/// changed by the `hugeshm_options_set_*` functions (each returns
/// `HUGESHM_OK`, or `HUGESHM_ERROR_INVALID_ARGUMENT` and changes nothing),
/// used by `hugeshm_create` (which does not keep it), freed by
/// `hugeshm_options_free`.
#[derive(Debug)]
pub struct hugeshm_options {
    size_bytes: u64,
    backend: Backend,
    page_size: PageSize,
    policy: Policy,
    prefault_threads: Option<usize>,
    mlock: bool,
    mode: u32,
    name: Option<String>,
    directory: Option<PathBuf>,
    reclaim: Reclaim,
    pmd_sharing: bool,
    owner: Option<u32>,
    numa: Placement,
}

impl hugeshm_options {
    /// The builder these options describe.
    pub(crate) fn builder(&self) -> RegionBuilder {
        let mut b = RegionBuilder::new(self.size_bytes)
            .backend(self.backend)
            .page_size(self.page_size)
            .policy(self.policy)
            .mlock(self.mlock)
            .mode(self.mode)
            .reclaim(self.reclaim)
            .pmd_sharing(self.pmd_sharing)
            .numa(self.numa.clone());
        if let Some(t) = self.prefault_threads {
            b = b.prefault_threads(t);
        }
        if let Some(n) = &self.name {
            b = b.name(n.clone());
        }
        if let Some(d) = &self.directory {
            b = b.directory(d.clone());
        }
        if let Some(uid) = self.owner {
            b = b.owner(uid);
        }
        b
    }
}

impl Default for hugeshm_options {
    fn default() -> Self {
        hugeshm_options {
            size_bytes: 0,
            backend: Backend::Anon,
            page_size: PageSize::Largest,
            policy: Policy::Try,
            prefault_threads: None,
            mlock: false,
            mode: 0o600,
            name: None,
            directory: None,
            reclaim: Reclaim::Refuse,
            pmd_sharing: true,
            owner: None,
            numa: Placement::Default,
        }
    }
}

/// New options with the defaults: size 0 (set one), backend
/// `HUGESHM_BACKEND_ANON`, page size 0 (the largest whose pool holds the
/// region), policy `HUGESHM_POLICY_TRY`, as many pre-fault threads as this
/// process may use CPUs, no mlock, mode 0600, no name, reclaim
/// `HUGESHM_RECLAIM_REFUSE`, page-table sharing on. Free with
/// `hugeshm_options_free`. NULL only if memory ran out.
#[no_mangle]
pub extern "C" fn hugeshm_options_new() -> *mut hugeshm_options {
    no_panic(ptr::null_mut(), || into_handle(hugeshm_options::default()))
}

/// Frees options. NULL is allowed (and does nothing).
///
/// # Safety
///
/// `options` is NULL or made by `hugeshm_options_new` and not yet freed.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_options_free(options: *mut hugeshm_options) {
    no_panic((), || {
        // SAFETY: the caller passes NULL or options this library allocated,
        // freed only here, once.
        drop(unsafe { take_box(options) });
    })
}

/// Applies `set` to the options behind `options`.
///
/// # Safety
///
/// `options` is NULL or live options that nothing else uses meanwhile.
unsafe fn set(
    options: *mut hugeshm_options,
    set: impl FnOnce(&mut hugeshm_options) -> Result<(), hugeshm_error>,
) -> c_int {
    no_panic(HUGESHM_ERROR_INTERNAL, || {
        // SAFETY: `options` is NULL or live and unshared (contract).
        let r = unsafe { arg_mut(options, "options") }.and_then(set);
        match r {
            Ok(()) => HUGESHM_OK,
            Err(e) => e.code(),
        }
    })
}

/// The size in bytes (rounded up to a multiple of the page size at
/// creation). 0 is refused.
///
/// # Safety
///
/// `options` is NULL or live options not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_options_set_size(
    options: *mut hugeshm_options,
    size_bytes: u64,
) -> c_int {
    let apply = |o: &mut hugeshm_options| {
        if size_bytes == 0 {
            return Err(hugeshm_error::invalid_argument("size 0"));
        }
        o.size_bytes = size_bytes;
        Ok(())
    };
    // SAFETY: `options` is NULL or live and unshared (contract).
    unsafe { set(options, apply) }
}

/// The backend (`HUGESHM_BACKEND_*`).
///
/// # Safety
///
/// `options` is NULL or live options not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_options_set_backend(
    options: *mut hugeshm_options,
    backend: hugeshm_backend,
) -> c_int {
    let apply = |o: &mut hugeshm_options| {
        o.backend = backend_from_c(backend)?;
        Ok(())
    };
    // SAFETY: `options` is NULL or live and unshared (contract).
    unsafe { set(options, apply) }
}

/// The page size in bytes: 0 = the largest huge page size whose pool holds
/// the region, 4096 = base pages, else a huge page size the kernel offers
/// (2097152, 1073741824). Values that are not 0 or a power of two from
/// the base page size up are refused here; a size the kernel does not
/// offer is `HUGESHM_ERROR_UNSUPPORTED_PAGE_SIZE` at creation.
///
/// # Safety
///
/// `options` is NULL or live options not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_options_set_page_size(
    options: *mut hugeshm_options,
    page_size_bytes: u64,
) -> c_int {
    let apply = |o: &mut hugeshm_options| {
        o.page_size = page_size_from_c(page_size_bytes)?;
        Ok(())
    };
    // SAFETY: `options` is NULL or live and unshared (contract).
    unsafe { set(options, apply) }
}

/// The policy (`HUGESHM_POLICY_*`).
///
/// # Safety
///
/// `options` is NULL or live options not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_options_set_policy(
    options: *mut hugeshm_options,
    policy: hugeshm_policy,
) -> c_int {
    let apply = |o: &mut hugeshm_options| {
        o.policy = policy_from_c(policy)?;
        Ok(())
    };
    // SAFETY: `options` is NULL or live and unshared (contract).
    unsafe { set(options, apply) }
}

/// Threads that pre-fault the region at creation; 0 skips the pre-fault
/// (huge pages are still reserved, so later faults cannot fail).
///
/// # Safety
///
/// `options` is NULL or live options not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_options_set_prefault_threads(
    options: *mut hugeshm_options,
    threads: u32,
) -> c_int {
    let apply = |o: &mut hugeshm_options| {
        o.prefault_threads = Some(threads as usize);
        Ok(())
    };
    // SAFETY: `options` is NULL or live and unshared (contract).
    unsafe { set(options, apply) }
}

/// Whether to mlock the region after the pre-fault (checked against
/// RLIMIT_MEMLOCK before anything is created).
///
/// # Safety
///
/// `options` is NULL or live options not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_options_set_mlock(
    options: *mut hugeshm_options,
    mlock: bool,
) -> c_int {
    let apply = |o: &mut hugeshm_options| {
        o.mlock = mlock;
        Ok(())
    };
    // SAFETY: `options` is NULL or live and unshared (contract).
    unsafe { set(options, apply) }
}

/// Permission bits of the SysV segment or file (0 to 0777; default 0600;
/// the umask does not apply). Ignored for memfd and anon.
///
/// # Safety
///
/// `options` is NULL or live options not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_options_set_mode(
    options: *mut hugeshm_options,
    mode: u32,
) -> c_int {
    let apply = |o: &mut hugeshm_options| {
        if mode & !0o777 != 0 {
            return Err(hugeshm_error::invalid_argument(format!(
                "mode {mode:o}: only permission bits (0 to 0777)"
            )));
        }
        o.mode = mode;
        Ok(())
    };
    // SAFETY: `options` is NULL or live and unshared (contract).
    unsafe { set(options, apply) }
}

/// Names the region, so that other processes can attach it
/// (`hugeshm_attach`): 1 to 200 characters out of A-Z a-z 0-9 . _ -, not
/// starting with '.'. The string is copied. Without a name the region is
/// anonymous and vanishes with its last mapping.
///
/// # Safety
///
/// `options` is NULL or live options not used by another thread meanwhile;
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_options_set_name(
    options: *mut hugeshm_options,
    name: *const c_char,
) -> c_int {
    let apply = |o: &mut hugeshm_options| {
        // SAFETY: `name` is NULL or a NUL-terminated string (contract).
        let n = unsafe { arg_str(name, "name") }?;
        naming::validate_name(n)?;
        o.name = Some(n.to_owned());
        Ok(())
    };
    // SAFETY: `options` is NULL or live and unshared (contract).
    unsafe { set(options, apply) }
}

/// The directory for file backends: for `HUGESHM_BACKEND_HUGETLBFS` a
/// hugetlbfs mount of the page size (instead of the first one in
/// /proc/mounts), for `HUGESHM_BACKEND_POSIX` a tmpfs directory (instead of
/// /dev/shm), for `HUGESHM_BACKEND_DAX` a directory on a `-o dax` mount or
/// a device-dax (`/dev/dax0.0`: the region takes the device from offset
/// 0). The string is copied; checked at creation.
///
/// # Safety
///
/// `options` is NULL or live options not used by another thread meanwhile;
/// `directory` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_options_set_directory(
    options: *mut hugeshm_options,
    directory: *const c_char,
) -> c_int {
    let apply = |o: &mut hugeshm_options| {
        // SAFETY: `directory` is NULL or a NUL-terminated string
        // (contract).
        let d = unsafe { arg_str(directory, "directory") }?;
        if d.is_empty() {
            return Err(hugeshm_error::invalid_argument("empty directory"));
        }
        o.directory = Some(PathBuf::from(d));
        Ok(())
    };
    // SAFETY: `options` is NULL or live and unshared (contract).
    unsafe { set(options, apply) }
}

/// What to do when a region of this name exists and no live process holds
/// it (`HUGESHM_RECLAIM_*`; default `HUGESHM_RECLAIM_REFUSE`).
///
/// # Safety
///
/// `options` is NULL or live options not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_options_set_reclaim(
    options: *mut hugeshm_options,
    reclaim: hugeshm_reclaim,
) -> c_int {
    let apply = |o: &mut hugeshm_options| {
        o.reclaim = reclaim_from_c(reclaim)?;
        Ok(())
    };
    // SAFETY: `options` is NULL or live and unshared (contract).
    unsafe { set(options, apply) }
}

/// Whether to place hugetlb regions of 1 GiB or more at a 1 GiB-aligned
/// address, so that every attached process shares the page-table pages
/// (default true).
///
/// # Safety
///
/// `options` is NULL or live options not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_options_set_pmd_sharing(
    options: *mut hugeshm_options,
    on: bool,
) -> c_int {
    let apply = |o: &mut hugeshm_options| {
        o.pmd_sharing = on;
        Ok(())
    };
    // SAFETY: `options` is NULL or live and unshared (contract).
    unsafe { set(options, apply) }
}

/// With `hugeshm_options_set_reclaim`: accept an existing region owned by
/// `uid` (default: the effective uid; root's is accepted too: root may write
/// anything anyway). A region another user owns, or one
/// that group or others may write beyond the mode set with
/// `hugeshm_options_set_mode`, is refused (`HUGESHM_ERROR_UNTRUSTED`).
///
/// # Safety
///
/// `options` is NULL or live options not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_options_set_owner(
    options: *mut hugeshm_options,
    uid: u32,
) -> c_int {
    let apply = |o: &mut hugeshm_options| {
        o.owner = Some(uid);
        Ok(())
    };
    // SAFETY: `options` is NULL or live and unshared (contract).
    unsafe { set(options, apply) }
}

/// NUMA placement, as `hugeshm create --numa` takes it: "bind=1" (every
/// page on node 1; a page elsewhere is an error under
/// `HUGESHM_POLICY_ONLY`), "interleave" or "interleave=0,2", "preferred=1",
/// "weighted-interleave" (Linux 6.9+), or "default" (the caller's own
/// policy, e.g. from `numactl --membind`, which is honoured). "per-node"
/// is refused: it makes several regions, one "bind=N" region per node. The pool of
/// each node is checked before the system call: a short node is
/// `HUGESHM_ERROR_POOL_SHORTFALL` with that node's numbers
/// (`hugeshm_shortfall.node`) and its sysfs file in the fix. The string is
/// copied.
///
/// # Safety
///
/// `options` is NULL or live options not used by another thread meanwhile;
/// `placement` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_options_set_numa(
    options: *mut hugeshm_options,
    placement: *const c_char,
) -> c_int {
    let apply = |o: &mut hugeshm_options| {
        // SAFETY: `placement` is NULL or a NUL-terminated string (contract).
        let text = unsafe { arg_str(placement, "placement") }?;
        let numa = text
            .parse::<Placement>()
            .map_err(hugeshm_error::invalid_argument)?;
        if numa == Placement::PerNode {
            return Err(hugeshm_error::invalid_argument(
                "per-node makes one region per node: create each with \"bind=N\" and the \
                 name NAME.nodeN (what hugeshm create --numa per-node does)",
            ));
        }
        o.numa = numa;
        Ok(())
    };
    // SAFETY: `options` is NULL or live and unshared (contract).
    unsafe { set(options, apply) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::HUGESHM_ERROR_INVALID_ARGUMENT;
    use crate::types::*;

    #[test]
    fn setters_check_and_null_is_an_error() {
        let o = hugeshm_options_new();
        assert!(!o.is_null());
        // SAFETY: `o` is live and used by this thread only; strings are
        // NUL-terminated.
        unsafe {
            assert_eq!(hugeshm_options_set_size(o, 8 << 20), HUGESHM_OK);
            assert_eq!(
                hugeshm_options_set_size(o, 0),
                HUGESHM_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                hugeshm_options_set_backend(o, HUGESHM_BACKEND_SYSV),
                HUGESHM_OK
            );
            assert_eq!(
                hugeshm_options_set_backend(o, 0),
                HUGESHM_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                hugeshm_options_set_backend(o, 99),
                HUGESHM_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(hugeshm_options_set_page_size(o, 2 << 20), HUGESHM_OK);
            assert_eq!(
                hugeshm_options_set_page_size(o, 12345),
                HUGESHM_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                hugeshm_options_set_policy(o, HUGESHM_POLICY_ONLY),
                HUGESHM_OK
            );
            assert_eq!(
                hugeshm_options_set_policy(o, 0),
                HUGESHM_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(hugeshm_options_set_prefault_threads(o, 2), HUGESHM_OK);
            assert_eq!(hugeshm_options_set_mlock(o, true), HUGESHM_OK);
            assert_eq!(
                hugeshm_options_set_reclaim(o, HUGESHM_RECLAIM_REUSE),
                HUGESHM_OK
            );
            assert_eq!(
                hugeshm_options_set_reclaim(o, 0),
                HUGESHM_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(hugeshm_options_set_pmd_sharing(o, false), HUGESHM_OK);
            assert_eq!(hugeshm_options_set_mode(o, 0o640), HUGESHM_OK);
            assert_eq!(
                hugeshm_options_set_mode(o, 0o4755),
                HUGESHM_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(hugeshm_options_set_name(o, c"sga".as_ptr()), HUGESHM_OK);
            assert_eq!(
                hugeshm_options_set_name(o, c"a/b".as_ptr()),
                HUGESHM_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                hugeshm_options_set_name(o, ptr::null()),
                HUGESHM_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                hugeshm_options_set_name(o, c"\xff".as_ptr()),
                HUGESHM_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                hugeshm_options_set_directory(o, c"/dev/shm".as_ptr()),
                HUGESHM_OK
            );
            assert_eq!(
                hugeshm_options_set_size(ptr::null_mut(), 1),
                HUGESHM_ERROR_INVALID_ARGUMENT
            );
            let opts = &*o;
            assert_eq!(opts.size_bytes, 8 << 20);
            assert_eq!(opts.backend, Backend::Sysv);
            assert_eq!(opts.page_size, PageSize::HUGE_2M);
            assert_eq!(opts.policy, Policy::Only);
            assert_eq!(opts.prefault_threads, Some(2));
            assert!(opts.mlock);
            assert_eq!(opts.mode, 0o640);
            assert_eq!(opts.name.as_deref(), Some("sga"));
            assert_eq!(opts.reclaim, Reclaim::Reuse);
            assert!(!opts.pmd_sharing);
            let dbg = format!("{:?}", opts.builder());
            assert!(dbg.contains("Sysv") && dbg.contains("0640"), "{dbg}");
            hugeshm_options_free(o);
            hugeshm_options_free(ptr::null_mut());
        }
    }
}
