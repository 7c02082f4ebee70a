//! `hugeshm generate` (hidden): man pages and shell completions, generated
//! from the clap definitions of the CLI itself, for packagers (the Debian
//! package runs it at build time). Nothing here is written by hand: a new
//! option shows up in the man page and the completions by itself.

use crate::output::Out;
use anyhow::Context;
use clap_complete::Shell;
use hugeshm_sys::DirHandle;
use std::path::PathBuf;
use std::process::ExitCode;

/// What to generate.
#[derive(Debug, clap::Subcommand)]
pub enum GenerateCommand {
    /// Man pages (section 1): DIR/hugeshm.1 and one page per subcommand
    /// (hugeshm-status.1, hugeshm-bench-prefault.1, ...).
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

/// Writes the man pages of `cmd` and its visible subcommands (recursively).
fn man_pages(cmd: clap::Command, dir: &DirHandle) -> std::io::Result<Vec<PathBuf>> {
    fn walk(cmd: clap::Command, dir: &DirHandle, files: &mut Vec<PathBuf>) -> std::io::Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
            walk(sub, dir, files)?;
        }
        let man = clap_mangen::Man::new(cmd);
        let mut text = Vec::new();
        man.render(&mut text)?;
        files.push(write(dir, &man.get_filename(), &text)?);
        Ok(())
    }
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let mut files = Vec::new();
    walk(cmd, dir, &mut files)?;
    files.sort();
    Ok(files)
}

/// `cmd` as a user sees it: without its hidden subcommands and options
/// (clap_complete lists them all), and with a value of no path type marked
/// as such (a number, a word), so that a shell does not offer file names
/// for it. Only what the completions need is copied.
fn visible(cmd: &clap::Command) -> clap::Command {
    use clap::ValueHint;
    let args = cmd.get_arguments().filter(|a| !a.is_hide_set()).map(|a| {
        let takes = a.get_action().takes_values();
        if takes && a.get_value_hint() == ValueHint::Unknown && a.get_possible_values().is_empty() {
            a.clone().value_hint(ValueHint::Other)
        } else {
            a.clone()
        }
    });
    let subs = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(visible);
    let mut out = clap::Command::new(cmd.get_name().to_owned())
        .args(args)
        .subcommands(subs);
    if let Some(about) = cmd.get_about() {
        out = out.about(about.clone());
    }
    if let Some(v) = cmd.get_version() {
        out = out.version(v.to_owned());
    }
    out
}

/// The bash, zsh and fish completions of `cmd`: (file name, text).
fn completion_texts(cmd: &clap::Command) -> Vec<(String, Vec<u8>)> {
    use clap_complete::Generator;
    let mut cmd = visible(cmd);
    let name = cmd.get_name().to_string();
    [Shell::Bash, Shell::Zsh, Shell::Fish]
        .into_iter()
        .map(|shell| {
            let mut text = Vec::new();
            clap_complete::generate(shell, &mut cmd, &name, &mut text);
            (shell.file_name(&name), text)
        })
        .collect()
}

/// Writes the bash, zsh and fish completions of `cmd`.
fn completions(cmd: clap::Command, dir: &DirHandle) -> std::io::Result<Vec<PathBuf>> {
    completion_texts(&cmd)
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
    use super::*;
    use clap::CommandFactory;

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
