//! `hugeshm advise`: pages per size per node, and the configuration.

use crate::cmd::input_file::InputFile;
use crate::output::{Out, Table, Usage};
use anyhow::{bail, Context};
use hugeshm_doctor::advise::{self, Demand, Placement, Plan, Skipped, DEFAULT_SPARE_PAGES};
use hugeshm_doctor::checked;
use hugeshm_parse::size::{format_bytes, page_size_short, MIB};
use hugeshm_parse::size_arg::parse_size_arg;
use hugeshm_probe::{HostSnapshot, Probe, Roots};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Where the demand comes from (shared by `advise` and `apply`).
#[derive(Debug, Clone, clap::Args)]
pub struct SourceArgs {
    /// Plan for a region of this size (an SGA, shared_buffers, a cache): 18G, 512M.
    #[arg(long, value_parser = crate::values::size, allow_hyphen_values = true)]
    pub size: Option<u64>,
    /// Page size for --size (default: the kernel's default huge page size).
    #[arg(long, value_parser = crate::values::huge_page_size(), requires = "size")]
    pub page_size: Option<u64>,
    /// Put the --size region on this NUMA node.
    #[arg(long, requires = "size", conflicts_with = "spread")]
    pub node: Option<u32>,
    /// Split the --size region evenly over every NUMA node.
    #[arg(long, requires = "size")]
    pub spread: bool,
    /// Ask the PostgreSQL cluster in this data directory (postgres -C while it is
    /// down, the running server otherwise).
    #[arg(long, value_name = "DATADIR")]
    pub postgres: Option<PathBuf>,
    /// The postgres binary (default: /usr/lib/postgresql/N/bin/postgres or
    /// /usr/pgsql-N/bin/postgres for the major version N in PG_VERSION). It
    /// must be a regular file of root's (or the caller's) that nobody else
    /// can write, in directories nobody else can write.
    #[arg(long, value_name = "PATH", requires = "postgres")]
    pub postgres_bin: Option<PathBuf>,
    /// Regions listed in a hugeshm spec file (TOML, see docs/advise.md).
    #[arg(long, value_name = "FILE")]
    pub spec: Option<PathBuf>,
    /// Also count the shared memory live on this host (the default when no
    /// other source is given). Without it, a plan of --size or --spec
    /// regions keeps room for the huge pages live segments use: advise
    /// warns and apply refuses a pool that would not hold both.
    #[arg(long)]
    pub live: bool,
    /// Spare pages added to each pool.
    #[arg(long, default_value_t = DEFAULT_SPARE_PAGES)]
    pub spare: u64,
    /// Where a pool grows and free pages of a larger pool the plan leaves
    /// alone (1 GiB) could give the growth, demote them (the kernel's
    /// `demote`, Linux 5.16+) instead of finding new contiguous memory;
    /// without it, advise only says so.
    #[arg(long)]
    pub demote: bool,
    /// The user the memlock lines (limits.d) are for: a login name, `@group`
    /// or `:UID`. Default: the owners of the live segments or the PostgreSQL
    /// data directory the plan counts, else every user (`*`).
    #[arg(long, value_name = "USER", value_parser = parse_memlock_user)]
    pub memlock_user: Option<String>,
    /// A systemd service that runs the server (repeat for more): the plan
    /// gives it a drop-in with `LimitMEMLOCK=`, as limits.d does not apply
    /// to services. Default: the services of the processes that map the
    /// live segments the plan counts.
    #[arg(long, value_name = "UNIT", value_parser = parse_systemd_unit)]
    pub systemd_unit: Vec<String>,
}

