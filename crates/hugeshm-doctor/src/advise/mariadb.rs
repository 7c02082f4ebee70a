//! `advise --mariadb [FILE]` and `advise --mysql [FILE]`: what the server
//! puts on huge pages with `large_pages = ON`, from the option files it
//! reads (FILE as `--defaults-file` reads it, else the default files).
//!
//! **MariaDB 10.11** (measured on Debian's 10.11.19 with strace and
//! smaps): `large_pages` makes `my_large_virtual_alloc` map the whole
//! InnoDB buffer pool (`innodb_buffer_pool_size_max`, by default
//! `innodb_buffer_pool_size`, a multiple of the 8 MiB extent) in one
//! `mmap(MAP_PRIVATE|MAP_ANONYMOUS|MAP_POPULATE|MAP_HUGETLB)` rounded up to
//! the page, and `my_large_malloc` puts the MyISAM key cache
//! (`key_buffer_size`), the Aria page cache (`aria_pagecache_buffer_size`)
//! and the two InnoDB log buffers (`innodb_log_buffer_size` each) on huge
//! pages too, before the buffer pool. Short of pages, the buffer pool's
//! mmap fails with ENOMEM, the server turns large pages off for all that
//! follows and logs nothing. No SysV: neither memlock nor
//! `vm.hugetlb_shm_group` matter. (Its chunks are gone since MDEV-29445:
//! `@@innodb_buffer_pool_chunk_size` reads 0.)
//!
//! **MySQL 8** (`large_pages`, "Enabling Large Page Support" in the MySQL
//! 8.0 Reference Manual): each buffer pool chunk is a SysV segment made
//! with `shmget(SHM_HUGETLB)`, which needs the mysql user's group in
//! `vm.hugetlb_shm_group` and a memlock limit that covers the pool.

use super::error::SourceError;
use super::model::{Demand, Skipped};
use hugeshm_parse::mycnf::Settings;
use hugeshm_parse::size::{format_bytes, round_up, GIB, MIB};

/// The MariaDB series whose option groups are read (`[mariadb-10.11]`).
pub(crate) const MARIADB_SERIES: &str = "10.11";
/// The MySQL series whose option groups are read (`[mysqld-8.0]`).
pub(crate) const MYSQL_SERIES: &str = "8.0";

/// Which server the option files are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Server {
    /// MariaDB 10.11 (`mariadbd`): private `MAP_HUGETLB` mappings.
    MariaDb,
    /// MySQL 8 (`mysqld`): SysV `SHM_HUGETLB` segments.
    MySql,
}

impl Server {
    /// The option groups this server reads.
    pub fn groups(self) -> Vec<String> {
        match self {
            Server::MariaDb => hugeshm_parse::mycnf::server_groups(true, MARIADB_SERIES),
            Server::MySql => hugeshm_parse::mycnf::server_groups(false, MYSQL_SERIES),
        }
    }

    /// The flag that names it.
    pub fn flag(self) -> &'static str {
        match self {
            Server::MariaDb => "--mariadb",
            Server::MySql => "--mysql",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Server::MariaDb => "MariaDB 10.11",
            Server::MySql => "MySQL 8",
        }
    }
}

/// What the option files a server reads say, and which files they were.
#[derive(Debug, Clone)]
pub(crate) struct OptionFiles {
    /// The settings of the server's groups.
    pub settings: Settings,
    /// Every file read, in order.
    pub files: Vec<String>,
    /// The file named (`None`: the default files).
    pub named: Option<String>,
}

/// Where a setting came from: `FILE [group] name`, or (line 0) a running
/// server's `SOURCE @@name`.
fn origin(o: &hugeshm_parse::mycnf::Origin, name: &str) -> String {
    if o.line == 0 {
        format!("{} @@{name}", o.file)
    } else {
        format!("{} [{}] {name}", o.file, o.group)
    }
}

/// A size setting, or its default; and the words that say where it came from.
fn size_of(
    s: &Settings,
    name: &str,
    default: u64,
    server: &str,
) -> Result<(u64, String), SourceError> {
    Ok(match s.size(name).map_err(SourceError::Spec)? {
        Some((v, o)) => (v, origin(o, name)),
        None => (default, format!("{server}'s default {name}")),
    })
}

/// One allocation MariaDB 10.11 puts on huge pages with `large_pages`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Part {
    /// What it is (`InnoDB buffer pool`).
    pub what: &'static str,
    /// The setting it comes from (`FILE [group] name`, or the default's).
    pub from: String,
    /// The bytes of each mapping on huge pages (rounded up to the page).
    pub bytes: u64,
    /// How many such mappings.
    pub count: usize,
    /// Exactly `bytes` (else at most: a cache's block memory, whose
    /// descriptors MariaDB takes out of the setting).
    pub exact: bool,
}

