//! Hostile headers and racing processes.
//!
//! * Random and bit-flipped bytes written into a live region's header (a
//!   posix file and a SysV segment) while threads keep attaching: every
//!   attach either succeeds on an intact header or is refused with a
//!   typed error; nothing panics, nothing is left mapped.
//! * Four processes looping create / attach / remove / list over the same
//!   few names: no panic, no attach to a half-made region, and no segment,
//!   file or reserved page left afterwards.
//! * Another user's SysV segment under a region's key ([`sysv_squat`]).
//!
//! Children are this test binary re-executed with `HUGESHM_RACE_CHILD`
//! (`HUGESHM_SYSV_SQUAT_CHILD` for [`sysv_squat`]).

mod common;
mod sysv_squat;

use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use hugeshm_region::{
    list_regions, Backend, HeaderState, Locator, PageSize, Policy, Region, RegionBuilder,
    RegionError, HEADER_BYTES,
};
use hugeshm_testkit::HostState;

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// An attach result as hostile bytes may leave it: a ready region whose
/// header still says who it is, or one of the refusals.
fn acceptable(r: Result<Region, RegionError>, name: &str) -> Result<bool, String> {
    match r {
        Ok(region) => {
            let h = region.header().clone();
            region.close().map_err(|e| e.to_string())?;
            if h.state == HeaderState::Ready && h.name.as_deref() == Some(name) {
                Ok(true)
            } else {
                Err(format!("attached a region whose header is {h:?}"))
            }
        }
        Err(
            RegionError::NotOurs { .. }
            | RegionError::NewerLayout { .. }
            | RegionError::HeaderMismatch { .. }
            | RegionError::Incomplete { .. },
        ) => Ok(false),
        Err(e) => Err(format!("unexpected error: {e}")),
    }
}

/// Writes hostile bytes into the header with `poke(offset, bytes)` while
/// two threads attach in a loop; restores the header at the end.
fn hammer(name: &str, backend: Backend, poke: impl Fn(u64, &[u8]), original: &[u8]) {
    let stop = Arc::new(AtomicBool::new(false));
    let attached = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (stop, attached, refused) = (stop.clone(), attached.clone(), refused.clone());
            let name = name.to_owned();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match acceptable(Locator::new(&name, backend).attach(), &name) {
                        Ok(true) => attached.fetch_add(1, Ordering::Relaxed),
                        Ok(false) => refused.fetch_add(1, Ordering::Relaxed),
                        Err(e) => panic!("{backend}: {e}"),
                    };
                }
            })
        })
        .collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ std::process::id() as u64);
    // At least 400 rounds, and on until the attachers have met both an
    // intact and a damaged header (on a loaded machine an attach can take
    // longer than 400 rounds), within a minute.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut round = 0u64;
    while round < 400
        || ((refused.load(Ordering::Relaxed) == 0 || attached.load(Ordering::Relaxed) == 0)
            && std::time::Instant::now() < deadline)
    {
        round += 1;
        match round % 3 {
            // Flip one bit of the used header.
            0 => {
                let off = rng.below(original.len() as u64);
                let mut b = [original[off as usize]];
                b[0] ^= 1 << rng.below(8);
                poke(off, &b);
            }
            // Random bytes over a random stretch.
            1 => {
                let off = rng.below(original.len() as u64);
                let n = 1 + rng.below(32);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                poke(off, &bytes);
            }
            // Back to the real header.
            _ => poke(0, original),
        }
        if round >= 400 {
            // Give the attachers time to see this state.
            std::thread::sleep(std::time::Duration::from_millis(2));
        } else {
            std::thread::yield_now();
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("an attacher panicked");
    }
    poke(0, original);
    println!(
        "{backend}: {} attaches on an intact header, {} refused",
        attached.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed)
    );
    assert!(
        refused.load(Ordering::Relaxed) > 0,
        "{backend}: nothing was refused"
    );
    // Whole again: attaches as before.
    Locator::new(name, backend)
        .attach()
        .unwrap()
        .close()
        .unwrap();
}

