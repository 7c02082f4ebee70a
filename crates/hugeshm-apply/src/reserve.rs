//! Reserving pools through sysfs, read back, compaction and retries, and the
//! roll-back that makes it all or nothing.

use hugeshm_doctor::advise::{
    check_sums, crowded_pools, nr_hugepages_path, pool_name as advise_pool_name, Plan,
};
use hugeshm_doctor::checked::{self, TooLarge};
use hugeshm_parse::hugepages::parse_counter;
use hugeshm_parse::size::format_bytes;
use hugeshm_probe::Probe;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to apply.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ApplyOptions {
    /// Keep what the kernel granted when it is less than the plan.
    pub allow_partial: bool,
    /// Only compute the changes.
    pub dry_run: bool,
    /// Waits between compaction and a retry (their count bounds the retries).
    pub retry_waits: Vec<Duration>,
    /// Try even when the growth exceeds the memory the kernel reports
    /// available, or when a plan that does not count the live segments
    /// ([`Plan::keep_live`]) leaves a pool too small for them and it.
    pub force: bool,
    /// Told as each step begins (a caller's progress display):
    /// [`planned_steps`] of them, and a [`ApplyStep::Retry`] for each
    /// retry taken.
    pub on_step: Option<StepHook>,
}

/// A step of [`apply_to`], as it begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApplyStep {
    /// Demoting `pages` pages of one size into pages of `to_page_size_bytes`.
    Demote {
        /// The size demoted.
        page_size_bytes: u64,
        /// The size it becomes.
        to_page_size_bytes: u64,
        /// Pages demoted.
        pages: u64,
    },
    /// Writing one pool's page count (the kernel allocates or frees pages).
    Write {
        /// Page size.
        page_size_bytes: u64,
        /// Node, `None` for the host-wide pool.
        node: Option<u32>,
        /// The count written.
        pages: u64,
    },
    /// Some pool got less: compacting memory, waiting, writing it again.
    Retry {
        /// This retry, from 1.
        attempt: usize,
        /// Retries at most ([`ApplyOptions::retry_waits`]).
        of: usize,
    },
}

impl std::fmt::Display for ApplyStep {
    /// What the step does, in words (a progress line's).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            ApplyStep::Write {
                page_size_bytes,
                node,
                pages,
            } => write!(
                f,
                "the {} pool {} to {pages} pages",
                format_bytes(page_size_bytes),
                node.map(|n| format!("of node {n}"))
                    .unwrap_or_else(|| "(host-wide)".to_owned())
            ),
            ApplyStep::Demote {
                page_size_bytes,
                to_page_size_bytes,
                pages,
            } => write!(
                f,
                "demoting {pages} {} pages to {} pages",
                format_bytes(page_size_bytes),
                format_bytes(to_page_size_bytes)
            ),
            ApplyStep::Retry { attempt, of } => write!(
                f,
                "a pool is short: compacting memory, retry {attempt} of {of}"
            ),
        }
    }
}

/// What [`ApplyOptions::on_step`] calls.
#[derive(Clone)]
pub struct StepHook(Arc<dyn Fn(ApplyStep) + Send + Sync>);

impl StepHook {
    /// A hook calling `f`.
    pub fn new(f: impl Fn(ApplyStep) + Send + Sync + 'static) -> Self {
        StepHook(Arc::new(f))
    }
}

impl std::fmt::Debug for StepHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StepHook")
    }
}

/// The steps applying `plan` takes when no pool comes up short: each
/// demotion and each pool written (none on a dry run). A short pool adds
/// a [`ApplyStep::Retry`] step for each retry, at most
/// [`ApplyOptions::retry_waits`] of them; a refusal before the first write
/// takes none.
pub fn planned_steps(plan: &Plan, opts: &ApplyOptions) -> u64 {
    if opts.dry_run {
        return 0;
    }
    (plan.demote.len() + plan.pools.len()) as u64
}

impl Default for ApplyOptions {
    fn default() -> Self {
        ApplyOptions {
            allow_partial: false,
            dry_run: false,
            retry_waits: vec![
                Duration::from_millis(100),
                Duration::from_millis(500),
                Duration::from_secs(2),
            ],
            force: false,
            on_step: None,
        }
    }
}

