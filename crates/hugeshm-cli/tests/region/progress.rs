//! Progress on stderr: on a terminal (script's pty) `bench`, `lab` and
//! `apply` draw one line reading `step k of n` with the time left, and
//! `create` a pre-fault bar in decimal GB/s with the time left, whatever
//! stdout is (here a file: `bench prefault > out.txt` still shows it); `n`
//! is counted before the first step (the same in every draw, and reached
//! by the last). Nothing on stderr when it is a pipe, nothing in the file.
//! A terminal is had from `script` (util-linux); without it the tests skip.

use crate::common::{cmd, hugeshm, json, nr_2m};
use hugeshm_testkit::{live, observe, Live};
use std::process::Command;

/// The live test, when `script` (util-linux) is there to give hugeshm a
/// terminal (else skipped, the host checked as at its end).
fn with_script(live: Live) -> Option<Live> {
    if Command::new("script").arg("--version").output().is_ok() {
        return Some(live);
    }
    live.skip("no `script` (util-linux) to give hugeshm a terminal");
    None
}

/// One draw of the line: step `k` of `n`, and whether it told the time left.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Draw {
    k: u64,
    n: u64,
    left: bool,
}

/// Every draw of a `step k of n` line in what the terminal got.
fn draws(terminal: &str) -> Vec<Draw> {
    let mut out = Vec::new();
    for line in terminal.split(['\r', '\n']) {
        let Some(at) = line.find("] step ") else {
            continue;
        };
        let rest = &line[at + "] step ".len()..];
        let mut words = rest.split([' ', ',', ':']).filter(|w| !w.is_empty());
        let k = words.next().and_then(|w| w.parse().ok());
        let of = words.next();
        let n = words.next().and_then(|w| w.parse().ok());
        if let (Some(k), Some("of"), Some(n)) = (k, of, n) {
            out.push(Draw {
                k,
                n,
                left: rest.contains(" left"),
            });
        }
    }
    out
}

/// `hugeshm ARGS > FILE` on a terminal: (what the terminal showed, the
/// file, whether it succeeded).
fn on_terminal(args: &str) -> (String, String, bool) {
    let id = format!(
        "{}-{}",
        std::process::id(),
        args.split(' ').take(2).collect::<Vec<_>>().join("-")
    );
    let dir = std::env::temp_dir();
    let (log, file) = (
        dir.join(format!("hugeshm-steps-{id}.log")),
        dir.join(format!("hugeshm-steps-{id}.out")),
    );
    let line = format!(
        "NO_COLOR=1 {} {args} > {}",
        env!("CARGO_BIN_EXE_hugeshm"),
        file.display()
    );
    let out = Command::new("script")
        .args(["-qec", &line])
        .arg(&log)
        .output()
        .expect("run script");
    let terminal = std::fs::read_to_string(&log).unwrap_or_default();
    let stdout = std::fs::read_to_string(&file).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_file(&file);
    (terminal, stdout, out.status.success())
}

/// The steps `args` showed on a terminal: counted up front (one `n` in
/// every draw), in order, the last one `n`, the time left told once a step
/// has run; with `every`, each step drawn (none passed over: the count was
/// not too high; the line draws up to 20 changes at once, so a short plan
/// is drawn whole). Returns `n`.
fn plan_kept(args: &str, every: bool) -> u64 {
    let (terminal, stdout, ok) = on_terminal(args);
    assert!(ok, "hugeshm {args} failed:\n{terminal}");
    let d = draws(&terminal);
    assert!(!d.is_empty(), "hugeshm {args}: no step line:\n{terminal}");
    let n = d[0].n;
    assert!(
        d.iter().all(|x| x.n == n),
        "hugeshm {args}: the count changed: {d:?}"
    );
    assert!(
        d.windows(2).all(|w| w[0].k <= w[1].k) && d[0].k == 1,
        "hugeshm {args}: {d:?}"
    );
    assert_eq!(d.last().unwrap().k, n, "hugeshm {args}: {d:?}");
    if every {
        assert!(
            d.windows(2).all(|w| w[1].k - w[0].k <= 1),
            "hugeshm {args}: steps passed over: {d:?}"
        );
    }
    if n > 1 {
        assert!(
            d.iter().any(|x| x.k > 1 && x.left),
            "hugeshm {args}: no time left: {d:?}"
        );
    }
    // The report went to the file, and the progress did not.
    assert!(!stdout.is_empty(), "hugeshm {args}: no report");
    assert!(
        !stdout.contains("] step ") && !stdout.contains('\r'),
        "{stdout}"
    );
    n
}

