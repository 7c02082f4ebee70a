//! Skipping a test, visibly: [`skip`] and the allow-list of
//! `HUGESHM_TEST_STRICT=1`.
//!
//! `cargo test` hides what a passing test printed, so a test that prints
//! `SKIP` and returns counts as a pass that nobody sees. Every skip goes
//! through [`skip`] (or [`skip_lacking`]), which writes the line past the
//! test harness's output capture (so it shows in a CI log whatever the
//! test's result) and appends it to [`skips_file`]. With
//! `HUGESHM_TEST_STRICT=1` (`.ci/run` sets it) a skip fails the test,
//! unless it is for one of the [`Lack`]s: what a CI host truly cannot be
//! made to have, each with its reason.

use std::fmt::Display;
use std::io::Write;
use std::path::PathBuf;

/// `1`: a skip fails the test unless it names a [`Lack`].
pub const STRICT_ENV: &str = "HUGESHM_TEST_STRICT";

/// A file every skip is appended to (default: `hugeshm-skips.txt` in the
/// target directory of the running test binary).
pub const SKIPS_FILE_ENV: &str = "HUGESHM_TEST_SKIPS_FILE";

/// The allow-list: what a test may lack under `HUGESHM_TEST_STRICT=1`,
/// because no CI set-up can provide it. Anything else a test needs (root,
/// PostgreSQL, promtool, setpriv, a cgroup v2 hugetlb controller, QEMU...)
/// `.ci/run` installs or has, so a skip for it fails the strict run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lack {
    /// A 1 GiB huge page.
    GiganticPage,
    /// A host with a single NUMA memory node.
    OneMemoryNode,
    /// `PROCMAP_QUERY` on `/proc/PID/maps`.
    ProcmapQuery,
    /// `MPOL_WEIGHTED_INTERLEAVE`.
    WeightedInterleave,
    /// `hugetlb.<size>.rsvd.max` in the hugetlb cgroup.
    HugetlbRsvdCgroup,
    /// `demote` in a 1 GiB pool's sysfs directory.
    Demote,
    /// A host without a hugetlbfs mount of its own.
    NoHugetlbfsMount,
    /// User namespaces an unprivileged user may create.
    UnprivilegedUserns,
    /// An unlimited hard `RLIMIT_MEMLOCK`, or the right to raise it.
    MemlockHardLimit,
    /// Transparent huge pages in `/dev/shm`'s files.
    TmpfsHugePages,
}

impl Lack {
    /// Every entry of the allow-list.
    pub const ALL: [Lack; 10] = [
        Lack::GiganticPage,
        Lack::OneMemoryNode,
        Lack::ProcmapQuery,
        Lack::WeightedInterleave,
        Lack::HugetlbRsvdCgroup,
        Lack::Demote,
        Lack::NoHugetlbfsMount,
        Lack::UnprivilegedUserns,
        Lack::MemlockHardLimit,
        Lack::TmpfsHugePages,
    ];

    /// Why CI cannot be made to have it.
    pub fn reason(self) -> &'static str {
        match self {
            Lack::GiganticPage => {
                "1 GiB pages at run time need 1 GiB of contiguous free memory; on a \
                 fragmented host (or one without hugepagesz=1G support) the kernel grants \
                 none, and CI cannot reboot to reserve them at boot"
            }
            Lack::OneMemoryNode => {
                "the host is a single NUMA node or several; CI runs on whatever machine it \
                 gets (the QEMU guest tests cover several nodes)"
            }
            Lack::ProcmapQuery => {
                "the ioctl is in Linux 6.11 and later; CI runs on the host's kernel"
            }
            Lack::WeightedInterleave => {
                "the policy is in Linux 6.9 and later; CI runs on the host's kernel"
            }
            Lack::HugetlbRsvdCgroup => {
                "the reservation limits are in Linux 5.7 and later; CI runs on the host's kernel"
            }
            Lack::Demote => {
                "demotion is in Linux 5.16 and later and needs a 1 GiB pool; CI runs on the \
                 host's kernel"
            }
            Lack::NoHugetlbfsMount => {
                "a host's own hugetlbfs mount (systemd mounts /dev/hugepages) is the host's; \
                 a test does not unmount it to see what hugeshm says without one"
            }
            Lack::UnprivilegedUserns => {
                "a host that forbids unprivileged user namespaces (kernel.unprivileged_userns_clone \
                 = 0, an AppArmor restriction, user.max_user_namespaces = 0) closes the attack \
                 itself; CI runs on the host's settings and does not loosen them"
            }
            Lack::MemlockHardLimit => {
                "an unlimited soft memlock limit needs an unlimited hard one, and raising a \
                 finite hard limit needs CAP_SYS_RESOURCE, which a container's root may lack; CI \
                 runs with the limits and capabilities it is given"
            }
            Lack::TmpfsHugePages => {
                "a file in /dev/shm gets 2 MiB pages only through transparent huge pages, by the \
                 mount's huge= option: the host's mount, which a test does not remount under \
                 every other process"
            }
        }
    }
}

