//! `hugeshm create` and `hugeshm rm`: regions from the command line.

use crate::output::{Out, ProgressBar, Table};
use anyhow::bail;
use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_region::{
    AllocationReport, Backend, PageSize, Policy, Reclaim, RegionBuilder, RegionError,
};
use std::path::PathBuf;
use std::process::ExitCode;

/// `hugeshm create` options.
#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// The region's name (letters, digits, `-`, `_`, `.`).
    pub name: String,
    /// Size: 1G, 512M, 10G.
    #[arg(long, value_parser = crate::cmd::bench::parse_size_arg)]
    pub size: u64,
    /// Page size: 4k, 2m, 1g, or largest (the largest whose pool holds the region).
    #[arg(long, default_value = "largest")]
    pub page_size: PageSize,
    /// off: never huge; try: all huge or all 4 KiB, with the reason; only: all huge or fail.
    #[arg(long, default_value = "only")]
    pub policy: Policy,
    /// Pre-fault threads (default: the CPUs this process may use; 0 skips the pre-fault).
    #[arg(long)]
    pub prefault_threads: Option<usize>,
    /// sysv, memfd, hugetlbfs, posix or anon.
    #[arg(long, default_value = "sysv")]
    pub backend: Backend,
    /// Lock the region in memory (checked against the memlock limit first).
    #[arg(long)]
    pub mlock: bool,
    /// Permission bits (octal).
    #[arg(long, default_value = "0600", value_parser = parse_mode)]
    pub mode: u32,
    /// Directory for file backends (a hugetlbfs mount, or a tmpfs directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// When the name exists and nobody holds it (its creator crashed):
    /// refuse (default), reuse it keeping its contents, or recreate it.
    #[arg(long, default_value = "refuse")]
    pub reclaim: Reclaim,
    /// Keep this process alive holding the region until it is interrupted
    /// (needed for memfd and anon regions, which live only while mapped).
    #[arg(long)]
    pub hold: bool,
    /// Print the allocation report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `hugeshm rm` options.
#[derive(Debug, clap::Args)]
pub struct RmArgs {
    /// The region's name.
    pub name: String,
    /// Only this backend (default: every named backend: sysv, hugetlbfs, posix).
    #[arg(long)]
    pub backend: Option<Backend>,
    /// Print what was removed as JSON.
    #[arg(long)]
    pub json: bool,
}

fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| format!("{s:?} is not an octal mode such as 0600"))
}

/// A region error as a CLI error, with its fix on a line of its own.
pub(crate) fn region_error(e: RegionError) -> anyhow::Error {
    match e.fix() {
        Some(fix) if !e.to_string().contains(&fix) => anyhow::anyhow!("{e}\n  to fix: {fix}"),
        _ => anyhow::anyhow!("{e}"),
    }
}

/// Runs `create`.
pub fn create(a: &CreateArgs, out: &mut Out) -> anyhow::Result<ExitCode> {
    if !a.backend.is_named() && !a.hold {
        bail!(
            "a {} region lives only while a process maps it: add --hold to keep this process holding it",
            a.backend
        );
    }
    let bar = ProgressBar::new("pre-faulting");
    let mut b = RegionBuilder::new(a.size)
        .backend(a.backend)
        .page_size(a.page_size)
        .policy(a.policy)
        .mlock(a.mlock)
        .mode(a.mode)
        .reclaim(a.reclaim)
        .name(a.name.clone());
    if let Some(t) = a.prefault_threads {
        b = b.prefault_threads(t);
    }
    if let Some(d) = &a.dir {
        b = b.directory(d.clone());
    }
    if !a.json {
        let bar = bar.clone();
        b = b.progress(move |done, total| bar.update(done, total));
    }
    let result = b.create();
    bar.finish();
    let (region, report) = result.map_err(region_error)?;
    if a.json {
        out.json_doc(&report)?;
    } else {
        print_report(&report, out)?;
        out.flush()?;
    }
    if a.hold {
        eprintln!(
            "holding region {} (pid {}); interrupt (Ctrl-C) to release it{}",
            a.name,
            std::process::id(),
            if a.backend.is_named() {
                " (the named object stays: hugeshm rm removes it)"
            } else {
                ""
            }
        );
        // Ctrl-C ends the process: the kernel unmaps the region, and a
        // memfd or anon region goes with it. Nothing else needs cleaning.
        loop {
            std::thread::park();
        }
    }
    drop(region);
    Ok(ExitCode::SUCCESS)
}

