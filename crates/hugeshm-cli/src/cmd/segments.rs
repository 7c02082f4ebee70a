//! `hugeshm segments`.

use crate::output::{self, Out, Table};
use hugeshm_doctor::dax::{DaxFaults, DaxInfo};
use hugeshm_doctor::finding::any_actionable;
use hugeshm_doctor::segments::{self, Segment, SegmentKind, SegmentsReport};
use hugeshm_doctor::Finding;
use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_probe::{Problem, Roots};
use std::process::ExitCode;

/// `hugeshm segments` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print the segments and the scan's findings and problems as one JSON
    /// object (the schema: docs/json.md).
    #[arg(long)]
    pub json: bool,
    /// Exit 1 when any segment has a warning or error (silent fallback, orphan, ...).
    #[arg(long)]
    pub check: bool,
    /// Also list small tmpfs files (under one huge page) that nothing maps.
    #[arg(long)]
    pub all: bool,
}

/// What `segments --json` prints (in the envelope).
#[derive(serde::Serialize)]
struct Doc<'a> {
    segments: &'a [Segment],
    findings: &'a [Finding],
    problems: &'a [Problem],
    /// Every process that could not be read (those that matter are also a
    /// `processes-unreadable` finding).
    unreadable: &'a [segments::ProcessProblem],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    limited_cgroups: &'a [segments::LimitedCgroup],
    /// `hugeshm run` records not shown, and why (absent when none).
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    run_records_ignored: &'a [hugeshm_doctor::segments::run_record::IgnoredRunRecord],
}