/// What happened to one pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PoolChange {
    /// Page size.
    pub page_size_bytes: u64,
    /// Node, `None` for the host-wide pool.
    pub node: Option<u32>,
    /// The sysfs file.
    pub path: String,
    /// Pages before.
    pub before: u64,
    /// Pages the plan asks for.
    pub requested: u64,
    /// Pages the kernel granted (`before` on a dry run).
    pub granted: u64,
    /// Least the pool may hold: pages in use plus reserved.
    pub floor: u64,
}

/// The result of [`apply`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ApplyReport {
    /// Per pool.
    pub changes: Vec<PoolChange>,
    /// Whether this was a dry run.
    pub dry_run: bool,
    /// Whether every pool got what the plan asked for.
    pub complete: bool,
    /// Compaction passes it took.
    pub compactions: u32,
    /// Seconds spent.
    pub seconds: f64,
    /// Pages added or removed per second.
    pub pages_per_second: f64,
    /// The plan's demotions, as made (before the pools were set).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub demoted: Vec<DemoteChange>,
}

/// One demotion, as made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DemoteChange {
    /// The pool demoted.
    pub page_size_bytes: u64,
    /// The size its pages became.
    pub to_page_size_bytes: u64,
    /// Pages the plan demotes.
    pub pages: u64,
    /// `nr_hugepages` of the demoted pool before.
    pub before: u64,
    /// And after.
    pub after: u64,
    /// `nr_hugepages` of the smaller pool before the demotion.
    pub to_before: u64,
    /// And right after it (before the pool was set to the plan).
    pub to_after: u64,
}

/// Why a plan was not applied. Every pool is as it was before the call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApplyError {
    /// Not root.
    #[error("changing huge page pools needs root (running as uid {uid}): run sudo hugeshm apply, or add --dry-run to see the changes")]
    NotRoot {
        /// The uid.
        uid: u32,
    },
    /// The growth exceeds the memory the kernel reports available.
    #[error("refused: the plan adds {} of huge pages but only {} is available (MemAvailable); nothing was changed (--force tries anyway)", format_bytes(*needed), format_bytes(*available))]
    NotEnoughMemory {
        /// Bytes the plan adds.
        needed: u64,
        /// MemAvailable.
        available: u64,
    },
    /// The plan has a pool on a NUMA node this host does not have.
    #[error("refused: the plan has a pool on node {node}, which this host does not have (nodes: {}); nothing was changed", nodes.iter().map(u32::to_string).collect::<Vec<_>>().join(", "))]
    NoSuchNode {
        /// The node.
        node: u32,
        /// The host's nodes.
        nodes: Vec<u32>,
    },
    /// The plan would shrink a pool below what is in use or reserved.
    #[error("refused: {what} would shrink to {requested} pages but {floor} are in use or reserved (nothing was changed)")]
    WouldShrinkInUse {
        /// Which pool.
        what: String,
        /// Pages asked for.
        requested: u64,
        /// Pages in use or reserved.
        floor: u64,
    },
    /// A plan of new regions only (`--size`, `--spec`) would leave a pool
    /// too small for the huge pages live segments use now and the pages it
    /// counts.
    #[error("refused: {what} would hold {requested} pages, but live huge page segments use {live} of its pages now and the plan counts {counted} more there without counting them (it was made from --size or --spec alone): only {} would be free for those {counted}; count the live segments too with --live, or --force to apply it anyway (nothing was changed)", requested.saturating_sub(*live))]
    NoRoomForLive {
        /// Which pool.
        what: String,
        /// Pages the plan asks for.
        requested: u64,
        /// Pages in use (and reserved, host-wide) now.
        live: u64,
        /// Pages the plan counts in that pool (its pages less the spare).
        counted: u64,
    },
    /// The kernel granted fewer pages; everything was rolled back.
    #[error("{summary}; every pool was restored to its state before the call{restore}")]
    Short {
        /// Requested vs granted per pool and free memory per node.
        summary: String,
        /// Problems restoring, if any (empty when the restore took).
        restore: String,
        /// The pools as they were when the shortage was seen.
        changes: Vec<PoolChange>,
    },
    /// The plan counts more pages or bytes than 64 bits hold.
    #[error("refused: {0}; nothing was changed")]
    TooLarge(#[from] TooLarge),
    /// A sysfs file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// A sysfs file held something unexpected.
    #[error("{0}")]
    Parse(#[from] hugeshm_parse::ParseError),
}

/// The pools as the kernel exposes them. The live implementation is sysfs;
/// tests use a model of the kernel that grants fewer pages than asked.
pub trait PoolFiles {
    /// `nr_hugepages` of a pool.
    fn nr(&self, size: u64, node: Option<u32>) -> Result<u64, ApplyError>;
    /// `free_hugepages`.
    fn free(&self, size: u64, node: Option<u32>) -> Result<u64, ApplyError>;
    /// `resv_hugepages` (host-wide only; 0 for a node).
    fn resv(&self, size: u64, node: Option<u32>) -> Result<u64, ApplyError>;
    /// Writes `nr_hugepages`.
    fn set_nr(&self, size: u64, node: Option<u32>, pages: u64) -> Result<(), ApplyError>;
    /// Asks the kernel to compact memory; `false` when it cannot.
    fn compact(&self) -> bool;
    /// The nodes with pools.
    fn nodes(&self) -> Vec<u32>;
    /// The file behind a pool, for messages.
    fn describe(&self, size: u64, node: Option<u32>) -> String;
    /// Demotes `pages` free pages of `size` to pages of `to` (sets
    /// `demote_size` first where it names another size). A kernel model
    /// without demotion refuses.
    fn demote(&self, size: u64, to: u64, pages: u64) -> Result<(), ApplyError> {
        let _ = (to, pages);
        Err(ApplyError::Io {
            path: format!("{}/demote", self.describe(size, None)),
            source: std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "this pool cannot be demoted",
            ),
        })
    }
}

