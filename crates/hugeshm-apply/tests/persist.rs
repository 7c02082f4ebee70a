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
    let first = persist(&p, &r, None).unwrap();
    assert!(
        first.iter().all(|f| f.action == PersistAction::Created),
        "{first:?}"
    );
    let sysctl = r.join("etc/sysctl.d/60-hugeshm.conf");
    let text = std::fs::read_to_string(&sysctl).unwrap();
    assert!(text.contains("vm.nr_hugepages = 514\n"), "{text}");
    assert!(r.join("etc/security/limits.d/60-hugeshm.conf").exists());

    let second = persist(&p, &r, None).unwrap();
    assert!(
        second.iter().all(|f| f.action == PersistAction::Unchanged),
        "{second:?}"
    );
    assert_eq!(std::fs::read_to_string(&sysctl).unwrap(), text);

    // A new plan replaces the file and keeps the old one beside it.
    let p2 = plan(&host(), &[Demand::new("sga", 2 << 30, 2 << 20)], vec![], 2).unwrap();
    let third = persist(&p2, &r, None).unwrap();
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
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
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
    let e = persist(&p, &r, None).unwrap_err();
    assert!(e.to_string().contains("etc/sysctl.d"), "{e}");
    std::fs::remove_dir_all(&r).unwrap();
}

fn mode(p: &std::path::Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

fn one_plan() -> hugeshm_doctor::advise::Plan {
    plan(&host(), &[Demand::new("sga", 1 << 30, 2 << 20)], vec![], 2).expect("a plan")
}

/// A root-only file outside the tree that planted symlinks point at.
fn victim(r: &std::path::Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let v = r.join("root-only-secret");
    std::fs::create_dir_all(r).unwrap();
    std::fs::write(&v, "SECRET=1\n").unwrap();
    std::fs::set_permissions(&v, std::fs::Permissions::from_mode(0o600)).unwrap();
    v
}

#[test]
fn under_umask_000_files_are_0644_and_directories_0755() {
    let r = root("umask");
    let old = rustix::process::umask(rustix::fs::Mode::empty());
    let done = persist(&one_plan(), &r, None);
    rustix::process::umask(old);
    done.unwrap();
    for d in [
        "etc",
        "etc/sysctl.d",
        "etc/security",
        "etc/security/limits.d",
    ] {
        assert_eq!(mode(&r.join(d)), 0o755, "{d}");
    }
    assert_eq!(mode(&r.join("etc/sysctl.d/60-hugeshm.conf")), 0o644);
    assert_eq!(
        mode(&r.join("etc/security/limits.d/60-hugeshm.conf")),
        0o644
    );
    std::fs::remove_dir_all(&r).unwrap();
}

#[test]
fn a_symlink_at_the_old_temporary_name_is_not_followed() {
    let r = root("tmplink");
    let v = victim(&r);
    let d = r.join("etc/sysctl.d");
    std::fs::create_dir_all(&d).unwrap();
    // The name the writer used to take: predictable from the pid.
    let planted = d.join(format!(
        ".60-hugeshm.conf.hugeshm-tmp-{}",
        std::process::id()
    ));
    std::os::unix::fs::symlink(&v, &planted).unwrap();
    persist(&one_plan(), &r, None).unwrap();
    assert_eq!(std::fs::read_to_string(&v).unwrap(), "SECRET=1\n");
    let conf = d.join("60-hugeshm.conf");
    assert!(std::fs::symlink_metadata(&conf).unwrap().is_file());
    assert!(std::fs::read_to_string(&conf)
        .unwrap()
        .contains("vm.nr_hugepages"));
    std::fs::remove_dir_all(&r).unwrap();
}

#[test]
fn a_symlink_at_the_target_or_its_backup_is_refused() {
    let r = root("targetlink");
    let v = victim(&r);
    let d = r.join("etc/sysctl.d");
    std::fs::create_dir_all(&d).unwrap();
    let conf = d.join("60-hugeshm.conf");
    std::os::unix::fs::symlink(&v, &conf).unwrap();
    let e = persist(&one_plan(), &r, None).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert!(e.to_string().contains("60-hugeshm.conf"), "{e}");
    // The secret was neither overwritten nor copied into a backup.
    assert_eq!(std::fs::read_to_string(&v).unwrap(), "SECRET=1\n");
    assert!(std::fs::symlink_metadata(d.join("60-hugeshm.conf.hugeshm-backup")).is_err());
    assert!(std::fs::symlink_metadata(&conf).unwrap().is_symlink());

    // A FIFO is refused at once, not waited on.
    std::fs::remove_file(&conf).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &conf,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let e = persist(&one_plan(), &r, None).unwrap_err();
    assert!(e.to_string().contains("FIFO"), "{e}");

    // An old file to back up, and a symlink where the backup goes.
    std::fs::remove_file(&conf).unwrap();
    std::fs::write(&conf, "vm.nr_hugepages = 1\n").unwrap();
    let backup = d.join("60-hugeshm.conf.hugeshm-backup");
    std::os::unix::fs::symlink(&v, &backup).unwrap();
    let e = persist(&one_plan(), &r, None).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert_eq!(std::fs::read_to_string(&v).unwrap(), "SECRET=1\n");
    assert_eq!(
        std::fs::read_to_string(&conf).unwrap(),
        "vm.nr_hugepages = 1\n"
    );
    std::fs::remove_dir_all(&r).unwrap();
}

#[test]
fn a_0600_file_replaced_keeps_a_0600_backup() {
    use std::os::unix::fs::PermissionsExt;
    let r = root("backupmode");
    let d = r.join("etc/sysctl.d");
    std::fs::create_dir_all(&d).unwrap();
    let conf = d.join("60-hugeshm.conf");
    std::fs::write(&conf, "# root only\n").unwrap();
    std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o600)).unwrap();
    let done = persist(&one_plan(), &r, None).unwrap();
    let f = done
        .iter()
        .find(|f| f.path.ends_with("sysctl.d/60-hugeshm.conf"))
        .unwrap();
    assert_eq!(f.action, PersistAction::Updated);
    let backup = PathBuf::from(f.backup.as_ref().unwrap());
    assert_eq!(std::fs::read_to_string(&backup).unwrap(), "# root only\n");
    assert_eq!(mode(&backup), 0o600);
    assert_eq!(mode(&conf), 0o644);
    std::fs::remove_dir_all(&r).unwrap();
}
