//! The crash interlock, for real (root, real huge pages; SKIP otherwise):
//!
//! * headers that do not match are refused: wrong size or page size, a
//!   foreign SysV segment under the region's key, a hugeshm region of
//!   another name under the same key (an FNV-1a collision), a newer
//!   layout, the wrong backend;
//! * many processes creating one name at once: exactly one wins;
//! * SIGKILL of the creator in the middle of the pre-fault: attach says
//!   the creator crashed, create refuses, reuse is refused, recreate
//!   works, nothing leaks;
//! * a ready region whose creator died is reused with its contents;
//! * a region a live process holds is never reclaimed;
//! * another user cannot attach a 0600 region.
//!
//! Children are this binary re-executed with `HUGESHM_INTERLOCK_CHILD`.

mod common;

use common::*;
use hugeshm_region::{
    naming::sysv_key, AllocationReport, Backend, Locator, PageSize, Policy, Reclaim, Region,
    RegionBuilder, RegionError, RegionState, Renderer,
};
use hugeshm_sys as sys;
use hugeshm_testkit::HostState;

const ENV: &str = "HUGESHM_INTERLOCK_CHILD";

/// Two names whose SysV keys collide (FNV-1a of `hugeshm.<name>`).
const COLLIDING: (&str, &str) = ("kc-tazszyqk", "kc-ycjtfahz");

fn page_for(backend: Backend) -> PageSize {
    if backend == Backend::Posix {
        PageSize::Base
    } else {
        PageSize::HUGE_2M
    }
}

fn builder(backend: Backend, name: &str, dir: &str, size: u64) -> RegionBuilder {
    let b = RegionBuilder::new(size)
        .name(name)
        .backend(backend)
        .page_size(page_for(backend))
        .policy(Policy::Only);
    if dir.is_empty() {
        b
    } else {
        b.directory(dir)
    }
}

fn locator(backend: Backend, name: &str, dir: &str) -> Locator {
    let l = Locator::new(name, backend);
    if dir.is_empty() {
        l
    } else {
        l.directory(dir)
    }
}

fn kind(e: &RegionError) -> &'static str {
    match e {
        RegionError::AlreadyExists { .. } => "exists",
        RegionError::Orphaned { .. } => "orphaned",
        RegionError::Incomplete { .. } => "incomplete",
        RegionError::Stale { .. } => "stale",
        RegionError::NotOurs { .. } => "notours",
        RegionError::Permission { .. } => "permission",
        RegionError::NotFound { .. } => "notfound",
        _ => "other",
    }
}

/// Child tasks: `MODE:BACKEND:NAME:DIR:SIZE`.
#[test]
#[ignore = "helper: its parent test runs it"]
fn interlock_child() {
    let Some(spec) = helper_spec(ENV) else {
        return;
    };
    let f: Vec<&str> = spec.splitn(5, ':').collect();
    let (mode, backend, name, dir) = (f[0], f[1].parse::<Backend>().unwrap(), f[2], f[3]);
    let size: u64 = f[4].parse().unwrap();
    match mode {
        // Create with one slow pre-fault thread; stall after the first
        // chunk so the parent can kill us mid-pre-fault.
        "crash" => {
            let r = builder(backend, name, dir, size)
                .prefault_threads(1)
                .progress(|done, total| {
                    say("PROGRESS", &format!("{done} {total}"));
                    std::thread::sleep(std::time::Duration::from_secs(120));
                })
                .create();
            panic!("not killed in time: {:?}", r.map(|_| ()));
        }
        // Create, write, report, hold until killed or told.
        "hold" => {
            let (mut region, report) = builder(backend, name, dir, size).create().unwrap();
            region.write_at(0, b"kept across a crash").unwrap();
            say("READY", &serde_json::to_string(&report).unwrap());
            let _ = hear();
            region.close().unwrap();
        }
        // Wait for "go", race to create, report, hold if won.
        "race" => {
            say("WAITING", "");
            let _ = hear();
            match builder(backend, name, dir, size)
                .prefault_threads(1)
                .create()
            {
                Ok((region, _)) => {
                    say("RESULT", "won");
                    let _ = hear();
                    region.close().unwrap();
                }
                Err(e) => {
                    let holders = match &e {
                        RegionError::AlreadyExists { holders, .. } => format!("{holders:?}"),
                        _ => String::new(),
                    };
                    say("RESULT", &format!("{} {holders} {e}", kind(&e)));
                }
            }
        }
        // As another user: create a region anyone may write, hold it until
        // told, then leave it behind.
        "squat" => {
            let page = if backend == Backend::Hugetlbfs {
                PageSize::HUGE_2M
            } else {
                PageSize::Base
            };
            let r = builder(backend, name, dir, size)
                .page_size(page)
                .mode(0o666)
                .prefault_threads(1)
                .create();
            match r {
                Ok((region, _)) => {
                    say("SQUATTED", "ok");
                    let _ = hear();
                    region.close().unwrap();
                }
                Err(e) => say("SQUATTED", &format!("{} {e}", kind(&e))),
            }
        }
        // As another user: try to attach.
        "perm" => {
            let r = locator(backend, name, dir).attach();
            let text = match &r {
                Ok(_) => "ok".to_owned(),
                Err(e) => format!("{} {e}", kind(e)),
            };
            say("PERM", &text);
        }
        other => panic!("unknown child mode {other}"),
    }
}

