//! # hugeshm-fix
//!
//! What to do about a problem, as data. Library errors and doctor findings
//! state the facts; the remedy is a [`Fix`], which each front end renders
//! its own way: the CLI as `hugeshm` commands ([`Fix::render`] with
//! [`Renderer::Cli`]), the C ABI with its function names
//! ([`Renderer::C`]), the Rust API with builder calls ([`Renderer::Rust`]),
//! JSON as a tagged object (`{"kind": "set-pool", ...}`).
//! Fixes that are the same for every front end (a sysctl, a sysfs write, a
//! mount) render the same everywhere, in one place: a pool resize is
//! always [`pool_command`].
//!
//! ```
//! use hugeshm_fix::{Fix, Renderer};
//! let fix = Fix::SetPool { page_size_bytes: 2 << 20, node: None, pages: 10944, default_size: true };
//! assert_eq!(fix.to_string(), "sysctl -w vm.nr_hugepages=10944");
//! let fix = Fix::Reclaim { name: "sga".into(), backend: "sysv".into(), dir: None, keep_contents: false };
//! assert_eq!(
//!     fix.render(Renderer::Cli),
//!     "recreate it: hugeshm create sga --backend sysv --reclaim recreate; or remove it: hugeshm rm sga --backend sysv"
//! );
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod render;
mod shell;

use std::fmt;

pub use shell::quote as shell_quote;

use hugeshm_parse::size::{format_bytes as human, page_size_short as short_size};
use serde::{Deserialize, Serialize};

