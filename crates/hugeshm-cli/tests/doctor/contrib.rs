//! What `contrib/` ships, tested with the real tools: the alert rules with
//! `promtool check rules` and `promtool test rules`; the rules' and the
//! Grafana dashboard's metric names against what a real `hugeshm exporter`
//! run emits (and the dashboard's PromQL parsed by promtool); the systemd
//! units with `systemd-analyze verify` (pointed at the built binary and the
//! generated man pages); the exporter unit's capabilities, applied with
//! setpriv to an unprivileged user, against what it can then read; its
//! SystemCallFilter= against the calls strace sees the exporter make; and
//! the apply unit's command run on a plan file.
//!
//! A tool that is absent skips its test (`hugeshm_testkit::skip`: a
//! failure in CI, which installs prometheus; systemd and util-linux are on
//! every host here).

use crate::common;

use hugeshm_testkit::{live, skip, skip_part, skip_unless_root, test_name, TempDir};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn contrib(rel: &str) -> PathBuf {
    repo().join("contrib").join(rel)
}

fn on_path(bin: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
        .unwrap_or(false)
}

/// Whether `bin` is missing (after a skip of `test`).
fn skip_without(bin: &str, test: &str) -> bool {
    if on_path(bin) {
        return false;
    }
    skip(test, format_args!("no {bin} on PATH"));
    true
}

fn check(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Words `hugeshm_...` in a text: the metric names it uses.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let b = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("hugeshm_") {
        let start = i + at;
        let boundary =
            start == 0 || !(b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_');
        let mut end = start;
        while end < b.len()
            && (b[end].is_ascii_lowercase() || b[end].is_ascii_digit() || b[end] == b'_')
        {
            end += 1;
        }
        if boundary {
            names.insert(text[start..end].to_string());
        }
        i = end;
    }
    names
}

/// The metric names a real exporter emits: the `# TYPE` lines (a counter
/// with its `_total`) of one scrape of this host and one of the cgroup v2
/// fixture tree (for the cgroup metrics a host in the root cgroup lacks).
fn emitted_names() -> BTreeSet<String> {
    let fixture = repo().join("crates/hugeshm-cli/tests/fixtures/cgroup-v2");
    let mut names = BTreeSet::new();
    let runs = [
        common::hugeshm(&["exporter", "--once"]),
        common::cmd(&[])
            .arg("--proc-root")
            .arg(fixture.join("proc"))
            .arg("--sys-root")
            .arg(fixture.join("sys"))
            .arg("--fs-root")
            .arg(fixture.join("fs"))
            .args(["exporter", "--once"])
            .output()
            .unwrap(),
    ];
    for out in runs {
        check(&out, "hugeshm exporter --once");
        let text = String::from_utf8(out.stdout).unwrap();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                names.insert(rest.split(' ').next().unwrap().to_string());
            }
        }
    }
    assert!(
        names.contains("hugeshm_cgroup_hugetlb_max_events_total"),
        "{names:?}"
    );
    names
}

#[test]
fn alert_rules_pass_promtool_check_and_unit_tests() {
    let test = test_name!();
    if skip_without("promtool", test) {
        return;
    }
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(contrib("prometheus/hugeshm.rules.yml"))
        .output()
        .unwrap();
    check(&out, "promtool check rules");
    let out = Command::new("promtool")
        .args(["test", "rules", "hugeshm.rules.test.yml"])
        .current_dir(contrib("prometheus"))
        .output()
        .unwrap();
    check(&out, "promtool test rules");
    assert!(String::from_utf8_lossy(&out.stdout).contains("SUCCESS"));
}

#[test]
fn alert_rules_cover_the_issue_and_use_emitted_metrics_and_real_finding_codes() {
    let rules = std::fs::read_to_string(contrib("prometheus/hugeshm.rules.yml")).unwrap();
    for alert in [
        "HugeshmSilentFallback",
        "HugeshmPoolShort",
        "HugeshmPoolWasted",
        "HugeshmCgroupHugetlbRefused",
        "HugeshmSegmentOnOneNode",
    ] {
        assert!(rules.contains(&format!("alert: {alert}\n")), "no {alert}");
        let tests = std::fs::read_to_string(contrib("prometheus/hugeshm.rules.test.yml")).unwrap();
        assert!(
            tests.contains(&format!("alertname: {alert}\n")),
            "{alert} has no promtool test"
        );
    }
    let used = metric_names(&rules);
    assert!(used.len() >= 6, "{used:?}");
    let emitted = emitted_names();
    let unknown: Vec<_> = used.difference(&emitted).collect();
    assert!(
        unknown.is_empty(),
        "the rules use metrics the exporter does not emit: {unknown:?}; it emits {emitted:?}"
    );

    // Finding codes the rules select are codes the doctor really reports.
    // Every source file of the doctor, its module folders included.
    let mut doctor = String::new();
    let mut dirs = vec![repo().join("crates/hugeshm-doctor/src")];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                doctor.push_str(&std::fs::read_to_string(p).unwrap());
            }
        }
    }
    let mut codes = 0;
    for part in rules.split("code=\"").skip(1) {
        let code = part.split('"').next().unwrap();
        assert!(
            doctor.contains(&format!("\"{code}\"")),
            "the rules select finding code {code:?}, which hugeshm-doctor never reports"
        );
        codes += 1;
    }
    assert!(codes >= 2);
}

