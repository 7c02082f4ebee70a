//! Attach by name from unrelated processes, for every backend that has
//! names: a creator process and an attacher process, both fresh
//! executions of this test binary (siblings, sharing nothing but the
//! name), the attacher finding the region by name alone: sysv by key,
//! hugetlbfs and posix by path, memfd through its record. Then this
//! process attaches too and sees both processes' bytes, with the header
//! and holders in the attach report.
//!
//! memfd also: when its creator is gone, an attacher finds the memfd
//! through another holder; the last holder to close it removes the
//! record; attaching then reports the region gone (stale).

mod common;

use common::*;
use hugeshm_region::{
    remove, AllocationReport, AttachReport, Backend, HeaderState, Locator, PageSize, Policy,
    RegionBuilder, RegionError, RegionState,
};
use hugeshm_testkit::HostState;

const ENV: &str = "HUGESHM_ATTACH_CHILD";
const SIZE: u64 = 6 << 20;

fn pattern(salt: u8) -> [u8; 32] {
    let mut p = [0u8; 32];
    for (i, b) in p.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(7).wrapping_add(salt);
    }
    p
}

fn locator(backend: Backend, name: &str, dir: &str) -> Locator {
    let l = Locator::new(name, backend);
    if dir.is_empty() {
        l
    } else {
        l.directory(dir)
    }
}

/// Child: `create:BACKEND:NAME:DIR` or `attach:BACKEND:NAME:DIR`.
#[test]
#[ignore = "helper: its parent test runs it"]
fn attach_child() {
    let Some(spec) = helper_spec(ENV) else {
        return;
    };
    let f: Vec<&str> = spec.splitn(4, ':').collect();
    let (how, backend, name, dir) = (f[0], f[1].parse::<Backend>().unwrap(), f[2], f[3]);
    match how {
        "create" => {
            let page = if backend == Backend::Posix {
                PageSize::Base
            } else {
                PageSize::HUGE_2M
            };
            let mut b = RegionBuilder::new(SIZE)
                .name(name)
                .backend(backend)
                .page_size(page)
                .policy(Policy::Only);
            if !dir.is_empty() {
                b = b.directory(dir);
            }
            let (mut region, report) = b.create().unwrap();
            region.write_at(0, &pattern(1)).unwrap();
            say("CREATED", &serde_json::to_string(&report).unwrap());
            // Hold until told; then close (named objects stay).
            let _ = hear();
            region.close().unwrap();
            say("CLOSED", "");
        }
        "attach" => {
            let (mut region, report) = locator(backend, name, dir).attach_with_report().unwrap();
            let mut buf = [0u8; 32];
            region.read_at(0, &mut buf).unwrap();
            assert_eq!(buf, pattern(1), "attacher reads the creator's bytes");
            region.write_at(64, &pattern(2)).unwrap();
            say("ATTACHED", &serde_json::to_string(&report).unwrap());
            let _ = hear();
            region.close().unwrap();
            say("CLOSED", "");
        }
        other => panic!("unknown child mode {other}"),
    }
}

