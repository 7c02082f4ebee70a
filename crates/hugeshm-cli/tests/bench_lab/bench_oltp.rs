//! `hugeshm bench oltp` for real on small sizes: worker processes over the
//! shared buffer cache on 4 KiB and (as root, through the pool guard) 2 MiB
//! pages, several backends; the JSON is read back and its numbers checked
//! for sense; nothing is left behind (regions, the data file, pool pages).

use crate::common::{hugeshm, json};
use hugeshm_testkit::{is_root, observe, skip_part, Lack};
use serde_json::Value;

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Checks one measured mode (cache or raw).
fn check_mode(m: &Value, runs: usize, cache: bool, what: &str) {
    assert!(f(&m["warmup"]["tps"]) > 0.0, "{what}: warm-up {m:#}");
    assert_eq!(m["runs"].as_array().unwrap().len(), runs, "{what}");
    let best = f(&m["best_tps"]);
    let median = f(&m["median_tps"]);
    assert!(
        best > 0.0 && median > 0.0 && best >= median,
        "{what}: {best} {median}"
    );
    let (p50, p99) = (f(&m["p50_ns"]), f(&m["p99_ns"]));
    assert!(
        p50 > 0.0 && p50 <= p99 && p99 < 1e9,
        "{what}: p50 {p50} p99 {p99}"
    );
    for r in m["runs"].as_array().unwrap() {
        let tx = f(&r["transactions"]);
        assert!(tx > 0.0 && f(&r["seconds"]) > 0.0, "{what}: {r:#}");
        let s = &r["stats"];
        if cache {
            assert_eq!(
                f(&s["hits"]) + f(&s["misses"]),
                tx,
                "{what}: one lookup per transaction"
            );
            let h = f(&r["hit_ratio"]);
            assert!((0.0..=1.0).contains(&h), "{what}: hit ratio {h}");
        } else {
            assert!(r["hit_ratio"].is_null(), "{what}: raw has no hit ratio");
            assert_eq!(f(&s["hits"]) + f(&s["misses"]), 0.0, "{what}");
        }
    }
    if cache {
        let h = f(&m["hit_ratio"]);
        assert!((0.0..=1.0).contains(&h), "{what}: hit ratio {h}");
    }
}

