//! Ctrl-C (or `SIGTERM`, `SIGHUP`) during a bench or the lab gives back
//! what the run took before the process ends: the huge page pools it
//! raised go back to what they held, the named regions it made are
//! removed, its data files deleted. Without this, an interrupted run left
//! the pools raised (memory the rest of the host could not use) and its
//! regions behind.
//!
//! Whatever takes something (a [`Taken`]: pool pages, a region, a private
//! directory) registers it ([`crate::guard::undo`]) and holds the
//! returned `Undo`; dropping it (the normal path, which gives the thing
//! back itself) forgets the entry. This module is the program's
//! [`Keeper`] of those entries ([`install`]). The first registration
//! starts one thread that waits for the signals. On one it sets the pools back and deletes the files,
//! last taken first, and stops its own worker processes (`SIGTERM` to its
//! children). A region is still mapped by this very process, and removal
//! rightly refuses a held region, so for those the process re-executes
//! itself with the program's `interrupted` command ([`Setup`]; `hugeshm bench interrupted`, hidden): the exec drops every
//! mapping and SysV attachment, and the new image removes the regions
//! once the workers have let go ([`finish`]), then exits with 128 + the
//! signal's number, as a shell reports a killed command.
//!
//! `SIGKILL` (the OOM killer's, or `kill -9`) cannot be caught, and a
//! killed bench left its pools raised: 14 GiB of 2 MiB pages sat reserved
//! and unused after the OOM killer ended one. So the first registration
//! also starts a watchdog, a child process (the program's `watchdog`
//! command: `hugeshm bench watchdog`, hidden) that hears every registration and every forgotten one on a
//! pipe. When the pipe closes without the run saying it is done, the run
//! died: the watchdog removes its regions (once the workers, who see their
//! parent gone, let go), then sets the pools back and deletes the files,
//! and says so on stderr.
//!
//! It prints nothing itself: each line goes to the program's
//! [`Setup::say`].

use crate::guard::{Keeper, Taken};
use hugeshm_region::Backend;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::sync::Mutex;
use std::time::Duration;

static PENDING: Mutex<Vec<(u64, Taken)>> = Mutex::new(Vec::new());
/// Set by the handler as soon as a signal arrives.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static NEXT: Mutex<u64> = Mutex::new(0);
static HANDLER: Mutex<Handler> = Mutex::new(Handler::NotStarted);
static WATCHDOG: Mutex<Watchdog> = Mutex::new(Watchdog::Off);
static SETUP: std::sync::OnceLock<Setup> = std::sync::OnceLock::new();

/// What the program hands the keeper: how it says a line on stderr, and
/// its hidden commands that the watchdog and the re-executed image run.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    /// Says one line on stderr (the program's safe way out).
    pub say: fn(std::fmt::Arguments<'_>),
    /// The arguments that run [`watch`] (`["bench", "watchdog"]`).
    pub watchdog: &'static [&'static str],
    /// The arguments that run [`finish`], before `--signal N` and the
    /// regions (`["bench", "interrupted"]`).
    pub interrupted: &'static [&'static str],
}

/// Says a line through the program's [`Setup::say`] (nothing before
/// [`install`]: unit tests).
fn say(line: impl std::fmt::Display) {
    if let Some(s) = SETUP.get() {
        (s.say)(format_args!("{line}"));
    }
}

/// The run's watchdog: a child process that gives back what the run took
/// if the run dies without doing so (`SIGKILL`); it learns what was taken
/// on its stdin, a pipe whose end tells it the run is gone.
enum Watchdog {
    /// Not wanted (unit tests: this executable is not `hugeshm`).
    Off,
    /// Started with the first registration ([`install`]).
    Enabled,
    /// Running: the write end of its pipe.
    Running(std::process::ChildStdin),
    /// Could not be started, or went away: nothing more is sent.
    Failed,
}

/// What a run tells its watchdog, a JSON line each.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Msg {
    /// Give this back if the run dies.
    Add { id: u64, taken: Taken },
    /// Given back (or kept on purpose) by the run itself.
    Forget { id: u64 },
    /// The run's interrupt handler gives back everything itself.
    Done,
}