#[test]
fn hostile_header_bytes_are_refused_never_crash() {
    let Some(pool) = live!() else {
        return;
    };
    let before = HostState::capture().unwrap();
    for backend in [Backend::Posix, Backend::Sysv] {
        let name = unique("hostile");
        let _cleanup = RemoveOnDrop::new(&name, backend, None);
        let (region, _) = RegionBuilder::new(1 << 20)
            .name(&name)
            .backend(backend)
            .page_size(PageSize::Base)
            .policy(Policy::Only)
            .create()
            .unwrap();
        // The used part of the header, as written.
        let mut original = vec![0u8; 352];
        let raw = region.as_ptr();
        for (i, b) in original.iter_mut().enumerate() {
            // SAFETY: the first 352 bytes of this process's live mapping of
            // the region (its header page); read only.
            *b = unsafe { std::ptr::read_volatile(raw.add(i)) };
        }
        assert_eq!(&original[..8], b"HUGESHM\0");
        match backend {
            Backend::Posix => {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(region.path().unwrap())
                    .unwrap();
                hammer(
                    &name,
                    backend,
                    |off, b| file.write_all_at(b, off).unwrap(),
                    &original,
                );
            }
            _ => {
                let addr = raw as usize;
                hammer(
                    &name,
                    backend,
                    |off, b| {
                        for (i, v) in b.iter().enumerate() {
                            // SAFETY: inside the first 4 KiB (the header
                            // page, off + i < 352 + 32 < HEADER_BYTES) of
                            // the live mapping this test owns.
                            unsafe {
                                std::ptr::write_volatile(
                                    (addr as *mut u8).add(off as usize + i),
                                    *v,
                                )
                            };
                        }
                    },
                    &original,
                );
            }
        }
        const { assert!(352 + 32 < HEADER_BYTES) };
        region.destroy().unwrap();
        assert_no_leaks(&before, &format!("hostile {backend}"));
    }
    pool.finish();
}

const CHILD_ENV: &str = "HUGESHM_RACE_CHILD";
const NAMES: [&str; 3] = ["race-a", "race-b", "race-c"];

/// A racing child: `ITERATIONS:SEED:TAG`.
#[test]
#[ignore = "helper: its parent test runs it"]
fn race_child() {
    let Some(spec) = helper_spec(CHILD_ENV) else {
        return;
    };
    let mut f = spec.split(':');
    let iterations: u64 = f.next().unwrap().parse().unwrap();
    let mut rng = Rng(f.next().unwrap().parse().unwrap());
    let tag = f.next().unwrap();
    let mut held: Vec<Region> = Vec::new();
    // Per kind (create, attach, remove, list): what succeeded, what was tried.
    let mut counts = [0u64; 4];
    let mut tried = [0u64; 4];
    for _ in 0..iterations {
        let name = format!("{tag}-{}", NAMES[rng.below(3) as usize]);
        let kind = rng.below(4);
        tried[kind as usize] += 1;
        match kind {
            0 => match RegionBuilder::new(64 << 10)
                .name(&name)
                .backend(Backend::Posix)
                .page_size(PageSize::Base)
                .policy(Policy::Only)
                .prefault_threads(1)
                .create()
            {
                Ok((r, _)) => {
                    counts[0] += 1;
                    held.push(r);
                }
                Err(
                    RegionError::AlreadyExists { .. }
                    | RegionError::Orphaned { .. }
                    | RegionError::Incomplete { .. },
                ) => {}
                Err(e) => panic!("create {name}: {e}"),
            },
            1 => match Locator::new(&name, Backend::Posix).attach() {
                Ok(r) => {
                    assert_eq!(r.header().state, HeaderState::Ready, "{name}");
                    assert_eq!(r.header().name.as_deref(), Some(name.as_str()));
                    counts[1] += 1;
                    held.push(r);
                }
                Err(
                    RegionError::NotFound { .. }
                    | RegionError::Incomplete { .. }
                    | RegionError::Unsupported(_),
                ) => {}
                Err(e) => panic!("attach {name}: {e}"),
            },
            2 => {
                // Let go of what this process holds, then try to remove
                // the name (others may still hold it).
                for r in held.drain(..) {
                    r.close().unwrap();
                }
                match Locator::new(&name, Backend::Posix).remove() {
                    Ok(_) => counts[2] += 1,
                    Err(
                        RegionError::NotFound { .. }
                        | RegionError::InUse { .. }
                        | RegionError::AlreadyExists { .. },
                    ) => {}
                    Err(e) => panic!("remove {name}: {e}"),
                }
            }
            _ => {
                list_regions().unwrap();
                counts[3] += 1;
            }
        }
    }
    for r in held {
        r.close().unwrap();
    }
    println!("\n{RACE_DONE} {counts:?} of {tried:?}");
}

