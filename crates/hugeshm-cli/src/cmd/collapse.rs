//! `hugeshm collapse`: a running process's shared memory onto 2 MiB pages
//! in place (the doctor's plan, hugeshm-apply's collapse), no restart.

use crate::output::{Out, Table, Usage};
use hugeshm_apply::collapse::{collapse, CollapseOptions, CollapseReport, Mapper};
use hugeshm_apply::collapse_file::FileCollapse;
use hugeshm_doctor::collapse::{plan, CollapsePlan, Selection, Skip};
use hugeshm_parse::size::format_bytes;
use hugeshm_probe::Roots;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// `hugeshm collapse` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The process whose shared memory (SysV, shared anonymous, memfd,
    /// tmpfs files such as /dev/shm) moves onto 2 MiB pages: every mapping
    /// of at least 2 MiB, or the one --shmid or --address names.
    #[arg(long, value_name = "PID", required_unless_present_any = ["path", "shmid", "region"])]
    pub pid: Option<u32>,
    /// A file of a tmpfs (/dev/shm/NAME) instead, mapped by nobody or
    /// anyone: hugeshm maps it 2 MiB-aligned, collapses it and unmaps it;
    /// whoever maps it aligned then maps its 2 MiB pages.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["pid", "shmid", "address", "dry_run"])]
    pub path: Option<std::path::PathBuf>,
    /// A hugeshm region by name instead (a SysV one, or a file in a tmpfs),
    /// as `hugeshm ls` lists it: collapsed as --shmid or --path would.
    #[arg(long, value_name = "NAME", value_parser = crate::cmd::region::parse_region_name,
          conflicts_with_all = ["pid", "shmid", "address", "path", "dry_run"])]
    pub region: Option<String>,
    /// Only the attachments of this SysV segment; without --pid, the
    /// segment itself (root's or yours), attached here for the call.
    #[arg(long, value_name = "SHMID", conflicts_with = "address")]
    pub shmid: Option<u64>,
    /// Only the mapping that holds this address (0x7f...).
    #[arg(long, value_name = "ADDR", value_parser = parse_address)]
    pub address: Option<u64>,
    /// Blocks copied at once (default: one per CPU).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
    /// Check and say what would be done; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the plan and the result as JSON.
    #[arg(long)]
    pub json: bool,
}

fn parse_address(s: &str) -> Result<u64, String> {
    let hex = s.strip_prefix("0x").unwrap_or(s);
    u64::from_str_radix(hex, 16).map_err(|_| format!("{s:?} is not a hexadecimal address"))
}

/// What `collapse --json` prints.
#[derive(serde::Serialize)]
struct Doc<'a> {
    plan: &'a CollapsePlan,
    result: Option<&'a CollapseReport>,
}

/// Runs the command: exit 2 when the plan is refused, 3 when the run
/// stopped on an error, 0 otherwise.
pub fn run(roots: &Roots, a: &Args, out: &mut Out) -> anyhow::Result<ExitCode> {
    let probe = crate::cmd::doctor_probe(roots);
    use hugeshm_apply::collapse_file::{collapse_file, collapse_sysv};
    if let Some(path) = &a.path {
        return print_object(collapse_file(&probe, path), a.json, out);
    }
    if let Some(name) = &a.region {
        use hugeshm_region::{Locator, NamedObject, SEARCH_ORDER};
        let found = SEARCH_ORDER.into_iter().find_map(|b| {
            let l = Locator::new(name, b).probe(probe.clone());
            l.inspect().ok().map(|i| i.object)
        });
        return print_object(
            match found {
                Some(NamedObject::Sysv { shmid, .. }) => collapse_sysv(&probe, shmid),
                Some(NamedObject::File { path, .. }) => collapse_file(&probe, path.as_ref()),
                _ => {
                    return Err(
                        Usage(format!("no SysV or tmpfs-file region named {name:?}")).into(),
                    )
                }
            },
            a.json,
            out,
        );
    }
    if let (None, Some(id)) = (a.pid, a.shmid) {
        let id = i32::try_from(id).map_err(|_| Usage(format!("no SysV segment {id}")))?;
        return print_object(collapse_sysv(&probe, id), a.json, out);
    }
    let selection = match (a.shmid, a.address) {
        (Some(id), _) => Selection::Shmid(id),
        (_, Some(addr)) => Selection::Address(addr),
        _ => Selection::All,
    };
    let threads = a.threads.map_or(0, usize::from);
    let p = plan(
        &probe,
        a.pid.expect("clap: --pid or --path"),
        selection,
        threads,
    );
    if let Some(r) = &p.refusal {
        if a.json {
            out.json_doc(&Doc {
                plan: &p,
                result: None,
            })?;
            out.flush()?;
        }
        let fix = r
            .fix()
            .map(|f| format!("; fix: {}", f.render(hugeshm_fix::Renderer::Cli)));
        return Err(Usage(format!("{}{}", r.message(), fix.unwrap_or_default())).into());
    }
    if !a.json {
        print_plan(&p, out)?;
        out.flush()?;
    }
    let report = if a.dry_run {
        None
    } else {
        let stop = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(sig, Arc::clone(&stop))?;
        }
        let bar = crate::progress::Bytes::new(&format!("collapsing pid {}", p.pid));
        let progress = |d: u64, t: u64| bar.update(d, t);
        let opts = CollapseOptions {
            threads,
            on_progress: Some(&progress),
            stop: Some(&stop),
        };
        let r = collapse(&probe, &p, &opts);
        bar.finish();
        Some(r?)
    };
    if a.json {
        out.json_doc(&Doc {
            plan: &p,
            result: report.as_ref(),
        })?;
    } else if p.collapsible().next().is_none() {
        out.line("Nothing to do: every mapping is on 2 MiB pages already.")?;
    } else if let Some(r) = &report {
        print_result(r, out)?;
    } else {
        out.line("Dry run: nothing changed.")?;
    }
    out.flush()?;
    Ok(match report.and_then(|r| r.stopped) {
        Some(why) if !why.starts_with("interrupted") => {
            crate::terminal::eprintln(format_args!("hugeshm: error: {why}"));
            ExitCode::from(3)
        }
        Some(_) => ExitCode::from(130),
        None => ExitCode::SUCCESS,
    })
}

