//! `hugeshm advise`: pages per size per node, and the configuration.

use crate::cmd::sources::SourceArgs;
use crate::output::{Out, Table, Usage};
use hugeshm_doctor::advise::{self, Placement, Plan};
use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_probe::Roots;
use std::process::ExitCode;

/// `hugeshm advise` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Also print what a container (Kubernetes pod) running it needs:
    /// `resources.limits` of `hugepages-2Mi`/`hugepages-1Gi`, and notes.
    #[arg(long)]
    pub container: bool,
    #[command(flatten)]
    pub source: SourceArgs,
    /// Print the plan as JSON (`hugeshm apply --plan` reads it).
    #[arg(long)]
    pub json: bool,
    /// Also print the systemd drop-in that starts the server under
    /// `hugeshm run` (Environment=LD_PRELOAD=... HUGESHM_RUN=...: its shared
    /// memory pre-faulted on every CPU at start, on the planned pages or
    /// refused with the numbers) for the --systemd-unit services; NAME is
    /// the server's executable (default with --postgres: postgres).
    #[arg(long, value_name = "NAME", num_args = 0..=1, require_equals = true,
          default_missing_value = "", conflicts_with = "json", value_parser = parse_run_name)]
    pub run: Option<String>,
}

/// Runs the command.
pub fn run(roots: &Roots, args: &Args, out: &mut Out) -> anyhow::Result<ExitCode> {
    if args.run.as_deref() == Some("") && args.source.postgres.is_empty() {
        return Err(Usage("--run: name the server's executable (--run=NAME)".into()).into());
    }
    let probe = crate::cmd::doctor_probe(roots);
    let host = probe.host();
    let mut plan = args.source.plan(&probe, &host)?;
    if args.container {
        plan.container = Some(advise::container_advice(&plan));
    }
    if args.json {
        out.json_doc(&plan)?;
    } else {
        print(&plan, &args.source.sources().apply_command(), out)?;
        if let Some(name) = &args.run {
            print_run_dropin(&plan, name, !args.source.postgres.is_empty(), out)?;
        }
        out.flush()?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `--run=NAME`: the server's executable, a file name (empty: the default).
fn parse_run_name(s: &str) -> Result<String, String> {
    if s.contains('/') || s.len() > 255 {
        Err(format!("--run={s:?}: a file name, not a path"))
    } else {
        Ok(s.to_owned())
    }
}

/// `advise --run`: the drop-in that puts the server under `hugeshm run`.
fn print_run_dropin(plan: &Plan, name: &str, postgres: bool, out: &mut Out) -> anyhow::Result<()> {
    use hugeshm_region::run::{RunPrefault, Settings, Target};
    // The option's parser took the name; run() refused an empty one
    // without --postgres.
    let name = match name {
        "" if postgres => "postgres",
        n => n,
    };
    let mut settings = Settings::new(Target::Name(name.to_owned()));
    settings.prefault = RunPrefault::Threads(None);
    settings.policy = hugeshm_region::Policy::Only;
    let (preload, run) = hugeshm_region::run::environment(&settings)
        .map_err(|e| anyhow::Error::msg(e.to_string()))?;
    let units = if plan.config.systemd_units.is_empty() {
        vec!["SERVER.service".to_owned()]
    } else {
        plan.config.systemd_units.clone()
    };
    out.line("")?;
    out.line(
        out.bold("hugeshm run (the server's shared memory pre-faulted and recorded at start)"),
    )?;
    for u in &units {
        out.line(format!(
            "  {}",
            out.dim(&format!("/etc/systemd/system/{u}.d/hugeshm-run.conf:"))
        ))?;
        out.line("      [Service]")?;
        // `%` starts a specifier in unit files.
        out.line(format!(
            "      Environment=\"LD_PRELOAD={}\"",
            preload.replace('%', "%%")
        ))?;
        out.line(format!(
            "      Environment=\"HUGESHM_RUN={}\"",
            run.replace('%', "%%")
        ))?;
    }
    out.line(out.dim(&format!(
        "then: systemctl daemon-reload && systemctl restart {}",
        units.join(" ")
    )))?;
    Ok(())
}

fn placement(p: Placement) -> String {
    match p {
        Placement::Any => "any node".into(),
        Placement::Node(n) => format!("node {n}"),
        Placement::Spread => "spread".into(),
    }
}

/// The plan's memory line and warnings.
fn memory_and_warnings(plan: &Plan, out: &mut Out) -> anyhow::Result<()> {
    if let (Some(total), Some(left)) = (plan.mem_total_bytes, plan.left_bytes) {
        out.line(format!(
            "  memory: {} in all, {} in huge page pools, {} left to the OS and other processes",
            format_bytes(total),
            format_bytes(plan.huge_bytes),
            format_bytes(left)
        ))?;
    }
    for w in &plan.warnings {
        out.line(format!(
            "  {} {w}",
            out.severity(hugeshm_doctor::Severity::Warning)
        ))?;
    }
    Ok(())
}

fn skipped(plan: &Plan, out: &mut Out) -> anyhow::Result<()> {
    if !plan.skipped.is_empty() {
        out.line(out.bold("Skipped"))?;
        for s in &plan.skipped {
            out.line(format!("  {}: {}", s.label, s.reason))?;
        }
    }
    Ok(())
}

/// Prints a plan.
pub fn print(plan: &Plan, apply: &str, out: &mut Out) -> anyhow::Result<()> {
    if plan.counted.is_empty() {
        // No pools, and no settings to give (a memlock of 0 KiB, written
        // to limits.d, would take away the 8 MiB servers have by default).
        out.line(format!("{} nothing counted", out.bold("Plan:")))?;
        out.line("")?;
        if plan.skipped.is_empty() {
            out.line("Nothing to count: no huge page segments on this host (use --size, --postgres, --spec, --oracle, --mariadb or --mysql).")?;
        }
        skipped(plan, out)?;
        return memory_and_warnings(plan, out);
    }
    out.line(format!("{} {}", out.bold("Plan:"), advise::summary(plan)))?;
    out.line("")?;
    {
        out.line(out.bold("Counted"))?;
        let mut t = Table::new(&["region", ">size", "page", ">pages", "where", "note"]);
        for c in &plan.counted {
            t.row(vec![
                c.label.clone(),
                format_bytes(c.bytes),
                page_size_short(c.page_size_bytes),
                c.pages.to_string(),
                placement(c.placement),
                c.note.clone().unwrap_or_default(),
            ]);
        }
        t.render(out, "  ")?;
    }
    skipped(plan, out)?;
    out.line("")?;
    out.line(out.bold("Pools"))?;
    let mut t = Table::new(&[
        "size", "node", ">now", ">plan", ">change", ">spare", ">bytes",
    ]);
    for p in &plan.pools {
        let change = p.pages as i128 - p.current_pages as i128;
        t.row(vec![
            page_size_short(p.page_size_bytes),
            p.node
                .map(|n| n.to_string())
                .unwrap_or_else(|| "all".into()),
            p.current_pages.to_string(),
            p.pages.to_string(),
            format!("{change:+}"),
            p.spare_pages.to_string(),
            format_bytes(p.bytes),
        ]);
    }
    t.render(out, "  ")?;
    for d in &plan.demote {
        out.line(format!(
            "  demote: {} free {} page{} into {} {} pages first (--demote)",
            d.pages,
            page_size_short(d.page_size_bytes),
            if d.pages == 1 { "" } else { "s" },
            d.pages
                .saturating_mul(d.page_size_bytes / d.to_page_size_bytes.max(1)),
            page_size_short(d.to_page_size_bytes)
        ))?;
    }
    memory_and_warnings(plan, out)?;
    out.line("")?;
    out.line(out.bold("Configuration"))?;
    for r in &plan.config.runtime {
        out.line(format!("  now:      {r}"))?;
    }
    if let Some(k) = &plan.config.kernel_cmdline {
        out.line(format!("  boot:     add to the kernel command line: {k}"))?;
    }
    let users = &plan.config.memlock_users;
    let whom = if users.is_empty() || users.iter().any(|u| u == "*") {
        "every user (*; --memlock-user names the server's)".to_string()
    } else {
        users.join(", ")
    };
    out.line(match &plan.config.memlock_not_needed {
        Some(why) => format!("  memlock:  no lines: {why}"),
        None => format!(
            "  memlock:  {} KiB for {whom}; systemd: {} {}",
            plan.config.memlock_kib,
            plan.config.systemd,
            if plan.config.systemd_units.is_empty() {
                "for the server's unit (--systemd-unit NAME writes its drop-in)".to_string()
            } else {
                format!("in a drop-in for {}", plan.config.systemd_units.join(", "))
            }
        ),
    })?;
    if let Some(g) = plan.config.hugetlb_shm_group {
        out.line(format!(
            "  SysV:     vm.hugetlb_shm_group = {g} (lets that group create SHM_HUGETLB segments)"
        ))?;
    }
    out.line(format!(
        "  THP:      {} ({})",
        plan.config.thp, plan.config.thp_reason
    ))?;
    if let Some(v) = &plan.config.thp_shmem {
        out.line(format!(
            "  shmem:    transparent_hugepage/shmem_enabled = {v}: at boot with apply --persist \
             (tmpfiles.d), now with the command above; apply itself does not change it. Big \
             shared mappings are then placed 2 MiB-aligned, so that a server that falls back to \
             4 KiB pages can be moved onto 2 MiB pages without a restart (hugeshm collapse); no \
             memory gets THP that does not ask for it"
        ))?;
    }
    for f in &plan.config.files {
        out.line(format!("  {}", out.dim(&format!("{}:", f.path))))?;
        for l in f.content.lines() {
            out.line(format!("      {l}"))?;
        }
    }
    if let Some(c) = &plan.container {
        out.line("")?;
        out.line(out.bold("Container (Kubernetes pod spec)"))?;
        for l in c.yaml.lines() {
            out.line(format!("  {l}"))?;
        }
        for n in &c.notes {
            out.line(format!("  {} {n}", out.dim("note:")))?;
        }
    }
    out.line("")?;
    out.line(out.dim(&format!(
        "Reserve it now with `{apply}` (--dry-run to preview, --persist to write the files)."
    )))?;
    Ok(())
}
