//! `jvm-base-pages`: a JVM (its exe named `java`) that asked for large
//! pages (`-XX:+UseLargePages` on its command line or in the option
//! variables of its environment) and has a part of what that puts on huge
//! pages ([`crate::jvm::huge_parts`]: heap, code cache, GC tables) on base
//! pages. OpenJDK reserves each part at start with one `MAP_HUGETLB`
//! mapping; where the pool is short it warns and maps the part on base
//! pages. Each mapping on huge pages is a mapping of its own, of the part's
//! exact size (`/anon_hugepage`): a part whose size no huge page mapping of
//! the process has is one that fell back. SysV (`-XX:+UseSHM`) is left to
//! the segments' own findings.

use super::servers::{private_mappings, ServerProcess};
use crate::finding::{plural, Finding, Severity};
use crate::jvm::{huge_parts, jvm_options, resolve, JvmPart};
use hugeshm_parse::jvm_args;
use hugeshm_parse::size::{format_bytes, MIB};
use hugeshm_probe::jvm::release_major;
use hugeshm_probe::{HostSnapshot, Probe};

/// One `jvm-base-pages` per JVM (of `servers`, the processes known by
/// their exe) that asked for large pages and has parts of them on base
/// pages.
pub(super) fn jvm_findings(
    probe: &Probe,
    host: &HostSnapshot,
    servers: &[ServerProcess],
) -> Vec<Finding> {
    let default_page = host.default_page_size().unwrap_or(2 * MIB);
    let offered: Vec<u64> = host.pools.iter().map(|p| p.page_size_bytes).collect();
    let (mem_total, cpus) = crate::jvm::ram_and_cpus(host);
    let mut out = Vec::new();
    for p in servers.iter().filter(|p| p.exe_name == "java") {
        let Ok(opts) = jvm_options(probe, &p.pid.to_string()) else {
            continue;
        };
        let Ok(args) = jvm_args::parse(&opts.words) else {
            continue;
        };
        if args.use_large_pages != Some(true) || args.use_shm == Some(true) {
            continue;
        }
        let mut on_huge: Vec<u64> = private_mappings(probe, p.pid, 2 * MIB)
            .iter()
            .filter(|m| m.on_huge_pages())
            .map(|m| m.size_bytes)
            .collect();
        let mut m = resolve(&args, None, mem_total, cpus);
        m.major = opts.java.as_deref().and_then(release_major);
        if args.max_heap.is_none() {
            // The default heap is the JVM's own arithmetic: where a huge
            // page mapping other than the code cache is there, the largest
            // is the heap.
            let code = m.code_cache.div_ceil(default_page) * default_page;
            if let Some(&h) = on_huge.iter().filter(|&&s| s != code).max() {
                m.heap = h;
            }
        }
        let parts = huge_parts(&m, &offered, default_page);
        let mut short: Vec<(&JvmPart, u64)> = Vec::new();
        for part in &parts {
            let mut missing = 0;
            for _ in 0..part.mappings {
                match on_huge.iter().position(|&s| s == part.each) {
                    Some(i) => {
                        on_huge.swap_remove(i);
                    }
                    None => missing += 1,
                }
            }
            if missing > 0 {
                short.push((part, missing));
            }
        }
        if !short.is_empty() {
            out.push(finding(p.pid, &short));
        }
    }
    out
}

/// The finding of JVM `pid` whose parts `short` (each with its mappings on
/// base pages) fell back.
fn finding(pid: u32, short: &[(&JvmPart, u64)]) -> Finding {
    // Sizes from another user's command line: sums that saturate.
    let bytes = short.iter().fold(0u64, |a, (p, n)| {
        a.saturating_add(p.each.saturating_mul(*n))
    });
    let pages = short.iter().fold(0u64, |a, (p, n)| {
        a.saturating_add((p.each / p.page).saturating_mul(*n))
    });
    let page = short[0].0.page;
    let parts: Vec<String> = short
        .iter()
        .map(|(p, n)| {
            let of = if p.mappings > 1 {
                format!("{n} of {} mappings of {}", p.mappings, format_bytes(p.each))
            } else {
                format_bytes(p.each)
            };
            format!("its {} ({of})", p.name)
        })
        .collect();
    let warnings: Vec<String> = short
        .iter()
        .map(|(p, _)| {
            format!(
                "\"Failed to reserve and commit memory. req_addr: … bytes: {} page size: {} \
                 (errno = 12).\"",
                p.each, p.page
            )
        })
        .collect();
    Finding::new(
        Severity::Warning,
        "jvm-base-pages",
        format!(
            "JVM pid {pid} asked for large pages (-XX:+UseLargePages) but has {} on base \
             pages: {}, {} of {} short; the JVM warned at start {} (or, where the pool was \
             empty, \"UseLargePages disabled, no large pages configured and available on the \
             system.\")",
            parts.join(", "),
            format_bytes(bytes),
            plural(pages as usize, "huge page", "huge pages"),
            format_bytes(page),
            warnings.join(", ")
        ),
        Some(format!(
            "hugeshm apply --jvm {pid} (the pool all its parts need; {} of them are on \
             base pages now), then restart the JVM: it reserves its large pages only at start",
            plural(pages as usize, "page", "pages")
        )),
    )
}