impl SourceArgs {
    /// `hugeshm apply` with these sources, one shell word per value: the
    /// command that reserves the plan advise printed (advise's own options,
    /// `--container`, `--run` and `--json`, are not apply's).
    pub fn apply_command(&self) -> String {
        use hugeshm_fix::shell_quote as q;
        let path = |p: &PathBuf| q(&p.to_string_lossy()).into_owned();
        let mut w = vec!["hugeshm apply".to_owned()];
        let mut opt = |name: &str, value: Option<String>| {
            w.push(match value {
                Some(v) => format!("--{name} {v}"),
                None => format!("--{name}"),
            })
        };
        if let Some(s) = self.size {
            opt("size", Some(page_size_short(s)));
        }
        if let Some(p) = self.page_size {
            opt("page-size", Some(page_size_short(p)));
        }
        if let Some(n) = self.node {
            opt("node", Some(n.to_string()));
        }
        if self.spread {
            opt("spread", None);
        }
        if let Some(p) = &self.postgres {
            opt("postgres", Some(path(p)));
        }
        if let Some(p) = &self.postgres_bin {
            opt("postgres-bin", Some(path(p)));
        }
        if let Some(p) = &self.spec {
            opt("spec", Some(path(p)));
        }
        if self.live {
            opt("live", None);
        }
        if self.spare != DEFAULT_SPARE_PAGES {
            opt("spare", Some(self.spare.to_string()));
        }
        if self.demote {
            opt("demote", None);
        }
        if let Some(u) = &self.memlock_user {
            opt("memlock-user", Some(q(u).into_owned()));
        }
        for u in &self.systemd_unit {
            opt("systemd-unit", Some(q(u).into_owned()));
        }
        w.join(" ")
    }
}

/// `s` where `valid` holds, else "`s` is not WHAT".
fn accept(s: &str, valid: fn(&str) -> bool, what: &str) -> Result<String, String> {
    valid(s)
        .then(|| s.to_string())
        .ok_or_else(|| format!("{s:?} is not {what}"))
}

fn parse_systemd_unit(s: &str) -> Result<String, String> {
    accept(
        s,
        advise::valid_systemd_unit,
        "a systemd service: give NAME.service or NAME@INSTANCE.service",
    )
}

fn parse_memlock_user(s: &str) -> Result<String, String> {
    accept(
        s,
        advise::valid_memlock_user,
        "a limits.conf user: give a login name, @group, :UID or *",
    )
}

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

/// A spec file.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecFile {
    #[serde(default)]
    spare_pages: Option<u64>,
    #[serde(default)]
    memlock_user: Option<String>,
    #[serde(default)]
    systemd_unit: Option<String>,
    #[serde(default)]
    region: Vec<SpecRegion>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecRegion {
    name: String,
    size: String,
    #[serde(default)]
    page_size: Option<String>,
    #[serde(default)]
    node: Option<u32>,
    #[serde(default)]
    spread: bool,
    #[serde(default)]
    sysv_group: Option<u32>,
}

/// What a spec file asks for: its regions, and the settings it names.
struct Spec {
    demands: Vec<Demand>,
    spare_pages: Option<u64>,
    memlock_user: Option<String>,
    systemd_unit: Option<String>,
}

/// A page size the host's kernel offers, or a usage error that names it
/// and those it offers (a size it lacks would be written as a pool that
/// does not exist: `page_size = "3"` gave `hugepages-0kB`).
fn offered_page_size(host: &HostSnapshot, page: u64, what: &str) -> anyhow::Result<()> {
    if host.pool(page).is_some() {
        return Ok(());
    }
    let offered: Vec<String> = host
        .pools
        .iter()
        .map(|p| page_size_short(p.page_size_bytes))
        .collect();
    Err(Usage(format!(
        "{what}: this kernel offers no {} pages ({page} bytes; it offers {})",
        format_bytes(page),
        offered.join(", ")
    ))
    .into())
}

fn spec_demands(host: &HostSnapshot, path: &Path, default: u64) -> anyhow::Result<Spec> {
    let file = InputFile::read("--spec", path, "a spec")?;
    let spec: SpecFile = file.toml("a valid hugeshm spec")?;
    let bad = |what: String| Usage(format!("{}: {what}", path.display()));
    if spec.region.is_empty() {
        return Err(bad("no [[region]] entries".into()).into());
    }
    if let Some(u) = &spec.memlock_user {
        parse_memlock_user(u).map_err(|e| bad(format!("memlock_user: {}", file.said(e))))?;
    }
    if let Some(u) = &spec.systemd_unit {
        parse_systemd_unit(u).map_err(|e| bad(format!("systemd_unit: {}", file.said(e))))?;
    }
    let mut out = Vec::new();
    for r in spec.region {
        let region = file.quoted(&r.name);
        let size = parse_size_arg(&r.size)
            .map_err(|e| bad(format!("region {region}: size {}", file.said(e))))?;
        let page = match &r.page_size {
            Some(p) => parse_size_arg(p)
                .map_err(|e| bad(format!("region {region}: page_size {}", file.said(e))))?,
            None => default,
        };
        if r.node.is_some() && r.spread {
            return Err(bad(format!(
                "region {region}: node and spread exclude each other"
            ))
            .into());
        }
        let placement = match (r.node, r.spread) {
            (Some(n), _) => Placement::Node(n),
            (None, true) => Placement::Spread,
            _ => Placement::Any,
        };
        offered_page_size(
            host,
            page,
            &format!("{}: region {region}: page_size", path.display()),
        )?;
        let mut d = Demand::new(format!("spec {}", r.name), size, page).placed(placement);
        if let Some(g) = r.sysv_group {
            d = d.with_sysv_gid(g);
        }
        out.push(d);
    }
    Ok(Spec {
        demands: out,
        spare_pages: spec.spare_pages,
        memlock_user: spec.memlock_user,
        systemd_unit: spec.systemd_unit,
    })
}

