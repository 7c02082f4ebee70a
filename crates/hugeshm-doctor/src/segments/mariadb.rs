//! MariaDB servers that asked for large pages and got base pages for part
//! of what they put there. A `mariadbd` (by its exe link) with
//! `large_pages` on (its command line, else the option files it reads)
//! maps its key cache, Aria page cache, InnoDB buffer pool and two log
//! buffers with `MAP_HUGETLB` (`advise::mariadb_parts`); 10.11 falls back
//! to base pages without a word in its error log when the pool is short
//! (measured on 10.11.19): the buffer pool's mmap fails with ENOMEM and
//! the server turns large pages off for all that follows. Each of those
//! allocations that has no huge page mapping of its size is named here.

use super::servers::{private_mappings, PrivateMapping, ServerProcess};
use crate::advise::{mariadb_parts, Server};
use crate::finding::{Finding, Severity};
use hugeshm_parse::mycnf::Settings;
use hugeshm_parse::size::{format_bytes, MIB};
use hugeshm_probe::Probe;
use std::path::PathBuf;

/// `mariadb-base-pages`, one per `mariadbd` (of `servers`, the processes
/// known by their exe) with `large_pages` on that lacks a huge page
/// mapping for one of its large page allocations.
pub(super) fn base_page_findings(
    probe: &Probe,
    page: u64,
    servers: &[ServerProcess],
) -> Vec<Finding> {
    servers
        .iter()
        .filter(|p| p.exe_name == "mariadbd")
        .filter_map(|p| finding_of(p, &private_mappings(probe, p.pid, MIB), page))
        .collect()
}

/// The settings `p` runs with: its option files (`--defaults-file`, else
/// the default files; none with `--no-defaults`; a file that is not
/// trusted is left out), then its command line, which wins; and the file
/// to name in the fix.
fn settings_of(p: &ServerProcess) -> (Settings, Option<PathBuf>) {
    let groups = Server::MariaDb.groups();
    let args = p.args.get(1..).unwrap_or_default();
    let mut file = None;
    let mut none = false;
    for a in args {
        if let Some(f) = a.strip_prefix("--defaults-file=") {
            file = Some(PathBuf::from(f)).filter(|f| f.is_absolute());
        }
        none |= a == "--no-defaults";
    }
    let mut s = match (&file, none) {
        (_, true) => Settings::default(),
        (f, false) => {
            let named: Vec<PathBuf> = f.iter().cloned().collect();
            hugeshm_probe::option_files::read_option_files(&named, &groups)
                .map(|(s, _)| s)
                .unwrap_or_default()
        }
    };
    let shown = format!("the command line of pid {}", p.pid);
    for a in args.iter().filter_map(|a| a.strip_prefix("--")) {
        let (name, value) = match a.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (a, None),
        };
        s.add(&groups, Some("mysqld"), name, value, &shown, 0);
    }
    (s, file)
}