/// The thread that waits for the signals.
enum Handler {
    NotStarted,
    Running(signal_hook::iterator::Handle, std::thread::JoinHandle<()>),
    /// No handler could be installed: an interrupt ends the process as
    /// before.
    Unavailable,
}

/// Makes this module the keeper of what runs take
/// ([`crate::guard::set_keeper`]) and lets the first registration start
/// a watchdog (`hugeshm`'s `main` does; see the module's text).
pub fn install(setup: Setup) {
    let _ = SETUP.set(setup);
    crate::guard::set_keeper(Box::new(Ledger));
    let mut k = WATCHDOG.lock().unwrap_or_else(|e| e.into_inner());
    if matches!(*k, Watchdog::Off) {
        *k = Watchdog::Enabled;
    }
}

/// Sends `msg` to the watchdog, starting it first if `start`.
fn tell(msg: &Msg, start: bool) {
    let mut k = WATCHDOG.lock().unwrap_or_else(|e| e.into_inner());
    if start && matches!(*k, Watchdog::Enabled) {
        *k = start_watchdog();
    }
    if let Watchdog::Running(pipe) = &mut *k {
        let mut line = serde_json::to_string(msg).expect("a message serializes");
        line.push('\n');
        if pipe.write_all(line.as_bytes()).is_err() {
            *k = Watchdog::Failed;
        }
    }
}

fn start_watchdog() -> Watchdog {
    // The write end is close-on-exec, so the workers this run starts do
    // not hold it; the watchdog's stderr is the run's.
    let spawned = std::env::current_exe().and_then(|exe| {
        std::process::Command::new(exe)
            .args(SETUP.get().map(|s| s.watchdog).unwrap_or_default())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
    });
    match spawned.map(|mut c| c.stdin.take()) {
        Ok(Some(pipe)) => Watchdog::Running(pipe),
        Ok(None) => Watchdog::Failed,
        Err(e) => {
            say(format_args!(
                "hugeshm: warning: no watchdog process ({e}): if this run is killed with SIGKILL, \
                 the pools it raised and the regions it made stay behind"
            ));
            Watchdog::Failed
        }
    }
}

/// The binary's [`Keeper`]: its entries are what the interrupt handler
/// and the watchdog give back.
struct Ledger;

impl Keeper for Ledger {
    fn add(&self, taken: &Taken) -> u64 {
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
        // The watchdog hears of it before the thing is taken.
        tell(
            &Msg::Add {
                id,
                taken: taken.clone(),
            },
            true,
        );
        PENDING
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((id, taken.clone()));
        id
    }

    fn update(&self, id: u64, taken: &Taken) {
        tell(
            &Msg::Add {
                id,
                taken: taken.clone(),
            },
            false,
        );
        let mut p = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = p.iter_mut().find(|(i, _)| *i == id) {
            entry.1 = taken.clone();
        }
    }

    fn forget(&self, id: u64) -> bool {
        let mut p = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        let at = p.iter().position(|(i, _)| *i == id);
        if let Some(at) = at {
            p.remove(at);
        }
        drop(p);
        tell(&Msg::Forget { id }, false);
        at.is_some()
    }

