//! Sysctls and the memlock limit: any sysctl, `vm.min_free_kbytes`, HVO,
//! `vm.hugetlb_shm_group`, `RLIMIT_MEMLOCK` in limits.conf or a service.

use crate::shell_quote;

/// [`Fix::Sysctl`](crate::Fix::Sysctl): `key=value` as one shell word.
pub(super) fn set(key: &str, value: &str) -> String {
    format!("sysctl -w {}", shell_quote(&format!("{key}={value}")))
}

/// [`Fix::MinFreeKbytes`](crate::Fix::MinFreeKbytes): now and at every boot.
pub(super) fn min_free_kbytes(kib: u64) -> String {
    format!(
        "sysctl -w vm.min_free_kbytes={kib} && echo 'vm.min_free_kbytes = {kib}' > \
         /etc/sysctl.d/60-hugeshm-min-free.conf"
    )
}

/// [`Fix::EnableHvo`](crate::Fix::EnableHvo).
pub(super) fn enable_hvo() -> String {
    "sysctl -w vm.hugetlb_optimize_vmemmap=1, then shrink and regrow \
     the pools (pages allocated before keep their struct pages), or boot with \
     hugetlb_free_vmemmap=on"
        .to_owned()
}

/// [`Fix::HugetlbShmGroup`](crate::Fix::HugetlbShmGroup).
pub(super) fn hugetlb_shm_group(gid: u32, memlock_kib: u64) -> String {
    format!(
        "sysctl -w vm.hugetlb_shm_group={gid} (persist it in /etc/sysctl.d), \
         or give the process CAP_IPC_LOCK (systemd: AmbientCapabilities=CAP_IPC_LOCK), \
         or (deprecated) raise the memlock limit to at least {memlock_kib} KiB"
    )
}

/// [`Fix::RaiseMemlock`](crate::Fix::RaiseMemlock).
pub(super) fn raise_memlock(user: &str, kib: u64) -> String {
    format!(
        "add `{user} - memlock {kib}` to /etc/security/limits.conf, or \
         `LimitMEMLOCK={}` to the service's [Service] section, or grant CAP_IPC_LOCK",
        kib * 1024
    )
}

#[cfg(test)]
mod tests {
    use crate::Fix;

    #[test]
    fn sysctls_and_the_memlock_limit() {
        let s = |key: &str, value: &str| {
            Fix::Sysctl {
                key: key.into(),
                value: value.into(),
            }
            .to_string()
        };
        assert_eq!(
            s("kernel.shmmax", "68719476736"),
            "sysctl -w kernel.shmmax=68719476736"
        );
        // A value with blanks, or one that would end the command, is one word.
        assert_eq!(s("kernel.shmall", "1 2"), "sysctl -w 'kernel.shmall=1 2'");
        assert_eq!(s("a", "1; reboot"), "sysctl -w 'a=1; reboot'");
        assert_eq!(
            Fix::MinFreeKbytes { kib: 67584 }.to_string(),
            "sysctl -w vm.min_free_kbytes=67584 && echo 'vm.min_free_kbytes = 67584' > \
             /etc/sysctl.d/60-hugeshm-min-free.conf"
        );
        assert!(Fix::EnableHvo
            .to_string()
            .starts_with("sysctl -w vm.hugetlb_optimize_vmemmap=1, then shrink and regrow"));
        let g = Fix::HugetlbShmGroup {
            gid: 54321,
            memlock_kib: 1024,
        }
        .to_string();
        assert!(
            g.starts_with("sysctl -w vm.hugetlb_shm_group=54321 (persist it in /etc/sysctl.d)")
                && g.ends_with("raise the memlock limit to at least 1024 KiB"),
            "{g}"
        );
        assert_eq!(
            Fix::RaiseMemlock {
                user: "postgres".into(),
                kib: 65536
            }
            .to_string(),
            "add `postgres - memlock 65536` to /etc/security/limits.conf, or \
             `LimitMEMLOCK=67108864` to the service's [Service] section, or grant CAP_IPC_LOCK"
        );
    }
}