/// Runs the command.
pub fn run(roots: &Roots, args: &Args, out: &mut Out) -> anyhow::Result<ExitCode> {
    let probe = crate::cmd::doctor_probe(roots);
    let mut report = segments::build(&probe, &hugeshm_doctor::segments::KeptRegions::find(&probe));
    if !args.all {
        report.segments.retain(|s| {
            !(s.kind == SegmentKind::Posix && s.attached_pids.is_empty() && s.size_bytes < 2 << 20)
        });
    }
    let actionable = any_actionable(&report.findings)
        || report.segments.iter().any(|s| any_actionable(&s.findings));
    if args.json {
        out.json_doc(&Doc {
            segments: &report.segments,
            findings: &report.findings,
            problems: &report.problems,
            unreadable: &report.unreadable,
            limited_cgroups: &report.limited_cgroups,
            run_records_ignored: &report.run_records_ignored,
        })?;
    } else {
        print(&report, out)?;
        out.flush()?;
    }
    Ok(if args.check && actionable {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn page_cell(s: &Segment, out: &Out) -> String {
    match s.page_size_bytes {
        _ if s.on_thp() => out.good("2M thp", true),
        Some(4096) if s.size_bytes >= 2 << 20 && s.kind != SegmentKind::Posix => {
            out.good("4k", false)
        }
        Some(p) if p > 4096 => out.good(&page_size_short(p), true),
        Some(p) => page_size_short(p),
        None => "?".to_string(),
    }
}

fn attached_cell(s: &Segment) -> String {
    if s.attached.is_empty() {
        return match s.nattch {
            Some(n) if n > 0 => format!("{n} (not visible)"),
            _ => "none".to_string(),
        };
    }
    let mut names: Vec<String> = s
        .attached
        .iter()
        .take(3)
        .map(|a| format!("{} {}", a.name.as_deref().unwrap_or("?"), a.pid))
        .collect();
    if s.attached.len() > 3 {
        names.push(format!("+{} more", s.attached.len() - 3));
    }
    format!("{}: {}", s.attached.len(), names.join(", "))
}

/// One line under the table per `dax` segment: what it sits on, and how
/// each sampled process maps it.
fn dax_line(s: &Segment, d: &DaxInfo) -> String {
    let mut on: Vec<String> = Vec::new();
    if let Some(ns) = &d.namespace {
        on.push(ns.clone());
    }
    if let Some(a) = d.align_bytes {
        on.push(format!("align {}", page_size_short(a)));
    }
    if let Some(n) = d.numa_node {
        on.push(format!("node {n}"));
    }
    let dev = d
        .device
        .as_ref()
        .map(|dev| {
            if on.is_empty() {
                format!("/dev/{dev}")
            } else {
                format!("/dev/{dev} ({})", on.join(", "))
            }
        })
        .unwrap_or_else(|| "?".into());
    let mount = match (&d.mount, &d.fstype, &d.dax) {
        (Some(m), Some(f), Some(x)) => format!(", {m} {f} dax={x}"),
        _ => String::new(),
    };
    // dax=inode: the file's own state.
    let file = match d.file {
        None => String::new(),
        Some(f) => format!(
            ", file {}",
            match (f.dax, f.flag) {
                (Some(true), _) => "DAX (flag set)",
                (Some(false), Some(true)) => "in the page cache (DAX flag set, not in force)",
                (Some(false), _) => "in the page cache (no DAX flag)",
                (None, _) => "DAX unknown (its flag is read on the live host only)",
            }
        ),
    };
    let maps: Vec<String> = d
        .mappings
        .iter()
        .map(|m| {
            let how = match m.faults {
                DaxFaults::Pmd => format!(
                    "PMD entries in {} of {} windows of 2 MiB",
                    m.pmd_windows, m.windows_read
                ),
                DaxFaults::Pte => format!(
                    "4 KiB entries in {} of {} windows of 2 MiB ({} of page tables)",
                    m.pte_windows,
                    m.windows_read,
                    format_bytes(m.pte_table_bytes)
                ),
                DaxFaults::Untouched => "not touched yet".to_string(),
                DaxFaults::PageCache => "page cache, 4 KiB pages of DRAM".to_string(),
                _ => format!(
                    "unknown ({})",
                    m.error.as_deref().unwrap_or("pagemap not read")
                ),
            };
            format!("pid {} at offset {}: {how}", m.pid, m.offset)
        })
        .collect();
    format!(
        "dax {}: on {dev}{mount}{file}; {}",
        s.label(),
        if maps.is_empty() {
            "no process maps it".to_string()
        } else {
            maps.join("; ")
        }
    )
}

/// "placed by hugeshm run" and what its record says.
fn run_line(s: &Segment, p: &hugeshm_doctor::segments::run_record::RunPlacement) -> String {
    let r = &p.record;
    let exe = r.exe.rsplit('/').next().unwrap_or(&r.exe);
    let mut t = format!(
        "{}: placed by hugeshm run in {exe} (pid {}): {} asked on {} pages, {} on {} pages",
        s.label(),
        r.pid,
        format_bytes(r.requested_bytes),
        format_bytes(r.page_size_asked_bytes),
        format_bytes(r.size_bytes),
        format_bytes(r.verified_page_size_bytes)
    );
    if r.numa != "default" {
        t.push_str(&format!(", {}", r.numa));
    }
    if let Some(f) = &r.prefault {
        t.push_str(&format!(
            ", pre-faulted by {} thread{} in {:.2} s ({:.1} GB/s)",
            f.threads,
            if f.threads == 1 { "" } else { "s" },
            f.seconds,
            p.prefault_gbps
        ));
    }
    if !r.nodes.is_empty() {
        let nodes: Vec<String> = r
            .nodes
            .iter()
            .map(|(n, b)| format!("{n}:{}", format_bytes(*b)))
            .collect();
        t.push_str(&format!(", at start {}", nodes.join(" ")));
    }
    if let Some(f) = &r.fallback {
        // The record's text, bounded on the screen (the JSON has it whole).
        t.push_str("; fell back: ");
        t.extend(f.chars().take(FALLBACK_SHOWN));
        if f.chars().nth(FALLBACK_SHOWN).is_some() {
            t.push_str("...");
        }
    }
    t
}

/// The most characters of a record's fall-back reason `segments` prints.
const FALLBACK_SHOWN: usize = 240;

/// Prints the human form.
pub fn print(r: &SegmentsReport, out: &mut Out) -> anyhow::Result<()> {
    if r.segments.is_empty() {
        out.line("No shared memory segments or huge page mappings found.")?;
    } else {
        let mut t = Table::new(&[
            "kind",
            "id / path",
            ">size",
            "page",
            ">resident",
            "nodes",
            "policy",
            "attached",
        ]);
        for s in &r.segments {
            let id = match (s.kind, s.id, &s.key, &s.path) {
                (SegmentKind::Sysv, Some(id), Some(k), _) => format!("{id} key {k}"),
                // A segment of another IPC namespace (a container's).
                (SegmentKind::Sysv, Some(id), None, Some(ns)) => format!("{id} of {ns}"),
                (SegmentKind::PrivateHugetlb, _, _, _) => {
                    format!("pid {}", s.creator_pid.unwrap_or(0))
                }
                (_, _, _, Some(p)) => p.clone(),
                (_, Some(id), _, _) => id.to_string(),
                _ => "-".into(),
            };
            let nodes = if s.nodes.is_empty() {
                "-".to_string()
            } else {
                s.nodes
                    .iter()
                    .map(|(n, b)| format!("{n}:{}", format_bytes(*b)))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            t.row(vec![
                s.kind.to_string(),
                id,
                format_bytes(s.size_bytes),
                page_cell(s, out),
                s.resident_bytes
                    .map(format_bytes)
                    .unwrap_or_else(|| "?".into()),
                nodes,
                s.numa_policy.clone().unwrap_or_else(|| "-".into()),
                attached_cell(s),
            ]);
        }
        t.render(out, "")?;
        let unknown: Vec<&Segment> = r
            .segments
            .iter()
            .filter(|s| s.page_size_bytes.is_none())
            .collect();
        for s in unknown {
            out.line(out.dim(&format!(
                "page size of {}: {}",
                s.label(),
                s.page_size_source
            )))?;
        }
        for s in &r.segments {
            if let Some(d) = &s.dax {
                out.line(out.dim(&dax_line(s, d)))?;
            }
            if let Some(run) = &s.run {
                out.line(run_line(s, run))?;
            }
        }
    }
    let with: Vec<&Segment> = r
        .segments
        .iter()
        .filter(|s| !s.findings.is_empty())
        .collect();
    if !with.is_empty() || !r.findings.is_empty() {
        out.line("")?;
        out.line(out.bold("Findings"))?;
        output::findings(out, &r.findings, "  ")?;
        for s in with {
            output::findings(out, &s.findings, "  ")?;
        }
    }
    out.line("")?;
    out.line(out.dim(&format!(
        "scanned {} processes in {:.0} ms{}{}",
        r.processes_scanned,
        r.scan_seconds * 1000.0,
        match r.unreadable.first() {
            None => String::new(),
            Some(first) => format!(
                "; {} could not be read (pid {}: {}), their shared memory not counted",
                r.unreadable.len(),
                first.pid,
                first.problem.reason
            ),
        },
        if r.processes_vanished == 0 {
            String::new()
        } else {
            format!("; {} exited during the scan", r.processes_vanished)
        },
    )))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_records_line_is_bounded_whatever_its_texts() {
        let long = "x".repeat(4096);
        let seg: Segment = serde_json::from_value(serde_json::json!({
            "kind": "anon", "id": 7, "key": null, "path": "/anon_hugepage",
            "size_bytes": 16u64 << 20, "page_size_bytes": 2u64 << 20,
            "page_size_source": "", "resident_bytes": null, "thp_bytes": null,
            "owner_uid": 105, "mode": null, "creator_pid": null, "creator_name": null,
            "attached_pids": [9], "attached": [], "nattch": null, "nodes": {},
            "numa_policy": null, "findings": [],
        }))
        .unwrap();
        let run: hugeshm_doctor::segments::run_record::RunPlacement =
            serde_json::from_value(serde_json::json!({
                "file": "/dev/shm/hugeshm-run.9.7f0000000000",
                "prefault_gbps": 1.0,
                "record": {
                    "pid": 9, "start_ticks": 1, "uid": 105,
                    "exe": format!("/{long}/{}", "p".repeat(255)),
                    "object": {"kind": "anon"}, "address": 0x7f00_0000_0000u64,
                    "size_bytes": 16u64 << 20, "requested_bytes": 16u64 << 20,
                    "page_size_asked_bytes": 2u64 << 20, "page_size_bytes": 2u64 << 20,
                    "policy": "try", "numa": "interleave", "prefault": null,
                    "resident_bytes": 0, "verified_page_size_bytes": 2u64 << 20,
                    "nodes": {"0": 8u64 << 20, "1": 8u64 << 20},
                    "fallback": long, "warnings": [long.clone(), long.clone()],
                },
            }))
            .unwrap();
        let line = run_line(&seg, &run);
        assert!(line.len() < 800, "{} bytes: {line}", line.len());
        assert!(line.ends_with(&format!("fell back: {}...", "x".repeat(240))));
    }
}
