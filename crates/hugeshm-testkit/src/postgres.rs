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
//! use hugeshm_testkit::{skip_unless_root, PoolGuard};
//!
//! if skip_unless_root("pg") || skip_unless_postgres("pg") {
//!     return;
//! }
//! let pool = PoolGuard::new().unwrap();
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
//! pool.restore().unwrap();
//! ```

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

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

/// How long `pg_ctl` waits for start and stop (`-t`), in seconds.
const PG_CTL_TIMEOUT_SECS: u32 = 60;

/// How long [`PgCluster::hold_backend`] waits for the backend pid.
const HOLD_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a [`HeldBackend`] waits for `psql` to exit after closing its
/// stdin before killing it.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

/// Lines of the server log returned with a failed start.
const LOG_TAIL_LINES: usize = 30;

/// The binaries a `bin` directory must hold to count as a server install.
const REQUIRED_BINS: [&str; 4] = ["postgres", "initdb", "pg_ctl", "psql"];

/// Numbers the clusters of this process.
static NEXT_CLUSTER: AtomicU32 = AtomicU32::new(0);

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

/// Returns true (and prints a `SKIP` line) when PostgreSQL tests cannot run
/// (see [`pg_unavailable_reason`]); use as
/// `if skip_unless_postgres("name") { return; }`.
pub fn skip_unless_postgres(test: &str) -> bool {
    match pg_unavailable_reason() {
        None => false,
        Some(reason) => {
            println!("SKIP {test}: {reason}");
            true
        }
    }
}

/// Who runs the PostgreSQL programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunAs {
    /// The current (non-root) user.
    Current,
    /// Another user, through `setpriv` (we are root).
    User { uid: u32, gid: u32 },
}

/// `id -u NAME` / `id -g NAME` (goes through NSS like everything else).
fn lookup_user(name: &str) -> Result<(u32, u32), String> {
    let id = |flag: &str| -> Result<u32, String> {
        let out = Command::new(find_tool("id")?)
            .args([flag, name])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run id {flag} {name}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "no OS user {name:?} ({})",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        text.trim()
            .parse()
            .map_err(|e| format!("id {flag} {name}: {e} in {:?}", text.trim()))
    };
    Ok((id("-u")?, id("-g")?))
}

/// Finds a system tool in the usual directories (the child environment is
/// cleared, so we never rely on the caller's `PATH` alone).
fn find_tool(name: &str) -> Result<PathBuf, String> {
    let mut dirs: Vec<PathBuf> = ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        .iter()
        .map(PathBuf::from)
        .collect();
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.into_iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("{name} not found (util-linux/coreutils)"))
}

fn run_as() -> Result<RunAs, String> {
    if crate::is_root() {
        let (uid, gid) = lookup_user(PG_USER)?;
        Ok(RunAs::User { uid, gid })
    } else {
        Ok(RunAs::Current)
    }
}

/// Builds the command line for `program args...` run as `who`, with a clean
/// environment, in `cwd`.
fn pg_command(who: RunAs, program: &Path, cwd: &Path) -> Result<Command, String> {
    pg_command_in(who, program, cwd, None)
}

/// [`pg_command`], started inside the cgroup whose `cgroup.procs` is
/// `cgroup_procs` (through `sh`, which moves itself in, then execs).
fn pg_command_in(
    who: RunAs,
    program: &Path,
    cwd: &Path,
    cgroup_procs: Option<&Path>,
) -> Result<Command, String> {
    let mut cmd = match cgroup_procs {
        Some(procs) => {
            let mut c = Command::new(find_tool("sh")?);
            c.arg("-c")
                .arg("echo $$ > \"$0\" && shift && exec \"$@\"")
                .arg(procs)
                .arg("--");
            c
        }
        None => match who {
            RunAs::Current => Command::new(program),
            RunAs::User { .. } => Command::new(find_tool("setpriv")?),
        },
    };
    match (who, cgroup_procs) {
        (RunAs::Current, None) => {}
        (RunAs::Current, Some(_)) => {
            cmd.arg(program);
        }
        (RunAs::User { uid, gid }, procs) => {
            if procs.is_some() {
                cmd.arg(find_tool("setpriv")?);
            }
            cmd.arg(format!("--reuid={uid}"))
                .arg(format!("--regid={gid}"))
                .arg("--init-groups")
                .arg("--")
                .arg(program);
        }
    }
    cmd.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("LC_ALL", "C")
        .env("LANG", "C")
        .env("HOME", cwd)
        .env("PGCONNECT_TIMEOUT", "10")
        .current_dir(cwd)
        .stdin(Stdio::null());
    Ok(cmd)
}

