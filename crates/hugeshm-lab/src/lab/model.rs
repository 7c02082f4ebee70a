//! The lab's plain data: what one reproduction hands back (the field
//! report's figures beside ours, a detail table, the data of its plots),
//! and the statistics every reproduction uses. A leaf: it imports nothing
//! of the lab.

use crate::Steps;
use hugeshm_probe::{HostSnapshot, Probe};
use serde::Serialize;

/// One reproduction of a field report: a small module under `lab/` that
/// implements this and is listed in `lab::all()`.
pub trait Lab {
    /// The `--only` name (`startup`).
    fn name(&self) -> &'static str;
    /// The field report it reproduces (`001`).
    fn seed(&self) -> &'static str;
    /// One line: what it reproduces.
    fn title(&self) -> &'static str;
    /// How many steps `run` takes on this host (begun on `ctx.steps`);
    /// the lab counts them all before it starts, for its `step k of n`.
    fn steps(&self, ctx: &Ctx<'_>) -> u64;
    /// Measures on this host, filling `out` (comparisons, table, plots,
    /// notes), each measurement a step of `ctx.steps`. An error ends this
    /// reproduction only; what it filled in before is kept.
    fn run(&self, ctx: &Ctx<'_>, out: &mut Reproduction) -> anyhow::Result<()>;
}

/// The machine's write bandwidth, measured at the start of the lab run: the
/// ceiling the pre-fault and bandwidth figures are read against.
#[derive(Debug, Clone, Serialize)]
pub struct Ceiling {
    /// Threads writing.
    pub threads: usize,
    /// Bytes per pass.
    pub size_bytes: u64,
    /// Page size under the buffer (THP where allowed).
    pub page_size_bytes: u64,
    /// Decimal GB/s of the fastest of its passes (two measurements at the
    /// start of the run).
    pub gbps: f64,
    /// The same measured again at the end of the run.
    pub gbps_at_end: Option<f64>,
    /// Zeroing the same memory 4 KiB at a time, as the kernel clears a
    /// huge page it faults in (the pre-fault's own ceiling), decimal GB/s.
    pub clear_4k_gbps: f64,
}

impl Ceiling {
    /// `1 thread: 40.7 GB/s (40.1 at the end; 4 KiB at a time 25.0)`.
    pub fn describe(&self) -> String {
        format!(
            "{} thread{}: {:.1} GB/s ({}4 KiB at a time {:.1})",
            self.threads,
            if self.threads == 1 { "" } else { "s" },
            self.gbps,
            self.gbps_at_end
                .map(|e| format!("{e:.1} at the end; "))
                .unwrap_or_default(),
            self.clear_4k_gbps
        )
    }
}

/// What a reproduction gets: the host, its scale, the options, the ceiling
/// and the progress line.
pub struct Ctx<'a> {
    /// The host reader.
    pub probe: &'a Probe,
    /// The host at the start of the run.
    pub host: &'a HostSnapshot,
    /// `MemTotal`, bytes: what sizes are scaled to.
    pub mem_bytes: u64,
    /// CPUs this process may run on.
    pub cpus: usize,
    /// `--quick`: small sizes, one timed run (tests).
    pub quick: bool,
    /// Whether the lab may raise the huge page pools (and give them back).
    pub reserve: bool,
    /// memset over faulted memory, per thread count, this run.
    pub ceiling: &'a [Ceiling],
    /// The lab's steps (drawn on a terminal only), each reproduction's
    /// under its name.
    pub steps: &'a Steps,
}

impl Ctx<'_> {
    /// Timed runs per measurement (after the warm-up).
    pub fn runs(&self) -> usize {
        if self.quick {
            1
        } else {
            3
        }
    }

    /// The thread counts to compare: 1 and every CPU (just 1 on one CPU).
    pub fn thread_counts(&self) -> Vec<usize> {
        if self.cpus > 1 {
            vec![1, self.cpus]
        } else {
            vec![1]
        }
    }

    /// A size scaled to this host: `mem_bytes / share`, down to a power of
    /// two, kept within `lo..=hi`.
    pub fn scaled(&self, share: u64, lo: u64, hi: u64) -> u64 {
        let want = (self.mem_bytes / share.max(1)).max(1);
        let pow2 = 1u64 << (63 - want.leading_zeros());
        pow2.clamp(lo, hi)
    }

    /// The ceiling for `threads` writers.
    pub fn ceiling_gbps(&self, threads: usize) -> Option<f64> {
        self.ceiling
            .iter()
            .find(|c| c.threads == threads)
            .map(|c| c.gbps)
    }