/// A remedy, with the numbers it needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Fix {
    /// Set the huge page pool of one size (on one node) to `pages` pages.
    SetPool {
        /// The page size.
        page_size_bytes: u64,
        /// The NUMA node (`None`: the whole host).
        node: Option<u32>,
        /// The pool size to set (`nr_hugepages`).
        pages: u64,
        /// Whether the page size is the kernel's default (then `vm.nr_hugepages`).
        default_size: bool,
    },
    /// Set the pools of several NUMA nodes (one sysfs write each).
    SetNodePools {
        /// The page size.
        page_size_bytes: u64,
        /// (node, pages) to set.
        pools: Vec<(u32, u64)>,
    },
    /// The kernel refused although the pool looked big enough: retry, and
    /// look at the limits that can refuse huge pages besides the pool.
    RetryOrCheckLimits {
        /// The page size.
        page_size_bytes: u64,
        /// Pages the pool has available now.
        available: u64,
    },
    /// A hugetlb cgroup limit refuses the pages: raise it (and set the
    /// reservation limit with it, so that a refusal comes at `mmap`, not as
    /// SIGBUS at fault time).
    RaiseCgroupLimit {
        /// The page size.
        page_size_bytes: u64,
        /// The limit file (`.../hugetlb.2MB.max`), when known.
        file: Option<String>,
        /// The bytes the limit must allow at least.
        bytes: u64,
    },
    /// The kernel has no pool of this size: boot with it.
    BootPageSize {
        /// The page size.
        page_size_bytes: u64,
    },
    /// Mount a hugetlbfs of the page size.
    MountHugetlbfs {
        /// The page size.
        page_size_bytes: u64,
        /// Where (`/dev/hugepages` for the default size, `/dev/hugepages2M`, ...).
        dir: String,
    },
    /// Make a tmpfs mount give transparent huge pages.
    RemountTmpfsHuge {
        /// The mount point.
        mount: String,
    },
    /// Let tmpfs mounts follow their `huge=` option again.
    ShmemEnabledNever,
    /// Use a page size or backend that can give the pages (free text of the
    /// choices, e.g. "--page-size 2m or a hugetlb backend").
    OtherBackend {
        /// The page size that would work, when one would.
        page_size_bytes: Option<u64>,
    },
    /// Free space on (or grow) a size-limited file system.
    GrowFilesystem {
        /// The mount point.
        mount: String,
        /// Bytes missing.
        missing_bytes: u64,
    },
    /// Free memory for a region on base pages, make it smaller, or let it
    /// be faulted on demand (no pre-fault).
    FreeMemory {
        /// Bytes missing from `MemAvailable`.
        missing_bytes: u64,
        /// Whether the region can be made without allocating its pages
        /// (no pre-fault); a tmpfs file is allocated at create.
        on_demand: bool,
    },
    /// Free space on a DAX file system, or give it a larger persistent
    /// memory namespace.
    GrowDax {
        /// The mount point.
        mount: String,
        /// Bytes missing.
        missing_bytes: u64,
    },
    /// A region larger than the device-dax it is created on: a smaller
    /// size, or a larger `devdax` namespace.
    GrowDeviceDax {
        /// The device (`/dev/dax0.0`).
        device: String,
        /// Its capacity.
        size_bytes: u64,
        /// Its alignment (regions are rounded up to it).
        align_bytes: u64,
        /// Bytes missing.
        missing_bytes: u64,
    },
    /// A DAX mapping served by 4 KiB page-table entries: what keeps the
    /// kernel from 2 MiB (PMD) ones, and how to remove it.
    AlignDax {
        /// What keeps it off PMD faults (one or more).
        causes: Vec<DaxCause>,
        /// The file (`/mnt/pmem/db.dat`) or device (`/dev/dax0.0`).
        path: String,
        /// The file offset the mapping starts at.
        offset: u64,
        /// Its namespace (`namespace0.0`), for an alignment below 2 MiB.
        namespace: Option<String>,
        /// Whether it is a hugeshm `dax` region (allocated whole and mapped
        /// at 2 MiB by hugeshm already): then only the file system can
        /// be at fault.
        #[serde(default)]
        region: bool,
    },
    /// A file on a `dax=inode` mount that the kernel serves from the page
    /// cache: its own DAX flag (`FS_XFLAG_DAX`), and what it takes for the
    /// kernel to apply it.
    DaxFlag {
        /// The file.
        path: String,
        /// Its file system (`ext4`, `xfs`): how to set the flag.
        fstype: String,
        /// Whether the flag is set already (then only the reload is missing).
        flag_set: bool,
    },
    /// Set a sysctl.
    Sysctl {
        /// The key, e.g. `kernel.shmmax`.
        key: String,
        /// The value.
        value: String,
    },
    /// Allow SysV `SHM_HUGETLB` for this group (or `CAP_IPC_LOCK`).
    HugetlbShmGroup {
        /// The group id to allow.
        gid: u32,
        /// The memlock limit (KiB) that the deprecated way would need.
        memlock_kib: u64,
    },
    /// Raise `RLIMIT_MEMLOCK` (or grant `CAP_IPC_LOCK`).
    RaiseMemlock {
        /// The login name the limits.conf line is for (`*` when unknown).
        user: String,
        /// The limit needed, in KiB.
        kib: u64,
    },
    /// Mount the hugetlbfs so that this user can create files.
    HugetlbfsOwner {
        /// The mount point.
        dir: String,
        /// The user id.
        uid: u32,
        /// The group id.
        gid: u32,
    },
    /// Make a directory writable for this user.
    MakeWritable {
        /// The directory.
        path: String,
    },
    /// Run as the region's owner (or root), or have it created with a mode
    /// that grants this user access.
    RunAsOwner,
    /// A region of this name exists and is held: attach to it, or stop its
    /// holders and remove it.
    AttachOrRemove {
        /// The region name.
        name: String,
        /// The backend word.
        backend: String,
        /// The directory (or device-dax) to name so that it is found
        /// (`--dir`); none for the default places.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dir: Option<String>,
        /// Pids that hold it (empty when unknown).
        holders: Vec<u32>,
    },
    /// A region nobody holds: reclaim it (keep the contents, when they are
    /// complete) or start over.
    Reclaim {
        /// The region name.
        name: String,
        /// The backend word.
        backend: String,
        /// The directory (or device-dax) to name so that it is found
        /// (`--dir`); none for the default places.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dir: Option<String>,
        /// Whether the contents are complete, so they can be kept (reuse).
        keep_contents: bool,
    },
    /// Remove the region.
    Remove {
        /// The region name.
        name: String,
        /// The backend word.
        backend: String,
        /// The directory (or device-dax) to name so that it is found
        /// (`--dir`); none for the default places.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dir: Option<String>,
    },
    /// The object belongs to another user, or is writable by more users
    /// than asked for: accept it explicitly only if that owner and mode are
    /// trusted, else have its owner remove it.
    TrustOwner {
        /// The region name.
        name: String,
        /// The backend word.
        backend: String,
        /// The directory (or device-dax) to name so that it is found
        /// (`--dir`); none for the default places.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dir: Option<String>,
        /// The owner's uid.
        uid: u32,
        /// The object's mode.
        mode: u32,
    },
    /// Remove a SysV segment by its id (one whose name is not known: its
    /// creator died before writing the header).
    IpcRm {
        /// The shmid.
        shmid: i32,
    },
    /// The region is still being created: retry once it is ready.
    WaitUntilReady,
    /// The region was made by a newer hugeshm: use that one.
    NewerHugeshm,
    /// Split free pages of a pool into smaller pages (`demote`, Linux 5.16+).
    Demote {
        /// The page size demoted (1 GiB).
        page_size_bytes: u64,
        /// The size its pages become (`demote_size`).
        to_page_size_bytes: u64,
        /// How many pages of `page_size_bytes` to demote.
        pages: u64,
        /// Whether `demote_size` must be set first (it names another size now).
        set_demote_size: bool,
    },
    /// Reserve pages at boot, on the kernel command line, where run-time
    /// allocation cannot find contiguous memory (1 GiB pages).
    ReserveAtBoot {
        /// The page size.
        page_size_bytes: u64,
        /// Pages wanted.
        pages: u64,
        /// The kernel command line asks for them already (and the kernel
        /// could not find the memory at boot): only `hugetlb_cma=` is left.
        on_cmdline: bool,
    },
    /// Raise `vm.min_free_kbytes` now and at every boot.
    MinFreeKbytes {
        /// The value, in KiB.
        kib: u64,
    },
    /// Turn on HugeTLB Vmemmap Optimization.
    EnableHvo,
}