/// Runs a command to completion; `Err` with status, stdout and stderr when
/// it fails.
fn run_output(mut cmd: Command, what: &str) -> Result<String, String> {
    let out: Output = cmd.output().map_err(|e| format!("{what}: spawn: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        return Ok(stdout);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(format!(
        "{what} failed ({}): {}{}{}",
        out.status,
        stderr.trim(),
        if stderr.trim().is_empty() || stdout.trim().is_empty() {
            ""
        } else {
            " | stdout: "
        },
        stdout.trim()
    ))
}

/// Single-quotes a value for `postgresql.conf`.
fn conf_quote(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "''"))
}

/// Setting names are plain identifiers (`SHOW`/`-C` arguments, conf keys).
fn check_setting_name(name: &str) -> Result<(), String> {
    if !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
    {
        Ok(())
    } else {
        Err(format!("invalid setting name {name:?}"))
    }
}

const MANAGED_BEGIN: &str = "# --- hugeshm-testkit settings (rewritten by PgCluster::set) ---";

/// A process of a cluster: pid and process title (`postgres: checkpointer`,
/// `postgres: postgres postgres [local] idle`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgProcess {
    /// Process id.
    pub pid: u32,
    /// `/proc/PID/cmdline` with NULs as spaces, trimmed (PostgreSQL sets
    /// it to its process title).
    pub title: String,
}

impl PgProcess {
    /// True for a regular client backend (a connection over the socket).
    pub fn is_client_backend(&self) -> bool {
        self.title.contains("[local]")
    }
}

/// A private PostgreSQL cluster in a temporary directory; see the module
/// documentation.
///
/// Layout of [`PgCluster::root`] (mode 0700, owned by the `postgres` user
/// when running as root):
///
/// * `data/`: the data directory ([`PgCluster::datadir`]);
/// * `sock/`: the Unix socket directory ([`PgCluster::socket_dir`]); the
///   server listens on no TCP address;
/// * `postgres.log`: the server log ([`PgCluster::log_path`]).
///
/// Settings live in `data/postgresql.conf` itself: the file `initdb` wrote,
/// followed by a block of `name = 'value'` lines that [`PgCluster::set`]
/// rewrites (later lines win), so `postgres -C` and tools that read the
/// file see them. Initial block: `shared_buffers` (from `init`),
/// `listen_addresses = ''`, `unix_socket_directories`, `port`,
/// `max_connections = 10`, `huge_pages = off`,
/// `dynamic_shared_memory_type = posix`, `fsync = off`.
#[derive(Debug)]
pub struct PgCluster {
    root: PathBuf,
    datadir: PathBuf,
    socket_dir: PathBuf,
    log_path: PathBuf,
    port: u16,
    bin: PathBuf,
    who: RunAs,
    base_conf: String,
    settings: Vec<(String, String)>,
    running: bool,
    /// `cgroup.procs` of the cgroup the server is started in, if any.
    cgroup_procs: Option<PathBuf>,
}

