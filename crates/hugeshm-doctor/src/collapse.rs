//! What `hugeshm collapse` may move onto 2 MiB pages in place, and what
//! refuses it: the plan, read from the kernel before anything is touched.
//!
//! `MADV_COLLAPSE` (Linux 6.1), asked of another process through
//! `process_madvise`, copies each whole 2 MiB block of shmem (a SysV
//! segment, shared anonymous memory, a memfd, a file in a tmpfs such as
//! /dev/shm) into one transparent huge page of the page cache and takes
//! the old page tables away from every process that maps the block. The
//! kernel's rules (mm/khugepaged.c, mm/shmem.c):
//! - a mapping can hold a 2 MiB page only where its address is 2 MiB-aligned
//!   relative to its offset in the object (`(start - offset) % 2 MiB == 0`);
//!   a server that mapped its memory elsewhere cannot be moved in place,
//!   only restarted with a setting that makes the kernel align it;
//! - `shmem_enabled = deny` refuses every collapse of shmem; on 6.18 the
//!   2 MiB size's own switch (`hugepages-2048kB/shmem_enabled`) at `never`
//!   refuses it for shared anonymous memory and memfds;
//! - a mapping the process marked `MADV_NOHUGEPAGE` (`nh`), a process that
//!   turned THP off (`THP_enabled: 0`) and hugetlb memory are refused;
//! - pages of a block that nobody touched are filled with zeros: the object
//!   grows by up to its untouched part.
//!
//! Nothing here writes: [`plan`] reads through the probe and says what a
//! collapse would do; `hugeshm-apply::collapse` does it.

use hugeshm_fix::Fix;
use hugeshm_parse::maps::MapsEntry;
use hugeshm_parse::size::format_bytes;
use hugeshm_parse::smaps::SmapsEntry;
use hugeshm_probe::{HostSnapshot, Probe, SysvMapping};
use serde::Serialize;

/// The transparent huge page size that shmem collapses into.
pub const BLOCK: u64 = 2 << 20;

/// Which mappings of the process to collapse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Selection {
    /// Every shmem mapping of at least one block.
    #[default]
    All,
    /// The attachments of this SysV segment.
    Shmid(u64),
    /// The mapping that holds this address.
    Address(u64),
}

/// What kind of shmem a mapping is, as the kernel names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ShmemKind {
    /// A SysV segment (an attachment the kernel vouches for).
    Sysv {
        /// Its id.
        shmid: u64,
    },
    /// `MAP_SHARED | MAP_ANONYMOUS` (`/dev/zero (deleted)`).
    SharedAnonymous,
    /// A memfd (`/memfd:NAME`).
    Memfd,
    /// A file in a tmpfs (`/dev/shm/NAME`).
    TmpfsFile,
}

/// Why a mapping is not collapsed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum Skip {
    /// Its address is not 2 MiB-aligned relative to its offset.
    Unaligned {
        /// How far off a 2 MiB boundary.
        off_by_bytes: u64,
    },
    /// The process marked it `MADV_NOHUGEPAGE`.
    NoHugepage,
    /// Every block is mapped with 2 MiB pages already.
    AlreadyHuge,
    /// The 2 MiB size's own `shmem_enabled` is `never` (Linux 6.18 reads it
    /// for shared anonymous memory and memfds).
    PerSizeNever,
}

impl std::fmt::Display for Skip {
    /// Why a mapping is left, in words.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::Unaligned { off_by_bytes } => write!(
                f,
                "unaligned ({} off 2 MiB): cannot move in place; aligned at the next start with \
                 shmem_enabled=advise",
                format_bytes(*off_by_bytes)
            ),
            Skip::NoHugepage => f.write_str("MADV_NOHUGEPAGE: left"),
            Skip::AlreadyHuge => f.write_str("on 2 MiB pages already"),
            Skip::PerSizeNever => {
                f.write_str("hugepages-2048kB/shmem_enabled is never: left (set it to inherit)")
            }
        }
    }
}