/// Why a DAX mapping is served by 4 KiB faults ([`Fix::AlignDax`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum DaxCause {
    /// The file offset is not a multiple of 2 MiB.
    FileOffset,
    /// The address and the file offset differ modulo 2 MiB (or the mapping
    /// holds no whole 2 MiB-aligned range).
    Address,
    /// The file's blocks are not 2 MiB-aligned runs on the device (file
    /// system made without a 2 MiB stripe, or a file written piecemeal).
    Extents,
    /// The namespace (or device-dax) is aligned below 2 MiB.
    NamespaceAlign,
}

/// Who reads a rendered fix: which words name hugeshm's own operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renderer {
    /// The `hugeshm` command line.
    Cli,
    /// The C ABI (`hugeshm.h`).
    C,
    /// The Rust API (`hugeshm_region`); also [`Display`](fmt::Display).
    Rust,
}

/// The command that sets the pool of `page_size_bytes` pages to `pages`:
/// `sysctl -w vm.nr_hugepages=N` for the default size, the sysfs file of
/// the size otherwise, the per-node sysfs file when `node` is given. The
/// one place in hugeshm that spells a pool resize.
pub fn pool_command(
    page_size_bytes: u64,
    pages: u64,
    default_size: bool,
    node: Option<u32>,
) -> String {
    match node {
        None if default_size => format!("sysctl -w vm.nr_hugepages={pages}"),
        _ => format!(
            "echo {pages} > {}",
            nr_hugepages_path(page_size_bytes, node)
        ),
    }
}

/// The sysfs file that holds the pool of one page size, host-wide or on a
/// NUMA node.
pub fn nr_hugepages_path(page_size_bytes: u64, node: Option<u32>) -> String {
    let kb = page_size_bytes / 1024;
    match node {
        Some(n) => {
            format!("/sys/devices/system/node/node{n}/hugepages/hugepages-{kb}kB/nr_hugepages")
        }
        None => format!("/sys/kernel/mm/hugepages/hugepages-{kb}kB/nr_hugepages"),
    }
}

/// A Kubernetes quantity: `64Mi`, `2Gi`, else bytes.
pub fn k8s_quantity(bytes: u64) -> String {
    const GI: u64 = 1 << 30;
    const MI: u64 = 1 << 20;
    if bytes > 0 && bytes % GI == 0 {
        format!("{}Gi", bytes / GI)
    } else if bytes > 0 && bytes % MI == 0 {
        format!("{}Mi", bytes / MI)
    } else {
        bytes.to_string()
    }
}

