//! [`Fix::render`]: each fix in the words of each front end, one file per
//! family of fix. [`render`] names the family function of every variant
//! (a new variant does not compile until it has one); each family's
//! functions take the variant's fields.
//!
//! - `pools`: the huge page pools: set, set per node, demote, reserve at
//!   boot, a size the kernel lacks ([`pool_command`] spells every resize).
//! - `sysctl`: sysctls and the memlock limit.
//! - `cgroup`: hugetlb cgroup limits and the pod resource that sets them.
//! - `mounts`: mounts and file systems (hugetlbfs, tmpfs `huge=`, room, owner).
//! - `dax`: persistent memory: room, 2 MiB faults, a file's DAX flag.
//! - `regions`: hugeshm's own operations on a region, in each front
//!   end's words (another backend, reclaim, remove, trust an owner).
//!
//! Names and paths go into commands through [`shell_quote`](crate::shell_quote).

mod cgroup;
mod dax;
mod mounts;
mod pools;
mod regions;
mod sysctl;

pub use cgroup::k8s_quantity;
pub use pools::{nr_hugepages_path, pool_command};

use crate::{Fix, Renderer};

/// The fix as text for `who`.
pub(crate) fn render(fix: &Fix, who: Renderer) -> String {
    match fix {
        Fix::SetPool {
            page_size_bytes,
            node,
            pages,
            default_size,
        } => pool_command(*page_size_bytes, *pages, *default_size, *node),
        Fix::SetNodePools {
            page_size_bytes,
            pools,
        } => pools::node_pools(*page_size_bytes, pools),
        Fix::RetryOrCheckLimits {
            page_size_bytes,
            available,
        } => pools::retry_or_check_limits(*page_size_bytes, *available),
        Fix::BootPageSize { page_size_bytes } => pools::boot_page_size(*page_size_bytes),
        Fix::Demote {
            page_size_bytes,
            to_page_size_bytes,
            pages,
            set_demote_size,
        } => pools::demote(
            *page_size_bytes,
            *to_page_size_bytes,
            *pages,
            *set_demote_size,
        ),
        Fix::ReserveAtBoot {
            page_size_bytes,
            pages,
            on_cmdline,
        } => pools::reserve_at_boot(*page_size_bytes, *pages, *on_cmdline),
        Fix::Sysctl { key, value } => sysctl::set(key, value),
        Fix::MinFreeKbytes { kib } => sysctl::min_free_kbytes(*kib),
        Fix::EnableHvo => sysctl::enable_hvo(),
        Fix::HugetlbShmGroup { gid, memlock_kib } => sysctl::hugetlb_shm_group(*gid, *memlock_kib),
        Fix::RaiseMemlock { user, kib } => sysctl::raise_memlock(user, *kib),
        Fix::RaiseCgroupLimit {
            page_size_bytes,
            file,
            bytes,
        } => cgroup::raise_limit(*page_size_bytes, file.as_deref(), *bytes),
        Fix::MountHugetlbfs {
            page_size_bytes,
            dir,
        } => mounts::mount_hugetlbfs(*page_size_bytes, dir),
        Fix::RemountTmpfsHuge { mount } => mounts::remount_tmpfs_huge(mount),
        Fix::ShmemEnabledNever => mounts::shmem_enabled_never(),
        Fix::ShmemEnabled { value, per_size } => mounts::shmem_enabled(value, *per_size),
        Fix::GrowFilesystem {
            mount,
            missing_bytes,
        } => mounts::grow_filesystem(mount, *missing_bytes),
        Fix::HugetlbfsOwner { dir, uid, gid } => mounts::hugetlbfs_owner(dir, *uid, *gid),
        Fix::MakeWritable { path } => mounts::make_writable(path),
        Fix::GrowDax {
            mount,
            missing_bytes,
        } => dax::grow(mount, *missing_bytes),
        Fix::GrowDeviceDax {
            device,
            size_bytes,
            align_bytes,
            missing_bytes,
        } => dax::grow_device(device, *size_bytes, *align_bytes, *missing_bytes),
        Fix::AlignDax {
            causes,
            path,
            offset,
            namespace,
            region,
        } => dax::align(who, causes, path, *offset, namespace.as_deref(), *region),
        Fix::DaxFlag {
            path,
            fstype,
            flag_set,
        } => dax::flag(path, fstype, *flag_set),
        Fix::OtherBackend { page_size_bytes } => regions::other_backend(who, *page_size_bytes),
        Fix::FreeMemory {
            missing_bytes,
            on_demand,
        } => regions::free_memory(who, *missing_bytes, *on_demand),
        Fix::RunAsOwner => regions::run_as_owner(),
        Fix::AttachOrRemove {
            name,
            backend,
            dir,
            holders,
        } => regions::attach_or_remove(who, name, backend, dir.as_deref(), holders),
        Fix::Reclaim {
            name,
            backend,
            dir,
            keep_contents,
        } => regions::reclaim(who, name, backend, dir.as_deref(), *keep_contents),
        Fix::Remove { name, backend, dir } => regions::remove(who, name, backend, dir.as_deref()),
        Fix::TrustOwner {
            name,
            backend,
            dir,
            uid,
            mode,
        } => regions::trust_owner(who, name, backend, dir.as_deref(), *uid, *mode),
        Fix::IpcRm { shmid } => regions::ipc_rm(*shmid),
        Fix::WaitUntilReady => regions::wait_until_ready(),
        Fix::NewerHugeshm => regions::newer_hugeshm(),
    }
}