    fn paused(&self, f: &mut dyn FnMut()) {
        paused(f)
    }
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
fn paused(f: &mut dyn FnMut()) {
    let mut h = HANDLER.lock().unwrap_or_else(|e| e.into_inner());
    let was_running = matches!(*h, Handler::Running(..));
    if let Handler::Running(handle, thread) = std::mem::replace(&mut *h, Handler::NotStarted) {
        handle.close();
        let _ = thread.join();
    }
    f();
    if was_running {
        *h = start_handler();
    }
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
            tell(&Msg::Done, false);
            let pending = std::mem::take(&mut *PENDING.lock().unwrap_or_else(|e| e.into_inner()));
            if pending.is_empty() {
                // The run's own path got there first (its workers died of
                // the same Ctrl-C).
                say("hugeshm: interrupted: the run had given back what it took");
            }
            let regions = give_back_now(pending);
            stop_children();
            // A give-back the run's own path has under way ends first.
            crate::guard::wait_for_claims();
            if regions.is_empty() {
                std::process::exit(128 + sig);
            }
            let mut args: Vec<String> = SETUP
                .get()
                .map(|s| s.interrupted)
                .unwrap_or_default()
                .iter()
                .map(|a| a.to_string())
                .collect();
            args.extend(["--signal".to_owned(), sig.to_string()]);
            for (name, backend) in &regions {
                args.push(format!("{backend}:{name}"));
            }
            // Not std's exec: it sets SIGPIPE back to its default first,
            // and the main thread, writing to a worker that died of the
            // same Ctrl-C, would be killed by it before the execve.
            let err = hugeshm_sys::exec_self(&args);
            for (name, backend) in &regions {
                say(format_args!(
                    "hugeshm: interrupted: could not re-execute to remove the {backend} region {name} ({err}): remove it with hugeshm rm {name} --backend {backend}"
                ));
            }
            std::process::exit(128 + sig);
        }
    });
    Handler::Running(handle, thread)
}

