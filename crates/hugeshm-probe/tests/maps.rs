//! The two ways of reading a process's mappings (the maps text and the
//! `PROCMAP_QUERY` ioctl) against each other, on this process and on a
//! captured tree, where only the text can work.

use hugeshm_probe::{MapsRead, MapsSource, Probe, Roots};
use hugeshm_sys as sys;
use std::os::fd::AsFd;

/// This process's candidates by text, by ioctl, by text again; the
/// ioctl's must equal the text's whenever the two text reads agree (other
/// test threads may map and unmap meanwhile).
#[test]
fn query_and_text_agree_on_own_mappings() {
    let probe = Probe::new(Roots::default()).with_maps(MapsSource::Auto);
    if probe.maps_read() != MapsRead::Query {
        return hugeshm_testkit::skip_lacking(
            hugeshm_testkit::test_name!(),
            hugeshm_testkit::Lack::ProcmapQuery,
            "the kernel has no PROCMAP_QUERY (before 6.11)",
        );
    }
    // A shared memfd whose name holds a blank and a newline (the text
    // prints it as \012), and shared anonymous memory.
    let fd = sys::memfd_create("probe test a\nb", None).unwrap();
    sys::set_len(fd.as_fd(), 1 << 20).unwrap();
    let memfd = sys::MapOptions::new(1 << 20).map(fd.as_fd()).unwrap();
    let anon = sys::MapOptions::new(1 << 20).shared().map_anon().unwrap();
    let me = probe.pid(std::process::id());
    let mut agreed = false;
    for _ in 0..20 {
        let t1 = me.maps_candidates(MapsRead::Text).unwrap();
        let q = me.maps_candidates(MapsRead::Query).unwrap();
        let t2 = me.maps_candidates(MapsRead::Text).unwrap();
        if t1 != t2 {
            continue;
        }
        assert_eq!(q, t1);
        let named = q
            .iter()
            .find(|m| m.start == memfd.as_ptr() as u64)
            .expect("the memfd mapping");
        assert_eq!(named.pathname.as_deref(), Some("/memfd:probe test a\\012b"));
        assert!(named.deleted && named.perms.shared);
        assert!(
            q.iter()
                .any(|m| m.start == anon.as_ptr() as u64
                    && m.pathname.as_deref() == Some("/dev/zero"))
        );
        agreed = true;
        break;
    }
    assert!(
        agreed,
        "this process's mappings kept changing between reads"
    );
    memfd.release().unwrap();
    anon.release().unwrap();
}

/// A captured `/proc` is files: `auto` reads their text, and `query`
/// (forced) reports the process unreadable instead of guessing.
#[test]
fn captured_tree_reads_text() {
    let dir = std::env::temp_dir().join(format!("hugeshm-probe-maps-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("proc/42")).unwrap();
    std::fs::write(
        dir.join("proc/42/maps"),
        "7f0000000000-7f0000200000 rw-s 00000000 00:0f 9 /SYSV0000abcd (deleted)\n\
         7f0000200000-7f0000201000 r--p 00000000 fe:00 3 /usr/lib/libc.so.6\n",
    )
    .unwrap();
    let roots = Roots::fixture(&dir);
    let auto = Probe::new(roots.clone()).with_maps(MapsSource::Auto);
    assert_eq!(auto.maps_read(), MapsRead::Text);
    let m = auto.pid(42).maps_candidates(auto.maps_read()).unwrap();
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].inode, 9);
    let forced = Probe::new(roots).with_maps(MapsSource::Query);
    assert_eq!(forced.maps_read(), MapsRead::Query);
    let err = forced.pid(42).maps_candidates(MapsRead::Query).unwrap_err();
    assert!(err.to_string().contains("PROCMAP_QUERY"), "{err}");
    assert!(err.path().ends_with("proc/42/maps"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