    /// Zeroing 4 KiB at a time with `threads` writers: the pre-fault's
    /// own ceiling.
    pub fn clear_4k_gbps(&self, threads: usize) -> Option<f64> {
        self.ceiling
            .iter()
            .find(|c| c.threads == threads)
            .map(|c| c.clear_4k_gbps)
    }
}

/// One field report's figure beside ours.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// What is compared, in words (`speed-up of concurrent faults`).
    pub what: String,
    /// The unit of both figures (`x`, `GB/s`, `MiB`, `%`).
    pub unit: String,
    /// The field report's figure.
    pub field: f64,
    /// Where the field report's figure comes from (its setting).
    pub field_setting: String,
    /// Ours, measured in this run (`None`: this host cannot measure it;
    /// `note` says why).
    pub ours: Option<f64>,
    /// Our setting (sizes scaled to this host).
    pub our_setting: String,
    /// `ours / field`.
    pub ratio: Option<f64>,
    /// Why ours is missing, or how to read the pair.
    pub note: Option<String>,
}

impl Comparison {
    /// A pair with its ratio.
    pub fn new(
        what: &str,
        unit: &str,
        (field, field_setting): (f64, &str),
        (ours, our_setting): (Option<f64>, String),
    ) -> Self {
        Comparison {
            what: what.to_owned(),
            unit: unit.to_owned(),
            field,
            field_setting: field_setting.to_owned(),
            ours,
            our_setting,
            ratio: ours.filter(|_| field != 0.0).map(|o| o / field),
            note: None,
        }
    }

    /// With a note.
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }
}

/// A table of what was measured (text cells; the JSON keeps the numbers in
/// `comparisons` and `plots`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct DataTable {
    /// Column headers; a header starting with `>` is right-aligned.
    pub columns: Vec<String>,
    /// Rows of cells.
    pub rows: Vec<Vec<String>>,
}

impl DataTable {
    /// A table with these headers.
    pub fn new(columns: &[&str]) -> Self {
        DataTable {
            columns: columns.iter().map(|c| (*c).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }
}

/// How a plot is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PlotKind {
    /// Lines over a numeric x axis (time against size, page tables against
    /// processes).
    Lines,
    /// Grouped bars, one group per category (throughput by page size).
    Bars,
}

/// One line, or one colour of bars.
#[derive(Debug, Clone, Serialize)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// `(x, y)`; for bars x is the category's index.
    pub points: Vec<(f64, f64)>,
}

/// The data of one plot.
#[derive(Debug, Clone, Serialize)]
pub struct Plot {
    /// File stem of the SVG (`startup-time`).
    pub id: String,
    /// Title above the plot.
    pub title: String,
    /// Lines or bars.
    pub kind: PlotKind,
    /// X axis label.
    pub x_label: String,
    /// Whether x counts things (sessions, processes): ticks on whole
    /// numbers only.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub x_counts: bool,
    /// Y axis label.
    pub y_label: String,
    /// Bars: the category names along x.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub categories: Vec<String>,
    /// The data.
    pub series: Vec<Series>,
}

/// What one reproduction hands back.
#[derive(Debug, Clone, Serialize)]
pub struct Reproduction {
    /// The `--only` name (`startup`).
    pub name: String,
    /// The field report (`001`; the file in `shared/seeds/` starts with it).
    pub seed: String,
    /// The report `seed` names: its title, when, what it measured.
    pub report: Option<super::reports::Source>,
    /// One line: what is reproduced.
    pub title: String,
    /// The field report's figures beside ours.
    pub comparisons: Vec<Comparison>,
    /// What was measured, row by row.
    pub table: DataTable,
    /// The data of its plots.
    pub plots: Vec<Plot>,
    /// How to read it; what this host could not do.
    pub notes: Vec<String>,
    /// Wall seconds it took.
    pub seconds: f64,
    /// Why it stopped, when it failed (what it measured before is kept).
    pub error: Option<String>,
}

impl Reproduction {
    /// An empty result for a reproduction.
    pub fn new(name: &str, seed: &str, title: &str) -> Self {
        Reproduction {
            name: name.to_owned(),
            seed: seed.to_owned(),
            report: super::reports::source(seed).copied(),
            title: title.to_owned(),
            comparisons: Vec::new(),
            table: DataTable::default(),
            plots: Vec::new(),
            notes: Vec::new(),
            seconds: 0.0,
            error: None,
        }
    }
}