/// The line a racing child ends with: `RACE-DONE [OK...] of [TRIED...]`.
const RACE_DONE: &str = "RACE-DONE";

/// A racer's counts from its output: what succeeded and what was tried,
/// per kind (create, attach, remove, list).
fn race_counts(out: &str) -> ([u64; 4], [u64; 4]) {
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix(RACE_DONE))
        .unwrap_or_else(|| panic!("a racer ended without its {RACE_DONE} line: {out}"));
    let numbers = |list: &str| -> [u64; 4] {
        let v: Vec<u64> = list
            .trim()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .split(',')
            .map(|n| n.trim().parse().unwrap_or_else(|e| panic!("{e}: {line}")))
            .collect();
        v.try_into()
            .unwrap_or_else(|v| panic!("not 4 counts: {v:?} in {line}"))
    };
    let (ok, tried) = line
        .split_once(" of ")
        .unwrap_or_else(|| panic!("no \" of \": {line}"));
    (numbers(ok), numbers(tried))
}

#[test]
fn four_processes_race_create_attach_remove_list() {
    let Some(pool) = live!() else {
        return;
    };
    let before = HostState::capture().unwrap();
    let tag = unique("race");
    let kids: Vec<_> = (0..4u64)
        .map(|i| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args(helper_args("race_child"))
                .env(CHILD_ENV, format!("250:{}:{tag}", 0x1234_5678 + i * 7919))
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<_> = kids
        .into_iter()
        .map(|k| k.wait_with_output().unwrap())
        .collect();
    // Whatever is left nobody holds: remove it (before any check can fail),
    // then nothing may remain.
    for n in NAMES {
        let _ = Locator::new(&format!("{tag}-{n}"), Backend::Posix).remove();
    }
    let mut ok = [0u64; 4];
    let mut tried = [0u64; 4];
    for out in outs {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "a racer failed: {text}");
        let (o, t) = race_counts(&text);
        for i in 0..4 {
            ok[i] += o[i];
            tried[i] += t[i];
        }
    }
    println!("succeeded {ok:?} of {tried:?} (create, attach, remove, list)");
    // Every kind was tried often (the seeds are fixed: about 250 each), and
    // each succeeded many times over, races or not (here about 50 creates
    // and removes and 170 attaches): racers that could not create, attach
    // or remove (refused as taken, missing or in use every time) fail here.
    for (i, kind) in ["create", "attach", "remove", "list"].iter().enumerate() {
        assert!(tried[i] >= 200, "{kind} tried {} times", tried[i]);
        assert!(ok[i] >= 10, "{kind}: {} of {} succeeded", ok[i], tried[i]);
    }
    assert_eq!(ok[3], tried[3], "every list succeeds");
    assert_no_leaks(&before, "race");
    pool.finish();
}

