//! What a plan counts, and the one function that makes it: a region of a
//! size, a PostgreSQL data directory, a spec file, the live segments (with
//! the systemd services of the processes that map them), the spare pages,
//! demotion and the memlock users. `hugeshm advise` and `hugeshm apply`
//! fill [`Sources`] from their options and call [`Sources::plan`].

use super::error::{offered_page_size, SourceError};
use super::input::InputText;
use super::model::{Demand, Placement, Plan, Skipped};
use super::{
    add_demotion, crowded_pools, demands_from_segments, keep_room_for_live, live_pages, plan,
    DEFAULT_SPARE_PAGES,
};
use crate::checked;
use crate::segments::Segment;
use hugeshm_parse::size::{format_bytes, MIB};
use hugeshm_probe::{HostSnapshot, Probe};
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// Where a plan's demand comes from, and the settings it is made with
/// (`hugeshm advise`'s and `hugeshm apply`'s options).
#[derive(Debug, Clone)]
pub struct Sources {
    /// A region of this many bytes (an SGA, shared_buffers, a cache).
    pub size: Option<u64>,
    /// The page size of that region (default: the kernel's default huge
    /// page size).
    pub page_size: Option<u64>,
    /// Where that region goes.
    pub placement: Placement,
    /// PostgreSQL data directories whose clusters are asked (`postgres -C`
    /// while one is down, the running server otherwise), each counted.
    pub postgres: Vec<PathBuf>,
    /// The postgres binary (default: found from `PG_VERSION`).
    pub postgres_bin: Option<PathBuf>,
    /// A spec file (TOML), read by the `read_file` of [`Sources::plan`].
    pub spec: Option<PathBuf>,
    /// An Oracle Database text parameter file (pfile), read the same way:
    /// its SGA rounded to its granule, or (under AMM) what replaces AMM.
    pub oracle: Option<PathBuf>,
    /// A running Oracle instance by its SID: the SysV segments its own
    /// processes attach (executable `oracle`, command line naming the SID).
    pub oracle_sid: Option<String>,
    /// A DPDK application's EAL arguments, one string (`-m 1024
    /// --in-memory`): what the EAL preallocates at start.
    pub dpdk: Option<String>,
    /// A JVM: a java command line (one string, split as a shell splits
    /// words) or a running JVM's pid: what it maps on huge pages.
    pub jvm: Option<String>,
    /// A MariaDB server (`Some(None)`: its default option files), or the
    /// option file it is started with: what `large_pages` puts on huge pages.
    pub mariadb: Option<Option<PathBuf>>,
    /// A MySQL 8 server, the same way (SysV segments).
    pub mysql: Option<Option<PathBuf>>,
    /// Also count the shared memory live on the host (the default when no
    /// other source is given).
    pub live: bool,
    /// Spare pages added to each pool (a spec's `spare_pages` wins).
    pub spare: u64,
    /// Demote free pages of a larger pool where a pool grows, rather than
    /// only say that it could.
    pub demote: bool,
    /// The user the memlock lines are for (wins over a spec's); default:
    /// the owners of what is counted, by login name where the host has one.
    pub memlock_user: Option<String>,
    /// The systemd services that get a drop-in (default: a spec's, else the
    /// services of the processes that map the live segments counted).
    pub systemd_units: Vec<String>,
}

impl Default for Sources {
    /// No source (the live segments), [`DEFAULT_SPARE_PAGES`] spare pages.
    fn default() -> Sources {
        Sources {
            size: None,
            page_size: None,
            placement: Placement::Any,
            postgres: Vec::new(),
            postgres_bin: None,
            spec: None,
            oracle: None,
            oracle_sid: None,
            dpdk: None,
            jvm: None,
            mariadb: None,
            mysql: None,
            live: false,
            spare: DEFAULT_SPARE_PAGES,
            demote: false,
            memlock_user: None,
            systemd_units: Vec::new(),
        }
    }
}

