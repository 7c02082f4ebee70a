//! Owner names come from the system's user database (NSS), as `getent
//! passwd` resolves them, not from reading `/etc/passwd`: a user of LDAP,
//! SSSD or systemd-userdb is a user too. Fixture trees keep their own
//! `etc/passwd` (`fixtures::advise_names_the_memlock_users`).

use hugeshm_testkit::{skip, skip_unless_root, test_name};
use std::process::Command;

/// In a private mount namespace whose `/etc/passwd` lacks `nobody` (so
/// only another NSS module, here nss-systemd's synthesized `nobody`, knows
/// the name), `rm --owner nobody` takes the name as `getent passwd` does.
#[test]
fn an_owner_known_only_through_nss_is_a_user() {
    let test = test_name!();
    if skip_unless_root(test) {
        return;
    }
    let dir = hugeshm_testkit::TempDir::new("cli-users");
    let passwd = dir.path().join("passwd");
    let local = std::fs::read_to_string("/etc/passwd").unwrap();
    let without: String = local
        .lines()
        .filter(|l| !l.starts_with("nobody:"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&passwd, without).unwrap();
    // Nothing is made: no region has this name (rm says so, exit 3), and
    // the mount ends with the namespace.
    let script = "mount --bind \"$1\" /etc/passwd || exit 90; \
         grep -c '^nobody:' /etc/passwd; getent passwd nobody >/dev/null; echo getent=$?; \
         \"$2\" rm hugeshm-users-no-such-region --owner \"$3\" 2>&1; echo rc=$?";
    let run = |owner: &str| {
        let out = Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
                "sh",
            ])
            .arg(&passwd)
            .arg(env!("CARGO_BIN_EXE_hugeshm"))
            .arg(owner)
            .env("NO_COLOR", "1")
            .output()
            .expect("run unshare");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let out = run("nobody");
    assert!(
        out.starts_with("0\n"),
        "/etc/passwd still names nobody: {out}"
    );
    if !out.contains("getent=0") {
        return skip(
            test,
            "no NSS module besides files knows nobody (nss-systemd not in /etc/nsswitch.conf)",
        );
    }
    assert!(out.contains("no region named"), "{out}");
    assert!(out.ends_with("rc=3\n"), "{out}");
    // A name no module knows stays a usage error.
    let out = run("hugeshm-no-such-user");
    assert!(
        out.contains("\"hugeshm-no-such-user\" is neither a uid nor a user of this host"),
        "{out}"
    );
    assert!(out.ends_with("rc=2\n"), "{out}");
}