#[test]
fn bench_and_lab_show_step_k_of_n_on_a_terminal_only() {
    // Root: the benches make SysV segments and reserve pools; their
    // segments and files exist only while the pool lock is held.
    let Some(live) = live!().and_then(with_script) else {
        return;
    };
    let data = std::env::temp_dir().join(format!("hugeshm-steps-{}", std::process::id()));
    std::fs::create_dir_all(&data).unwrap();
    let dir = data.display();

    // A memset baseline, a warm-up and two runs.
    let prefault = "bench prefault --size 32M --page-size 4k --threads 1 --runs 2 --no-peers";
    assert_eq!(plan_kept(prefault, true), 4);
    // Per row: create, prewarm, the cache's and the raw loop's warm-up and run.
    assert_eq!(
        plan_kept(
            &format!(
                "bench oltp --cache-size 4M --data-size 8M --duration 0.1 --runs 1 \
             --page-sizes 4k --backends posix --workers 1 --data-dir {dir}"
            ),
            true
        ),
        6
    );
    assert_eq!(
        plan_kept(
            &format!("bench dmbc --dir {dir} --data-size 8M --cache-size 2M --duration 0.1"),
            true
        ),
        3
    );
    assert_eq!(
        plan_kept(
            "bench pagetables --size 8M --procs 2,4 --page-size 4k --backend sysv",
            true
        ),
        3
    );
    assert_eq!(
        plan_kept(
            "bench attach --size 8M --page-size 4k --backend sysv --runs 2",
            true
        ),
        2
    );
    assert_eq!(
        plan_kept("bench scan --procs 3 --size 4M --runs 2", true),
        3
    );
    // The memset ceiling's three passes per thread count, then bench dmbc's.
    let threads = if hugeshm_region::available_cpus() > 1 {
        2
    } else {
        1
    };
    assert_eq!(
        plan_kept("lab --quick --only dmbc --no-reserve", true),
        3 * threads + 3
    );

    // stderr a pipe: no line at all, the same report on stdout.
    let lab = "lab --quick --only dmbc --no-reserve";
    for (args, report) in [(prefault, "pre-fault of a 32 MiB region"), (lab, "dmbc")] {
        let out = cmd(&args.split(' ').collect::<Vec<_>>())
            .output()
            .expect("run hugeshm");
        assert!(out.status.success(), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !err.contains("step ") && !err.contains('\r'),
            "hugeshm {args}: {err:?}"
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(report),
            "hugeshm {args}: {out:?}"
        );
    }

    let _ = std::fs::remove_dir_all(&data);
    live.finish();
}

#[test]
fn the_lab_counts_every_reproductions_steps_before_the_first() {
    // Root: the lab reserves huge pages.
    let Some(live) = live!().and_then(with_script) else {
        return;
    };
    // Each reproduction's Lab::steps against what it ran, the ceiling's
    // passes included: the count is kept (none ran more than it said) and
    // reached.
    // 60 steps and more, some 10 ms apart: the line may leave some out.
    let n = plan_kept("lab --quick", false);
    let threads = if hugeshm_region::available_cpus() > 1 {
        2
    } else {
        1
    };
    assert!(n > 3 * threads + 6 * 2, "{n} steps");
    live.finish();
}

