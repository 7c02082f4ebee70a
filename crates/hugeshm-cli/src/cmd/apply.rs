//! `hugeshm apply`: reserve a plan on the running host, all or nothing, and
//! optionally persist it.

use crate::cmd::input_file;
use crate::cmd::sources::SourceArgs;
use crate::output::{Out, Table, Usage, JSON_SCHEMA};

use anyhow::bail;
use hugeshm_apply::{
    persist, ApplyOptions, ApplyReport, ApplyStep, PersistAction, PersistError, PersistedFile,
    StepHook,
};
use hugeshm_doctor::advise::Plan;
use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_probe::Roots;
use std::path::PathBuf;
use std::process::ExitCode;

/// `hugeshm apply` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Apply a plan written by `hugeshm advise --json` instead.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["size", "postgres", "spec", "live"])]
    pub plan: Option<PathBuf>,
    /// Print what would change; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Keep what the kernel granted when it is less than the plan (default:
    /// restore every pool and fail).
    #[arg(long)]
    pub allow_partial: bool,
    /// Also write the sysctl.d, tmpfiles.d, limits.d and kernel command line
    /// files (atomically, keeping the previous version as a backup).
    #[arg(long)]
    pub persist: bool,
    /// Try even when the plan adds more than the memory the kernel reports
    /// available (MemAvailable), or (a plan of --size or --spec alone)
    /// leaves a pool too small for the live segments and the plan together.
    #[arg(long)]
    pub force: bool,
    /// Write the files only; leave the running pools alone.
    #[arg(long, conflicts_with = "persist")]
    pub persist_only: bool,
    /// Root under which --persist writes (default /).
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(serde::Serialize)]
struct ApplyOutput<'a> {
    plan: &'a Plan,
    result: Option<&'a ApplyReport>,
    persisted: &'a [PersistedFile],
}