impl Sources {
    /// `hugeshm apply` with these sources, one shell word per value: the
    /// command that reserves the plan advise printed.
    pub fn apply_command(&self) -> String {
        use hugeshm_fix::shell_quote as q;
        use hugeshm_parse::size::page_size_short;
        let path = |p: &PathBuf| q(&p.to_string_lossy()).into_owned();
        let mut w = vec!["hugeshm apply".to_owned()];
        let mut opt = |name: &str, value: Option<String>| {
            w.push(match value {
                Some(v) => format!("--{name} {v}"),
                None => format!("--{name}"),
            })
        };
        if let Some(s) = self.size {
            opt("size", Some(page_size_short(s)));
        }
        if let Some(p) = self.page_size {
            opt("page-size", Some(page_size_short(p)));
        }
        match self.placement {
            Placement::Node(n) => opt("node", Some(n.to_string())),
            Placement::Spread => opt("spread", None),
            Placement::Any => {}
        }
        for p in &self.postgres {
            opt("postgres", Some(path(p)));
        }
        if let Some(p) = &self.postgres_bin {
            opt("postgres-bin", Some(path(p)));
        }
        if let Some(p) = &self.spec {
            opt("spec", Some(path(p)));
        }
        if let Some(p) = &self.oracle {
            opt("oracle", Some(path(p)));
        }
        if let Some(s) = &self.oracle_sid {
            opt("oracle-sid", Some(q(s).into_owned()));
        }
        if let Some(a) = &self.dpdk {
            opt("dpdk", Some(q(a).into_owned()));
        }
        if let Some(j) = &self.jvm {
            opt("jvm", Some(q(j).into_owned()));
        }
        for (name, f) in [("mariadb", &self.mariadb), ("mysql", &self.mysql)] {
            match f {
                Some(Some(p)) => opt(name, Some(path(p))),
                Some(None) => opt(name, None),
                None => {}
            }
        }
        if self.live {
            opt("live", None);
        }
        if self.spare != super::DEFAULT_SPARE_PAGES {
            opt("spare", Some(self.spare.to_string()));
        }
        if self.demote {
            opt("demote", None);
        }
        if let Some(u) = &self.memlock_user {
            opt("memlock-user", Some(q(u).into_owned()));
        }
        for u in &self.systemd_units {
            opt("systemd-unit", Some(q(u).into_owned()));
        }
        w.join(" ")
    }

