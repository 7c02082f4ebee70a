//! The Prometheus printer: the status and segments reports as metrics
//! (OpenMetrics text, or the Prometheus text format 0.0.4).
//!
//! A printer like the tables and `--json`: it reads the report structs and
//! nothing else. Names carry their unit (`_bytes`, `_seconds`, `_pages`).
//! A page size is two labels, in bytes and as people write it
//! (`page_size_bytes="2097152",page_size="2Mi"`, Kubernetes' spelling of
//! `hugepages-2Mi`). As node_exporter does (`node_memory_HugePages_Total`
//! beside `node_memory_numa_HugePages_Total{node}`), a host-wide figure and
//! its per-node figures are two metrics, so that `sum()` of either counts
//! each page once: `hugeshm_pool_pages` and `hugeshm_pool_node_pages{node}`.
//! `hugeshm_finding` has a sample for every code the doctor knows
//! (`hugeshm_doctor::finding::CODES`), 0 when not found, so that an alert
//! resolves and a graph drops when a finding clears.

use crate::finding::CODES;
use crate::segments::{Segment, SegmentsReport};
use crate::status::StatusReport;
use crate::Finding;
use hugeshm_parse::size::format_exact;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

/// The OpenMetrics content type.
pub const OPENMETRICS_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The Prometheus text format content type.
pub const PROMETHEUS_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

type Labels = Vec<(String, String)>;
type Bytes = Family<Labels, Gauge>;
type Seconds = Gauge<f64, AtomicU64>;

/// What the exporter knows about the scrape itself.
#[derive(Debug, Clone, Copy)]
pub struct ScrapeInfo {
    /// How long reading the host took (the timeout, when it ran over).
    pub duration_seconds: f64,
    /// Scrapes that failed (ran over the timeout, or the reader panicked)
    /// since the exporter started.
    pub errors_total: u64,
}

fn gauge_value(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Labels, each value escaped as the text formats require (`\\`, `\"`,
/// `\n`): prometheus-client writes label values as they are, and a value
/// such as a cgroup's path is whatever its creator named it (a `"` and a
/// newline in it would end the sample and add lines of its own).
fn labels(pairs: &[(&str, String)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), label_value(v)))
        .collect()
}