/// Gives back the pools and files, last registered first, one line each
/// on stderr; returns the regions, left for [`finish`].
fn give_back_now(mut pending: Vec<(u64, Taken)>) -> Vec<(String, Backend)> {
    pending.sort_by_key(|(id, _)| std::cmp::Reverse(*id));
    let mut regions = Vec::new();
    for (_, g) in pending {
        match g {
            Taken::Region { name, backend } => regions.push((name, backend)),
            other => say(format_args!(
                "hugeshm: interrupted: {}",
                other.give_back(WORKERS_STOPPED)
            )),
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

/// The re-executed image's part ([`Setup::interrupted`]): removes
/// each `BACKEND:NAME` region, waiting a moment for the stopped workers to
/// let go, says what it did, and returns 128 + `signal`.
pub fn finish(signal: i32, regions: &[String]) -> std::process::ExitCode {
    for r in regions {
        let line = match r.split_once(':').map(|(b, n)| (b.parse::<Backend>(), n)) {
            Some((Ok(backend), name)) => Taken::Region {
                name: name.to_owned(),
                backend,
            }
            .give_back(WORKERS_STOPPED),
            _ => format!("{r:?} is not BACKEND:NAME"),
        };
        say(format_args!("hugeshm: interrupted: {line}"));
    }
    std::process::ExitCode::from((128 + signal).clamp(0, 255) as u8)
}

/// How long a region's removal waits for the workers to let go after they
/// were stopped (`SIGTERM`, or the same Ctrl-C).
const WORKERS_STOPPED: Duration = Duration::from_secs(3);

/// How long the watchdog waits for them: they were not stopped, and let go
/// when they see their parent gone (at the end of the work in hand).
const WORKERS_ORPHANED: Duration = Duration::from_secs(60);

/// The watchdog's part ([`Setup::watchdog`]): reads the run's messages
/// on stdin; if they end without [`Msg::Done`] while something is still
/// registered, the run died: gives it back (regions first, so their pages
/// go back with the pools; then the rest, last taken first), a line each
/// on stderr.
pub fn watch() -> std::process::ExitCode {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    // Ctrl-C and a hangup reach the whole process group, and the run stops
    // its children with SIGTERM: the run's handler gives back then and
    // says Done; the watchdog ends when its pipe does.
    let _caught = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]);
    let parent = std::os::unix::process::parent_id();
    let Some(mut pending) = heard(std::io::stdin().lock()).filter(|p| !p.is_empty()) else {
        return std::process::ExitCode::SUCCESS;
    };
    say(format_args!(
        "hugeshm: the run (pid {parent}) ended without giving back what it took (killed?); giving it back"
    ));
    pending.sort_by_key(|(id, _)| std::cmp::Reverse(*id));
    let (regions, rest): (Vec<_>, Vec<_>) = pending
        .into_iter()
        .partition(|(_, g)| matches!(g, Taken::Region { .. }));
    for (_, g) in regions.iter().chain(&rest) {
        say(format_args!(
            "hugeshm: watchdog: {}",
            g.give_back(WORKERS_ORPHANED)
        ));
    }
    std::process::ExitCode::from(1)
}

/// What is still registered when the run's messages end (`None`: the run
/// said it gives back itself). A line that is not a message (one cut short
/// by the run's death) is said and skipped.
fn heard(input: impl std::io::BufRead) -> Option<Vec<(u64, Taken)>> {
    let mut pending = Vec::new();
    for line in input.lines() {
        let Ok(line) = line else { break };
        match serde_json::from_str::<Msg>(&line) {
            Ok(Msg::Add { id, taken }) => {
                // An update replaces the entry.
                pending.retain(|(i, _)| *i != id);
                pending.push((id, taken));
            }
            Ok(Msg::Forget { id }) => pending.retain(|(i, _)| *i != id),
            Ok(Msg::Done) => return None,
            Err(e) => say(format_args!("hugeshm: watchdog: ignored {line:?}: {e}")),
        }
    }
    Some(pending)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gives_back_last_taken_first_and_forgets_dropped_entries() {
        let dir = std::env::temp_dir().join(format!("hugeshm-interrupt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // The same pool raised twice: set back last first, so the first
        // registration's count is what stays.
        let pool = dir.join("nr_hugepages");
        std::fs::write(&pool, "9\n").unwrap();
        let at = |pages| Taken::Pool {
            path: pool.clone(),
            pages,
            added: None,
        };
        let regions = give_back_now(vec![
            (1, at(3)),
            (
                3,
                Taken::Region {
                    name: "r".into(),
                    backend: Backend::Sysv,
                },
            ),
            (2, at(5)),
        ]);
        assert_eq!(std::fs::read_to_string(&pool).unwrap(), "3\n");
        assert_eq!(regions, [("r".to_owned(), Backend::Sysv)]);
        // A dropped registration is forgotten.
        let kept = dir.join("kept");
        let id = Ledger.add(&Taken::PrivateDir(kept.clone()));
        assert!(PENDING.lock().unwrap().iter().any(|(i, _)| *i == id));
        assert!(Ledger.forget(id), "the run's own entry: it gives it back");
        // Taken (by the handler) or forgotten before: not the run's to give
        // back again.
        assert!(!Ledger.forget(id));
        assert!(!PENDING
            .lock()
            .unwrap()
            .iter()
            .any(|(_, g)| matches!(g, Taken::PrivateDir(p) if *p == kept)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_watchdog_holds_what_was_added_and_not_forgotten() {
        let line = |m: &Msg| serde_json::to_string(m).unwrap() + "\n";
        let add = |id: u64, p: &str| {
            line(&Msg::Add {
                id,
                taken: Taken::PrivateDir(p.into()),
            })
        };
        // The run died: what is left is given back.
        let text = add(1, "/a") + &add(2, "/b") + &line(&Msg::Forget { id: 1 }) + &add(3, "/c");
        // Cut short by the run's death mid-line.
        let cut = text.clone() + &add(4, "/d")[..10];
        for input in [&text, &cut] {
            let left = heard(input.as_bytes()).expect("no Done");
            let ids: Vec<u64> = left.iter().map(|(id, _)| *id).collect();
            assert_eq!(ids, [2, 3]);
            assert!(matches!(&left[0].1, Taken::PrivateDir(p) if p.as_os_str() == "/b"));
        }
        // An update (the amount now known) replaces the entry.
        let updated = add(1, "/a") + &add(1, "/a2");
        let left = heard(updated.as_bytes()).unwrap();
        assert_eq!(left.len(), 1);
        assert!(matches!(&left[0].1, Taken::PrivateDir(p) if p.as_os_str() == "/a2"));
        // The run's handler gives back itself.
        assert!(heard((text + &line(&Msg::Done)).as_bytes()).is_none());
        // A run that gave everything back.
        assert_eq!(
            heard(line(&Msg::Forget { id: 9 }).as_bytes()).map(|p| p.len()),
            Some(0)
        );
    }
}
