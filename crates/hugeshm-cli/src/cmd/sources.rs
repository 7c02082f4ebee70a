//! The options `advise` and `apply` share: where a plan's demand comes
//! from, as the doctor's [`Sources`], and the plan made of them.

use crate::cmd::input_file;
use crate::output::Usage;
use hugeshm_doctor::advise::{self, Placement, Plan, SourceError, Sources, DEFAULT_SPARE_PAGES};
use hugeshm_probe::{HostSnapshot, Probe};
use std::path::PathBuf;

/// Where the demand comes from (shared by `advise` and `apply`).
#[derive(Debug, Clone, clap::Args)]
pub struct SourceArgs {
    /// Plan for a region of this size (an SGA, shared_buffers, a cache): 18G, 512M.
    #[arg(long, value_parser = crate::values::size, allow_hyphen_values = true)]
    pub size: Option<u64>,
    /// Page size for --size (default: the kernel's default huge page size).
    #[arg(long, value_parser = crate::values::huge_page_size(), requires = "size")]
    pub page_size: Option<u64>,
    /// Put the --size region on this NUMA node.
    #[arg(long, requires = "size", conflicts_with = "spread")]
    pub node: Option<u32>,
    /// Split the --size region evenly over every NUMA node.
    #[arg(long, requires = "size")]
    pub spread: bool,
    /// Ask the PostgreSQL cluster in this data directory (postgres -C while it is
    /// down, the running server otherwise); repeat for more clusters.
    #[arg(long, value_name = "DATADIR")]
    pub postgres: Vec<PathBuf>,
    /// The postgres binary (default: /usr/lib/postgresql/N/bin/postgres or
    /// /usr/pgsql-N/bin/postgres for the major version N in PG_VERSION). It
    /// must be a regular file of root's (or the caller's) that nobody else
    /// can write, in directories nobody else can write.
    #[arg(long, value_name = "PATH", requires = "postgres")]
    pub postgres_bin: Option<PathBuf>,
    /// Regions listed in a hugeshm spec file (TOML, see docs/advise.md).
    #[arg(long, value_name = "FILE")]
    pub spec: Option<PathBuf>,
    /// An Oracle Database pfile (init<SID>.ora, text): its SGA rounded up to
    /// its granule; under AMM (memory_target), what turns AMM off.
    #[arg(long, value_name = "PFILE")]
    pub oracle: Option<PathBuf>,
    /// A running Oracle instance: the SysV segments its own processes (exe
    /// `oracle`, ora_pmon_SID / oracleSID) attach, each rounded to its page size.
    #[arg(long, value_name = "SID", value_parser = advise::parse_oracle_sid)]
    pub oracle_sid: Option<String>,
    /// A DPDK application's EAL arguments as one string ("-l 0-3 -m 1024"):
    /// what its EAL preallocates at start (-m, or socket-mem per node).
    #[arg(long, value_name = "EAL ARGS", allow_hyphen_values = true)]
    pub dpdk: Option<String>,
    /// A JVM: a java command line (one quoted string) or a running JVM's
    /// pid: its heap, code cache and GC tables on huge pages.
    #[arg(long, value_name = "ARGS_OR_PID", allow_hyphen_values = true)]
    pub jvm: Option<String>,
    /// MariaDB 10.11 with large_pages: its buffer pool, log buffers, key and
    /// Aria caches, from OPTION_FILE (default: /etc/my.cnf, /etc/mysql/my.cnf
    /// and their includes), each file root's and writable by nobody else.
    #[arg(long, value_name = "OPTION_FILE", num_args = 0..=1)]
    pub mariadb: Option<Option<PathBuf>>,
    /// MySQL 8 with large_pages: its buffer pool chunks as SysV segments
    /// (hugetlb_shm_group, memlock), the same way.
    #[arg(long, value_name = "OPTION_FILE", num_args = 0..=1)]
    pub mysql: Option<Option<PathBuf>>,
    /// Also count the shared memory live on this host (the default when no
    /// other source is given). Without it, a plan of --size or --spec
    /// regions keeps room for the huge pages live segments use: advise
    /// warns and apply refuses a pool that would not hold both.
    #[arg(long)]
    pub live: bool,
    /// Spare pages added to each pool.
    #[arg(long, default_value_t = DEFAULT_SPARE_PAGES)]
    pub spare: u64,
    /// Where a pool grows and free pages of a larger pool the plan leaves
    /// alone (1 GiB) could give the growth, demote them (the kernel's
    /// `demote`, Linux 5.16+) instead of finding new contiguous memory;
    /// without it, advise only says so.
    #[arg(long)]
    pub demote: bool,
    /// The user the memlock lines (limits.d) are for: a login name, `@group`
    /// or `:UID`. Default: the owners of the live segments or the PostgreSQL
    /// data directory the plan counts, else every user (`*`).
    #[arg(long, value_name = "USER", value_parser = advise::parse_memlock_user)]
    pub memlock_user: Option<String>,
    /// A systemd service that runs the server (repeat for more): the plan
    /// gives it a drop-in with `LimitMEMLOCK=`, as limits.d does not apply
    /// to services. Default: the services of the processes that map the
    /// live segments the plan counts.
    #[arg(long, value_name = "UNIT", value_parser = advise::parse_systemd_unit)]
    pub systemd_unit: Vec<String>,
}

impl SourceArgs {
    /// The doctor's sources these options name.
    pub fn sources(&self) -> Sources {
        Sources {
            size: self.size,
            page_size: self.page_size,
            placement: Placement::of(self.node, self.spread),
            postgres: self.postgres.clone(),
            postgres_bin: self.postgres_bin.clone(),
            spec: self.spec.clone(),
            oracle: self.oracle.clone(),
            oracle_sid: self.oracle_sid.clone(),
            dpdk: self.dpdk.clone(),
            jvm: self.jvm.clone(),
            mariadb: self.mariadb.clone(),
            mysql: self.mysql.clone(),
            live: self.live,
            spare: self.spare,
            demote: self.demote,
            memlock_user: self.memlock_user.clone(),
            systemd_units: self.systemd_unit.clone(),
        }
    }

    /// The plan of these sources on `host`: the doctor's
    /// [`Sources::plan`], the spec read by `--spec`'s rules
    /// (`cmd/input_file.rs`); a source the host cannot have (a page size
    /// it does not offer, a bad spec, a number too large) is a usage error.
    pub fn plan(&self, probe: &Probe, host: &HostSnapshot) -> anyhow::Result<Plan> {
        let sources = self.sources();
        let read = |flag: &str, p: &std::path::Path, what: &str| {
            input_file::read(flag, p, what).map_err(|u| u.0)
        };
        sources.plan(probe, host, read).map_err(|e| match e {
            SourceError::PageSize { .. } | SourceError::Spec(_) | SourceError::TooLarge(_) => {
                Usage(e.to_string()).into()
            }
            e => anyhow::Error::new(e),
        })
    }
}