/// [`PoolFiles`] over the probe's `/sys` and `/proc` roots.
pub struct SysfsPools<'a> {
    probe: &'a Probe,
}

impl<'a> SysfsPools<'a> {
    /// Pools under the probe's roots.
    pub fn new(probe: &'a Probe) -> Self {
        SysfsPools { probe }
    }
    fn path(&self, size: u64, node: Option<u32>) -> PathBuf {
        let abs = nr_hugepages_path(size, node);
        self.probe.sys_path(abs.trim_start_matches("/sys/"))
    }
    fn read(&self, p: &Path) -> Result<u64, ApplyError> {
        let text = std::fs::read_to_string(p).map_err(|e| ApplyError::Io {
            path: p.display().to_string(),
            source: e,
        })?;
        Ok(parse_counter(&p.display().to_string(), &text)?)
    }
}

impl PoolFiles for SysfsPools<'_> {
    fn nr(&self, size: u64, node: Option<u32>) -> Result<u64, ApplyError> {
        self.read(&self.path(size, node))
    }
    fn free(&self, size: u64, node: Option<u32>) -> Result<u64, ApplyError> {
        self.read(&self.path(size, node).with_file_name("free_hugepages"))
    }
    fn resv(&self, size: u64, node: Option<u32>) -> Result<u64, ApplyError> {
        match node {
            Some(_) => Ok(0),
            None => self.read(&self.path(size, None).with_file_name("resv_hugepages")),
        }
    }
    fn set_nr(&self, size: u64, node: Option<u32>, pages: u64) -> Result<(), ApplyError> {
        let p = self.path(size, node);
        std::fs::write(&p, format!("{pages}\n")).map_err(|e| ApplyError::Io {
            path: p.display().to_string(),
            source: e,
        })
    }
    fn compact(&self) -> bool {
        let c = self.probe.proc_path("sys/vm/compact_memory");
        c.exists() && std::fs::write(&c, "1\n").is_ok()
    }
    fn nodes(&self) -> Vec<u32> {
        self.probe.node_ids()
    }
    fn describe(&self, size: u64, node: Option<u32>) -> String {
        self.path(size, node).display().to_string()
    }
    fn demote(&self, size: u64, to: u64, pages: u64) -> Result<(), ApplyError> {
        let write = |p: PathBuf, v: String| {
            std::fs::write(&p, v).map_err(|e| ApplyError::Io {
                path: p.display().to_string(),
                source: e,
            })
        };
        let ds = self.path(size, None).with_file_name("demote_size");
        let now = std::fs::read_to_string(&ds).map_err(|e| ApplyError::Io {
            path: ds.display().to_string(),
            source: e,
        })?;
        if hugeshm_parse::hugepages::parse_demote_size(&ds.display().to_string(), &now)? != to {
            write(ds, format!("{}kB\n", to / 1024))?;
        }
        write(
            self.path(size, None).with_file_name("demote"),
            format!("{pages}\n"),
        )
    }
}