/// One shmem mapping of the process.
#[derive(Debug, Clone, Serialize)]
pub struct ShmemMapping {
    /// First address.
    pub start: u64,
    /// End (exclusive).
    pub end: u64,
    /// Offset in the object.
    pub offset: u64,
    /// What it is.
    #[serde(flatten)]
    pub kind: ShmemKind,
    /// The kernel's name for it (`/SYSV00000000 (deleted)`, a path),
    /// escaped by the printer.
    pub name: String,
    /// The object: device and inode (the same in every process mapping it).
    pub dev: (u32, u32),
    /// The object's inode.
    pub inode: u64,
    /// `Rss` in this process.
    pub rss_bytes: u64,
    /// `ShmemPmdMapped` in this process: already on 2 MiB pages.
    pub pmd_mapped_bytes: u64,
    /// The whole 2 MiB blocks the mapping holds, from [`Self::first_block`].
    pub blocks: u64,
    /// The address of the first whole block.
    pub first_block: u64,
    /// Why it is left as it is (`None`: it is collapsed).
    pub skip: Option<Skip>,
}

impl ShmemMapping {
    /// Whether a collapse works on it.
    pub fn collapsible(&self) -> bool {
        self.skip.is_none()
    }

    /// The bytes of its whole blocks.
    pub fn block_bytes(&self) -> u64 {
        self.blocks * BLOCK
    }
}

/// Why no collapse can start (exit 2 in the CLI), with the fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "refusal", rename_all = "kebab-case")]
pub enum Refusal {
    /// No such process.
    NoProcess {
        /// The pid asked for.
        pid: u32,
    },
    /// The kernel is older than 6.1 (no `MADV_COLLAPSE`).
    Kernel {
        /// `kernel.osrelease`.
        release: String,
    },
    /// `shmem_enabled = deny`.
    ShmemDeny,
    /// The process turned THP off (`prctl(PR_SET_THP_DISABLE)`).
    ThpDisabled {
        /// The process.
        pid: u32,
    },
    /// Nothing the selection names can be collapsed.
    Nothing {
        /// What was looked for and found.
        what: String,
    },
    /// The process's memory cannot be read or advised by this user.
    NotPermitted {
        /// The process.
        pid: u32,
        /// What was refused.
        what: String,
    },
    /// Not enough memory for the pages the collapse fills.
    Memory {
        /// What it may need.
        need_bytes: u64,
        /// `MemAvailable`.
        available_bytes: u64,
    },
}

impl Refusal {
    /// The refusal in words.
    pub fn message(&self) -> String {
        match self {
            Refusal::NoProcess { pid } => format!("no process {pid}"),
            Refusal::Kernel { release } => format!(
                "this kernel ({release}) has no MADV_COLLAPSE: moving shared memory onto 2 MiB \
                 pages in place needs Linux 6.1 or later"
            ),
            Refusal::ShmemDeny => "transparent_hugepage/shmem_enabled is `deny`: the kernel \
                                   refuses every huge page of shared memory, a collapse too"
                .to_owned(),
            Refusal::ThpDisabled { pid } => format!(
                "process {pid} turned transparent huge pages off (prctl PR_SET_THP_DISABLE, \
                 THP_enabled: 0 in its status): the kernel refuses to collapse its memory"
            ),
            Refusal::Nothing { what } => what.clone(),
            Refusal::NotPermitted { pid, what } => format!(
                "process {pid}: {what}; collapsing another process's memory needs CAP_SYS_NICE \
                 and leave to read its memory (run as root)"
            ),
            Refusal::Memory {
                need_bytes,
                available_bytes,
            } => format!(
                "the collapse may need {} of memory (the untouched pages of its blocks are filled \
                 with zeros, and each block is copied before its pages are freed), and {} is \
                 available: free memory, or collapse one segment at a time (--shmid, --address)",
                format_bytes(*need_bytes),
                format_bytes(*available_bytes)
            ),
        }
    }

    /// What to do about it.
    pub fn fix(&self) -> Option<Fix> {
        match self {
            Refusal::ShmemDeny => Some(Fix::ShmemEnabled {
                value: "advise".into(),
                per_size: false,
            }),
            _ => None,
        }
    }
}

/// The THP settings and memory a collapse depends on.
#[derive(Debug, Clone, Serialize)]
pub struct CollapseHost {
    /// `kernel.osrelease`.
    pub kernel: Option<String>,
    /// `transparent_hugepage/shmem_enabled`.
    pub shmem_enabled: Option<String>,
    /// `transparent_hugepage/hugepages-2048kB/shmem_enabled` (6.11+).
    pub shmem_enabled_2m: Option<String>,
    /// `MemAvailable`.
    pub available_bytes: Option<u64>,
    /// Free 2 MiB blocks (and larger, counted in 2 MiB) per node, from
    /// /proc/buddyinfo: a collapse takes one for each block; without them
    /// the kernel compacts memory first (slower).
    pub free_blocks: Vec<(u32, u64)>,
}