/// Builds the plan from the sources.
pub fn build_plan(probe: &Probe, host: &HostSnapshot, src: &SourceArgs) -> anyhow::Result<Plan> {
    if !host.hugetlb_supported() {
        bail!("this kernel has no hugetlb support (no /sys/kernel/mm/hugepages): there is no pool to plan");
    }
    let default = host.default_page_size().unwrap_or(2 * MIB);
    let mut demands = Vec::new();
    let mut skipped: Vec<Skipped> = Vec::new();
    let mut spare = src.spare;
    let mut memlock_user = src.memlock_user.clone();
    let mut units = src.systemd_unit.clone();
    if let Some(size) = src.size {
        let page = src.page_size.unwrap_or(default);
        offered_page_size(host, page, "--page-size")?;
        let placement = match (src.node, src.spread) {
            (Some(n), _) => Placement::Node(n),
            (None, true) => Placement::Spread,
            _ => Placement::Any,
        };
        demands.push(
            Demand::new(format!("--size {}", format_bytes(size)), size, page).placed(placement),
        );
    }
    if let Some(dd) = &src.postgres {
        let pg =
            hugeshm_probe::postgres::pg_sizing(dd, src.postgres_bin.as_deref(), &probe.roots.proc)
                .with_context(|| format!("asking PostgreSQL about {}", dd.display()))?;
        let page = pg.huge_page_size_bytes.unwrap_or(default);
        let owner = std::os::unix::fs::MetadataExt::uid(
            &std::fs::metadata(dd).with_context(|| format!("reading {}", dd.display()))?,
        );
        demands.push(
            Demand::new(
                format!("postgres {}", dd.display()),
                match pg.shared_memory_bytes {
                    Some(b) => b,
                    None => checked::mul(pg.huge_pages, page, || {
                        format!("PostgreSQL's {} huge pages: bytes", dd.display())
                    })
                    .map_err(|e| Usage(e.to_string()))?,
                },
                page,
            )
            .with_pages(pg.huge_pages)
            .with_note(format!(
                "PostgreSQL {}'s own shared_memory_size_in_huge_pages ({}), huge_pages={}",
                pg.version.as_deref().unwrap_or("?"),
                pg.source,
                pg.huge_pages_setting.as_deref().unwrap_or("?")
            ))
            .owned_by(owner),
        );
    }
    if let Some(spec) = &src.spec {
        let spec = spec_demands(host, spec, default)?;
        demands.extend(spec.demands);
        if let Some(s) = spec.spare_pages {
            spare = s;
        }
        // --memlock-user wins over the spec's.
        memlock_user = memlock_user.or(spec.memlock_user);
        if units.is_empty() {
            units.extend(spec.systemd_unit);
        }
    }
    let new_regions_only = !demands.is_empty() && !src.live && src.postgres.is_none();
    if src.live || demands.is_empty() {
        // For their sizes and processes: findings are not advise's.
        let segs = hugeshm_doctor::segments::build_with(probe, host, &Default::default());
        // The services of the processes that map a counted segment, each
        // process looked up once: from the hugetlb cgroup the scan read,
        // else (it read none, or on cgroup v1 that path need not be
        // systemd's) from its /proc/PID/cgroup. advise keeps the services.
        let unit_of = std::cell::RefCell::new(std::collections::HashMap::new());
        let (d, s) = advise::demands_from_segments(host, &segs, |seg| {
            let mut cache = unit_of.borrow_mut();
            let units: std::collections::BTreeSet<String> = seg
                .attached
                .iter()
                .filter_map(|a| {
                    cache
                        .entry(a.pid)
                        .or_insert_with(|| {
                            a.cgroup
                                .as_deref()
                                .and_then(hugeshm_parse::cgroup::systemd_unit_of_path)
                                .or_else(|| {
                                    let f = probe.proc_path(&format!("{}/cgroup", a.pid));
                                    let text = std::fs::read_to_string(f).ok()?;
                                    hugeshm_parse::cgroup::systemd_unit(&text)
                                })
                        })
                        .clone()
                })
                .collect();
            units.into_iter().collect()
        });
        demands.extend(d);
        skipped.extend(s);
    }
    let mut plan =
        advise::plan(host, &demands, skipped, spare).map_err(|e| Usage(e.to_string()))?;
    if new_regions_only {
        // Name the live segments only where a pool is crowded by them.
        let crowded =
            !advise::crowded_pools(&plan, |s, n| advise::live_pages(host, s, n)).is_empty();
        let segs =
            crowded.then(|| hugeshm_doctor::segments::build_with(probe, host, &Default::default()));
        advise::keep_room_for_live(&mut plan, host, segs.as_ref());
    }
    advise::add_demotion(&mut plan, host, src.demote);
    if !units.is_empty() {
        plan.config.set_systemd_units(units);
    }
    match memlock_user {
        Some(u) => plan.config.set_memlock_users(vec![u]),
        None => {
            // `:UID` domains read better as the host's login names (where
            // a uid has one name only: a line names one login).
            let users = hugeshm_probe::Users::of(&probe.roots);
            plan.config
                .name_memlock_users(|uid| users.only_name_of(uid));
        }
    }
    Ok(plan)
}

