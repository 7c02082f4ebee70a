//! The command line as a user types it: one vocabulary across commands,
//! values a parser refuses with exit 2 and a sentence that says why, sizes
//! read one way. These run the binary and change nothing on the host.

use crate::common;

use std::process::Output;

/// `hugeshm ARGS`, which must exit `code`; its stderr.
fn exits(args: &[&str], code: i32) -> String {
    let out: Output = common::hugeshm(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(code),
        "hugeshm {args:?}: {err}{}",
        String::from_utf8_lossy(&out.stdout)
    );
    err
}

#[test]
fn sizes_are_binary_and_ambiguous_units_are_refused_with_both_readings() {
    let err = exits(&["advise", "--size", "10gb", "--json"], 2);
    assert!(err.contains("write 10G or 10GiB"), "{err}");
    assert!(err.contains("or 10000000000 for 10 x 1000³"), "{err}");
    let err = exits(&["create", "sizes-test", "--size", "-1G"], 2);
    assert!(err.contains("\"-1G\": a size is positive"), "{err}");
    let err = exits(&["create", "sizes-test", "--size", "99999999999T"], 2);
    assert!(
        err.contains("is too large (max 18446744073709551615 bytes"),
        "{err}"
    );
    let err = exits(&["bench", "prefault", "--size", "1G,-2G"], 2);
    assert!(err.contains("a size is positive"), "{err}");
    // The binary spellings plan the same bytes.
    let plan = |size: &str| {
        let v = common::json(common::hugeshm(&[
            "advise",
            "--size",
            size,
            "--page-size",
            "2m",
            "--json",
        ]));
        v["pools"].clone()
    };
    assert_eq!(plan("10G"), plan("10GiB"));
    assert_eq!(plan("10G"), plan("10737418240"));
    // The --help says which units mean what.
    let out = common::hugeshm(&["--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("kB, MB, GB and TB are refused"), "{help}");
}

#[test]
fn a_spec_file_reads_sizes_the_same_way() {
    let dir = hugeshm_testkit::TempDir::new("cli-usage-spec");
    let spec = dir.path().join("plan.toml");
    std::fs::write(&spec, "[[region]]\nname = \"sga\"\nsize = \"18GB\"\n").unwrap();
    let err = exits(&["advise", "--spec", spec.to_str().unwrap(), "--json"], 2);
    assert!(err.contains("region \"sga\": size \"18GB\""), "{err}");
    assert!(err.contains("18G or 18GiB"), "{err}");
}

/// Completes `line` with the bash completion `hugeshm generate
/// completions` writes, in a directory holding one file (`planted-file`):
/// the words offered.
fn bash_complete(line: &str) -> Vec<String> {
    let dir = hugeshm_testkit::TempDir::new("cli-usage-complete");
    let gen = dir.path().join("gen");
    let out = common::hugeshm(&["generate", "completions", "--out", gen.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cwd = dir.path().join("cwd");
    std::fs::create_dir(&cwd).unwrap();
    std::fs::write(cwd.join("planted-file"), "").unwrap();
    let script = format!(
        "source {}; read -ra COMP_WORDS <<< \"{line}\"; [[ \"{line}\" == *' ' ]] && COMP_WORDS+=(''); \
         COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); COMP_LINE=\"{line}\"; COMP_POINT=${{#COMP_LINE}}; \
         _hugeshm hugeshm \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\" 2>/dev/null; \
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        gen.join("hugeshm.bash").display()
    );
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(&cwd)
        .output()
        .expect("run bash");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn completions_offer_each_options_values_not_file_names() {
    let backends = ["sysv", "memfd", "hugetlbfs", "posix", "anon", "dax"];
    for (line, want) in [
        ("hugeshm create r --backend ", &backends[..]),
        ("hugeshm rm r --backend ", &backends[..]),
        ("hugeshm attach r --backend ", &backends[..]),
        ("hugeshm bench prefault --backend ", &backends[..]),
        ("hugeshm bench oltp --backend ", &backends[..]),
        ("hugeshm bench oltp --page-size ", &["4k", "2m", "1g"][..]),
        (
            "hugeshm bench attach --backend ",
            &["sysv", "hugetlbfs", "posix", "dax"][..],
        ),
        ("hugeshm create r --policy ", &["off", "try", "only"][..]),
        ("hugeshm run --policy ", &["try", "only"][..]),
        (
            "hugeshm create r --page-size ",
            &["4k", "2m", "1g", "largest"][..],
        ),
        (
            "hugeshm bench prefault --page-size ",
            &["4k", "2m", "1g"][..],
        ),
        ("hugeshm advise --page-size ", &["2m", "1g"][..]),
        (
            "hugeshm run --page-size ",
            &["default", "keep", "2m", "1g"][..],
        ),
        ("hugeshm bench oltp --dist ", &["uniform", "zipf"][..]),
        ("hugeshm bench dmbc --dist ", &["uniform", "zipf"][..]),
        (
            "hugeshm create r --reclaim ",
            &["refuse", "reuse", "recreate"][..],
        ),
        (
            "hugeshm lab --only ",
            &["startup", "pagetables", "fallback", "numa", "oltp", "dmbc"][..],
        ),
    ] {
        assert_eq!(bash_complete(line), want, "{line}");
    }
    // A number or a word is not a file.
    for line in [
        "hugeshm bench prefault --threads ",
        "hugeshm create r --numa ",
        "hugeshm create r --size ",
        "hugeshm exporter --listen ",
    ] {
        let words = bash_complete(line);
        assert!(
            !words.iter().any(|w| w == "planted-file"),
            "{line}: {words:?}"
        );
    }
    // A directory still is.
    let words = bash_complete("hugeshm lab --out ");
    assert!(words.iter().any(|w| w == "planted-file"), "{words:?}");
}

#[test]
fn a_value_outside_the_list_is_a_usage_error_naming_the_list() {
    let err = exits(&["lab", "--only", "startp"], 2);
    assert!(
        err.contains("possible values: startup, pagetables"),
        "{err}"
    );
    let err = exits(&["create", "r", "--size", "1G", "--backend", "sysV5"], 2);
    assert!(err.contains("possible values: sysv, memfd"), "{err}");
    let err = exits(&["bench", "attach", "--backend", "anon"], 2);
    assert!(
        err.contains("possible values: sysv, hugetlbfs, posix, dax"),
        "{err}"
    );
    let err = exits(&["bench", "prefault", "--page-size", "4k,3m"], 2);
    assert!(err.contains("\"3m\" is not a page size"), "{err}");
    let err = exits(&["advise", "--size", "1G", "--page-size", "3m"], 2);
    assert!(err.contains("\"3m\" is not a page size"), "{err}");
    // The help lists them too.
    let out = common::hugeshm(&["create", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    for v in ["sysv:", "hugetlbfs:", "largest:", "recreate:", "only:"] {
        assert!(help.contains(v), "create --help lacks {v}: {help}");
    }
}

/// The long options a help text lists (`--json`, `--page-size`, ...).
fn options_in_help(path: &[&str]) -> Vec<String> {
    let mut args = path.to_vec();
    args.push("--help");
    let out = common::hugeshm(&args);
    assert!(out.status.success(), "{args:?}");
    String::from_utf8_lossy(&out.stdout)
        .split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == ']')
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| w.split(['=', '<', '.']).next().unwrap().to_string())
        .collect()
}

#[test]
fn one_name_per_concept_with_the_old_spellings_as_hidden_aliases() {
    // (command, the name, the old spelling, a value the parser refuses)
    for (cmd, name, old, bad) in [
        (&["bench", "oltp"][..], "--page-size", "--page-sizes", "3m"),
        (&["bench", "oltp"], "--backend", "--backends", "sysv,bogus"),
        (
            &["bench", "prefault"],
            "--backend",
            "--huge-backend",
            "bogus",
        ),
        (&["bench", "dmbc"], "--data-dir", "--dir", ""),
        (&["rm"], "--accept-mode", "--mode", "9999"),
        (&["attach"], "--accept-mode", "--mode", "9999"),
    ] {
        let options = options_in_help(cmd);
        assert!(options.iter().any(|o| o == name), "{cmd:?} lacks {name}");
        assert!(
            !options.iter().any(|o| o == old),
            "{cmd:?} --help still shows {old}"
        );
        if bad.is_empty() {
            continue;
        }
        // The old spelling still reaches the new option.
        let mut args = cmd.to_vec();
        if cmd[0] == "rm" || cmd[0] == "attach" {
            args.push("region-name");
        }
        let arg = format!("{old}={bad}");
        args.push(&arg);
        let err = exits(&args, 2);
        assert!(err.contains(&format!("for '{name} <")), "{args:?}: {err}");
    }
    // The same concept, the same name, in every command that has it.
    for (name, cmds) in [
        (
            "--page-size",
            &[
                &["create"][..],
                &["advise"],
                &["apply"],
                &["run"],
                &["bench", "prefault"],
                &["bench", "oltp"],
                &["bench", "numa"],
                &["bench", "pagetables"],
                &["bench", "attach"],
                &["bench", "scan"],
            ][..],
        ),
        (
            "--backend",
            &[
                &["create"][..],
                &["rm"],
                &["attach"],
                &["bench", "prefault"],
                &["bench", "oltp"],
                &["bench", "pagetables"],
                &["bench", "attach"],
            ],
        ),
        ("--data-dir", &[&["bench", "oltp"][..], &["bench", "dmbc"]]),
    ] {
        for cmd in cmds {
            assert!(
                options_in_help(cmd).iter().any(|o| o == name),
                "{cmd:?} lacks {name}"
            );
        }
    }
    // A dmbc data directory given the old way is still the data directory:
    // the bench refuses one others can write, naming it.
    let dir = hugeshm_testkit::TempDir::new("cli-usage-dmbc");
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    for flag in ["--dir", "--data-dir"] {
        let out = common::hugeshm(&["bench", "dmbc", flag, open.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag}");
        assert!(err.contains(open.to_str().unwrap()), "{flag}: {err}");
    }
}

/// Every visible command path (`[status]`, `[bench, prefault]`, ...), read
/// from the binary's own `--help`.
fn command_paths() -> Vec<Vec<String>> {
    let mut todo = vec![Vec::<String>::new()];
    let mut all = Vec::new();
    while let Some(path) = todo.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let help = String::from_utf8(common::hugeshm(&args).stdout).unwrap();
        for sub in help
            .lines()
            .skip_while(|l| l.trim() != "Commands:")
            .skip(1)
            .take_while(|l| !l.trim().is_empty())
            .filter_map(|l| l.split_whitespace().next())
            .filter(|c| *c != "help")
        {
            let mut p = path.clone();
            p.push(sub.to_owned());
            todo.push(p);
        }
        all.push(path);
    }
    all
}

#[test]
fn every_command_exits_2_on_a_usage_error() {
    // Each command of the binary, an unknown option (src/usage_walk.rs
    // walks the clap definition itself with a bad value of every option).
    let paths = command_paths();
    assert!(paths.len() >= 19, "{paths:?}");
    for path in &paths {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--no-such-option");
        exits(&args, 2);
    }
    // The issue's cases, and the checks that used to run after the command
    // had started (exit 3).
    for (args, says) in [
        (
            &["create", "bad/name", "--size", "1G"][..],
            "character '/' not allowed",
        ),
        (&["rm", "a/../b"], "character '/' not allowed"),
        (&["advise", "--size", "10gb"], "write 10G or 10GiB"),
        (&["create", "r", "--size", "-1G"], "a size is positive"),
        (
            &["create", "r", "--size", "99999999999T"],
            "is too large (max",
        ),
        (&["lab", "--only", "startp"], "possible values"),
        (
            &["advise", "--size", "64M", "--page-size", "3m"],
            "not a page size",
        ),
        (
            &["create", "r", "--size", "1M", "--backend", "memfd"],
            "add --hold",
        ),
        (
            &["advise", "--size", "64M", "--run"],
            "name the server's executable",
        ),
        (
            &["advise", "--size", "64M", "--run=/usr/bin/x"],
            "a file name, not a path",
        ),
        (
            &["exporter", "--once", "--timeout", "0"],
            "above 0 and at most 3600",
        ),
        (
            &["bench", "oltp", "--block-size", "3k"],
            "power of two from 512 bytes",
        ),
        (
            &["bench", "oltp", "--cache-size", "1k"],
            "must hold at least one 8192-byte block",
        ),
        (
            &["bench", "oltp", "--write-pct", "101"],
            "101 is not in 0..=100",
        ),
        (&["bench", "oltp", "--duration", "inf"], "at most 86400"),
        (&["bench", "dmbc", "--workers", "0"], "0 is not in 1..=1024"),
        (
            &["bench", "prefault", "--threads", "0"],
            "at least one count above 0",
        ),
        (
            &["bench", "numa", "--cpu-node", "4096", "--page-size", "4k"],
            "--cpu-node 4096: there is no node 4096",
        ),
    ] {
        let err = exits(args, 2);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// `hugeshm exporter --listen LISTEN` on a fixture tree, where LISTEN is
/// `listen` with PORT replaced by a free port: its answer to GET /metrics
/// on 127.0.0.1, and its stderr once killed.
fn exporter_on(listen: &str) -> (String, String) {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = listen.replace("PORT", &port.to_string());
    let mut child = common::on_fixture("clean")
        .args(["exporter", "--listen", &listen])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut answer = String::new();
    for _ in 0..400 {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
            s.read_to_string(&mut answer).unwrap();
            break;
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (answer, err)
}

#[test]
fn exporter_listens_on_port_only_and_on_localhost() {
    // node_exporter's spelling: every interface, with a warning.
    let (answer, err) = exporter_on(":PORT");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}{err}");
    assert!(answer.contains("hugeshm_"), "{answer}");
    assert!(
        err.contains("warning: serving on every interface (0.0.0.0:"),
        "{err}"
    );
    // A host name; loopback, no warning.
    let (answer, err) = exporter_on("localhost:PORT");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}{err}");
    assert!(err.contains("serving http://127.0.0.1:"), "{err}");
    assert!(!err.contains("warning"), "{err}");
    // A port alone says how to write it.
    let err = exits(&["exporter", "--listen", "9731"], 2);
    assert!(err.contains("e.g. :9731"), "{err}");
}

#[test]
fn each_help_opens_with_its_own_options_and_ends_with_the_global_ones() {
    for path in command_paths() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let help = String::from_utf8(common::hugeshm(&args).stdout).unwrap();
        let options = help.find("\nOptions:\n").unwrap_or(0);
        let global = help
            .find("\nGlobal options:\n")
            .unwrap_or_else(|| panic!("{path:?}: no global options: {help}"));
        let color = help.find("--color").unwrap();
        assert!(options < global && global < color, "{path:?}: {help}");
        if path.is_empty() || path == ["bench"] {
            continue;
        }
        // The command's own options come first: the first option listed is
        // not --color.
        let first = help[options..]
            .split_whitespace()
            .find(|w| w.starts_with("--"))
            .unwrap();
        assert_ne!(first, "--color", "{path:?}");
    }
    // The lab's help describes each reproduction and what --quick gives.
    let out = common::hugeshm(&["lab", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    for name in ["startup", "pagetables", "fallback", "numa", "oltp", "dmbc"] {
        assert!(
            help.contains(&format!("{name} (")),
            "lab --help lacks {name}: {help}"
        );
    }
    assert!(!help.contains("for tests"), "{help}");
    assert!(help.contains("seconds instead of minutes"), "{help}");
}

#[test]
fn the_apply_command_advise_prints_runs_as_printed() {
    use hugeshm_probe::{FS_ROOT_ENV, PROC_ROOT_ENV, SYS_ROOT_ENV};
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/clean");
    let dir = hugeshm_testkit::TempDir::new("cli-usage-apply");
    let spec = dir.path().join("a plan's spec.toml");
    std::fs::write(&spec, "[[region]]\nname = \"sga\"\nsize = \"64M\"\n").unwrap();
    let advise = |extra: &[&str]| {
        common::on_fixture("clean")
            .args([
                "advise",
                "--container",
                "--size",
                "64M",
                "--page-size",
                "2m",
            ])
            .args(["--live", "--spare", "3", "--memlock-user", "@dba", "--spec"])
            .arg(&spec)
            .args([
                "--jvm",
                "java -XX:+UseLargePages -Xmx64m '-Dname=a b' -jar x.jar",
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = advise(&[]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("Container (Kubernetes pod spec)"), "{text}");
    let line = text
        .lines()
        .rfind(|l| l.starts_with("Reserve it now"))
        .unwrap();
    let cmd = line.split('`').nth(1).unwrap();
    assert!(
        cmd.starts_with("hugeshm apply --size 64M --page-size 2M"),
        "{cmd}"
    );
    assert!(!cmd.contains("--container"), "{cmd}");
    assert!(
        cmd.contains(r"--jvm 'java -XX:+UseLargePages -Xmx64m '\''-Dname=a b'\'' -jar x.jar'"),
        "{cmd}"
    );
    // A shell runs it as printed (the spec's name quoted), on the fixture.
    let script = format!("hugeshm() {{ \"$HUGESHM\" \"$@\"; }}; {cmd} --dry-run --json");
    let out = std::process::Command::new("sh")
        .args(["-c", &script])
        .env("HUGESHM", env!("CARGO_BIN_EXE_hugeshm"))
        .env(PROC_ROOT_ENV, fixture.join("proc"))
        .env(SYS_ROOT_ENV, fixture.join("sys"))
        .env(FS_ROOT_ENV, fixture.join("fs"))
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let applied = common::json(out);
    // The plan advise printed.
    let advised = common::json(advise(&["--json"]));
    assert_eq!(applied["plan"]["pools"], advised["pools"], "{applied:#}");
    assert_eq!(advised["pools"][0]["spare_pages"].as_u64(), Some(3));
}

/// A server source's text is checked when the plan is made: what is not
/// a java command line, its options or a pid, and what is not an Oracle
/// SID, are usage errors; options alone may start with a hyphen.
#[test]
fn a_server_source_that_names_no_server_is_a_usage_error() {
    let e = exits(&["advise", "--jvm", "bad/value%"], 2);
    assert!(e.contains("is not java"), "{e}");
    let e = exits(&["advise", "--jvm", ""], 2);
    assert!(e.contains("empty command line"), "{e}");
    let e = exits(&["advise", "--oracle-sid", "../x"], 2);
    assert!(e.contains("not an Oracle SID"), "{e}");
    exits(
        &["advise", "--jvm", "-Xmx64m -XX:+UseLargePages", "--json"],
        0,
    );
}