impl Fix {
    /// The fix as text for `who`.
    pub fn render(&self, who: Renderer) -> String {
        render::render(self, who)
    }
}

impl fmt::Display for Fix {
    /// The fix for Rust callers ([`Renderer::Rust`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(Renderer::Rust))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name from a file anyone made is one quoted word in the commands.
    #[test]
    fn names_in_commands_are_shell_words() {
        let fix = Fix::Reclaim {
            name: "v'; touch /tmp/x; echo '".into(),
            backend: "posix".into(),
            dir: Some("/mnt/a b".into()),
            keep_contents: false,
        };
        assert_eq!(
            fix.render(Renderer::Cli),
            r"recreate it: hugeshm create 'v'\''; touch /tmp/x; echo '\''' --backend posix --dir '/mnt/a b' --reclaim recreate; or remove it: hugeshm rm 'v'\''; touch /tmp/x; echo '\''' --backend posix --dir '/mnt/a b'"
        );
        let fix = Fix::Remove {
            name: "a\"b".into(),
            backend: "posix".into(),
            dir: None,
        };
        assert_eq!(
            fix.render(Renderer::C),
            r#"hugeshm_remove("a\"b", HUGESHM_BACKEND_POSIX)"#
        );
    }

    #[test]
    fn pool_commands() {
        assert_eq!(
            pool_command(2 << 20, 7, true, None),
            "sysctl -w vm.nr_hugepages=7"
        );
        assert_eq!(
            pool_command(1 << 30, 3, true, Some(1)),
            "echo 3 > /sys/devices/system/node/node1/hugepages/hugepages-1048576kB/nr_hugepages"
        );
        assert_eq!(
            pool_command(1 << 30, 3, false, None),
            "echo 3 > /sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages"
        );
    }

    #[test]
    fn front_ends_name_their_own_calls() {
        let f = Fix::Reclaim {
            name: "sga".into(),
            backend: "memfd".into(),
            dir: None,
            keep_contents: true,
        };
        let cli = f.render(Renderer::Cli);
        assert!(
            cli.contains("hugeshm create sga --backend memfd --reclaim reuse"),
            "{cli}"
        );
        assert!(cli.contains("hugeshm rm sga --backend memfd"), "{cli}");
        let c = f.render(Renderer::C);
        assert!(
            c.contains("HUGESHM_RECLAIM_REUSE")
                && c.contains("hugeshm_remove(\"sga\", HUGESHM_BACKEND_MEMFD)"),
            "{c}"
        );
        assert!(!c.contains("hugeshm create"), "{c}");
        let rust = f.to_string();
        assert!(
            rust.contains("Reclaim::Reuse") && !rust.contains("hugeshm rm"),
            "{rust}"
        );
    }

    #[test]
    fn a_region_in_a_directory_is_named_with_it() {
        let f = Fix::Reclaim {
            name: "sga".into(),
            backend: "posix".into(),
            dir: Some("/dev/shm/db1".into()),
            keep_contents: true,
        };
        let cli = f.render(Renderer::Cli);
        assert!(
            cli.contains("hugeshm create sga --backend posix --dir /dev/shm/db1 --reclaim reuse")
                && cli.contains("hugeshm rm sga --backend posix --dir /dev/shm/db1"),
            "{cli}"
        );
        let c = f.render(Renderer::C);
        assert!(
            c.contains("hugeshm_options_set_directory(opts, \"/dev/shm/db1\")")
                && c.contains(
                    "hugeshm_remove_in(\"sga\", HUGESHM_BACKEND_POSIX, \"/dev/shm/db1\")"
                ),
            "{c}"
        );
        let rust = f.to_string();
        assert!(
            rust.contains("RegionBuilder::directory(\"/dev/shm/db1\").reclaim(Reclaim::Reuse)")
                && rust.contains(
                    "Locator::new(\"sga\", Backend::Posix).directory(\"/dev/shm/db1\").remove()"
                ),
            "{rust}"
        );
        let json = serde_json::to_string(&f).unwrap();
        assert!(json.contains("\"dir\":\"/dev/shm/db1\""), "{json}");
        let none = serde_json::to_string(&Fix::Remove {
            name: "x".into(),
            backend: "sysv".into(),
            dir: None,
        })
        .unwrap();
        assert!(!none.contains("dir"), "{none}");
    }

