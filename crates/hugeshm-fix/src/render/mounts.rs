//! Mounts and file systems: a hugetlbfs of a size, a tmpfs that gives
//! huge pages, `shmem_enabled`, a full file system, a hugetlbfs another
//! user can create files on, a directory to write.

use crate::{human, shell_quote, short_size};

/// [`Fix::MountHugetlbfs`](crate::Fix::MountHugetlbfs).
pub(super) fn mount_hugetlbfs(page_size_bytes: u64, dir: &str) -> String {
    let dir = shell_quote(dir);
    format!(
        "mkdir -p {dir} && mount -t hugetlbfs -o pagesize={},mode=1770 nodev {dir}",
        short_size(page_size_bytes)
    )
}

/// [`Fix::RemountTmpfsHuge`](crate::Fix::RemountTmpfsHuge).
pub(super) fn remount_tmpfs_huge(mount: &str) -> String {
    format!("mount -o remount,huge=within_size {}", shell_quote(mount))
}

/// [`Fix::ShmemEnabledNever`](crate::Fix::ShmemEnabledNever).
pub(super) fn shmem_enabled_never() -> String {
    "echo never > /sys/kernel/mm/transparent_hugepage/shmem_enabled \
     (then the mount's huge= option applies)"
        .to_owned()
}

/// [`Fix::ShmemEnabled`](crate::Fix::ShmemEnabled).
pub(super) fn shmem_enabled(value: &str, per_size: bool) -> String {
    format!(
        "echo {} > /sys/kernel/mm/transparent_hugepage/{}shmem_enabled",
        shell_quote(value),
        if per_size { "hugepages-2048kB/" } else { "" }
    )
}

/// [`Fix::GrowFilesystem`](crate::Fix::GrowFilesystem).
pub(super) fn grow_filesystem(mount: &str, missing_bytes: u64) -> String {
    format!(
        "free {} on {mount}, or grow it: mount -o remount,size=<bytes> {}",
        human(missing_bytes),
        shell_quote(mount)
    )
}

/// [`Fix::HugetlbfsOwner`](crate::Fix::HugetlbfsOwner).
pub(super) fn hugetlbfs_owner(dir: &str, uid: u32, gid: u32) -> String {
    format!(
        "mount the hugetlbfs at {dir} with options that let uid {uid} create files \
         (e.g. -o uid={uid},gid={gid},mode=0770)"
    )
}

/// [`Fix::MakeWritable`](crate::Fix::MakeWritable).
pub(super) fn make_writable(path: &str) -> String {
    format!("make {path} writable for this user")
}

#[cfg(test)]
mod tests {
    use crate::Fix;

    #[test]
    fn mounts_name_their_directories_as_one_word() {
        let m = Fix::MountHugetlbfs {
            page_size_bytes: 1 << 30,
            dir: "/dev/huge pages".into(),
        };
        assert_eq!(
            m.to_string(),
            "mkdir -p '/dev/huge pages' && mount -t hugetlbfs -o pagesize=1G,mode=1770 nodev \
             '/dev/huge pages'"
        );
        let r = Fix::RemountTmpfsHuge {
            mount: "/mnt/it's".into(),
        };
        assert_eq!(
            r.to_string(),
            r"mount -o remount,huge=within_size '/mnt/it'\''s'"
        );
        assert!(Fix::ShmemEnabledNever
            .to_string()
            .starts_with("echo never > /sys/kernel/mm/transparent_hugepage/shmem_enabled"));
        let g = Fix::GrowFilesystem {
            mount: "/dev/shm".into(),
            missing_bytes: 3 << 20,
        };
        assert_eq!(
            g.to_string(),
            "free 3 MiB on /dev/shm, or grow it: mount -o remount,size=<bytes> /dev/shm"
        );
        let o = Fix::HugetlbfsOwner {
            dir: "/dev/hugepages".into(),
            uid: 26,
            gid: 27,
        };
        assert!(
            o.to_string().ends_with("(e.g. -o uid=26,gid=27,mode=0770)"),
            "{o}"
        );
        assert_eq!(
            Fix::MakeWritable {
                path: "/dev/shm/db".into()
            }
            .to_string(),
            "make /dev/shm/db writable for this user"
        );
    }
}
