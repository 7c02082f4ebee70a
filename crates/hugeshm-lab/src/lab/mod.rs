//! The lab: each published report's measurement reproduced on this host
//! ([`model::Lab`], one private module each, listed in [`all`]), its
//! tables and comparisons with the report's figures, its plots as SVG
//! ([`plot`]) and one HTML page of it all ([`html`]); [`run`] runs the
//! ones chosen into a [`model::LabReport`].
//!
//! A new reproduction is one module implementing `model::Lab` (name,
//! seed, title, the `steps` it will take on this host, `run` filling a
//! `Reproduction` and beginning each step on `ctx.steps`) and one line
//! in [`all`]; the printers, the JSON, the plots and the report need
//! nothing more.

mod dmbc;
mod fallback;
pub mod html;
pub mod model;
mod numa;
mod oltp;
mod pagetables;
pub mod plot;
mod pools;
pub mod reports;
mod startup;

use crate::Steps;
use anyhow::Context;
use hugeshm_parse::size::{format_bytes, MIB};
use hugeshm_probe::{Probe, Roots};
use model::{Ceiling, Ctx, Lab, LabReport, Reproduction};
use std::time::Instant;

/// Every reproduction, in the order the lab runs them.
pub fn all() -> Vec<Box<dyn Lab>> {
    vec![
        Box::new(startup::Startup),
        Box::new(pagetables::PageTables),
        Box::new(fallback::Fallback),
        Box::new(numa::Numa),
        Box::new(oltp::Oltp),
        Box::new(dmbc::Dmbc),
    ]
}

fn host_line(roots: &Roots, mem: u64, cpus: usize, nodes: usize) -> String {
    let kernel = std::fs::read_to_string(roots.proc.join("sys/kernel/osrelease"))
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned());
    format!(
        "kernel {kernel}, {cpus} CPU{}, {} of memory, {nodes} NUMA node{} with memory",
        if cpus == 1 { "" } else { "s" },
        format_bytes(mem),
        if nodes == 1 { "" } else { "s" }
    )
}

/// The 1-minute load average (`/proc/loadavg`): other work on the host
/// moves every timing.
fn load_average(roots: &Roots) -> Option<f64> {
    std::fs::read_to_string(roots.proc.join("loadavg"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// What the lab is asked to do.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// A first look: small regions, few sessions and one timed run per
    /// point.
    pub quick: bool,
    /// Whether the lab may raise the huge page pools (and give them back).
    pub reserve: bool,
}

/// Runs the memset ceiling and the `chosen` reproductions (in that order)
/// on the host `probe` reads, each step of `steps` (the plan is set here,
/// once every reproduction has counted its steps); a reproduction that
/// fails keeps its error in its [`Reproduction::error`] and the others run.
pub fn run(
    probe: &Probe,
    chosen: &[&dyn Lab],
    o: &Options,
    steps: &Steps,
) -> anyhow::Result<LabReport> {
    let roots = &probe.roots;
    let started = Instant::now();
    let load_before = load_average(roots);
    let host = probe.host();
    let mem_bytes = host
        .meminfo
        .as_ref()
        .and_then(|m| m.mem_total_bytes)
        .context("/proc/meminfo has no MemTotal: cannot scale the lab to this host")?;
    let cpus = hugeshm_region::available_cpus();
    let memory_nodes = host
        .nodes
        .iter()
        .filter(|n| {
            n.meminfo
                .as_ref()
                .and_then(|m| m.mem_total_bytes)
                .is_some_and(|b| b > 0)
        })
        .count()
        .max(1);
    // The ceiling, in the same run as everything it is compared with: the
    // best of two measurements at the start (other work on the host can
    // halve one), and one more at the end to show how steady it was.
    let ceiling_bytes = if o.quick { 64 * MIB } else { 512 * MIB };
    let mut threads = vec![1];
    if cpus > 1 {
        threads.push(cpus);
    }
    // The plan: the ceiling's three passes per thread count and every
    // reproduction's steps, counted before the first step.
    let mut ctx = Ctx {
        probe,
        host: &host,
        mem_bytes,
        cpus,
        quick: o.quick,
        reserve: o.reserve,
        ceiling: &[],
        steps,
    };
    let planned: Vec<u64> = chosen.iter().map(|l| l.steps(&ctx)).collect();
    steps.plan(3 * threads.len() as u64 + planned.iter().sum::<u64>());
    let memset = |t: usize| {
        steps.begin(&format!("memset ceiling, {t} threads"));
        crate::prefault::sample::memset_baseline(ceiling_bytes, t)
            .map_err(|e| anyhow::anyhow!("memset ceiling: {e}"))
    };
    let mut ceiling = Vec::new();
    for &t in &threads {
        let (b1, b2) = (memset(t)?, memset(t)?);
        let clear_4k_gbps = b1.clear_4k_gbps.max(b2.clear_4k_gbps);
        let b = if b2.gbps > b1.gbps { b2 } else { b1 };
        ceiling.push(Ceiling {
            threads: b.threads,
            size_bytes: b.size_bytes,
            page_size_bytes: b.page_size_bytes,
            gbps: b.gbps,
            gbps_at_end: None,
            clear_4k_gbps,
        });
    }

    ctx.ceiling = &ceiling;
    let mut reproductions = Vec::new();
    for (lab, planned) in chosen.iter().zip(planned) {
        let mut r = Reproduction::new(lab.name(), lab.seed(), lab.title());
        let t = Instant::now();
        let lab_steps = steps.prefixed(lab.name());
        let ctx = Ctx {
            steps: &lab_steps,
            ..ctx
        };
        let part = steps.part(planned);
        let result = lab.run(&ctx, &mut r);
        drop(part);
        if let Err(e) = result {
            r.error = Some(format!("{e:#}"));
        }
        r.seconds = t.elapsed().as_secs_f64();
        reproductions.push(r);
    }
    for c in ceiling.iter_mut() {
        c.gbps_at_end = Some(memset(c.threads)?.gbps);
    }
    let report = LabReport {
        host: host_line(roots, mem_bytes, cpus, memory_nodes),
        mem_bytes,
        cpus,
        memory_nodes,
        quick: o.quick,
        load_average: [load_before, load_average(roots)],
        ceiling,
        reproductions,
        seconds: started.elapsed().as_secs_f64(),
    };
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reproduction_names_a_known_report() {
        for lab in all() {
            let source = reports::source(lab.seed())
                .unwrap_or_else(|| panic!("{}: report {}", lab.name(), lab.seed()));
            assert!(reports::describe(lab.seed()).starts_with(source.title));
        }
        assert!(reports::describe("001").contains("37.5 s"));
        assert_eq!(reports::short("999"), "report 999");
    }
}