fn child(mode: &str, backend: Backend, name: &str, dir: &str, size: u64) -> Kid {
    Kid::spawn(
        "interlock_child",
        ENV,
        &format!("{mode}:{backend}:{name}:{dir}:{size}"),
    )
}

#[test]
fn header_mismatches_are_refused() {
    let Some(pool) = live!() else {
        return;
    };
    pool.ensure_free(MIB2, 8).unwrap();
    let before = HostState::capture().unwrap();

    // Wrong size, wrong page size: refused with both numbers.
    let name = unique("hdr");
    let _cleanup = RemoveOnDrop::new(&name, Backend::Sysv, None);
    let (region, _) = builder(Backend::Sysv, &name, "", 6 << 20).create().unwrap();
    let l = Locator::new(&name, Backend::Sysv);
    let err = l.clone().expect_size(8 << 20).attach().unwrap_err();
    println!("wrong size: {err}");
    let RegionError::HeaderMismatch {
        field,
        expected,
        found,
        ..
    } = &err
    else {
        panic!("{err}")
    };
    assert_eq!(field, "size");
    assert!(expected.starts_with("8388608 bytes"), "{err}");
    assert!(found.starts_with("6291456 bytes"), "{err}");
    let err = l.clone().expect_page_size(1 << 30).attach().unwrap_err();
    println!("wrong page size: {err}");
    assert!(
        matches!(&err, RegionError::HeaderMismatch { field, .. } if field == "page size"),
        "{err}"
    );
    // The size asked for at creation, or the rounded size, both match.
    l.clone()
        .expect_size(6 << 20)
        .attach()
        .unwrap()
        .close()
        .unwrap();
    l.clone()
        .expect_size((6 << 20) - 100)
        .expect_page_size(MIB2)
        .attach()
        .unwrap()
        .close()
        .unwrap();
    // The wrong backend.
    let err = Locator::new(&name, Backend::Posix).attach().unwrap_err();
    assert!(matches!(err, RegionError::NotFound { .. }), "{err}");

    // A newer layout: patch the version, attach and create refuse with
    // both versions; restored, it attaches again.
    let version_at = region.as_ptr().wrapping_add(8);
    // SAFETY: offset 8 of the live mapping (the header's version field);
    // nothing else in this process accesses it.
    unsafe { std::ptr::write_volatile(version_at, 2) };
    let err = l.attach().unwrap_err();
    println!("newer layout: {err}");
    assert!(
        matches!(
            err,
            RegionError::NewerLayout {
                found: 2,
                supported: 1,
                ..
            }
        ),
        "{err}"
    );
    let err = builder(Backend::Sysv, &name, "", 6 << 20)
        .reclaim(Reclaim::Recreate)
        .create()
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(err, RegionError::NewerLayout { .. }), "{err}");
    // SAFETY: as above.
    unsafe { std::ptr::write_volatile(version_at, 1) };
    l.attach().unwrap().close().unwrap();
    region.destroy().unwrap();

    // A foreign segment under the key: never used, reclaimed or removed.
    let name = unique("foreign");
    let key = sysv_key(&name);
    let id = sys::shm_get(key, 4 << 20, sys::ShmFlags::create_new(Some(MIB2))).unwrap();
    let guard = ShmGuard(id);
    let mut att = sys::shm_attach(id).unwrap();
    att.write_at(0, b"PGSHMEM!not a hugeshm header").unwrap();
    att.release().unwrap();
    let err = Region::attach(&name, Backend::Sysv).unwrap_err();
    println!("foreign: {err}");
    assert!(matches!(err, RegionError::NotOurs { .. }), "{err}");
    assert!(err.to_string().contains("504753484d454d21"), "{err}");
    for reclaim in [Reclaim::Refuse, Reclaim::Reuse, Reclaim::Recreate] {
        let err = builder(Backend::Sysv, &name, "", 4 << 20)
            .reclaim(reclaim)
            .create()
            .map(|_| ())
            .unwrap_err();
        assert!(
            matches!(err, RegionError::NotOurs { .. }),
            "{reclaim}: {err}"
        );
    }
    let err = hugeshm_region::remove(&name, Backend::Sysv).unwrap_err();
    assert!(matches!(err, RegionError::NotOurs { .. }), "{err}");
    let info = Locator::new(&name, Backend::Sysv).inspect().unwrap();
    assert_eq!(info.state, RegionState::Foreign);
    assert!(
        sys::shm_stat(id).is_ok(),
        "the foreign segment is untouched"
    );
    drop(guard);

    // Another hugeshm region whose name has the same key.
    let (a, b) = COLLIDING;
    assert_eq!(sysv_key(a), sysv_key(b));
    let (region, _) = builder(Backend::Sysv, a, "", 4 << 20).create().unwrap();
    let err = Region::attach(b, Backend::Sysv).unwrap_err();
    println!("collision: {err}");
    assert!(matches!(err, RegionError::NotOurs { .. }), "{err}");
    assert!(err.to_string().contains(&format!("{a:?}")), "{err}");
    let err = builder(Backend::Sysv, b, "", 4 << 20)
        .reclaim(Reclaim::Recreate)
        .create()
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(err, RegionError::NotOurs { .. }), "{err}");
    region.destroy().unwrap();

    // A posix file found by a hugetlbfs locator (the fall-back location).
    let name = unique("backend");
    let (region, _) = builder(Backend::Posix, &name, "", 1 << 20)
        .create()
        .unwrap();
    let err = Locator::new(&name, Backend::Hugetlbfs)
        .directory("/dev/shm")
        .attach()
        .unwrap_err();
    println!("backend: {err}");
    assert!(
        matches!(&err, RegionError::HeaderMismatch { field, .. } if field == "backend"),
        "{err}"
    );
    region.destroy().unwrap();

    assert_no_leaks(&before, "header mismatches");
    pool.finish();
}