impl PgCluster {
    /// Creates and `initdb`s a new cluster with `shared_buffers` (e.g.
    /// `"128MB"`), not started. Also removes directories left behind by
    /// dead test processes (see [`sweep_stale_clusters`]).
    pub fn init(shared_buffers: &str) -> Result<PgCluster, String> {
        for line in sweep_stale_clusters() {
            eprintln!("hugeshm-testkit: {line}");
        }
        let bin = pg_bin_dir().ok_or_else(|| {
            pg_unavailable_reason().unwrap_or_else(|| "no PostgreSQL found".into())
        })?;
        let who = run_as()?;
        let pid = std::process::id();
        let n = NEXT_CLUSTER.fetch_add(1, Ordering::Relaxed);
        let root = Path::new(TEMP_ROOT).join(format!("{TEMP_PREFIX}{pid}-{n}"));
        if root.exists() {
            // Only possible after pid reuse: a dead process's leftovers.
            remove_cluster_dir(&root, who);
        }
        std::fs::create_dir(&root).map_err(|e| format!("mkdir {}: {e}", root.display()))?;
        // From here on, Drop cleans up whatever exists.
        let mut cluster = PgCluster {
            datadir: root.join("data"),
            socket_dir: root.join("sock"),
            log_path: root.join("postgres.log"),
            root,
            // Any port works (the socket directory is private); vary it
            // anyway so socket names differ between clusters.
            port: 5400 + ((pid + n * 37) % 500) as u16,
            bin,
            who,
            base_conf: String::new(),
            settings: Vec::new(),
            running: false,
            cgroup_procs: None,
        };
        cluster.prepare_dirs()?;
        let mut cmd = cluster.command("initdb")?;
        cmd.arg("-D")
            .arg(&cluster.datadir)
            .args([
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
                "--locale=C",
                "-E",
                "UTF8",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        run_output(cmd, "initdb")?;
        let conf = cluster.conf_path();
        cluster.base_conf =
            std::fs::read_to_string(&conf).map_err(|e| format!("read {}: {e}", conf.display()))?;
        let socket_dir = cluster.socket_dir.to_string_lossy().into_owned();
        let port = cluster.port.to_string();
        for (name, value) in [
            ("shared_buffers", shared_buffers),
            ("listen_addresses", ""),
            ("unix_socket_directories", socket_dir.as_str()),
            ("port", port.as_str()),
            ("max_connections", "10"),
            ("huge_pages", "off"),
            ("dynamic_shared_memory_type", "posix"),
            ("fsync", "off"),
        ] {
            cluster.settings.push((name.to_owned(), value.to_owned()));
        }
        cluster.write_conf()?;
        Ok(cluster)
    }

    fn prepare_dirs(&self) -> Result<(), String> {
        std::fs::create_dir(&self.socket_dir)
            .map_err(|e| format!("mkdir {}: {e}", self.socket_dir.display()))?;
        for dir in [&self.root, &self.socket_dir] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| format!("chmod 700 {}: {e}", dir.display()))?;
            if let RunAs::User { uid, gid } = self.who {
                std::os::unix::fs::chown(dir, Some(uid), Some(gid))
                    .map_err(|e| format!("chown {uid}:{gid} {}: {e}", dir.display()))?;
            }
        }
        Ok(())
    }

    /// A command running `bin/<program>` as the cluster's user.
    fn command(&self, program: &str) -> Result<Command, String> {
        pg_command_in(
            self.who,
            &self.bin.join(program),
            &self.root,
            self.cgroup_procs.as_deref(),
        )
    }

    /// Starts the server (and runs its tools) inside the cgroup whose
    /// directory is `dir` from now on.
    pub fn in_cgroup(&mut self, dir: &Path) {
        self.cgroup_procs = Some(dir.join("cgroup.procs"));
    }

    fn write_conf(&self) -> Result<(), String> {
        let mut text = self.base_conf.clone();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push('\n');
        text.push_str(MANAGED_BEGIN);
        text.push('\n');
        for (name, value) in &self.settings {
            text.push_str(&format!("{name} = {}\n", conf_quote(value)));
        }
        let conf = self.conf_path();
        // initdb created the file as the cluster user; rewriting it in
        // place keeps owner and mode.
        std::fs::write(&conf, text).map_err(|e| format!("write {}: {e}", conf.display()))
    }