    /// The plan of these sources on `host` (read through `probe`), in this
    /// order: the region of `size`, PostgreSQL, the spec and the Oracle pfile
    /// (each file read by `read_file(flag, path, what)`, whose error is the
    /// reason, naming the file), the live
    /// segments; then the pools, the room a plan of new regions leaves for
    /// live segments, demotion, the systemd units and the memlock users.
    pub fn plan(
        &self,
        probe: &Probe,
        host: &HostSnapshot,
        read_file: impl Fn(&str, &Path, &str) -> Result<InputText, String>,
    ) -> Result<Plan, SourceError> {
        if !host.hugetlb_supported() {
            return Err(SourceError::NoHugetlb);
        }
        let default = host.default_page_size().unwrap_or(2 * MIB);
        let mut demands = Vec::new();
        let mut skipped: Vec<Skipped> = Vec::new();
        let mut spare = self.spare;
        let mut memlock_user = self.memlock_user.clone();
        let mut units = self.systemd_units.clone();
        if let Some(size) = self.size {
            let page = self.page_size.unwrap_or(default);
            offered_page_size(host, page, "--page-size")?;
            demands.push(
                Demand::new(format!("--size {}", format_bytes(size)), size, page)
                    .placed(self.placement),
            );
        }
        for dd in &self.postgres {
            demands.push(postgres_demand(
                probe,
                dd,
                self.postgres_bin.as_deref(),
                default,
            )?);
        }
        if let Some(path) = &self.spec {
            let file = read_file("--spec", path, "a spec").map_err(SourceError::Spec)?;
            let spec = super::spec::spec_demands(host, &file, default)?;
            demands.extend(spec.demands);
            if let Some(s) = spec.spare_pages {
                spare = s;
            }
            // The option's memlock user wins over the spec's.
            memlock_user = memlock_user.or(spec.memlock_user);
            if units.is_empty() {
                units.extend(spec.systemd_unit);
            }
        }
        if let Some(path) = &self.oracle {
            let file = read_file("--oracle", path, "an Oracle pfile").map_err(SourceError::Spec)?;
            let (d, s) = super::oracle::oracle_demands(&file, default)?;
            demands.extend(d);
            skipped.extend(s);
        }
        let mut warnings = Vec::new();
        if let Some(args) = &self.dpdk {
            let (d, s, w) = super::dpdk::dpdk_demands(host, args, default)?;
            demands.extend(d);
            skipped.extend(s);
            warnings = w;
        }
        if let Some(sid) = &self.oracle_sid {
            let units_of = ServiceLookup::new(probe);
            let (d, s) =
                super::oracle::oracle_sid_demands(probe, host, sid, |seg| units_of.services(seg));
            demands.extend(d);
            skipped.extend(s);
        }
        if let Some(spec) = &self.jvm {
            let (d, s) = super::jvm::jvm_demands(probe, host, spec, default)?;
            demands.extend(d);
            skipped.extend(s);
        }
        for (server, f) in [
            (super::Server::MariaDb, &self.mariadb),
            (super::Server::MySql, &self.mysql),
        ] {
            if let Some(file) = f {
                let (d, s) = server_demand(server, file.as_deref(), default, probe)?;
                demands.extend(d);
                skipped.extend(s);
            }
        }
        // A running server (PostgreSQL, an Oracle instance, a JVM's pid)
        // holds its own pages: they are its demand, not live segments to
        // keep room for.
        let running_jvm = self
            .jvm
            .as_deref()
            .is_some_and(|j| j.trim().parse::<u32>().is_ok());
        let named = self.oracle.is_some()
            || self.dpdk.is_some()
            || self.oracle_sid.is_some()
            || self.jvm.is_some()
            || self.mariadb.is_some()
            || self.mysql.is_some();
        let new_regions_only = !demands.is_empty()
            && !self.live
            && self.postgres.is_empty()
            && self.oracle_sid.is_none()
            && !running_jvm;
        if self.live || (demands.is_empty() && !named) {
            // For their sizes and processes: findings are not advise's.
            let segs = crate::segments::build_with(probe, host, &Default::default());
            let units_of = ServiceLookup::new(probe);
            let (d, s) = demands_from_segments(host, &segs, |seg| units_of.services(seg));
            demands.extend(d);
            skipped.extend(s);
        }
        let mut plan = plan(host, &demands, skipped, spare).map_err(SourceError::TooLarge)?;
        plan.warnings.extend(warnings);
        if new_regions_only {
            // Name the live segments only where a pool is crowded by them.
            let crowded = !crowded_pools(&plan, |s, n| live_pages(host, s, n)).is_empty();
            let segs =
                crowded.then(|| crate::segments::build_with(probe, host, &Default::default()));
            keep_room_for_live(&mut plan, host, segs.as_ref());
        }
        add_demotion(&mut plan, host, self.demote);
        if !units.is_empty() {
            plan.config.set_systemd_units(units);
        }
        if memlock_user.is_none() && !demands.is_empty() && demands.iter().all(|d| d.memlock_free) {
            let servers: BTreeSet<&str> = demands
                .iter()
                .filter_map(|d| d.label.split(' ').next())
                .collect();
            let servers: Vec<&str> = servers.into_iter().collect();
            plan.config.without_memlock(format!(
                "the servers counted ({}) map their huge pages with mmap(MAP_HUGETLB), which no \
                 memlock limit binds",
                servers.join(", ")
            ));
            return Ok(plan);
        }
        match memlock_user {
            Some(u) => plan.config.set_memlock_users(vec![u]),
            None => {
                // `:UID` domains read better as the host's login names
                // (where a uid has one name only: a line names one login).
                let users = hugeshm_probe::Users::of(&probe.roots);
                plan.config
                    .name_memlock_users(|uid| users.only_name_of(uid));
            }
        }
        Ok(plan)
    }
}

/// The demand of the PostgreSQL cluster in `dd`, owned by the data
/// directory's owner.
fn postgres_demand(
    probe: &Probe,
    dd: &Path,
    bin: Option<&Path>,
    default: u64,
) -> Result<Demand, SourceError> {
    let pg = hugeshm_probe::postgres::pg_sizing(dd, bin, &probe.roots.proc).map_err(|error| {
        SourceError::Postgres {
            datadir: dd.to_owned(),
            error,
        }
    })?;
    let page = pg.huge_page_size_bytes.unwrap_or(default);
    let owner = std::fs::metadata(dd)
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .map_err(|error| SourceError::DataDir {
            datadir: dd.to_owned(),
            error,
        })?;
    let bytes = match pg.shared_memory_bytes {
        Some(b) => b,
        None => checked::mul(pg.huge_pages, page, || {
            format!("PostgreSQL's {} huge pages: bytes", dd.display())
        })
        .map_err(SourceError::TooLarge)?,
    };
    Ok(
        Demand::new(format!("postgres {}", dd.display()), bytes, page)
            .with_pages(pg.huge_pages)
            .with_note(format!(
                "PostgreSQL {}'s own shared_memory_size_in_huge_pages ({}), huge_pages={}",
                pg.version.as_deref().unwrap_or("?"),
                pg.source,
                pg.huge_pages_setting.as_deref().unwrap_or("?")
            ))
            .owned_by(owner),
    )
}