/// The finding of server `p` whose private mappings are `maps`.
fn finding_of(p: &ServerProcess, maps: &[PrivateMapping], page: u64) -> Option<Finding> {
    let (s, file) = settings_of(p);
    let (on, origin) = s.switch("large_pages")?;
    if !on {
        return None;
    }
    let parts = mariadb_parts(&s, page).ok()?;
    let mut huge: Vec<&PrivateMapping> = maps.iter().filter(|m| m.on_huge_pages()).collect();
    huge.sort_by_key(|m| m.size_bytes);
    let mut missing = Vec::new();
    let mut short = 0u64;
    let mut sorted: Vec<_> = parts
        .iter()
        .flat_map(|p| std::iter::repeat_n(p, p.count))
        .collect();
    sorted.sort_by_key(|p| std::cmp::Reverse(p.bytes));
    for part in sorted {
        // An exact part: the smallest mapping that holds it (the pool may
        // have grown by its alignment); a cache: the largest within it.
        let at = if part.exact {
            huge.iter().position(|m| m.size_bytes >= part.bytes)
        } else {
            huge.iter().rposition(|m| m.size_bytes <= part.bytes)
        };
        match at {
            Some(i) => {
                huge.remove(i);
            }
            None => {
                short += part.bytes.div_ceil(page);
                missing.push(format!(
                    "its {} ({}, {})",
                    part.what,
                    format_bytes(part.bytes),
                    part.from
                ));
            }
        }
    }
    if missing.is_empty() {
        return None;
    }
    let why = if missing.iter().any(|m| m.contains("buffer pool")) {
        "the buffer pool's MAP_HUGETLB mmap failed with ENOMEM and the server turned large \
         pages off for what followed"
    } else {
        "what found too few free huge pages was mapped on base pages instead"
    };
    let fix_file = file.map_or(String::new(), |f| {
        format!(" {}", hugeshm_fix::shell_quote(&f.to_string_lossy()))
    });
    Some(Finding::new(
        Severity::Warning,
        "mariadb-base-pages",
        format!(
            "mariadbd (pid {}) asked for large pages (large_pages = ON, {} [{}]) but {} {} on \
             base pages: {short} pages of {} short when it started. MariaDB 10.11 logs no \
             warning for this: {why}",
            p.pid,
            origin.file,
            origin.group,
            missing.join(", "),
            if missing.len() == 1 { "is" } else { "are" },
            format_bytes(page)
        ),
        Some(format!(
            "hugeshm apply --mariadb{fix_file} (the pages its settings need), then restart the \
             server"
        )),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(size_mib: u64, huge: bool) -> PrivateMapping {
        PrivateMapping {
            start: 0,
            size_bytes: size_mib * MIB,
            page_size_bytes: Some(if huge { 2 * MIB } else { 4096 }),
            resident_bytes: 0,
            thp_bytes: 0,
        }
    }

    fn server(args: &[&str]) -> ServerProcess {
        ServerProcess {
            pid: 42,
            exe_name: "mariadbd".into(),
            args: args.iter().map(|a| a.to_string()).collect(),
        }
    }

    #[test]
    fn a_log_buffer_on_base_pages_is_named_with_the_pages_short() {
        // What 10.11.19 mapped with one page too few (smaps, measured): the
        // second 16 MiB log buffer on 4 KiB pages.
        let p = server(&[
            "mariadbd",
            "--no-defaults",
            "--large-pages",
            "--innodb-buffer-pool-size=256M",
            "--key-buffer-size=8M",
            "--aria-pagecache-buffer-size=8M",
        ]);
        let maps = [
            mapping(256, true),
            mapping(16, false),
            mapping(16, true),
            mapping(8, true),
            mapping(8, true),
            mapping(8, false),
        ];
        let f = finding_of(&p, &maps, 2 * MIB).unwrap();
        assert_eq!(f.code, "mariadb-base-pages");
        assert!(
            f.message.contains("its InnoDB log buffer (16 MiB"),
            "{}",
            f.message
        );
        assert!(
            f.message.contains("8 pages of 2 MiB short"),
            "{}",
            f.message
        );
        assert!(f.message.contains("logs no warning"), "{}", f.message);
        // All there: nothing to say; large pages off: nothing either.
        let all = [&maps[..1], &[mapping(16, true)], &maps[2..5]].concat();
        assert!(finding_of(&p, &all, 2 * MIB).is_none());
        let off = server(&[
            "mariadbd",
            "--no-defaults",
            "--innodb-buffer-pool-size=256M",
        ]);
        assert!(finding_of(&off, &maps, 2 * MIB).is_none());
        // The whole buffer pool on base pages.
        let f = finding_of(&p, &maps[1..], 2 * MIB).unwrap();
        assert!(
            f.message.contains("its InnoDB buffer pool (256 MiB"),
            "{}",
            f.message
        );
    }
}
