//! [`PgCluster`]: a private cluster's life (init, settings, start, stop,
//! drop) and its processes; [`HeldBackend`]: a client connection held open.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::command::{check_setting_name, conf_quote, pg_command_in, run_as, run_output, RunAs};
use super::process::{
    children_of, kill_and_wait, pid_alive, process_title, remove_cluster_dir, sweep_stale_clusters,
};
use super::{pg_bin_dir, pg_unavailable_reason, TEMP_PREFIX, TEMP_ROOT};

/// How long `pg_ctl` waits for start and stop (`-t`), in seconds.
const PG_CTL_TIMEOUT_SECS: u32 = 60;

/// How long [`PgCluster::hold_backend`] waits for the backend pid.
const HOLD_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a [`HeldBackend`] waits for `psql` to exit after closing its
/// stdin before killing it.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

/// Lines of the server log returned with a failed start.
const LOG_TAIL_LINES: usize = 30;

/// Numbers the clusters of this process.
static NEXT_CLUSTER: AtomicU32 = AtomicU32::new(0);

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
