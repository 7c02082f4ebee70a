//! `hugeshm advise --mariadb FILE` against a real MariaDB 10.11, as root:
//! `apply` reserves the plan, the server started with `large_pages = ON`
//! maps every page of it (its buffer pool, log buffers, key and Aria
//! caches on 2 MiB pages, as its smaps says); with one page too few, part
//! of it lands on base pages without a word in MariaDB's log, and
//! `segments` says which part (`mariadb-base-pages`).

use crate::common::{hugeshm, json};

use hugeshm_testkit::live;
use hugeshm_testkit::mariadb::{skip_unless_mariadb, MariaDb};

const M2: u64 = 2 << 20;

use crate::common::private_2m_mappings as huge_mappings;

fn mariadb_findings(pid: u32) -> Vec<String> {
    let doc = json(hugeshm(&["segments", "--json"]));
    doc["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["code"] == "mariadb-base-pages")
        .map(|f| f["message"].as_str().unwrap().to_owned())
        .filter(|m| m.contains(&format!("pid {pid})")))
        .collect()
}

fn advise(cnf: &str) -> serde_json::Value {
    json(hugeshm(&[
        "advise",
        "--mariadb",
        cnf,
        "--spare",
        "0",
        "--json",
    ]))
}

#[test]
fn advise_apply_and_see_mariadb_on_huge_pages() {
    let Some(pool) = live!() else { return };
    if skip_unless_mariadb(pool.name()) {
        return;
    }
    {
        let mut db = MariaDb::init(
            "large_pages = ON\ninnodb_buffer_pool_size = 256M\nkey_buffer_size = 8M\n\
             aria_pagecache_buffer_size = 8M\n",
        )
        .expect("mariadb-install-db");
        let cnf = db.option_file().display().to_string();
        let plan = advise(&cnf);
        let counted = &plan["counted"][0];
        let pages = counted["pages"].as_u64().expect("pages");
        let note = counted["note"].as_str().unwrap();
        assert!(
            note.contains(&format!("{cnf} [mariadbd] innodb_buffer_pool_size")),
            "{note}"
        );
        assert!(note.contains("large_pages = ON"), "{note}");
        // More than the buffer pool ÷ 2 MiB (128): the log buffers and caches.
        assert!(pages > 128, "{plan:#}");
        // MAP_HUGETLB: no memlock limit binds mariadbd; no limits.d lines.
        assert!(
            plan["config"]["memlock_not_needed"].is_string(),
            "{:#}",
            plan["config"]
        );
        assert!(!plan["config"]["files"].to_string().contains("limits.d"));

        let applied = json(hugeshm(&[
            "apply",
            "--mariadb",
            &cnf,
            "--spare",
            "0",
            "--json",
        ]));
        assert_eq!(applied["result"]["complete"], true, "{applied:#}");
        let total: u64 = std::fs::read_to_string("/proc/sys/vm/nr_hugepages")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(total >= pages, "{applied:#}");

        // Wholly on 2 MiB pages: the 256 MiB buffer pool, and every page
        // of the plan used by the server.
        let pid = db.start().expect("mariadbd starts with large_pages on");
        let mut huge = huge_mappings(pid);
        huge.sort();
        // What 10.11.19 maps with these settings (strace, smaps): the key
        // and Aria caches (8 MiB each), two 16 MiB log buffers, the pool.
        let mib = |m: u64| m << 20;
        assert_eq!(huge, [mib(8), mib(8), mib(16), mib(16), mib(256)]);
        let used: u64 = huge.iter().map(|b| b / M2).sum();
        assert_eq!(used, pages, "the plan's pages, all mapped: {huge:?}");
        assert_eq!(mariadb_findings(pid), Vec::<String>::new());
        // Running: the server itself is asked over the socket its file names.
        let again = advise(&cnf);
        let note = again["counted"][0]["note"].as_str().unwrap();
        assert!(
            note.contains(&format!("running server (pid {pid}, socket "))
                && note.contains("@@innodb_buffer_pool_size")
                && note.contains("@@large_pages"),
            "{note}"
        );
        assert_eq!(again["counted"][0]["pages"].as_u64(), Some(pages));
        db.stop();

        // One page too few: part of it on base pages, MariaDB silent about it.
        std::fs::write("/proc/sys/vm/nr_hugepages", (pages - 1).to_string()).unwrap();
        let pid = db.start().expect("mariadbd starts short of a page");
        let used: u64 = huge_mappings(pid).iter().map(|b| b / M2).sum();
        assert!(used < pages, "{used} of {pages}");
        let found = mariadb_findings(pid);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("on base pages"), "{}", found[0]);
        assert!(found[0].contains("pages of 2 MiB short"), "{}", found[0]);
        let log = db.error_log();
        assert!(!log.to_lowercase().contains("large page"), "{log}");
        db.stop();
    }
    pool.finish();
}