#[test]
fn create_draws_a_bar_in_gb_per_second_on_a_terminal_only() {
    // Its posix region in /dev/shm is host state other tests compare
    // under the pool lock.
    let Some(pool) = with_script(observe!()) else {
        return;
    };
    let name = format!("pbar{}", std::process::id());
    let create = format!(
        "create {name} --backend posix --size 512M --page-size 4k --policy off --prefault-threads 1"
    );
    // On a terminal: the bar, with its rate and time left.
    let (text, stdout, ok) = on_terminal(&create);
    let rm = hugeshm(&["rm", &name, "--backend", "posix"]);
    assert!(rm.status.success(), "{rm:?}");
    assert!(ok, "{text}");
    let lines: Vec<&str> = text.split(['\r', '\n']).collect();
    // Shown at once, while the region is set up, before any byte.
    let creating = format!("creating {name} [");
    let first = lines
        .iter()
        .find(|l| l.contains(&creating) || l.contains("pre-faulting ["));
    assert!(
        first.is_some_and(|l| l.contains(&creating) && l.contains("setting up")),
        "{text}"
    );
    let draws: Vec<&str> = lines
        .into_iter()
        .filter(|l| l.contains("pre-faulting ["))
        .collect();
    assert!(!draws.is_empty(), "no progress bar on a terminal:\n{text}");
    // Decimal GB/s as the report under it, from the first sample with
    // bytes on (never `0 B/s, 0s left`), and the time left.
    for d in &draws {
        assert!(!d.contains("iB/s") && !d.contains(" 0.0 GB/s"), "{d:?}");
        if !d.contains("] 0 B of ") {
            assert!(d.contains(" GB/s, ") && d.contains(" left"), "{d:?}");
        }
    }
    let last = draws.last().unwrap();
    assert!(last.contains("512 MiB of 512 MiB, "), "{last:?}");
    assert!(
        stdout.contains(" GB/s, 1 thread"),
        "the report's rate is in GB/s too: {stdout}"
    );
    assert!(
        stdout.contains("region ") && stdout.contains("pre-fault "),
        "{stdout}"
    );
    assert!(!stdout.contains("pre-faulting") && !stdout.contains('\r'));

    // stderr a pipe: no bar, and the report on stdout is the same.
    let out = cmd(&create.split(' ').collect::<Vec<_>>())
        .output()
        .expect("run hugeshm");
    let rm = hugeshm(&["rm", &name, "--backend", "posix"]);
    assert!(out.status.success(), "{out:?}");
    assert!(rm.status.success(), "{rm:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("pre-faulting") && !err.contains("creating"),
        "a bar without a terminal: {err:?}"
    );
    assert!(!err.contains('\r'), "{err:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains(" GB/s, 1 thread"));
    pool.finish();
}

#[test]
fn apply_draws_each_pool_written_on_a_terminal_only() {
    // Root: it writes the 2 MiB pool (restored by the guard).
    let Some(live) = live!().and_then(with_script) else {
        return;
    };
    let apply = "apply --size 16M --spare 0";
    let (terminal, stdout, ok) = on_terminal(apply);
    assert!(ok, "{terminal}");
    let d = draws(&terminal);
    assert_eq!(
        d,
        [Draw {
            k: 1,
            n: 1,
            left: false
        }],
        "{terminal}"
    );
    assert!(
        terminal.contains("step 1 of 1: the 2 MiB pool (host-wide) to 8 pages"),
        "{terminal}"
    );
    assert!(
        !stdout.contains("] step ") && !stdout.contains('\r'),
        "{stdout}"
    );
    assert_eq!(nr_2m(), 8);
    live.restore().expect("restore");

    // stderr a pipe: no line.
    let out = cmd(&[apply.split(' ').collect::<Vec<_>>(), vec!["--json"]].concat())
        .output()
        .expect("run hugeshm");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = json(out);
    assert_eq!(report["result"]["complete"], true, "{report:#}");
    assert!(!err.contains("step ") && !err.contains('\r'), "{err:?}");
    live.finish();
}
