//! What a shared object on 4 KiB pages can become without its owner's
//! restart: its 2 MiB blocks collapsed onto transparent huge pages in
//! place (`hugeshm collapse`, `MADV_COLLAPSE`) where the kernel, the THP
//! settings and the mapping's alignment allow it; and what an object
//! already collapsed is (THP, not hugetlb: not reserved, and split again
//! under memory pressure or swap).

use super::Segment;
use crate::collapse::kernel_has_collapse;
use crate::finding::{Finding, Severity};
use hugeshm_parse::size::{format_bytes, BASE_PAGE, MIB};
use hugeshm_probe::HostSnapshot;

/// Whether a segment on 4 KiB pages can be collapsed in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum InPlace {
    /// Yes, by `hugeshm collapse --pid` of this process (its creator where
    /// it maps it, else the first one that does).
    Collapse {
        /// The process to name.
        pid: u32,
    },
    /// Its mapping is not 2 MiB-aligned to its offset: only a restart can
    /// help (with `shmem_enabled = advise` the kernel aligns it).
    Unaligned,
    /// Not here: not shmem, no process sampled, a kernel before 6.1,
    /// `shmem_enabled = deny`, or the per-size switch of shared anonymous
    /// memory at `never`.
    No,
}

/// Whether `seg` (on 4 KiB pages) can be collapsed in place on `host`.
pub(super) fn in_place(seg: &Segment, host: &HostSnapshot) -> InPlace {
    let kernel_ok = host
        .sysctl
        .osrelease
        .as_deref()
        .and_then(kernel_has_collapse)
        != Some(false);
    let selected = |s: &Option<hugeshm_parse::thp::Selector>| {
        s.as_ref().map(|s| s.selected.clone()).unwrap_or_default()
    };
    let deny = selected(&host.thp.shmem_enabled) == "deny";
    let per_size_never = seg.kind != super::SegmentKind::Sysv
        && seg.kind != super::SegmentKind::Posix
        && selected(&host.thp.shmem_enabled_2m) == "never";
    if !seg.kind.in_shmem() || !kernel_ok || deny || per_size_never {
        return InPlace::No;
    }
    let pid = seg
        .creator_pid
        .filter(|c| seg.attached.iter().any(|a| a.pid == *c))
        .or_else(|| seg.attached.first().map(|a| a.pid));
    match (seg.collapse_aligned, pid) {
        (Some(true), Some(pid)) => InPlace::Collapse { pid },
        (Some(false), _) => InPlace::Unaligned,
        _ => InPlace::No,
    }
}

/// The bytes of `seg` in whole 2 MiB blocks: what a collapse can map by PMD.
fn block_bytes(seg: &Segment) -> u64 {
    seg.size_bytes / (2 * MIB) * (2 * MIB)
}

/// Whether `seg`, on base pages, is mapped by PMD over every whole block
/// (collapsed, or faulted as THP) in the process sampled.
pub(super) fn on_thp(seg: &Segment) -> bool {
    seg.page_size_bytes == Some(BASE_PAGE)
        && seg.kind.in_shmem()
        && block_bytes(seg) > 0
        && seg.thp_bytes.is_some_and(|t| t >= block_bytes(seg))
}

/// What to add to a finding of `seg` on 4 KiB pages: part of it on THP
/// (collapsed and split again since, or never finished), and whether it
/// can be collapsed in place.
pub(super) fn note(seg: &Segment, how: InPlace) -> String {
    let mut s = String::new();
    if let Some(t) = seg.thp_bytes.filter(|t| *t > 0) {
        s.push_str(&format!(
            "; {} of it is on 2 MiB transparent huge pages, the rest on 4 KiB (not collapsed, or \
             split again since)",
            format_bytes(t)
        ));
    }
    if how == InPlace::Unaligned {
        s.push_str(
            "; its mapping is not 2 MiB-aligned, so it cannot move onto 2 MiB pages in place \
             (started with transparent_hugepage/shmem_enabled = advise, the kernel aligns it)",
        );
    }
    s
}

/// The fix that needs no restart, where there is one.
pub(super) fn collapse_fix(how: InPlace) -> Option<String> {
    match how {
        InPlace::Collapse { pid } => Some(format!(
            "hugeshm collapse --pid {pid}   # now, no restart: onto 2 MiB transparent huge pages"
        )),
        _ => None,
    }
}

/// `thp-shmem`: `seg` sits on 2 MiB transparent huge pages (collapsed in
/// place), which hugetlb pages are not: what that does not give.
pub(super) fn thp_shmem(seg: &Segment, label: &str) -> Finding {
    Finding::new(
        Severity::Info,
        "thp-shmem",
        format!(
            "{label} ({}) is on 2 MiB transparent huge pages ({} mapped as 2 MiB pages in the \
             process sampled), not hugetlb ones: they are not reserved, and the kernel may split \
             them again under memory pressure or when it swaps shmem out",
            format_bytes(seg.size_bytes),
            format_bytes(seg.thp_bytes.unwrap_or(0))
        ),
        seg.kind.huge_on_request().then(|| {
            "hugeshm advise   # hugetlb pages for its next start, with huge pages required"
                .to_owned()
        }),
    )
}
