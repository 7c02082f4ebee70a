//! The doctor against a real JVM, OpenJDK (Debian `default-jdk-headless`),
//! started with `-XX:+UseLargePages` as an admin starts it:
//! `advise --jvm "java …"` counts what the JVM maps on huge pages (heap,
//! code cache, G1's mark bitmaps), `apply` reserves it, and the JVM started
//! then has every one of those mappings on 2 MiB pages, the plan's pages
//! exactly; `advise --jvm PID` of it gives the same pages. With one page
//! too few, a part falls back to base pages and `segments` says so in the
//! JVM's own words (`jvm-base-pages`); its fix, `apply --jvm PID` and a
//! restart, puts the JVM wholly on huge pages again.

use crate::common::{hugeshm, json};
use hugeshm_testkit::jvm::{skip_unless_java, Jvm};
use hugeshm_testkit::live;
use serde_json::Value;

const M2: u64 = 2 << 20;
const OPTIONS: [&str; 4] = ["-XX:+UseLargePages", "-Xms256m", "-Xmx256m", "-XX:+UseG1GC"];

/// The pages a plan counts, in all.
fn counted_pages(plan: &Value) -> u64 {
    plan["counted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["pages"].as_u64().unwrap())
        .sum()
}

use crate::common::private_2m_mappings as huge_mappings;

/// The `jvm-base-pages` findings of `segments` that name `pid`.
fn jvm_findings(pid: u32) -> Vec<Value> {
    let segs = json(hugeshm(&["segments", "--json"]));
    segs["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| {
            f["code"] == "jvm-base-pages"
                && f["message"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("JVM pid {pid} "))
        })
        .cloned()
        .collect()
}

#[test]
fn advise_jvm_sizes_what_the_jvm_maps_on_huge_pages() {
    let Some(pool) = live!() else { return };
    if skip_unless_java(pool.name()) {
        return;
    }
    let line = format!("java {}", OPTIONS.join(" "));
    let plan = json(hugeshm(&[
        "advise", "--jvm", &line, "--spare", "0", "--json",
    ]));
    let pages = counted_pages(&plan);
    let notes: Vec<&str> = plan["counted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["note"].as_str().unwrap())
        .collect();
    println!("advise --jvm: {pages} pages (-Xmx ÷ 2 MiB: 128); {notes:#?}");
    assert!(
        notes.iter().all(|n| n.contains("PrintFlagsFinal")),
        "{notes:#?}"
    );
    assert!(pages > 128 + 120, "heap, code cache and more: {plan:#}");
    // MAP_HUGETLB: no memlock limit binds the JVM, and the plan says so.
    assert!(
        plan["config"]["memlock_not_needed"].is_string(),
        "{:#}",
        plan["config"]
    );
    assert!(!plan["config"]["files"].to_string().contains("limits.d"));

    let applied = json(hugeshm(&[
        "apply", "--jvm", &line, "--spare", "0", "--json",
    ]));
    assert_eq!(applied["result"]["complete"], true, "{applied:#}");
    {
        let jvm = Jvm::start(&OPTIONS).expect("java starts");
        let mapped = huge_mappings(jvm.pid());
        let bytes: u64 = mapped.iter().sum();
        println!("started: {mapped:?} on 2 MiB pages, {} pages", bytes / M2);
        assert_eq!(bytes / M2, pages, "smaps of the JVM: {mapped:?}");
        assert!(!jvm.log().contains("Failed"), "{}", jvm.log());
        assert!(jvm_findings(jvm.pid()).is_empty());
        let by_pid = json(hugeshm(&[
            "advise",
            "--jvm",
            &jvm.pid().to_string(),
            "--spare",
            "0",
            "--json",
        ]));
        assert_eq!(counted_pages(&by_pid), pages, "{by_pid:#}");
    }

    // One page too few: the last part reserved falls back.
    std::fs::write("/proc/sys/vm/nr_hugepages", format!("{}\n", pages - 1)).unwrap();
    let jvm = Jvm::start(&OPTIONS).expect("java starts short of one page");
    assert!(
        jvm.log().contains("Failed to reserve and commit memory"),
        "{}",
        jvm.log()
    );
    let found = jvm_findings(jvm.pid());
    println!("one page short: {found:#?}");
    assert_eq!(found.len(), 1, "{found:#?}");
    let msg = found[0]["message"].as_str().unwrap();
    assert!(msg.contains("on base pages"), "{msg}");
    assert!(msg.contains("Failed to reserve and commit memory"), "{msg}");
    assert!(
        found[0]["fix"]
            .as_str()
            .unwrap()
            .starts_with(&format!("hugeshm apply --jvm {}", jvm.pid())),
        "{:#}",
        found[0]
    );
    // status shows the segments' server findings.
    let st = json(hugeshm(&["status", "--json"]));
    assert!(
        st["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["code"] == "jvm-base-pages"),
        "{:#}",
        st["findings"]
    );
    // The fix, as the finding says it: apply for the running JVM (its own
    // pages are its demand, not live segments in the way), then restart it.
    let pid = jvm.pid().to_string();
    let applied = json(hugeshm(&["apply", "--jvm", &pid, "--spare", "0", "--json"]));
    assert_eq!(applied["result"]["complete"], true, "{applied:#}");
    assert_eq!(counted_pages(&applied["plan"]), pages, "{applied:#}");
    drop(jvm);
    let jvm = Jvm::start(&OPTIONS).expect("java restarts");
    let bytes: u64 = huge_mappings(jvm.pid()).iter().sum();
    assert_eq!(bytes / M2, pages);
    assert!(jvm_findings(jvm.pid()).is_empty());
    drop(jvm);
    pool.finish();
}
