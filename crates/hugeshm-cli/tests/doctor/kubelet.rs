//! The Kubernetes node's view of its huge pages, on this host's real cgroup
//! v2 hierarchy: the test makes the kubelet's `kubepods.slice` (systemd
//! driver) or `kubepods` (cgroupfs) at the root of the hugetlb hierarchy,
//! with `hugetlb.<size>.max` set as a kubelet sets it when it starts (every
//! pool's pages), then changes the pool under the test kit's lock:
//! * as the kubelet counted it: no `kubelet-*` finding;
//! * the pool grown by 4 pages: `kubelet-capacity-stale` with both numbers
//!   (and gone once the limit follows, as after a kubelet restart);
//! * 4 pages faulted by a process outside kubepods: `outside_pages` grows
//!   by 4 and `kubelet-capacity-held` says so;
//! * 4 pages faulted by a process inside kubepods: `pods_pages` 4, nothing
//!   more outside.
//!
//! The cgroup (and the processes in it) is removed on drop, the pool
//! restored by the guard, also when an assertion fails. cgroup v1 is
//! covered by the `kubelet-v1` fixture tree (`fixtures::kubelet_capacity_on_a_v1_node`).

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use hugeshm_testkit::{live, TestCgroup, TestProc};
use serde_json::Value;

const M2: u64 = 2 << 20;

fn status() -> Value {
    common::json(common::hugeshm(&["status", "--json"]))
}

/// The kubelet section's 2 MiB entry.
fn size_2m(st: &Value) -> Value {
    st["kubelet"]["sizes"]
        .as_array()
        .unwrap_or_else(|| panic!("no kubelet section: {:#}", st["kubelet"]))
        .iter()
        .find(|s| s["page_size_bytes"] == M2)
        .unwrap_or_else(|| panic!("no 2 MiB entry: {:#}", st["kubelet"]))
        .clone()
}

fn n(s: &Value, key: &str) -> u64 {
    s[key].as_u64().unwrap_or_else(|| panic!("{key} in {s:#}"))
}