#[test]
fn concurrent_creators_exactly_one_wins() {
    let Some(pool) = live!() else {
        return;
    };
    const N: usize = 16;
    pool.ensure_free(MIB2, 2 * N as u64 + 2).unwrap();
    let mount = TempMount::new("hugetlbfs", "pagesize=2M");
    for backend in [
        Backend::Sysv,
        Backend::Hugetlbfs,
        Backend::Posix,
        Backend::Memfd,
    ] {
        let before = HostState::capture().unwrap();
        let (name, dir, _cleanup) = named("race", backend, &mount);
        let mut kids: Vec<Kid> = (0..N)
            .map(|_| child("race", backend, &name, &dir, 4 << 20))
            .collect();
        for k in &mut kids {
            k.expect("WAITING");
        }
        for k in &mut kids {
            k.send("go");
        }
        let results: Vec<(u32, String)> = kids
            .iter_mut()
            .map(|k| (k.pid, k.expect("RESULT")))
            .collect();
        let winners: Vec<u32> = results
            .iter()
            .filter(|(_, r)| r == "won")
            .map(|(p, _)| *p)
            .collect();
        assert_eq!(winners.len(), 1, "{backend}: {results:#?}");
        let winner = winners[0];
        let mut named_winner = 0;
        for (pid, r) in &results {
            if *pid == winner {
                continue;
            }
            assert!(r.starts_with("exists "), "{backend}: pid {pid}: {r}");
            if r.contains(&winner.to_string()) {
                named_winner += 1;
            }
        }
        println!(
            "{backend}: {N} creators: pid {winner} won; {} got AlreadyExists, {named_winner} of \
             them naming the winner; e.g. {}",
            N - 1,
            results.iter().find(|(p, _)| *p != winner).unwrap().1
        );
        for k in kids {
            k.finish();
        }
        if backend != Backend::Memfd {
            locator(backend, &name, &dir).remove().unwrap();
        }
        assert_no_leaks(&before, &format!("race {backend}"));
    }
    drop(mount);
    pool.finish();
}