    #[test]
    fn cgroup_limits_name_both_files_and_the_pod_resource() {
        let f = Fix::RaiseCgroupLimit {
            page_size_bytes: 2 << 20,
            file: Some("/sys/fs/cgroup/pod/hugetlb.2MB.max".into()),
            bytes: 64 << 20,
        };
        assert_eq!(
            f.to_string(),
            "echo 67108864 > /sys/fs/cgroup/pod/hugetlb.2MB.max && echo 67108864 > \
             /sys/fs/cgroup/pod/hugetlb.2MB.rsvd.max (Kubernetes: \
             resources.limits.hugepages-2Mi: 64Mi)"
        );
        // From the reservation limit, both files too.
        let rsvd = Fix::RaiseCgroupLimit {
            page_size_bytes: 2 << 20,
            file: Some("/sys/fs/cgroup/pod/hugetlb.2MB.rsvd.max".into()),
            bytes: 64 << 20,
        };
        assert!(
            rsvd.to_string().starts_with(
                "echo 67108864 > /sys/fs/cgroup/pod/hugetlb.2MB.max && echo 67108864 > \
                 /sys/fs/cgroup/pod/hugetlb.2MB.rsvd.max (Kubernetes"
            ),
            "{rsvd}"
        );
        let v1 = Fix::RaiseCgroupLimit {
            page_size_bytes: 2 << 20,
            file: Some("/sys/fs/cgroup/hugetlb/pod/hugetlb.2MB.limit_in_bytes".into()),
            bytes: 2 << 20,
        };
        assert!(
            v1.to_string().contains(
                "&& echo 2097152 > /sys/fs/cgroup/hugetlb/pod/hugetlb.2MB.rsvd.limit_in_bytes"
            ),
            "{v1}"
        );
        assert_eq!(k8s_quantity(3 << 30), "3Gi");
        assert_eq!(k8s_quantity(4097), "4097");
    }

