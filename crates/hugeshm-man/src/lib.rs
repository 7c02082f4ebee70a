//! hugeshm's man pages and shell completions, for packagers (the Debian
//! package makes them at build time through `hugeshm generate`, hidden):
//! rendered from the clap definition of the CLI itself, so that a new
//! option shows up in both by itself, with the sections clap has not
//! ([`sections`]: EXAMPLES, EXIT STATUS, FILES, SEE ALSO on every page,
//! and the overview page hugeshm(8)). Returns texts; writes and prints
//! nothing.
//!
//! # The public API
//!
//! [`man_texts`] and [`completion_texts`], each `(file name, text)`.
#![forbid(unsafe_code)]

mod sections;

use clap_complete::Shell;

/// The man pages of `cmd` and its visible subcommands (recursively), and
/// the overview hugeshm(8): (file name, text).
pub fn man_texts(cmd: clap::Command) -> std::io::Result<Vec<(String, Vec<u8>)>> {
    fn walk(
        cmd: clap::Command,
        path: &mut Vec<String>,
        pages: &mut Vec<(String, Vec<u8>)>,
    ) -> std::io::Result<()> {
        let subs: Vec<clap::Command> = cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set())
            .cloned()
            .collect();
        let names: Vec<String> = subs.iter().map(|s| s.get_name().to_owned()).collect();
        for sub in subs {
            path.push(sub.get_name().to_owned());
            walk(sub, path, pages)?;
            path.pop();
        }
        let man = clap_mangen::Man::new(cmd);
        let mut text = Vec::new();
        man.render(&mut text)?;
        let here: Vec<&str> = path.iter().map(String::as_str).collect();
        text.extend_from_slice(sections::extra_sections(&here, &names).as_bytes());
        pages.push((man.get_filename(), text));
        Ok(())
    }
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let version = cmd.get_version().unwrap_or_default().to_owned();
    let mut pages = Vec::new();
    walk(cmd, &mut Vec::new(), &mut pages)?;
    let mut names: Vec<String> = pages
        .iter()
        .map(|(f, _)| {
            f.strip_suffix(".1")
                .map_or(f.clone(), |n| format!("{n}(1)"))
        })
        .collect();
    names.sort();
    pages.push((
        "hugeshm.8".to_owned(),
        sections::overview(&version, &names).into_bytes(),
    ));
    pages.sort();
    Ok(pages)
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
pub fn completion_texts(cmd: &clap::Command) -> Vec<(String, Vec<u8>)> {
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