    /// Sets `name = 'value'` in `postgresql.conf` (replacing an earlier
    /// value set through this method); takes effect at the next start.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        check_setting_name(name)?;
        match self.settings.iter_mut().find(|(n, _)| n == name) {
            Some(entry) => entry.1 = value.to_owned(),
            None => self.settings.push((name.to_owned(), value.to_owned())),
        }
        self.write_conf()
    }

    /// Removes a setting made through [`PgCluster::set`] (back to the
    /// `initdb` file's value or the built-in default).
    pub fn unset(&mut self, name: &str) -> Result<(), String> {
        self.settings.retain(|(n, _)| n != name);
        self.write_conf()
    }

    /// The temporary directory holding everything (removed on drop).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The data directory (`DATADIR`, what `postgres -D` takes).
    pub fn datadir(&self) -> &Path {
        &self.datadir
    }

    /// The Unix socket directory (`psql -h`).
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// The port (only names the socket: `.s.PGSQL.<port>`).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server log file (`pg_ctl -l`).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// `DATADIR/postgresql.conf`.
    pub fn conf_path(&self) -> PathBuf {
        self.datadir.join("postgresql.conf")
    }

    /// The PostgreSQL `bin` directory in use.
    pub fn bin_dir(&self) -> &Path {
        &self.bin
    }

    /// The uid the server runs as.
    pub fn uid(&self) -> u32 {
        match self.who {
            RunAs::User { uid, .. } => uid,
            RunAs::Current => rustix::process::geteuid().as_raw(),
        }
    }

    /// The major version, from `DATADIR/PG_VERSION` (e.g. 15).
    pub fn major_version(&self) -> Result<u32, String> {
        let path = self.datadir.join("PG_VERSION");
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
        text.trim()
            .split('.')
            .next()
            .unwrap_or("")
            .parse()
            .map_err(|e| format!("{}: {e} in {:?}", path.display(), text.trim()))
    }

    /// `postgres -C SETTING -D DATADIR`, trimmed (e.g.
    /// `shared_memory_size_in_huge_pages` -> `"69"`). Runtime-computed
    /// settings such as that one need the server to be down.
    pub fn postgres_c(&self, setting: &str) -> Result<String, String> {
        check_setting_name(setting)?;
        let mut cmd = self.command("postgres")?;
        cmd.arg("-C")
            .arg(setting)
            .arg("-D")
            .arg(&self.datadir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        run_output(cmd, &format!("postgres -C {setting}")).map(|s| s.trim().to_owned())
    }

    /// Sets `huge_pages` (`"on"`, `"off"` or `"try"`) and starts the server
    /// (`pg_ctl start -w`). On failure the error holds `pg_ctl`'s output and
    /// the tail of this start's server log, e.g. `FATAL: could not map
    /// anonymous shared memory: Cannot allocate memory` when the huge page
    /// pool is short with `huge_pages = on`; no server is left running.
    pub fn start(&mut self, huge_pages: &str) -> Result<(), String> {
        self.start_under(huge_pages, &[])
    }

    /// [`PgCluster::start`] with `pg_ctl` run by a wrapper: `wrapper[0]`
    /// with `wrapper[1..]`, then `pg_ctl` and its arguments (as the
    /// cluster's user, in its cgroup if any), e.g. `hugeshm run --target
    /// postgres --prefault --`. An empty wrapper is a plain start.
    pub fn start_under(
        &mut self,
        huge_pages: &str,
        wrapper: &[std::ffi::OsString],
    ) -> Result<(), String> {
        if !["on", "off", "try"].contains(&huge_pages) {
            return Err(format!(
                "huge_pages must be on, off or try, not {huge_pages:?}"
            ));
        }
        if self.running || self.postmaster_pid().is_some() {
            return Err(format!(
                "cluster {} is already running",
                self.datadir.display()
            ));
        }
        self.set("huge_pages", huge_pages)?;
        let log_start = std::fs::metadata(&self.log_path)
            .map(|m| m.len())
            .unwrap_or(0);
        let mut cmd = match wrapper.split_first() {
            None => self.command("pg_ctl")?,
            Some((program, args)) => {
                let mut c = pg_command_in(
                    self.who,
                    Path::new(program),
                    &self.root,
                    self.cgroup_procs.as_deref(),
                )?;
                c.args(args).arg(self.bin.join("pg_ctl"));
                c
            }
        };
        cmd.arg("-D")
            .arg(&self.datadir)
            .arg("-l")
            .arg(&self.log_path)
            .args(["-w", "-t", &PG_CTL_TIMEOUT_SECS.to_string(), "start"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        match run_output(cmd, &format!("pg_ctl start (huge_pages={huge_pages})")) {
            Ok(_) => {
                self.running = true;
                Ok(())
            }
            Err(e) => {
                // pg_ctl may give up while a slow postmaster is still
                // coming up: make sure none is left.
                if self.postmaster_pid().is_some() {
                    let _ = self.pg_ctl_stop("immediate");
                }
                let log = self.log_since(log_start);
                Err(format!("{e}\n--- server log ---\n{log}"))
            }
        }
    }

    /// The last lines of the server log written after byte `offset`.
    fn log_since(&self, offset: u64) -> String {
        let mut text = Vec::new();
        if let Ok(mut f) = std::fs::File::open(&self.log_path) {
            use std::io::Seek;
            let _ = f.seek(std::io::SeekFrom::Start(offset));
            let _ = f.read_to_end(&mut text);
        }
        let text = String::from_utf8_lossy(&text);
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
    }

    /// The whole server log so far.
    pub fn log(&self) -> String {
        self.log_since(0)
    }

    /// Runs one SQL statement through `psql -X -A -t` on the running server
    /// (as the `postgres` database user) and returns its trimmed output.
    pub fn query(&self, sql: &str) -> Result<String, String> {
        let mut cmd = self.command("psql")?;
        self.psql_args(&mut cmd);
        cmd.arg("-c")
            .arg(sql)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        run_output(cmd, &format!("psql -c {sql:?}")).map(|s| s.trim().to_owned())
    }

    fn psql_args(&self, cmd: &mut Command) {
        cmd.arg("-X")
            .arg("-q")
            .arg("-A")
            .arg("-t")
            .args(["-v", "ON_ERROR_STOP=1"])
            .arg("-h")
            .arg(&self.socket_dir)
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                "postgres",
            ]);
    }

    /// `SHOW SETTING` on the running server, trimmed. An unknown setting is
    /// an `Err` containing `unrecognized configuration parameter`.
    pub fn show(&self, setting: &str) -> Result<String, String> {
        check_setting_name(setting)?;
        self.query(&format!("SHOW {setting}"))
    }

    /// The postmaster's pid from line 1 of `DATADIR/postmaster.pid`, if
    /// that process is alive.
    pub fn postmaster_pid(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.datadir.join("postmaster.pid")).ok()?;
        let pid: u32 = text.lines().next()?.trim().parse().ok()?;
        pid_alive(pid).then_some(pid)
    }

    /// True between a successful [`PgCluster::start`] and
    /// [`PgCluster::stop`] (and while a postmaster is alive).
    pub fn is_running(&self) -> bool {
        self.postmaster_pid().is_some()
    }

    /// Every child of the postmaster (background processes and client
    /// backends) with its process title; empty when not running.
    pub fn backends(&self) -> Vec<PgProcess> {
        let Some(pm) = self.postmaster_pid() else {
            return Vec::new();
        };
        children_of(pm)
            .into_iter()
            .map(|pid| PgProcess {
                pid,
                title: process_title(pid).unwrap_or_default(),
            })
            .collect()
    }

    /// The pids of every child of the postmaster (see
    /// [`PgCluster::backends`]), sorted.
    pub fn backend_pids(&self) -> Vec<u32> {
        self.backends().into_iter().map(|p| p.pid).collect()
    }

    /// The postmaster and all its children: what must be gone after stop.
    pub fn all_pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.postmaster_pid().into_iter().collect();
        pids.extend(self.backend_pids());
        pids
    }

    /// Opens a client connection that stays open (an interactive `psql`
    /// reading SQL from a pipe) so that a regular client backend is
    /// attached to the shared memory while the test inspects it. Returns
    /// once the backend answered `SELECT pg_backend_pid()` (up to 30 s).
    /// The connection closes when the [`HeldBackend`] is released or
    /// dropped; stopping the server also ends it.
    pub fn hold_backend(&self) -> Result<HeldBackend, String> {
        if self.postmaster_pid().is_none() {
            return Err("hold_backend: the server is not running".into());
        }
        let mut cmd = self.command("psql")?;
        self.psql_args(&mut cmd);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| format!("spawn psql: {e}"))?;
        let mut held = HeldBackend {
            stdin: child.stdin.take(),
            child: Some(child),
            backend_pid: 0,
        };
        let (tx, rx) = mpsc::channel::<String>();
        if let Some(stdout) = held.child.as_mut().and_then(|c| c.stdout.take()) {
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        let stderr = held.child.as_mut().and_then(|c| c.stderr.take());
        if let Some(stdin) = held.stdin.as_mut() {
            stdin
                .write_all(b"SELECT pg_backend_pid();\n")
                .and_then(|_| stdin.flush())
                .map_err(|e| format!("write to psql: {e}"))?;
        }
        let deadline = Instant::now() + HOLD_TIMEOUT;
        let line = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.trim().is_empty() => continue,
                Ok(line) => break line,
                Err(_) => {
                    // Timed out or psql exited: report its stderr.
                    held.stdin = None;
                    let _ = held.wait_or_kill(RELEASE_TIMEOUT);
                    let mut msg = String::new();
                    if let Some(mut e) = stderr {
                        let _ = e.read_to_string(&mut msg);
                    }
                    return Err(format!(
                        "psql gave no backend pid within {HOLD_TIMEOUT:?}: {}",
                        msg.trim()
                    ));
                }
            }
        };
        held.backend_pid = line
            .trim()
            .parse()
            .map_err(|e| format!("psql: pg_backend_pid() gave {line:?}: {e}"))?;
        Ok(held)
    }

    /// Runs `pg_ctl stop -m MODE -w`.
    fn pg_ctl_stop(&self, mode: &str) -> Result<(), String> {
        let mut cmd = self.command("pg_ctl")?;
        cmd.arg("-D")
            .arg(&self.datadir)
            .args([
                "-m",
                mode,
                "-w",
                "-t",
                &PG_CTL_TIMEOUT_SECS.to_string(),
                "stop",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        run_output(cmd, &format!("pg_ctl stop -m {mode}")).map(|_| ())
    }

    /// Stops the server (`pg_ctl stop -m fast -w`, then `-m immediate` if
    /// that fails). `Ok` if it was not running.
    pub fn stop(&mut self) -> Result<(), String> {
        if self.postmaster_pid().is_none() {
            self.running = false;
            return Ok(());
        }
        let result = match self.pg_ctl_stop("fast") {
            Ok(()) => Ok(()),
            Err(fast) => self
                .pg_ctl_stop("immediate")
                .map_err(|imm| format!("{fast}; then {imm}")),
        };
        self.running = self.postmaster_pid().is_some();
        result
    }
}

impl Drop for PgCluster {
    /// Stops the server if it runs (fast, then immediate, then `SIGKILL`
    /// to the postmaster) and removes the directory. Never panics; problems
    /// are printed as warnings.
    fn drop(&mut self) {
        if self.postmaster_pid().is_some() {
            if let Err(e) = self.stop() {
                eprintln!("WARNING hugeshm-testkit: {e}");
            }
        }
        if let Some(pid) = self.postmaster_pid() {
            eprintln!(
                "WARNING hugeshm-testkit: postmaster {pid} of {} survived pg_ctl stop; killing it",
                self.datadir.display()
            );
            kill_and_wait(pid);
        }
        if let Err(e) = std::fs::remove_dir_all(&self.root) {
            if e.kind() != std::io::ErrorKind::NotFound {
                eprintln!(
                    "WARNING hugeshm-testkit: remove {}: {e}",
                    self.root.display()
                );
            }
        }
    }
}

/// A client connection held open by [`PgCluster::hold_backend`].
#[derive(Debug)]
pub struct HeldBackend {
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    backend_pid: u32,
}

impl HeldBackend {
    /// The pid of the server backend serving this connection (a child of
    /// the postmaster).
    pub fn backend_pid(&self) -> u32 {
        self.backend_pid
    }

    /// The pid of the `psql` client process.
    pub fn client_pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Closes the connection (EOF to `psql`) and waits for `psql` to exit
    /// (killed after 10 s).
    pub fn release(mut self) -> Result<(), String> {
        self.stdin = None;
        self.wait_or_kill(RELEASE_TIMEOUT)
    }

    fn wait_or_kill(&mut self, timeout: Duration) -> Result<(), String> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let deadline = Instant::now() + timeout;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return Ok(()),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("psql {} did not exit; killed", child.id()));
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("wait for psql {}: {e}", child.id()));
                }
            }
        }
    }
}