/// A label value escaped for the Prometheus and OpenMetrics text formats.
fn label_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// The page size labels: in bytes, and as people write it (`2Mi`: the
/// exact binary size without its `B`); `unknown` for both when unknown.
fn page_labels(p: Option<u64>) -> [(&'static str, String); 2] {
    [
        (
            "page_size_bytes",
            p.map(|p| p.to_string())
                .unwrap_or_else(|| "unknown".to_string()),
        ),
        (
            "page_size",
            p.map(|p| format_exact(p).trim_end_matches('B').to_string())
                .unwrap_or_else(|| "unknown".to_string()),
        ),
    ]
}

/// `page_labels` of `p` followed by `rest`.
fn sized(p: Option<u64>, rest: &[(&str, String)]) -> Labels {
    let mut l = labels(&page_labels(p));
    l.extend(labels(rest));
    l
}

/// Registers the scrape's own metrics (and `hugeshm_up`).
fn scrape_metrics(reg: &mut Registry, info: ScrapeInfo, up: bool) {
    let d = Seconds::default();
    d.set(info.duration_seconds);
    reg.register(
        "hugeshm_scrape_duration_seconds",
        "Seconds this scrape spent reading the host (the timeout when it ran over)",
        d,
    );
    let e = Counter::<u64>::default();
    e.inc_by(info.errors_total);
    reg.register(
        "hugeshm_scrape_errors",
        "Scrapes that failed since the exporter started (ran over the scrape timeout, or the reader failed)",
        e,
    );
    let u = Gauge::<i64>::default();
    u.set(i64::from(up));
    reg.register(
        "hugeshm_up",
        "1 when this scrape read the host, 0 when it failed (then only the scrape metrics are served)",
        u,
    );
    let b = Family::<Labels, Gauge>::default();
    b.get_or_create(&labels(&[(
        "version",
        env!("CARGO_PKG_VERSION").to_string(),
    )]))
    .set(1);
    reg.register("hugeshm_build_info", "The hugeshm version, as a label", b);
}

/// A registry with only the scrape metrics: what a failed scrape serves.
pub fn failed(info: ScrapeInfo) -> Registry {
    let mut reg = Registry::default();
    scrape_metrics(&mut reg, info, false);
    reg
}

/// Every finding of both reports once (status repeats some segment findings).
fn all_findings<'a>(status: &'a StatusReport, segs: &'a SegmentsReport) -> Vec<&'a Finding> {
    let mut seen = std::collections::BTreeSet::new();
    status
        .findings
        .iter()
        .chain(segs.findings.iter())
        .chain(segs.segments.iter().flat_map(|s| s.findings.iter()))
        .filter(|f| seen.insert((f.code.clone(), f.message.clone())))
        .collect()
}

fn is_fallback(s: &Segment) -> bool {
    s.findings
        .iter()
        .any(|f| f.code == "silent-fallback" || f.code == "cgroup-fallback")
}

/// The metrics of one scrape.
pub fn registry(status: &StatusReport, segs: &SegmentsReport, info: ScrapeInfo) -> Registry {
    let mut reg = Registry::default();
    scrape_metrics(&mut reg, info, true);

    // Pools: host-wide, and per node under a name of their own.
    let pages = Family::<Labels, Gauge>::default();
    let node_pages = Family::<Labels, Gauge>::default();
    let unused = Bytes::default();
    for p in &status.pools {
        let size = Some(p.page_size_bytes);
        let mut states = vec![
            ("total", p.total),
            ("free", p.free),
            ("surplus", p.surplus),
            ("available", p.available),
        ];
        let Some(node) = p.node else {
            // Reservations are host-wide only.
            states.push(("reserved", p.reserved));
            unused
                .get_or_create(&sized(size, &[]))
                .set(gauge_value(p.available_bytes));
            for (state, v) in states {
                pages
                    .get_or_create(&sized(size, &[("state", state.to_string())]))
                    .set(gauge_value(v));
            }
            continue;
        };
        for (state, v) in states {
            node_pages
                .get_or_create(&sized(
                    size,
                    &[("node", node.to_string()), ("state", state.to_string())],
                ))
                .set(gauge_value(v));
        }
    }
    reg.register(
        "hugeshm_pool_pages",
        "Huge pages in the host's pool by page size and state (available = free - reserved); per node: hugeshm_pool_node_pages",
        pages,
    );
    reg.register(
        "hugeshm_pool_node_pages",
        "Huge pages in each NUMA node's pool by page size and state (available = free - reserved)",
        node_pages,
    );
    reg.register(
        "hugeshm_pool_unused_bytes",
        "Pool bytes neither in use nor reserved (available pages times page size): memory the OS cannot use",
        unused,
    );

    // Segments.
    let count = Family::<Labels, Gauge>::default();
    let size = Bytes::default();
    let resident = Bytes::default();
    let per_node = Bytes::default();
    let mut fallback = 0u64;
    let mut sums: BTreeMap<Labels, (u64, u64, u64)> = BTreeMap::new();
    let mut node_sums: BTreeMap<Labels, u64> = BTreeMap::new();
    let thp = Bytes::default();
    for s in &segs.segments {
        let kind = vec![("kind".to_string(), s.kind.to_string())];
        thp.get_or_create(&kind)
            .inc_by(gauge_value(s.thp_bytes.unwrap_or(0)));
        let l = sized(s.page_size_bytes, &[("kind", s.kind.to_string())]);
        for (n, b) in &s.nodes {
            let mut nl = l.clone();
            nl.push(("node".to_string(), label_value(n)));
            *node_sums.entry(nl).or_default() += b;
        }
        let e = sums.entry(l).or_default();
        e.0 += 1;
        e.1 += s.size_bytes;
        e.2 += s.resident_bytes.unwrap_or(0);
        if is_fallback(s) {
            fallback += s.size_bytes;
        }
    }
    for (l, (n, b, r)) in &sums {
        count.get_or_create(l).set(gauge_value(*n));
        size.get_or_create(l).set(gauge_value(*b));
        resident.get_or_create(l).set(gauge_value(*r));
    }
    for (l, b) in &node_sums {
        per_node.get_or_create(l).set(gauge_value(*b));
    }
    reg.register(
        "hugeshm_segments",
        "Shared memory segments and huge page mappings by kind and the page size really backing them",
        count,
    );
    reg.register(
        "hugeshm_segment_bytes",
        "Size of the segments by kind and page size",
        size,
    );
    reg.register(
        "hugeshm_segment_resident_bytes",
        "Resident bytes of the segments by kind and page size",
        resident,
    );
    reg.register(
        "hugeshm_segment_thp_bytes",
        "Bytes of the segments mapped as 2 MiB transparent huge pages (ShmemPmdMapped: collapsed in place, or THP shmem) by kind",
        thp,
    );
    reg.register(
        "hugeshm_segment_node_bytes",
        "Bytes of the segments on each NUMA node (numa_maps) by kind and page size",
        per_node,
    );
    // Placed by `hugeshm run`.
    let run_bytes = Bytes::default();
    for s in &segs.segments {
        if let Some(p) = &s.run {
            let l = sized(
                Some(p.record.verified_page_size_bytes),
                &[
                    ("kind", s.kind.to_string()),
                    ("fell_back", p.record.fallback.is_some().to_string()),
                ],
            );
            run_bytes
                .get_or_create(&l)
                .inc_by(gauge_value(s.size_bytes));
        }
    }
    reg.register(
        "hugeshm_run_placed_bytes",
        "Bytes of segments placed by hugeshm run (their records checked), by kind, page size and fall-back",
        run_bytes,
    );
    let ignored = Gauge::<i64>::default();
    ignored.set(gauge_value(segs.run_records_ignored.len() as u64));
    reg.register(
        "hugeshm_run_records_ignored",
        "hugeshm run records in /dev/shm that do not match their process (finding run-record-ignored)",
        ignored,
    );
    let fb = Gauge::<i64>::default();
    fb.set(gauge_value(fallback));
    reg.register(
        "hugeshm_silent_fallback_bytes",
        "Bytes of segments that sit on 4 KiB pages where huge pages were meant (findings silent-fallback, cgroup-fallback)",
        fb,
    );

    // Memory.
    let host_gauges = [
        (
            "hugeshm_page_tables_bytes",
            "Page table memory of the host (/proc/meminfo PageTables)",
            status.page_tables_bytes,
        ),
        (
            "hugeshm_hugetlb_bytes",
            "Memory in huge page pools, all sizes (/proc/meminfo Hugetlb)",
            status.hugetlb_bytes,
        ),
        (
            "hugeshm_memory_total_bytes",
            "Memory of the host (/proc/meminfo MemTotal)",
            status.mem_total_bytes,
        ),
    ];
    for (name, help, v) in host_gauges {
        if let Some(v) = v {
            let g = Gauge::<i64>::default();
            g.set(gauge_value(v));
            reg.register(name, help, g);
        }
    }

    // The hugetlb cgroup (hugeshm's own, or --pid's).
    if let Some(cg) = &status.cgroup {
        let limit = Bytes::default();
        let usage = Bytes::default();
        let rsvd = Bytes::default();
        let effective = Bytes::default();
        let events = Family::<Labels, Counter>::default();
        for s in &cg.sizes {
            let l = sized(Some(s.page_size_bytes), &[("cgroup", cg.path.clone())]);
            if let Some(v) = s.limit_bytes {
                limit.get_or_create(&l).set(gauge_value(v));
            }
            if let Some(v) = s.effective_limit_bytes {
                effective.get_or_create(&l).set(gauge_value(v));
            }
            usage.get_or_create(&l).set(gauge_value(s.usage_bytes));
            if let Some(v) = s.rsvd_usage_bytes {
                rsvd.get_or_create(&l).set(gauge_value(v));
            }
            if let Some(v) = s.max_events {
                events.get_or_create(&l).inc_by(v);
            }
        }
        reg.register(
            "hugeshm_cgroup_hugetlb_limit_bytes",
            "The cgroup's own hugetlb limit on faulted pages (absent: no limit)",
            limit,
        );
        reg.register(
            "hugeshm_cgroup_hugetlb_effective_limit_bytes",
            "The smallest hugetlb limit of the cgroup and its ancestors (absent: no limit)",
            effective,
        );
        reg.register(
            "hugeshm_cgroup_hugetlb_usage_bytes",
            "Faulted huge page bytes charged to the cgroup",
            usage,
        );
        reg.register(
            "hugeshm_cgroup_hugetlb_reserved_bytes",
            "Huge page reservations charged to the cgroup (kernel 5.7 and later)",
            rsvd,
        );
        reg.register(
            "hugeshm_cgroup_hugetlb_max_events",
            "Huge page charges the cgroup refused at a limit (v2 events max, v1 failcnt)",
            events,
        );
    }

    // The kubelet's kubepods cgroup against the pools.
    if let Some(k) = &status.kubelet {
        let alloc = Family::<Labels, Gauge>::default();
        let outside = Family::<Labels, Gauge>::default();
        for s in &k.sizes {
            let l = sized(Some(s.page_size_bytes), &[("cgroup", k.path.clone())]);
            if let Some(n) = s.allocatable_pages {
                alloc.get_or_create(&l).set(gauge_value(n));
            }
            outside.get_or_create(&l).set(gauge_value(s.outside_pages));
        }
        reg.register(
            "hugeshm_kubelet_allocatable_pages",
            "Huge pages the kubelet limited kubepods to when it started: the node's allocatable (finding kubelet-capacity-stale when it differs from hugeshm_pool_pages total)",
            alloc,
        );
        reg.register(
            "hugeshm_kubelet_outside_pages",
            "Pool pages taken by processes outside kubepods (host daemons); finding kubelet-capacity-held when the allocatable still counts them",
            outside,
        );
    }

    // Findings: every code the doctor knows, 0 where not found.
    let findings = Family::<Labels, Gauge>::default();
    let mut by: BTreeMap<Labels, i64> = BTreeMap::new();
    for (code, severities) in CODES {
        for s in *severities {
            by.insert(
                labels(&[
                    ("code", (*code).to_string()),
                    ("severity", s.as_str().to_string()),
                ]),
                0,
            );
        }
    }
    for f in all_findings(status, segs) {
        *by.entry(labels(&[
            ("code", f.code.clone()),
            ("severity", f.severity.as_str().to_string()),
        ]))
        .or_default() += 1;
    }
    for (l, n) in &by {
        findings.get_or_create(l).set(*n);
    }
    reg.register(
        "hugeshm_finding",
        "Findings of status and segments by code and severity (docs/findings.md); 0 for each code not found",
        findings,
    );
    let problems = Gauge::<i64>::default();
    problems.set(gauge_value(
        (status.problems.len() + segs.problems.len() + segs.unreadable.len()) as u64,
    ));
    reg.register(
        "hugeshm_read_problems",
        "Host files and processes this scrape could not read",
        problems,
    );
    reg
}

/// The registry as OpenMetrics text (ends with `# EOF`), each metric's
/// samples sorted (the registry keeps them in hash order).
pub fn openmetrics(reg: &Registry) -> String {
    let mut s = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut s, reg);
    let mut out = String::with_capacity(s.len());
    let mut run: Vec<&str> = Vec::new();
    for line in s.lines() {
        if line.starts_with('#') {
            run.sort_unstable();
            for l in run.drain(..) {
                out.push_str(l);
                out.push('\n');
            }
            out.push_str(line);
            out.push('\n');
        } else {
            run.push(line);
        }
    }
    run.sort_unstable();
    for l in run {
        out.push_str(l);
        out.push('\n');
    }
    out
}

