//! The published reports the lab reproduces: blog posts and articles on
//! Oracle databases and huge pages, 2007 to 2022. Each reproduction names
//! its report by number (`seed` in the JSON, the file in the project's
//! `shared/seeds/` starts with it); this is what the number stands for, so
//! that the lab's output says which report a figure comes from and what it
//! measured.

use serde::Serialize;

/// One published report.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Source {
    /// Its number (`001`).
    pub id: &'static str,
    /// A few words, for tables.
    pub short: &'static str,
    /// Its title, as published.
    pub title: &'static str,
    /// When it was published.
    pub when: &'static str,
    /// What it measured, the figures the lab compares with.
    pub measured: &'static str,
}

/// Every report, by number.
pub const SOURCES: [Source; 5] = [
    Source {
        id: "000",
        short: "Oracle hugepages too difficult",
        title: "Configuring Linux Hugepages for Oracle Database Is Just Too Difficult! Isn't It? Part I",
        when: "2010",
        measured: "Oracle 11.2 starting on 4 KiB pages, silently, when one huge page is short; \
                   905 tps with AMM on /dev/shm files against 872 on a SysV SGA on huge pages \
                   (a disk-bound 4-core box)",
    },
    Source {
        id: "001",
        short: "UEK4 concurrent huge page faults",
        title: "Improved start-up times for ORACLE database in UEK4 (Concurrent Huge Page faults)",
        when: "2015 or later",
        measured: "a 10 GB instance's start-up, 37.5 s before and 25.7 s after the kernel served \
                   huge page faults concurrently",
    },
    Source {
        id: "002",
        short: "Oracle 11g AMM on NUMA, Cyclops",
        title: "a post of the blog series Oracle on Linux, The NUMA Angle (Oracle 11g's AMM in /dev/shm)",
        when: "2007",
        measured: "an SGA in /dev/shm all on one NUMA node (\"Cyclops\"); writes to the remote \
                   node about 20% slower",
    },
    Source {
        id: "003",
        short: "HugePage sizing, page-table outage",
        title: "Performance tuning: configuring HugePage on Linux properly (Xiong Jun, Enmotech; in Chinese)",
        when: "2016",
        measured: "4.6 GB of page tables for about 300 sessions on a 12 GB SGA on 4 KiB pages; \
                   HugePages_Free and HugePages_Rsvd of an 11 GB pool under a 10 GB SGA",
    },
    Source {
        id: "004",
        short: "Oracle PMEM on an emulated NVDIMM",
        title: "Using persistent memory with Oracle Database: NVDIMM simulated with KVM",
        when: "2022",
        measured: "Oracle 21c's directly mapped buffer cache on a DAX file system against XFS \
                   through the buffer cache: 5.87x fewer physical reads, 1.09x the transactions",
    },
];

/// The report numbered `id`.
pub fn source(id: &str) -> Option<&'static Source> {
    SOURCES.iter().find(|s| s.id == id)
}

/// "Title (when): what it measured", or the number when unknown.
pub fn describe(id: &str) -> String {
    match source(id) {
        Some(s) => format!("{} ({}): {}", s.title, s.when, s.measured),
        None => format!("report {id}"),
    }
}

/// The short name, for tables.
pub fn short(id: &str) -> String {
    match source(id) {
        Some(s) => s.short.to_string(),
        None => format!("report {id}"),
    }
}
