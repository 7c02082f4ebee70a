//! Names anyone chooses reach root's terminal escaped (issue 25): a file
//! user 65534 plants in /dev/shm (`ls`, and the fix commands it prints), a
//! process name (`segments`), a region name in a spec file (`advise`). The
//! commands of a fix name them as one quoted shell word, and `--json` keeps
//! their exact bytes.

use crate::common;

use hugeshm_testkit::{live, skip, skip_unless_root, TempDir};
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// An OSC that sets the terminal's title; BEL ends it.
const TITLE: &str = "\x1b]0;PWNED\x07";

/// `TITLE` as the output shows it.
const TITLE_SHOWN: &str = r"\x1b]0;PWNED\x07";

fn assert_no_raw_controls(what: &str, text: &str) {
    let raw: Vec<char> = text
        .chars()
        .filter(|&c| (c.is_control() && c != '\n') || ('\u{202a}'..='\u{202e}').contains(&c))
        .collect();
    assert!(
        raw.is_empty(),
        "{what} wrote raw control characters {raw:?}:\n{text}"
    );
}

/// Whether some string in `v` is `want`.
fn holds_string(v: &Value, want: &str) -> bool {
    match v {
        Value::String(s) => s == want,
        Value::Array(a) => a.iter().any(|x| holds_string(x, want)),
        Value::Object(o) => o.values().any(|x| holds_string(x, want)),
        _ => false,
    }
}

#[test]
fn advise_shows_a_spec_region_name_escaped() {
    let tmp = TempDir::new("hostile-spec");
    let spec = tmp.join("spec.toml");
    // TOML's \u escapes: ESC, BEL, RIGHT-TO-LEFT OVERRIDE.
    std::fs::write(
        &spec,
        "[[region]]\nname = \"sga\\u001b]0;PWNED\\u0007\\u202e\"\nsize = \"64M\"\n",
    )
    .unwrap();
    let run = |json: bool| {
        let mut c = common::on_fixture("clean");
        c.arg("advise").arg("--spec").arg(&spec);
        if json {
            c.arg("--json");
        }
        c.output().unwrap()
    };
    let out = run(false);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_no_raw_controls("advise", &text);
    assert_no_raw_controls("advise's stderr", &String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains(&format!("spec sga{TITLE_SHOWN}\\u{{202e}}")),
        "{text}"
    );
    let v = common::json(run(true));
    assert!(
        holds_string(&v, &format!("spec sga{TITLE}\u{202e}")),
        "the exact name is not in the JSON: {v:#}"
    );
}

/// `setpriv` as user 65534 with no groups, when this test can switch user
/// and 65534 can run the binary; `None` (after a skip) otherwise.
fn as_nobody(test: &str) -> Option<impl Fn(&dyn AsRef<std::ffi::OsStr>) -> Command> {
    if skip_unless_root(test) {
        return None;
    }
    let make = |program: &dyn AsRef<std::ffi::OsStr>| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(program)
            .env("NO_COLOR", "1");
        c
    };
    match make(&env!("CARGO_BIN_EXE_hugeshm"))
        .arg("--version")
        .output()
    {
        Ok(o) if o.status.success() => Some(make),
        Ok(o) => {
            let why = String::from_utf8_lossy(&o.stderr);
            skip(
                test,
                format_args!("user 65534 cannot run the binary ({})", why.trim()),
            );
            None
        }
        Err(e) => {
            skip(test, format_args!("no setpriv ({e})"));
            None
        }
    }
}

/// A file under /dev/shm, removed (by root) when dropped.
struct Planted(PathBuf);

impl Drop for Planted {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn ls_shows_a_planted_name_escaped_and_quotes_it_in_the_fix() {
    // Its region in /dev/shm is host state other tests compare under the
    // pool lock.
    let Some(pool) = live!() else { return };
    let Some(nobody) = as_nobody(pool.name()) else {
        return;
    };
    let bin = env!("CARGO_BIN_EXE_hugeshm");
    let tmp = TempDir::new("hostile-ls");
    let pwned = tmp.join("pwned");
    // User 65534 makes a region, ends (kept: ls prints how to reuse or
    // remove it), and
    // renames its file to a name that sets the terminal's title and, pasted
    // into a shell unquoted, runs a command of its own.
    let plain = format!("t-esc-{}", std::process::id());
    let out = nobody(&bin)
        .args(["create", &plain, "--backend", "posix", "--size", "1M"])
        .args(["--page-size", "4k"])
        .output()
        .unwrap();
    let made = Planted(PathBuf::from(format!("/dev/shm/hugeshm.{plain}")));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // (No '/' in a file name: the shell below runs in `tmp`.)
    let hostile = format!("{plain}{TITLE}'; touch pwned; echo '");
    let planted = Planted(PathBuf::from(format!("/dev/shm/hugeshm.{hostile}")));
    let st = nobody(&"mv").arg(&made.0).arg(&planted.0).status().unwrap();
    assert!(st.success());