#[test]
fn sigkill_mid_prefault_then_recovery() {
    let Some(pool) = live!() else {
        return;
    };
    const SIZE: u64 = 256 << 20;
    pool.ensure_free(MIB2, SIZE / MIB2 + 2).unwrap();
    let mount = TempMount::new("hugetlbfs", "pagesize=2M");
    for backend in [
        Backend::Sysv,
        Backend::Hugetlbfs,
        Backend::Posix,
        Backend::Memfd,
    ] {
        let before = HostState::capture().unwrap();
        let (name, dir, _cleanup) = named("crash", backend, &mount);
        let mut kid = child("crash", backend, &name, &dir, SIZE);
        let progress = kid.expect("PROGRESS");
        let creator = kid.pid;
        kid.kill();
        println!("{backend}: killed pid {creator} mid-pre-fault at {progress} bytes");

        // What is left, as inspect (and `hugeshm ls`) sees it.
        let info = locator(backend, &name, &dir).inspect().unwrap();
        println!(
            "{backend}: left behind: state {} held {} {:?}",
            info.state, info.held, info.object
        );
        assert!(!info.held, "{backend}: {info:?}");
        assert!(info.is_orphaned(), "{backend}: {info:?}");
        let listed = hugeshm_region::list_regions().unwrap();
        assert!(
            listed
                .iter()
                .any(|i| i.name == name && i.state == info.state),
            "{backend}: ls shows the orphan: {listed:#?}"
        );

        // Attach: the creator crashed (or, memfd, the region is gone).
        let err = locator(backend, &name, &dir).attach().unwrap_err();
        println!("{backend}: attach: {err}");
        if backend == Backend::Memfd {
            assert_eq!(info.state, RegionState::Stale);
            assert!(
                matches!(err, RegionError::Stale { creator_pid, .. } if creator_pid == creator),
                "{err}"
            );
        } else {
            assert_eq!(info.state, RegionState::Crashed);
            assert_eq!(info.header.as_ref().unwrap().creator_pid, creator);
            let RegionError::Incomplete {
                creator_pid,
                creator_alive,
                header_written,
                ..
            } = &err
            else {
                panic!("{backend}: {err}")
            };
            assert_eq!(*creator_pid, Some(creator));
            assert!(!creator_alive && *header_written, "{err}");
            assert!(
                err.fix()
                    .unwrap()
                    .render(Renderer::Cli)
                    .contains("--reclaim recreate"),
                "{err}"
            );
        }

        if backend == Backend::Memfd {
            // Nothing is left to reclaim: create replaces the stale record
            // without being asked, and says so.
            let (region, report) = builder(backend, &name, &dir, SIZE).create().unwrap();
            let rec = report.reclaimed.as_ref().unwrap();
            assert_eq!(rec.previous_state, RegionState::Stale);
            region.destroy().unwrap();
            assert_no_leaks(&before, &format!("crash {backend}"));
            continue;
        }

        // Create: refused by default, saying how to reclaim.
        let err = builder(backend, &name, &dir, SIZE)
            .create()
            .map(|_| ())
            .unwrap_err();
        println!("{backend}: create: {err}");
        assert!(
            matches!(&err, RegionError::Orphaned { creator_pid: Some(p), .. } if *p == creator),
            "{backend}: {err}"
        );
        assert!(
            err.fix()
                .unwrap()
                .render(Renderer::Cli)
                .contains("--reclaim recreate"),
            "{err}"
        );
        // Reuse: nothing complete to reuse.
        let err = builder(backend, &name, &dir, SIZE)
            .reclaim(Reclaim::Reuse)
            .create()
            .map(|_| ())
            .unwrap_err();
        println!("{backend}: reuse: {err}");
        assert!(
            matches!(
                err,
                RegionError::Incomplete { .. } | RegionError::Stale { .. }
            ),
            "{backend}: {err}"
        );
        // Recreate: works.
        let (region, report) = builder(backend, &name, &dir, SIZE)
            .reclaim(Reclaim::Recreate)
            .create()
            .unwrap();
        let rec = report.reclaimed.as_ref().unwrap();
        assert_eq!(rec.action, Reclaim::Recreate);
        assert_eq!(rec.previous_state, info.state);
        // Once (under load, not reproduced since) this was short: the
        // whole report and the pools then say which pages were missing.
        assert_eq!(
            report.resident_bytes,
            SIZE,
            "{backend}: {report:#?}\npools now: {:?}",
            HostState::capture().map(|h| h.pools)
        );
        assert_eq!(
            report.header.as_ref().unwrap().creator_pid,
            std::process::id()
        );
        region.destroy().unwrap();
        assert_no_leaks(&before, &format!("crash {backend}"));
    }
    drop(mount);
    pool.finish();
}

