//! What a run takes from the host (pool pages, a region, a private
//! directory) and gives back, even when it is cut short.
//!
//! The code that takes something registers it first ([`undo`]) and holds
//! the returned [`Undo`]; the normal path gives the thing back itself and
//! drops the `Undo`, which forgets the entry. Who hears of the entries is
//! the program's [`Keeper`] ([`set_keeper`]): the `hugeshm` binary's keeps
//! them for its Ctrl-C handler and its watchdog process (a run killed
//! with `SIGKILL`), which call [`Taken::give_back`]. Without a keeper the
//! entries go nowhere (a library caller that handles no signals).

use hugeshm_region::{Backend, Locator, RegionError};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// Something a run took from the host, which it (or, if it is
/// interrupted or killed, its handler or its watchdog) gives back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Taken {
    /// Take the pages this run added off this `nr_hugepages` file: what
    /// it holds now less `added`, so that what others changed meanwhile
    /// (`hugeshm apply`, another bench) stays; `pages`, what it held
    /// before, while `added` is not known yet (the write is under way).
    Pool {
        /// The sysfs file.
        path: PathBuf,
        /// What it held before.
        pages: u64,
        /// Pages this run added, once the kernel said how many.
        #[serde(default)]
        added: Option<u64>,
    },
    /// Remove this named region (nothing happens if it is gone or held by
    /// another process: removal refuses then, as always).
    Region {
        /// Its name.
        name: String,
        /// Its backend.
        backend: Backend,
    },
    /// Delete this private directory (made by
    /// `hugeshm_sys::DirHandle::private_temp`) and the files in it; refused
    /// if it is not a directory of this user that only it can enter, and
    /// no symlink is followed.
    PrivateDir(PathBuf),
}

/// Who hears what a run takes and gives back: the program's handler of
/// interrupts. Its methods run on the thread that takes the thing.
pub trait Keeper: Send + Sync {
    /// `taken` is about to be taken: keep it under a new id.
    fn add(&self, taken: &Taken) -> u64;
    /// Entry `id` now reads `taken` (the amount became known).
    fn update(&self, id: u64, taken: &Taken);
    /// Entry `id` is given back (or kept on purpose) by the run: forget
    /// it. `true` if it was still kept; `false` if the handler of an
    /// interrupt has taken it to give back itself (the run must not give
    /// it back a second time).
    fn forget(&self, id: u64) -> bool;
    /// Runs `f` (a `fork`, which needs a process of one thread) with any
    /// thread of the keeper's stopped.
    fn paused(&self, f: &mut dyn FnMut());
}

static KEEPER: OnceLock<Box<dyn Keeper>> = OnceLock::new();

/// Held while a run gives back a thing it claimed ([`Undo::claim`]).
static GIVING_BACK: Mutex<()> = Mutex::new(());

