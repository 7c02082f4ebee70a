//! The `RLIMIT_MEMLOCK` check before `mlock`, and the privileges the
//! kernel checks for huge pages (`CAP_IPC_LOCK`, `vm.hugetlb_shm_group`).

use hugeshm_fix::Fix;

use crate::error::RegionError;

/// Whether this thread has `CAP_IPC_LOCK` in its effective set (which
/// lifts the memlock limit and allows SysV `SHM_HUGETLB`).
pub(crate) fn has_cap_ipc_lock() -> bool {
    rustix::thread::capabilities(None)
        .map(|c| {
            c.effective
                .contains(rustix::thread::CapabilitySet::IPC_LOCK)
        })
        .unwrap_or(false)
}

/// The login name of the effective uid (from `/etc/passwd`), else `*`.
fn user_name() -> String {
    let uid = rustix::process::geteuid().as_raw();
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|t| hugeshm_parse::passwd::name_of(&t, uid).map(str::to_owned))
        .unwrap_or_else(|| "*".to_owned())
}

/// The error for a lock of `needed` bytes on top of `locked` under the
/// given limits, with the `limits.conf` (KiB) and systemd lines.
pub(crate) fn memlock_error(
    needed: u64,
    locked: u64,
    soft: Option<u64>,
    hard: Option<u64>,
    user: &str,
) -> RegionError {
    RegionError::MemlockLimit {
        needed_bytes: needed,
        locked_bytes: locked,
        soft_limit_bytes: soft,
        hard_limit_bytes: hard,
        user: user.to_owned(),
    }
}

/// Fails when locking `needed` more bytes would exceed `RLIMIT_MEMLOCK`
/// (unless the process has `CAP_IPC_LOCK`, which the kernel lets lock any
/// amount).
pub(crate) fn check_memlock(needed: u64) -> Result<(), RegionError> {
    if has_cap_ipc_lock() {
        return Ok(());
    }
    let lim = rustix::process::getrlimit(rustix::process::Resource::Memlock);
    let Some(soft) = lim.current else {
        return Ok(());
    };
    // This process's own `VmLck`: always the running kernel's /proc/self.
    let locked = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| hugeshm_parse::pid_status::parse(&t).ok())
        .and_then(|s| s.vm_lck_bytes)
        .unwrap_or(0);
    if locked.saturating_add(needed) <= soft {
        return Ok(());
    }
    Err(memlock_error(
        needed,
        locked,
        Some(soft),
        lim.maximum,
        &user_name(),
    ))
}

/// The fix for SysV `SHM_HUGETLB` refused with `EPERM`.
pub(crate) fn shm_hugetlb_fix(size: u64) -> Fix {
    Fix::HugetlbShmGroup {
        gid: rustix::process::getegid().as_raw(),
        memlock_kib: size.div_ceil(1024),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memlock_message_has_both_lines() {
        let e = memlock_error(10 << 30, 4096, Some(8 << 20), Some(8 << 20), "oracle");
        let s = e.to_string();
        let fix = e.fix().unwrap().to_string();
        assert!(fix.contains("`oracle - memlock 10485764`"), "{fix}");
        assert!(fix.contains("`LimitMEMLOCK=10737422336`"), "{fix}");
        assert!(s.contains("soft 8388608 bytes, hard 8388608 bytes"), "{s}");
        let e = memlock_error(1000, 0, Some(0), None, "*");
        assert!(
            e.fix().unwrap().to_string().contains("`* - memlock 1`"),
            "{e}"
        );
        assert!(e.to_string().contains("hard unlimited"), "{e}");
    }

    /// The live check follows this thread's `CAP_IPC_LOCK` (bit 14 of
    /// `CapEff` in /proc) and, without it, `RLIMIT_MEMLOCK`: past the soft
    /// limit a lock is refused with the numbers.
    #[test]
    fn live_check_follows_the_capability_and_the_limit() {
        use rustix::thread::CapabilitySet;
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let eff = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
            .unwrap();
        let cap = eff & (1 << 14) != 0;
        assert_eq!(has_cap_ipc_lock(), cap, "CapEff {eff:#x}");
        if cap {
            check_memlock(1 << 40).expect("CAP_IPC_LOCK lifts the limit");
        }
        // Capabilities are per thread: one without CAP_IPC_LOCK.
        std::thread::spawn(|| {
            let mut caps = rustix::thread::capabilities(None).unwrap();
            caps.effective.remove(CapabilitySet::IPC_LOCK);
            rustix::thread::set_capabilities(None, caps).unwrap();
            assert!(!has_cap_ipc_lock());
            let lim = rustix::process::getrlimit(rustix::process::Resource::Memlock);
            match lim.current {
                None => check_memlock(1 << 40).expect("no limit"),
                Some(soft) => {
                    let e = check_memlock(soft + 1).unwrap_err();
                    assert!(
                        matches!(
                            e,
                            RegionError::MemlockLimit {
                                needed_bytes,
                                soft_limit_bytes: Some(s),
                                ..
                            } if needed_bytes == soft + 1 && s == soft
                        ),
                        "{e}"
                    );
                }
            }
        })
        .join()
        .unwrap();
    }
}
