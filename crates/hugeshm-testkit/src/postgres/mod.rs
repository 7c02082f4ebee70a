//! A throw-away PostgreSQL cluster for live tests against a real server.
//!
//! [`PgCluster::init`] creates a private cluster in a temporary directory
//! (`/tmp/hugeshm-pg-<pid>-<n>`, owned by the `postgres` OS user when the
//! test runs as root), reachable only through a Unix socket in that
//! directory, so it never collides with the distribution's default cluster
//! or with another test process. Every PostgreSQL program runs with a clean
//! environment (`LC_ALL=C`, so messages are in English) and, when running as
//! root, as the `postgres` user through `setpriv` (PostgreSQL refuses to run
//! as root). [`Drop`] stops the server and removes the directory.
//!
//! What a running PostgreSQL 15 server uses, as seen in
//! `/proc/<postmaster>/smaps` (checked by this crate's `tests/postgres.rs`):
//!
//! * the main shared memory area: one anonymous `MAP_SHARED` mapping,
//!   inherited by every backend through `fork`. With huge pages (`huge_pages
//!   = on`, or `try` when the pool is large enough) it is named
//!   [`ANON_HUGEPAGE`] (`/anon_hugepage (deleted)`), has `KernelPageSize:
//!   2048 kB` and its size is exactly `shared_memory_size_in_huge_pages`
//!   pages; the pages are reserved at start (`HugePages_Rsvd`) and faulted
//!   in as they are touched (`Shared_Hugetlb`/`Private_Hugetlb`, not
//!   `Rss`). Without huge pages it is named [`DEV_ZERO`] (`/dev/zero
//!   (deleted)`), `KernelPageSize: 4 kB`, not rounded to 2 MiB;
//! * a tiny System V "interlock" segment (56 bytes, owned by `postgres`,
//!   key derived from the data directory's inode, mapped as `/SYSV<key>
//!   (deleted)`);
//! * dynamic shared memory segments `/dev/shm/PostgreSQL.<n>`
//!   (`dynamic_shared_memory_type = posix`), 4 kB pages.
//!
//! A typical test (root only; see [`skip_unless_postgres`]):
//!
//! ```no_run
//! use hugeshm_testkit::postgres::{main_shm_vma, skip_unless_postgres, PgCluster};
//! use hugeshm_testkit::{live, test_name};
//!
//! # fn main() {
//! let Some(pool) = live!() else { return };
//! if skip_unless_postgres(test_name!()) {
//!     return;
//! }
//! let mut pg = PgCluster::init("128MB").unwrap();
//! let n: u64 = pg.postgres_c("shared_memory_size_in_huge_pages").unwrap().parse().unwrap();
//! pool.ensure_free(2 << 20, n).unwrap();
//! pg.start("on").unwrap();
//! let backend = pg.hold_backend().unwrap();
//! let vma = main_shm_vma(backend.backend_pid()).unwrap().unwrap();
//! assert_eq!(vma.kernel_page_kb(), Some(2048));
//! drop(backend);
//! pg.stop().unwrap();
//! drop(pg); // removes the directory
//! pool.finish();
//! # }
//! ```

mod cluster;
mod command;
mod process;
mod smaps;

use std::path::{Path, PathBuf};

use command::lookup_user;

pub use cluster::{HeldBackend, PgCluster, PgProcess};
pub use process::sweep_stale_clusters;
pub use smaps::{main_shm_vma, parse_smaps, read_smaps, SmapsVma};

/// The OS user PostgreSQL runs as when the test runs as root.
pub const PG_USER: &str = "postgres";

/// Environment variable naming a PostgreSQL `bin` directory to use instead
/// of the newest `/usr/lib/postgresql/<version>/bin`.
pub const PG_BIN_ENV: &str = "HUGESHM_PG_BIN";

/// Where Debian installs the server binaries, one directory per version.
pub const PG_LIB_ROOT: &str = "/usr/lib/postgresql";

/// Where the temporary cluster directories are created (not `$TMPDIR`:
/// the `postgres` user must reach it and socket paths must stay short).
pub const TEMP_ROOT: &str = "/tmp";

/// Prefix of the temporary cluster directories under [`TEMP_ROOT`].
pub const TEMP_PREFIX: &str = "hugeshm-pg-";

/// smaps name of the main shared memory area when it uses huge pages
/// (anonymous `MAP_SHARED | MAP_HUGETLB`).
pub const ANON_HUGEPAGE: &str = "/anon_hugepage (deleted)";

/// smaps name of the main shared memory area without huge pages
/// (anonymous `MAP_SHARED`, backed by shmem).
pub const DEV_ZERO: &str = "/dev/zero (deleted)";

/// The binaries a `bin` directory must hold to count as a server install.
const REQUIRED_BINS: [&str; 4] = ["postgres", "initdb", "pg_ctl", "psql"];

/// The PostgreSQL `bin` directory to use: `$HUGESHM_PG_BIN` if set (and
/// complete), otherwise the newest `/usr/lib/postgresql/<version>/bin` that
/// has `postgres`, `initdb`, `pg_ctl` and `psql`; `None` when there is none.
pub fn pg_bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(PG_BIN_ENV) {
        let dir = PathBuf::from(dir);
        return has_bins(&dir).then_some(dir);
    }
    let rd = std::fs::read_dir(PG_LIB_ROOT).ok()?;
    let mut versions: Vec<(Vec<u64>, PathBuf)> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            // "15", "9.6": numeric components, compared numerically.
            let key: Option<Vec<u64>> = name.split('.').map(|p| p.parse().ok()).collect();
            Some((key?, e.path().join("bin")))
        })
        .filter(|(_, bin)| has_bins(bin))
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

fn has_bins(dir: &Path) -> bool {
    REQUIRED_BINS.iter().all(|b| dir.join(b).is_file())
}

/// Why PostgreSQL tests cannot run here (`None` when they can): no server
/// installed, or running as root without a `postgres` user to drop to.
pub fn pg_unavailable_reason() -> Option<String> {
    if pg_bin_dir().is_none() {
        return Some(match std::env::var_os(PG_BIN_ENV) {
            Some(d) => format!(
                "${PG_BIN_ENV}={} lacks one of {REQUIRED_BINS:?}",
                PathBuf::from(d).display()
            ),
            None => format!(
                "no PostgreSQL server in {PG_LIB_ROOT}/<version>/bin \
                 (Debian: apt-get install postgresql)"
            ),
        });
    }
    if crate::is_root() {
        if let Err(e) = lookup_user(PG_USER) {
            return Some(format!("running as root, but: {e}"));
        }
    }
    None
}

/// Returns true (after [`crate::skip`]) when PostgreSQL tests cannot run
/// (see [`pg_unavailable_reason`]); use as
/// `if skip_unless_postgres("name") { return; }`.
pub fn skip_unless_postgres(test: &str) -> bool {
    match pg_unavailable_reason() {
        None => false,
        Some(reason) => {
            crate::skip(test, reason);
            true
        }
    }
}
