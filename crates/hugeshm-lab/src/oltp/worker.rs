//! The workers: the program re-executed (`bench oltp-worker`, attaching
//! the region by name, [`serve_attached`]) or, for `anon`, forked children; each serves runs
//! of the workload over the cache, one JSON line in, one out.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use hugeshm_cache::Cache;
use hugeshm_region::{Backend, Locator};
use hugeshm_sys::{PerfCounter, PerfEvent};
use serde::{Deserialize, Serialize};

use anyhow::bail;
use hugeshm_cache::Stats;

use super::workload::{self, Dist, Histogram, Picker, Rng, RunResult, Spec};
use super::{Options, RunSummary};
use crate::region_failed::region_failed;

/// A command to a worker.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "lowercase")]
enum Cmd {
    Run {
        raw: bool,
        seconds: f64,
        seed: u64,
        spec: Spec,
    },
    Quit,
}

/// A worker's answer to a run.
#[derive(Debug, Serialize, Deserialize)]
struct Answer {
    result: Option<RunResult>,
    dtlb_misses: Option<u64>,
    dtlb_unavailable: Option<String>,
    error: Option<String>,
}

/// dTLB load and store counters of a worker, or why there are none.
struct Dtlb(Result<[PerfCounter; 2], String>);

impl Dtlb {
    fn open() -> Dtlb {
        let open = |e| PerfCounter::open(e).map_err(|err| PerfEvent::unavailable_reason(&err));
        Dtlb(
            open(PerfEvent::DtlbLoadMisses)
                .and_then(|l| open(PerfEvent::DtlbStoreMisses).map(|s| [l, s])),
        )
    }

    fn read(&self) -> Option<u64> {
        let c = self.0.as_ref().ok()?;
        Some(c[0].read().ok()? + c[1].read().ok()?)
    }
}

/// Serves runs over `cache` until `quit` or the end of `input`.
fn serve(cache: &Cache, input: impl BufRead, mut output: impl Write) -> anyhow::Result<()> {
    // Map the whole region into this worker's page tables first (what a
    // server's pre_page_sga does per process): the page-table cost is paid
    // and counted in VmPTE, not spread over the timed runs as faults.
    cache.region().populate_read().map_err(region_failed)?;
    let dtlb = Dtlb::open();
    let blocks = cache.data_blocks();
    let mut picker: Option<(Dist, Picker)> = None;
    for line in input.lines() {
        let cmd: Cmd = serde_json::from_str(&line?)?;
        let Cmd::Run {
            raw,
            seconds,
            seed,
            spec,
        } = cmd
        else {
            break;
        };
        if picker.as_ref().is_none_or(|p| p.0 != spec.dist) {
            picker = Some((spec.dist, Picker::new(spec.dist, blocks)));
        }
        let p = &picker.as_ref().expect("set above").1;
        let mut rng = Rng::new(seed);
        let d = Duration::from_secs_f64(seconds);
        let before = dtlb.read();
        let r = if raw {
            workload::run_raw(
                cache.region(),
                cache.layout().blocks_at,
                cache.layout().block_size,
                cache.layout().buffers as u64,
                &spec,
                &mut rng,
                d,
            )
        } else {
            workload::run_cache(cache, &spec, p, &mut rng, d)
        };
        let after = dtlb.read();
        let answer = match r {
            Ok(r) => Answer {
                result: Some(r),
                dtlb_misses: before.zip(after).map(|(b, a)| a.saturating_sub(b)),
                dtlb_unavailable: dtlb.0.as_ref().err().cloned(),
                error: None,
            },
            Err(e) => Answer {
                result: None,
                dtlb_misses: None,
                dtlb_unavailable: None,
                error: Some(e.to_string()),
            },
        };
        writeln!(output, "{}", serde_json::to_string(&answer)?)?;
        output.flush()?;
    }
    Ok(())
}

/// What the hidden `bench oltp-worker` does: attaches the region `name`
/// of `backend`, opens the cache over `data`, and serves runs: one JSON
/// command a line from `input`, one JSON answer a line to `output`
/// (flushed after each), until `quit` or the end of `input`.
pub fn serve_attached(
    name: &str,
    backend: Backend,
    data: &Path,
    input: impl BufRead,
    output: impl Write,
) -> anyhow::Result<()> {
    let region = Locator::new(name, backend)
        .attach()
        .map_err(region_failed)?;
    let cache = Cache::open(region, data)?;
    serve(&cache, input, output)
}

/// A worker process and its pipes.
pub(super) struct Worker {
    pub(super) pid: u32,
    child: Option<Child>,
    to: Box<dyn Write>,
    from: Box<dyn BufRead>,
}

/// The workers of one row; told to quit and reaped on drop.
pub(super) struct Workers(pub(super) Vec<Worker>);