/// A run giving back a thing itself ([`Undo::claim`]); the process does
/// not end on an interrupt until it is dropped ([`wait_for_claims`]).
#[must_use = "the thing is given back while this is held"]
pub struct Claim(#[allow(dead_code)] MutexGuard<'static, ()>);

/// Waits until no run is giving back a thing it claimed: an interrupt's
/// handler calls it before it ends the process, so that a give-back under
/// way (the entry already forgotten) is not cut short.
pub fn wait_for_claims() {
    drop(GIVING_BACK.lock().unwrap_or_else(|e| e.into_inner()));
}

/// Makes `keeper` hear every registration from now on; `false` (and
/// nothing changes) if one was set before.
pub fn set_keeper(keeper: Box<dyn Keeper>) -> bool {
    KEEPER.set(keeper).is_ok()
}

/// A registration; dropping it forgets the entry.
#[must_use = "the entry is forgotten when this is dropped"]
#[derive(Debug)]
pub struct Undo(Option<u64>);

impl Undo {
    /// Forgets the entry before the run gives the thing back itself:
    /// `Some` if the run is to give it back, and it does so while it holds
    /// the [`Claim`] (an interrupt's handler waits for it,
    /// [`wait_for_claims`], before the process ends); `None` if the
    /// handler has taken it and gives it back (so it is not given back
    /// twice: a pool's added pages taken off twice would take someone
    /// else's).
    pub fn claim(mut self) -> Option<Claim> {
        let held = GIVING_BACK.lock().unwrap_or_else(|e| e.into_inner());
        let ours = match (self.0.take(), KEEPER.get()) {
            (Some(id), Some(k)) => k.forget(id),
            _ => true,
        };
        ours.then_some(Claim(held))
    }

    /// Replaces what is to be given back (once the amount taken is known).
    pub fn update(&self, taken: Taken) {
        if let (Some(id), Some(k)) = (self.0, KEEPER.get()) {
            k.update(id, &taken);
        }
    }
}

impl Drop for Undo {
    fn drop(&mut self) {
        if let (Some(id), Some(k)) = (self.0, KEEPER.get()) {
            k.forget(id);
        }
    }
}

/// Registers `taken` to be given back if the run is cut short before the
/// returned [`Undo`] is dropped.
pub fn undo(taken: Taken) -> Undo {
    Undo(KEEPER.get().map(|k| k.add(&taken)))
}

/// Runs `f` (a `fork`) with the keeper's threads stopped ([`Keeper::paused`]).
pub fn paused<T>(f: impl FnOnce() -> T) -> T {
    let Some(k) = KEEPER.get() else {
        return f();
    };
    let mut f = Some(f);
    let mut out = None;
    k.paused(&mut || out = f.take().map(|f| f()));
    out.expect("the keeper ran the closure")
}

fn read_pages(path: &std::path::Path) -> std::io::Result<u64> {
    std::fs::read_to_string(path)?
        .trim()
        .parse()
        .map_err(std::io::Error::other)
}

impl Taken {
    /// Gives it back and says what happened, one line: a region is
    /// removed once its holders let go, waiting up to `region_wait` (the
    /// run's own workers are ending).
    pub fn give_back(&self, region_wait: Duration) -> String {
        match self {
            Taken::Pool { path, pages, added } => {
                let (to, how) = match added.map(|a| (a, read_pages(path))) {
                    Some((a, Ok(now))) => (
                        now.saturating_sub(a),
                        format!(" (it held {now}, {a} of them added by this run)"),
                    ),
                    Some((_, Err(e))) => {
                        return format!(
                            "could not read {}: {e} (take off the pages this run added by hand)",
                            path.display()
                        )
                    }
                    None => (*pages, String::new()),
                };
                match std::fs::write(path, format!("{to}\n")) {
                    Ok(()) => format!("{} set back to {to}{how}", path.display()),
                    Err(e) => format!(
                        "could not set {} back to {to}: {e} (do it by hand: echo {to} > {})",
                        path.display(),
                        path.display()
                    ),
                }
            }
            Taken::Region { name, backend } => {
                let deadline = std::time::Instant::now() + region_wait;
                loop {
                    match Locator::new(name, *backend).remove() {
                        Ok(_) => break format!("removed the {backend} region {name}"),
                        Err(RegionError::InUse { .. }) if std::time::Instant::now() < deadline => {
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        Err(RegionError::NotFound { .. }) => {
                            break format!("the {backend} region {name} was already gone")
                        }
                        Err(e @ RegionError::InUse { .. }) => break format!(
                            "after {} s, {e}; remove it with hugeshm rm {name} --backend {backend} once they end",
                            region_wait.as_secs()
                        ),
                        Err(e) => break format!("the {backend} region {name}: {e}"),
                    }
                }
            }
            Taken::PrivateDir(p) => match hugeshm_sys::remove_private_dir(p) {
                Ok(n) => format!("deleted {} and the {n} file(s) in it", p.display()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    format!("{} was already gone", p.display())
                }
                Err(e) => format!("could not delete {}: {e}", p.display()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_loses_only_what_this_run_added_and_a_planted_dir_is_left() {
        let dir = std::env::temp_dir().join(format!("hugeshm-guard-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pool = dir.join("nr_hugepages");
        std::fs::write(&pool, "9\n").unwrap();
        let before = Taken::Pool {
            path: pool.clone(),
            pages: 3,
            added: None,
        };
        assert!(before.give_back(Duration::ZERO).contains("set back to 3"));
        assert_eq!(std::fs::read_to_string(&pool).unwrap(), "3\n");
        // This run added 4 pages, someone else 2 more since: theirs stay.
        std::fs::write(&pool, "12\n").unwrap();
        let added = Taken::Pool {
            path: pool.clone(),
            pages: 6,
            added: Some(4),
        };
        added.give_back(Duration::ZERO);
        assert_eq!(std::fs::read_to_string(&pool).unwrap(), "8\n");
        let private = hugeshm_sys::DirHandle::private_temp(&dir, "data-", None).unwrap();
        private.create_new("data", 0o600).unwrap();
        let file = private.path().to_owned();
        Taken::PrivateDir(file.clone()).give_back(Duration::ZERO);
        assert!(!file.exists());
        // A symlink, or another user's directory, where a data directory
        // was is left alone, and what it leads to too.
        let elsewhere = dir.join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("keep"), "x").unwrap();
        let link = dir.join("data-link");
        std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
        let said = Taken::PrivateDir(link.clone()).give_back(Duration::ZERO);
        assert!(said.contains("not a directory"), "{said}");
        let said = Taken::PrivateDir(elsewhere.clone()).give_back(Duration::ZERO);
        assert!(said.contains("not a private directory"), "{said}");
        assert!(elsewhere.join("keep").exists() && link.is_symlink());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