/// A region whose file someone cut short (past its end a process would get
/// SIGBUS): `ls` says so and offers no reuse, create refuses it as
/// truncated without offering reuse, attach and reuse are refused with
/// the sizes, and recreate and remove work.
#[test]
fn a_truncated_region_is_never_reused() {
    let pool = observe!();
    let name = unique("cut");
    let builder = || {
        RegionBuilder::new(8 << 20)
            .backend(Backend::Posix)
            .page_size(PageSize::Base)
            .policy(Policy::Off)
            .name(&name)
    };
    let (region, report) = builder().create().unwrap();
    let path = report.path.clone().expect("a posix region has a path");
    drop(region);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(HEADER_BYTES)
        .unwrap();

    let listed = list_regions().unwrap();
    let info = listed.iter().find(|i| i.name == name).expect("listed");
    assert_eq!(info.truncated(), Some((HEADER_BYTES, 8 << 20)));
    assert!(
        info.detail.as_deref().unwrap_or("").contains("truncated"),
        "{info:?}"
    );
    let fix = info.fix.as_ref().expect("an orphan's fix").to_string();
    assert!(!fix.contains("Reuse"), "{fix}");

    let err = builder().create().map(|_| ()).unwrap_err();
    assert!(
        matches!(
            err,
            RegionError::Orphaned {
                state: hugeshm_region::RegionState::Damaged,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("truncated"), "{err}");
    assert!(!err.fix().unwrap().to_string().contains("Reuse"), "{err}");
    let err = Locator::new(&name, Backend::Posix)
        .attach()
        .map(|_| ())
        .unwrap_err();
    assert!(err.to_string().contains("mismatch"), "{err}");
    let err = builder()
        .reclaim(hugeshm_region::Reclaim::Reuse)
        .create()
        .map(|_| ())
        .unwrap_err();
    assert!(err.to_string().contains("mismatch"), "{err}");

    let (region, report) = builder()
        .reclaim(hugeshm_region::Reclaim::Recreate)
        .create()
        .unwrap();
    assert_eq!(report.resident_bytes, 8 << 20);
    region.destroy().unwrap();
    pool.finish();
}

/// A memfd region's size is sealed: a process that opens it (as
/// `/proc/PID/fd/N`, as attachers do) cannot cut it short, or grow it,
/// under the processes that map it.
#[test]
fn a_memfd_region_cannot_be_truncated() {
    use std::os::fd::AsRawFd;
    let (region, _) = RegionBuilder::new(4 << 20)
        .backend(Backend::Memfd)
        .page_size(PageSize::Base)
        .policy(Policy::Off)
        .create()
        .unwrap();
    let fd = region.fd().expect("a memfd region has a descriptor");
    let other = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .unwrap();
    for len in [HEADER_BYTES, 8 << 20] {
        let err = other.set_len(len).unwrap_err();
        assert_eq!(
            err.raw_os_error(),
            Some(libc::EPERM),
            "set_len({len}): {err}"
        );
    }
    assert_eq!(other.metadata().unwrap().len(), 4 << 20);
    region.destroy().unwrap();
}

/// What a planted entry is.
#[derive(Clone, Copy, Debug)]
enum Plant {
    Fifo,
    Link,
}

impl Plant {
    /// How the refusal names it.
    fn words(self) -> &'static str {
        match self {
            Plant::Fifo => "a FIFO (named pipe) owned by uid 65534",
            Plant::Link => "a symbolic link owned by uid 65534",
        }
    }
}

/// Files planted by uid 65534, removed on drop (also when the test fails
/// or times out), with the root-only secret a link points at.
struct Planted {
    paths: Vec<std::path::PathBuf>,
    secret: std::path::PathBuf,
}

/// The bytes of the secret: they must never appear in what root's hugeshm
/// reports.
const SECRET: &str = "TOPSECRET-hugeshm-planted";

impl Planted {
    fn new() -> Planted {
        use std::os::unix::fs::PermissionsExt;
        let secret = std::env::temp_dir().join(unique("secret"));
        std::fs::write(&secret, SECRET).unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        Planted {
            paths: Vec::new(),
            secret,
        }
    }

    /// Makes `path` a FIFO or a link to the secret, as uid 65534.
    fn plant(&mut self, path: &std::path::Path, what: Plant) {
        let mut c = std::process::Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
        match what {
            Plant::Fifo => c.arg("mkfifo").arg(path),
            Plant::Link => c.args(["ln", "-s"]).arg(&self.secret).arg(path),
        };
        assert!(c.status().unwrap().success(), "planting {}", path.display());
        self.paths.push(path.to_owned());
    }

    fn still_there(&self, path: &std::path::Path) -> bool {
        std::fs::symlink_metadata(path).is_ok()
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        for p in &self.paths {
            remove_planted(p);
        }
        let _ = std::fs::remove_file(&self.secret);
    }
}

/// Removes a planted entry. A FIFO is first opened read-write (which
/// never waits) and kept open across the unlink: any process still
/// waiting in an open of it for reading (another program's `hugeshm ls`
/// that runs meanwhile, without this fix) gets its partner and goes on.
fn remove_planted(p: &std::path::Path) {
    let is_fifo = std::fs::symlink_metadata(p)
        .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_fifo(&m.file_type()));
    let partner = is_fifo
        .then(|| {
            rustix::fs::open(
                p,
                rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NONBLOCK,
                rustix::fs::Mode::empty(),
            )
            .ok()
        })
        .flatten();
    let _ = std::fs::remove_file(p);
    drop(partner);
}

