//! What `hugeshm run` does by default, with the C probe:
//!
//! * `--page-size` left out: a 128 MiB shared anonymous mapping made
//!   without `MAP_HUGETLB` lands on the host's default huge page size (2
//!   MiB here), pre-faulted; `--page-size keep` leaves it on 4 KiB pages.
//! * A target that makes no qualifying mapping says so once, at its exit,
//!   naming its largest anonymous mapping and why it did not qualify; a
//!   target that had something placed, or that ran less than a second (a
//!   one-shot `postgres -V`), says nothing of the kind.

use crate::run::{kb, probe, ran, run_cmd, run_default};
use hugeshm_testkit::{live, observe};

const M2: u64 = 2 << 20;

#[test]
fn shared_memory_goes_on_the_default_huge_page_size_unless_kept() {
    let Some(pool) = live!() else { return };
    pool.ensure_free(M2, 64).expect("64 free 2 MiB pages");
    let r = ran(run_default(&["--prefault"], &probe(), &["shared:128m"]));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.stderr, "", "nothing to say when all went as asked");
    let s = r.one("shared");
    assert_eq!(
        (
            kb(s, "kernel_page_kb"),
            kb(s, "size_kb"),
            kb(s, "resident_kb")
        ),
        (2048, 128 << 10, 128 << 10),
        "{s}"
    );
    let r = ran(run_cmd(&["--prefault"], &probe(), &["shared:128m"]));
    let s = r.one("shared");
    assert_eq!(
        (kb(s, "kernel_page_kb"), kb(s, "resident_kb")),
        (4, 128 << 10),
        "--page-size keep: {s}"
    );
}

#[test]
fn a_target_where_nothing_qualified_says_so_once() {
    let _pool = observe!();
    let r = ran(run_cmd(
        &["--prefault"],
        &probe(),
        &["private:128m", "shared:4m", "sleep:1200"],
    ));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let said: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.contains("made no mapping that qualifies"))
        .collect();
    assert_eq!(said.len(), 1, "{}", r.stderr);
    assert!(said[0].starts_with("hugeshm run: pid "), "{}", said[0]);
    assert!(said[0].contains("(probe) made no mapping"), "{}", said[0]);
    assert!(
        said[0].contains("by its exit: nothing was placed; its largest anonymous read-write mmap: 128 MiB, MAP_PRIVATE (private: --private places it)"),
        "{}",
        said[0]
    );
    // A one-shot run (`postgres -V` before each pg_ctl start): nothing.
    let r = ran(run_cmd(&[], &probe(), &["private:128m"]));
    assert!(!r.stderr.contains("made no mapping"), "{}", r.stderr);
    // Something placed: nothing of the kind.
    let r = ran(run_cmd(
        &["--prefault", "--private"],
        &probe(),
        &["private:128m"],
    ));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(!r.stderr.contains("made no mapping"), "{}", r.stderr);
    assert_eq!(kb(r.one("private"), "resident_kb"), 128 << 10);
}

#[test]
fn a_commit_inside_a_reservation_goes_on_huge_pages_and_its_cuts_still_work() {
    let Some(pool) = live!() else { return };
    pool.ensure_free(M2, 8).expect("8 free 2 MiB pages");
    let opts = ["--private", "--prefault", "--min-size", "8M"];
    let r = ran(run_default(&opts, &probe(), &["reserve:16m"]));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.stderr, "", "nothing to say when all went as asked");
    let c = r.one("commit");
    assert_eq!(
        (
            kb(c, "kernel_page_kb"),
            kb(c, "size_kb"),
            kb(c, "resident_kb")
        ),
        (2048, 16 << 10, 16 << 10),
        "{c}"
    );
    // Each call that cuts a huge page does what it does on base pages:
    // the bytes around the cut are kept, the page let go is zero.
    let v = r.one("reserve");
    for k in ["madvise", "uncommit", "mprotect", "recommit", "munmap"] {
        assert_eq!(v[k], 0, "{k} failed: {v}");
    }
    assert_eq!(
        (v["zeroed"].as_u64(), v["kept"].as_u64()),
        (Some(1), Some(1)),
        "{v}"
    );
    // MariaDB 11 commits with MAP_POPULATE: without --prefault, the huge
    // pages are faulted as it asked.
    let r = ran(run_default(
        &["--private", "--min-size", "8M"],
        &probe(),
        &["reserve-populate:16m"],
    ));
    let c = r.one("commit");
    assert_eq!(
        (kb(c, "kernel_page_kb"), kb(c, "resident_kb")),
        (2048, 16 << 10),
        "{c}\n{}",
        r.stderr
    );
    // And without hugeshm run's placement (--page-size keep), the same.
    let r = ran(run_cmd(&opts, &probe(), &["reserve:16m"]));
    assert_eq!(kb(r.one("commit"), "kernel_page_kb"), 4);
    assert_eq!(r.one("reserve")["kept"], 1);
}
