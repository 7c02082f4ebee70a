//! `hugeshm create` and `hugeshm rm`: regions from the command line.

use crate::output::{Out, Table};
use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_region::{
    AllocationReport, Backend, Locator, PageSize, Placement, Policy, Probe, Reclaim, RegionBuilder,
    RegionError, Renderer, Roots,
};
use std::path::PathBuf;
use std::process::ExitCode;

/// `hugeshm create` options.
#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// The region's name (letters, digits, `-`, `_`, `.`).
    #[arg(value_parser = parse_region_name)]
    pub name: String,
    /// Size: 512M, 1G, 1.5G, 10GiB (powers of 1024; 10GB is refused: write
    /// 10G, or 10000000000 for 10^9 bytes).
    #[arg(long, value_parser = crate::values::size, allow_hyphen_values = true)]
    pub size: u64,
    /// Page size: 4k, 2m, 1g (or another power of two the kernel offers), or
    /// largest (the largest whose pool holds the region).
    #[arg(long, default_value = "largest", value_parser = crate::values::page_size_or_largest())]
    pub page_size: PageSize,
    /// What to do when the huge pages cannot be had.
    #[arg(long, default_value = "only", value_parser = crate::values::policy())]
    pub policy: Policy,
    /// Pre-fault threads (default: the CPUs this process may use; 0 skips the pre-fault).
    #[arg(long)]
    pub prefault_threads: Option<usize>,
    /// Where the memory comes from (dax: --dir picks the -o dax mount,
    /// --device the device-dax).
    #[arg(long, default_value = "sysv", value_parser = crate::values::backend())]
    pub backend: Backend,
    /// Lock the region in memory (checked against the memlock limit first).
    #[arg(long)]
    pub mlock: bool,
    /// Permission bits (octal).
    #[arg(long, default_value = "0600", value_parser = parse_mode)]
    pub mode: u32,
    /// NUMA placement: bind=NODES, interleave[=NODES], preferred=NODE,
    /// weighted-interleave[=NODES], or per-node (one region per node,
    /// NAME.node0, NAME.node1, ..., each bound to its node, like Oracle's
    /// NUMA buffer pools); default: this process's own policy, e.g. from
    /// numactl, which is honoured and checked.
    #[arg(long, default_value = "default")]
    pub numa: Placement,
    /// With --reclaim: accept an existing region owned by this user (uid or
    /// login name; default: the effective user).
    #[arg(long, value_parser = parse_owner)]
    pub owner: Option<u32>,
    /// Directory for file backends (a hugetlbfs mount, a tmpfs directory,
    /// a directory on a -o dax mount); for dax also a device-dax
    /// (--device /dev/dax0.0: the region takes the device from offset 0).
    #[arg(long, visible_alias = "device")]
    pub dir: Option<PathBuf>,
    /// When the name exists and nobody holds it (kept, or left by a crash).
    #[arg(long, default_value = "refuse", value_parser = crate::values::reclaim())]
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
    #[arg(value_parser = parse_region_name)]
    pub name: String,
    /// Only this backend (default: every backend a name finds: sysv, posix, hugetlbfs, memfd, dax).
    #[arg(long, value_parser = crate::values::backend())]
    pub backend: Option<Backend>,
    /// Remove the per-node set NAME (NAME.node0, NAME.node1, ...) that
    /// `create --numa per-node` made; nothing is removed while any part is held.
    #[arg(long)]
    pub per_node: bool,
    #[command(flatten)]
    pub place: PlaceArgs,
    #[command(flatten)]
    pub trust: TrustArgs,
    /// Print what was removed as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Where `rm` and `attach` look for a file region.
#[derive(Debug, Clone, clap::Args)]
pub struct PlaceArgs {
    /// Look only in this directory (the --dir the region was created with:
    /// a subdirectory of a hugetlbfs, tmpfs or dax mount, which a search by
    /// name does not enter), or on this device-dax (--device /dev/dax0.0);
    /// only the file backends (posix, hugetlbfs, dax) are searched.
    #[arg(long, visible_alias = "device")]
    pub dir: Option<PathBuf>,
}

impl PlaceArgs {
    /// A region error of a command that looks a name up: not found in
    /// any backend says where else a region may be (a subdirectory of a
    /// mount is found with the same --dir).
    pub fn error(&self, e: RegionError) -> anyhow::Error {
        match e {
            RegionError::NotFoundAnywhere { .. } if self.dir.is_none() => anyhow::anyhow!(
                "{e}; a region created with --dir in a subdirectory of a mount is found with the \
                 same --dir"
            ),
            e => region_error(e),
        }
    }

    /// `l`, restricted to the directory when one was given.
    pub fn locator(&self, l: Locator) -> Locator {
        match &self.dir {
            Some(d) => l.directory(d),
            None => l,
        }
    }
}