impl Drop for HeldBackend {
    fn drop(&mut self) {
        self.stdin = None;
        if let Err(e) = self.wait_or_kill(RELEASE_TIMEOUT) {
            eprintln!("WARNING hugeshm-testkit: {e}");
        }
    }
}

/// True if `/proc/PID` exists and is not a zombie.
fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(stat_fields(&stat).first(), Some(&"Z") | Some(&"X")),
        Err(_) => false,
    }
}

/// The fields of `/proc/PID/stat` after `(comm)`: state, ppid, ...
fn stat_fields(stat: &str) -> Vec<&str> {
    match stat.rfind(')') {
        Some(i) => stat[i + 1..].split_whitespace().collect(),
        None => Vec::new(),
    }
}

/// Pids whose parent is `parent`, sorted.
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out: Vec<u32> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| stat_fields(&s).get(1)?.parse::<u32>().ok())
                == Some(parent)
                && pid_alive(*pid)
        })
        .collect();
    out.sort_unstable();
    out
}

/// `/proc/PID/cmdline` with NULs as spaces, trimmed.
fn process_title(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let text = String::from_utf8_lossy(&raw).replace('\0', " ");
    Some(text.trim().to_owned())
}

/// `SIGKILL`s a process and waits (up to 10 s) until it is gone.
fn kill_and_wait(pid: u32) {
    if let Some(p) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while pid_alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops the server of a leftover cluster directory (if one runs) and
/// removes the directory; best effort.
fn remove_cluster_dir(root: &Path, who: RunAs) {
    let datadir = root.join("data");
    let pm = std::fs::read_to_string(datadir.join("postmaster.pid"))
        .ok()
        .and_then(|t| t.lines().next()?.trim().parse::<u32>().ok())
        .filter(|pid| pid_alive(*pid));
    if let Some(pid) = pm {
        let stopped = pg_bin_dir()
            .ok_or_else(|| "no PostgreSQL".to_owned())
            .and_then(|bin| {
                let mut cmd = pg_command(who, &bin.join("pg_ctl"), Path::new("/"))?;
                cmd.arg("-D")
                    .arg(&datadir)
                    .args(["-m", "immediate", "-w", "-t", "30", "stop"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                run_output(cmd, "pg_ctl stop -m immediate")
            });
        if stopped.is_err() || pid_alive(pid) {
            kill_and_wait(pid);
        }
    }
    let _ = std::fs::remove_dir_all(root);
}

/// Removes cluster directories (`/tmp/hugeshm-pg-<pid>-<n>`) whose creating
/// process is gone, stopping their server first (a test killed before its
/// `Drop` ran leaves a running postmaster holding shared memory and huge
/// pages). Returns one line per directory removed. [`PgCluster::init`]
/// calls it.
pub fn sweep_stale_clusters() -> Vec<String> {
    let mut done = Vec::new();
    let Ok(rd) = std::fs::read_dir(TEMP_ROOT) else {
        return done;
    };
    let who = run_as().unwrap_or(RunAs::Current);
    for entry in rd.filter_map(|e| e.ok()) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(owner) = name
            .strip_prefix(TEMP_PREFIX)
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, n)| {
                n.parse::<u32>().ok()?;
                pid.parse::<u32>().ok()
            })
        else {
            continue;
        };
        if owner == std::process::id() || pid_alive(owner) {
            continue;
        }
        let path = entry.path();
        remove_cluster_dir(&path, who);
        done.push(format!(
            "removed stale PostgreSQL test cluster {} (process {owner} is gone)",
            path.display()
        ));
    }
    done
}