/// Runs the command.
pub fn run(roots: &Roots, args: &Args, out: &mut Out) -> anyhow::Result<ExitCode> {
    let probe = crate::cmd::doctor_probe(roots);
    let host = probe.host();
    let mut plan_file = None;
    let plan: Plan = match &args.plan {
        Some(f) => {
            plan_file = Some(input_file::read("--plan", f, "a plan")?);
            plan_file
                .as_ref()
                .expect("just read")
                .plan(JSON_SCHEMA)
                .map_err(Usage)?
        }
        None => args.source.plan(&probe, &host)?,
    };
    if plan.pools.is_empty() {
        bail!("the plan has no pools to reserve (nothing counted)");
    }
    let writes = args.persist || args.persist_only;
    if let (Some(f), true) = (&plan_file, writes) {
        // The files are written as root: only what advise writes for these
        // pools, never a path or a line a plan file brought.
        hugeshm_doctor::advise::check_plan_files(&plan, &host).map_err(|e| {
            anyhow::anyhow!(
                "{}: {}; nothing was written. Make the plan again with hugeshm advise --json, \
                     or persist from the sources (apply --persist --size/--spec/--live)",
                f.path().display(),
                f.said(e)
            )
        })?;
    }
    if writes
        && !args.dry_run
        && args.root == std::path::Path::new("/")
        && host.self_uid.is_some_and(|u| u != 0)
    {
        bail!("--persist writes under /etc and needs root (or --root DIR for a staging tree)");
    }
    let result = if args.persist_only {
        None
    } else {
        let mut opts = ApplyOptions::default();
        opts.allow_partial = args.allow_partial;
        opts.dry_run = args.dry_run;
        opts.force = args.force;
        // Writing a pool can take seconds (the kernel finds and zeroes
        // the pages; compaction and retries wait): a line on a terminal.
        let steps = crate::progress::steps("apply", hugeshm_apply::planned_steps(&plan, &opts));
        let _finish = steps.finish_on_drop();
        let line = steps.clone();
        opts.on_step = Some(StepHook::new(move |s| {
            // A short pool: the retries left join the plan.
            if let ApplyStep::Retry { attempt, of } = s {
                line.plan(line.begun() + (of + 1).saturating_sub(attempt) as u64);
            }
            line.begin(&s.to_string())
        }));
        Some(
            hugeshm_apply::apply(&probe, &plan, &opts).map_err(|e| match e {
                // A plan file's numbers that do not fit: bad input.
                hugeshm_apply::ApplyError::TooLarge(t) => {
                    anyhow::Error::new(Usage(format!("refused: {t}; nothing was changed")))
                }
                e => e.into(),
            })?,
        )
    };
    let persisted = if writes && !args.dry_run {
        persist(&plan, &args.root, crate::cmd::sudo_uid()).map_err(|e| match e {
            PersistError::Refused(why) => anyhow::Error::new(Usage(format!(
                "--root {}: {why}; nothing was written. Make each directory on the way root's \
                 (chown root:) and not writable by group or others (chmod go-w), or name \
                 another --root",
                args.root.display()
            ))),
            e => anyhow::Error::new(e).context("persisting the configuration"),
        })?
    } else {
        Vec::new()
    };
    if args.json {
        out.json_doc(&ApplyOutput {
            plan: &plan,
            result: result.as_ref(),
            persisted: &persisted,
        })?;
    } else {
        print(&plan, result.as_ref(), &persisted, args, out)?;
        out.flush()?;
    }
    Ok(if result.as_ref().is_some_and(|r| !r.complete) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn print(
    plan: &Plan,
    r: Option<&ApplyReport>,
    persisted: &[PersistedFile],
    args: &Args,
    out: &mut Out,
) -> anyhow::Result<()> {
    for w in &plan.warnings {
        out.line(format!(
            "{} {w}",
            out.severity(hugeshm_doctor::Severity::Warning)
        ))?;
    }
    if let Some(r) = r {
        for d in &r.demoted {
            out.line(format!(
                "demoted {} {} page{}: the {} pool {} -> {}, the {} pool {} -> {}",
                d.pages,
                page_size_short(d.page_size_bytes),
                if d.pages == 1 { "" } else { "s" },
                page_size_short(d.page_size_bytes),
                d.before,
                d.after,
                page_size_short(d.to_page_size_bytes),
                d.to_before,
                d.to_after
            ))?;
        }
        let mut t = Table::new(&[
            "size",
            "node",
            ">before",
            ">requested",
            ">granted",
            ">in use+rsvd",
            "file",
        ]);
        for c in &r.changes {
            t.row(vec![
                page_size_short(c.page_size_bytes),
                c.node
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| "all".into()),
                c.before.to_string(),
                c.requested.to_string(),
                if r.dry_run {
                    "-".into()
                } else {
                    out.good(&c.granted.to_string(), c.granted >= c.requested)
                },
                c.floor.to_string(),
                c.path.clone(),
            ]);
        }
        t.render(out, "")?;
        if r.dry_run {
            out.line("dry run: nothing changed")?;
        } else if r.complete {
            let bytes: u64 = r
                .changes
                .iter()
                .map(|c| c.granted.saturating_mul(c.page_size_bytes))
                .fold(0, u64::saturating_add);
            out.line(format!(
                "reserved {} in {:.3} s ({:.0} pages/s{})",
                format_bytes(bytes),
                r.seconds,
                r.pages_per_second,
                if r.compactions > 0 {
                    format!(", after {} compactions", r.compactions)
                } else {
                    String::new()
                }
            ))?;
        } else {
            out.line(
                "partial: the kernel granted fewer pages than planned (--allow-partial kept them)",
            )?;
        }
    }
    if args.dry_run && (args.persist || args.persist_only) {
        for f in &plan.config.files {
            out.line(format!(
                "would write {}",
                args.root.join(f.path.trim_start_matches('/')).display()
            ))?;
        }
    }
    for p in persisted {
        let what = match p.action {
            PersistAction::Created => "created",
            PersistAction::Updated => "updated",
            PersistAction::Unchanged => "unchanged",
        };
        out.line(format!(
            "{what} {}{}",
            p.path,
            p.backup
                .as_ref()
                .map(|b| format!(" (previous version in {b})"))
                .unwrap_or_default()
        ))?;
    }
    if !persisted.is_empty() && !plan.config.systemd_units.is_empty() {
        out.line(format!(
            "systemd: run systemctl daemon-reload; the new limit applies when {} next starts",
            plan.config.systemd_units.join(", ")
        ))?;
    }
    if let Some(k) = &plan.config.kernel_cmdline {
        if !persisted.is_empty() {
            out.line(format!(
                "kernel command line: {k} (run update-grub, then reboot)"
            ))?;
        }
    }
    Ok(())
}