/// What `hugeshm lab` produces: the host, the ceiling, every
/// reproduction.
#[derive(Debug, Clone, Serialize)]
pub struct LabReport {
    /// The host in one line (kernel, CPUs, memory, nodes).
    pub host: String,
    /// `MemTotal`, bytes.
    pub mem_bytes: u64,
    /// CPUs the lab ran on.
    pub cpus: usize,
    /// NUMA nodes with memory.
    pub memory_nodes: usize,
    /// Whether `--quick` was given.
    pub quick: bool,
    /// The 1-minute load average at the start and at the end of the run.
    pub load_average: [Option<f64>; 2],
    /// memset over faulted memory, measured at the start of this run.
    pub ceiling: Vec<Ceiling>,
    /// The reproductions, in the order they ran.
    pub reproductions: Vec<Reproduction>,
    /// Wall seconds of the whole run.
    pub seconds: f64,
}

/// Best (smallest for times, largest for rates), median and every run of
/// one measurement, after its warm-up.
#[derive(Debug, Clone, Serialize)]
pub struct Runs {
    /// The warm-up run (first touch; not in `runs`).
    pub warmup: f64,
    /// Every timed run.
    pub runs: Vec<f64>,
    /// The best timed run.
    pub best: f64,
    /// The median timed run.
    pub median: f64,
}

impl Runs {
    /// Times in seconds: the best is the smallest.
    pub fn seconds(warmup: f64, runs: Vec<f64>) -> Self {
        let best = runs.iter().copied().fold(f64::INFINITY, f64::min);
        Runs {
            warmup,
            median: median(&runs),
            best: if best.is_finite() { best } else { 0.0 },
            runs,
        }
    }

    /// Rates (bigger is better): the best is the largest.
    pub fn rates(warmup: f64, runs: Vec<f64>) -> Self {
        Runs {
            warmup,
            median: median(&runs),
            best: runs.iter().copied().fold(0.0, f64::max),
            runs,
        }
    }
}

/// The median (the upper one of an even count); 0 for none.
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s.get(s.len() / 2).copied().unwrap_or(0.0)
}

/// A ratio as the tables print it (`1.46x`, `-`).
pub fn ratio_text(r: Option<f64>) -> String {
    match r {
        Some(x) if x >= 100.0 || (x > 0.0 && x < 0.01) => format!("{x:.1e}x"),
        Some(x) => format!("{x:.2}x"),
        None => "-".to_owned(),
    }
}

/// A figure with its unit as the tables print it.
pub fn figure_text(v: Option<f64>, unit: &str) -> String {
    let Some(v) = v else {
        return "n/a".to_owned();
    };
    let num = if v == 0.0 {
        "0".to_owned()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else if v.abs() >= 0.01 {
        format!("{v:.2}")
    } else {
        format!("{v:.1e}")
    };
    match unit {
        "" => num,
        "x" | "%" => format!("{num}{unit}"),
        _ => format!("{num} {unit}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_scale_to_the_host() {
        let probe = Probe::default();
        let host = HostSnapshot::default();
        let ctx = Ctx {
            probe: &probe,
            host: &host,
            mem_bytes: 24 << 30,
            cpus: 2,
            quick: false,
            reserve: false,
            ceiling: &[],
            steps: &Steps::hidden(),
        };
        assert_eq!(ctx.scaled(16, 256 << 20, 1 << 30), 1 << 30);
        assert_eq!(ctx.scaled(64, 128 << 20, 512 << 20), 256 << 20);
        let small = Ctx {
            mem_bytes: 2 << 30,
            ..ctx
        };
        assert_eq!(small.scaled(16, 256 << 20, 1 << 30), 256 << 20);
        assert_eq!(small.thread_counts(), vec![1, 2]);
    }

    #[test]
    fn runs_pick_best_and_median() {
        let t = Runs::seconds(9.0, vec![3.0, 1.0, 2.0]);
        assert_eq!((t.best, t.median, t.warmup), (1.0, 2.0, 9.0));
        let r = Runs::rates(0.5, vec![3.0, 1.0, 2.0, 4.0]);
        assert_eq!((r.best, r.median), (4.0, 3.0));
        assert_eq!(Runs::seconds(1.0, vec![]).best, 0.0);
    }

    #[test]
    fn ratio_is_ours_over_field() {
        let c = Comparison::new("x", "s", (37.5, "10 GB"), (Some(75.0), "4 GiB".to_owned()));
        assert_eq!(c.ratio, Some(2.0));
        let none = Comparison::new("x", "s", (37.5, ""), (None, String::new()));
        assert_eq!(none.ratio, None);
        assert_eq!(ratio_text(Some(1.456)), "1.46x");
        assert_eq!(ratio_text(Some(0.0004)), "4.0e-4x");
        assert_eq!(figure_text(Some(905.0), "tps"), "905 tps");
        assert_eq!(figure_text(Some(1.456), "x"), "1.46x");
        assert_eq!(figure_text(None, "x"), "n/a");
    }
}
