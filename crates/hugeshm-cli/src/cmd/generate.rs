//! `hugeshm generate` (hidden): man pages and shell completions, rendered
//! by hugeshm-man from the clap definitions of the CLI itself, written
//! into a directory, for packagers (the Debian package runs it at build
//! time).

use crate::output::Out;
use anyhow::Context;
use hugeshm_sys::DirHandle;
use std::path::PathBuf;
use std::process::ExitCode;

/// What to generate.
#[derive(Debug, clap::Subcommand)]
pub enum GenerateCommand {
    /// Man pages: DIR/hugeshm.1 and one page per subcommand
    /// (hugeshm-status.1, hugeshm-bench-prefault.1, ...), each with
    /// examples, exit status, files and see also, and the overview
    /// hugeshm.8 (the findings, the JSON schema).
    Man(GenerateArgs),
    /// Shell completions: DIR/hugeshm.bash, DIR/_hugeshm (zsh) and
    /// DIR/hugeshm.fish.
    Completions(GenerateArgs),
}

/// Where to write.
#[derive(Debug, clap::Args)]
pub struct GenerateArgs {
    /// Directory to write into (created 0755 if missing; refused if it, or
    /// a directory or symlink on its path, belongs to another user, or
    /// others can write it).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Print the files written as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What `generate --json` prints.
#[derive(Debug, serde::Serialize)]
struct Generated {
    files: Vec<PathBuf>,
}

/// Writes `name` into `dir` (a new file renamed over the old one, 0644),
/// returning its path.
fn write(dir: &DirHandle, name: &str, text: &[u8]) -> std::io::Result<PathBuf> {
    dir.write_atomic(name, text, 0o644)?;
    Ok(dir.path().join(name))
}

/// Writes the man pages (`hugeshm_man::man_texts`).
fn man_pages(cmd: clap::Command, dir: &DirHandle) -> std::io::Result<Vec<PathBuf>> {
    hugeshm_man::man_texts(cmd)?
        .into_iter()
        .map(|(file, text)| write(dir, &file, &text))
        .collect()
}

/// Writes the bash, zsh and fish completions of `cmd`.
fn completions(cmd: clap::Command, dir: &DirHandle) -> std::io::Result<Vec<PathBuf>> {
    hugeshm_man::completion_texts(&cmd)
        .into_iter()
        .map(|(file, text)| write(dir, &file, &text))
        .collect()
}

/// Runs the command over the CLI's own definition, `cli`.
pub fn run(cli: clap::Command, what: &GenerateCommand, out: &mut Out) -> anyhow::Result<ExitCode> {
    let (args, kind) = match what {
        GenerateCommand::Man(a) => (a, "man pages"),
        GenerateCommand::Completions(a) => (a, "completions"),
    };
    let dir = crate::cmd::out_dir(&args.out, "--out")?;
    let files = match what {
        GenerateCommand::Man(_) => man_pages(cli, &dir),
        GenerateCommand::Completions(_) => completions(cli, &dir),
    }
    .with_context(|| format!("cannot write the {kind} into {}", args.out.display()))?;
    if args.json {
        out.json_doc(&Generated { files })?;
    } else {
        for f in &files {
            out.line(f.display().to_string())?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;
    use hugeshm_man::{completion_texts, man_texts};

    /// Every hidden subcommand and option of the CLI's definition, as
    /// (path, word): `bench oltp-worker`, `--proc-root`, ...
    fn hidden(cmd: &clap::Command, path: &str, out: &mut Vec<(String, String)>) {
        for a in cmd.get_arguments().filter(|a| a.is_hide_set()) {
            if let Some(long) = a.get_long() {
                out.push((path.to_owned(), format!("--{long}")));
            }
        }
        for s in cmd.get_subcommands() {
            let p = format!("{path} {}", s.get_name());
            if s.is_hide_set() {
                out.push((p.clone(), s.get_name().to_owned()));
            }
            hidden(s, &p, out);
        }
    }

    /// Every visible command as (its man page's file name, itself).
    fn pages(cmd: &clap::Command, name: &str, out: &mut Vec<(String, clap::Command)>) {
        out.push((format!("{name}.1"), cmd.clone()));
        for s in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            pages(s, &format!("{name}-{}", s.get_name()), out);
        }
    }

    #[test]
    fn man_pages_list_every_value_and_the_sections_and_no_hidden_name() {
        let cli = crate::Cli::command();
        let mut built = cli.clone().disable_help_subcommand(true);
        built.build();
        let texts: std::collections::BTreeMap<String, String> = man_texts(cli.clone())
            .unwrap()
            .into_iter()
            // roff escapes '-' (\-) and quotes ('\*(Aq').
            .map(|(f, t)| (f, String::from_utf8(t).unwrap().replace("\\-", "-")))
            .collect();
        let completions: Vec<(String, String)> = completion_texts(&cli)
            .into_iter()
            .map(|(f, t)| (f, String::from_utf8(t).unwrap()))
            .collect();
        let mut visible = Vec::new();
        pages(&built, "hugeshm", &mut visible);
        assert!(visible.len() >= 19, "{}", visible.len());
        let mut values = 0;
        for (file, cmd) in &visible {
            let page = texts.get(file).unwrap_or_else(|| panic!("no page {file}"));
            for section in [
                ".SH EXIT STATUS",
                ".SH FILES",
                ".SH SEE ALSO",
                "hugeadm(8)",
                "/etc/hugeshm/plan.toml",
            ] {
                assert!(page.contains(section), "{file} lacks {section}");
            }
            // Every listed value of every visible option, in the page and
            // in each shell's completions.
            for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
                for v in arg
                    .get_possible_values()
                    .iter()
                    .filter(|v| !v.is_hide_set())
                {
                    let v = v.get_name();
                    values += 1;
                    assert!(page.contains(v), "{file} lacks {v} of {:?}", arg.get_id());
                    for (shell, text) in &completions {
                        assert!(
                            text.contains(v),
                            "{shell} lacks {v} of {file} {:?}",
                            arg.get_id()
                        );
                    }
                }
            }
        }
        // The enums: backend, policy, reclaim, dist, lab --only, page sizes, colour.
        assert!(values >= 40, "{values}");
        let ex = texts["hugeshm-advise.1"].find(".SH EXAMPLES").unwrap();
        assert!(texts["hugeshm-advise.1"][ex..].contains("hugeshm advise --size 64M --container"));
        // The overview.
        let overview = &texts["hugeshm.8"];
        for says in [
            ".TH hugeshm 8",
            ".SH FINDINGS",
            "WARN",
            ".SH JSON",
            "schema",
            "hugeshm-status(1)",
        ] {
            assert!(
                overview.contains(says),
                "hugeshm.8 lacks {says}: {overview}"
            );
        }
        // Pages only for visible commands, and no hidden option or
        // command named in any.
        assert_eq!(texts.len(), visible.len() + 1);
        let mut words = Vec::new();
        hidden(&cli, "hugeshm", &mut words);
        for (file, text) in &texts {
            for (path, word) in &words {
                let found = if word.starts_with("--") {
                    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                        .any(|w| w == word)
                } else {
                    text.contains(&path.replace(' ', "-")) || text.contains(path.as_str())
                };
                assert!(!found, "{file} names {word} ({path})");
            }
        }
    }

    /// Each example of each page is a command line the CLI accepts.
    #[test]
    fn every_example_parses() {
        use clap::Parser;
        let cli = crate::Cli::command();
        let mut built = cli.clone().disable_help_subcommand(true);
        built.build();
        let mut visible = Vec::new();
        pages(&built, "hugeshm", &mut visible);
        let mut n = 0;
        for (file, _) in &visible {
            let text = String::from_utf8(
                man_texts(cli.clone())
                    .unwrap()
                    .into_iter()
                    .find(|(f, _)| f == file)
                    .unwrap()
                    .1,
            )
            .unwrap();
            let Some(ex) = text.find(".SH EXAMPLES") else {
                continue;
            };
            let body = &text[ex..text[ex..].find(".SH EXIT").map_or(text.len(), |e| ex + e)];
            for line in body.lines().filter_map(|l| l.strip_prefix("\\fB")) {
                let line = line.trim_end_matches("\\fR").replace("\\-", "-");
                let words: Vec<&str> = line
                    .split(" | ")
                    .next()
                    .unwrap()
                    .split_whitespace()
                    .collect();
                crate::Cli::try_parse_from(&words)
                    .unwrap_or_else(|e| panic!("{file}: {line}: {e}"));
                n += 1;
            }
        }
        assert!(n >= 25, "{n} examples");
    }

    #[test]
    fn no_hidden_command_or_option_in_any_completion() {
        let cli = crate::Cli::command();
        let mut words = Vec::new();
        hidden(&cli, "hugeshm", &mut words);
        // generate, bench oltp-worker, watchdog, interrupted, the children,
        // the three roots.
        assert!(words.len() >= 11, "{words:?}");
        for (file, text) in completion_texts(&cli) {
            let text = String::from_utf8(text).unwrap();
            for (path, word) in &words {
                // As each shell names a subcommand (bash `,NAME)`, zsh
                // `'NAME:`, fish `-a "NAME"`) or an option: not the word
                // "interrupted" in a sentence of help.
                let found = if word.starts_with("--") {
                    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                        .any(|w| w == word)
                } else {
                    [
                        format!(",{word})"),
                        format!("__{word}"),
                        format!("'{word}:"),
                        format!("-a \"{word}\""),
                    ]
                    .iter()
                    .any(|p| text.contains(p.as_str()))
                };
                assert!(!found, "{file} lists {word} ({path})");
            }
            assert!(text.contains("prefault"), "{file}");
        }
    }
}
