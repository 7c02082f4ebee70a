//! `hugeshm bench prefault`: how fast a region is ready, per page size and
//! thread count, against the machine's write bandwidth.
//!
//! The options, the call of [`hugeshm_lab::prefault::measure`] and the
//! printer: [`print()`] writes the report as tables, `--json` as it is.

use crate::cmd::bench_common::parse_count_arg;
use crate::output::{Out, Table};
use hugeshm_lab::prefault::sample::PeerMethod;
use hugeshm_lab::prefault::{measure, planned_steps, Baseline, Options, Report, Row};
use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_probe::{Probe, Roots};
use hugeshm_region::{Backend, PageSize};
use std::process::ExitCode;

/// `bench prefault` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Region size; several (comma-separated, e.g. 1G,2G,4G) make a sweep
    /// with GB/s per size and the slope (seconds per GB) per page size and
    /// thread count.
    #[arg(long, value_delimiter = ',', default_value = "4G", value_parser = crate::values::size, allow_hyphen_values = true)]
    pub size: Vec<u64>,
    /// Page sizes to compare (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "4k,2m", value_parser = crate::values::page_size())]
    pub page_size: Vec<PageSize>,
    /// Thread counts to compare (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub threads: Vec<usize>,
    /// Timed runs per combination after the warm-up (the best is reported).
    #[arg(long, default_value_t = 3, value_parser = parse_count_arg::<usize>)]
    pub runs: usize,
    /// Backend for huge pages (4 KiB pages always use posix: files in /dev/shm,
    /// the "memory-mapped files" style).
    #[arg(long = "backend", alias = "huge-backend", value_name = "BACKEND", default_value = "anon",
          value_parser = crate::values::backend())]
    pub huge_backend: Backend,
    /// Do not raise the huge page pools for the run (by default, as root, the
    /// bench adds the pages it needs and gives them back afterwards).
    #[arg(long)]
    pub no_reserve: bool,
    /// Leave out the peers' methods (one MAP_POPULATE mmap, first touch by
    /// one thread, a touch loop on N threads).
    #[arg(long)]
    pub no_peers: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

impl Args {
    /// The options of the command line.
    fn options(&self) -> Options {
        Options {
            sizes: self.size.clone(),
            page_sizes: self.page_size.clone(),
            threads: self.threads.clone(),
            runs: self.runs,
            huge_backend: self.huge_backend,
            reserve: !self.no_reserve,
            peers: !self.no_peers,
            memset: true,
        }
    }
}

/// A ratio with two decimals (`1.04x`), or `-`.
fn ratio2(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.2}x")).unwrap_or_else(|| "-".into())
}