/// Runs `f` on a thread and fails the test when it has not returned within
/// a minute: a hang (an open waiting on a FIFO) is a failure, not a stuck
/// test run.
fn within_a_minute<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what}: no answer within 60 s (hung)"))
}

/// `err` refuses what was planted at `path`, naming it, and quotes nothing
/// of the secret.
#[track_caller]
fn refused(what: &str, err: RegionError, path: &std::path::Path, plant: Plant) {
    let text = err.to_string();
    assert!(matches!(err, RegionError::NotOurs { .. }), "{what}: {text}");
    assert!(text.contains(&path.display().to_string()), "{what}: {text}");
    assert!(text.contains(plant.words()), "{what}: {text}");
    assert!(
        !text.contains("TOPSECRE") && !text.contains("544f50"),
        "{what}: {text}"
    );
}

/// A FIFO or a symbolic link (to a root-only file) that another user puts
/// at a region's path, in /dev/shm, in a tmpfs directory given with
/// `directory` (posix and dax), or at a memfd record's path: listing shows
/// it as foreign without opening it, and inspect, attach, remove and
/// create refuse it naming the path and what is there; nothing hangs (a
/// plain open of the FIFO waited for a writer forever), nothing of the
/// link's target is read (it was read as a header and its first bytes
/// printed), nothing is removed.
#[test]
fn planted_fifos_and_links_are_refused_never_opened() {
    // What it plants in /dev/shm is host state the other tests compare
    // under the pool lock; dropped last, after the plants are gone.
    let Some(pool) = live!() else { return };
    if skip_without_setpriv(pool.name()) {
        return;
    }
    let mut planted = Planted::new();
    let dir = std::path::PathBuf::from("/dev/shm").join(unique("planted-dir"));
    std::fs::create_dir(&dir).unwrap();
    let _dir = RemoveDir(dir.clone());
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
    let places: [(Backend, Option<&std::path::Path>); 3] = [
        (Backend::Posix, None),
        (Backend::Posix, Some(&dir)),
        (Backend::Dax, Some(&dir)),
    ];
    for (backend, d) in places {
        for plant in [Plant::Fifo, Plant::Link] {
            let name = unique("planted");
            let path = d
                .unwrap_or(std::path::Path::new("/dev/shm"))
                .join(format!("hugeshm.{name}"));
            planted.plant(&path, plant);
            let what = format!("{backend} {plant:?} at {}", path.display());
            let locator = {
                let l = Locator::new(&name, backend);
                match d {
                    Some(d) => l.directory(d),
                    None => l,
                }
            };
            let builder = {
                let b = RegionBuilder::new(1 << 20)
                    .name(&name)
                    .backend(backend)
                    .page_size(PageSize::Base)
                    .policy(Policy::Off);
                match d {
                    Some(d) => b.directory(d),
                    None => b,
                }
            };
            let (listed, inspected, attached, removed, created) = within_a_minute(&what, {
                let l = locator.clone();
                move || {
                    (
                        list_regions().unwrap(),
                        l.inspect().map(|_| ()),
                        l.attach().map(|_| ()),
                        l.remove().map(|_| ()),
                        builder.create().map(|_| ()),
                    )
                }
            });
            let info = listed
                .iter()
                .find(|i| i.name == name)
                .unwrap_or_else(|| panic!("{what}: not listed in {listed:#?}"));
            assert_eq!(info.state, hugeshm_region::RegionState::Foreign, "{what}");
            let detail = info.detail.as_deref().unwrap_or("");
            assert!(detail.contains(plant.words()), "{what}: {detail}");
            assert_eq!(info.owner.map(|o| o.uid), Some(65534), "{what}");
            assert!(!format!("{listed:?}").contains("TOPSECRE"), "{what}");
            for (op, r) in [
                ("inspect", inspected),
                ("attach", attached),
                ("remove", removed),
                ("create", created),
            ] {
                refused(&format!("{what}: {op}"), r.unwrap_err(), &path, plant);
            }
            assert!(planted.still_there(&path), "{what}: removed");
        }
    }
    // A memfd record's path.
    for plant in [Plant::Fifo, Plant::Link] {
        let name = unique("planted-rec");
        let path = hugeshm_region::memfd_record::memfd_record_path(&name);
        planted.plant(&path, plant);
        let what = format!("memfd {plant:?} at {}", path.display());
        let (listed, inspected, attached, removed) = within_a_minute(&what, {
            let l = Locator::new(&name, Backend::Memfd);
            move || {
                (
                    list_regions().unwrap(),
                    l.inspect().map(|_| ()),
                    l.attach().map(|_| ()),
                    l.remove().map(|_| ()),
                )
            }
        });
        let info = listed.iter().find(|i| i.name == name).expect("listed");
        assert_eq!(info.state, hugeshm_region::RegionState::Foreign, "{what}");
        for (op, r) in [
            ("inspect", inspected),
            ("attach", attached),
            ("remove", removed),
        ] {
            let e = r.unwrap_err().to_string();
            assert!(
                e.contains(plant.words()) && !e.contains("TOPSECRE"),
                "{what} {op}: {e}"
            );
        }
        assert!(planted.still_there(&path), "{what}: removed");
    }
    // A well-formed record of uid 65534 whose descriptor is a FIFO that
    // its process holds open for reading only: /proc/PID/fd/N opened for
    // reading waited for a writer forever.
    let name = unique("planted-fd");
    let fifo = dir.join("fifo");
    let record = hugeshm_region::memfd_record::memfd_record_path(&name);
    planted.paths.extend([fifo.clone(), record.clone()]);
    let mut kid = Kid::spawn_as_nobody(
        "planted_child",
        PLANTED_ENV,
        &format!("{}:{}", fifo.display(), record.display()),
    );
    assert_eq!(kid.expect("PLANTED"), "ok");
    let (listed, inspected, removed) = within_a_minute("a record naming a FIFO", {
        let l = Locator::new(&name, Backend::Memfd);
        move || {
            (
                list_regions().unwrap(),
                l.inspect().map(|_| ()),
                l.remove().map(|_| ()),
            )
        }
    });
    kid.finish();
    // Listed without reading another user's record at all (untrusted);
    // inspect and remove by name read it and refuse the FIFO.
    let info = listed.iter().find(|i| i.name == name).expect("listed");
    assert_eq!(
        info.state,
        hugeshm_region::RegionState::Untrusted,
        "{info:?}"
    );
    assert_eq!(info.owner.map(|o| o.uid), Some(65534), "{info:?}");
    for r in [inspected, removed] {
        let e = r.unwrap_err().to_string();
        assert!(e.contains("a FIFO (named pipe) owned by uid 65534"), "{e}");
    }
    drop(planted);
    drop(_dir);
    // Nothing of this test is left (the host-wide comparison would see
    // other tests' regions come and go).
    let mine = |n: &str| n.contains("planted") && n.contains(&format!("-{}-", std::process::id()));
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| mine(n))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Removes a directory (and what is in it) on drop.
struct RemoveDir(std::path::PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const PLANTED_ENV: &str = "HUGESHM_PLANTED_CHILD";

/// As uid 65534: `FIFO:RECORD`: makes the FIFO, holds it open for reading
/// (non-blocking, no writer), and publishes a record naming that
/// descriptor; prints `PLANTED ok`; waits for stdin to close.
#[test]
#[ignore = "helper: its parent test runs it"]
fn planted_child() {
    let Some(spec) = helper_spec(PLANTED_ENV) else {
        return;
    };
    use rustix::fs::{Mode, OFlags};
    let (fifo, record) = spec.split_once(':').unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        fifo,
        rustix::fs::FileType::Fifo,
        Mode::from_bits_truncate(0o644),
        0,
    )
    .unwrap();
    let fd = rustix::fs::open(fifo, OFlags::RDONLY | OFlags::NONBLOCK, Mode::empty()).unwrap();
    let st = rustix::fs::fstat(&fd).unwrap();
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let start_ticks: u64 = after.split(' ').nth(19).unwrap().parse().unwrap();
    #[allow(clippy::unnecessary_cast)]
    let dev = st.st_dev as u64;
    let text = format!(
        "hugeshm-memfd-record 1\npid {}\nstart_ticks {start_ticks}\nfd {}\ndev {}:{}\nino {}\n\
         generation 0000000000000001\nuid 65534\nsize 1048576\n",
        std::process::id(),
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        rustix::fs::major(dev),
        rustix::fs::minor(dev),
        st.st_ino,
    );
    std::fs::write(record, text).unwrap();
    say("PLANTED", "ok");
    while hear().is_some() {}
    drop(fd);
}

