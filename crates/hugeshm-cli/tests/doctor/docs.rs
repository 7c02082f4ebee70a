//! The commands README.md, CONTRIBUTING.md and docs/ show, run.
//!
//! A console block is runnable when the line before its opening fence is
//! `<!-- runnable -->`, optionally with `pages=N` (N free 2 MiB pages are
//! made first) and `region=SIZE` (a SysV region of SIZE on 2 MiB pages,
//! `docs-example`, exists while the block runs, so that the doctor has a
//! segment to show). Each `$ ` line of the block (with `\` continuations)
//! is a command: `hugeshm` is this build's binary, `sudo ` is dropped (the
//! test runs as root) and README's `cargo run --release --locked -p hugeshm
//! --` is the same binary. A command must exit 0 or 1 (1: `--check` found
//! something), or, where the docs show `hugeshm: error:`, fail (exit 2 or
//! 3) with an error. The lines
//! after a command are the output the docs show: its first word must start
//! the real output (unless the docs show `...` first), and each table header line the docs show (four or more
//! lowercase words set apart by two or more spaces) must be a line of the
//! real output, so that a renamed column or a changed layout fails here.

use std::path::{Path, PathBuf};
use std::process::Command;

use hugeshm_testkit::{live, TempDir};

/// One runnable block.
#[derive(Debug)]
struct Block {
    file: String,
    line: usize,
    pages: u64,
    region: Option<String>,
    commands: Vec<Shown>,
}

