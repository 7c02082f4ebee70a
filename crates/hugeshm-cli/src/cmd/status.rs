//! `hugeshm status`.

use crate::output::{self, Out, Table};
use hugeshm_doctor::finding::{any_actionable, plural};
use hugeshm_doctor::status::{self, StatusReport};
use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_probe::Roots;
use std::process::ExitCode;

/// `hugeshm status` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print the report as JSON (the schema: docs/json.md).
    #[arg(long)]
    pub json: bool,
    /// Exit 1 when any warning or error is found (for scripts and config management).
    #[arg(long)]
    pub check: bool,
    /// Show the hugetlb cgroup of this process instead of hugeshm's own
    /// (e.g. the database server's, from the host or a debug container).
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
}

/// Runs the command.
pub fn run(roots: &Roots, args: &Args, out: &mut Out) -> anyhow::Result<ExitCode> {
    let probe = crate::cmd::doctor_probe(roots);
    if let Some(pid) = args.pid {
        if !probe.proc_path(&pid.to_string()).is_dir() {
            anyhow::bail!(
                "no process {pid} (no {})",
                probe.proc_path(&pid.to_string()).display()
            );
        }
    }
    let report = status::build_for(
        &probe,
        args.pid,
        &hugeshm_doctor::segments::KeptRegions::find(&probe),
    );
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
        if multi_node {
            let nodes: Vec<String> = r
                .nodes
                .iter()
                .map(|n| {
                    let mem = n
                        .mem_total_bytes
                        .map(format_bytes)
                        .unwrap_or_else(|| "?".into());
                    if n.memory_only {
                        format!("{} (no CPU, {mem}: a memory-only tier)", n.node)
                    } else {
                        let cpus: Vec<String> = n.cpus.iter().map(u32::to_string).collect();
                        format!("{} (CPUs {}, {mem})", n.node, cpus.join(","))
                    }
                })
                .collect();
            out.line(format!("  nodes: {}", nodes.join("; ")))?;
        }
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
    let mut rows: Vec<(String, String)> = vec![
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
    rows.extend(super::status_tuning::rows(&r.tuning));
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
    super::status_pmem::print(r.pmem.as_ref(), out)?;
    print_cgroup(r, out)?;
    print_kubelet(r, out)?;
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
    if let Some(first) = r.unreadable.first() {
        out.line(out.dim(&format!(
            "{} could not be read (pid {}: {}): the shared memory only they map is not counted",
            plural(r.unreadable.len(), "process", "processes"),
            first.pid,
            first.problem.reason
        )))?;
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

/// A cgroup limit: `max` for none.
fn limit(v: Option<u64>) -> String {
    v.map(format_bytes).unwrap_or_else(|| "max".into())
}

/// The hugetlb cgroup section: per page size the cgroup's own limits and
/// usage, the effective limit over its ancestors, the room left and what a
/// new mapping can get.
fn print_cgroup(r: &StatusReport, out: &mut Out) -> anyhow::Result<()> {
    let whose = match r.cgroup_pid {
        Some(pid) => format!("pid {pid}"),
        None => "this process".to_string(),
    };
    out.line(out.bold(&format!("Hugetlb cgroup ({whose})")))?;
    let Some(cg) = &r.cgroup else {
        out.line("  no hugetlb cgroup controller found: only the pools limit huge pages")?;
        return Ok(());
    };
    out.line(format!(
        "  cgroup v{} {} (hierarchy mounted at {})",
        cg.version, cg.path, cg.mount_point
    ))?;
    let mut t = Table::new(&[
        "size",
        ">limit",
        ">usage",
        ">rsvd limit",
        ">rsvd usage",
        ">refused",
        ">effective",
        ">room",
        ">avail",
        ">can get",
    ]);
    for s in &cg.sizes {
        let pool = r
            .pools
            .iter()
            .find(|p| p.node.is_none() && p.page_size_bytes == s.page_size_bytes);
        let room = match s.new_mapping_pages() {
            Some(p) => p.to_string(),
            None => "-".into(),
        };
        // The cgroup's own files (absent in the v2 root, or where the
        // controller is not enabled): "-" rather than numbers it lacks.
        let own = s.levels.first().is_some_and(|l| l.path == cg.path);
        let mine = |v: String| if own { v } else { "-".to_string() };
        t.row(vec![
            page_size_short(s.page_size_bytes),
            mine(limit(s.limit_bytes)),
            mine(format_bytes(s.usage_bytes)),
            mine(limit(s.rsvd_limit_bytes)),
            s.rsvd_usage_bytes
                .map(format_bytes)
                .unwrap_or_else(|| "-".into()),
            s.max_events
                .map(|n| out.good(&n.to_string(), n == 0))
                .unwrap_or_else(|| "-".into()),
            limit_with_rsvd(s.effective_limit_bytes, s.effective_rsvd_limit_bytes),
            room,
            pool.map(|p| p.available.to_string())
                .unwrap_or_else(|| "-".into()),
            pool.map(|p| out.good(&p.can_get_pages.to_string(), p.can_get_pages == p.available))
                .unwrap_or_else(|| "-".into()),
        ]);
    }
    t.render(out, "  ")?;
    if cg.sizes.iter().all(|s| s.levels.is_empty()) {
        out.line(out.dim(
            "  no hugetlb limit files in this cgroup or above it (the root cgroup is never limited)",
        ))?;
    }
    out.line(out.dim(
        "  limit, usage: this cgroup's (faulted pages); rsvd: reservations (mmap, shmget); refused: charges over a limit (events max, v1 failcnt)",
    ))?;
    out.line(out.dim(
        "  effective = the smallest limit of the cgroup and its ancestors (rsvd after /); room = pages still chargeable; can get = min(avail, room) pages",
    ))?;
    for s in cg.sizes.iter().filter(|s| s.binding_file.is_some()) {
        out.line(out.dim(&format!(
            "  {} binding limit: {}",
            page_size_short(s.page_size_bytes),
            s.binding_file.as_deref().unwrap_or_default()
        )))?;
    }
    print_server_cgroups(r, &cg.path, out)
}

/// The limited cgroups of the processes that map shared memory, other
/// than the one shown above: a line per page size they limit.
fn print_server_cgroups(r: &StatusReport, shown: &str, out: &mut Out) -> anyhow::Result<()> {
    let others: Vec<_> = r
        .server_cgroups
        .iter()
        .filter(|c| c.cgroup.path != shown)
        .collect();
    if others.is_empty() {
        return Ok(());
    }
    out.line("  cgroups with a hugetlb limit of the processes that map shared memory:")?;
    for c in others {
        let pids: Vec<String> = c.pids.iter().map(u32::to_string).collect();
        for s in c.cgroup.sizes.iter().filter(|s| s.binding_file.is_some()) {
            out.line(format!(
                "    {} (pids {}): {} limit {}, usage {}, room {} pages for a new mapping ({})",
                c.cgroup.path,
                pids.join(", "),
                page_size_short(s.page_size_bytes),
                limit_with_rsvd(s.effective_limit_bytes, s.effective_rsvd_limit_bytes),
                format_bytes(s.usage_bytes.max(s.rsvd_usage_bytes.unwrap_or(0))),
                s.new_mapping_pages()
                    .map_or_else(|| "unlimited".to_owned(), |p| p.to_string()),
                s.binding_file.as_deref().unwrap_or_default()
            ))?;
        }
    }
    Ok(())
}

/// The kubelet's kubepods cgroup against the pools: a line per page size.
fn print_kubelet(r: &StatusReport, out: &mut Out) -> anyhow::Result<()> {
    let Some(k) = &r.kubelet else { return Ok(()) };
    out.line(format!(
        "  kubelet ({} driver, {}), in pages:",
        k.driver, k.path
    ))?;
    for s in &k.sizes {
        out.line(format!(
            "    {}: allocatable {}, pool {}, taken {}: {} by pods, {} outside",
            page_size_short(s.page_size_bytes),
            s.allocatable_pages
                .map_or_else(|| "max".to_owned(), |n| n.to_string()),
            s.pool_pages,
            s.pool_taken_pages,
            s.pods_pages,
            s.outside_pages
        ))?;
    }
    Ok(())
}

/// `512 MiB`, `512 MiB / 1 GiB` (limit / reservation limit), `max`.
fn limit_with_rsvd(l: Option<u64>, r: Option<u64>) -> String {
    match r {
        None => limit(l),
        Some(r) => format!("{} / {}", limit(l), format_bytes(r)),
    }
}
