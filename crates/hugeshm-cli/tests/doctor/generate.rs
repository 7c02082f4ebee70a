//! `hugeshm generate man|completions`: a man page and completions for every
//! subcommand the CLI really has. The list of subcommands and their options
//! is read from the binary's own `--help` (not from the generator), so a
//! subcommand the generator skipped fails here. The bash completion is
//! sourced into a real bash and asked to complete.

use crate::common;

use hugeshm_testkit::{skip_part, test_name, TempDir};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn help(path: &[String]) -> String {
    let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
    args.push("--help");
    let out = common::hugeshm(&args);
    assert!(out.status.success(), "hugeshm {args:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The subcommands listed under `Commands:` in a help text (not `help`).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// The long options of a help text (`--json`, `--size`, ...), `--help` and
/// `--version` aside.
fn long_options(help: &str) -> BTreeSet<String> {
    // In an example, the words after a lone `--` are the server's own
    // (`-- mariadbd --innodb-buffer-pool-size=256M`), not hugeshm's.
    help.lines()
        .flat_map(|line| {
            line.split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == ']')
                .take_while(|w| *w != "--")
        })
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| {
            w.split(['=', '<'])
                .next()
                .unwrap()
                .trim_end_matches('.')
                .to_string()
        })
        .filter(|w| {
            w != "--help"
                && w != "--version"
                && w[2..].chars().all(|c| c.is_ascii_lowercase() || c == '-')
        })
        .collect()
}

/// Every command path (`[]`, `[status]`, `[bench, prefault]`, ...) with its
/// help text.
fn command_tree() -> Vec<(Vec<String>, String)> {
    let mut todo = vec![Vec::new()];
    let mut all = Vec::new();
    while let Some(path) = todo.pop() {
        let h = help(&path);
        for sub in subcommands(&h) {
            let mut p = path.clone();
            p.push(sub);
            todo.push(p);
        }
        all.push((path, h));
    }
    all.sort();
    all
}

fn generate(what: &str, dir: &Path) -> BTreeSet<String> {
    let v = common::json(common::hugeshm(&[
        "generate",
        what,
        "--out",
        dir.to_str().unwrap(),
        "--json",
    ]));
    let files: BTreeSet<String> = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let p = PathBuf::from(f.as_str().unwrap());
            assert!(p.is_file(), "{} listed but not written", p.display());
            p.file_name().unwrap().to_string_lossy().into_owned()
        })
        .collect();
    let on_disk: BTreeSet<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, on_disk, "the JSON lists what was written");
    files
}

#[test]
fn a_man_page_for_every_subcommand_with_its_options() {
    let dir = TempDir::new("generate-man");
    let files = generate("man", dir.path());
    let tree = command_tree();
    assert!(tree.len() >= 14, "{tree:?}");
    let mut expected = BTreeSet::new();
    for (path, h) in &tree {
        let mut name = vec!["hugeshm".to_string()];
        name.extend(path.iter().cloned());
        let file = format!("{}.1", name.join("-"));
        let page = std::fs::read_to_string(dir.path().join(&file))
            .unwrap_or_else(|e| panic!("no man page {file} for `{}`: {e}", name.join(" ")));
        assert!(page.starts_with(".ie"), "{file} is roff: {page}");
        assert!(page.contains(".TH "), "{file}");
        // roff escapes every '-': \-\-json.
        let roff = page.replace("\\-", "-");
        for opt in long_options(h) {
            assert!(roff.contains(&opt), "{file} lacks {opt}");
        }
        expected.insert(file);
    }
    // One page per visible command and the overview hugeshm(8), nothing
    // else (the hidden `generate` has none).
    expected.insert("hugeshm.8".to_owned());
    assert_eq!(files, expected);

    // man(1) formats it.
    let out = match Command::new("man")
        .arg("-l")
        .arg(dir.path().join("hugeshm-exporter.1"))
        .env("MANWIDTH", "100")
        .output()
    {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return skip_part(test_name!(), "man(1)", "no man on this host")
        }
        Err(e) => panic!("man -l: {e}"),
    };
    // Bold and underline are overstrikes (`x\bx`) when not on a tty.
    let mut text = String::new();
    for c in String::from_utf8_lossy(&out.stdout).chars() {
        if c == '\u{8}' {
            text.pop();
        } else {
            text.push(c);
        }
    }
    let text = text.replace('\u{2010}', "-");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("NAME"), "{text}");
    assert!(text.contains("--textfile"), "{text}");
}

#[test]
fn completions_for_every_subcommand_and_option_in_three_shells() {
    let dir = TempDir::new("generate-completions");
    let files = generate("completions", dir.path());
    assert_eq!(
        files,
        ["_hugeshm", "hugeshm.bash", "hugeshm.fish"]
            .map(String::from)
            .into(),
    );
    let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
    let (bash, zsh, fish) = (read("hugeshm.bash"), read("_hugeshm"), read("hugeshm.fish"));
    assert!(zsh.starts_with("#compdef hugeshm"), "{zsh}");
    for (path, h) in command_tree() {
        if let Some(last) = path.last() {
            assert!(bash.contains(&format!(",{last})")), "bash lacks {path:?}");
            assert!(zsh.contains(&format!("'{last}:")), "zsh lacks {path:?}");
            assert!(
                fish.contains(&format!("-a \"{last}\"")),
                "fish lacks {path:?}"
            );
        }
        for opt in long_options(&h) {
            let word = &opt[2..];
            assert!(bash.contains(&opt), "bash lacks {opt} of {path:?}");
            assert!(zsh.contains(&opt), "zsh lacks {opt} of {path:?}");
            assert!(
                fish.contains(&format!("-l {word}")),
                "fish lacks {opt} of {path:?}"
            );
        }
    }

    // A real bash completes with it.
    let complete = |line: &str| -> Vec<String> {
        let script = format!(
            "source {}; read -ra COMP_WORDS <<< \"{line}\"; [[ \"{line}\" == *' ' ]] && COMP_WORDS+=(''); \
             COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); COMP_LINE=\"{line}\"; COMP_POINT=${{#COMP_LINE}}; \
             _hugeshm hugeshm \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            dir.path().join("hugeshm.bash").display()
        );
        let out = Command::new("bash").arg("-c").arg(&script).output();
        let out = out.expect("run bash");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    };
    let words = complete("hugeshm ex");
    assert_eq!(words, ["exporter"], "{words:?}");
    let words = complete("hugeshm exporter --t");
    assert_eq!(words, ["--textfile", "--timeout"], "{words:?}");
    let words = complete("hugeshm bench p");
    assert!(
        words.contains(&"prefault".to_string()) && words.contains(&"pagetables".to_string()),
        "{words:?}"
    );
    for (shell, flag, file) in [
        ("zsh", "-n", "_hugeshm"),
        ("fish", "--no-execute", "hugeshm.fish"),
    ] {
        match Command::new(shell)
            .arg(flag)
            .arg(dir.path().join(file))
            .output()
        {
            Ok(out) => assert!(
                out.status.success(),
                "{shell} {flag}: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => skip_part(
                test_name!(),
                &format!("{shell} syntax"),
                format_args!("no {shell} on this host"),
            ),
            Err(e) => panic!("{shell} {flag}: {e}"),
        }
    }
}
