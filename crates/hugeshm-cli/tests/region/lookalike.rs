//! A look-alike of root's SysV attachment: user 65534, in a user and mount
//! namespace of its own, maps a tmpfs file named `/SYSV<key>` with inode
//! equal to the shmid of root's kept region (`lookalike.c`), so that its
//! maps line reads as an attachment. Root's `ls`, `segments` and `rm`
//! trust the kernel instead: the device is not the kernel's SysV mount
//! and `/proc/sysvipc/shm` counts no attachment, so the region stays
//! kept with no holder, `segments` lists nobody on it and `rm` removes it.
//! A second attacker attaches a real segment of the same shmid and key in
//! an IPC namespace of its own: `segments` lists it apart, as that
//! namespace's, and it holds nothing of root's either.
//! Real SysV segments on 2 MiB pages, under the pool guard, in an IPC
//! namespace the test makes (root's hugeshm, the region and the attackers
//! all in it), so that the shmid is small whatever the host's count: the
//! attacker spends one tmpfs inode per shmid below it.

use crate::common::{cmd, compile_c, json, region_entry};
use hugeshm_testkit::{live, Lack, TempDir};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

const AS_NOBODY: [&str; 3] = ["--reuid=65534", "--regid=65534", "--clear-groups"];

/// The attacker, killed when dropped.
struct Attacker(Child);

