//! The progress line of `bench` and `lab`: on a terminal (script's pty),
//! one line on stderr reading `step k of n` with the time left, whatever
//! stdout is (here a file: `bench prefault > out.txt` still shows it), its
//! `n` counted before the first step (the same in every draw, and reached
//! by the last); nothing on stderr when it is a pipe, nothing in the file.
//! A terminal is had from `script` (util-linux); without it the test skips.

mod common;

use common::cmd;
use hugeshm_testkit::live;
use std::process::Command;

/// Whether `script` (util-linux) is there to give hugeshm a terminal.
fn have_script() -> bool {
    Command::new("script").arg("--version").output().is_ok()
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
    let Some(live) = live!() else { return };
    if !have_script() {
        return live.skip("no `script` (util-linux) to give hugeshm a terminal");
    }
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
    let out = cmd(&prefault.split(' ').collect::<Vec<_>>())
        .output()
        .expect("run hugeshm");
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("step ") && !err.contains('\r'), "{err:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("pre-fault of a 32 MiB region"));

    let _ = std::fs::remove_dir_all(&data);
    live.finish();
}

#[test]
fn the_lab_counts_every_reproductions_steps_before_the_first() {
    // Root: the lab reserves huge pages.
    let Some(live) = live!() else { return };
    if !have_script() {
        return live.skip("no `script` (util-linux) to give hugeshm a terminal");
    }
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