/// The demand of a MariaDB or MySQL server started with `file` (else its
/// default option files), read by hugeshm-probe's trusted reader.
fn server_demand(
    server: super::Server,
    file: Option<&Path>,
    default: u64,
    probe: &Probe,
) -> Result<(Vec<Demand>, Vec<Skipped>), SourceError> {
    let users = hugeshm_probe::Users::of(&probe.roots);
    let named: Vec<PathBuf> = file.into_iter().map(Path::to_owned).collect();
    let groups = server.groups();
    let (mut settings, read) = hugeshm_probe::option_files::read_option_files(&named, &groups)
        .map_err(|e| SourceError::Spec(format!("{}: {e}", server.flag())))?;
    if server == super::Server::MariaDb {
        ask_running_mariadb(probe, &mut settings, &groups);
    }
    let files = super::mariadb::OptionFiles {
        settings,
        files: read.iter().map(|p| p.display().to_string()).collect(),
        named: file.map(|f| f.display().to_string()),
    };
    super::mariadb::server_demands(server, &files, default, |login| users.ids_of(login))
}

/// Where a `mariadbd` (by its exe link) runs and the socket its option
/// files name (else Debian's) is that process's user's, its own answer
/// for the settings a plan reads wins over the files'.
fn ask_running_mariadb(
    probe: &Probe,
    settings: &mut hugeshm_parse::mycnf::Settings,
    groups: &[String],
) {
    let socket = settings
        .get("socket")
        .and_then(|(v, _)| v.map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/run/mysqld/mysqld.sock"));
    for p in crate::segments::servers::processes_named(probe, &["mariadbd"]) {
        let Ok(m) = std::fs::metadata(probe.proc_path(&p.pid.to_string())) else {
            continue;
        };
        let uid = std::os::unix::fs::MetadataExt::uid(&m);
        let Ok(vars) = hugeshm_probe::mariadb::server_variables(&socket, uid) else {
            continue;
        };
        let version = vars
            .iter()
            .find(|(n, _)| n == "version")
            .map_or("?", |(_, v)| v.split('-').next().unwrap_or(v));
        let from = format!(
            "MariaDB {version}'s running server (pid {}, socket {})",
            p.pid,
            socket.display()
        );
        for (n, v) in vars.iter().filter(|(n, _)| n != "version") {
            settings.add(groups, Some("mysqld"), n, Some(v), &from, 0);
        }
        return;
    }
}

/// The systemd services of the processes that map a segment, each process
/// looked up once: from the hugetlb cgroup the scan read, else (it read
/// none, or on cgroup v1 that path need not be systemd's) from its
/// `/proc/PID/cgroup`.
struct ServiceLookup<'a> {
    probe: &'a Probe,
    of_pid: RefCell<HashMap<u32, Option<String>>>,
}

impl<'a> ServiceLookup<'a> {
    fn new(probe: &'a Probe) -> Self {
        ServiceLookup {
            probe,
            of_pid: RefCell::new(HashMap::new()),
        }
    }

    /// The services of `seg`'s processes, sorted, once each.
    fn services(&self, seg: &Segment) -> Vec<String> {
        let mut cache = self.of_pid.borrow_mut();
        let units: BTreeSet<String> = seg
            .attached
            .iter()
            .filter_map(|a| {
                cache
                    .entry(a.pid)
                    .or_insert_with(|| {
                        a.cgroup
                            .as_deref()
                            .and_then(hugeshm_parse::cgroup::systemd_unit_of_path)
                            .or_else(|| {
                                let f = self.probe.proc_path(&format!("{}/cgroup", a.pid));
                                let text = std::fs::read_to_string(f).ok()?;
                                hugeshm_parse::cgroup::systemd_unit(&text)
                            })
                    })
                    .clone()
            })
            .collect();
        units.into_iter().collect()
    }
}