/// Whose regions a command accepts: by default only this user's, and none
/// that group or others may write.
#[derive(Debug, Clone, clap::Args)]
pub struct TrustArgs {
    /// Accept a region owned by this user (uid or login name; default: the
    /// effective user). Another user's region is refused otherwise.
    #[arg(long, value_parser = parse_owner)]
    pub owner: Option<u32>,
    /// Accept group/other write access up to this mode (default 0600: a
    /// region others may write is refused). `create --mode` sets the bits.
    #[arg(long, alias = "mode", value_name = "MODE", default_value = "0600", value_parser = parse_mode)]
    pub accept_mode: u32,
}

impl TrustArgs {
    /// `l` with these settings.
    pub fn locator(&self, l: Locator) -> Locator {
        let l = l.mode(self.accept_mode);
        match self.owner {
            Some(uid) => l.owner(uid),
            None => l,
        }
    }
}

/// A uid, or a login name of the system's user database (NSS: /etc/passwd,
/// LDAP, SSSD... as `getent passwd NAME` sees it).
pub(crate) fn parse_owner(s: &str) -> Result<u32, String> {
    if let Ok(uid) = s.parse() {
        return Ok(uid);
    }
    hugeshm_probe::Users::system()
        .uid_of(s)
        .ok_or_else(|| format!("{s:?} is neither a uid nor a user of this host (getent passwd)"))
}

/// A region name on the command line: one that [`validate_name`] accepts,
/// else a usage error (exit 2) saying why, before anything is looked up.
///
/// [`validate_name`]: hugeshm_region::validate_name
pub(crate) fn parse_region_name(s: &str) -> Result<String, String> {
    hugeshm_region::validate_name(s)
        .map(|()| s.to_owned())
        .map_err(|e| e.to_string())
}

fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| format!("{s:?} is not an octal mode such as 0600"))
}

/// A region error as a CLI error, with its fix, in `hugeshm` commands, on
/// a line of its own.
pub(crate) fn region_error(e: RegionError) -> anyhow::Error {
    match e.fix() {
        Some(fix) => anyhow::Error::new(crate::output::WithFix {
            error: e.to_string(),
            fix: fix.render(Renderer::Cli),
        }),
        None => anyhow::anyhow!("{e}"),
    }
}

/// Runs `create`.
pub fn create(roots: &Roots, a: &CreateArgs, out: &mut Out) -> anyhow::Result<ExitCode> {
    if !a.backend.is_named() && !a.hold {
        return Err(crate::output::Usage(format!(
            "a {} region lives only while a process maps it: add --hold to keep this process \
             holding it",
            a.backend
        ))
        .into());
    }
    let bar = crate::progress::Bytes::new(&format!("creating {}", a.name));
    let mut b = RegionBuilder::new(a.size)
        .probe(Probe::new(roots.clone()))
        .backend(a.backend)
        .page_size(a.page_size)
        .policy(a.policy)
        .mlock(a.mlock)
        .mode(a.mode)
        .reclaim(a.reclaim)
        .numa(a.numa.clone())
        .keep(!a.hold)
        .name(a.name.clone());
    if let Some(t) = a.prefault_threads {
        b = b.prefault_threads(t);
    }
    if let Some(d) = &a.dir {
        b = b.directory(d.clone());
    }
    if let Some(uid) = a.owner {
        b = b.owner(uid);
    }
    {
        let bar = bar.clone();
        b = b.progress(move |done, total| bar.update(done, total));
    }
    let regions = if a.numa == Placement::PerNode {
        let result = b.create_per_node();
        bar.finish();
        let parts = result.map_err(region_error)?;
        let doc = PerNodeDoc {
            placement: "per-node",
            parts: parts
                .iter()
                .map(|(p, r)| PartDoc {
                    node: p.node,
                    report: r,
                })
                .collect(),
        };
        if a.json {
            out.json_doc(&doc)?;
        } else {
            print_per_node(&doc, out)?;
            out.flush()?;
        }
        parts.into_iter().map(|(p, _)| p.region).collect()
    } else {
        let result = b.create();
        bar.finish();
        let (region, report) = result.map_err(region_error)?;
        if a.json {
            out.json_doc(&report)?;
        } else {
            print_report(&report, out)?;
            out.flush()?;
        }
        vec![region]
    };
    if a.hold {
        let kept = if a.backend.is_named() {
            " (the named object stays: hugeshm rm removes it)"
        } else {
            ""
        };
        hold(
            format_args!("holding region {}", a.name),
            &format!("releases it{kept}"),
            format_args!("releasing region {}", a.name),
        )?;
    }
    // Unmaps; a memfd region's last holder removes its record.
    for region in regions {
        region.close().map_err(region_error)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// What `create --numa per-node --json` prints: each node's part with its
/// allocation report.
#[derive(Debug, serde::Serialize)]
struct PerNodeDoc<'a> {
    placement: &'static str,
    parts: Vec<PartDoc<'a>>,
}

#[derive(Debug, serde::Serialize)]
struct PartDoc<'a> {
    node: u32,
    #[serde(flatten)]
    report: &'a AllocationReport,
}

