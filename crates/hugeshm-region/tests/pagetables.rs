//! Page tables per attached process (root, real huge pages; SKIP
//! otherwise): N child processes attach a 1 GiB region by name and fault
//! every page in; `PageTables` in /proc/meminfo is read before and after,
//! twice (detach in between), and the smaller growth is taken (noise from
//! other processes only adds). With 2 MiB pages at a 1 GiB-aligned
//! address the kernel shares the PMD page, so each process adds almost
//! nothing; on 4 KiB pages each process needs 2 MiB of page tables per
//! GiB. The figures are printed; the assertions are loose (the counter is
//! host-wide, and other processes run).

mod common;

use common::*;
use hugeshm_region::{Backend, Locator, PageSize, Policy, RegionBuilder};
use hugeshm_testkit::HostState;
use serde::{Deserialize, Serialize};
use std::time::Instant;

const ENV: &str = "HUGESHM_PAGETABLES_CHILD";
const N: usize = 8;

/// Child: `BACKEND:NAME:PMD_SHARING`; attaches on "attach", closes on
/// "close", exits at end of input.
#[test]
#[ignore = "helper: its parent test runs it"]
fn pagetables_child() {
    let Some(spec) = helper_spec(ENV) else {
        return;
    };
    let f: Vec<&str> = spec.splitn(3, ':').collect();
    let backend: Backend = f[0].parse().unwrap();
    let locator = Locator::new(f[1], backend).pmd_sharing(f[2] == "1");
    say("READY", "");
    let mut held = None;
    while let Some(cmd) = hear() {
        match cmd.as_str() {
            "attach" => {
                let t0 = Instant::now();
                let region = locator.attach().unwrap();
                let attach_seconds = t0.elapsed().as_secs_f64();
                let t1 = Instant::now();
                region.populate_read().unwrap();
                let sample = AttachSample {
                    address: region.addr() as u64,
                    aligned_for_pmd_sharing: region.aligned_for_pmd_sharing(),
                    pmd_shareable_bytes: region.pmd_shareable_bytes(),
                    attach_seconds,
                    touch_seconds: t1.elapsed().as_secs_f64(),
                    vm_pte_bytes: hugeshm_probe::Probe::default()
                        .pid(std::process::id())
                        .status()
                        .ok()
                        .and_then(|s| s.vm_pte_bytes),
                };
                // Every page is in this process's page tables, whether the
                // touch shared another process's or built its own.
                let v = region.verify().unwrap();
                assert_eq!(
                    v.resident_bytes,
                    region.len() as u64,
                    "{f:?}: after populate_read: {v:?}"
                );
                held = Some(region);
                say("TOUCHED", &serde_json::to_string(&sample).unwrap());
            }
            "close" => {
                if let Some(r) = held.take() {
                    r.close().unwrap();
                }
                say("CLOSED", "");
            }
            _ => {}
        }
    }
}

/// What one child measured: attach (find, check, map) and read-fault
/// every page, then its own page-table bytes (`VmPTE`: a shared PMD page
/// is charged to every process using it, so sharing shows host-wide only).
#[derive(Debug, Serialize, Deserialize)]
struct AttachSample {
    address: u64,
    aligned_for_pmd_sharing: bool,
    pmd_shareable_bytes: u64,
    attach_seconds: f64,
    touch_seconds: f64,
    vm_pte_bytes: Option<u64>,
}

struct Figures {
    /// Growth of `PageTables` per process, one figure per round.
    rounds: Vec<i64>,
    samples: Vec<AttachSample>,
}

impl Figures {
    /// The smallest round: host-wide noise only adds.
    fn per_proc(&self) -> i64 {
        self.rounds.iter().copied().min().unwrap_or(0)
    }
}

fn measure(backend: Backend, page: PageSize, size: u64, pmd_sharing: bool) -> Figures {
    let name = unique("pt");
    let _cleanup = RemoveOnDrop::new(&name, backend, None);
    let (region, report) = RegionBuilder::new(size)
        .name(&name)
        .backend(backend)
        .page_size(page)
        .policy(Policy::Only)
        .pmd_sharing(pmd_sharing)
        .create()
        .unwrap();
    if page != PageSize::Base && page != PageSize::HUGE_1G && pmd_sharing {
        assert!(report.aligned_for_pmd_sharing, "{report:#?}");
    } else if report.aligned_for_pmd_sharing {
        // Without asking, the kernel may still pick a 1 GiB-aligned hole
        // (one a previous aligned mapping left): sharing happens anyway.
        println!("{backend}: the kernel chose a 1 GiB-aligned address by itself");
    }
    let spec = format!("{backend}:{name}:{}", if pmd_sharing { 1 } else { 0 });
    let mut kids: Vec<Kid> = (0..N)
        .map(|_| Kid::spawn("pagetables_child", ENV, &spec))
        .collect();
    for k in &mut kids {
        k.expect("READY");
    }
    let mut rounds = Vec::new();
    let mut samples = Vec::new();
    for _ in 0..2 {
        // Page-table pages of earlier unmaps are freed after an RCU grace
        // period: let them go before the first reading.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let pt0 = page_tables_bytes();
        for k in &mut kids {
            k.send("attach");
        }
        samples = kids
            .iter_mut()
            .map(|k| serde_json::from_str(&k.expect("TOUCHED")).unwrap())
            .collect();
        let pt1 = page_tables_bytes();
        rounds.push((pt1 as i64 - pt0 as i64) / N as i64);
        for k in &mut kids {
            k.send("close");
        }
        for k in &mut kids {
            k.expect("CLOSED");
        }
    }
    for k in kids {
        k.finish();
    }
    region.destroy().unwrap();
    Figures { rounds, samples }
}