/// What `collapse` will do for one process.
#[derive(Debug, Clone, Serialize)]
pub struct CollapsePlan {
    /// The process.
    pub pid: u32,
    /// Its name (`comm`), escaped by the printer.
    pub comm: String,
    /// Its `VmPTE` now.
    pub vm_pte_bytes: Option<u64>,
    /// The host's side.
    pub host: CollapseHost,
    /// Every shmem mapping the selection names.
    pub mappings: Vec<ShmemMapping>,
    /// Bytes of the shared hugetlb mappings the selection names: on huge
    /// pages already, nothing a collapse does.
    pub hugetlb_bytes: u64,
    /// Bytes of the collapsible mappings on each NUMA node (the process's
    /// numa_maps): the kernel puts each new 2 MiB page on the node that
    /// holds most of its block.
    pub node_bytes: Vec<(u32, u64)>,
    /// The CPUs of those nodes, where the copies run (one thread per CPU
    /// by default, as the pre-fault); empty where the host does not say.
    pub cpus: Vec<u32>,
    /// Blocks copied at once: the count asked for, else one per CPU of
    /// `cpus`, else one per CPU (what the memory check counted).
    #[serde(skip)]
    pub threads: usize,
    /// The most the collapse may add to memory (the untouched pages its
    /// blocks are filled with).
    pub growth_bytes: u64,
    /// Why it cannot start, if so.
    pub refusal: Option<Refusal>,
}

impl CollapsePlan {
    /// The mappings a collapse works on.
    pub fn collapsible(&self) -> impl Iterator<Item = &ShmemMapping> {
        self.mappings.iter().filter(|m| m.collapsible())
    }

    /// The bytes of the blocks it works on.
    pub fn total_bytes(&self) -> u64 {
        self.collapsible().map(ShmemMapping::block_bytes).sum()
    }
}

/// Whether `release` (`6.18.0-1-amd64`) is 6.1 or later; `None` when it
/// does not start with two numbers.
pub fn kernel_has_collapse(release: &str) -> Option<bool> {
    let mut it = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().ok());
    let major = it.next()??;
    let minor = it.next()??;
    Some((major, minor) >= (6, 1))
}

/// What kind of shmem `m` is; `None` when it is not shmem a collapse can
/// reach (private, hugetlb, a file outside a tmpfs).
fn shmem_kind(
    probe: &Probe,
    pid: u32,
    sysv: &hugeshm_probe::SysvAttachments,
    tmpfs: &[String],
    m: &MapsEntry,
) -> Option<ShmemKind> {
    let name = m.pathname.as_deref()?;
    if let Some(v) = sysv.of(probe, pid, m) {
        return match v {
            SysvMapping::Here(shmid) | SysvMapping::Elsewhere { shmid, .. } => {
                Some(ShmemKind::Sysv { shmid })
            }
            SysvMapping::LookAlike => None,
        };
    }
    if name == "/dev/zero" && m.deleted {
        return Some(ShmemKind::SharedAnonymous);
    }
    if name.starts_with("/memfd:") {
        return Some(ShmemKind::Memfd);
    }
    tmpfs
        .iter()
        .any(|t| {
            name.strip_prefix(t.as_str())
                .is_some_and(|r| r.starts_with('/'))
        })
        .then_some(ShmemKind::TmpfsFile)
}

