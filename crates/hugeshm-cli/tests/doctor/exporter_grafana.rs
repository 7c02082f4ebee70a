//! The exporter as Grafana and Prometheus users query it, on the fixture
//! trees, its scrape parsed: `sum()` of a pool metric counts each page once
//! (the host-wide figure is its own metric, as node_exporter has it, no
//! `node="all"` beside the nodes); every page size carries a human label
//! (`page_size="2Mi"`) beside the bytes; and every finding code the doctor
//! knows has a sample, 0 when it is not found, so that an alert resolves and
//! a graph drops when a finding clears. The manual's table of metrics
//! (docs/fleet.md) gives each metric the labels a scrape gives it.

use crate::common;

use hugeshm_doctor::finding::CODES;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// One sample: the metric's name and its labels.
type Key = (String, BTreeMap<String, String>);

/// The samples of a scrape in the Prometheus text format (label values
/// here have no `,`, `"` or `}` inside them).
fn parse(text: &str) -> BTreeMap<Key, f64> {
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line.rsplit_once(' ').expect("a value");
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.strip_suffix('}').expect("closed labels")),
            None => (series, ""),
        };
        let labels = labels
            .split(',')
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (k, v) = l.split_once('=').expect("k=v");
                (k.to_owned(), v.trim_matches('"').to_owned())
            })
            .collect();
        let key = (name.to_owned(), labels);
        assert!(!out.contains_key(&key), "a sample twice: {line}");
        out.insert(key, value.parse().expect("a number"));
    }
    out
}

/// `exporter --once` on a fixture tree, parsed.
fn scrape(fixture: &str) -> BTreeMap<Key, f64> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(fixture);
    let out = common::cmd(&[])
        .arg("--proc-root")
        .arg(dir.join("proc"))
        .arg("--sys-root")
        .arg(dir.join("sys"))
        .arg("--fs-root")
        .arg(dir.join("fs"))
        .args(["exporter", "--once"])
        .output()
        .expect("run hugeshm");
    assert!(out.status.success(), "{out:?}");
    parse(&String::from_utf8(out.stdout).expect("UTF-8"))
}

/// The samples of metric `name`.
fn samples<'a>(
    m: &'a BTreeMap<Key, f64>,
    name: &'a str,
) -> impl Iterator<Item = (&'a BTreeMap<String, String>, f64)> + 'a {
    m.iter()
        .filter(move |((n, _), _)| n == name)
        .map(|((_, l), v)| (l, *v))
}

#[test]
fn a_sum_over_the_pools_counts_each_page_once() {
    let m = scrape("two-nodes-uneven");
    assert!(
        m.keys()
            .all(|(_, l)| l.get("node").is_none_or(|n| n != "all")),
        "a node=\"all\" beside the nodes: {m:#?}"
    );
    // The host-wide metric has no node label; the nodes' add up to it.
    let mut host: BTreeMap<String, f64> = BTreeMap::new();
    for (l, v) in samples(&m, "hugeshm_pool_pages") {
        assert!(!l.contains_key("node"), "{l:?}");
        if l["state"] == "total" {
            host.insert(l["page_size"].clone(), v);
        }
    }
    let mut nodes: BTreeMap<String, f64> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for (l, v) in samples(&m, "hugeshm_pool_node_pages") {
        seen.insert(l["node"].clone());
        if l["state"] == "total" {
            *nodes.entry(l["page_size"].clone()).or_default() += v;
        }
    }
    assert_eq!(seen.len(), 2, "both nodes: {seen:?}");
    // The fixture: 1,024 pages of 2 MiB (900 and 124), 2 of 1 GiB (on node 1).
    assert_eq!(
        host,
        BTreeMap::from([("1Gi".to_owned(), 2.0), ("2Mi".to_owned(), 1024.0)])
    );
    assert_eq!(nodes, host, "sum by (page_size) over the nodes");
}

#[test]
fn every_page_size_has_a_human_label_beside_its_bytes() {
    let mut sized = 0;
    for fixture in ["two-nodes-uneven", "cgroup-v2", "host-capture"] {
        for ((name, l), _) in scrape(fixture) {
            let Some(bytes) = l.get("page_size_bytes") else {
                assert!(!l.contains_key("page_size"), "{name} {l:?}");
                continue;
            };
            let human = match bytes.as_str() {
                "4096" => "4Ki",
                "65536" => "64Ki",
                "2097152" => "2Mi",
                "33554432" => "32Mi",
                "1073741824" => "1Gi",
                "unknown" => "unknown",
                other => panic!("{name}: a page size of {other} bytes: {l:?}"),
            };
            assert_eq!(
                l.get("page_size").map(String::as_str),
                Some(human),
                "{name} {l:?}"
            );
            sized += 1;
        }
    }
    assert!(sized > 20, "{sized} samples with a page size");
}

#[test]
fn a_finding_that_clears_is_a_zero_not_a_missing_series() {
    let found = scrape("host-capture");
    let clean = scrape("clean");
    let key = |code: &str, sev: &str| {
        (
            "hugeshm_finding".to_owned(),
            BTreeMap::from([
                ("code".to_owned(), code.to_owned()),
                ("severity".to_owned(), sev.to_owned()),
            ]),
        )
    };
    // pool-short is found on one host; on the clean one the same series is 0.
    assert_eq!(found.get(&key("pool-short", "warning")), Some(&1.0));
    assert_eq!(clean.get(&key("pool-short", "warning")), Some(&0.0));
    // Every code the doctor knows, at each severity it reports it at.
    for (code, severities) in CODES {
        for s in *severities {
            assert_eq!(
                clean.get(&key(code, s.as_str())),
                Some(&0.0),
                "{code} {}",
                s.as_str()
            );
            assert!(found.contains_key(&key(code, s.as_str())), "{code}");
        }
    }
    // The clean host finds nothing: its samples are exactly those zeros.
    let findings: Vec<_> = samples(&clean, "hugeshm_finding").collect();
    assert_eq!(
        findings.len(),
        CODES.iter().map(|(_, s)| s.len()).sum::<usize>(),
        "{findings:?}"
    );
}

#[test]
fn the_dashboard_queries_the_host_wide_and_per_node_metrics_apart() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(repo.join("contrib/grafana/hugeshm.json")).unwrap();
    let d: serde_json::Value = serde_json::from_str(&text).unwrap();
    let targets: Vec<&serde_json::Value> = d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .collect();
    let exprs: Vec<&str> = targets.iter().filter_map(|t| t["expr"].as_str()).collect();
    assert!(
        exprs.iter().all(|e| !e.contains("\"all\"")),
        "a query selects node=\"all\": {exprs:#?}"
    );
    assert!(exprs
        .iter()
        .any(|e| e.starts_with("hugeshm_pool_node_pages{")));
    // Legends name page sizes as people write them.
    for t in &targets {
        let legend = t["legendFormat"].as_str().unwrap_or_default();
        assert!(!legend.contains("page_size_bytes"), "{legend}");
    }
}

