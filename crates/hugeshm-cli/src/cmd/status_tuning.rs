//! The `status` lines of the tuning section: `vm.min_free_kbytes`, HVO,
//! 1 GiB pages at run time, demotion (what `hugeadm --explain` says).

use hugeshm_doctor::tuning::TuningReport;
use hugeshm_parse::size::{format_bytes, page_size_short};

/// `(label, text)` rows for the Settings block; none for parts the host
/// did not show (files absent or unreadable).
pub fn rows(t: &TuningReport) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    if let Some(m) = &t.min_free {
        let verdict = if m.current_kib >= m.recommended_kib {
            "enough"
        } else {
            "low"
        };
        rows.push((
            "min_free_kbytes".to_string(),
            format!(
                "{} kB, {verdict} for growing pools at run time: recommended {} kB ({} pageblocks × {} zones × 11, khugepaged's and hugeadm's formula){}",
                m.current_kib,
                m.recommended_kib,
                format_bytes(m.pageblock_bytes),
                m.zones.len(),
                m.kernel_default_kib
                    .map(|d| format!("; the kernel's default without THP about {d} kB"))
                    .unwrap_or_default()
            ),
        ));
    }
    if let Some(v) = &t.vmemmap {
        let per: Vec<String> = v
            .sizes
            .iter()
            .map(|s| {
                format!(
                    "{} of the {} KiB per {} page",
                    s.saved_bytes / 1024,
                    s.struct_pages_bytes / 1024,
                    page_size_short(s.page_size_bytes)
                )
            })
            .collect();
        rows.push((
            "HVO".to_string(),
            if v.enabled {
                format!(
                    "hugetlb_optimize_vmemmap=1 (on): frees {} of struct pages (of pages allocated while on); for the pools now up to {}",
                    per.join(", "),
                    format_bytes(v.pools_saved_bytes)
                )
            } else {
                format!(
                    "hugetlb_optimize_vmemmap=0 (off): on, it would free {} of struct pages; for the pools now {}",
                    per.join(", "),
                    format_bytes(v.pools_saved_bytes)
                )
            },
        ));
    }
    if let Some(g) = &t.gigantic {
        let zones: Vec<String> = g
            .zones
            .iter()
            .filter(|z| z.free_bytes > 0)
            .map(|z| {
                let pinned = match (z.pinned_blocks, z.blocks) {
                    (Some(p), Some(b)) => format!(", {p}/{b} pageblocks unmovable"),
                    _ => String::new(),
                };
                format!(
                    "{} {} in {} blocks{pinned}",
                    z.zone,
                    format_bytes(z.free_max_block_bytes),
                    format_bytes(g.max_block_bytes)
                )
            })
            .collect();
        rows.push((
            "1G at run time".to_string(),
            format!(
                "at most {} page{} from free memory now, fewer where its blocks are not side by side ({})",
                g.pages_at_most,
                if g.pages_at_most == 1 { "" } else { "s" },
                zones.join("; ")
            ),
        ));
    }
    for d in &t.demote {
        rows.push((
            "demote".to_string(),
            format!(
                "{} pages split into {} pages ({} free to demote): echo N > /sys/kernel/mm/hugepages/hugepages-{}kB/demote",
                page_size_short(d.page_size_bytes),
                page_size_short(d.demote_size_bytes),
                d.available,
                d.page_size_bytes / 1024
            ),
        ));
    }
    rows
}