impl Drop for Workers {
    fn drop(&mut self) {
        for w in &mut self.0 {
            let _ = writeln!(w.to, "{}", serde_json::json!({"cmd": "quit"}));
            let _ = w.to.flush();
        }
        for w in &mut self.0 {
            match w.child.as_mut() {
                Some(c) => {
                    crate::common::reap([c], Duration::from_secs(30));
                }
                None => {
                    let _ = hugeshm_sys::wait_child(w.pid);
                }
            }
        }
    }
}

fn pipe() -> anyhow::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// Starts `n` workers: re-executed and attached by name for named
/// backends, forked for anon.
pub(super) fn start_workers(
    cache: &Cache,
    name: &str,
    backend: Backend,
    data: &Path,
    n: u32,
) -> anyhow::Result<Workers> {
    let mut ws = Workers(Vec::new());
    let exe = std::env::current_exe()?;
    for i in 0..n {
        if backend.is_named() {
            let mut child = Command::new(&exe)
                .args(["bench", "oltp-worker", name, backend.as_str()])
                .arg(data)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .with_context(|| format!("spawning worker {i}"))?;
            let to = child.stdin.take().context("worker stdin")?;
            let from = BufReader::new(child.stdout.take().context("worker stdout")?);
            ws.0.push(Worker {
                pid: child.id(),
                child: Some(child),
                to: Box::new(to),
                from: Box::new(from),
            });
        } else {
            let (cmd_r, cmd_w) = pipe()?;
            let (res_r, res_w) = pipe()?;
            let pid = {
                let (cmd_r, res_w) = (&cmd_r, &res_w);
                // fork needs one thread: the interrupt handler's waits.
                crate::guard::paused(|| {
                    hugeshm_sys::fork_child(move || {
                        crate::common::die_with_parent();
                        let input = BufReader::new(File::from(cmd_r.try_clone().expect("dup")));
                        let output = File::from(res_w.try_clone().expect("dup"));
                        match serve(cache, input, output) {
                            Ok(()) => 0,
                            Err(_) => 1,
                        }
                    })
                })
                .map_err(|e| {
                    anyhow::anyhow!("{e} (anon regions are shared with forked workers only)")
                })?
            };
            drop((cmd_r, res_w));
            ws.0.push(Worker {
                pid,
                child: None,
                to: Box::new(File::from(cmd_w)),
                from: Box::new(BufReader::new(File::from(res_r))),
            });
        }
    }
    Ok(ws)
}

/// `VmPTE` of a process, bytes.
pub(super) fn vm_pte(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmPTE:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Transactions per timed one (the clock's ordered read waits for the
/// loads in flight, so timing often would slow the loop it measures).
pub const SAMPLE_EVERY: u32 = 1024;

/// One run of every worker at once.
pub(super) fn run_all(
    ws: &mut Workers,
    raw: bool,
    o: &Options,
    seed: u64,
) -> anyhow::Result<(RunSummary, Histogram, Option<String>)> {
    let spec = Spec {
        dist: o.dist,
        write_pct: o.write_pct.min(100),
        sample_every: SAMPLE_EVERY,
    };
    for (i, w) in ws.0.iter_mut().enumerate() {
        let c = Cmd::Run {
            raw,
            seconds: o.duration_seconds,
            seed: seed.wrapping_mul(1000).wrapping_add(i as u64 + 1),
            spec,
        };
        writeln!(w.to, "{}", serde_json::to_string(&c)?)?;
        w.to.flush()?;
    }
    let mut hist = Histogram::default();
    let mut stats = Stats::default();
    let (mut ops, mut secs, mut dtlb, mut dtlb_ok) = (0u64, 0f64, 0u64, true);
    let mut cpu = 0f64;
    let mut why = None;
    for (i, w) in ws.0.iter_mut().enumerate() {
        let mut line = String::new();
        w.from.read_line(&mut line)?;
        if line.is_empty() {
            bail!("worker {i} (pid {}) ended without an answer", w.pid);
        }
        let a: Answer =
            serde_json::from_str(&line).with_context(|| format!("worker {i} answered {line:?}"))?;
        if let Some(e) = a.error {
            bail!("worker {i}: {e}");
        }
        let r = a.result.context("an answer without a result")?;
        ops += r.ops;
        secs += r.seconds;
        cpu += r.cpu_seconds;
        hist.merge(&r.latency);
        stats.add(&r.stats);
        match a.dtlb_misses {
            Some(d) => dtlb += d,
            None => dtlb_ok = false,
        }
        if why.is_none() {
            why = a.dtlb_unavailable;
        }
    }
    let mean = secs / ws.0.len().max(1) as f64;
    let summary = RunSummary {
        tps: if mean > 0.0 { ops as f64 / mean } else { 0.0 },
        transactions: ops,
        seconds: mean,
        tx_per_cpu_second: if cpu > 0.0 { ops as f64 / cpu } else { 0.0 },
        hit_ratio: (!raw).then(|| stats.hit_ratio()),
        p50_ns: hist.quantile(0.5),
        p99_ns: hist.quantile(0.99),
        stats,
        dtlb_misses_per_tx: (dtlb_ok && ops > 0).then(|| dtlb as f64 / ops as f64),
    };
    Ok((summary, hist, why))
}