#[test]
fn orphan_ready_region_is_reused_with_its_contents() {
    let Some(pool) = live!() else {
        return;
    };
    pool.ensure_free(MIB2, 8).unwrap();
    let mount = TempMount::new("hugetlbfs", "pagesize=2M");
    for backend in [Backend::Sysv, Backend::Hugetlbfs, Backend::Posix] {
        let before = HostState::capture().unwrap();
        let (name, dir, _cleanup) = named("reuse", backend, &mount);
        let mut kid = child("hold", backend, &name, &dir, 6 << 20);
        let created: AllocationReport = serde_json::from_str(&kid.expect("READY")).unwrap();
        // While the creator lives, nothing is reclaimed.
        for reclaim in [Reclaim::Reuse, Reclaim::Recreate] {
            let err = builder(backend, &name, &dir, 6 << 20)
                .reclaim(reclaim)
                .create()
                .map(|_| ())
                .unwrap_err();
            assert!(
                matches!(&err, RegionError::AlreadyExists { holders, .. } if holders.contains(&kid.pid)),
                "{backend} {reclaim}: {err}"
            );
        }
        let err = locator(backend, &name, &dir).remove().unwrap_err();
        assert!(matches!(err, RegionError::InUse { .. }), "{err}");
        let pid = kid.pid;
        kid.kill();

        let err = builder(backend, &name, &dir, 6 << 20)
            .create()
            .map(|_| ())
            .unwrap_err();
        println!("{backend}: {err}");
        assert!(
            matches!(&err, RegionError::Orphaned { state: RegionState::Ready, creator_pid: Some(p), .. } if *p == pid),
            "{err}"
        );
        assert!(
            err.fix()
                .unwrap()
                .render(Renderer::Cli)
                .contains("--reclaim reuse"),
            "{err}"
        );
        // Reuse, but not as something else.
        let err = builder(backend, &name, &dir, 8 << 20)
            .reclaim(Reclaim::Reuse)
            .create()
            .map(|_| ())
            .unwrap_err();
        assert!(
            matches!(&err, RegionError::HeaderMismatch { field, .. } if field == "size"),
            "{err}"
        );
        let (region, report) = builder(backend, &name, &dir, 6 << 20)
            .reclaim(Reclaim::Reuse)
            .create()
            .unwrap();
        let mut buf = [0u8; 19];
        region.read_at(0, &mut buf).unwrap();
        assert_eq!(&buf, b"kept across a crash", "{backend}");
        assert_eq!(report.reclaimed.as_ref().unwrap().action, Reclaim::Reuse);
        assert_eq!(
            report.header, created.header,
            "{backend}: the creator's header"
        );
        assert_eq!(report.resident_bytes, 6 << 20);
        println!("{backend}: reused: {:?}", report.warnings);
        region.destroy().unwrap();
        assert_no_leaks(&before, &format!("reuse {backend}"));
    }
    drop(mount);
    pool.finish();
}

#[test]
fn another_user_cannot_attach_a_0600_region() {
    let Some(pool) = live!() else {
        return;
    };
    if skip_without_setpriv("another_user_cannot_attach_a_0600_region") {
        return;
    }
    pool.ensure_free(MIB2, 8).unwrap();
    let mount = TempMount::new("hugetlbfs", "pagesize=2M,mode=0755");
    for backend in [
        Backend::Sysv,
        Backend::Hugetlbfs,
        Backend::Posix,
        Backend::Memfd,
    ] {
        let before = HostState::capture().unwrap();
        let (name, dir, _cleanup) = named("perm", backend, &mount);
        let (region, report) = builder(backend, &name, &dir, 4 << 20)
            .mode(0o600)
            .create()
            .unwrap();
        let mut kid = Kid::spawn_as_nobody(
            "interlock_child",
            ENV,
            &format!("perm:{backend}:{name}:{dir}:0"),
        );
        let r = kid.expect("PERM");
        kid.finish();
        println!("{backend} as uid 65534: {r}");
        assert!(r.starts_with("permission "), "{backend}: {r}");
        assert!(r.contains("permission denied"), "{r}");
        // Still intact for its owner.
        assert_eq!(
            locator(backend, &name, &dir).attach().unwrap().header(),
            report.header.as_ref().unwrap()
        );
        region.destroy().unwrap();
        assert_no_leaks(&before, &format!("perm {backend}"));
    }
    drop(mount);
    pool.finish();
}

