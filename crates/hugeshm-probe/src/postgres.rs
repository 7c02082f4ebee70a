//! What a PostgreSQL server needs in huge pages, in its own words.
//!
//! PostgreSQL 15+ computes `shared_memory_size_in_huge_pages` itself (its
//! formula rounds its whole shared memory up and adds one page). While the
//! server is down, `postgres -C shared_memory_size_in_huge_pages -D DATADIR`
//! prints it; a running server refuses `-C` for runtime-computed settings,
//! so the running server is asked over its unix socket (`psql ... SHOW`).
//! PostgreSQL refuses to run as root: when hugeshm runs as root it runs
//! these commands as the owner of the data directory (`setpriv`).
//!
//! That owner controls every file in the data directory, so nothing read
//! there chooses what root runs: `PG_VERSION` is read without following a
//! symlink, at most [`PG_VERSION_MAX`] bytes, and must be a major version
//! number; the binary is `/usr/lib/postgresql/N/bin/postgres` or
//! `/usr/pgsql-N/bin/postgres` (or `--postgres-bin`), a regular file owned
//! by root (or the caller) in directories only they can write; it runs with
//! a cleared environment (`PATH=/usr/bin:/bin`, `LC_ALL=C`, `PGDATA`), in
//! a session of its own, with `/` as its working directory.

use hugeshm_sys::DirHandle;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The most bytes `PG_VERSION` may hold ("16\n" is 3).
pub const PG_VERSION_MAX: u64 = 64;
/// The most bytes `postmaster.pid` may hold (a few short lines).
const PIDFILE_MAX: u64 = 4096;
/// The whole `PATH` of the commands run.
const SAFE_PATH: &str = "/usr/bin:/bin";

/// What the server says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PgSizing {
    /// The data directory.
    pub datadir: String,
    /// `shared_memory_size_in_huge_pages` (pages of `huge_page_size_bytes`).
    pub huge_pages: u64,
    /// `huge_page_size` in bytes; `None` = the kernel's default size.
    pub huge_page_size_bytes: Option<u64>,
    /// `shared_memory_size` in bytes (PostgreSQL rounds it up to MB).
    pub shared_memory_bytes: Option<u64>,
    /// `huge_pages` (off, try, on).
    pub huge_pages_setting: Option<String>,
    /// How it was asked: `postgres -C` (server down) or `running server`.
    pub source: String,
    /// The server's major version (`PG_VERSION`).
    pub version: Option<String>,
}

/// Why PostgreSQL could not be asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PgError {
    /// Not a data directory.
    #[error("{0}: not a PostgreSQL data directory (no PG_VERSION)")]
    NotADataDir(String),
    /// A file of the data directory, or the binary, that hugeshm will not
    /// use (a symlink, not a regular file, too large, another user's): the
    /// reason, naming the file.
    #[error("{0}")]
    Refused(String),
    /// `PG_VERSION` holds something other than a major version number.
    #[error(
        "{datadir}/PG_VERSION holds {found}, not a PostgreSQL major version number: refusing it"
    )]
    BadVersion {
        /// The data directory.
        datadir: String,
        /// What it holds (quoted, escaped, cut at 32 characters).
        found: String,
    },
    /// No server binary.
    #[error("no postgres binary for version {version} (looked in {looked}); pass --postgres-bin")]
    NoBinary {
        /// The version.
        version: String,
        /// Where.
        looked: String,
    },
    /// The command failed.
    #[error("{command} failed: {output}")]
    Command {
        /// The command line.
        command: String,
        /// Its stderr/stdout.
        output: String,
    },
    /// The server is too old.
    #[error("PostgreSQL {0} does not compute shared_memory_size_in_huge_pages (needs 15 or newer): use --size with its shared memory size")]
    TooOld(String),
    /// PostgreSQL says huge pages are not supported here (-1).
    #[error("PostgreSQL reports shared_memory_size_in_huge_pages = -1: huge pages are not supported on this platform or with these settings")]
    Unsupported,
}

/// A size setting as PostgreSQL prints it: `SHOW` gives a unit ("143MB",
/// "2MB", "1GB", "8kB"); `postgres -C` gives a bare number in the
/// setting's base unit (`base_unit` bytes: MB for `shared_memory_size`, kB
/// for `huge_page_size`).
fn pg_size(text: &str, base_unit: u64) -> Option<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: u64 = n.parse().ok()?;
    let mult = match unit {
        "" => base_unit,
        "B" => 1,
        "kB" => 1 << 10,
        "MB" => 1 << 20,
        "GB" => 1 << 30,
        "TB" => 1 << 40,
        _ => return None,
    };
    n.checked_mul(mult)
}