fn euid(probe: &Probe) -> Option<u32> {
    let text = std::fs::read_to_string(probe.proc_path("self/status")).ok()?;
    let line = text.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

fn pool_name(c: &PoolChange) -> String {
    format!(
        "{} pool{}",
        format_bytes(c.page_size_bytes),
        c.node
            .map(|n| format!(" of node {n}"))
            .unwrap_or_else(|| " (host-wide)".into())
    )
}

/// Reserves the plan's pools on the live host (see [`apply_to`]), after
/// checking that the caller is root and that the growth fits in the memory
/// the kernel reports available.
pub fn apply(probe: &Probe, plan: &Plan, opts: &ApplyOptions) -> Result<ApplyReport, ApplyError> {
    check_sums(plan)?;
    let pools = SysfsPools::new(probe);
    if !opts.dry_run {
        if let Some(uid) = euid(probe).filter(|u| *u != 0) {
            if probe.roots.is_live() {
                return Err(ApplyError::NotRoot { uid });
            }
        }
    }
    let host = probe.host();
    let nodes: Vec<u32> = host.nodes.iter().map(|n| n.node).collect();
    if let Some(node) = plan
        .pools
        .iter()
        .filter_map(|p| p.node)
        .find(|n| !nodes.is_empty() && !nodes.contains(n))
    {
        return Err(ApplyError::NoSuchNode { node, nodes });
    }
    let available = host.meminfo.as_ref().and_then(|m| m.mem_available_bytes);
    let mut growth: u64 = 0;
    for p in &plan.pools {
        let before = pools.nr(p.page_size_bytes, p.node)?;
        let what = || {
            format!(
                "{}: bytes added",
                advise_pool_name(p.page_size_bytes, p.node)
            )
        };
        let added = checked::mul(p.pages.saturating_sub(before), p.page_size_bytes, what)?;
        growth = checked::add(growth, added, || "the bytes the plan adds".to_string())?;
    }
    // Pages a demotion gives need no new memory.
    let demoted = checked::sum(
        plan.demote
            .iter()
            .map(|d| d.pages.saturating_mul(d.page_size_bytes)),
        || "the bytes demotions give".to_string(),
    )?;
    let growth = growth.saturating_sub(demoted);
    if let Some(avail) = available {
        if growth > avail && !opts.force {
            return Err(ApplyError::NotEnoughMemory {
                needed: growth,
                available: avail,
            });
        }
    }
    let describe_free = || {
        let free: Vec<String> = host
            .nodes
            .iter()
            .filter_map(|n| {
                Some(format!(
                    "node {} {}",
                    n.node,
                    format_bytes(n.meminfo.as_ref()?.mem_free_bytes?)
                ))
            })
            .collect();
        if !free.is_empty() {
            format!("free memory: {}", free.join(", "))
        } else {
            host.meminfo
                .as_ref()
                .and_then(|m| m.mem_free_bytes)
                .map(|f| format!("free memory: {}", format_bytes(f)))
                .unwrap_or_default()
        }
    };
    apply_to(&pools, plan, opts, &describe_free)
}

/// Reserves the plan's pools: writes each one, reads back what the kernel
/// granted, compacts memory and retries when short, and — unless
/// `allow_partial` — restores every pool when the plan cannot be met in full.
/// Never shrinks a pool below the pages in use or reserved.
pub fn apply_to(
    pools: &dyn PoolFiles,
    plan: &Plan,
    opts: &ApplyOptions,
    describe_free: &dyn Fn() -> String,
) -> Result<ApplyReport, ApplyError> {
    check_sums(plan)?;
    let t0 = Instant::now();
    let mut changes = Vec::new();
    for p in &plan.pools {
        let before = pools.nr(p.page_size_bytes, p.node)?;
        let free = pools.free(p.page_size_bytes, p.node)?;
        let resv = pools.resv(p.page_size_bytes, p.node)?;
        changes.push(PoolChange {
            page_size_bytes: p.page_size_bytes,
            node: p.node,
            path: pools.describe(p.page_size_bytes, p.node),
            before,
            requested: p.pages,
            granted: before,
            floor: before.saturating_sub(free).saturating_add(resv),
        });
    }
    for c in &changes {
        if c.requested < c.floor {
            return Err(ApplyError::WouldShrinkInUse {
                what: pool_name(c),
                requested: c.requested,
                floor: c.floor,
            });
        }
    }
    if plan.keep_live && !opts.force {
        // What live segments use now: each pool's floor, and host-wide for
        // a size the plan splits per node (reserved pages are on no node).
        let mut live: std::collections::BTreeMap<(u64, Option<u32>), u64> = changes
            .iter()
            .map(|c| ((c.page_size_bytes, c.node), c.floor))
            .collect();
        for c in &changes {
            if let std::collections::btree_map::Entry::Vacant(e) =
                live.entry((c.page_size_bytes, None))
            {
                let s = c.page_size_bytes;
                let nr = pools.nr(s, None)?;
                let free = pools.free(s, None)?;
                let resv = pools.resv(s, None)?;
                e.insert(nr.saturating_sub(free).saturating_add(resv));
            }
        }
        let crowded = crowded_pools(plan, |s, n| live.get(&(s, n)).copied().unwrap_or(0));
        if let Some((p, used, counted)) = crowded.into_iter().next() {
            return Err(ApplyError::NoRoomForLive {
                what: advise_pool_name(p.page_size_bytes, p.node),
                requested: p.pages,
                live: used,
                counted,
            });
        }
    }
    if opts.dry_run {
        return Ok(ApplyReport {
            changes,
            dry_run: true,
            complete: true,
            compactions: 0,
            seconds: t0.elapsed().as_secs_f64(),
            pages_per_second: 0.0,
            demoted: Vec::new(),
        });
    }
    // The state to restore: the host-wide pool of every size touched, and its
    // node pools on a multi-node host (writing a host-wide count moves pages
    // between nodes; writing the nodes back makes the restore exact).
    let sizes: std::collections::BTreeSet<u64> = plan
        .pools
        .iter()
        .map(|p| p.page_size_bytes)
        .chain(plan.demote.iter().map(|d| d.page_size_bytes))
        .collect();
    let nodes = pools.nodes();
    let mut snapshot: Vec<(u64, Option<u32>, u64)> = Vec::new();
    for s in &sizes {
        snapshot.push((*s, None, pools.nr(*s, None)?));
        if nodes.len() > 1 {
            for n in &nodes {
                if let Ok(v) = pools.nr(*s, Some(*n)) {
                    snapshot.push((*s, Some(*n), v));
                }
            }
        }
    }
    let restore = || -> String {
        let mut problems = Vec::new();
        for (s, n, v) in &snapshot {
            if let Err(e) = pools.set_nr(*s, *n, *v) {
                problems.push(e.to_string());
            }
        }
        for (s, n, v) in &snapshot {
            match pools.nr(*s, *n) {
                Ok(now) if now == *v => {}
                Ok(now) => problems.push(format!("{} is {now}, was {v}", pools.describe(*s, *n))),
                Err(e) => problems.push(e.to_string()),
            }
        }
        if problems.is_empty() {
            String::new()
        } else {
            format!(" except: {}", problems.join("; "))
        }
    };

    let step = |s: ApplyStep| {
        if let Some(h) = &opts.on_step {
            (h.0)(s);
        }
    };
    // Demotions first: their pages need no new memory.
    let mut demoted = Vec::new();
    for d in &plan.demote {
        let (from, to) = (d.page_size_bytes, d.to_page_size_bytes);
        step(ApplyStep::Demote {
            page_size_bytes: from,
            to_page_size_bytes: to,
            pages: d.pages,
        });
        let made = (|| -> Result<DemoteChange, ApplyError> {
            let before = pools.nr(from, None)?;
            let to_before = pools.nr(to, None)?;
            pools.demote(from, to, d.pages)?;
            Ok(DemoteChange {
                page_size_bytes: from,
                to_page_size_bytes: to,
                pages: d.pages,
                before,
                after: pools.nr(from, None)?,
                to_before,
                to_after: pools.nr(to, None)?,
            })
        })();
        match made {
            Ok(c) if c.before.saturating_sub(c.after) == c.pages => demoted.push(c),
            Ok(c) => {
                let summary = format!(
                    "demoting {} {} pages gave {} (the pool went from {} to {}: the others were in use or reserved by then)",
                    c.pages,
                    format_bytes(from),
                    c.before.saturating_sub(c.after),
                    c.before,
                    c.after
                );
                return Err(ApplyError::Short {
                    summary,
                    restore: restore(),
                    changes,
                });
            }
            Err(e) => {
                let _ = restore();
                return Err(e);
            }
        }
    }

    // Shrinks first (they free memory for the growths), then growths.
    let mut order: Vec<usize> = (0..changes.len()).collect();
    order.sort_by_key(|&i| changes[i].requested >= changes[i].before);
    let result = (|| -> Result<u32, ApplyError> {
        for &i in &order {
            step(ApplyStep::Write {
                page_size_bytes: changes[i].page_size_bytes,
                node: changes[i].node,
                pages: changes[i].requested,
            });
            pools.set_nr(
                changes[i].page_size_bytes,
                changes[i].node,
                changes[i].requested,
            )?;
        }
        let mut compactions = 0;
        let mut waits = opts.retry_waits.iter();
        loop {
            for c in changes.iter_mut() {
                c.granted = pools.nr(c.page_size_bytes, c.node)?;
            }
            if changes.iter().all(|c| c.granted >= c.requested) {
                return Ok(compactions);
            }
            let Some(wait) = waits.next() else {
                return Ok(compactions);
            };
            step(ApplyStep::Retry {
                attempt: opts.retry_waits.len() - waits.len(),
                of: opts.retry_waits.len(),
            });
            if pools.compact() {
                compactions += 1;
            }
            std::thread::sleep(*wait);
            for c in changes.iter().filter(|c| c.granted < c.requested) {
                pools.set_nr(c.page_size_bytes, c.node, c.requested)?;
            }
        }
    })();
    let compactions = match result {
        Ok(c) => c,
        Err(e) => {
            let _ = restore();
            return Err(e);
        }
    };
    let complete = changes.iter().all(|c| c.granted >= c.requested);
    if !complete && !opts.allow_partial {
        let mut parts: Vec<String> = changes
            .iter()
            .filter(|c| c.granted < c.requested)
            .map(|c| {
                format!(
                    "{}: requested {}, granted {} (was {})",
                    pool_name(c),
                    c.requested,
                    c.granted,
                    c.before
                )
            })
            .collect();
        let free = describe_free();
        if !free.is_empty() {
            parts.push(free);
        }
        parts.push(format!(
            "{} compaction{} tried; memory may be too fragmented (reserve at boot, or use --allow-partial)",
            compactions,
            if compactions == 1 { "" } else { "s" }
        ));
        let summary = parts.join("; ");
        let restore = restore();
        return Err(ApplyError::Short {
            summary,
            restore,
            changes,
        });
    }
    let moved: u64 = changes.iter().map(|c| c.granted.abs_diff(c.before)).sum();
    let seconds = t0.elapsed().as_secs_f64();
    Ok(ApplyReport {
        changes,
        dry_run: false,
        complete,
        compactions,
        seconds,
        pages_per_second: if seconds > 0.0 {
            moved as f64 / seconds
        } else {
            0.0
        },
        demoted,
    })
}