#[test]
fn unrelated_processes_attach_by_name() {
    let Some(pool) = live!() else {
        return;
    };
    pool.ensure_free(MIB2, 8).unwrap();
    let mount = TempMount::new("hugetlbfs", "pagesize=2M");
    for backend in [
        Backend::Sysv,
        Backend::Hugetlbfs,
        Backend::Posix,
        Backend::Memfd,
    ] {
        let before = HostState::capture().unwrap();
        let (name, dir, _cleanup) = named("attach", backend, &mount);
        let spec = |how: &str| format!("{how}:{backend}:{name}:{dir}");

        let mut creator = Kid::spawn("attach_child", ENV, &spec("create"));
        let created: AllocationReport = serde_json::from_str(&creator.expect("CREATED")).unwrap();
        let ch = created.header.clone().unwrap();
        assert_eq!(ch.state, HeaderState::Ready, "{backend}");
        assert_eq!(ch.creator_pid, creator.pid, "{backend}");
        assert_eq!(created.data_offset, 4096, "{backend}");

        let mut attacher = Kid::spawn("attach_child", ENV, &spec("attach"));
        let seen: AttachReport = serde_json::from_str(&attacher.expect("ATTACHED")).unwrap();
        println!(
            "{backend}: {} attached by pid {} via {}: creator {} ({:?}), generation {:016x}, \
             {} pages verified, holders {:?}",
            name,
            seen.pid,
            seen.object,
            seen.header.creator_pid,
            seen.creator,
            seen.header.generation,
            seen.verified_page_size_bytes,
            seen.holders
        );
        assert_eq!(
            seen.header, ch,
            "{backend}: the attacher reads the creator's header"
        );
        assert_eq!(seen.state, RegionState::Ready);
        assert_eq!(
            seen.verified_page_size_bytes,
            created.verified_page_size_bytes
        );
        assert_eq!(seen.size_bytes, created.size_bytes);
        // The region's own allocation, not what the attacher touched.
        assert_eq!(
            seen.region_allocated_bytes,
            Some(created.size_bytes),
            "{backend}"
        );
        assert!(seen.holders.contains(&creator.pid), "{backend}: {seen:?}");
        assert!(seen.holders.contains(&attacher.pid), "{backend}: {seen:?}");
        if backend == Backend::Sysv {
            assert_eq!(seen.nattch, Some(2));
        }

        // A third process (this one) sees both processes' bytes.
        let (me, mine) = locator(backend, &name, &dir).attach_with_report().unwrap();
        let mut buf = [0u8; 32];
        me.read_at(0, &mut buf).unwrap();
        assert_eq!(buf, pattern(1));
        me.read_at(64, &mut buf).unwrap();
        assert_eq!(buf, pattern(2));
        assert_eq!(mine.holders.len(), 3, "{backend}: {mine:?}");

        // While held, nobody can take the name.
        let err = RegionBuilder::new(SIZE)
            .name(&name)
            .backend(backend)
            .page_size(PageSize::HUGE_2M)
            .reclaim(hugeshm_region::Reclaim::Recreate)
            .create()
            .map(|_| ())
            .unwrap_err();
        let RegionError::AlreadyExists { holders, .. } = &err else {
            panic!("{backend}: {err}")
        };
        assert!(holders.contains(&creator.pid), "{backend}: {err}");

        if backend == Backend::Memfd {
            // The creator goes first: the record names a process that no
            // longer holds the memfd; attachers find another holder.
            creator.send("close");
            creator.expect("CLOSED");
            creator.finish();
            me.close().unwrap();
            let again = locator(backend, &name, &dir).attach().unwrap();
            let mut buf = [0u8; 32];
            again.read_at(64, &mut buf).unwrap();
            assert_eq!(buf, pattern(2), "memfd found through the attacher");
            again.close().unwrap();
            // The last holder closes: the memfd and its record go.
            attacher.send("close");
            attacher.expect("CLOSED");
            attacher.finish();
            let err = locator(backend, &name, &dir).attach().unwrap_err();
            assert!(
                matches!(err, RegionError::NotFound { .. }),
                "the last holder removed the record: {err}"
            );
        } else {
            me.close().unwrap();
            for k in [creator, attacher] {
                let mut k = k;
                k.send("close");
                k.expect("CLOSED");
                k.finish();
            }
            // The named object outlives them all; remove it.
            let l = locator(backend, &name, &dir);
            let info = l.inspect().unwrap();
            assert!(info.is_orphaned(), "{backend}: {info:?}");
            assert_eq!(info.header.as_ref().unwrap().generation, ch.generation);
            if dir.is_empty() {
                remove(&name, backend).unwrap();
            } else {
                l.remove().unwrap();
            }
        }
        assert_no_leaks(&before, &format!("attach {backend}"));
    }
    drop(mount);
    pool.finish();
}