impl Drop for Attacker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the attacker against `shmid`/`key` (with `ipc`, a real segment
/// in its own IPC namespace); `None` where this host gives an unprivileged
/// user no user namespace (exit 3).
fn attack(ns: &Ns, bin: &Path, shmid: u64, key: u32, size: u64, ipc: bool) -> Option<Attacker> {
    let mut child = Command::new("nsenter")
        .arg(&ns.arg)
        .arg("setpriv")
        .args(AS_NOBODY)
        .arg(bin)
        .arg(shmid.to_string())
        .arg(format!("{key:08x}"))
        .arg(size.to_string())
        .args(ipc.then_some("ipc"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("setpriv");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    if line.trim() == "ready" {
        return Some(Attacker(child));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(3), "the attacker failed: {out:?}");
    None
}

/// An IPC namespace of the test's, held by a `sleep` killed on drop (the
/// namespace and its segments go with it).
struct Ns {
    holder: Child,
    /// `--ipc=/proc/PID/ns/ipc` for `nsenter`.
    arg: String,
}

impl Ns {
    fn new() -> Ns {
        let holder = Command::new("unshare")
            .args(["--ipc", "sleep", "600"])
            .spawn()
            .expect("unshare");
        let arg = format!("--ipc=/proc/{}/ns/ipc", holder.id());
        // Until the holder is in its namespace.
        let own = std::fs::read_link("/proc/self/ns/ipc").unwrap();
        while std::fs::read_link(format!("/proc/{}/ns/ipc", holder.id())).ok() == Some(own.clone())
        {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Ns { holder, arg }
    }

    /// `hugeshm ARGS` in the namespace.
    fn hugeshm(&self, args: &[&str]) -> std::process::Output {
        let inner = cmd(args);
        let mut c = Command::new("nsenter");
        c.arg(&self.arg).arg(inner.get_program()).args(args);
        for (k, v) in inner.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c.output().expect("nsenter hugeshm")
    }

    /// `ls --json`'s entry of region `name`.
    fn listed(&self, name: &str) -> Value {
        region_entry(&json(self.hugeshm(&["ls", "--json"])), name)
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// Removes region `.1` in namespace `.0` when dropped (before the pool
/// guard's leak check, declared after it), whether the test passed or not.
struct Remove<'a>(&'a Ns, String);

impl Drop for Remove<'_> {
    fn drop(&mut self) {
        let _ = self.0.hugeshm(&["rm", &self.1]);
    }
}

#[test]
fn a_look_alike_sysv_mapping_is_not_an_attachment() {
    let Some(pool) = live!() else { return };
    pool.ensure_free(2 << 20, 2).expect("2 free 2 MiB pages");
    let dir = TempDir::new("lookalike");
    let bin = compile_c("region/lookalike", dir.path());
    let ns = Ns::new();
    // Ids below the region's, so that it is not 0 (no tmpfs inode is).
    for _ in 0..8 {
        let st = Command::new("nsenter")
            .args([ns.arg.as_str(), "ipcmk", "-M", "4096"])
            .stdout(Stdio::null())
            .status()
            .expect("ipcmk");
        assert!(st.success());
    }
    let name = format!("clitest-lookalike-{}", std::process::id());
    let _remove = Remove(&ns, name.clone());
    let out = ns.hugeshm(&[
        "create",
        &name,
        "--size",
        "2M",
        "--page-size",
        "2m",
        "--policy",
        "only",
    ]);
    assert!(out.status.success(), "{out:?}");
    let r = ns.listed(&name);
    assert_eq!(r["header"]["kept"], true, "{r:#}");
    let shmid = r["object"]["shmid"].as_u64().unwrap();
    let key = r["object"]["key"].as_i64().unwrap() as u32;

    let (Some(attacker), Some(elsewhere)) = (
        attack(&ns, &bin, shmid, key, 2 << 20, false),
        attack(&ns, &bin, shmid, key, 4 << 20, true),
    ) else {
        return pool.skip_lacking(
            Lack::UnprivilegedUserns,
            "uid 65534 cannot create a user namespace here",
        );
    };
    let pid = attacker.0.id();
    let other = elsewhere.0.id();
    // The attack is in place: its maps line reads as an attachment.
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let wanted = format!("{shmid} ");
    assert!(
        maps.lines()
            .any(|l| l.contains(&format!("/SYSV{key:08x} (deleted)"))
                && l.split_whitespace().nth(4) == Some(wanted.trim())),
        "{maps}"
    );

    // ls: still kept, nobody holding it.
    let r = ns.listed(&name);
    assert_eq!(
        (&r["holders"], &r["held"]),
        (&Value::Array(vec![]), &false.into()),
        "{r:#}"
    );
    let out = ns.hugeshm(&["ls"]);
    let line = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with(&name))
        .map(str::to_owned)
        .unwrap_or_default();
    assert!(
        line.contains(" kept ")
            && !line.contains(&pid.to_string())
            && !line.contains(&other.to_string()),
        "{line}"
    );
    // segments: nobody on root's segment, none of the look-alike's bytes.
    let s = json(ns.hugeshm(&["segments", "--json"]));
    let seg = s["segments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["kind"] == "sysv" && g["id"] == shmid && g["path"].is_null())
        .unwrap_or_else(|| panic!("sysv {shmid} not listed: {s:#}"))
        .clone();
    assert_eq!(seg["attached_pids"], Value::Array(vec![]), "{seg:#}");
    assert_ne!(seg["resident_bytes"], 2u64 << 20, "{seg:#}");
    let listed_pids = s["segments"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["attached_pids"].as_array().cloned().unwrap_or_default())
        .collect::<Vec<_>>();
    assert!(!listed_pids.contains(&pid.into()), "{s:#}");
    // The other namespace's segment of the same shmid: listed apart.
    let their_ns = std::fs::read_link(format!("/proc/{other}/ns/ipc")).unwrap();
    let theirs = s["segments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["path"] == their_ns.to_str().unwrap())
        .unwrap_or_else(|| panic!("{their_ns:?} not listed: {s:#}"));
    assert_eq!(
        (&theirs["kind"], &theirs["id"], &theirs["size_bytes"]),
        (&"sysv".into(), &shmid.into(), &(4u64 << 20).into()),
        "{theirs:#}"
    );
    assert_eq!(theirs["attached_pids"], serde_json::json!([other]));
    // rm: not "in use".
    let out = ns.hugeshm(&["rm", &name]);
    assert!(out.status.success(), "{out:?}");
    drop(attacker);
    drop(elsewhere);
    drop(dir);
    pool.finish();
}