/// What MariaDB 10.11 started with `s` maps on pages of `page` bytes with
/// `large_pages`, in the order it maps them (measured on 10.11.19: the
/// key cache, the Aria page cache, the buffer pool, the log buffers).
pub(crate) fn mariadb_parts(s: &Settings, page: u64) -> Result<Vec<Part>, SourceError> {
    let name = Server::MariaDb.name();
    let up = |b: u64| round_up(b, page).unwrap_or(b);
    let mut parts = Vec::new();
    for (setting, what) in [
        ("key_buffer_size", "MyISAM key cache"),
        ("aria_pagecache_buffer_size", "Aria page cache"),
    ] {
        let (b, from) = size_of(s, setting, 128 * MIB, name)?;
        parts.push(Part {
            what,
            from,
            bytes: up(b),
            count: 1,
            exact: false,
        });
    }
    let (bp, bp_from) = size_of(s, "innodb_buffer_pool_size", 128 * MIB, name)?;
    let (max, from) = match s
        .size("innodb_buffer_pool_size_max")
        .map_err(SourceError::Spec)?
    {
        Some((v, o)) => (v, origin(o, "innodb_buffer_pool_size_max")),
        None => (bp, bp_from),
    };
    // A multiple of the 8 MiB extent (buf0buf.cc), mapped whole.
    let max = round_up(max, 8 * MIB).unwrap_or(max);
    parts.push(Part {
        what: "InnoDB buffer pool",
        from,
        bytes: up(max),
        count: 1,
        exact: true,
    });
    let (log, from) = size_of(s, "innodb_log_buffer_size", 16 * MIB, name)?;
    parts.push(Part {
        what: "InnoDB log buffer",
        from,
        bytes: up(log),
        count: 2,
        exact: true,
    });
    Ok(parts)
}

