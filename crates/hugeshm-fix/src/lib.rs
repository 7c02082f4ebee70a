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

pub use render::{k8s_quantity, nr_hugepages_path, pool_command};
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
    /// Set transparent huge pages' shmem switch: `advise` lets
    /// `MADV_COLLAPSE` move shared memory onto 2 MiB pages and makes the
    /// kernel map new shared memory 2 MiB-aligned, while nothing that did
    /// not ask gets huge pages on fault.
    ShmemEnabled {
        /// The value (`advise`).
        value: String,
        /// The 2 MiB size's own switch (`hugepages-2048kB/shmem_enabled`,
        /// Linux 6.11+) rather than the global one.
        per_size: bool,
    },
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
}