/// The blocks of `e` and why it is skipped, if so.
fn judge(e: &SmapsEntry, kind: &ShmemKind, per_size_never: bool) -> ShmemMapping {
    let m = &e.map;
    let misalign = m.start.wrapping_sub(m.offset) % BLOCK;
    let first = m.start.div_ceil(BLOCK) * BLOCK;
    let blocks = if misalign == 0 && first < m.end {
        (m.end - first) / BLOCK
    } else {
        0
    };
    let pmd = e.shmem_pmd_mapped_bytes.unwrap_or(0);
    let skip = if misalign != 0 {
        Some(Skip::Unaligned {
            off_by_bytes: misalign,
        })
    } else if e.vm_flags.iter().any(|f| f == "nh") {
        Some(Skip::NoHugepage)
    } else if per_size_never && matches!(kind, ShmemKind::SharedAnonymous | ShmemKind::Memfd) {
        Some(Skip::PerSizeNever)
    } else if pmd >= blocks * BLOCK {
        Some(Skip::AlreadyHuge)
    } else {
        None
    };
    ShmemMapping {
        start: m.start,
        end: m.end,
        offset: m.offset,
        kind: kind.clone(),
        name: match &m.pathname {
            Some(p) if m.deleted => format!("{p} (deleted)"),
            Some(p) => p.clone(),
            None => String::new(),
        },
        dev: (m.dev_major, m.dev_minor),
        inode: m.inode,
        rss_bytes: e.rss_bytes,
        pmd_mapped_bytes: pmd,
        blocks,
        first_block: first,
        skip,
    }
}

fn host_side(host: &HostSnapshot) -> CollapseHost {
    let mut free_blocks: Vec<(u32, u64)> = Vec::new();
    for z in &host.buddyinfo {
        let n: u64 = z
            .free_blocks
            .iter()
            .enumerate()
            .skip(9)
            .map(|(order, count)| count.saturating_mul(1 << (order - 9)))
            .sum();
        match free_blocks.iter_mut().find(|(node, _)| *node == z.node) {
            Some(e) => e.1 += n,
            None => free_blocks.push((z.node, n)),
        }
    }
    CollapseHost {
        kernel: host.sysctl.osrelease.clone(),
        shmem_enabled: host.thp.shmem_enabled.as_ref().map(|s| s.selected.clone()),
        shmem_enabled_2m: host
            .thp
            .shmem_enabled_2m
            .as_ref()
            .map(|s| s.selected.clone()),
        available_bytes: host.meminfo.as_ref().and_then(|m| m.mem_available_bytes),
        free_blocks,
    }
}