/// The words in backquotes in `cell`, `a_{b,c}_d` as `a_b_d` and `a_c_d`.
fn quoted(cell: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in cell.split('`').skip(1).step_by(2) {
        match (word.find('{'), word.find('}')) {
            (Some(a), Some(b)) if a < b => {
                for part in word[a + 1..b].split(',') {
                    out.push(format!("{}{part}{}", &word[..a], &word[b + 1..]));
                }
            }
            _ => out.push(word.to_owned()),
        }
    }
    out
}

#[test]
fn the_manual_lists_each_metric_with_the_labels_a_scrape_has() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let manual = std::fs::read_to_string(repo.join("docs/fleet.md")).unwrap();
    // `| `name`, `name` | `label`, `label` | what |`
    let mut documented: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for row in manual.lines().filter(|l| l.starts_with("| `hugeshm_")) {
        let cells: Vec<&str> = row.split('|').collect();
        let labels: BTreeSet<String> = quoted(cells[2]).into_iter().collect();
        for name in quoted(cells[1]) {
            assert!(
                documented.insert(name.clone(), labels.clone()).is_none(),
                "{name} twice"
            );
        }
    }
    assert!(documented.len() > 20, "{documented:?}");
    // Each metric a scrape has, with its labels.
    let mut emitted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for fixture in ["two-nodes-uneven", "cgroup-v2", "host-capture", "clean"] {
        for ((name, l), _) in scrape(fixture) {
            let keys: BTreeSet<String> = l.into_keys().collect();
            let seen = emitted.entry(name.clone()).or_insert_with(|| keys.clone());
            assert_eq!(*seen, keys, "{name}: two label sets");
        }
    }
    for (name, labels) in &emitted {
        assert_eq!(
            documented.get(name),
            Some(labels),
            "docs/fleet.md on {name}"
        );
    }
    // What no fixture has (a run record's) is a metric the printer makes.
    let printer =
        std::fs::read_to_string(repo.join("crates/hugeshm-doctor/src/metrics.rs")).unwrap();
    for name in documented.keys().filter(|n| !emitted.contains_key(*n)) {
        let registered = name.strip_suffix("_total").unwrap_or(name);
        assert!(
            printer.contains(&format!("\"{registered}\"")),
            "docs/fleet.md lists {name}, which the exporter does not make"
        );
    }
}
