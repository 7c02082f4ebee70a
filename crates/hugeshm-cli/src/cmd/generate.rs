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

/// Writes the bash, zsh and fish completions of `cmd`.
fn completions(mut cmd: clap::Command, dir: &DirHandle) -> std::io::Result<Vec<PathBuf>> {
    use clap_complete::Generator;
    let name = cmd.get_name().to_string();
    [Shell::Bash, Shell::Zsh, Shell::Fish]
        .into_iter()
        .map(|shell| {
            let mut text = Vec::new();
            clap_complete::generate(shell, &mut cmd, &name, &mut text);
            write(dir, &shell.file_name(&name), &text)
        })
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
