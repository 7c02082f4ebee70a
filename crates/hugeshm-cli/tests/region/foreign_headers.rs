//! Root's `ls` over region files another user (uid 65534) planted with
//! headers of their choosing: a posix file whose header says root's, kept,
//! on 2 MiB pages; one whose header says initializing by pid 1; an empty
//! one; an empty file on a hugetlbfs mount; a memfd record its holder
//! left. Each is listed `untrusted` with its owner and the page size its
//! file system gives (never its header's), no header and no fix; `ls
//! --owner 65534` reads them as before.

use crate::common::{as_nobody, cmd, compile_c, hugeshm as run, json};
use crate::faults::TempMount;
use hugeshm_testkit::{live, skip, test_name, TempDir};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

/// FNV-1a 64, the header's checksum.
fn fnv1a64(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, x| {
        (h ^ u64::from(*x)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A valid header (layout version 1, as documented in hugeshm-region's
/// `header` module) of a posix region `name` of `size` bytes on pages of
/// `page`, kept, state `state` (1 initializing, 2 ready), made by `pid` as
/// uid 0: what anyone who may write a file can write.
fn forged_header(name: &str, size: u64, page: u64, state: u32, pid: u32) -> Vec<u8> {
    let mut b = vec![0u8; 4096];
    let mut put = |off: usize, v: &[u8]| b[off..off + v.len()].copy_from_slice(v);
    put(0, b"HUGESHM\0");
    put(8, &1u32.to_le_bytes());
    put(12, &4096u32.to_le_bytes());
    put(20, &4u32.to_le_bytes()); // posix
    put(24, &(4u32 | 2).to_le_bytes()); // kept, transparent huge pages
    put(28, &pid.to_le_bytes());
    put(40, &1_700_000_000_000_000_000u64.to_le_bytes());
    put(48, &size.to_le_bytes());
    put(56, &size.to_le_bytes());
    put(64, &page.to_le_bytes());
    put(72, &0x1234_5678_9abc_def0u64.to_le_bytes());
    put(80, &0u32.to_le_bytes()); // creator uid 0
    put(84, &(name.len() as u32).to_le_bytes());
    put(88, name.as_bytes());
    let sum = fnv1a64(&b[..344]);
    b[344..352].copy_from_slice(&sum.to_le_bytes());
    b[16..20].copy_from_slice(&state.to_le_bytes());
    b
}

/// Removes the planted paths when dropped, whether the test passed or not.
struct Remove(Vec<String>);

impl Drop for Remove {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// `ls --json ARGS`'s entry of region `name` on `backend`.
fn entry(args: &[&str], name: &str, backend: &str) -> Value {
    let l = json(run(&[&["ls", "--json"][..], args].concat()));
    l["regions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name && r["backend"] == backend)
        .unwrap_or_else(|| panic!("{name} ({backend}) not listed: {l:#}"))
        .clone()
}

#[test]
fn another_users_region_files_are_untrusted_with_the_kernels_page_size() {
    let Some(pool) = live!() else { return };
    if Command::new("setpriv").arg("--version").output().is_err() {
        skip(test_name!(), "no setpriv to plant files as uid 65534");
        return;
    }
    let pid = std::process::id();
    let [kept, init, empty, huge, memfd] =
        ["kept", "init", "empty", "huge", "memfd"].map(|s| format!("clitest-fh-{s}-{pid}"));
    let mount = TempMount::new("hugetlbfs", "pagesize=2M,mode=1777");
    let huge_path = mount.0.join(format!("hugeshm.{huge}"));
    let shm = |n: &str| format!("/dev/shm/hugeshm.{n}");
    let _remove = Remove(vec![
        shm(&kept),
        shm(&init),
        shm(&empty),
        huge_path.display().to_string(),
        format!("/dev/shm/hugeshm-memfd.{memfd}"),
    ]);
    // The forged headers, where uid 65534 can read them.
    let forged = TempDir::new("forged-headers");
    std::fs::set_permissions(forged.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (m8, m2) = (8u64 << 20, 2u64 << 20);
    for (n, state, creator) in [(&kept, 2, 4242), (&init, 1, 1)] {
        let p = forged.join(n);
        std::fs::write(&p, forged_header(n, m8, m2, state, creator)).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let (src, dst) = (p.display(), shm(n));
        as_nobody(&format!(
            "umask 077; cat {src} > {dst} && truncate -s 8M {dst}"
        ));
    }
    as_nobody(&format!("umask 077; : > {}", shm(&empty)));
    as_nobody(&format!("umask 077; : > {}", huge_path.display()));
    // A memfd region of uid 65534 whose holder was killed: its record stays.
    let mut holder = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_hugeshm"))
        .args(["create", &memfd, "--backend", "memfd", "--size", "4M"])
        .args(["--page-size", "4k", "--hold"])
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    crate::common::wait_for_stderr(&mut holder, "holding region");
    holder.kill().unwrap();
    holder.wait().unwrap();

    let cases = [
        (&kept, "posix", m8, Some(4096)),
        (&init, "posix", m8, Some(4096)),
        (&empty, "posix", 0, Some(4096)),
        (&huge, "hugetlbfs", 0, Some(m2)),
        (&memfd, "memfd", 0, None),
    ];
    for (n, backend, size, page) in cases {
        let r = entry(&[], n, backend);
        assert_eq!(r["state"], "untrusted", "{r:#}");
        assert_eq!(r["owner"]["uid"], 65534, "{r:#}");
        assert_eq!(r["header"], Value::Null, "{r:#}");
        assert_eq!(r["fix"], Value::Null, "{r:#}");
        assert_eq!(r["held"], false, "{r:#}");
        assert_eq!(r["holders"], serde_json::json!([]), "{r:#}");
        if backend != "memfd" {
            assert_eq!(r["object"]["size_bytes"], size, "{r:#}");
        }
        assert_eq!(
            r["kernel_page_size_bytes"],
            serde_json::json!(page),
            "{r:#}"
        );
    }

    // The table: the file's own size and page, its owner, how to read it.
    let out = cmd(&["ls"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines = |n: &str| -> Vec<&str> {
        text.lines()
            .filter(|l| l.split_whitespace().any(|w| w == n))
            .collect()
    };
    let row: Vec<&str> = lines(&kept)[0].split_whitespace().collect();
    assert_eq!(
        &row[..6],
        [&kept[..], "posix", "untrusted", "8", "MiB", "4k"]
    );
    let login = hugeshm_probe::Users::system()
        .name_of(65534)
        .map(|n| format!(" ({n})"))
        .unwrap_or_default();
    for n in [&kept, &init, &empty, &huge, &memfd] {
        let l = lines(n);
        assert!(l[0].contains(" untrusted "), "{n}: {l:?}");
        assert!(
            l[1].starts_with("  info ")
                && l[1].contains(&format!("owner uid 65534{login}"))
                && l[1].contains("hugeshm ls --owner 65534"),
            "{n}: {l:?}"
        );
        assert_eq!(l.len(), 2, "{n}: {l:?}");
        assert!(!l.iter().any(|l| l.contains("--reclaim")), "{l:?}");
    }
    let row: Vec<&str> = lines(&huge)[0].split_whitespace().collect();
    assert_eq!(row[5], "2M", "{row:?}");
    // Not faults of the regions root answers for.
    let check = run(&["ls", "--check"]);
    let stdout = String::from_utf8_lossy(&check.stdout);
    for n in [&kept, &init, &empty, &huge, &memfd] {
        assert!(
            !stdout
                .lines()
                .any(|l| l.contains("WARN") && l.split_whitespace().any(|w| w == n)),
            "{stdout}"
        );
    }

    // Opting in reads them as before.
    let r = entry(&["--owner", "65534"], &kept, "posix");
    assert_eq!(
        (&r["state"], &r["header"]["kept"]),
        (&"ready".into(), &true.into()),
        "{r:#}"
    );
    let r = entry(&["--owner", "nobody"], &empty, "posix");
    assert_eq!(r["state"], "crashed", "{r:#}");
    drop(_remove);
    drop(mount);
    pool.finish();
}

/// A SysV region uid 65534 made (a valid header: kept, ready) and then gave
/// to root (`IPC_SET` of `shm_perm.uid`; its creator keeps an owner's
/// rights through `cuid`, so it can still write it): root's `ls` lists it
/// `untrusted` under its key with uid 65534 as its owner, and `attach`
/// refuses it without attaching it (it used to list it `kept` from its
/// header and attach it as root's own).
#[test]
fn a_segment_another_user_gave_to_root_is_still_theirs() {
    let Some(pool) = live!() else { return };
    if Command::new("setpriv").arg("--version").output().is_err() {
        skip(test_name!(), "no setpriv to plant a segment as uid 65534");
        return;
    }
    let dir = TempDir::new("give-segment");
    let give = compile_c("region/give_segment", dir.path());
    let name = format!("clitest-gift-{}", std::process::id());
    let nobody = |prog: &std::path::Path, args: &[&str]| {
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(prog)
            .args(args)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?} as 65534: {out:?}");
    };
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_hugeshm"));
    nobody(
        bin,
        &[
            "create",
            &name,
            "--backend",
            "sysv",
            "--size",
            "4M",
            "--page-size",
            "4k",
        ],
    );
    let key = hugeshm_region::sysv_key(&name);
    let shmid = hugeshm_probe::Probe::default()
        .sysv_segments()
        .unwrap()
        .into_iter()
        .find(|s| s.key == key)
        .expect("uid 65534's segment")
        .shmid;
    struct Remove(i32);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = hugeshm_sys::shm_remove(self.0);
        }
    }
    let _remove = Remove(shmid);
    nobody(&give, &[&shmid.to_string(), "0"]);
    let st = hugeshm_sys::shm_stat(shmid).unwrap();
    assert_eq!((st.uid, st.cuid), (0, 65534));

    let l = json(run(&["ls", "--json"]));
    let r = l["regions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["object"]["shmid"] == shmid)
        .unwrap_or_else(|| panic!("shmid {shmid} not listed: {l:#}"));
    assert_eq!(r["state"], "untrusted", "{r:#}");
    assert_eq!(r["name"], format!("key-{:08x}", key as u32), "{r:#}");
    assert_eq!(r["owner"]["uid"], 65534, "{r:#}");
    assert_eq!(r["header"], Value::Null, "{r:#}");
    let out = run(&["attach", &name, "--backend", "sysv"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("--owner 65534"), "{err}");
    let now = hugeshm_sys::shm_stat(shmid).unwrap();
    assert_eq!((now.nattch, now.atime), (st.nattch, st.atime), "attached");
    drop(_remove);
    pool.finish();
}