fn show(what: &str, f: &Figures) {
    let s = &f.samples[0];
    let attach_ms: f64 =
        f.samples.iter().map(|s| s.attach_seconds).sum::<f64>() / f.samples.len() as f64 * 1e3;
    let touch_ms: f64 =
        f.samples.iter().map(|s| s.touch_seconds).sum::<f64>() / f.samples.len() as f64 * 1e3;
    println!(
        "{what}: {N} processes attach+touch: PageTables +{:.1} KiB/process (rounds: {:?} bytes); \
         aligned {} (shareable {} MiB) at {:#x}; VmPTE {} KiB; attach {attach_ms:.2} ms, \
         touch {touch_ms:.2} ms",
        f.per_proc() as f64 / 1024.0,
        f.rounds,
        s.aligned_for_pmd_sharing,
        s.pmd_shareable_bytes >> 20,
        s.address,
        s.vm_pte_bytes.unwrap_or(0) / 1024,
    );
}

#[test]
fn attached_processes_share_page_tables() {
    let Some(pool) = live!() else {
        return;
    };
    const GIB: u64 = 1 << 30;
    pool.ensure_free(MIB2, GIB / MIB2 + 2).unwrap();
    let before = HostState::capture().unwrap();

    let shared = measure(Backend::Sysv, PageSize::HUGE_2M, GIB, true);
    show("sysv 1 GiB on 2 MiB pages, 1 GiB-aligned", &shared);
    assert!(shared.samples.iter().all(|s| s.aligned_for_pmd_sharing));
    let memfd = measure(Backend::Memfd, PageSize::HUGE_2M, GIB, true);
    show("memfd 1 GiB on 2 MiB pages, 1 GiB-aligned", &memfd);
    assert!(memfd.samples.iter().all(|s| s.aligned_for_pmd_sharing));
    let unshared = measure(Backend::Sysv, PageSize::HUGE_2M, GIB, false);
    show(
        "sysv 1 GiB on 2 MiB pages, kernel-chosen address",
        &unshared,
    );
    let base = measure(Backend::Posix, PageSize::Base, GIB, true);
    show("posix 1 GiB on 4 KiB pages", &base);
    assert!(base.samples.iter().all(|s| !s.aligned_for_pmd_sharing));

    // Targets: <= 64 KiB per process when shared (asserted loosely, the
    // counter is host-wide); ~2 MiB per process per GiB on 4 KiB pages.
    for (what, f) in [("sysv", &shared), ("memfd", &memfd)] {
        assert!(
            f.per_proc() < 256 << 10,
            "{what}: {} bytes of page tables per process with sharing",
            f.per_proc()
        );
    }
    assert!(
        base.per_proc() > 1 << 20,
        "4 KiB pages: {} bytes per process",
        base.per_proc()
    );
    println!(
        "per process per GiB: shared 2 MiB pages {:.1} KiB, unaligned 2 MiB pages {:.1} KiB, \
         4 KiB pages {:.1} KiB",
        shared.per_proc() as f64 / 1024.0,
        unshared.per_proc() as f64 / 1024.0,
        base.per_proc() as f64 / 1024.0
    );
    assert_no_leaks(&before, "page tables 2 MiB / 4 KiB");

    if try_gigantic(&pool, 1) {
        let before = HostState::capture().unwrap();
        let giant = measure(Backend::Sysv, PageSize::HUGE_1G, GIB, true);
        show("sysv 1 GiB on 1 GiB pages", &giant);
        assert!(giant.per_proc() < 256 << 10, "{}", giant.per_proc());
        assert_no_leaks(&before, "page tables 1 GiB");
    }
    pool.finish();
}

/// `populate_read` faults one page per GiB where it can share the
/// creator's page-table page, and every page where there is none to share
/// (the creator gone, no other process attached): both leave every page
/// mapped (the child checks its smaps).
#[test]
fn populate_read_maps_every_page_shared_or_not() {
    let Some(pool) = live!() else {
        return;
    };
    const SIZE: u64 = 2 << 30;
    pool.ensure_free(MIB2, SIZE / MIB2 + 2).unwrap();
    let before = HostState::capture().unwrap();
    for creator_holds in [true, false] {
        let name = unique("pop");
        let _cleanup = RemoveOnDrop::new(&name, Backend::Sysv, None);
        let (region, report) = RegionBuilder::new(SIZE)
            .name(&name)
            .backend(Backend::Sysv)
            .page_size(PageSize::HUGE_2M)
            .policy(Policy::Only)
            .pmd_sharing(true)
            .create()
            .unwrap();
        assert!(report.aligned_for_pmd_sharing, "{report:#?}");
        let held = if creator_holds {
            Some(region)
        } else {
            region.close().unwrap();
            None
        };
        let mut kid = Kid::spawn("pagetables_child", ENV, &format!("sysv:{name}:1"));
        kid.expect("READY");
        kid.send("attach");
        let s: AttachSample = serde_json::from_str(&kid.expect("TOUCHED")).unwrap();
        assert!(s.aligned_for_pmd_sharing, "{s:?}");
        println!(
            "creator holds it: {creator_holds}: attach {:.3} ms, populate_read {:.3} ms of {} GiB",
            s.attach_seconds * 1e3,
            s.touch_seconds * 1e3,
            SIZE >> 30
        );
        kid.send("close");
        kid.expect("CLOSED");
        kid.finish();
        match held {
            Some(r) => r.destroy().unwrap(),
            None => {
                Locator::new(&name, Backend::Sysv).remove().unwrap();
            }
        }
    }
    assert_no_leaks(&before, "populate_read");
    pool.finish();
}