/// One mapping of `/proc/PID/smaps`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SmapsVma {
    /// Start address.
    pub start: u64,
    /// End address (exclusive).
    pub end: u64,
    /// Permissions, e.g. `rw-s` (`s` = shared).
    pub perms: String,
    /// Path or name (`/anon_hugepage (deleted)`, `[heap]`, empty).
    pub path: String,
    /// Numeric fields (`Size`, `KernelPageSize`, `Rss`, `Shared_Hugetlb`,
    /// ...) in kB as printed.
    pub fields: BTreeMap<String, u64>,
}

impl SmapsVma {
    /// `KernelPageSize` in kB.
    pub fn kernel_page_kb(&self) -> Option<u64> {
        self.fields.get("KernelPageSize").copied()
    }

    /// `Size` in kB.
    pub fn size_kb(&self) -> Option<u64> {
        self.fields.get("Size").copied()
    }

    /// True for a `MAP_SHARED` mapping.
    pub fn is_shared(&self) -> bool {
        self.perms.as_bytes().get(3) == Some(&b's')
    }
}

/// Parses smaps text with `hugeshm_parse::smaps` (an unreadable file gives
/// no mappings).
pub fn parse_smaps(text: &str) -> Vec<SmapsVma> {
    let Ok(entries) = hugeshm_parse::smaps::parse(text) else {
        return Vec::new();
    };
    entries
        .into_iter()
        .map(|e| {
            let p = e.map.perms;
            let perms: String = [
                if p.read { 'r' } else { '-' },
                if p.write { 'w' } else { '-' },
                if p.exec { 'x' } else { '-' },
                if p.shared { 's' } else { 'p' },
            ]
            .iter()
            .collect();
            let mut path = e.map.pathname.clone().unwrap_or_default();
            if e.map.deleted {
                path.push_str(" (deleted)");
            }
            let mut fields = BTreeMap::new();
            for (k, v) in [
                ("Size", Some(e.size_bytes)),
                ("KernelPageSize", e.kernel_page_size_bytes),
                ("MMUPageSize", e.mmu_page_size_bytes),
                ("Rss", Some(e.rss_bytes)),
                ("Shared_Hugetlb", e.shared_hugetlb_bytes),
                ("Private_Hugetlb", e.private_hugetlb_bytes),
            ] {
                if let Some(v) = v {
                    fields.insert(k.to_owned(), v / 1024);
                }
            }
            SmapsVma {
                start: e.map.start,
                end: e.map.end,
                perms,
                path,
                fields,
            }
        })
        .collect()
}

