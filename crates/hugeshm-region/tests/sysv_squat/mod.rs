//! Another user's System V segment under a region's key (uid 65534's, of
//! 2 MiB or 1 GiB pages, 4 KiB longer than one page, as any program can
//! make it): root's hugeshm never attaches it, not to attach, inspect,
//! remove, create over or list it (its `shm_nattch`, `shm_lpid` and
//! `shm_atime` stay 0), and lists it from `/proc/sysvipc/shm` as
//! `untrusted`. Where it is trusted (`owner(65534)`), or attached by
//! `hugeshm_sys` at an alignment, it is mapped rounded up to its own page
//! size inside the address space reserved for it: a mapping planted right
//! above the reservation the old code made survives (the old code
//! reserved the size rounded to 4 KiB plus the alignment and mapped the
//! size rounded to the huge page size over the start of the plant).

use hugeshm_region::{
    list_regions, sysv_key, Backend, Locator, NamedObject, PageSize, Reclaim, Region,
    RegionBuilder, RegionState,
};
use hugeshm_sys::{self as sys, Mapping, ShmFlags};
use hugeshm_testkit::HostState;

use crate::common::*;

const ENV: &str = "HUGESHM_SYSV_SQUAT_CHILD";
const CHILD: &str = "sysv_squat::squat_child";
const BASE: usize = 4096;
const CANARY: &[u8; 8] = b"planted!";

/// The child of the tests below:
/// * `make:KEY:SIZE:PAGE` (run as uid 65534): makes the segment, prints
///   `MADE shmid`;
/// * `plant:SHMID:SIZE:ALIGN:HOW:NAME` (as root): plants a mapping right
///   above where the old code's reservation would go, attaches the segment
///   (`sys`: `shm_attach_placed` at `ALIGN`; `locator`: attach `NAME`
///   trusting uid 65534), prints `RESULT` with what was mapped and whether
///   the plant survived.
#[test]
#[ignore = "helper: its parent test runs it"]
fn squat_child() {
    let Some(spec) = helper_spec(ENV) else {
        return;
    };
    let f: Vec<&str> = spec.split(':').collect();
    match f[0] {
        "make" => {
            let flags = ShmFlags {
                huge_page_size: Some(f[3].parse().unwrap()),
                ..ShmFlags::create_new(None)
            };
            match sys::shm_get(f[1].parse().unwrap(), f[2].parse().unwrap(), flags) {
                Ok(id) => say("MADE", &id.to_string()),
                Err(e) => say("MADE", &format!("error {e}")),
            }
        }
        "plant" => {
            let (shmid, size): (i32, usize) = (f[1].parse().unwrap(), f[2].parse().unwrap());
            let align: usize = f[3].parse().unwrap();
            // What the old code reserved: the size in base pages, plus the
            // alignment.
            let plant = plant_above_next(size.div_ceil(BASE) * BASE + align, align);
            let (mapped, held) = match f[4] {
                "sys" => match sys::shm_attach_placed(shmid, Some(align)) {
                    Ok(m) => (
                        format!(
                            "len {} page {} aligned {}",
                            m.len(),
                            m.page_size(),
                            m.addr() % align == 0
                        ),
                        Some(m),
                    ),
                    Err(e) => (format!("error {e}"), None),
                },
                _ => {
                    let r = Locator::new(f[5], Backend::Sysv).owner(65534).attach();
                    match r {
                        Ok(r) => (format!("attached {:?}", r.name()), None),
                        Err(e) => (format!("refused: {e}"), None),
                    }
                }
            };
            // Looked at while the attachment is still there: the old
            // code's covered the start of the plant.
            let plant_state = plant_intact(&plant.plant);
            drop(held);
            say("RESULT", &format!("{plant_state}; {mapped}"));
        }
        other => panic!("unknown child mode {other}"),
    }
}