/// `--path` or `--shmid` alone: a tmpfs file or a SysV segment, mapped
/// here for the call; refusals exit 2.
fn print_object(
    done: Result<FileCollapse, hugeshm_apply::collapse_file::FileCollapseError>,
    json: bool,
    out: &mut Out,
) -> anyhow::Result<ExitCode> {
    use hugeshm_apply::collapse_file::FileCollapseError as E;
    let r = match done {
        Ok(r) => r,
        Err(e @ E::Sys(_)) => return Err(e.into()),
        Err(e) => {
            let fix = e
                .fix()
                .map(|f| format!("; fix: {}", f.render(hugeshm_fix::Renderer::Cli)));
            return Err(Usage(format!("{e}{}", fix.unwrap_or_default())).into());
        }
    };
    if json {
        out.json_doc(&r)?;
    } else {
        let n = &r.not_collapsed;
        out.line(format!(
            "{}: {} of {} blocks on 2 MiB pages in {:.2} s; {} refused (never touched: nothing to \
             move), {} busy; mapped by {} process(es), which map the 2 MiB pages on their next access",
            r.object, r.collapsed, r.blocks, r.seconds, n.refused, n.busy, r.mappers.len()
        ))?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn print_plan(p: &CollapsePlan, out: &mut Out) -> anyhow::Result<()> {
    out.line(format!(
        "Process {} ({}): {} shmem mapping(s), {} to collapse",
        p.pid,
        p.comm,
        p.mappings.len(),
        format_bytes(p.total_bytes())
    ))?;
    let mut t = Table::new(&["mapping", "address", ">size", ">on 2M", "what"]);
    for m in &p.mappings {
        t.row(vec![
            m.name.clone(),
            format!("{:#x}", m.start),
            format_bytes(m.end - m.start),
            format_bytes(m.pmd_mapped_bytes),
            m.skip
                .as_ref()
                .map_or_else(|| "collapse".into(), Skip::to_string),
        ]);
    }
    t.render(out, "  ")?;
    let h = &p.host;
    let free: u64 = h.free_blocks.iter().map(|(_, n)| n).sum();
    out.line(format!(
        "  kernel {}, shmem_enabled {} (a collapse is an explicit request), {} available, {free} \
         free 2 MiB blocks; untouched pages filled: up to {}",
        h.kernel.as_deref().unwrap_or("?"),
        h.shmem_enabled.as_deref().unwrap_or("?"),
        h.available_bytes.map_or("?".into(), format_bytes),
        format_bytes(p.growth_bytes)
    ))?;
    Ok(())
}

fn mapper_rows(before: &[Mapper], after: &[Mapper], out: &mut Out) -> anyhow::Result<()> {
    let mut t = Table::new(&[
        "pid",
        "name",
        ">on 2M before",
        ">after",
        ">VmPTE before",
        ">after",
    ]);
    let kb = |v: Option<u64>| v.map_or("-".into(), format_bytes);
    for b in before {
        let a = after.iter().find(|a| a.pid == b.pid);
        t.row(vec![
            b.pid.to_string(),
            b.comm.clone(),
            format_bytes(b.pmd_mapped_bytes),
            a.map_or("gone".into(), |a| format_bytes(a.pmd_mapped_bytes)),
            kb(b.vm_pte_bytes),
            kb(a.and_then(|a| a.vm_pte_bytes)),
        ]);
    }
    t.render(out, "  ")
}

fn print_result(r: &CollapseReport, out: &mut Out) -> anyhow::Result<()> {
    out.line(format!(
        "Collapsed {} of {} blocks ({}) in {:.2} s, {:.2} GB/s, {} thread(s).",
        r.collapsed,
        r.blocks,
        format_bytes(r.collapsed * hugeshm_doctor::collapse::BLOCK),
        r.seconds,
        r.gbps,
        r.threads
    ))?;
    let n = &r.not_collapsed;
    if n.refused + n.busy > 0 {
        out.line(format!(
            "  {} block(s) refused (EINVAL: mostly blocks no process has touched yet, which have \
             nothing to move; run collapse again once the server uses them), {} busy (EAGAIN)",
            n.refused, n.busy
        ))?;
    }
    mapper_rows(&r.before, &r.after, out)?;
    out.line(out.dim(
        "  The other processes map the 2 MiB pages on their next access. Unlike hugetlb pages, \
         these are not reserved: the kernel may split them again under memory pressure or swap.",
    ))?;
    Ok(())
}