/// What a collapse of `pid`'s shmem (the `selection` of it) would do, and
/// why it cannot start, if so. `threads`: blocks copied at once (each needs
/// a free 2 MiB page before it frees its small ones); 0: one per CPU of the
/// nodes that hold the memory, else one per CPU.
pub fn plan(probe: &Probe, pid: u32, selection: Selection, threads: usize) -> CollapsePlan {
    let host = probe.host();
    let files = probe.pid(pid);
    let status = files.status().ok();
    let mut plan = CollapsePlan {
        pid,
        comm: status.as_ref().map(|s| s.name.clone()).unwrap_or_default(),
        vm_pte_bytes: status.as_ref().and_then(|s| s.vm_pte_bytes),
        host: host_side(&host),
        mappings: Vec::new(),
        hugetlb_bytes: 0,
        node_bytes: Vec::new(),
        cpus: Vec::new(),
        threads,
        growth_bytes: 0,
        refusal: None,
    };
    let smaps = match files.smaps() {
        Ok(s) => s,
        Err(e) if e.is_not_found() => {
            plan.refusal = Some(Refusal::NoProcess { pid });
            return plan;
        }
        Err(e) => {
            plan.refusal = Some(Refusal::NotPermitted {
                pid,
                what: e.to_string(),
            });
            return plan;
        }
    };
    let sysv = probe.sysv_attachments(Some(&host.shm));
    let tmpfs: Vec<String> = host
        .mounts
        .iter()
        .filter(|m| m.fstype == "tmpfs")
        .map(|m| m.target.trim_end_matches('/').to_owned())
        .collect();
    let per_size_never = plan.host.shmem_enabled_2m.as_deref() == Some("never");
    for e in &smaps {
        let m = &e.map;
        if !m.perms.shared || m.end - m.start < BLOCK {
            continue;
        }
        if let Selection::Address(a) = selection {
            if !(m.start..m.end).contains(&a) {
                continue;
            }
        }
        if e.is_hugetlb() {
            let named = match selection {
                Selection::Shmid(id) => matches!(
                    sysv.of(probe, pid, m),
                    Some(SysvMapping::Here(s) | SysvMapping::Elsewhere { shmid: s, .. }) if s == id
                ),
                _ => true,
            };
            if named {
                plan.hugetlb_bytes += m.end - m.start;
            }
            continue;
        }
        let Some(kind) = shmem_kind(probe, pid, &sysv, &tmpfs, m) else {
            continue;
        };
        if let Selection::Shmid(id) = selection {
            if kind != (ShmemKind::Sysv { shmid: id }) {
                continue;
            }
        }
        plan.mappings.push(judge(e, &kind, per_size_never));
    }
    // Where the memory is, and the CPUs there.
    if let Ok(numa) = files.numa_maps() {
        let mut nodes: std::collections::BTreeMap<u32, u64> = Default::default();
        for e in numa
            .iter()
            .filter(|e| plan.collapsible().any(|m| m.start == e.start))
        {
            for (n, b) in e.node_bytes() {
                *nodes.entry(n).or_default() += b;
            }
        }
        plan.cpus = host
            .nodes
            .iter()
            .filter(|n| nodes.contains_key(&n.node))
            .flat_map(|n| n.cpus.iter().copied())
            .collect();
        plan.node_bytes = nodes.into_iter().collect();
    }
    // The untouched part of each block is filled: at most what this
    // process does not map (other processes may have touched more; a SysV
    // segment's own resident size says how much).
    let resident = |m: &ShmemMapping| match m.kind {
        ShmemKind::Sysv { shmid } => host
            .shm
            .iter()
            .find(|s| u64::try_from(s.shmid).ok() == Some(shmid))
            .and_then(|s| s.rss_bytes)
            .unwrap_or(m.rss_bytes)
            .max(m.rss_bytes),
        _ => m.rss_bytes,
    };
    plan.growth_bytes = plan
        .collapsible()
        .map(|m| m.block_bytes().saturating_sub(resident(m)))
        .sum();
    // 0: one thread per CPU of the memory's nodes, else per CPU.
    if plan.threads == 0 {
        plan.threads = match plan.cpus.len() {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
    }
    plan.refusal = refusal(&plan, status.and_then(|s| s.thp_enabled));
    if plan.refusal.is_none() && !may_advise_others(probe, pid) {
        plan.refusal = Some(Refusal::NotPermitted {
            pid,
            what: "this process has no CAP_SYS_NICE".to_owned(),
        });
    }
    plan
}

/// Whether this process may ask `MADV_COLLAPSE` of process `pid`: its own
/// memory, or `CAP_SYS_NICE` (bit 23 of `CapEff`; Linux 6.1 wants it for
/// its own memory too, which a collapse of another process never is).
fn may_advise_others(probe: &Probe, pid: u32) -> bool {
    const CAP_SYS_NICE: u32 = 23;
    let me = std::process::id();
    match probe.pid(me).status() {
        _ if me == pid => true,
        Ok(s) => s.cap_eff.is_some_and(|c| c & (1 << CAP_SYS_NICE) != 0),
        Err(_) => true,
    }
}

/// What the host refuses before any process or file is looked at: a
/// kernel before 6.1, `shmem_enabled = deny`.
pub fn host_refusal(host: &HostSnapshot) -> Option<Refusal> {
    refuse_host(&host_side(host))
}

fn refuse_host(h: &CollapseHost) -> Option<Refusal> {
    if let Some(r) = &h.kernel {
        if kernel_has_collapse(r) == Some(false) {
            return Some(Refusal::Kernel { release: r.clone() });
        }
    }
    (h.shmem_enabled.as_deref() == Some("deny")).then_some(Refusal::ShmemDeny)
}

fn refusal(plan: &CollapsePlan, thp_enabled: Option<bool>) -> Option<Refusal> {
    let h = &plan.host;
    if let Some(r) = refuse_host(h) {
        return Some(r);
    }
    if thp_enabled == Some(false) {
        return Some(Refusal::ThpDisabled { pid: plan.pid });
    }
    let all_huge = plan
        .mappings
        .iter()
        .all(|m| m.skip == Some(Skip::AlreadyHuge));
    if (plan.mappings.is_empty() || !all_huge) && plan.collapsible().next().is_none() {
        let what = if plan.mappings.is_empty() && plan.hugetlb_bytes > 0 {
            format!(
                "process {} ({}) has its shared memory on hugetlb pages already ({}): nothing to \
                 collapse",
                plan.pid,
                plan.comm,
                format_bytes(plan.hugetlb_bytes)
            )
        } else if plan.mappings.is_empty() {
            format!(
                "process {} ({}) maps no shared memory of at least 2 MiB that the kernel keeps \
                 in shmem (SysV, shared anonymous, memfd, tmpfs)",
                plan.pid, plan.comm
            )
        } else {
            let unaligned = plan
                .mappings
                .iter()
                .filter(|m| matches!(m.skip, Some(Skip::Unaligned { .. })))
                .count();
            let huge = plan
                .mappings
                .iter()
                .filter(|m| m.skip == Some(Skip::AlreadyHuge))
                .count();
            format!(
                "nothing to collapse in process {} ({}): of its {} shmem mapping(s), {huge} \
                 already on 2 MiB pages, {unaligned} mapped at an address that is not 2 MiB-aligned \
                 (those cannot be moved in place: the server's next start, with \
                 transparent_hugepage/shmem_enabled at `advise`, maps them aligned)",
                plan.pid,
                plan.comm,
                plan.mappings.len()
            )
        };
        return Some(Refusal::Nothing { what });
    }
    let need = plan.growth_bytes + BLOCK * plan.threads.max(1) as u64;
    match h.available_bytes {
        Some(available) if available < need => Some(Refusal::Memory {
            need_bytes: need,
            available_bytes: available,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_from_6_1_have_the_collapse() {
        assert_eq!(kernel_has_collapse("6.18.0-1-amd64"), Some(true));
        assert_eq!(kernel_has_collapse("6.1.0"), Some(true));
        assert_eq!(kernel_has_collapse("5.15.0-91-generic"), Some(false));
        assert_eq!(kernel_has_collapse("6.0"), Some(false));
        assert_eq!(kernel_has_collapse("x"), None);
    }

    fn entry(start: u64, end: u64, offset: u64, flags: &[&str], pmd: u64) -> SmapsEntry {
        let text = format!(
            "{start:x}-{end:x} rw-s {offset:08x} 00:01 42 /SYSV00000000 (deleted)\n\
             Size: {} kB\nRss: 8 kB\nShmemPmdMapped: {} kB\nVmFlags: rd wr sh {}\n",
            (end - start) / 1024,
            pmd / 1024,
            flags.join(" ")
        );
        hugeshm_parse::smaps::parse(&text).unwrap().remove(0)
    }

    #[test]
    fn a_mapping_collapses_only_where_it_is_aligned_to_its_offset() {
        let kind = ShmemKind::Sysv { shmid: 42 };
        // Aligned: 0x40000000, 8 MiB: four blocks.
        let m = judge(&entry(0x4000_0000, 0x4080_0000, 0, &[], 0), &kind, false);
        assert_eq!((m.blocks, m.first_block, m.skip), (4, 0x4000_0000, None));
        // 4 KiB off: no block can be PMD-mapped.
        let m = judge(&entry(0x4000_1000, 0x4080_1000, 0, &[], 0), &kind, false);
        assert_eq!(m.skip, Some(Skip::Unaligned { off_by_bytes: 4096 }));
        assert_eq!(m.blocks, 0);
        // A file mapped from offset 4 KiB at an address 4 KiB past a
        // boundary is congruent: its blocks start at the next boundary.
        let m = judge(
            &entry(0x4000_1000, 0x4080_1000, 0x1000, &[], 0),
            &ShmemKind::TmpfsFile,
            false,
        );
        assert_eq!((m.blocks, m.first_block, m.skip), (3, 0x4020_0000, None));
        // Marked MADV_NOHUGEPAGE, or already huge.
        let m = judge(
            &entry(0x4000_0000, 0x4040_0000, 0, &["nh"], 0),
            &kind,
            false,
        );
        assert_eq!(m.skip, Some(Skip::NoHugepage));
        let m = judge(
            &entry(0x4000_0000, 0x4040_0000, 0, &[], 4 << 20),
            &kind,
            false,
        );
        assert_eq!(m.skip, Some(Skip::AlreadyHuge));
        // The per-size switch at never holds back shared anonymous memory,
        // not SysV.
        assert_eq!(
            judge(
                &entry(0x4000_0000, 0x4040_0000, 0, &[], 0),
                &ShmemKind::SharedAnonymous,
                true
            )
            .skip,
            Some(Skip::PerSizeNever)
        );
        assert_eq!(
            judge(&entry(0x4000_0000, 0x4040_0000, 0, &[], 0), &kind, true).skip,
            None
        );
    }
}