/// `/dev/shm` and hugetlbfs mounts are shared by every user: a region
/// another user made under our name (here uid 65534, mode 0666) is never
/// attached, reused, recreated over, inspected or removed, while its maker
/// holds it and after it left it behind; naming that owner and mode
/// explicitly accepts it. Our own region that others may write is refused
/// unless that mode is asked for.
#[test]
fn another_users_region_is_never_used_or_removed() {
    let Some(pool) = live!() else {
        return;
    };
    if skip_without_setpriv("another_users_region_is_never_used_or_removed") {
        return;
    }
    pool.ensure_free(MIB2, 4).unwrap();
    let mount = TempMount::new("hugetlbfs", "pagesize=2M,mode=1777");
    let untrusted = |what: &str, r: Result<(), RegionError>| {
        let fix = assert_untrusted_65534(what, r);
        assert!(fix.contains("--owner 65534 --mode 0666"), "{what}: {fix}");
    };
    for backend in [
        Backend::Sysv,
        Backend::Posix,
        Backend::Hugetlbfs,
        Backend::Memfd,
    ] {
        let before = HostState::capture().unwrap();
        let name = unique("squat");
        let dir = dir_for(backend, &mount);
        let size = 4 << 20;
        let mut kid = Kid::spawn_as_nobody(
            "interlock_child",
            ENV,
            &format!("squat:{backend}:{name}:{dir}:{size}"),
        );
        assert_eq!(kid.expect("SQUATTED"), "ok", "{backend}");
        let mut kid = Some(kid);
        for phase in ["held", "left behind"] {
            if phase == "left behind" {
                let mut k = kid.take().unwrap();
                if backend == Backend::Memfd {
                    // A memfd goes with a holder that exits cleanly; one
                    // that is killed leaves its record behind.
                    k.kill();
                } else {
                    k.send("go");
                    k.finish();
                }
            }
            let what = |op: &str| format!("{backend} {phase}: {op}");
            let page = if backend == Backend::Hugetlbfs {
                PageSize::HUGE_2M
            } else {
                PageSize::Base
            };
            for reclaim in [Reclaim::Reuse, Reclaim::Recreate] {
                untrusted(
                    &what(&format!("create --reclaim {reclaim}")),
                    builder(backend, &name, &dir, size)
                        .page_size(page)
                        .reclaim(reclaim)
                        .create()
                        .map(|_| ()),
                );
            }
            untrusted(
                &what("attach"),
                locator(backend, &name, &dir).attach().map(|_| ()),
            );
            untrusted(
                &what("inspect"),
                locator(backend, &name, &dir).inspect().map(|_| ()),
            );
            untrusted(
                &what("remove"),
                locator(backend, &name, &dir).remove().map(|_| ()),
            );
        }
        let trusting = || locator(backend, &name, &dir).owner(65534).mode(0o666);
        if backend != Backend::Memfd {
            // (A memfd is gone with its holder: only the record is left.)
            let r = trusting().attach().unwrap();
            assert_eq!(r.name(), Some(name.as_str()));
            r.close().unwrap();
        }
        trusting().remove().unwrap();
        assert_no_leaks(&before, &format!("squat {backend}"));
    }
    // Our own region that others may write: refused unless asked for.
    let name = unique("open");
    let (region, _) = builder(Backend::Posix, &name, "", 4 << 20)
        .page_size(PageSize::Base)
        .mode(0o666)
        .create()
        .unwrap();
    let err = locator(Backend::Posix, &name, "").attach().unwrap_err();
    assert!(
        matches!(&err, RegionError::Untrusted { reason, .. } if reason.contains("others")),
        "{err}"
    );
    locator(Backend::Posix, &name, "")
        .mode(0o666)
        .attach()
        .unwrap()
        .close()
        .unwrap();
    region.destroy().unwrap();
    drop(mount);
    pool.finish();
}