/// The registry in the Prometheus text format 0.0.4: OpenMetrics without
/// `# EOF` and `# UNIT`, and a counter's `# HELP`/`# TYPE` named like its
/// sample (`_total`).
pub fn prometheus_text(reg: &Registry) -> String {
    let om = openmetrics(reg);
    let counters: Vec<String> = om
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .map(str::to_string)
        .collect();
    let mut out = String::with_capacity(om.len());
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let mut done = false;
        for kw in ["# HELP ", "# TYPE "] {
            if let Some(rest) = line.strip_prefix(kw) {
                let name = rest.split(' ').next().unwrap_or_default();
                if counters.iter().any(|c| c == name) {
                    out.push_str(&format!("{kw}{name}_total{}\n", &rest[name.len()..]));
                    done = true;
                }
            }
        }
        if !done {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Whether an `Accept` header asks for OpenMetrics.
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',').any(|part| {
            let mut it = part.split(';');
            let ty = it.next().unwrap_or_default().trim();
            let q_zero = it.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f64>().ok())
                    == Some(0.0)
            });
            ty.eq_ignore_ascii_case("application/openmetrics-text") && !q_zero
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A label value with a quote, a backslash and a newline stays one
    /// sample on one line, escaped.
    #[test]
    fn label_values_are_escaped() {
        let mut reg = Registry::default();
        let f = Family::<Labels, Gauge>::default();
        f.get_or_create(&labels(&[(
            "cgroup",
            "/x\"} 1\nhugeshm_up 0\n# \\".to_string(),
        )]))
        .set(7);
        reg.register("hugeshm_t", "test", f);
        let text = prometheus_text(&reg);
        let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples,
            [r#"hugeshm_t{cgroup="/x\"} 1\nhugeshm_up 0\n# \\"} 7"#],
            "{text}"
        );
    }

    #[test]
    fn accept_header_negotiation() {
        assert!(!wants_openmetrics(None));
        assert!(!wants_openmetrics(Some("text/plain")));
        assert!(wants_openmetrics(Some(
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        )));
        assert!(!wants_openmetrics(Some(
            "application/openmetrics-text;q=0,text/plain"
        )));
    }

    #[test]
    fn failed_scrape_in_both_formats() {
        let reg = failed(ScrapeInfo {
            duration_seconds: 5.0,
            errors_total: 3,
        });
        let om = openmetrics(&reg);
        assert!(om.ends_with("# EOF\n"), "{om}");
        assert!(
            om.contains("# TYPE hugeshm_scrape_errors counter\n"),
            "{om}"
        );
        assert!(om.contains("hugeshm_scrape_errors_total 3\n"), "{om}");
        assert!(om.contains("hugeshm_up 0\n"), "{om}");
        let text = prometheus_text(&reg);
        assert!(!text.contains("# EOF"), "{text}");
        assert!(
            text.contains("# TYPE hugeshm_scrape_errors_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("# HELP hugeshm_scrape_errors_total "),
            "{text}"
        );
        assert!(
            text.contains("hugeshm_scrape_duration_seconds 5.0\n"),
            "{text}"
        );
    }
}