/// A region file that its mode lets another user write (here 0666), cut
/// short by that user (uid 65534, `truncate`) while this process holds
/// it attached through the safe API: on tmpfs (posix) and on hugetlbfs.
/// Past the new end a plain access died of SIGBUS; now every checked
/// accessor returns `RegionError::Lost` with the file's new size, the
/// process goes on, and closing, attaching again and destroying work.
#[test]
fn a_region_truncated_under_its_holder_is_an_error_not_sigbus() {
    let Some(pool) = live!() else {
        return;
    };
    if skip_without_setpriv(pool.name()) {
        return;
    }
    pool.ensure_free(MIB2, 2).unwrap();
    let mount = TempMount::new("hugetlbfs", "pagesize=2M,mode=1777");
    let cases = [
        (Backend::Posix, PageSize::Base, None, 4096u64),
        (
            Backend::Hugetlbfs,
            PageSize::HUGE_2M,
            Some(mount.path()),
            MIB2,
        ),
    ];
    for (backend, page, dir, cut) in cases {
        let name = unique("cut-held");
        let _cleanup = RemoveOnDrop::new(&name, backend, dir);
        let mut b = RegionBuilder::new(4 << 20)
            .name(&name)
            .backend(backend)
            .page_size(page)
            .policy(Policy::Only)
            .mode(0o666);
        let mut l = Locator::new(&name, backend).mode(0o666);
        if let Some(d) = dir {
            b = b.directory(d);
            l = l.directory(d);
        }
        let (created, _) = b.create().unwrap();
        let mut region = l.attach().unwrap();
        let end = region.data_len() - 8;
        region.write_at(end, b"the end!").unwrap();
        let path = region.path().expect("a file region has a path");
        let st = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args(["truncate", "-s", &cut.to_string()])
            .arg(&path)
            .status()
            .unwrap();
        assert!(st.success(), "{backend}: truncate as uid 65534");
        let what = format!("{backend} cut to {cut}");
        let lost = |r: Result<(), RegionError>, op: &str| {
            let e = r.unwrap_err();
            let text = e.to_string();
            match &e {
                RegionError::Lost { file_bytes, .. } => {
                    assert_eq!(*file_bytes, Some(cut), "{what} {op}: {text}")
                }
                _ => panic!("{what} {op}: {text}"),
            }
            assert!(
                text.contains(&format!("truncated to {cut} bytes by another process")),
                "{what} {op}: {text}"
            );
            assert!(e.fix().is_some(), "{what} {op}: a fix");
        };
        let mut buf = [0u8; 8];
        lost(region.read_at(end, &mut buf), "read_at");
        assert!(region.is_lost(), "{what}");
        lost(region.write_at(end, b"again..."), "write_at");
        lost(region.atomic_u64(end).map(|_| ()), "atomic_u64");
        lost(region.atomic_u32s(0, 2).map(|_| ()), "atomic_u32s");
        lost(region.load_words(end, &mut buf), "load_words");
        lost(region.store_words(end, &buf), "store_words");
        region.close().unwrap();
        // The creator's handle faults too; it goes cleanly, and so does
        // the name.
        lost(created.read_at(end, &mut buf), "the creator's read_at");
        created.destroy().unwrap();
        assert!(!path.exists(), "{what}: destroyed");
    }
    drop(mount);
    pool.finish();
}
