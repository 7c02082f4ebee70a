//! Persisting a plan into a temporary root: atomic, backed up, idempotent.

use hugeshm_apply::{persist, PersistAction};
use hugeshm_doctor::advise::{plan, Demand};
use hugeshm_probe::HostSnapshot;
use std::path::PathBuf;

fn root(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hugeshm-persist-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn host() -> HostSnapshot {
    let mut h: HostSnapshot = serde_json::from_str("{\"meminfo\":null,\"pools\":[],\"hugetlb_sysfs\":true,\"node_pools\":[],\"nodes\":[],\"thp\":{\"enabled\":null,\"defrag\":null,\"shmem_enabled\":null,\"khugepaged_defrag\":null},\"sysctl\":{\"nr_hugepages\":null,\"nr_overcommit_hugepages\":null,\"hugetlb_shm_group\":null,\"min_free_kbytes\":null,\"overcommit_memory\":null,\"shmmax\":null,\"shmall\":null,\"shmmni\":null},\"cmdline\":null,\"mounts\":[],\"shm\":[],\"self_limits\":null,\"self_uid\":null,\"persisted\":{\"sysctl\":{},\"sysfs_writes\":{}},\"problems\":[]}").unwrap();
    let mut m = hugeshm_parse::meminfo::Meminfo::default();
    m.hugepagesize_bytes = Some(2 << 20);
    h.meminfo = Some(m);
    h
}

#[test]
fn twice_changes_nothing_and_updates_keep_a_backup() {
    let r = root("twice");
    let p = plan(&host(), &[Demand::new("sga", 1 << 30, 2 << 20)], vec![], 2).unwrap();
    let first = persist(&p, &r).unwrap();
    assert!(
        first.iter().all(|f| f.action == PersistAction::Created),
        "{first:?}"
    );
    let sysctl = r.join("etc/sysctl.d/60-hugeshm.conf");
    let text = std::fs::read_to_string(&sysctl).unwrap();
    assert!(text.contains("vm.nr_hugepages = 514\n"), "{text}");
    assert!(r.join("etc/security/limits.d/60-hugeshm.conf").exists());

    let second = persist(&p, &r).unwrap();
    assert!(
        second.iter().all(|f| f.action == PersistAction::Unchanged),
        "{second:?}"
    );
    assert_eq!(std::fs::read_to_string(&sysctl).unwrap(), text);

    // A new plan replaces the file and keeps the old one beside it.
    let p2 = plan(&host(), &[Demand::new("sga", 2 << 30, 2 << 20)], vec![], 2).unwrap();
    let third = persist(&p2, &r).unwrap();
    let f = third
        .iter()
        .find(|f| f.path.ends_with("sysctl.d/60-hugeshm.conf"))
        .unwrap();
    assert_eq!(f.action, PersistAction::Updated);
    let backup = f.backup.as_ref().unwrap();
    assert_eq!(std::fs::read_to_string(backup).unwrap(), text);
    assert!(std::fs::read_to_string(&sysctl)
        .unwrap()
        .contains("vm.nr_hugepages = 1026\n"));
    // No temporary files are left.
    let leftovers: Vec<_> = std::fs::read_dir(r.join("etc/sysctl.d"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("hugeshm-tmp"))
        .collect();
    assert!(leftovers.is_empty());
    std::fs::remove_dir_all(&r).unwrap();
}

#[test]
fn an_unwritable_root_is_an_error_naming_the_file() {
    // A regular file where a directory must be.
    let r = root("blocked");
    std::fs::create_dir_all(&r).unwrap();
    std::fs::write(r.join("etc"), "not a directory").unwrap();
    let p = plan(&host(), &[Demand::new("sga", 1 << 30, 2 << 20)], vec![], 2).unwrap();
    let e = persist(&p, &r).unwrap_err();
    assert!(e.to_string().contains("etc/sysctl.d"), "{e}");
    std::fs::remove_dir_all(&r).unwrap();
}
