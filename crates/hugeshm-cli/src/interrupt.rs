//! Ctrl-C (or `SIGTERM`, `SIGHUP`) during a bench or the lab gives back
//! what the run took before the process ends: the huge page pools it
//! raised go back to what they held, the named regions it made are
//! removed, its data files deleted. Without this, an interrupted run left
//! the pools raised (memory the rest of the host could not use) and its
//! regions behind.
//!
//! Whatever takes something registers how to give it back ([`undo`]) and
//! holds the returned [`Undo`]; dropping it (the normal path, which gives
//! the thing back itself) forgets the entry. The first registration starts
//! one thread that waits for the signals. On one it sets the pools back
//! and deletes the files, last taken first, and stops its own worker
//! processes (`SIGTERM` to its children). A region is still mapped by
//! this very process, and removal rightly refuses a held region, so for
//! those the process re-executes itself as `hugeshm bench interrupted`
//! (hidden): the exec drops every mapping and SysV attachment, and the new
//! image removes the regions once the workers have let go ([`finish`]),
//! then exits with 128 + the signal's number, as a shell reports a killed
//! command.

use hugeshm_region::{Backend, Locator, RegionError};
use std::path::PathBuf;
use std::sync::Mutex;

/// What to give back.
#[derive(Debug, Clone)]
pub enum Give {
    /// Write `pages` back into this `nr_hugepages` file.
    Pool {
        /// The sysfs file.
        path: PathBuf,
        /// What it held before.
        pages: u64,
    },
    /// Remove this named region (nothing happens if it is gone or held by
    /// another process: removal refuses then, as always).
    Region {
        /// Its name.
        name: String,
        /// Its backend.
        backend: Backend,
    },
    /// Delete this file.
    File(PathBuf),
}

static PENDING: Mutex<Vec<(u64, Give)>> = Mutex::new(Vec::new());
/// Set by the handler as soon as a signal arrives.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static NEXT: Mutex<u64> = Mutex::new(0);
static HANDLER: Mutex<Handler> = Mutex::new(Handler::NotStarted);

/// The thread that waits for the signals.
enum Handler {
    NotStarted,
    Running(signal_hook::iterator::Handle, std::thread::JoinHandle<()>),
    /// No handler could be installed: an interrupt ends the process as
    /// before.
    Unavailable,
}

/// A registration; dropping it forgets the entry.
#[must_use = "the entry is forgotten when this is dropped"]
#[derive(Debug)]
pub struct Undo(u64);

impl Drop for Undo {
    fn drop(&mut self) {
        let mut p = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        p.retain(|(id, _)| *id != self.0);
    }
}

/// Registers `give` to be done if the process is interrupted before the
/// returned [`Undo`] is dropped.
pub fn undo(give: Give) -> Undo {
    {
        let mut h = HANDLER.lock().unwrap_or_else(|e| e.into_inner());
        if matches!(*h, Handler::NotStarted) {
            *h = start_handler();
        }
    }
    let id = {
        let mut n = NEXT.lock().unwrap_or_else(|e| e.into_inner());
        *n += 1;
        *n
    };
    PENDING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((id, give));
    Undo(id)
}

/// When an interrupt's handler has started, waits for it to end the
/// process (it exits or re-executes); returns at once otherwise. The main
/// thread calls this before it returns, so a run that ends because its
/// workers died of the same Ctrl-C neither exits 0 nor cuts the giving
/// back short.
pub fn wait_if_interrupted() {
    if INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
        loop {
            std::thread::park();
        }
    }
}

/// Runs `f` (a `fork`, which needs a process of one thread) with the
/// handler's thread stopped, and starts it again afterwards. Termination
/// signals that arrive meanwhile (microseconds) are ignored.
pub fn paused<T>(f: impl FnOnce() -> T) -> T {
    let mut h = HANDLER.lock().unwrap_or_else(|e| e.into_inner());
    let was_running = matches!(*h, Handler::Running(..));
    if let Handler::Running(handle, thread) = std::mem::replace(&mut *h, Handler::NotStarted) {
        handle.close();
        let _ = thread.join();
    }
    let out = f();
    if was_running {
        *h = start_handler();
    }
    out
}