/// Runs the command.
pub fn run(roots: &Roots, args: &Args, out: &mut Out) -> anyhow::Result<ExitCode> {
    if args.run.as_deref() == Some("") && args.source.postgres.is_none() {
        return Err(Usage("--run: name the server's executable (--run=NAME)".into()).into());
    }
    let probe = crate::cmd::doctor_probe(roots);
    let host = probe.host();
    let mut plan = build_plan(&probe, &host, &args.source)?;
    if args.container {
        plan.container = Some(advise::container_advice(&plan));
    }
    if args.json {
        out.json_doc(&plan)?;
    } else {
        print(&plan, &args.source.apply_command(), out)?;
        if let Some(name) = &args.run {
            print_run_dropin(&plan, name, args.source.postgres.is_some(), out)?;
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
    let (preload, run) = crate::cmd::run::environment(&settings).map_err(anyhow::Error::msg)?;
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

/// Prints a plan.
pub fn print(plan: &Plan, apply: &str, out: &mut Out) -> anyhow::Result<()> {
    if plan.counted.is_empty() {
        // No pools, and no settings to give (a memlock of 0 KiB, written
        // to limits.d, would take away the 8 MiB servers have by default).
        out.line(format!("{} nothing counted", out.bold("Plan:")))?;
        out.line("")?;
        out.line("Nothing to count: no huge page segments on this host (use --size, --postgres or --spec).")?;
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
    if !plan.skipped.is_empty() {
        out.line(out.bold("Skipped"))?;
        for s in &plan.skipped {
            out.line(format!("  {}: {}", s.label, s.reason))?;
        }
    }
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
    out.line(format!(
        "  memlock:  {} KiB for {whom}; systemd: {} {}",
        plan.config.memlock_kib,
        plan.config.systemd,
        if plan.config.systemd_units.is_empty() {
            "for the server's unit (--systemd-unit NAME writes its drop-in)".to_string()
        } else {
            format!("in a drop-in for {}", plan.config.systemd_units.join(", "))
        }
    ))?;
    if let Some(g) = plan.config.hugetlb_shm_group {
        out.line(format!(
            "  SysV:     vm.hugetlb_shm_group = {g} (lets that group create SHM_HUGETLB segments)"
        ))?;
    }
    out.line(format!(
        "  THP:      {} ({})",
        plan.config.thp, plan.config.thp_reason
    ))?;
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