struct Runner {
    uid: u32,
    gid: u32,
    as_other: bool,
    /// The data directory, absolute (`PGDATA`).
    datadir: PathBuf,
}

impl Runner {
    /// `program ARGS` (through `setpriv` as the data directory's owner when
    /// that is not the caller) with only `PATH=/usr/bin:/bin`, `LC_ALL=C`
    /// and `PGDATA` in its environment, `/` as its directory, no standard
    /// input, in a session of its own.
    fn command(&self, program: &Path, args: &[&str]) -> Command {
        let mut c = if self.as_other {
            let mut c = Command::new("setpriv");
            c.arg(format!("--reuid={}", self.uid))
                .arg(format!("--regid={}", self.gid))
                .arg("--clear-groups")
                .arg("--")
                .arg(program);
            c
        } else {
            Command::new(program)
        };
        c.args(args)
            .env_clear()
            .env("PATH", SAFE_PATH)
            .env("LC_ALL", "C")
            .env("PGDATA", &self.datadir)
            .current_dir("/")
            .stdin(Stdio::null());
        hugeshm_sys::in_new_session(&mut c);
        c
    }

    fn run(&self, program: &Path, args: &[&str]) -> Result<String, PgError> {
        let line = format!("{} {}", program.display(), args.join(" "));
        let out = self
            .command(program, args)
            .output()
            .map_err(|e| PgError::Command {
                command: line.clone(),
                output: e.to_string(),
            })?;
        if !out.status.success() {
            let mut msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
            if msg.is_empty() {
                msg = String::from_utf8_lossy(&out.stdout).trim().to_string();
            }
            return Err(PgError::Command {
                command: line,
                output: format!("{} ({})", msg, out.status),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

/// How a setting is asked: the running server over its socket, or `postgres -C`.
enum Asker {
    Running {
        psql: PathBuf,
        host: String,
        port: String,
    },
    Down {
        postgres: PathBuf,
        /// Where the configuration is not in the data directory (Debian's
        /// /etc/postgresql/VERSION/NAME): its postgresql.conf.
        config_file: Option<PathBuf>,
    },
}

impl Asker {
    fn show(&self, runner: &Runner, setting: &str) -> Result<String, PgError> {
        match self {
            Asker::Running { psql, host, port } => {
                let q = format!("SHOW {setting}");
                runner.run(
                    psql,
                    &["-X", "-h", host, "-p", port, "-d", "postgres", "-Atc", &q],
                )
            }
            Asker::Down {
                postgres,
                config_file,
            } => {
                let dd = runner.datadir.display().to_string();
                match config_file {
                    // ssl=off: -C computes sizes; the key file Debian's
                    // configuration names is readable only by ssl-cert.
                    Some(conf) => {
                        let conf = format!("config_file={}", conf.display());
                        let args = ["-D", &dd, "-c", &conf, "-c", "ssl=off", "-C", setting];
                        runner.run(postgres, &args)
                    }
                    None => runner.run(postgres, &["-D", &dd, "-C", setting]),
                }
            }
        }
    }
}

/// Where Debian's clusters keep their configuration: VERSION/NAME/postgresql.conf.
const DEBIAN_CONF_ROOT: &str = "/etc/postgresql";
/// The most bytes of a postgresql.conf read to find its `data_directory`.
const CONF_MAX: u64 = 1 << 20;

/// A Debian cluster's postgresql.conf (`conf_root/VERSION/NAME/`) whose
/// `data_directory` is `datadir`: `postgres -C` of the data directory alone
/// cannot find it, as `pg_ctlcluster` passes it as `config_file`. Only a
/// file of root's or of the data directory's owner (who runs `-C` and owns
/// the data anyway) that nobody else can write.
fn debian_config_file(
    conf_root: &Path,
    version: u32,
    datadir: &Path,
    owner: u32,
) -> Option<PathBuf> {
    let base = conf_root.join(version.to_string());
    let want = std::fs::canonicalize(datadir).ok()?;
    let mut names: Vec<String> = std::fs::read_dir(&base)
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    names.into_iter().find_map(|name| {
        let dir = DirHandle::open(&base.join(&name)).ok()?;
        let (text, own) = dir.read_regular("postgresql.conf", CONF_MAX).ok()??;
        if (own.uid != 0 && own.uid != owner) || own.mode & 0o022 != 0 {
            return None;
        }
        let named = data_directory(&String::from_utf8_lossy(&text))?;
        (std::fs::canonicalize(named).ok()? == want).then(|| dir.path().join("postgresql.conf"))
    })
}

/// The last `data_directory = '...'` of a postgresql.conf's text.
fn data_directory(conf: &str) -> Option<String> {
    conf.lines().rev().find_map(|line| {
        let rest = line.trim_start().strip_prefix("data_directory")?;
        let rest = rest.trim_start();
        let rest = rest.strip_prefix('=').unwrap_or(rest).trim_start();
        let value = rest.strip_prefix('\'')?;
        Some(value[..value.find('\'')?].to_owned())
    })
}

/// The major version in the text of `PG_VERSION`: digits ("16"), or the
/// two numbers of a release before 10 ("9.6", too old: [`PgError::TooOld`]).
/// Anything else (a path, a word, a number too large) is refused.
pub(crate) fn major_version(text: &[u8], datadir: &str) -> Result<u32, PgError> {
    let t = std::str::from_utf8(text).unwrap_or("").trim();
    let digits = |p: &str| !p.is_empty() && p.len() <= 4 && p.bytes().all(|b| b.is_ascii_digit());
    match t.split_once('.') {
        None if digits(t) => t.parse().map_err(|_| bad_version(text, datadir)),
        Some((a, b)) if digits(a) && digits(b) => Err(PgError::TooOld(t.to_owned())),
        _ => Err(bad_version(text, datadir)),
    }
}

fn bad_version(text: &[u8], datadir: &str) -> PgError {
    let shown: String = String::from_utf8_lossy(text).chars().take(32).collect();
    PgError::BadVersion {
        datadir: datadir.to_owned(),
        found: format!("{shown:?}"),
    }
}

/// The `postgres` binary of major version `version`: `bin` if given, else
/// `/usr/lib/postgresql/<version>/bin/postgres` (Debian, Ubuntu), else
/// `/usr/pgsql-<version>/bin/postgres` (RHEL); never one found on `PATH`.
/// Refused unless it is a regular file owned by root (or the caller) that
/// nobody else can write, in directories only they can write
/// ([`hugeshm_sys::check_trusted_file`]).
pub fn postgres_binary(version: u32, bin: Option<&Path>) -> Result<PathBuf, PgError> {
    let trusted = |p: &Path| {
        hugeshm_sys::check_trusted_file(p)
            .map(|_| p.to_path_buf())
            .map_err(|e| PgError::Refused(e.to_string()))
    };
    if let Some(b) = bin {
        return trusted(b);
    }
    let candidates = [
        PathBuf::from(format!("/usr/lib/postgresql/{version}/bin/postgres")),
        PathBuf::from(format!("/usr/pgsql-{version}/bin/postgres")),
    ];
    for c in &candidates {
        if c.symlink_metadata().is_ok() {
            return trusted(c);
        }
    }
    Err(PgError::NoBinary {
        version: version.to_string(),
        looked: candidates
            .iter()
            .map(|c| c.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// Asks PostgreSQL how many huge pages the cluster in `datadir` needs.
/// `proc_root` tells whether the postmaster in `postmaster.pid` is alive.
pub fn pg_sizing(
    datadir: &Path,
    bin: Option<&Path>,
    proc_root: &Path,
) -> Result<PgSizing, PgError> {
    let dd = datadir.display().to_string();
    let refused = |e: std::io::Error| PgError::Refused(e.to_string());
    let dir = DirHandle::open(datadir).map_err(|_| PgError::NotADataDir(dd.clone()))?;
    let (text, _) = dir
        .read_regular("PG_VERSION", PG_VERSION_MAX)
        .map_err(refused)?
        .ok_or_else(|| PgError::NotADataDir(dd.clone()))?;
    let version = major_version(&text, &dd)?;
    if version < 15 {
        return Err(PgError::TooOld(version.to_string()));
    }
    let postgres = postgres_binary(version, bin)?;
    let owner = dir.owner().map_err(refused)?;
    let runner = Runner {
        uid: owner.uid,
        gid: owner.gid,
        as_other: hugeshm_sys::euid() != owner.uid,
        datadir: std::path::absolute(datadir).map_err(refused)?,
    };

    // A running postmaster?
    let pidfile = dir
        .read_regular("postmaster.pid", PIDFILE_MAX)
        .ok()
        .flatten()
        .map(|(b, _)| String::from_utf8_lossy(&b).into_owned());
    let running = pidfile.as_ref().and_then(|t| {
        let lines: Vec<&str> = t.lines().collect();
        let pid: u32 = lines.first()?.trim().parse().ok()?;
        proc_root.join(pid.to_string()).exists().then(|| {
            let port = lines
                .get(3)
                .map(|s| s.trim().to_string())
                .unwrap_or_default();
            let sock = lines
                .get(4)
                .map(|s| s.trim().to_string())
                .unwrap_or_default();
            (port, sock)
        })
    });

    let asker = match &running {
        Some((port, sock)) => {
            // Beside the server binary, checked the same way.
            let psql = postgres.with_file_name("psql");
            hugeshm_sys::check_trusted_file(&psql).map_err(refused)?;
            Asker::Running {
                psql,
                host: if sock.is_empty() {
                    "/var/run/postgresql".to_string()
                } else {
                    sock.clone()
                },
                port: port.clone(),
            }
        }
        None => Asker::Down {
            postgres: postgres.clone(),
            config_file: dir
                .read_regular("postgresql.conf", CONF_MAX)
                .ok()
                .flatten()
                .is_none()
                .then(|| {
                    debian_config_file(Path::new(DEBIAN_CONF_ROOT), version, datadir, owner.uid)
                })
                .flatten(),
        },
    };
    let source = match asker {
        Asker::Running { .. } => "running server",
        Asker::Down { .. } => "postgres -C",
    };
    let show = |setting: &str| asker.show(&runner, setting);
    let pages_text = show("shared_memory_size_in_huge_pages")?;
    let pages: i64 = pages_text.trim().parse().map_err(|_| PgError::Command {
        command: "shared_memory_size_in_huge_pages".into(),
        output: format!("unexpected value {pages_text:?}"),
    })?;
    if pages < 0 {
        return Err(PgError::Unsupported);
    }
    let hps = show("huge_page_size")
        .ok()
        .and_then(|t| pg_size(&t, 1 << 10))
        .filter(|b| *b > 0);
    let shm = show("shared_memory_size")
        .ok()
        .and_then(|t| pg_size(&t, 1 << 20));
    let setting = show("huge_pages").ok();
    Ok(PgSizing {
        datadir: dd,
        huge_pages: pages as u64,
        huge_page_size_bytes: hps,
        shared_memory_bytes: shm,
        huge_pages_setting: setting,
        source: source.to_string(),
        version: Some(version.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        const MB: u64 = 1 << 20;
        assert_eq!(pg_size("143MB", MB), Some(143 << 20));
        assert_eq!(pg_size("0", MB), Some(0));
        assert_eq!(pg_size("2MB", 1024), Some(2 << 20));
        assert_eq!(pg_size("1GB", MB), Some(1 << 30));
        assert_eq!(pg_size("lots", MB), None);
        assert_eq!(pg_size("1PB", MB), None);
        // `postgres -C` prints the base unit's number without the unit:
        // shared_memory_size is in MB, huge_page_size in kB.
        assert_eq!(pg_size("326", MB), Some(326 << 20));
        assert_eq!(pg_size("2048", 1024), Some(2 << 20));
        assert_eq!(pg_size("18446744073709551615", MB), None);
    }

    #[test]
    fn only_a_major_version_number_is_accepted() {
        assert_eq!(major_version(b"16\n", "/d").unwrap(), 16);
        assert_eq!(major_version(b"15", "/d").unwrap(), 15);
        assert!(matches!(major_version(b"9.6\n", "/d"), Err(PgError::TooOld(v)) if v == "9.6"));
        for bad in [
            &b"../../../../tmp/evil"[..],
            b"15/../../../tmp/evil",
            b"15abc",
            b"",
            b"-15",
            b"99999",
            b"1.2.3",
            b"\x1b]0;owned\x07",
        ] {
            let e = major_version(bad, "/d").unwrap_err();
            assert!(matches!(e, PgError::BadVersion { .. }), "{bad:?}: {e}");
            let said = e.to_string();
            assert!(said.contains("/d/PG_VERSION holds"), "{said}");
            assert!(!said.contains('\x1b'), "{said}");
        }
    }

    #[test]
    fn commands_get_only_path_locale_and_pgdata() {
        let r = Runner {
            uid: 65534,
            gid: 65534,
            as_other: true,
            datadir: PathBuf::from("/srv/pg/data"),
        };
        let c = r.command(
            Path::new("/usr/lib/postgresql/16/bin/postgres"),
            &["-C", "x"],
        );
        assert_eq!(c.get_program(), "setpriv");
        let args: Vec<_> = c.get_args().collect();
        assert_eq!(
            args,
            [
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--",
                "/usr/lib/postgresql/16/bin/postgres",
                "-C",
                "x"
            ]
        );
        let mut env: Vec<_> = c
            .get_envs()
            .map(|(k, v)| (k.to_owned(), v.map(|v| v.to_owned())))
            .collect();
        env.sort();
        let set = |k: &str, v: &str| (k.into(), Some(v.into()));
        assert_eq!(
            env,
            [
                set("LC_ALL", "C"),
                set("PATH", "/usr/bin:/bin"),
                set("PGDATA", "/srv/pg/data")
            ]
        );
        assert_eq!(c.get_current_dir(), Some(Path::new("/")));
    }

    #[test]
    fn a_debian_cluster_is_found_by_its_data_directory() {
        let conf = "#data_directory = '/nope'\ndata_directory = '/srv/pg'\t\t# use data in another directory\n";
        assert_eq!(data_directory(conf).as_deref(), Some("/srv/pg"));
        assert_eq!(data_directory("data_directory = unquoted\n"), None);
        let t = hugeshm_testkit::TempDir::new("pg-conf");
        let dd = t.path().join("data");
        std::fs::create_dir(&dd).unwrap();
        let me = hugeshm_sys::euid();
        for (name, target) in [("other", "/elsewhere"), ("main", dd.to_str().unwrap())] {
            let d = t.path().join("etc/15").join(name);
            std::fs::create_dir_all(&d).unwrap();
            let text = format!("data_directory = '{target}'\n");
            std::fs::write(d.join("postgresql.conf"), text).unwrap();
        }
        let found = debian_config_file(&t.path().join("etc"), 15, &dd, me);
        assert_eq!(found, Some(t.path().join("etc/15/main/postgresql.conf")));
        assert_eq!(debian_config_file(&t.path().join("etc"), 16, &dd, me), None);
        // A file others can write names nothing.
        let conf = t.path().join("etc/15/main/postgresql.conf");
        std::fs::set_permissions(&conf, std::os::unix::fs::PermissionsExt::from_mode(0o666))
            .unwrap();
        assert_eq!(debian_config_file(&t.path().join("etc"), 15, &dd, me), None);
    }

    #[test]
    fn not_a_datadir() {
        let e = pg_sizing(Path::new("/nonexistent/dir"), None, Path::new("/proc")).unwrap_err();
        assert!(
            e.to_string().contains("not a PostgreSQL data directory"),
            "{e}"
        );
    }

    /// The cluster owner writes the data directory: a PG_VERSION that is
    /// a FIFO (which a plain read waited on forever), a link to another
    /// file, or a "version" that climbs out of /usr/lib/postgresql (which
    /// chose the binary run) is not a data directory.
    #[test]
    fn a_hostile_pg_version_is_not_a_data_directory() {
        let dir = std::env::temp_dir().join(format!("hugeshm-pgv-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        let pgv = dir.join("PG_VERSION");
        let not_dd = |what: &str| {
            let e = pg_sizing(&dir, None, Path::new("/proc")).unwrap_err();
            assert!(
                matches!(
                    e,
                    PgError::NotADataDir(_) | PgError::Refused(_) | PgError::BadVersion { .. }
                ),
                "{what}: {e}"
            );
        };
        let made = std::process::Command::new("mkfifo").arg(&pgv).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        not_dd("a FIFO");
        std::fs::remove_file(&pgv).unwrap();
        let real = dir.join("real");
        std::fs::write(&real, "16\n").unwrap();
        std::os::unix::fs::symlink(&real, &pgv).unwrap();
        not_dd("a link");
        std::fs::remove_file(&pgv).unwrap();
        std::fs::write(&pgv, "../../../../tmp/evil\n").unwrap();
        not_dd("a path");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