fn start_handler() -> Handler {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
        return Handler::Unavailable;
    };
    let handle = signals.handle();
    let thread = std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
            let pending = std::mem::take(&mut *PENDING.lock().unwrap_or_else(|e| e.into_inner()));
            let regions = give_back_now(pending);
            stop_children();
            if regions.is_empty() {
                std::process::exit(128 + sig);
            }
            let exe = std::env::current_exe();
            let mut args = vec![
                "bench".to_owned(),
                "interrupted".to_owned(),
                "--signal".to_owned(),
                sig.to_string(),
            ];
            for (name, backend) in &regions {
                args.push(format!("{backend}:{name}"));
            }
            let err = match exe {
                Ok(exe) => std::os::unix::process::CommandExt::exec(
                    std::process::Command::new(exe).args(&args),
                ),
                Err(e) => e,
            };
            for (name, backend) in &regions {
                eprintln!(
                    "hugeshm: interrupted: could not re-execute to remove the {backend} region {name} ({err}): remove it with hugeshm rm {name} --backend {backend}"
                );
            }
            std::process::exit(128 + sig);
        }
    });
    Handler::Running(handle, thread)
}

/// Gives back the pools and files, last registered first, one line each
/// on stderr; returns the regions, left for [`finish`].
fn give_back_now(mut pending: Vec<(u64, Give)>) -> Vec<(String, Backend)> {
    pending.sort_by_key(|(id, _)| std::cmp::Reverse(*id));
    let mut regions = Vec::new();
    for (_, g) in pending {
        match g {
            Give::Region { name, backend } => regions.push((name, backend)),
            other => eprintln!("hugeshm: interrupted: {}", do_give(&other)),
        }
    }
    regions
}

/// `SIGTERM` to this process's children (the bench's workers).
fn stop_children() {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces and parentheses.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(me) {
            if let Some(p) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::TERM);
            }
        }
    }
}

/// The re-executed image's part (`hugeshm bench interrupted`): removes
/// each `BACKEND:NAME` region, waiting a moment for the stopped workers to
/// let go, says what it did, and returns 128 + `signal`.
pub fn finish(signal: i32, regions: &[String]) -> std::process::ExitCode {
    for r in regions {
        let line = match r.split_once(':').map(|(b, n)| (b.parse::<Backend>(), n)) {
            Some((Ok(backend), name)) => do_give(&Give::Region {
                name: name.to_owned(),
                backend,
            }),
            _ => format!("{r:?} is not BACKEND:NAME"),
        };
        eprintln!("hugeshm: interrupted: {line}");
    }
    std::process::ExitCode::from((128 + signal).clamp(0, 255) as u8)
}

fn do_give(g: &Give) -> String {
    match g {
        Give::Pool { path, pages } => match std::fs::write(path, format!("{pages}\n")) {
            Ok(()) => format!("{} set back to {pages}", path.display()),
            Err(e) => format!(
                "could not set {} back to {pages}: {e} (do it by hand: echo {pages} > {})",
                path.display(),
                path.display()
            ),
        },
        Give::Region { name, backend } => {
            // Our own worker processes got the same Ctrl-C and are exiting:
            // give them a moment to let go of the region.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
            loop {
                match Locator::new(name, *backend).remove() {
                    Ok(_) => break format!("removed the {backend} region {name}"),
                    Err(RegionError::InUse { .. }) if std::time::Instant::now() < deadline => {
                        std::thread::sleep(std::time::Duration::from_millis(50));
                    }
                    Err(RegionError::NotFound { .. }) => {
                        break format!("the {backend} region {name} was already gone")
                    }
                    Err(e) => break format!("the {backend} region {name}: {e}"),
                }
            }
        }
        Give::File(p) => match std::fs::remove_file(p) {
            Ok(()) => format!("deleted {}", p.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                format!("{} was already gone", p.display())
            }
            Err(e) => format!("could not delete {}: {e}", p.display()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gives_back_last_taken_first_and_forgets_dropped_entries() {
        let dir = std::env::temp_dir().join(format!("hugeshm-interrupt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pool = dir.join("nr_hugepages");
        std::fs::write(&pool, "9\n").unwrap();
        let file = dir.join("data");
        std::fs::write(&file, "x").unwrap();
        let kept = dir.join("kept");
        std::fs::write(&kept, "x").unwrap();
        let regions = give_back_now(vec![
            (
                1,
                Give::Pool {
                    path: pool.clone(),
                    pages: 3,
                },
            ),
            (2, Give::File(file.clone())),
            (
                3,
                Give::Region {
                    name: "r".into(),
                    backend: Backend::Sysv,
                },
            ),
        ]);
        assert_eq!(std::fs::read_to_string(&pool).unwrap(), "3\n");
        assert!(!file.exists());
        assert_eq!(regions, [("r".to_owned(), Backend::Sysv)]);
        // A dropped registration is forgotten.
        let u = undo(Give::File(kept.clone()));
        drop(u);
        assert!(!PENDING
            .lock()
            .unwrap()
            .iter()
            .any(|(_, g)| matches!(g, Give::File(p) if *p == kept)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
