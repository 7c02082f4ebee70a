//! `hugeshm bench dmbc` for real on small sizes, on this host's file
//! system (no DAX here: the direct mode maps the page cache, and the report
//! must say so). The JSON is read back: the direct mode copies no bytes on
//! reads and does fewer physical reads than the classic mode, the counters
//! add up, and the data file is gone afterwards; once in this process,
//! once in three forked ones sharing the cache.

use crate::common::{hugeshm, json};
use serde_json::Value;

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn bench_dmbc_small_real_run() {
    small_run(1);
}

/// Three forked processes on the one cache: the same invariants over
/// their summed counters.
#[test]
fn bench_dmbc_small_real_run_in_three_processes() {
    small_run(3);
}

fn small_run(workers: u32) {
    let dir = std::env::temp_dir().join(format!("t-dmbc-{}-{workers}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_str().unwrap();
    let w = workers.to_string();
    let v = json(hugeshm(&[
        "bench",
        "dmbc",
        "--workers",
        &w,
        "--dir",
        d,
        "--data-size",
        "16M",
        "--cache-size",
        "2M",
        "--duration",
        "0.3",
        "--json",
    ]));
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(left.is_empty(), "data file left behind: {left:?}");

    let (c, dm) = (&v["classic"], &v["direct"]);
    assert_eq!(c["mode"], "classic");
    assert_eq!(dm["mode"], "direct");
    assert!(c["mapping"].is_null());
    let dax = v["dax"].as_bool().unwrap();
    if !dax {
        assert_eq!(dm["mapping"], "page cache");
        assert!(
            v["note"].as_str().unwrap().contains("not on DAX"),
            "{}",
            v["note"]
        );
    }
    assert_eq!(f(&v["options"]["data_size_bytes"]), 16.0 * 1048576.0);
    assert_eq!(f(&v["options"]["workers"]), f64::from(workers));
    for m in [c, dm] {
        let tx = f(&m["transactions"]);
        assert!(tx > 0.0 && f(&m["tps"]) > 0.0, "{m:#}");
        // 20 block accesses per transaction, each one logical read.
        assert_eq!(f(&m["logical_reads"]), tx * 20.0, "{m:#}");
        let s = &m["stats"];
        assert_eq!(
            f(&s["hits"]) + f(&s["misses"]) + f(&s["direct_reads"]),
            f(&m["logical_reads"])
        );
        assert_eq!(f(&m["physical_reads"]), f(&s["misses"]));
        assert_eq!(f(&m["bytes_copied"]), f(&m["physical_reads"]) * 8192.0);
        assert!(
            f(&m["write_backs"]) > 0.0,
            "updates are written back: {m:#}"
        );
    }
    // The classic mode copies every block it reads in; the direct mode
    // reads in place and copies only blocks about to be updated.
    assert_eq!(f(&c["in_place_reads"]), 0.0);
    assert!(f(&c["bytes_copied_by_reads"]) > 0.0, "{c:#}");
    assert!(f(&dm["in_place_reads"]) > 0.0, "{dm:#}");
    assert_eq!(f(&dm["bytes_copied_by_reads"]), 0.0, "{dm:#}");
    assert!(
        f(&dm["physical_per_tx"]) < f(&c["physical_per_tx"]),
        "direct {} vs classic {} physical reads per transaction",
        dm["physical_per_tx"],
        c["physical_per_tx"]
    );
    assert!(f(&v["physical_ratio"]) > 1.0);
    assert_eq!(f(&v["field"]["direct_physical"]), 5211.5);
    assert_eq!(f(&v["field"]["classic_physical"]), 30594.4);
}

#[test]
fn bench_dmbc_refuses_a_cache_below_one_block() {
    let out = hugeshm(&["bench", "dmbc", "--cache-size", "4k", "--json"]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("--cache-size") && e.contains("8192"), "{e}");
}