/// Prints an allocation report.
pub fn print_report(r: &AllocationReport, out: &mut Out) -> anyhow::Result<()> {
    let name = r.name.as_deref().unwrap_or("(anonymous)");
    let verified_ok = r.verified_page_size_bytes == r.page_size_bytes;
    out.line(format!(
        "{} {} {} on {} pages ({} backend, policy {})",
        out.bold("region"),
        name,
        format_bytes(r.size_bytes),
        page_size_short(r.page_size_bytes),
        r.backend,
        r.policy
    ))?;
    if r.rounded_up {
        out.line(format!(
            "  size rounded up from {} to a whole number of pages",
            format_bytes(r.requested_bytes)
        ))?;
    }
    if r.fell_back {
        out.line(format!(
            "  {} fell back to 4 KiB pages: {}",
            out.severity(hugeshm_doctor::Severity::Warning),
            r.reason.as_deref().unwrap_or("")
        ))?;
    }
    for w in &r.warnings {
        out.line(format!(
            "  {} {w}",
            out.severity(hugeshm_doctor::Severity::Warning)
        ))?;
    }
    let mut t = Table::new(&["", ""]);
    t.row(vec![
        "verified page size".into(),
        out.good(&format_bytes(r.verified_page_size_bytes), verified_ok),
    ]);
    t.row(vec!["resident".into(), format_bytes(r.resident_bytes)]);
    t.row(vec![
        "pre-fault".into(),
        format!(
            "{:.3} s, {:.1} GB/s, {} thread{} ({})",
            r.prefault_seconds,
            r.prefault_gbps,
            r.prefault_threads,
            if r.prefault_threads == 1 { "" } else { "s" },
            r.prefault_method.as_str()
        ),
    ]);
    t.row(vec!["ready in".into(), format!("{:.3} s", r.ready_seconds)]);
    if let Some(id) = r.shmid {
        t.row(vec![
            "SysV".into(),
            format!("shmid {id}, key 0x{:08x}", r.sysv_key.unwrap_or(0) as u32),
        ]);
    }
    if let Some(p) = &r.path {
        t.row(vec!["path".into(), p.clone()]);
    }
    if r.mlocked {
        t.row(vec!["locked".into(), "yes (mlock)".into()]);
    }
    t.render(out, "  ")?;
    Ok(())
}

/// Runs `rm`.
pub fn rm(a: &RmArgs, out: &mut Out) -> anyhow::Result<ExitCode> {
    let backends: Vec<Backend> = match a.backend {
        Some(b) => vec![b],
        None => Backend::ALL.into_iter().filter(|b| b.is_named()).collect(),
    };
    let mut removed = Vec::new();
    let mut looked = Vec::new();
    for b in backends {
        match hugeshm_region::remove(&a.name, b) {
            Ok(objs) => {
                for obj in objs {
                    removed.push(
                        serde_json::json!({"backend": b.as_str(), "object": obj.to_string()}),
                    );
                }
            }
            // Looking in every backend: absent from this one is not an error.
            Err(RegionError::NotFound { looked: l, .. }) if a.backend.is_none() => looked.push(l),
            Err(e) => return Err(region_error(e)),
        }
    }
    if a.json {
        out.json_doc(&crate::output::Keyed("removed", &removed))?;
    } else if removed.is_empty() {
        bail!(
            "no region named {:?} (looked for {})",
            a.name,
            looked.join(", ")
        );
    } else {
        for r in &removed {
            out.line(format!(
                "removed {} {}",
                r["backend"].as_str().unwrap_or(""),
                r["object"].as_str().unwrap_or("")
            ))?;
        }
        out.flush()?;
    }
    Ok(ExitCode::SUCCESS)
}