/// One command of a block and the output the docs show for it.
#[derive(Debug)]
struct Shown {
    line: usize,
    command: String,
    output: Vec<String>,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md, CONTRIBUTING.md and every docs/*.md.
fn markdown_files() -> Vec<PathBuf> {
    let root = repo_root();
    let mut files = vec![root.join("README.md"), root.join("CONTRIBUTING.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

fn parse_marker(rest: &str, file: &str, line: usize) -> (u64, Option<String>) {
    let mut pages = 0;
    let mut region = None;
    for word in rest.split_whitespace() {
        match word.split_once('=') {
            Some(("pages", n)) => {
                pages = n
                    .parse()
                    .unwrap_or_else(|_| panic!("{file}:{line}: pages={n} is not a number"))
            }
            Some(("region", size)) => region = Some(size.to_string()),
            _ => panic!("{file}:{line}: unknown runnable option {word:?}"),
        }
    }
    (pages, region)
}

/// The runnable blocks of one file.
fn blocks_of(file: &str, text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(rest) = lines[i]
            .trim()
            .strip_prefix("<!-- runnable")
            .and_then(|r| r.strip_suffix("-->"))
        else {
            i += 1;
            continue;
        };
        let (pages, region) = parse_marker(rest, file, i + 1);
        let fence = lines.get(i + 1).map(|l| l.trim_start()).unwrap_or("");
        assert!(
            fence.starts_with("```"),
            "{file}:{}: a runnable marker must come right before a code fence",
            i + 1
        );
        let mut block = Block {
            file: file.to_string(),
            line: i + 2,
            pages,
            region,
            commands: Vec::new(),
        };
        i += 2;
        while i < lines.len() && !lines[i].trim_start().starts_with("```") {
            let line = lines[i];
            if let Some(cmd) = line.strip_prefix("$ ") {
                let start = i + 1;
                let mut command = cmd.to_string();
                while command.ends_with('\\') && i + 1 < lines.len() {
                    command.pop();
                    i += 1;
                    command.push(' ');
                    command.push_str(lines[i].trim());
                }
                block.commands.push(Shown {
                    line: start,
                    command,
                    output: Vec::new(),
                });
            } else if let Some(last) = block.commands.last_mut() {
                last.output.push(line.to_string());
            }
            i += 1;
        }
        assert!(
            !block.commands.is_empty(),
            "{file}:{}: a runnable block without a `$ ` command",
            block.line
        );
        blocks.push(block);
        i += 1;
    }
    blocks
}

/// A table header the docs show: four or more lowercase words (`/`, `-`,
/// `_` and `*` allowed), the columns set apart by two or more spaces.
fn is_table_header(line: &str) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    words.len() >= 4
        && line.trim().contains("  ")
        && words.iter().all(|w| {
            w.chars()
                .all(|c| c.is_ascii_lowercase() || "/-_*".contains(c))
        })
}

fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// The command as the test runs it.
fn as_run(command: &str) -> String {
    let c = command.strip_prefix("sudo ").unwrap_or(command);
    c.replacen("cargo run --release --locked -p hugeshm -- ", "hugeshm ", 1)
}

fn run_shown(shown: &Shown, block: &Block, bin_dir: &Path) {
    let at = format!("{}:{}", block.file, shown.line);
    let command = as_run(&shown.command);
    assert!(
        command.starts_with("hugeshm "),
        "{at}: a runnable command runs hugeshm: {command}"
    );
    eprintln!("{at}: {command}");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(&command)
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .current_dir(bin_dir)
        .output()
        .expect("bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code();
    // An error the docs show is an error here too.
    let shows_error = shown
        .output
        .iter()
        .any(|l| l.starts_with("hugeshm: error:"));
    if shows_error {
        assert!(
            matches!(code, Some(2) | Some(3)) && stderr.contains("hugeshm: error:"),
            "{at}: `{command}` should fail as the docs show; exited {code:?}\n{stdout}\n{stderr}"
        );
    } else {
        assert!(
            matches!(code, Some(0) | Some(1)),
            "{at}: `{command}` exited {code:?}\n{stdout}\n{stderr}"
        );
    }
    let real = format!("{stdout}{stderr}");
    // `...` first: the docs leave the start out.
    let shown_first = shown.output.iter().find(|l| !l.trim().is_empty());
    if let Some(first) = shown_first.filter(|l| l.trim() != "...") {
        let want = first.split_whitespace().next().unwrap_or("");
        let got = real.split_whitespace().next().unwrap_or("");
        assert_eq!(
            got, want,
            "{at}: `{command}` starts its output otherwise than the docs show\n{real}"
        );
    }
    for header in shown.output.iter().filter(|l| is_table_header(l)) {
        assert!(
            real.lines().any(|l| words(l) == words(header)),
            "{at}: `{command}` prints no line {header:?} (the docs' table header)\n{real}"
        );
    }
}

#[test]
fn runnable_blocks_in_readme_and_docs_run_as_shown() {
    let Some(pool) = live!() else { return };
    let root = repo_root();
    let mut blocks = Vec::new();
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).expect("read markdown");
        let name = file
            .strip_prefix(&root)
            .unwrap_or(&file)
            .display()
            .to_string();
        blocks.extend(blocks_of(&name, &text));
    }
    assert!(
        blocks.iter().any(|b| b.file == "README.md"),
        "README.md has no runnable block"
    );
    let dir = TempDir::new("docs");
    let bin = env!("CARGO_BIN_EXE_hugeshm");
    std::os::unix::fs::symlink(bin, dir.join("hugeshm")).expect("symlink hugeshm");
    for block in &blocks {
        let region_pages = block.region.as_deref().map_or(0, |s| {
            let mib: u64 = s
                .strip_suffix('M')
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{}: region={s}: use NM", block.file));
            mib / 2 + 1
        });
        let pages = block.pages + region_pages;
        if pages > 0 {
            pool.ensure_free(2 << 20, pages)
                .unwrap_or_else(|e| panic!("{}:{}: {pages} pages: {e}", block.file, block.line));
        }
        if let Some(size) = &block.region {
            let made = Command::new(bin)
                .args(["create", "docs-example", "--size", size])
                .args(["--page-size", "2m", "--policy", "only"])
                .output()
                .expect("hugeshm create");
            assert!(made.status.success(), "create docs-example: {made:?}");
        }
        for shown in &block.commands {
            run_shown(shown, block, dir.path());
        }
        if block.region.is_some() {
            let removed = Command::new(bin)
                .args(["rm", "docs-example"])
                .output()
                .expect("hugeshm rm");
            assert!(removed.status.success(), "rm docs-example: {removed:?}");
        }
    }
    pool.finish();
}

/// README's test command is the one CI runs, and its doctor command runs.
#[test]
fn readme_set_up_commands_are_the_ones_ci_and_users_run() {
    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let ci = std::fs::read_to_string(root.join(".ci/run")).expect(".ci/run");
    let set_up = readme
        .split("\n## Set up\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README has a `## Set up` section");
    let commands: Vec<&str> = set_up
        .lines()
        .filter_map(|l| l.trim().strip_prefix("$ "))
        .collect();
    assert_eq!(
        commands.len(),
        2,
        "README's set-up has exactly two commands: {commands:?}"
    );
    assert!(
        commands[0].starts_with("cargo run --release --locked -p hugeshm -- "),
        "the first runs the doctor: {}",
        commands[0]
    );
    assert!(
        ci.lines().any(|l| {
            let l = l.trim();
            !l.starts_with('#')
                && l.split_once(commands[1])
                    .is_some_and(|(_, after)| after.is_empty() || after.starts_with(' '))
        }),
        ".ci/run does not run README's test command `{}`",
        commands[1]
    );
}

#[test]
fn markers_parse() {
    let text = "x\n<!-- runnable pages=3 region=64M -->\n```console\n$ hugeshm a \\\n  --b\nsize  node  total  free\n  2M  all  1  1\n```\n";
    let blocks = blocks_of("t.md", text);
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0].pages, 3);
    assert_eq!(blocks[0].region.as_deref(), Some("64M"));
    assert_eq!(blocks[0].commands[0].command, "hugeshm a  --b");
    assert_eq!(blocks[0].commands[0].output.len(), 2);
    assert!(is_table_header(&blocks[0].commands[0].output[0]));
    assert!(!is_table_header(&blocks[0].commands[0].output[1]));
    assert_eq!(
        as_run("sudo cargo run --release --locked -p hugeshm -- status"),
        "hugeshm status"
    );
}
