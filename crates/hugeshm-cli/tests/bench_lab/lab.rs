//! `hugeshm lab` on the live host, as root: every reproduction measures
//! for real (huge pages reserved through the pool top-up and given back,
//! real attached processes), `--out` writes the JSON, the plots and the
//! HTML report, and headless Chromium renders that report with every
//! section and plot in it.
//!
//! Run: `cargo test -p hugeshm --test bench_lab lab:: -- --nocapture`

use crate::common::{cmd, hugeshm as run, json};
use crate::lab_pictures;

use hugeshm_testkit::{live, skip, test_name};
use serde_json::Value;
use std::path::Path;

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

/// The reproduction `name` (seed 000 has two: fallback and oltp).
fn repro<'a>(lab: &'a Value, name: &str) -> &'a Value {
    lab["reproductions"]
        .as_array()
        .expect("reproductions")
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no reproduction {name}: {lab:#}"))
}

/// Every reproduction with its seed, in the lab's order.
const NAMES: [(&str, &str); 6] = [
    ("startup", "001"),
    ("pagetables", "003"),
    ("fallback", "000"),
    ("numa", "002"),
    ("oltp", "000"),
    ("dmbc", "004"),
];

fn comparison<'a>(r: &'a Value, starts: &str) -> &'a Value {
    r["comparisons"]
        .as_array()
        .expect("comparisons")
        .iter()
        .find(|c| c["what"].as_str().is_some_and(|w| w.starts_with(starts)))
        .unwrap_or_else(|| panic!("no comparison {starts:?}: {r:#}"))
}