    #[test]
    fn a_dax_fix_names_each_cause_and_hugeshm_s_own_way() {
        let f = Fix::AlignDax {
            causes: vec![DaxCause::FileOffset, DaxCause::NamespaceAlign],
            path: "/mnt/pmem/db".into(),
            offset: 4096,
            namespace: Some("namespace0.0".into()),
            region: false,
        };
        let cli = f.render(Renderer::Cli);
        assert_eq!(
            cli,
            "map /mnt/pmem/db at a file offset that is a multiple of 2 MiB (not 4096: 4 KiB \
             past a 2 MiB boundary); recreate its namespace with a 2 MiB alignment (its data is \
             lost): ndctl create-namespace -f -e namespace0.0 --mode=fsdax --align=2M; or let \
             hugeshm make it: hugeshm create NAME --backend dax (allocated whole, mapped at \
             2 MiB, MAP_SYNC)"
        );
        assert!(f.render(Renderer::C).contains("HUGESHM_BACKEND_DAX"));
        assert!(f.to_string().contains("Backend::Dax"));
        let e = Fix::AlignDax {
            causes: vec![DaxCause::Extents],
            path: "/mnt/pmem/db".into(),
            offset: 0,
            namespace: None,
            region: false,
        };
        assert!(e.to_string().contains("stride=512,stripe_width=512"), "{e}");
        // A hugeshm region: only the file system can be at fault, and
        // hugeshm create is not offered as the way out.
        let r = Fix::AlignDax {
            causes: vec![DaxCause::Extents],
            path: "/mnt/pmem/hugeshm.pm".into(),
            offset: 0,
            namespace: None,
            region: true,
        };
        assert_eq!(
            r.render(Renderer::Cli),
            "its file system did not give /mnt/pmem/hugeshm.pm 2 MiB-aligned blocks: make it \
             with mkfs.ext4 -b 4096 -E stride=512,stripe_width=512 (or mkfs.xfs -d su=2m,sw=1) \
             and create the region again"
        );
        assert!(e.to_string().contains("su=2m,sw=1"), "{e}");
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["kind"], "align-dax");
        assert_eq!(v["causes"][0], "file-offset");
        assert_eq!(serde_json::from_value::<Fix>(v).unwrap(), f);
    }

    #[test]
    fn json_is_a_tagged_object() {
        let f = Fix::SetPool {
            page_size_bytes: 2 << 20,
            node: Some(1),
            pages: 12,
            default_size: true,
        };
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["kind"], "set-pool");
        assert_eq!(v["pages"], 12);
        let back: Fix = serde_json::from_value(v).unwrap();
        assert_eq!(back, f);
    }

    #[test]
    fn host_tuning_fixes() {
        let d = Fix::Demote {
            page_size_bytes: 1 << 30,
            to_page_size_bytes: 2 << 20,
            pages: 2,
            set_demote_size: false,
        };
        assert_eq!(
            d.to_string(),
            "echo 2 > /sys/kernel/mm/hugepages/hugepages-1048576kB/demote   # 2 free 1G pages become 1024 2M pages"
        );
        let d = Fix::Demote {
            page_size_bytes: 1 << 30,
            to_page_size_bytes: 2 << 20,
            pages: 1,
            set_demote_size: true,
        };
        assert!(d.to_string().starts_with(
            "echo 2048kB > /sys/kernel/mm/hugepages/hugepages-1048576kB/demote_size && echo 1 > "
        ));
        let b = Fix::ReserveAtBoot {
            page_size_bytes: 1 << 30,
            pages: 4,
            on_cmdline: false,
        };
        assert!(b
            .to_string()
            .starts_with("hugepagesz=1G hugepages=4 on the kernel command line"));
        assert!(b.to_string().contains("hugetlb_cma=4G"));
        let b = Fix::ReserveAtBoot {
            page_size_bytes: 1 << 30,
            pages: 8,
            on_cmdline: true,
        };
        assert!(
            b.to_string().contains("already: boot with hugetlb_cma=8G"),
            "{b}"
        );
        assert!(Fix::MinFreeKbytes { kib: 67584 }
            .to_string()
            .starts_with("sysctl -w vm.min_free_kbytes=67584 && echo 'vm.min_free_kbytes = 67584' > /etc/sysctl.d/"));
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v["kind"], "demote");
    }

    #[test]
    fn dax_flag_says_how_to_set_it_and_when_it_applies() {
        let f = Fix::DaxFlag {
            path: "/mnt/pmem/plain".to_owned(),
            fstype: "ext4".to_owned(),
            flag_set: false,
        };
        let t = f.render(Renderer::Cli);
        assert!(
            t.starts_with("set its DAX flag: chattr +x /mnt/pmem/plain;"),
            "{t}"
        );
        assert!(
            t.contains("in a directory with the flag (chattr +x /mnt/pmem)"),
            "{t}"
        );
        assert!(
            t.contains("stop every process that has it open or mapped"),
            "{t}"
        );
        let x = Fix::DaxFlag {
            path: "/x/f".to_owned(),
            fstype: "xfs".to_owned(),
            flag_set: true,
        };
        let t = x.render(Renderer::Cli);
        assert!(
            t.starts_with("its DAX flag is set but not in force: the kernel applies"),
            "{t}"
        );
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["kind"], "dax-flag");
        assert_eq!(serde_json::from_value::<Fix>(v).unwrap(), f);
        let xf = Fix::DaxFlag {
            path: "/x/f".to_owned(),
            fstype: "xfs".to_owned(),
            flag_set: false,
        };
        assert!(xf
            .render(Renderer::Cli)
            .contains("xfs_io -c 'chattr +x' /x/f"));
    }

    #[test]
    fn grow_device_dax_names_the_capacity_and_the_devdax_namespace() {
        let f = Fix::GrowDeviceDax {
            device: "/dev/dax0.1".to_owned(),
            size_bytes: 110 << 20,
            align_bytes: 2 << 20,
            missing_bytes: 914 << 20,
        };
        let t = f.render(Renderer::Cli);
        assert!(
            t.starts_with("ask for at most 110 MiB (the capacity of /dev/dax0.1)"),
            "{t}"
        );
        assert!(t.contains("a namespace 914 MiB larger"), "{t}");
        assert!(t.contains("--mode=devdax --align=2M"), "{t}");
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["kind"], "grow-device-dax");
        assert_eq!(serde_json::from_value::<Fix>(v).unwrap(), f);
    }
}