/// Reads and parses `/proc/PID/smaps`.
pub fn read_smaps(pid: u32) -> Result<Vec<SmapsVma>, String> {
    let path = format!("/proc/{pid}/smaps");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("read {path}: {e}"))?;
    Ok(parse_smaps(&text))
}

/// The main shared memory area of a PostgreSQL process: the largest shared
/// mapping named [`ANON_HUGEPAGE`] or [`DEV_ZERO`]; `Ok(None)` if there is
/// none.
pub fn main_shm_vma(pid: u32) -> Result<Option<SmapsVma>, String> {
    Ok(read_smaps(pid)?
        .into_iter()
        .filter(|v| v.is_shared() && (v.path == ANON_HUGEPAGE || v.path == DEV_ZERO))
        .max_by_key(|v| v.end - v.start))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
7fe2cf200000-7fe2d7e00000 rw-s 00000000 00:11 63203                      /anon_hugepage (deleted)
Size:             143360 kB
KernelPageSize:     2048 kB
MMUPageSize:        2048 kB
Rss:                   0 kB
Shared_Hugetlb:    10240 kB
Private_Hugetlb:    2048 kB
VmFlags: rd wr sh mr mw me ms de ht sd
7fe2db9e3000-7fe2db9e6000 rw-s 00000000 00:1b 64                         /dev/shm/PostgreSQL.1049989292
Size:                 12 kB
KernelPageSize:        4 kB
Rss:                  12 kB
7fe2db9e6000-7fe2db9e7000 rw-s 00000000 00:01 98310                      /SYSV0098e072 (deleted)
Size:                  4 kB
Rss:                   4 kB
7fe2db9e7000-7fe2db9e8000 rw-p 00000000 00:00 0 
Size:                  4 kB
Rss:                   4 kB
";

    #[test]
    fn parses_smaps_text() {
        let v = parse_smaps(SMAPS);
        assert_eq!(v.len(), 4);
        assert_eq!(v[0].start, 0x7fe2cf200000);
        assert_eq!(v[0].end, 0x7fe2d7e00000);
        assert_eq!(v[0].path, ANON_HUGEPAGE);
        assert!(v[0].is_shared());
        assert_eq!(v[0].kernel_page_kb(), Some(2048));
        assert_eq!(v[0].size_kb(), Some(143360));
        assert_eq!(v[0].fields.get("Shared_Hugetlb"), Some(&10240));
        assert!(!v[0].fields.contains_key("VmFlags"));
        assert_eq!(v[1].path, "/dev/shm/PostgreSQL.1049989292");
        assert_eq!(v[2].path, "/SYSV0098e072 (deleted)");
        assert_eq!(v[3].path, "");
        assert!(!v[3].is_shared());
    }

    #[test]
    fn quotes_conf_values() {
        assert_eq!(conf_quote("128MB"), "'128MB'");
        assert_eq!(conf_quote(""), "''");
        assert_eq!(conf_quote("a'b\\c"), "'a''b\\\\c'");
        assert!(check_setting_name("shared_memory_size_in_huge_pages").is_ok());
        assert!(check_setting_name("x; DROP").is_err());
        assert!(check_setting_name("").is_err());
    }

    #[test]
    fn stat_fields_skip_comm() {
        let f = stat_fields("123 (postgres: a) b) S 77 123 123 0");
        assert_eq!(f[0], "S");
        assert_eq!(f[1], "77");
    }
}