/// A shared mapping of `align` bytes, one base page less above 2 MiB
/// (shared: never merged with its neighbours; a base page less: a shared
/// mapping of 1 GiB came out 1 GiB-aligned in half the runs on 6.18, and
/// every gap below it one the filter refuses), with a canary at both
/// ends, placed so that the next
/// mapping of `total` bytes the kernel chooses an address for ends right
/// where it starts, and at an address the old code would have moved up
/// by more than a base page to align; the mappings that fill every higher
/// gap of `total` bytes are kept with it.
struct Plant {
    plant: Mapping,
    _fillers: Vec<Mapping>,
}

fn plant_above_next(total: usize, align: usize) -> Plant {
    let mut fillers = Vec::new();
    for _ in 0..64 {
        let len = if align > 2 << 20 { align - BASE } else { align };
        let mut plant = sys::MapOptions::new(len).shared().map_anon().unwrap();
        plant.write_at(0, CANARY).unwrap();
        plant.write_at(len - CANARY.len(), CANARY).unwrap();
        let below = plant.addr().checked_sub(total);
        let misaligned = below.filter(|y| *y % align != 0 && *y % align != align - BASE);
        let Some(below) = misaligned else {
            fillers.push(plant);
            continue;
        };
        loop {
            let probe = sys::MapOptions::new(total).map_anon().unwrap();
            if probe.addr() == below {
                // Free again: the next mapping of `total` bytes goes here.
                drop(probe);
                return Plant {
                    plant,
                    _fillers: fillers,
                };
            }
            let higher = probe.addr() > plant.addr();
            fillers.push(probe);
            if !higher {
                // No room right below the plant: try another.
                break;
            }
        }
        fillers.push(plant);
    }
    panic!("could not plant a mapping right above the next mapping of {total} bytes");
}

/// `intact`, or what became of the plant: its line of /proc/self/maps
/// (start to end, not a SysV segment), then its canaries.
fn plant_intact(plant: &Mapping) -> String {
    let (start, end) = (plant.addr(), plant.addr() + plant.len());
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let line = maps
        .lines()
        .find(|l| l.starts_with(&format!("{start:08x}-")));
    match line {
        Some(l) if l.starts_with(&format!("{start:08x}-{end:08x} ")) && !l.contains("SYSV") => {}
        other => return format!("clobbered: the plant at {start:#x}-{end:#x} is now {other:?}"),
    }
    let mut a = [0u8; 8];
    let mut b = [0u8; 8];
    plant.read_at(0, &mut a).unwrap();
    plant.read_at(plant.len() - 8, &mut b).unwrap();
    if &a != CANARY || &b != CANARY {
        return format!("clobbered: the plant's canaries read {a:?} {b:?}");
    }
    "intact".to_owned()
}

/// What the child `plant:...` printed.
fn planted_attach(shmid: i32, size: u64, align: u64, how: &str, name: &str) -> String {
    let mut kid = Kid::spawn(
        CHILD,
        ENV,
        &format!("plant:{shmid}:{size}:{align}:{how}:{name}"),
    );
    let r = kid.expect("RESULT");
    kid.finish();
    println!("{how} at a multiple of {align}: {r}");
    r
}

