//! `hugeshm status`.

use crate::output::{self, Out, Table};
use hugeshm_doctor::finding::any_actionable;
use hugeshm_doctor::status::{self, StatusReport};
use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_probe::{Probe, Roots};
use std::process::ExitCode;

/// `hugeshm status` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print the report as JSON (the schema in the README).
    #[arg(long)]
    pub json: bool,
    /// Exit 1 when any warning or error is found (for scripts and config management).
    #[arg(long)]
    pub check: bool,
}

/// Runs the command.
pub fn run(roots: &Roots, args: &Args, out: &mut Out) -> anyhow::Result<ExitCode> {
    let probe = Probe::new(roots.clone());
    let report = status::build(&probe);
    if args.json {
        out.json_doc(&report)?;
    } else {
        print(&report, out)?;
        out.flush()?;
    }
    Ok(if args.check && any_actionable(&report.findings) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn opt_bytes(v: Option<u64>) -> String {
    match v {
        // The kernel's "no limit" defaults (shmmax, shmall) are near 2^64.
        Some(b) if b >= 1 << 60 => "unlimited".to_string(),
        Some(b) => format_bytes(b),
        None => "?".to_string(),
    }
}

/// Prints the human form.
pub fn print(r: &StatusReport, out: &mut Out) -> anyhow::Result<()> {
    out.line(out.bold("Huge page pools"))?;
    if !r.hugetlb_supported {
        out.line(
            "  none: this kernel has no hugetlb support (no HugePages lines in /proc/meminfo)",
        )?;
    } else if r.pools.is_empty() {
        out.line("  no pool could be read (see the findings)")?;
    } else {
        let multi_node = r.nodes.len() > 1;
        let mut t = Table::new(&[
            "size",
            "node",
            ">total",
            ">free",
            ">rsvd",
            ">surp",
            ">avail",
            ">pool",
            ">available",
            ">boot",
        ]);
        for p in r.pools.iter().filter(|p| p.node.is_none() || multi_node) {
            let size = format!(
                "{}{}",
                page_size_short(p.page_size_bytes),
                if p.default { "*" } else { "" }
            );
            t.row(vec![
                size,
                p.node
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| "all".into()),
                p.total.to_string(),
                p.free.to_string(),
                if p.node.is_some() {
                    "-".into()
                } else {
                    p.reserved.to_string()
                },
                p.surplus.to_string(),
                out.good(&p.available.to_string(), true),
                format_bytes(p.total_bytes),
                format_bytes(p.available_bytes),
                p.boot_pages
                    .map(|b| b.to_string())
                    .unwrap_or_else(|| "-".into()),
            ]);
        }
        t.render(out, "  ")?;
        out.line(out.dim("  * default size. avail = free - rsvd: what a new mapping can really get. rsvd is host-wide only. boot = hugepages= on the kernel command line."))?;
        if !multi_node {
            out.line(out.dim(&format!(
                "  one NUMA node ({})",
                if r.nodes.is_empty() {
                    "no NUMA sysfs".to_string()
                } else {
                    "node 0".to_string()
                }
            )))?;
        }
    }
    out.line("")?;
    out.line(out.bold("Settings"))?;
    let thp = format!(
        "enabled={} defrag={} shmem_enabled={}",
        r.thp.enabled.as_deref().unwrap_or("-"),
        r.thp.defrag.as_deref().unwrap_or("-"),
        r.thp.shmem_enabled.as_deref().unwrap_or("-")
    );
    let rows: Vec<(String, String)> = vec![
        ("THP".into(), thp),
        ("".into(), r.thp.verdict.clone()),
        (
            "memory".into(),
            format!(
                "total {}, in huge page pools {}, page tables {}",
                opt_bytes(r.mem_total_bytes),
                opt_bytes(r.hugetlb_bytes),
                opt_bytes(r.page_tables_bytes)
            ),
        ),
        (
            "memlock".into(),
            match r.memlock_bytes {
                None => "unlimited (this process)".into(),
                Some(b) => format!("{} (soft limit of this process)", format_bytes(b)),
            },
        ),
        (
            "hugetlb_shm_group".into(),
            match r.hugetlb_shm_group {
                Some(0) => "0: only root or CAP_IPC_LOCK may create SysV SHM_HUGETLB segments (others fall back to the memlock limit)".into(),
                Some(g) => format!("{g}: members of gid {g} may create SysV SHM_HUGETLB segments"),
                None => "?".into(),
            },
        ),
        (
            "SysV".into(),
            format!(
                "shmmax {}, shmall {}, shmmni {}; {} segments, {}",
                opt_bytes(r.sysv.shmmax_bytes),
                opt_bytes(r.sysv.shmall_bytes),
                r.sysv.shmmni.map(|v| v.to_string()).unwrap_or_else(|| "?".into()),
                r.sysv.segments,
                format_bytes(r.sysv.segments_bytes)
            ),
        ),
        ("boot".into(), boot_line(r)),
    ];
    for (k, v) in rows {
        out.line(format!("  {:<18} {}", k, v))?;
    }
    for m in &r.mounts {
        let what = if m.fstype == "hugetlbfs" {
            format!(
                "hugetlbfs, {} pages{}",
                opt_bytes(m.page_size_bytes),
                m.size_bytes
                    .map(|s| format!(", size limit {}", format_bytes(s)))
                    .unwrap_or_default()
            )
        } else {
            format!(
                "tmpfs{}{}{}",
                m.size_bytes
                    .map(|s| format!(", size {}", format_bytes(s)))
                    .unwrap_or_default(),
                m.huge
                    .as_ref()
                    .map(|h| format!(", huge={h}"))
                    .unwrap_or_default(),
                m.mpol
                    .as_ref()
                    .map(|h| format!(", mpol={h}"))
                    .unwrap_or_default()
            )
        };
        out.line(format!("  {:<18} {} ({what})", "mount", m.target))?;
    }
    out.line("")?;
    if r.findings.is_empty() {
        out.line(format!(
            "{} {}",
            out.bold("Findings"),
            out.good("none: nothing to fix", true)
        ))?;
    } else {
        out.line(out.bold("Findings"))?;
        output::findings(out, &r.findings, "  ")?;
    }
    Ok(())
}

fn boot_line(r: &StatusReport) -> String {
    let mut parts = Vec::new();
    if let Some(d) = r.boot.default_hugepagesz_bytes {
        parts.push(format!("default_hugepagesz={}", page_size_short(d)));
    }
    for p in &r.boot.pools {
        if p.per_node.is_empty() {
            parts.push(format!(
                "hugepages={} of {}",
                p.pages,
                page_size_short(p.page_size_bytes)
            ));
        } else {
            let nodes: Vec<String> = p.per_node.iter().map(|(n, c)| format!("{n}:{c}")).collect();
            parts.push(format!(
                "hugepages={} of {}",
                nodes.join(","),
                page_size_short(p.page_size_bytes)
            ));
        }
    }
    if let Some(c) = &r.boot.hugetlb_cma {
        parts.push(format!("hugetlb_cma={c}"));
    }
    if let Some(t) = &r.boot.transparent_hugepage {
        parts.push(format!("transparent_hugepage={t}"));
    }
    if parts.is_empty() {
        "no huge page settings on the kernel command line: pools are set at runtime".to_string()
    } else {
        parts.join(", ")
    }
}