#[test]
fn bench_oltp_small_real_run() {
    // 2 MiB pages as root (the bench raises the pool). The pool guard
    // serializes with every other test that changes or compares host state
    // and checks at the end that everything is back.
    let root = is_root();
    let pool = observe!();
    if !root {
        skip_part(
            pool.name(),
            "2 MiB",
            "needs root to reserve huge pages: 4 KiB rows only",
        );
    }
    let dir = std::env::temp_dir().join(format!("hugeshm-oltp-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pages = if root { "4k,2m" } else { "4k" };
    let out = hugeshm(&[
        "bench",
        "oltp",
        "--cache-size",
        "8M",
        "--data-size",
        "16M",
        "--workers",
        "2",
        "--duration",
        "0.2",
        "--runs",
        "2",
        "--page-sizes",
        pages,
        "--backends",
        "posix,anon,memfd",
        "--write-pct",
        "30",
        "--data-dir",
        dir.to_str().unwrap(),
        "--json",
    ]);
    let v = json(out);
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), if root { 6 } else { 3 }, "{v:#}");
    assert_eq!(v["options"]["cache_size_bytes"], 8 << 20);
    let mut base = Vec::new();
    for r in rows {
        let what = format!("{} {}", r["page_size_bytes"], r["backend"]);
        let ps = r["page_size_bytes"].as_u64().unwrap();
        if ps == 2 << 20 && r["backend"] == "posix" {
            // tmpfs gives 2 MiB pages only through THP (huge= of the mount):
            // measured, or a reason.
            if let Some(why) = r["not_measured"].as_str() {
                assert!(why.contains("huge"), "{what}: {why}");
                pool.skip_part("2 MiB posix", Lack::TmpfsHugePages, why);
                continue;
            }
        }
        assert!(r["not_measured"].is_null(), "{what}: {r:#}");
        assert_eq!(r["region_page_size_bytes"].as_u64(), Some(ps), "{what}");
        assert_eq!(r["buffers"].as_u64(), Some(1024), "{what}: 8 MiB of 8 KiB");
        assert!(f(&r["startup_seconds"]) > 0.0, "{what}");
        assert!(f(&r["prewarm_seconds"]) > 0.0, "{what}");
        check_mode(&r["cache"], 2, true, &format!("{what} cache"));
        check_mode(&r["raw"], 2, false, &format!("{what} raw"));
        // Half the file fits: misses (pread) happen, and hits.
        let h = f(&r["cache"]["hit_ratio"]);
        assert!(
            h > 0.2 && h < 0.95,
            "{what}: hit ratio {h} with a cache half the file"
        );
        let writes: f64 = r["cache"]["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| f(&x["stats"]["writes"]))
            .sum();
        assert!(
            writes > 0.0,
            "{what}: dirty blocks are written back at eviction"
        );
        assert!(f(&r["cache_overhead"]) > 0.0, "{what}");
        // One ratio per run pair, the median of those: between the lowest
        // and highest pair's, which the best-of ratio need not be.
        let pairs: Vec<f64> = (0..2)
            .map(|i| f(&r["raw"]["runs"][i]["tps"]) / f(&r["cache"]["runs"][i]["tps"]))
            .collect();
        let paired = f(&r["cache_overhead_paired"]);
        assert!(
            paired >= pairs[0].min(pairs[1]) - 1e-9 && paired <= pairs[0].max(pairs[1]) + 1e-9,
            "{what}: paired {paired} outside {pairs:?}"
        );
        let pte = r["page_tables_bytes_per_worker"].as_u64().unwrap();
        assert!(pte > 0 && pte < 64 << 20, "{what}: VmPTE {pte}");
        // dTLB: a figure, or the reason it is not there.
        let dtlb = &r["cache"]["dtlb_misses_per_tx"];
        let why = &r["dtlb_unavailable"];
        assert!(
            (dtlb.is_number() && why.is_null()) || (dtlb.is_null() && why.is_string()),
            "{what}: {dtlb} / {why}"
        );
        if ps == 4096 {
            base.push(r["backend"].clone());
            assert!(r["vs_4k"].is_null());
        } else if base.contains(&r["backend"]) {
            assert!(f(&r["vs_4k"]) > 0.0, "{what}");
        }
    }
    // Nothing left: the data file, our regions, pool pages.
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "data file left"
    );
    std::fs::remove_dir(&dir).unwrap();
    pool.finish();
}

#[test]
fn bench_oltp_refuses_bad_sizes_and_says_why_a_row_is_missing() {
    let out = hugeshm(&["bench", "oltp", "--block-size", "1000", "--json"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--block-size 1000 must be a power of two"),
        "{err}"
    );

    let out = hugeshm(&[
        "bench",
        "oltp",
        "--cache-size",
        "4k",
        "--data-size",
        "1M",
        "--json",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("at least one 8192-byte block"),
        "{err}"
    );

    // posix files on tmpfs cannot have 1 GiB pages: a row that says why.
    let v = json(hugeshm(&[
        "bench",
        "oltp",
        "--cache-size",
        "1M",
        "--data-size",
        "1M",
        "--duration",
        "0.1",
        "--runs",
        "1",
        "--page-sizes",
        "1g",
        "--backends",
        "posix",
        "--no-reserve",
        "--json",
    ]));
    let row = &v["rows"][0];
    assert_eq!(row["page_size_bytes"].as_u64(), Some(1 << 30));
    let why = row["not_measured"].as_str().expect("a reason");
    assert!(!why.is_empty() && row["cache"].is_null(), "{row:#}");
}