/// uid 65534 makes a segment of `page` pages, `page + 4 KiB` long, under
/// the key of a fresh name; root's hugeshm refuses it without attaching
/// it, lists it without attaching it, and maps it inside its reservation
/// where it is trusted.
fn squat_case(page: u64) {
    let before = HostState::capture().unwrap();
    let size = page + BASE as u64;
    let name = unique("squat");
    let mut kid = Kid::spawn_as_nobody_in_hugetlb_shm_group(
        CHILD,
        ENV,
        &format!("make:{}:{size}:{page}", sysv_key(&name)),
    );
    let made = kid.expect("MADE");
    kid.finish();
    let shmid: i32 = made
        .parse()
        .unwrap_or_else(|_| panic!("uid 65534 could not make its segment: {made}"));
    let guard = ShmGuard(shmid);
    println!("uid 65534 made segment {shmid} of {size} bytes on {page}-byte pages");
    let untouched = |what: &str| {
        let st = sys::shm_stat(shmid).unwrap();
        assert_eq!(
            (st.uid, st.nattch, st.lpid, st.atime, st.dtime),
            (65534, 0, 0, 0, 0),
            "after {what}, uid 65534's segment shows an attach: {st:?}"
        );
    };
    untouched("shmget");

    let locator = || Locator::new(&name, Backend::Sysv);
    assert_untrusted_65534("attach", locator().attach().map(drop));
    assert_untrusted_65534("attach by shmid", Region::attach_shmid(shmid).map(drop));
    assert_untrusted_65534("inspect", locator().inspect().map(drop));
    assert_untrusted_65534("remove", locator().remove().map(drop));
    assert_untrusted_65534(
        "create --reclaim recreate",
        RegionBuilder::new(4 << 20)
            .name(&name)
            .backend(Backend::Sysv)
            .page_size(PageSize::Base)
            .reclaim(Reclaim::Recreate)
            .create()
            .map(drop),
    );
    untouched("attach, inspect, remove and create");
    println!("attach, inspect, remove and create refused it without attaching it");

    // Listed from /proc/sysvipc/shm alone.
    let listed = list_regions().unwrap();
    let entry = listed
        .iter()
        .find(|r| matches!(r.object, NamedObject::Sysv { shmid: s, .. } if s == shmid))
        .unwrap_or_else(|| panic!("segment {shmid} not listed: {listed:#?}"));
    assert_eq!(entry.state, RegionState::Untrusted, "{entry:#?}");
    assert_eq!(entry.name, format!("key-{:08x}", sysv_key(&name) as u32));
    assert_eq!(entry.owner.map(|o| o.uid), Some(65534), "{entry:#?}");
    assert!(entry.header.is_none() && entry.fix.is_none(), "{entry:#?}");
    assert!(!entry.held, "{entry:#?}");
    untouched("list_regions");
    println!("listed as {entry:?}, without attaching it");

    // Trusted, it is mapped whole, at the alignment asked for, and
    // nothing beyond its reservation is touched.
    let rounded = 2 * page;
    let want = format!("intact; len {rounded} page {page} aligned true");
    assert_eq!(planted_attach(shmid, size, page, "sys", ""), want);
    if page < 1 << 30 {
        // At an alignment above its page size (page-table sharing of 2 MiB
        // pages): attached again inside a reservation of its mapped length
        // plus the alignment.
        assert_eq!(planted_attach(shmid, size, 1 << 30, "sys", ""), want);
    }
    if page >= 1 << 30 {
        // 1 GiB or more: attach maps it 1 GiB-aligned (page-table
        // sharing). No header: refused, after mapping it.
        let r = planted_attach(shmid, size, page, "locator", &name);
        assert!(r.starts_with("intact; refused: "), "{r}");
        assert!(r.contains("header not written"), "{r}");
    }
    drop(guard);
    assert_no_leaks(&before, &format!("squat of {page}-byte pages"));
}

#[test]
fn another_users_segment_of_2mib_pages_is_never_attached_and_maps_inside_its_reservation() {
    squat_test(live!(), MIB2);
}

#[test]
fn another_users_segment_of_1gib_pages_is_never_attached_and_maps_inside_its_reservation() {
    squat_test(live!(), GIB);
}

/// [`squat_case`] as root (`pool`: the test's harness), with two free
/// pages of `page` bytes (for 1 GiB pages, an allowed skip where the host
/// cannot give them: the 2 MiB case proves the same rounding).
fn squat_test(pool: Option<Live>, page: u64) {
    let Some(pool) = pool else {
        return;
    };
    if skip_without_setpriv(pool.name()) {
        return;
    }
    if page == GIB {
        if !try_gigantic(&pool, 2) {
            return;
        }
    } else {
        pool.ensure_free(page, 2).unwrap();
    }
    squat_case(page);
    pool.finish();
}