/// The DOM headless Chromium built from the report.
fn chromium_dom(file: &Path) -> String {
    let out = lab_pictures::chromium(&["--dump-dom"], file);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn lab_quick_reproduces_every_report_and_writes_a_report_chromium_renders() {
    let Some(pool) = live!() else { return };
    let dir = std::env::temp_dir().join(format!("hugeshm-lab-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let lab = json(run(&[
        "lab",
        "--quick",
        "--out",
        dir.to_str().unwrap(),
        "--json",
    ]));

    // Every reproduction ran, without error, in the lab's order.
    let seeds: Vec<(&str, &str)> = lab["reproductions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), r["seed"].as_str().unwrap()))
        .collect();
    assert_eq!(seeds, NAMES, "{lab:#}");
    for r in lab["reproductions"].as_array().unwrap() {
        assert_eq!(r["error"], Value::Null, "{r:#}");
        for c in r["comparisons"].as_array().unwrap() {
            assert!(c["field"].as_f64().is_some_and(|f| f > 0.0), "{c}");
            if let (Some(f), Some(o)) = (c["field"].as_f64(), c["ours"].as_f64()) {
                let ratio = c["ratio"].as_f64().expect("a ratio beside ours");
                assert!((ratio - o / f).abs() < 1e-9 * ratio.abs().max(1.0), "{c}");
            }
        }
    }
    // The ceiling was measured in this run, for 1 thread and every CPU.
    let ceiling = lab["ceiling"].as_array().unwrap();
    assert!(!ceiling.is_empty() && ceiling.iter().all(|c| c["gbps"].as_f64().unwrap() > 0.0));

    // 001: both page sizes, every size and thread count, warm-up apart.
    let startup = repro(&lab, "startup");
    let cpus = lab["cpus"].as_u64().unwrap();
    let threads = if cpus > 1 { 2 } else { 1 };
    assert_eq!(
        startup["table"]["rows"].as_array().unwrap().len(),
        2 * 2 * threads,
        "{startup:#}"
    );
    assert!(
        comparison(startup, "huge-page start-up rate")["ours"]
            .as_f64()
            .unwrap()
            > 0.0
    );

    // 003: 4 KiB sessions pay about 2 MiB per GiB each; 2 MiB sessions
    // (64 MiB, no sharing at that size) at most a PMD page each.
    let pt = repro(&lab, "pagetables");
    let per_gib_4k = comparison(pt, "4 KiB: page tables per session")["ours"]
        .as_f64()
        .unwrap();
    assert!(
        (1.5..3.0).contains(&per_gib_4k),
        "4 KiB: {per_gib_4k} MiB per GiB"
    );
    let per_gib_2m = comparison(pt, "2 MiB: page tables per session")["ours"]
        .as_f64()
        .unwrap();
    assert!(
        per_gib_2m <= 4.0 * 16.0 + 1.0,
        "2 MiB: {per_gib_2m} KiB per GiB"
    );
    let total = pt["plots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "pagetables-total")
        .expect("the total plot");
    // PageTables and the sessions' VmPTE, for each page size.
    assert_eq!(total["series"].as_array().unwrap().len(), 4, "{total:#}");

    // 000: one page short, try fell back to 4 KiB with every free page idle;
    // only refused with the numbers.
    let fb = repro(&lab, "fallback");
    let rows = fb["table"]["rows"].as_array().unwrap();
    let row = |start: &str| {
        rows.iter()
            .find(|r| r[0] == start)
            .unwrap_or_else(|| panic!("no row {start:?}: {fb:#}"))
    };
    assert_eq!(row("pool holds it, try")[2], "2M");
    assert_eq!(row("one page short, try")[2], "4k");
    assert_eq!(row("one page short, only")[2], "refused");
    assert_eq!(row("one page short, try")[4], "31", "32 needed, 31 idle");
    let idle = comparison(fb, "fall-back: idle reserved pool")["ours"]
        .as_f64()
        .unwrap();
    assert!((idle - 31.0 / 32.0 * 100.0).abs() < 0.01, "{idle}");
    let rsvd = comparison(fb, "counters: HugePages_Rsvd")["ours"]
        .as_f64()
        .unwrap();
    assert!(rsvd > 10.0 && rsvd < 25.0, "Rsvd share of the pool: {rsvd}");
    assert!(fb["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap().contains("required 32, available 31")));

    // 002: one node here says so; several nodes compare.
    let numa = repro(&lab, "numa");
    let remote = comparison(numa, "remote write time");
    if lab["memory_nodes"] == 1 {
        assert_eq!(remote["ours"], Value::Null);
        assert!(remote["note"].as_str().unwrap().contains("one memory node"));
    }
    assert!(
        comparison(numa, "local write bandwidth")["ours"]
            .as_f64()
            .unwrap()
            > 0.0
    );

    // 000, OLTP: AMM's /dev/shm on 4 KiB pages and SysV on 4 KiB and
    // 2 MiB pages, for a cache smaller than its data and one that holds it
    // all; the huge page sessions' page tables are the smaller.
    let oltp = repro(&lab, "oltp");
    let rows = oltp["table"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 6, "{oltp:#}");
    for r in rows {
        let tps: f64 = r[2].as_str().unwrap().parse().unwrap();
        assert!(tps > 0.0, "{r}");
    }
    let pt_of = |layout: &str| -> Vec<f64> {
        rows.iter()
            .filter(|r| r[1] == layout)
            .map(|r| {
                let s = r[5].as_str().unwrap();
                let (n, unit) = s.split_once(' ').unwrap();
                let n: f64 = n.parse().unwrap();
                n * match unit {
                    "B" => 1.0 / 1024.0,
                    "KiB" => 1.0,
                    "MiB" => 1024.0,
                    _ => panic!("page tables {s}"),
                }
            })
            .collect()
    };
    let (small, huge) = (
        pt_of("SysV segment on 4 KiB"),
        pt_of("SysV segment on 2 MiB"),
    );
    assert_eq!((small.len(), huge.len()), (2, 2), "{oltp:#}");
    assert!(
        small.iter().zip(&huge).all(|(s, h)| h <= s),
        "{small:?} {huge:?}"
    );
    assert_eq!(oltp["comparisons"].as_array().unwrap().len(), 2);
    for c in oltp["comparisons"].as_array().unwrap() {
        assert!(c["ours"].as_f64().is_some_and(|o| o > 0.0), "{c}");
    }

    // 004, directly mapped buffer cache: classic and direct mode, the
    // direct one copying nothing on reads and fewer physical reads; where
    // the host has no DAX mount, a note says the mapping was page cache.
    let dmbc = repro(&lab, "dmbc");
    let rows = dmbc["table"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{dmbc:#}");
    assert_eq!(
        (rows[0][0].as_str(), rows[1][0].as_str()),
        (Some("classic"), Some("direct"))
    );
    let num = |r: &Value, i: usize| -> f64 { r[i].as_str().unwrap().parse().unwrap() };
    assert!(num(&rows[0], 5) > 0.0 && num(&rows[1], 5) > 0.0, "{dmbc:#}");
    assert!(
        num(&rows[1], 3) < num(&rows[0], 3),
        "physical reads/s: {dmbc:#}"
    );
    assert_eq!(
        rows[1][6], "0 B",
        "the direct mode copies nothing on reads: {dmbc:#}"
    );
    assert_eq!(dmbc["comparisons"].as_array().unwrap().len(), 2);
    let phys = comparison(dmbc, "physical reads per second");
    assert!((phys["field"].as_f64().unwrap() - 30_594.4 / 5_211.5).abs() < 1e-9);
    assert!(phys["ours"].as_f64().is_some_and(|o| o > 1.0), "{phys}");
    let dax_mount = std::fs::read_to_string("/proc/mounts")
        .unwrap()
        .lines()
        .any(|l| {
            l.split_whitespace()
                .nth(3)
                .is_some_and(|o| o.split(',').any(|x| x == "dax" || x == "dax=always"))
        });
    let notes = dmbc["notes"].to_string();
    if !dax_mount {
        assert_eq!(rows[1][1], "page cache (in place)", "{dmbc:#}");
        assert!(notes.contains("no DAX mount"), "{notes}");
    }

    // The files: JSON (the same document), one SVG per plot, the report.
    let on_disk: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("lab.json")).unwrap()).unwrap();
    assert_eq!(on_disk["schema"], 1);
    assert_eq!(
        on_disk["reproductions"].as_array().unwrap().len(),
        NAMES.len(),
        "{on_disk:#}"
    );
    let plots: Vec<String> = lab["reproductions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["plots"].as_array().unwrap().iter())
        .map(|p| p["id"].as_str().unwrap().to_owned())
        .collect();
    assert!(plots.len() >= 5, "{plots:?}");
    for id in &plots {
        let svg = std::fs::read_to_string(dir.join(format!("{id}.svg"))).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{id}"
        );
    }
    let html = dir.join("report.html");
    assert!(html.is_file());

    // The pools are as they were, nothing left behind.
    pool.finish();

    if !on_path("chromium") {
        let _ = std::fs::remove_dir_all(&dir);
        return skip(
            test_name!(),
            "the Chromium part: no chromium on PATH (apt-get install chromium)",
        );
    }
    let dom = chromium_dom(&html);
    for (name, seed) in NAMES {
        let at = dom
            .find(&format!("id=\"lab-{name}\""))
            .unwrap_or_else(|| panic!("section lab-{name} (seed {seed}) not rendered:\n{dom}"));
        let section = &dom[at..];
        let end = section[1..]
            .find("<section")
            .map(|e| e + 1)
            .unwrap_or(section.len());
        let section = &section[..end];
        assert!(
            section.contains("The field report beside ours"),
            "seed {seed}"
        );
        assert!(section.contains("<svg"), "seed {seed}: no plot");
    }
    for id in &plots {
        assert!(
            dom.contains(&format!("id=\"plot-{id}\"")),
            "plot {id} not rendered"
        );
    }
    plots_show_every_series(&lab, &dir);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each plot rendered to PNG by headless Chromium: every series' colour
/// is in the picture outside the legend (none drawn over by another, none
/// too small to see), and what each plot shows is what its reproduction
/// measured.
fn plots_show_every_series(lab: &Value, dir: &Path) {
    for p in lab["reproductions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["plots"].as_array().unwrap())
    {
        let id = p["id"].as_str().unwrap();
        let svg = std::fs::read_to_string(dir.join(format!("{id}.svg"))).unwrap();
        let series = p["series"].as_array().unwrap();
        let colours = lab_pictures::legend_colours(&svg);
        assert_eq!(colours.len(), series.len(), "{id}: {colours:?}");
        let bare = dir.join(format!("{id}-without-legend.svg"));
        std::fs::write(&bare, lab_pictures::without_legend(&svg)).unwrap();
        let whole = lab_pictures::render(
            &dir.join(format!("{id}.svg")),
            &dir.join(format!("{id}.png")),
        );
        let data = lab_pictures::render(&bare, &dir.join(format!("{id}-without-legend.png")));
        for (s, &c) in series.iter().zip(&colours) {
            let name = s["name"].as_str().unwrap();
            let (shown, in_data) = (
                lab_pictures::count(&whole, c),
                lab_pictures::count(&data, c),
            );
            println!("{id}: {name}: {in_data} px of {c:?} outside the legend");
            assert!(shown > in_data, "{id}: {name} is not in the legend");
            // A bar series of zeros has nothing to draw; any line has.
            let drawn = p["kind"] == "lines"
                || s["points"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|pt| pt[1].as_f64().unwrap() > 0.0);
            if drawn {
                assert!(in_data >= 20, "{id}: {name} hidden: {in_data} px of {c:?}");
            }
        }
    }
    let plot = |id: &str| {
        lab["reproductions"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r["plots"].as_array().unwrap())
            .find(|p| p["id"] == id)
            .unwrap_or_else(|| panic!("no plot {id}"))
    };
    // Sessions are counted: whole numbers along x.
    for id in ["pagetables-total", "pagetables-per-session"] {
        assert_eq!(plot(id)["x_counts"], true, "{id}");
    }
    // Every layout of the OLTP table has its bars.
    let oltp = repro(lab, "oltp");
    let mut layouts: Vec<&str> = oltp["table"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[1].as_str().unwrap())
        .collect();
    layouts.sort_unstable();
    layouts.dedup();
    let bars = plot("oltp-tps");
    assert_eq!(
        bars["categories"].as_array().unwrap().len(),
        layouts.len(),
        "{layouts:?}: {bars:#}"
    );
    // dmbc: this host's and the field's ratios, the comparisons' figures
    // (not reads per second of two systems on one axis).
    let dmbc = repro(lab, "dmbc");
    let ratios = plot("dmbc-ratios");
    for (i, c) in dmbc["comparisons"].as_array().unwrap().iter().enumerate() {
        let at = |s: usize| ratios["series"][s]["points"][i][1].as_f64().unwrap();
        assert_eq!(at(0), c["ours"].as_f64().unwrap(), "{c}");
        assert_eq!(at(1), c["field"].as_f64().unwrap(), "{c}");
    }
}

#[test]
fn lab_only_runs_one_and_refuses_an_unknown_name() {
    let out = run(&["lab", "--only", "nosuch"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid value 'nosuch' for '--only <ONLY>'")
            && err.contains("[possible values: startup, pagetables, fallback, numa, oltp, dmbc]"),
        "{err}"
    );
    // numa with --no-reserve reserves nothing: runnable by anyone.
    let out = cmd(&["lab", "--quick", "--only", "numa", "--no-reserve", "--json"])
        .output()
        .unwrap();
    let lab = json(out);
    let r = lab["reproductions"].as_array().unwrap();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0]["name"], "numa");
    assert!(
        !r[0]["table"]["rows"].as_array().unwrap().is_empty(),
        "{lab:#}"
    );
}