/// Whether `HUGESHM_TEST_STRICT=1`.
pub fn strict() -> bool {
    std::env::var_os(STRICT_ENV).is_some_and(|v| v == "1")
}

/// Skips (the rest of) test `test` for `reason`: prints
/// `SKIP test: reason` on the real stderr and appends it to
/// [`skips_file`]. With `HUGESHM_TEST_STRICT=1` it panics instead: CI can
/// have whatever this test lacks (see [`Lack`] for what it cannot).
///
/// Use as `return skip(T, "...")` or, for a part of a test, alone.
#[track_caller]
pub fn skip(test: &str, reason: impl Display) {
    let line = format!("SKIP {test}: {reason}");
    if strict() {
        record(&format!("{line} [FAILED: {STRICT_ENV}=1]"));
        panic!(
            "{line}\n{STRICT_ENV}=1: a skip fails the test unless the testkit's allow-list \
             (hugeshm_testkit::Lack) names what it lacks"
        );
    }
    record(&line);
}

/// Skips (the rest of) test `test`, which lacks `lack` (on the
/// allow-list): printed and recorded as [`skip`] does, never a failure.
pub fn skip_lacking(test: &str, lack: Lack, detail: impl Display) {
    record(&format!(
        "SKIP {test}: {detail} [allowed: {lack:?}: {}]",
        lack.reason()
    ));
}

/// Skips part `part` of test `test` for `reason`, as [`skip`] does (a
/// failure under `HUGESHM_TEST_STRICT=1`); the test goes on. A part the
/// allow-list excuses: [`crate::Live::skip_part`].
#[track_caller]
pub fn skip_part(test: &str, part: &str, reason: impl Display) {
    skip(&format!("{test} [{part}]"), reason);
}

/// Where skips are appended: [`SKIPS_FILE_ENV`], else `hugeshm-skips.txt`
/// in the target directory the running test binary was built in
/// (`target/debug/deps/X` -> `target/`); `None` when neither is known.
pub fn skips_file() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(SKIPS_FILE_ENV) {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    if deps.file_name()? != "deps" {
        return None;
    }
    Some(deps.parent()?.parent()?.join("hugeshm-skips.txt"))
}

/// Writes `line` to the process's stderr directly (`eprintln!` would be
/// captured and hidden for a passing test) and appends it to the skips
/// file; best effort.
fn record(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
    if let Some(path) = skips_file() {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            // One write per line: O_APPEND keeps lines of parallel tests whole.
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The environment is process-wide: one test sets and clears it.
    #[test]
    fn strict_fails_a_skip_and_allows_a_lack_and_both_are_recorded() {
        let file = std::env::temp_dir().join(format!("hugeshm-skips-{}", std::process::id()));
        let _ = std::fs::remove_file(&file);
        std::env::set_var(SKIPS_FILE_ENV, &file);
        std::env::remove_var(STRICT_ENV);
        skip("t::a", "no widget");
        std::env::set_var(STRICT_ENV, "1");
        let failed = std::panic::catch_unwind(|| skip("t::b", "no gadget"));
        skip_lacking("t::c", Lack::GiganticPage, "the kernel granted none");
        let part_failed = std::panic::catch_unwind(|| skip_part("t::d", "zsh", "no zsh"));
        std::env::remove_var(STRICT_ENV);
        std::env::remove_var(SKIPS_FILE_ENV);
        let text = std::fs::read_to_string(&file).unwrap();
        let _ = std::fs::remove_file(&file);
        assert!(failed.is_err(), "a plain skip under strict must fail");
        assert!(
            part_failed.is_err(),
            "a part's plain skip under strict must fail"
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert_eq!(lines[0], "SKIP t::a: no widget");
        assert!(
            lines[1].starts_with("SKIP t::b: no gadget [FAILED"),
            "{text}"
        );
        assert!(
            lines[2]
                .starts_with("SKIP t::c: the kernel granted none [allowed: GiganticPage: 1 GiB"),
            "{text}"
        );
        assert!(
            lines[3].starts_with("SKIP t::d [zsh]: no zsh [FAILED"),
            "{text}"
        );
    }

    #[test]
    fn every_lack_has_a_reason_and_is_listed_once() {
        for (i, l) in Lack::ALL.iter().enumerate() {
            assert!(l.reason().len() > 40, "{l:?}");
            assert!(!Lack::ALL[i + 1..].contains(l), "{l:?} twice");
        }
    }
}