/// The kubelet findings of the 2 MiB pool.
fn kubelet_findings(st: &Value) -> Vec<(String, String)> {
    st["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["code"].as_str().unwrap().starts_with("kubelet-"))
        .filter(|f| f["message"].as_str().unwrap().contains(" 2 MiB pages"))
        .map(|f| {
            (
                f["code"].as_str().unwrap().to_owned(),
                f["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn set_nr_2m(pages: u64) {
    let path = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";
    std::fs::write(path, format!("{pages}\n")).expect("write nr_hugepages");
    assert_eq!(
        common::nr_2m(),
        pages,
        "the kernel did not grant {pages} pages"
    );
}

/// Every pool's pages as the kubelet limits kubepods to them.
fn kubelet_limits() -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/sys/kernel/mm/hugepages").unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        let kb: u64 = name
            .trim_start_matches("hugepages-")
            .trim_end_matches("kB")
            .parse()
            .unwrap();
        let nr: u64 = std::fs::read_to_string(e.path().join("nr_hugepages"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        out.push((kb << 10, nr * (kb << 10)));
    }
    out
}

fn the_kubelet_view(pool: &hugeshm_testkit::Live, dir: &str, driver: &str) {
    pool.ensure_free(M2, 8).expect("8 free 2 MiB pages");
    let total = common::nr_2m();
    let Some(kp) = TestCgroup::kubepods(pool.name(), dir, &kubelet_limits()) else {
        return;
    };

    // As the kubelet counted it.
    let st = status();
    assert_eq!(st["kubelet"]["driver"], driver, "{:#}", st["kubelet"]);
    assert_eq!(st["kubelet"]["path"], format!("/{dir}"));
    assert_eq!(st["kubelet"]["version"], 2);
    let s = size_2m(&st);
    assert_eq!(
        (n(&s, "allocatable_pages"), n(&s, "pool_pages")),
        (total, total)
    );
    assert!(
        !kubelet_findings(&st)
            .iter()
            .any(|(c, _)| c == "kubelet-capacity-stale"),
        "{:#}",
        st["findings"]
    );

    // The pool grows after the kubelet started.
    set_nr_2m(total + 4);
    let st = status();
    let f = kubelet_findings(&st);
    let stale = f
        .iter()
        .find(|(c, _)| c == "kubelet-capacity-stale")
        .unwrap_or_else(|| panic!("no kubelet-capacity-stale: {f:#?}"));
    println!("{}", stale.1);
    assert!(
        stale.1.contains(&format!(
            "the kubelet ({driver} driver) advertises {total} 2 MiB pages"
        )) && stale
            .1
            .contains(&format!("the pool holds {}: it grew", total + 4)),
        "{}",
        stale.1
    );
    // The kubelet restarted: it counts the pool again.
    kp.set_limit(M2, (total + 4) * M2);
    let st = status();
    let before = n(&size_2m(&st), "outside_pages");
    if before == 0 {
        assert!(kubelet_findings(&st).is_empty(), "{:#}", st["findings"]);
    }

    // A host daemon faults 4 pages outside kubepods.
    let daemon = TestProc::spawn(["anon-shared-huge:8M", "--touch"]).expect("spawn testproc");
    let st = status();
    let s = size_2m(&st);
    assert_eq!(n(&s, "outside_pages"), before + 4, "{s:#}");
    assert_eq!(n(&s, "pods_pages"), 0, "{s:#}");
    let f = kubelet_findings(&st);
    let held = f
        .iter()
        .find(|(c, _)| c == "kubelet-capacity-held")
        .unwrap_or_else(|| panic!("no kubelet-capacity-held: {f:#?}"));
    println!("{}", held.1);
    assert!(
        held.1.starts_with(&format!(
            "{} 2 MiB pages of the pool are held by processes outside /{dir}",
            before + 4
        )) && held
            .1
            .contains(&format!("it allows pods {} pages", total + 4)),
        "{}",
        held.1
    );
    daemon.finish().expect("testproc exits");

    // A pod faults 4 pages inside kubepods: charged to it, not outside.
    let testproc = hugeshm_testkit::testproc_built().expect("hugeshm-testproc");
    let mut pod = kp
        .command(&testproc, &["anon-shared-huge:8M", "--touch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn testproc in kubepods");
    let mut line = String::new();
    BufReader::new(pod.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("\"objects\""), "testproc said {line:?}");
    let s = size_2m(&status());
    assert_eq!(
        (n(&s, "pods_pages"), n(&s, "outside_pages")),
        (4, before),
        "{s:#}"
    );
    drop(pod.stdin.take());
    assert!(pod.wait().unwrap().success());
}

#[test]
fn kubelet_capacity_with_the_systemd_driver() {
    let Some(pool) = live!() else { return };
    the_kubelet_view(&pool, "kubepods.slice", "systemd");
    pool.finish();
}

#[test]
fn kubelet_capacity_with_the_cgroupfs_driver() {
    let Some(pool) = live!() else { return };
    the_kubelet_view(&pool, "kubepods", "cgroupfs");
    pool.finish();
}

/// The items of the YAML list under `key:` (the first such key), as
/// written: `- item` lines indented below it, quotes removed.
fn yaml_list(text: &str, key: &str) -> Vec<String> {
    let mut lines = text.lines().skip_while(|l| l.trim() != key);
    let Some(head) = lines.next() else {
        return Vec::new();
    };
    let indent = head.len() - head.trim_start().len();
    lines
        .take_while(|l| {
            l.trim().is_empty()
                || l.len() - l.trim_start().len() > indent
                || l.trim_start().starts_with("- ")
        })
        .filter_map(|l| l.trim_start().strip_prefix("- "))
        .map(|item| item.trim().trim_matches('"').to_owned())
        .collect()
}

/// The value of the first `key: value` line (quotes removed).
fn yaml_value<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.trim().trim_start_matches("- ").strip_prefix(key))
        .map(|v| v.trim().trim_matches('"'))
        .unwrap_or_else(|| panic!("no {key} in the manifest"))
}

/// contrib/kubernetes/hugeshm-exporter.yaml, the exporter as a DaemonSet:
/// its command line is one the binary takes (each flag in `exporter
/// --help`, and the arguments run as they are with `--once`), its root
/// variables are the ones the binary reads, the host's /proc and /sys go in
/// read-only, hostPID, and Prometheus scrapes the port it listens on.
#[test]
fn the_daemonset_runs_the_exporter_as_the_binary_takes_it() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../contrib/kubernetes/hugeshm-exporter.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    assert_eq!(yaml_list(&text, "command:"), ["/usr/bin/hugeshm"]);
    let args = yaml_list(&text, "args:");
    assert_eq!(
        args.first().map(String::as_str),
        Some("exporter"),
        "{args:?}"
    );
    let help = String::from_utf8(common::hugeshm(&["exporter", "--help"]).stdout).unwrap();
    for flag in args.iter().filter(|a| a.starts_with("--")) {
        assert!(
            help.contains(&format!("      {flag} ")),
            "{flag} is not an option of hugeshm exporter:\n{help}"
        );
    }
    // The roots: the probe's variables, each a host path mounted read-only.
    let env = yaml_list(&text, "env:");
    let mut roots = Vec::new();
    for (var, host) in [
        (hugeshm_probe::PROC_ROOT_ENV, "/proc"),
        (hugeshm_probe::SYS_ROOT_ENV, "/sys"),
        (hugeshm_probe::FS_ROOT_ENV, "/"),
    ] {
        assert!(
            env.contains(&format!("name: {var}")),
            "{var} not set: {env:?}"
        );
        let at = text
            .split(&format!("name: {var}\n"))
            .nth(1)
            .map(|rest| yaml_value(rest, "value:").to_owned())
            .unwrap();
        let mount = text
            .split(&format!("mountPath: {at}\n"))
            .nth(1)
            .unwrap_or_else(|| panic!("{at} is not mounted"));
        assert_eq!(yaml_value(mount, "readOnly:"), "true", "{at}");
        roots.push((var, host));
    }
    for host in ["/proc", "/sys", "/"] {
        assert!(
            text.contains(&format!("path: {host}\n")),
            "no hostPath {host}"
        );
    }
    assert_eq!(yaml_value(&text, "hostPID:"), "true");
    // Scraped where it listens.
    let listen = &args[args.iter().position(|a| a == "--listen").unwrap() + 1];
    let port = listen.rsplit(':').next().unwrap();
    assert_eq!(yaml_value(&text, "prometheus.io/scrape:"), "true");
    assert_eq!(yaml_value(&text, "prometheus.io/port:"), port);
    assert_eq!(yaml_value(&text, "containerPort:"), port);
    assert_eq!(yaml_value(&text, "prometheus.io/path:"), "/metrics");
    // The arguments as they are, once, with the roots at this host's.
    let argv: Vec<&str> = args.iter().map(String::as_str).chain(["--once"]).collect();
    let mut cmd = common::cmd(&argv);
    for (var, host) in roots {
        cmd.env(var, host);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("\nhugeshm_up 1\n"));
}