/// Every PromQL expression of the dashboard (targets and variable queries).
fn dashboard_exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr" | "definition", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => dashboard_exprs(x, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| dashboard_exprs(x, out)),
        _ => {}
    }
}

#[test]
fn grafana_dashboard_is_valid_and_uses_emitted_metrics() {
    let text = std::fs::read_to_string(contrib("grafana/hugeshm.json")).unwrap();
    let d: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    assert_eq!(d["uid"], "hugeshm");
    assert!(d["title"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(d["schemaVersion"].as_u64().is_some_and(|v| v >= 30));
    let vars: Vec<&str> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    let panels = d["panels"].as_array().unwrap();
    assert!(panels.len() >= 10);
    let mut ids = BTreeSet::new();
    for p in panels {
        let title = p["title"].as_str().unwrap();
        assert!(
            ids.insert(p["id"].as_u64().unwrap()),
            "panel id twice: {title}"
        );
        let g = &p["gridPos"];
        let (x, w) = (g["x"].as_u64().unwrap(), g["w"].as_u64().unwrap());
        assert!(
            x + w <= 24 && g["h"].as_u64().unwrap() > 0,
            "{title}: gridPos {g}"
        );
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title} has no query");
        for t in targets {
            let e = t["expr"].as_str().unwrap();
            assert!(
                e.contains("$instance"),
                "{title}: {e} ignores the host selector"
            );
        }
    }
    let mut exprs = Vec::new();
    dashboard_exprs(&d, &mut exprs);
    let mut used = BTreeSet::new();
    for e in &exprs {
        used.extend(metric_names(e));
        // Every $variable is one the dashboard defines (or Grafana's own).
        for var in e.split('$').skip(1) {
            let name: String = var
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(
                name.starts_with("__") || vars.contains(&name.as_str()),
                "{e}: ${name} is not a dashboard variable ({vars:?})"
            );
        }
    }
    let emitted = emitted_names();
    let unknown: Vec<_> = used.difference(&emitted).collect();
    assert!(
        unknown.is_empty(),
        "the dashboard uses metrics the exporter does not emit: {unknown:?}"
    );
    // It shows every metric the exporter has (a new one needs a panel).
    let unshown: Vec<_> = emitted.difference(&used).collect();
    assert!(unshown.is_empty(), "no panel shows {unshown:?}");

    // The PromQL parses: promtool checks each one as a recording rule, with
    // Grafana's variables as they expand.
    if skip_without("promtool", &format!("{} [PromQL]", test_name!())) {
        return;
    }
    let dir = TempDir::new("contrib-dashboard");
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in exprs
        .iter()
        .filter(|e| !e.starts_with("label_values("))
        .enumerate()
    {
        let e = e
            .replace("$instance", ".+")
            .replace("$__rate_interval", "5m");
        rules.push_str(&format!(
            "      - record: dashboard:expr{i}\n        expr: {}\n",
            serde_json::to_string(&e).unwrap()
        ));
    }
    let file = dir.path().join("dashboard.rules.yml");
    std::fs::write(&file, &rules).unwrap();
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .unwrap();
    check(
        &out,
        &format!("promtool check rules on the dashboard's PromQL:\n{rules}"),
    );
}

/// A copy of `contrib/systemd/NAME` with /usr/bin/hugeshm replaced by the
/// built binary and `/etc/hugeshm/plan.toml` by `plan`.
fn unit_copy(dir: &Path, name: &str, plan: &Path) -> PathBuf {
    let text = std::fs::read_to_string(contrib(&format!("systemd/{name}"))).unwrap();
    let text = text
        .replace("/usr/bin/hugeshm", env!("CARGO_BIN_EXE_hugeshm"))
        .replace("/etc/hugeshm/plan.toml", plan.to_str().unwrap());
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The value of `Key=` in a unit (the last one).
fn unit_value(text: &str, key: &str) -> String {
    text.lines()
        .filter_map(|l| l.strip_prefix(&format!("{key}=")))
        .next_back()
        .unwrap_or_else(|| panic!("no {key}="))
        .to_string()
}

#[test]
fn systemd_units_pass_systemd_analyze_verify() {
    let test = test_name!();
    if skip_without("systemd-analyze", test) {
        return;
    }
    let dir = TempDir::new("contrib-units");
    // Documentation=man:hugeshm-apply(1) must resolve: the generated pages.
    let man1 = dir.path().join("man/man1");
    check(
        &common::hugeshm(&["generate", "man", "--out", man1.to_str().unwrap()]),
        "hugeshm generate man",
    );
    let plan = dir.path().join("plan.toml");
    let units: Vec<PathBuf> = ["hugeshm-apply.service", "hugeshm-exporter.service"]
        .iter()
        .map(|u| unit_copy(dir.path(), u, &plan))
        .collect();
    // Without man(1), systemd-analyze cannot look the pages up.
    let man = if on_path("man") {
        "--man=yes"
    } else {
        skip_part(test, "Documentation=", "no man on PATH");
        "--man=no"
    };
    let verify = |units: &[PathBuf]| {
        Command::new("systemd-analyze")
            .args(["verify", man])
            .args(units)
            .env("MANPATH", dir.path().join("man"))
            .env("SYSTEMD_LOG_COLOR", "0")
            .output()
            .unwrap()
    };
    let out = verify(&units);
    check(&out, "systemd-analyze verify");
    let stderr = String::from_utf8_lossy(&out.stderr);
    for u in ["hugeshm-apply.service", "hugeshm-exporter.service"] {
        assert!(
            !stderr.contains(u),
            "systemd-analyze warns about {u}:\n{stderr}"
        );
    }
    // The check is real: a unit whose binary does not exist fails it.
    let broken = dir.path().join("hugeshm-broken.service");
    let text = std::fs::read_to_string(&units[1])
        .unwrap()
        .replace(env!("CARGO_BIN_EXE_hugeshm"), "/nonexistent/hugeshm");
    std::fs::write(&broken, text).unwrap();
    let out = verify(&[broken]);
    assert!(
        !out.status.success(),
        "verify passed a unit with a missing binary"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/hugeshm"));

    // What the issue asks of them.
    let apply = std::fs::read_to_string(contrib("systemd/hugeshm-apply.service")).unwrap();
    assert_eq!(unit_value(&apply, "Type"), "oneshot");
    for db in [
        "postgresql.service",
        "mariadb.service",
        "mysql.service",
        "oracle-ohasd.service",
    ] {
        assert!(
            apply
                .lines()
                .any(|l| l.starts_with("Before=") && l.split(['=', ' ']).any(|w| w == db)),
            "hugeshm-apply is not ordered before {db}"
        );
    }
    let exporter = std::fs::read_to_string(contrib("systemd/hugeshm-exporter.service")).unwrap();
    assert_eq!(unit_value(&exporter, "ProtectSystem"), "strict");
    assert_eq!(unit_value(&exporter, "NoNewPrivileges"), "yes");
    // Bounded, sandboxed, reachable from the host only (issue 25).
    assert_eq!(unit_value(&exporter, "PrivateDevices"), "yes");
    assert_eq!(unit_value(&exporter, "IPAddressDeny"), "any");
    assert_eq!(unit_value(&exporter, "IPAddressAllow"), "localhost");
    let nofile: u64 = unit_value(&exporter, "LimitNOFILE").parse().unwrap();
    assert!(
        (64..=4096).contains(&nofile),
        "LimitNOFILE={nofile}: room for 32 connections and a scrape, and a bound"
    );
    assert!(unit_value(&exporter, "MemoryMax").ends_with('M'));
    assert_eq!(unit_value(&exporter, "Restart"), "on-failure");
}

/// setpriv arguments giving an unprivileged user (nobody) exactly the
/// capabilities of the exporter unit's AmbientCapabilities=.
fn setpriv_args(with_caps: bool) -> Vec<String> {
    let unit = std::fs::read_to_string(contrib("systemd/hugeshm-exporter.service")).unwrap();
    let caps: Vec<String> = unit_value(&unit, "AmbientCapabilities")
        .split_whitespace()
        .map(|c| format!("+{}", c.strip_prefix("CAP_").unwrap().to_lowercase()))
        .collect();
    assert_eq!(
        unit_value(&unit, "CapabilityBoundingSet"),
        unit_value(&unit, "AmbientCapabilities"),
        "the bounding set is the ambient set"
    );
    let caps = caps.join(",");
    let mut a: Vec<String> = [
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--no-new-privs",
    ]
    .map(String::from)
    .into();
    a.push(format!("--bounding-set=-all,{caps}"));
    if with_caps {
        a.push(format!("--inh-caps={caps}"));
        a.push(format!("--ambient-caps={caps}"));
    }
    a
}

/// How many processes `hugeshm segments` could not read, run as given.
fn unreadable_processes(setpriv: Option<Vec<String>>) -> u64 {
    let bin = env!("CARGO_BIN_EXE_hugeshm");
    let out = match setpriv {
        Some(a) => Command::new("setpriv")
            .args(a)
            .args([bin, "segments", "--json"])
            .env("NO_COLOR", "1")
            .stderr(Stdio::piped())
            .output()
            .unwrap(),
        None => common::hugeshm(&["segments", "--json"]),
    };
    let v = common::json(out);
    v["unreadable"].as_array().map_or(0, |a| a.len() as u64)
}

#[test]
fn exporter_unit_capabilities_read_other_users_processes() {
    let test = test_name!();
    // setpriv needs root to switch user.
    if skip_without("setpriv", test) || skip_unless_root(test) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_hugeshm"));
    // nobody must be able to run the binary from the build tree.
    let probe = Command::new("setpriv")
        .args(setpriv_args(false))
        .arg(bin)
        .arg("--version")
        .output()
        .unwrap();
    if !probe.status.success() {
        return skip(
            test,
            format_args!(
                "nobody cannot run {} ({})",
                bin.display(),
                String::from_utf8_lossy(&probe.stderr).trim()
            ),
        );
    }
    // A process of root's that nobody cannot read without the capabilities.
    let mut sleeper = Command::new("sleep").arg("60").spawn().unwrap();
    let without = unreadable_processes(Some(setpriv_args(false)));
    // Other tests start and end processes meanwhile: compare with root's
    // count taken right after, and retry a few times.
    let mut last = (0, 0);
    let mut ok = false;
    for _ in 0..5 {
        let with = unreadable_processes(Some(setpriv_args(true)));
        let root = unreadable_processes(None);
        last = (with, root);
        if with <= root {
            ok = true;
            break;
        }
    }
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(
        without > last.0,
        "without the capabilities nobody read as much as with them ({without} vs {} unreadable)",
        last.0
    );
    assert!(
        ok,
        "with the unit's capabilities nobody still misses processes root reads ({} vs {})",
        last.0, last.1
    );
}

#[test]
fn apply_unit_command_reserves_the_plan_file_or_fails_loudly() {
    let Some(pool) = live!() else { return };
    let nr = Path::new("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages");
    if !nr.exists() {
        return pool.skip("no 2 MiB pool");
    }
    let dir = TempDir::new("contrib-apply");
    let plan = dir.path().join("plan.toml");
    let unit =
        std::fs::read_to_string(unit_copy(dir.path(), "hugeshm-apply.service", &plan)).unwrap();
    let exec = unit_value(&unit, "ExecStart");
    let words: Vec<&str> = exec.split_whitespace().collect();
    let run = || {
        Command::new(words[0])
            .args(&words[1..])
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    };
    let read_nr = || -> u64 { std::fs::read_to_string(nr).unwrap().trim().parse().unwrap() };

    // A plan too big for the host: refused, loudly, nothing changed.
    std::fs::write(
        &plan,
        "[[region]]\nname = \"sga\"\nsize = \"64T\"\npage_size = \"2M\"\n",
    )
    .unwrap();
    let before = read_nr();
    let out = run();
    assert_eq!(out.status.code(), Some(3), "a short plan fails the unit");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("64.0 TiB") && err.contains("available"),
        "{err}"
    );
    assert_eq!(read_nr(), before);

    // 8 MiB on 2 MiB pages: 4 pages and 2 spare, reserved for real.
    std::fs::write(
        &plan,
        "[[region]]\nname = \"sga\"\nsize = \"8M\"\npage_size = \"2M\"\n",
    )
    .unwrap();
    let out = run();
    check(&out, &exec);
    assert!(
        read_nr() >= 6,
        "pool {} after the plan:\n{}",
        read_nr(),
        String::from_utf8_lossy(&out.stdout)
    );
    // The guard gives the pool back as it was.
    pool.finish();
    assert_eq!(read_nr(), before);
}

/// Every system call group systemd knows, from `systemd-analyze
/// syscall-filter`: `@name` → its members (calls and `@groups`).
fn syscall_groups() -> std::collections::BTreeMap<String, Vec<String>> {
    let out = Command::new("systemd-analyze")
        .arg("syscall-filter")
        .output()
        .unwrap();
    check(&out, "systemd-analyze syscall-filter");
    let mut groups = std::collections::BTreeMap::new();
    let mut current: Option<String> = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if !line.starts_with(' ') {
            current = t.starts_with('@').then(|| t.to_string());
            continue;
        }
        if let Some(g) = &current {
            groups
                .entry(g.clone())
                .or_insert_with(Vec::new)
                .push(t.to_string());
        }
    }
    groups
}

fn expand(
    groups: &std::collections::BTreeMap<String, Vec<String>>,
    item: &str,
    out: &mut BTreeSet<String>,
) {
    match groups.get(item) {
        Some(members) => members.iter().for_each(|m| expand(groups, m, out)),
        None => {
            out.insert(item.to_string());
        }
    }
}

/// The system calls the exporter unit's SystemCallFilter= lines allow.
fn unit_allowed_syscalls() -> BTreeSet<String> {
    let unit = std::fs::read_to_string(contrib("systemd/hugeshm-exporter.service")).unwrap();
    let groups = syscall_groups();
    let mut allowed = BTreeSet::new();
    for line in unit
        .lines()
        .filter_map(|l| l.strip_prefix("SystemCallFilter="))
    {
        let (deny, items) = match line.strip_prefix('~') {
            Some(rest) => (true, rest),
            None => (false, line),
        };
        let mut set = BTreeSet::new();
        for item in items.split_whitespace() {
            expand(&groups, item, &mut set);
        }
        if deny {
            allowed.retain(|c| !set.contains(c));
        } else {
            allowed.extend(set);
        }
    }
    assert!(allowed.len() > 100, "{allowed:?}");
    allowed
}

/// System calls in an `strace -f -o` log.
fn traced_syscalls(log: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(log).unwrap();
    text.lines()
        .filter_map(|l| {
            let rest = l.split_once(char::is_whitespace)?.1.trim_start();
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            (!name.is_empty() && rest[name.len()..].starts_with('(')).then_some(name)
        })
        .collect()
}

#[test]
fn exporter_unit_syscall_filter_allows_what_the_exporter_calls() {
    let test = test_name!();
    if skip_without("strace", test) || skip_without("systemd-analyze", test) {
        return;
    }
    let allowed = unit_allowed_syscalls();
    let dir = TempDir::new("contrib-strace");
    let bin = env!("CARGO_BIN_EXE_hugeshm");
    // One scrape on stdout, and the HTTP server answering a scrape and a 404.
    let once = dir.path().join("once.log");
    let out = Command::new("strace")
        .args(["-f", "-qq", "-o"])
        .arg(&once)
        .args([bin, "exporter", "--once"])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    check(&out, "strace hugeshm exporter --once");
    let serve = dir.path().join("serve.log");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut strace = Command::new("strace")
        .args(["-f", "-qq", "-o"])
        .arg(&serve)
        .args([bin, "exporter", "--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let get = |path: &str| -> Option<String> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        write!(s, "GET {path} HTTP/1.0\r\n\r\n").ok()?;
        let mut r = String::new();
        s.read_to_string(&mut r).ok()?;
        Some(r)
    };
    let t = Instant::now();
    let mut scraped = None;
    while t.elapsed() < std::time::Duration::from_secs(30) {
        if let Some(r) = get("/metrics") {
            scraped = Some(r);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let not_found = get("/nothing");
    // The exporter is strace's child: end it, and strace ends with it.
    let children = std::fs::read_to_string(format!(
        "/proc/{}/task/{}/children",
        strace.id(),
        strace.id()
    ))
    .unwrap_or_default();
    for pid in children.split_whitespace() {
        let pid: i32 = pid.parse().unwrap();
        if let Some(p) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::TERM);
        }
    }
    let t = Instant::now();
    while strace.try_wait().unwrap().is_none() {
        if t.elapsed() > std::time::Duration::from_secs(10) {
            let _ = strace.kill();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let scraped = scraped.expect("the exporter under strace never answered");
    assert!(scraped.contains("hugeshm_up 1"), "{scraped}");
    assert!(not_found.is_some_and(|r| r.contains(" 404 ")));

    let mut called = traced_syscalls(&once);
    called.extend(traced_syscalls(&serve));
    // execve is strace starting the binary (systemd's, not the service's).
    called.remove("execve");
    assert!(
        called.contains("openat") && called.contains("accept4"),
        "{called:?}"
    );
    let denied: Vec<_> = called.difference(&allowed).collect();
    assert!(
        denied.is_empty(),
        "hugeshm-exporter.service's SystemCallFilter= would kill the exporter at {denied:?}"
    );
}