    // Listed untrusted (another user's header is not read), escaped.
    let out = common::hugeshm(&["ls"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_no_raw_controls("ls", &text);
    let shown = format!("{plain}{TITLE_SHOWN}'; touch pwned; echo '");
    assert!(text.contains(&shown), "{text}");
    // Its header read (`--owner 65534`): kept, with a fix naming it.
    let out = common::hugeshm(&["ls", "--owner", "65534"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_no_raw_controls("ls --owner", &text);
    assert!(text.contains(&shown), "{text}");
    // The fix's remove command, pasted into a shell, is `hugeshm rm` with
    // the whole name as one argument, and runs nothing else.
    let warn = text
        .lines()
        .find(|l| (l.contains("WARN") || l.contains("info")) && l.contains(&plain))
        .unwrap_or_else(|| panic!("no line with the region's fix:\n{text}"));
    let rm = warn
        .split("or remove it: ")
        .nth(1)
        .unwrap_or_else(|| panic!("no remove command: {warn}"));
    let check = Command::new("sh").args(["-n", "-c", rm]).output().unwrap();
    assert!(check.status.success(), "sh -n: {rm}");
    let echo = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "hugeshm() {{ printf '%s\\n' \"$#\" \"$2\"; }}; {rm}"
        ))
        .current_dir(tmp.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&echo.stdout);
    assert_eq!(said, format!("4\n{shown}\n"), "{rm}");
    assert!(!pwned.exists(), "the fix ran a command of the name's: {rm}");

    // JSON: the exact bytes.
    let v = common::json(common::hugeshm(&["ls", "--json"]));
    assert!(
        v["regions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == hostile.as_str()),
        "{v:#}"
    );
    drop(planted);
}

/// A process of user 65534 holding a region, interrupted and its region
/// removed (as that user) when dropped.
struct Holder {
    child: Child,
    name: String,
}

impl Drop for Holder {
    fn drop(&mut self) {
        let pid = rustix::process::Pid::from_child(&self.child);
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::INT);
        let _ = self.child.wait();
        let _ = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_hugeshm"))
            .args(["rm", &self.name, "--backend", "posix"])
            .output();
    }
}

#[test]
fn segments_shows_a_process_name_escaped() {
    // Its region in /dev/shm is host state other tests compare under the
    // pool lock.
    let Some(pool) = live!() else { return };
    let Some(nobody) = as_nobody(pool.name()) else {
        return;
    };
    // The process's name (comm, argv[0]) is its program's file name: a
    // link to hugeshm named with the escape.
    let tmp = TempDir::new("hostile-comm");
    let link = tmp.join(format!("h{TITLE}"));
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_hugeshm"), &link).unwrap();
    let name = format!("t-comm-{}", std::process::id());
    let child = nobody(&link)
        .args(["create", &name, "--backend", "posix", "--size", "1M"])
        .args(["--page-size", "4k", "--hold"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _holder = Holder {
        child,
        name: name.clone(),
    };
    // Held once a process maps it (segments lists it attached).
    let t = Instant::now();
    let text = loop {
        let out = common::hugeshm(&["segments"]);
        let text = String::from_utf8(out.stdout).unwrap();
        if text.contains(&format!("hugeshm.{name}")) && text.contains("PWNED") {
            break text;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the region never showed attached:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_no_raw_controls("segments", &text);
    assert!(text.contains(&format!("h{TITLE_SHOWN}")), "{text}");
    let v = common::json(common::hugeshm(&["segments", "--json"]));
    assert!(holds_string(&v, &format!("h{TITLE}")), "{v:#}");
}
