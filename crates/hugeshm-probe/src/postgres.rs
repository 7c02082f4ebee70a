//! What a PostgreSQL server needs in huge pages, in its own words.
//!
//! PostgreSQL 15+ computes `shared_memory_size_in_huge_pages` itself (its
//! formula rounds its whole shared memory up and adds one page). While the
//! server is down, `postgres -C shared_memory_size_in_huge_pages -D DATADIR`
//! prints it; a running server refuses `-C` for runtime-computed settings,
//! so the running server is asked over its unix socket (`psql ... SHOW`).
//! PostgreSQL refuses to run as root: when hugeshm runs as root it runs
//! these commands as the owner of the data directory (`setpriv`).

use serde::{Deserialize, Serialize};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

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
}

impl Runner {
    fn command(&self, program: &Path) -> Command {
        if self.as_other {
            let mut c = Command::new("setpriv");
            c.arg(format!("--reuid={}", self.uid))
                .arg(format!("--regid={}", self.gid))
                .arg("--clear-groups")
                .arg("--")
                .arg(program);
            c
        } else {
            Command::new(program)
        }
    }

    fn run(&self, program: &Path, args: &[&str], datadir: &Path) -> Result<String, PgError> {
        let mut c = self.command(program);
        c.args(args)
            .current_dir(datadir.parent().unwrap_or(Path::new("/")));
        let line = format!("{} {}", program.display(), args.join(" "));
        let out = c.output().map_err(|e| PgError::Command {
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
    },
}

impl Asker {
    fn show(&self, runner: &Runner, setting: &str, datadir: &Path) -> Result<String, PgError> {
        match self {
            Asker::Running { psql, host, port } => {
                let q = format!("SHOW {setting}");
                runner.run(
                    psql,
                    &["-X", "-h", host, "-p", port, "-d", "postgres", "-Atc", &q],
                    datadir,
                )
            }
            Asker::Down { postgres } => {
                let dd = datadir.display().to_string();
                runner.run(postgres, &["-D", &dd, "-C", setting], datadir)
            }
        }
    }
}

/// The `postgres` binary for a data directory: `bin` if given, else
/// `/usr/lib/postgresql/<PG_VERSION>/bin/postgres` (Debian, Ubuntu), else
/// `/usr/pgsql-<ver>/bin/postgres` (RHEL), else `postgres` on PATH.
pub fn postgres_binary(version: &str, bin: Option<&Path>) -> Result<PathBuf, PgError> {
    if let Some(b) = bin {
        return Ok(b.to_path_buf());
    }
    let candidates = [
        PathBuf::from(format!("/usr/lib/postgresql/{version}/bin/postgres")),
        PathBuf::from(format!("/usr/pgsql-{version}/bin/postgres")),
    ];
    for c in &candidates {
        if c.exists() {
            return Ok(c.clone());
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join("postgres");
            if p.exists() {
                return Ok(p);
            }
        }
    }
    Err(PgError::NoBinary {
        version: version.to_string(),
        looked: candidates
            .iter()
            .map(|c| c.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
            + ", PATH",
    })
}

/// A PostgreSQL major version as `PG_VERSION` holds it: `16`, `9.6`
/// (digits, single dots between): nothing that could climb out of the
/// directory it names.
fn is_version(v: &str) -> bool {
    !v.is_empty()
        && v.split('.')
            .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
}

/// Asks PostgreSQL how many huge pages the cluster in `datadir` needs.
/// `proc_root` tells whether the postmaster in `postmaster.pid` is alive.
pub fn pg_sizing(
    datadir: &Path,
    bin: Option<&Path>,
    proc_root: &Path,
) -> Result<PgSizing, PgError> {
    let dd = datadir.display().to_string();
    // The data directory is the cluster owner's: its files are read
    // through the checked open (no link, no FIFO), a few bytes at most,
    // and the version must be one (it names the binary's directory).
    let version = hugeshm_sys::read_checked(&datadir.join("PG_VERSION"), 64)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .map(|t| t.trim().to_string())
        .filter(|v| is_version(v))
        .ok_or_else(|| PgError::NotADataDir(dd.clone()))?;
    if version.parse::<u32>().is_ok_and(|v| v < 15) {
        return Err(PgError::TooOld(version));
    }
    let postgres = postgres_binary(&version, bin)?;
    let md = std::fs::metadata(datadir).map_err(|_| PgError::NotADataDir(dd.clone()))?;
    let me = std::fs::metadata(proc_root.join("self"))
        .map(|m| m.uid())
        .unwrap_or(u32::MAX);
    let runner = Runner {
        uid: md.uid(),
        gid: md.gid(),
        as_other: me != md.uid(),
    };

    // A running postmaster?
    let pidfile = hugeshm_sys::read_checked(&datadir.join("postmaster.pid"), 4096)
        .ok()
        .and_then(|b| String::from_utf8(b).ok());
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
            let psql = postgres.with_file_name("psql");
            Asker::Running {
                psql: if psql.exists() {
                    psql
                } else {
                    PathBuf::from("psql")
                },
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
        },
    };
    let source = match asker {
        Asker::Running { .. } => "running server",
        Asker::Down { .. } => "postgres -C",
    };
    let show = |setting: &str| asker.show(&runner, setting, datadir);
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
        version: Some(version),
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
        for ok in ["16", "9.6", "17.2"] {
            assert!(is_version(ok), "{ok}");
        }
        for bad in ["", "..", "16/../../../tmp/x", "9..6", ".16", "16.", "x"] {
            assert!(!is_version(bad), "{bad}");
        }
        let dir = std::env::temp_dir().join(format!("hugeshm-pgv-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        let pgv = dir.join("PG_VERSION");
        let not_dd = |what: &str| {
            let e = pg_sizing(&dir, None, Path::new("/proc")).unwrap_err();
            assert!(matches!(e, PgError::NotADataDir(_)), "{what}: {e}");
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