/// One line per node: the part, its pages, where they are, how fast the
/// node's CPUs faulted them.
fn print_per_node(doc: &PerNodeDoc<'_>, out: &mut Out) -> anyhow::Result<()> {
    let total: u64 = doc.parts.iter().map(|p| p.report.size_bytes).sum();
    out.line(format!(
        "Created {} per-node region{}, {} in all (one per NUMA node, each bound to it):",
        doc.parts.len(),
        if doc.parts.len() == 1 { "" } else { "s" },
        format_bytes(total)
    ))?;
    if let Some(reason) = doc.parts.first().and_then(|p| p.report.reason()) {
        out.line(format!(
            "  {} on base pages: {reason}",
            out.severity(hugeshm_doctor::Severity::Warning)
        ))?;
    }
    let mut t = Table::new(&[
        "node",
        "name",
        ">size",
        "page",
        "on nodes",
        ">pre-fault",
        "CPUs",
    ]);
    for p in &doc.parts {
        let r = p.report;
        let on: Vec<String> = r
            .node_bytes
            .iter()
            .map(|(n, b)| format!("{n}: {}", format_bytes(*b)))
            .collect();
        let cpus: Vec<String> = r.prefault_cpus.iter().map(u32::to_string).collect();
        t.row(vec![
            p.node.to_string(),
            r.name.clone().unwrap_or_else(|| "-".into()),
            format_bytes(r.size_bytes),
            page_size_short(r.verified_page_size_bytes),
            on.join(", "),
            format!("{:.1} GB/s", r.prefault_gbps),
            if cpus.is_empty() {
                "-".into()
            } else {
                cpus.join(",")
            },
        ]);
    }
    t.render(out, "  ")
}

/// Holds what the process has until SIGINT, SIGTERM or SIGHUP: catches
/// them (also when the shell started this process with SIGINT ignored, as
/// it does for background jobs) before it says `holding` and what releases
/// it, so that a signal sent right after cannot kill the process outright;
/// then says which signal came and `after`. The caller releases what it
/// holds on the normal path.
pub(crate) fn hold(
    holding: std::fmt::Arguments,
    releases: &str,
    after: std::fmt::Arguments,
) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    let pid = std::process::id();
    crate::terminal::eprintln(format_args!(
        "{holding} (pid {pid}); SIGINT (Ctrl-C), SIGTERM or SIGHUP {releases}"
    ));
    let sig = match signals.forever().next().unwrap_or(SIGTERM) {
        SIGINT => "SIGINT",
        SIGHUP => "SIGHUP",
        _ => "SIGTERM",
    };
    crate::terminal::eprintln(format_args!("{sig}: {after}"));
    Ok(())
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
    if let Some(fb) = &r.fallback {
        out.line(format!(
            "  {} fell back to 4 KiB pages: {}",
            out.severity(hugeshm_doctor::Severity::Warning),
            fb.reason
        ))?;
        if let Some(s) = &fb.shortfall {
            out.line(format!("  to fix: {}", s.fix.render(Renderer::Cli)))?;
        }
    }
    if let Some(c) = &r.reclaimed {
        out.line(format!(
            "  {} a {} region was left under this name ({}): {}",
            out.severity(hugeshm_doctor::Severity::Info),
            c.previous_state,
            c.previous_object,
            if c.action == Reclaim::Reuse {
                "reused, contents kept"
            } else {
                "removed and created anew"
            }
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
    if r.node_bytes.len() > 1 || r.placement != Placement::Default {
        let nodes: Vec<String> = r
            .node_bytes
            .iter()
            .map(|(n, b)| format!("{n}: {}", format_bytes(*b)))
            .collect();
        t.row(vec![
            "nodes".into(),
            format!("{} (placement {})", nodes.join(", "), r.placement),
        ]);
    }
    t.row(vec![
        "pre-fault".into(),
        format!(
            "{:.3} s, {:.1} GB/s, {} thread{} ({}){}",
            r.prefault_seconds,
            r.prefault_gbps,
            r.prefault_threads,
            if r.prefault_threads == 1 { "" } else { "s" },
            r.prefault_method.as_str(),
            if r.prefault_cpus.is_empty() {
                String::new()
            } else {
                let cpus: Vec<String> = r.prefault_cpus.iter().map(u32::to_string).collect();
                format!(" on the node's CPUs {}", cpus.join(","))
            }
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
pub fn rm(roots: &Roots, a: &RmArgs, out: &mut Out) -> anyhow::Result<ExitCode> {
    let l = a.trust.locator(a.place.locator(
        Locator::new(&a.name, a.backend.unwrap_or(Backend::Sysv)).probe(Probe::new(roots.clone())),
    ));
    let found = match (a.backend, a.per_node) {
        (None, per_node) => l.remove_any(per_node),
        (Some(b), true) => l
            .remove_per_node()
            .map(|o| o.into_iter().map(|o| (b, o)).collect()),
        (Some(b), false) => l.remove().map(|o| o.into_iter().map(|o| (b, o)).collect()),
    };
    let removed: Vec<serde_json::Value> = found
        .map_err(|e| a.place.error(e))?
        .into_iter()
        .map(|(b, obj)| serde_json::json!({"backend": b.as_str(), "object": obj.to_string()}))
        .collect();
    if a.json {
        out.json_doc(&crate::output::Keyed("removed", &removed))?;
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