/// The demand of `server` started with `files`' settings, on pages of
/// `page` bytes; `user_ids(login)` gives a user's uid and group (MySQL's
/// SysV segments need that group in `vm.hugetlb_shm_group`).
pub(super) fn server_demands(
    server: Server,
    files: &OptionFiles,
    page: u64,
    user_ids: impl Fn(&str) -> Option<(u32, u32)>,
) -> Result<(Vec<Demand>, Vec<Skipped>), SourceError> {
    let s = &files.settings;
    let shown = files.named.as_deref().unwrap_or("(default option files)");
    let label = format!("{} {shown}", server.flag().trim_start_matches("--"));
    let name = server.name();
    let switch = match s.switch("large_pages") {
        Some((true, o)) => format!("large_pages = ON ({})", origin(o, "large_pages")),
        Some((false, o)) => format!(
            "large_pages is OFF ({} [{}]): set large_pages = ON there, or the server \
             uses none of these pages",
            o.file, o.group
        ),
        None => format!(
            "large_pages is not set: add large_pages = ON under [mysqld] in {}, or the server \
             uses none of these pages",
            files
                .files
                .first()
                .map_or("/etc/mysql/my.cnf", String::as_str)
        ),
    };
    let mut parts: Vec<(String, u64)> = Vec::new();
    let mut pages = 0u64;
    let mut add = |what: String, bytes: u64, pages: &mut u64| {
        let p = bytes.div_ceil(page);
        *pages += p;
        parts.push((format!("{what}: {} ({p} pages)", format_bytes(bytes)), p));
    };
    let mut sysv_gid = None;
    let mut owner = None;
    match server {
        Server::MariaDb => {
            for part in mariadb_parts(s, page)? {
                let at_most = if part.exact { "" } else { ", at most" };
                let n = part.count as u64;
                let many = if n > 1 {
                    format!("{n} x ")
                } else {
                    String::new()
                };
                add(
                    format!("{many}{} ({}){at_most}", part.what, part.from),
                    n * part.bytes,
                    &mut pages,
                );
            }
        }
        Server::MySql => {
            let (bp, bp_from) = size_of(s, "innodb_buffer_pool_size", 128 * MIB, name)?;
            let (chunk, _) = size_of(s, "innodb_buffer_pool_chunk_size", 128 * MIB, name)?;
            let default_instances = if bp >= GIB { 8 } else { 1 };
            let instances = s
                .get("innodb_buffer_pool_instances")
                .and_then(|(v, _)| v?.parse::<u64>().ok())
                .unwrap_or(default_instances)
                .max(1);
            // The pool is rounded up to chunk x instances; each chunk a
            // segment of the chunk and its block descriptors (at most
            // 1 KiB per 16 KiB page), rounded up to the page.
            let unit = chunk.saturating_mul(instances).max(1);
            let pool = round_up(bp, unit).unwrap_or(bp);
            let chunks = pool / chunk.max(1);
            let seg = round_up(chunk + chunk / 16, page).unwrap_or(chunk);
            add(
                format!(
                    "InnoDB buffer pool ({bp_from}) rounded up to {instances} instance(s) x {} \
                     chunks: {chunks} SysV segments of at most {}",
                    format_bytes(chunk),
                    format_bytes(seg)
                ),
                chunks * seg,
                &mut pages,
            );
            let user = s
                .get("user")
                .and_then(|(v, _)| v.map(str::to_owned))
                .unwrap_or_else(|| "mysql".to_owned());
            if let Some((uid, gid)) = user_ids(&user) {
                sysv_gid = Some(gid);
                owner = Some(uid);
            }
        }
    }
    let bytes = pages * page;
    let limits = match server {
        Server::MariaDb => "MAP_HUGETLB mappings: no memlock, no vm.hugetlb_shm_group needed",
        Server::MySql => {
            "SysV SHM_HUGETLB segments: the mysql user's group in vm.hugetlb_shm_group, and a \
             memlock limit that covers the pool"
        }
    };
    let list: Vec<String> = parts.into_iter().map(|(p, _)| p).collect();
    let mut d = Demand::new(label, bytes, page)
        .with_pages(pages)
        .with_note(format!("{name}: {}; {switch}; {limits}", list.join("; ")));
    if let Some(g) = sysv_gid {
        d = d.with_sysv_gid(g);
    }
    if server == Server::MariaDb {
        d = d.memlock_free();
    }
    if let Some(u) = owner {
        d = d.owned_by(u);
    }
    Ok((vec![d], Vec::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(server: Server, text: &str) -> OptionFiles {
        let mut settings = Settings::default();
        let groups = server.groups();
        let mut group = None;
        for (n, l) in hugeshm_parse::mycnf::parse(text).unwrap() {
            match l {
                hugeshm_parse::mycnf::Line::Group(g) => group = Some(g),
                hugeshm_parse::mycnf::Line::Option { name, value } => settings.add(
                    &groups,
                    group.as_deref(),
                    &name,
                    value.as_deref(),
                    "my.cnf",
                    n,
                ),
                _ => {}
            }
        }
        OptionFiles {
            settings,
            files: vec!["my.cnf".into()],
            named: Some("my.cnf".into()),
        }
    }

    #[test]
    fn mariadb_counts_what_10_11_19_maps_on_huge_pages() {
        let m2 = 2 * MIB;
        let f = files(
            Server::MariaDb,
            "[mariadbd]\nlarge_pages=ON\ninnodb_buffer_pool_size=256M\n",
        );
        let (d, _) = server_demands(Server::MariaDb, &f, m2, |_| None).unwrap();
        // 256 MiB pool (128 pages) + 2 x 16 MiB log buffers (16) + at most
        // 128 MiB each of key cache and Aria cache (64 + 64).
        assert_eq!(d[0].pages, Some(128 + 16 + 64 + 64));
        let note = d[0].note.as_deref().unwrap();
        assert!(
            note.contains("my.cnf [mariadbd] innodb_buffer_pool_size"),
            "{note}"
        );
        assert!(
            note.contains("large_pages = ON (my.cnf [mariadbd] large_pages)"),
            "{note}"
        );
        assert!(note.contains("no memlock"), "{note}");
        assert_eq!(d[0].sysv_gid, None);
        // _max wins; the extent rounds it up; small caches count small.
        let f = files(
            Server::MariaDb,
            "[mysqld]\ninnodb_buffer_pool_size=1G\ninnodb_buffer_pool_size_max=1001M\n\
             key_buffer_size=8M\naria_pagecache_buffer_size=1M\ninnodb_log_buffer_size=3M\n",
        );
        let (d, _) = server_demands(Server::MariaDb, &f, m2, |_| None).unwrap();
        assert_eq!(d[0].pages, Some(504 + 4 + 4 + 1));
        assert!(d[0]
            .note
            .as_deref()
            .unwrap()
            .contains("large_pages is not set"));
    }

    #[test]
    fn mysql_8_chunks_are_sysv_segments_of_the_mysql_group() {
        // MySQL 8.0 Reference Manual, "Configuring InnoDB Buffer Pool Size":
        // the pool is a multiple of innodb_buffer_pool_chunk_size x
        // innodb_buffer_pool_instances (8 instances by default from 1 GiB);
        // "Enabling Large Page Support": SHM_HUGETLB, hugetlb_shm_group
        // with the mysql group, memlock.
        let f = files(
            Server::MySql,
            "[mysqld]\nlarge-pages\ninnodb_buffer_pool_size=2G\nuser=mysql\n",
        );
        let (d, _) = server_demands(Server::MySql, &f, 2 * MIB, |u| {
            (u == "mysql").then_some((106, 111))
        })
        .unwrap();
        // 2 GiB in 16 chunks of 128 MiB, each with its descriptors: 68 pages.
        assert_eq!(d[0].pages, Some(16 * 68));
        assert_eq!((d[0].sysv_gid, d[0].owner_uid), (Some(111), Some(106)));
        let note = d[0].note.as_deref().unwrap();
        assert!(
            note.contains("vm.hugetlb_shm_group") && note.contains("memlock"),
            "{note}"
        );
        // 1.5 GiB with 8 instances rounds up to 2 GiB; [mariadbd] is not MySQL's.
        let f = files(
            Server::MySql,
            "[mysqld]\ninnodb_buffer_pool_size=1536M\n[mariadbd]\ninnodb_buffer_pool_size=64G\n",
        );
        let (d, _) = server_demands(Server::MySql, &f, 2 * MIB, |_| None).unwrap();
        assert_eq!(d[0].pages, Some(16 * 68));
        assert_eq!(d[0].sysv_gid, None);
    }
}