/// Runs the bench and prints it.
pub fn run(roots: &Roots, a: &Args, out: &mut Out) -> anyhow::Result<ExitCode> {
    let o = a.options();
    let probe = Probe::new(roots.clone());
    let steps = crate::progress::steps("bench prefault", planned_steps(&probe.host(), &o));
    let report = measure(&probe, &o, &steps);
    steps.finish();
    let report = report?;
    if a.json {
        out.json_doc(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    print(&report, out)?;
    Ok(ExitCode::SUCCESS)
}

/// Writes the report as tables: the rows, the peers' methods, what was
/// skipped, the memset baselines, the growth lines.
pub(crate) fn print(report: &Report, out: &mut Out) -> anyhow::Result<()> {
    let sweep = report.sizes.len() > 1;
    let sizes_text: Vec<String> = report.sizes.iter().map(|b| format_bytes(*b)).collect();
    out.line(format!(
        "pre-fault of a {} region (best of {} runs after a warm-up; GB/s = decimal)",
        sizes_text.join(", "),
        report.runs
    ))?;
    let lead = |heads: &[&'static str]| -> Vec<&'static str> {
        let mut h = Vec::new();
        if sweep {
            h.push(">size");
        }
        h.extend_from_slice(heads);
        h
    };
    let mut t = Table::new(&lead(&[
        "page",
        "backend",
        ">threads",
        ">cold s",
        ">ready s",
        ">ready GB/s",
        ">x 4k",
        ">x 1 thread",
        ">pre-fault GB/s",
        ">of memset",
        ">of 4k clear",
        "method",
    ]));
    let ratio = |v: Option<f64>| v.map(|x| format!("{x:.1}x")).unwrap_or_else(|| "-".into());
    let pct = |v: Option<f64>| {
        v.map(|x| format!("{:.0}%", x * 100.0))
            .unwrap_or_else(|| "-".into())
    };
    let first = |r: &Row| -> Vec<String> {
        let mut v = Vec::new();
        if sweep {
            v.push(format_bytes(r.size_bytes));
        }
        v.push(page_size_short(r.page_size_bytes));
        v
    };
    for r in &report.results {
        let mut row = first(r);
        row.extend([
            r.backend.to_string(),
            r.threads.to_string(),
            r.cold_seconds
                .map(|c| format!("{c:.3}"))
                .unwrap_or_else(|| "-".into()),
            format!("{:.3}", r.ready_seconds),
            format!("{:.1}", r.ready_gbps),
            ratio(r.vs_4k),
            ratio(r.vs_one_thread),
            format!("{:.1}", r.gbps),
            pct(r.vs_memset),
            pct(r.vs_clear_4k),
            r.method.clone(),
        ]);
        t.row(row);
    }
    t.render(out, "")?;
    if !report.peers.is_empty() {
        out.line("")?;
        out.line("against the peers' methods on the same size and page size (shared anonymous memory; GB/s from mmap to the last page faulted):")?;
        let mut heads: Vec<String> = lead(&["page", ">threads"])
            .into_iter()
            .map(str::to_owned)
            .collect();
        for m in PeerMethod::ALL {
            heads.push(format!(">{} GB/s", m.as_str()));
        }
        heads.push(">hugeshm GB/s".to_owned());
        for m in PeerMethod::ALL {
            heads.push(format!(">x {}", m.as_str()));
        }
        heads.push(">x best".to_owned());
        let heads: Vec<&str> = heads.iter().map(String::as_str).collect();
        let mut pt = Table::new(&heads);
        for r in &report.results {
            let mut row = first(r);
            row.push(r.threads.to_string());
            for m in PeerMethod::ALL {
                row.push(
                    report
                        .peers
                        .iter()
                        .find(|p| {
                            p.size_bytes == r.size_bytes
                                && p.page_size_bytes == r.page_size_bytes
                                && p.method == m
                                && p.threads == m.threads(r.threads)
                        })
                        .map(|p| format!("{:.1}", p.gbps))
                        .unwrap_or_else(|| "-".into()),
                );
            }
            row.push(format!("{:.1}", r.ready_gbps));
            for m in PeerMethod::ALL {
                row.push(ratio2(r.vs_peers.get(m.as_str()).copied()));
            }
            row.push(ratio2(r.vs_best_peer));
            pt.row(row);
        }
        pt.render(out, "")?;
        out.line(format!(
            "peers: {}",
            PeerMethod::ALL
                .iter()
                .map(|m| format!("{} ({})", m.as_str(), m.used_by()))
                .collect::<Vec<_>>()
                .join(", ")
        ))?;
    }
    crate::cmd::bench_common::print_skipped(&report.skipped, out)?;
    for &size in &report.sizes {
        let per = |f: fn(&Baseline) -> f64| -> String {
            report
                .memset
                .iter()
                .filter(|b| b.size_bytes == size)
                .map(|b| {
                    format!(
                        "{} thread{}: {:.1} GB/s",
                        b.threads,
                        if b.threads == 1 { "" } else { "s" },
                        f(b)
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let at = if sweep {
            format!(", {}", format_bytes(size))
        } else {
            String::new()
        };
        out.line(format!(
            "memset over already-faulted memory (the machine's write bandwidth){at}: {}",
            per(|b| b.gbps)
        ))?;
        out.line(format!(
            "zeroing it 4 KiB at a time (how the kernel clears a huge page it faults in){at}: {}",
            per(|b| b.clear_4k_gbps)
        ))?;
    }
    for g in &report.growth {
        let per: Vec<String> = g.gbps.iter().map(|x| format!("{x:.1}")).collect();
        out.line(format!(
            "growth {} on {} thread{}: ready GB/s {} by size; {:.4} s per GB (marginal {:.1} GB/s), fixed {:.1} ms",
            page_size_short(g.page_size_bytes),
            g.threads,
            if g.threads == 1 { "" } else { "s" },
            per.join(" / "),
            g.seconds_per_gb,
            g.marginal_gbps,
            g.fixed_seconds * 1000.0
        ))?;
    }
    out.line("ready = create + pre-fault (for posix on one thread this includes fallocate, where tmpfs allocates its pages; it zeroes them at the first fault); x 4k and x 1 thread compare ready rates, of memset and of 4k clear the pre-fault rate")?;
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hugeshm_lab::prefault::by_hand::{baseline, report, row, M2, MIB256};

    #[test]
    fn print_writes_the_rows_the_peers_and_the_baselines() {
        let (mut out, text) = Out::captured();
        print(&report(), &mut out).unwrap();
        let expected = "\
pre-fault of a 256 MiB region (best of 1 runs after a warm-up; GB/s = decimal)
page  backend  threads  cold s  ready s  ready GB/s  x 4k  x 1 thread  pre-fault GB/s  of memset  of 4k clear  method
4k    posix          1       -    0.268         1.0     -           -             2.0        20%          12%  populate_write
4k    posix          2   0.250    0.179         1.5     -        1.5x             3.0        15%            -  populate_write
2M    anon           1       -    0.067         4.0  4.0x           -             8.0        80%          50%  populate_write
2M    anon           2   0.250    0.045         6.0  4.0x        1.5x            12.0        60%            -  populate_write

against the peers' methods on the same size and page size (shared anonymous memory; GB/s from mmap to the last page faulted):
page  threads  map-populate GB/s  first-touch GB/s  touch-loop GB/s  hugeshm GB/s  x map-populate  x first-touch  x touch-loop  x best
4k          1                8.0               5.0              2.0           1.0           0.12x          0.20x         0.50x   0.12x
4k          2                8.0               5.0              3.0           1.5           0.19x          0.30x         0.50x   0.19x
2M          1                8.0               5.0              2.0           4.0           0.50x          0.80x         2.00x   0.50x
2M          2                8.0               5.0              3.0           6.0           0.75x          1.20x         2.00x   0.75x
peers: map-populate (DPDK, Seastar), first-touch (PostgreSQL (on demand)), touch-loop (JVM AlwaysPreTouch)
1G pages not measured: 256 MiB region: the kernel granted 0 of 1 1 GiB pages
  to fix: reserve them at boot
memset over already-faulted memory (the machine's write bandwidth): 1 thread: 10.0 GB/s, 2 threads: 20.0 GB/s
zeroing it 4 KiB at a time (how the kernel clears a huge page it faults in): 1 thread: 16.0 GB/s, 2 threads: 0.0 GB/s
ready = create + pre-fault (for posix on one thread this includes fallocate, where tmpfs allocates its pages; it zeroes them at the first fault); x 4k and x 1 thread compare ready rates, of memset and of 4k clear the pre-fault rate
";
        assert_eq!(text.text(), expected);
    }

    #[test]
    fn a_sweep_prints_the_size_column_and_the_growth() {
        let mut r = report();
        r.peers.clear();
        r.skipped.clear();
        r.results
            .retain(|x| x.page_size_bytes == M2 && x.threads == 1);
        r.results.push(row(2 * MIB256, M2, 1, 5.0, 9.0));
        r.sizes = vec![MIB256, 2 * MIB256];
        r.size_bytes = 2 * MIB256;
        r.memset = vec![
            baseline(1, 10.0, 16.0),
            Baseline {
                size_bytes: 2 * MIB256,
                threads: 1,
                gbps: 9.0,
                clear_4k_gbps: 12.0,
            },
        ];
        r.derive(1);
        let (mut out, text) = Out::captured();
        print(&r, &mut out).unwrap();
        let text = text.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "pre-fault of a 256 MiB, 512 MiB region (best of 1 runs after a warm-up; GB/s = decimal)"
        );
        assert!(lines[1].starts_with("   size  page  backend"), "{text}");
        assert!(lines[2].starts_with("256 MiB  2M    anon"), "{text}");
        assert!(lines[3].starts_with("512 MiB  2M    anon"), "{text}");
        assert!(
            text.contains("memset over already-faulted memory (the machine's write bandwidth), 256 MiB: 1 thread: 10.0 GB/s\n"),
            "{text}"
        );
        assert!(
            text.contains("zeroing it 4 KiB at a time (how the kernel clears a huge page it faults in), 512 MiB: 1 thread: 12.0 GB/s\n"),
            "{text}"
        );
        assert!(
            text.contains("\ngrowth 2M on 1 thread: ready GB/s 4.0 / 5.0 by size; "),
            "{text}"
        );
        assert!(!text.contains("against the peers"), "{text}");
    }
}
