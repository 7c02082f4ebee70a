//! `hugeshm attach` and `hugeshm ls`: regions shared between processes.

use crate::cmd::region::{hold, region_error, PlaceArgs, TrustArgs};
use crate::output::{Out, Table};
use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_region::{
    list_regions_on, AttachReport, Backend, Liveness, Locator, Probe, RegionInfo, Renderer, Roots,
};
use std::process::ExitCode;
use std::time::{Duration, UNIX_EPOCH};

/// `hugeshm attach` options.
#[derive(Debug, clap::Args)]
pub struct AttachArgs {
    /// The region's name.
    #[arg(value_parser = crate::cmd::region::parse_region_name)]
    pub name: String,
    /// Its backend (default: whichever of sysv, posix, hugetlbfs, memfd, dax has the name).
    #[arg(long, value_parser = crate::values::backend())]
    pub backend: Option<Backend>,
    #[command(flatten)]
    pub place: PlaceArgs,
    #[command(flatten)]
    pub trust: TrustArgs,
    /// Attach the per-node set NAME (NAME.node0, NAME.node1, ...) that
    /// `create --numa per-node` made (backend sysv unless --backend says).
    #[arg(long)]
    pub per_node: bool,
    /// Keep this process attached until it is interrupted.
    #[arg(long)]
    pub hold: bool,
    /// Print the attach report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `hugeshm ls` options.
#[derive(Debug, clap::Args)]
pub struct LsArgs {
    /// Print the regions as JSON.
    #[arg(long)]
    pub json: bool,
    /// Exit 1 when a region is orphaned (its creator, one of its users, is
    /// gone), crashed or damaged. A region made to be kept (`create`
    /// without `--hold`) that nobody attaches is listed `kept` and not
    /// counted, nor is another user's segment, file or record
    /// (`untrusted`), nor root's segment this user may not read
    /// (`unreadable`).
    #[arg(long)]
    pub check: bool,
    /// Read the headers of this user's regions too (uid or login name;
    /// default: only the effective user's and root's). Another user's are
    /// listed `untrusted`, their headers unread: whoever may write an
    /// object may write its header.
    #[arg(long, value_parser = crate::cmd::region::parse_owner)]
    pub owner: Option<u32>,
}

/// Runs `attach`.
pub fn attach(roots: &Roots, a: &AttachArgs, out: &mut Out) -> anyhow::Result<ExitCode> {
    if a.per_node {
        return attach_per_node(roots, a, out);
    }
    let l = a.trust.locator(a.place.locator(
        Locator::new(&a.name, a.backend.unwrap_or(Backend::Sysv)).probe(Probe::new(roots.clone())),
    ));
    let found = match a.backend {
        Some(_) => l.attach_with_report(),
        None => l.attach_any(),
    };
    let (region, report) = found.map_err(|e| a.place.error(e))?;
    if a.json {
        out.json_doc(&report)?;
    } else {
        print_attach(&report, out)?;
        out.flush()?;
    }
    if a.hold {
        hold(
            format_args!("holding region {}", a.name),
            "detaches",
            format_args!("detaching from region {}", a.name),
        )?;
    }
    region.close().map_err(region_error)?;
    Ok(ExitCode::SUCCESS)
}

/// One part of `attach --per-node --json`.
#[derive(Debug, serde::Serialize)]
struct PartAttached {
    node: u32,
    name: Option<String>,
    backend: Backend,
    size_bytes: u64,
    page_size_bytes: u64,
}

/// `attach --per-node`: every part of the set, in node order.
fn attach_per_node(roots: &Roots, a: &AttachArgs, out: &mut Out) -> anyhow::Result<ExitCode> {
    let backend = a.backend.unwrap_or(Backend::Sysv);
    let parts = a
        .trust
        .locator(Locator::new(&a.name, backend).probe(Probe::new(roots.clone())))
        .attach_per_node()
        .map_err(region_error)?;
    let doc: Vec<PartAttached> = parts
        .iter()
        .map(|p| PartAttached {
            node: p.node,
            name: p.region.name().map(str::to_owned),
            backend: p.region.backend(),
            size_bytes: p.region.len() as u64,
            page_size_bytes: p.region.header().page_size_bytes,
        })
        .collect();
    if a.json {
        out.json_doc(&crate::output::Keyed("parts", &doc))?;
    } else {
        out.line(format!(
            "Attached {} part{} of per-node region {} ({backend}):",
            doc.len(),
            if doc.len() == 1 { "" } else { "s" },
            a.name
        ))?;
        let mut t = Table::new(&["node", "name", ">size", "page"]);
        for p in &doc {
            t.row(vec![
                p.node.to_string(),
                p.name.clone().unwrap_or_default(),
                format_bytes(p.size_bytes),
                page_size_short(p.page_size_bytes),
            ]);
        }
        t.render(out, "  ")?;
        out.flush()?;
    }
    if a.hold {
        hold(
            format_args!("holding the {} parts of {}", doc.len(), a.name),
            "detaches",
            format_args!("detaching from {}", a.name),
        )?;
    }
    for p in parts {
        p.region.close().map_err(region_error)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn liveness(l: Liveness) -> &'static str {
    match l {
        Liveness::Alive => "running",
        Liveness::Dead => "gone",
        Liveness::Unknown => "unknown",
    }
}

fn when(ns: u64) -> String {
    let t = UNIX_EPOCH + Duration::from_nanos(ns);
    match std::time::SystemTime::now().duration_since(t) {
        Ok(d) if d.as_secs() < 120 => format!("{} s ago", d.as_secs()),
        Ok(d) if d.as_secs() < 7200 => format!("{} min ago", d.as_secs() / 60),
        Ok(d) if d.as_secs() < 172_800 => format!("{} h ago", d.as_secs() / 3600),
        Ok(d) => format!("{} days ago", d.as_secs() / 86_400),
        Err(_) => "in the future".into(),
    }
}

fn print_attach(r: &AttachReport, out: &mut Out) -> anyhow::Result<()> {
    let h = &r.header;
    out.line(format!(
        "{} {} ({}, {})",
        out.bold("attached"),
        r.name.as_deref().unwrap_or("(anonymous)"),
        r.backend,
        r.object
    ))?;
    let mut t = Table::new(&["", ""]);
    t.row(vec![
        "header".into(),
        format!(
            "layout {}, state {}, generation {:016x}",
            h.layout_version,
            h.state.as_str(),
            h.generation
        ),
    ]);
    t.row(vec![
        "creator".into(),
        format!(
            "pid {} ({}), uid {}, created {}",
            h.creator_pid,
            liveness(r.creator),
            h.creator_uid,
            when(h.created_unix_ns)
        ),
    ]);
    t.row(vec![
        "size".into(),
        format!(
            "{} ({} of data after the {} header)",
            format_bytes(r.size_bytes),
            format_bytes(r.data_bytes),
            format_bytes(r.data_offset)
        ),
    ]);
    let ok = r.verified_page_size_bytes == r.page_size_bytes;
    t.row(vec![
        "page size".into(),
        format!(
            "{} (header), {} in this process's smaps",
            format_bytes(r.page_size_bytes),
            out.good(&format_bytes(r.verified_page_size_bytes), ok)
        ),
    ]);
    t.row(vec![
        "allocated".into(),
        match r.region_allocated_bytes {
            Some(b) => format!("{} (the whole region, whoever faulted it)", format_bytes(b)),
            None => "unknown (needs CAP_SYS_ADMIN for a SysV segment)".into(),
        },
    ]);
    t.row(vec![
        "resident".into(),
        format!("{} in this process", format_bytes(r.resident_bytes)),
    ]);
    t.row(vec![
        "attached".into(),
        format!(
            "{}{}",
            r.holders
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            r.nattch
                .map(|n| format!(" (nattch {n})"))
                .unwrap_or_default()
        ),
    ]);
    t.row(vec![
        "page tables".into(),
        if r.aligned_for_pmd_sharing {
            format!(
                "{} shared with other processes (1 GiB-aligned)",
                format_bytes(r.pmd_shareable_bytes)
            )
        } else {
            "not shared (not 1 GiB-aligned, or not hugetlb)".into()
        },
    ]);
    t.row(vec![
        "attach took".into(),
        format!("{:.3} ms", r.attach_seconds * 1000.0),
    ]);
    t.render(out, "  ")
}

/// The size of the object itself, as the kernel gives it.
fn object_bytes(object: &hugeshm_region::NamedObject) -> u64 {
    match object {
        hugeshm_region::NamedObject::Sysv { size_bytes, .. }
        | hugeshm_region::NamedObject::File { size_bytes, .. }
        | hugeshm_region::NamedObject::Memfd { size_bytes, .. } => *size_bytes,
        _ => 0,
    }
}

/// Runs `ls`.
pub fn ls(roots: &Roots, a: &LsArgs, out: &mut Out) -> anyhow::Result<ExitCode> {
    let regions = list_regions_on(&Probe::new(roots.clone()), a.owner).map_err(region_error)?;
    // Another user's object (`untrusted`: its header is not read), root's
    // segment this user may not read (`unreadable`): no fault of the
    // regions this user answers for.
    let unread = |r: &RegionInfo| matches!(r.state.as_str(), "untrusted" | "unreadable");
    let bad = |r: &RegionInfo| {
        r.is_abandoned() || !(matches!(r.state.as_str(), "ready" | "initializing") || unread(r))
    };
    if a.json {
        out.json_doc(&crate::output::Keyed("regions", &regions))?;
    } else if regions.is_empty() {
        out.line("No hugeshm regions on this host.")?;
    } else {
        let mut t = Table::new(&[
            "name", "backend", "state", ">size", "page", "holders", "creator", "created",
        ]);
        for r in &regions {
            let state = if r.is_kept_unattached() {
                "kept".to_string()
            } else if r.is_orphaned() && r.state.as_str() == "ready" {
                out.good("orphaned", false)
            } else if bad(r) {
                out.good(r.state.as_str(), false)
            } else {
                r.state.as_str().to_string()
            };
            t.row(vec![
                r.name.clone(),
                r.backend.to_string(),
                state,
                // An unread header's object: the kernel's size and page.
                r.header
                    .as_ref()
                    .map(|h| h.size_bytes)
                    .or_else(|| unread(r).then(|| object_bytes(&r.object)))
                    .map(format_bytes)
                    .unwrap_or_else(|| "?".into()),
                r.header
                    .as_ref()
                    .map(|h| h.page_size_bytes)
                    .or(r.kernel_page_size_bytes)
                    .map(page_size_short)
                    .unwrap_or_else(|| "?".into()),
                if r.holders.is_empty() {
                    "none".into()
                } else {
                    r.holders
                        .iter()
                        .map(|p| p.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                },
                match (r.creator_pid, r.creator) {
                    (Some(p), Some(l)) => format!("{p} ({})", liveness(l)),
                    (Some(p), None) => p.to_string(),
                    _ => "-".into(),
                },
                r.header
                    .as_ref()
                    .map(|h| when(h.created_unix_ns))
                    .unwrap_or_else(|| "-".into()),
            ]);
        }
        t.render(out, "")?;
        let users = hugeshm_probe::Users::of(roots);
        for r in regions.iter().filter(|r| unread(r)) {
            // Whose it is, and (another user's) how to read it anyway.
            let (whose, fix) = match r.owner {
                Some(o) => {
                    let login = users
                        .name_of(o.uid)
                        .map(|n| format!(" ({n})"))
                        .unwrap_or_default();
                    let fix = if r.state.as_str() == "untrusted" {
                        format!("; to read its header: hugeshm ls --owner {}", o.uid)
                    } else {
                        String::new()
                    };
                    (
                        format!("owner uid {}{login}, mode {:04o}: ", o.uid, o.mode),
                        fix,
                    )
                }
                None => (String::new(), String::new()),
            };
            out.line(format!(
                "  {} {} ({}): {whose}{}{fix}",
                out.severity(hugeshm_doctor::Severity::Info),
                r.name,
                r.backend,
                r.detail.clone().unwrap_or_default()
            ))?;
        }
        for r in regions.iter().filter(|r| r.is_kept_unattached()) {
            // The fix names the directory a file region was made in.
            let fix = r
                .fix
                .as_ref()
                .map(|f| format!(": {}", f.render(Renderer::Cli)))
                .unwrap_or_default();
            out.line(format!(
                "  {} {} ({}): kept, not attached (made to outlive its creator{}){fix}",
                out.severity(hugeshm_doctor::Severity::Info),
                r.name,
                r.backend,
                r.creator_pid
                    .map(|p| format!(", pid {p}, which exited"))
                    .unwrap_or_default(),
            ))?;
        }
        for r in regions.iter().filter(|r| bad(r)) {
            let fix = if let Some(fix) = &r.fix {
                let why = r
                    .detail
                    .as_ref()
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default();
                format!("nobody holds it{why}: {}", fix.render(Renderer::Cli))
            } else {
                r.detail.clone().unwrap_or_default()
            };
            out.line(format!(
                "  {} {} ({}): {fix}",
                out.severity(hugeshm_doctor::Severity::Warning),
                r.name,
                r.backend
            ))?;
        }
        out.flush()?;
    }
    Ok(if a.check && regions.iter().any(bad) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
