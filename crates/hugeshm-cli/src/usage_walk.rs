//! Test only: every command of the clap definition, hidden ones included,
//! refuses an unknown option and a bad value of each of its options and
//! arguments while the arguments are parsed, with clap's usage status
//! (exit 2). A command or option added later is walked too: nothing here
//! names them, but for the few that take free text, each with its reason.

use crate::Cli;
use clap::error::{ContextKind, ErrorKind};
use clap::{Arg, Command, CommandFactory, ValueHint};

/// A value no option of hugeshm takes: no number, size, word of a list,
/// region name (`/`), placement, uid or user.
const BAD: &str = "bad/value%";

/// Options and arguments whose value is free text by design, refused (if
/// at all) when the command runs: (command path, argument id, why).
const FREE_TEXT: [(&str, &str, &str); 6] = [
    (
        "hugeshm advise",
        "dpdk",
        "EAL arguments as the application takes them; what DPDK refuses is refused (exit 2) when the plan is made",
    ),
    (
        "hugeshm apply",
        "dpdk",
        "EAL arguments as the application takes them; what DPDK refuses is refused (exit 2) when the plan is made",
    ),
    (
        "hugeshm advise",
        "jvm",
        "a java command line (shell words) or a running JVM's pid, read when the plan is made",
    ),
    (
        "hugeshm apply",
        "jvm",
        "a java command line (shell words) or a running JVM's pid, read when the plan is made",
    ),
    (
        "hugeshm bench interrupted",
        "regions",
        "internal: gives back every BACKEND:NAME it can read and names the others",
    ),
    (
        "hugeshm bench dax-child",
        "arg",
        "internal: the text to write, or a count to read",
    ),
];

/// Whether `arg` names a file or a command (a path is looked up when the
/// command runs: a missing one is a failure, exit 3, not a usage error).
fn is_path(arg: &Arg) -> bool {
    matches!(
        arg.get_value_hint(),
        ValueHint::AnyPath
            | ValueHint::FilePath
            | ValueHint::DirPath
            | ValueHint::ExecutablePath
            | ValueHint::CommandName
            | ValueHint::CommandString
            | ValueHint::CommandWithArguments
    )
}

/// Parses `argv`, which must fail as a usage error (exit 2).
fn refused(argv: &[String], what: &str) {
    match Cli::try_parse_from_argv(argv) {
        Ok(_) => panic!("{what}: {argv:?} was accepted"),
        Err(e) => {
            assert_eq!(e.exit_code(), 2, "{what}: {argv:?}: {e}");
            assert!(
                !matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion),
                "{what}: {argv:?}"
            );
        }
    }
}

/// `path`, values for the positionals before `arg`, then [`BAD`] for it:
/// the first sample value (the same for each) that every positional before
/// it takes, so that the error is `arg`'s.
fn positional_argv(path: &[String], k: usize, arg: &Arg) -> Vec<String> {
    let name = format!("<{}>", arg.get_value_names().unwrap_or_default()[0]);
    for sample in ["r", "sysv", "write", "1"] {
        let mut argv = path.to_vec();
        argv.extend(std::iter::repeat_n(sample.to_owned(), k));
        argv.push(BAD.into());
        if let Err(e) = Cli::try_parse_from_argv(&argv) {
            let invalid = e.get(ContextKind::InvalidArg).map(|v| v.to_string());
            if invalid.is_some_and(|v| v.contains(&name)) {
                return argv;
            }
        }
    }
    panic!("{path:?}: no sample values reach {name}");
}

/// Walks `cmd` (reached by `path`) and its subcommands; returns how many
/// values were refused.
fn walk(cmd: &Command, path: &[String]) -> usize {
    let here = path.join(" ");
    let mut refused_values = 0;
    let with = |extra: &[String]| -> Vec<String> {
        path.iter().cloned().chain(extra.iter().cloned()).collect()
    };
    refused(&with(&["--no-such-option".into()]), &here);
    let positionals: Vec<&Arg> = cmd.get_positionals().collect();
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if id == "help" || id == "version" {
            continue;
        }
        let what = format!("{here} {id}");
        if !arg.get_action().takes_values() {
            if let Some(long) = arg.get_long() {
                refused(&with(&[format!("--{long}={BAD}")]), &what);
            }
            continue;
        }
        if is_path(arg) {
            continue;
        }
        if let Some((_, _, why)) = FREE_TEXT.iter().find(|(p, a, _)| *p == here && *a == id) {
            assert!(!why.is_empty());
            continue;
        }
        let argv = match arg.get_long() {
            Some(long) => with(&[format!("--{long}={BAD}")]),
            None => {
                let k = positionals
                    .iter()
                    .position(|p| p.get_id() == arg.get_id())
                    .expect("a value without --long is positional");
                positional_argv(path, k, arg)
            }
        };
        refused(&argv, &what);
        refused_values += 1;
    }
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let mut p = path.to_vec();
        p.push(sub.get_name().to_owned());
        refused_values += walk(sub, &p);
    }
    refused_values
}

impl Cli {
    fn try_parse_from_argv(argv: &[String]) -> Result<Cli, clap::Error> {
        use clap::Parser;
        Cli::try_parse_from(argv)
    }
}

#[test]
fn every_command_refuses_a_bad_value_of_each_option_with_exit_2() {
    let mut cli = Cli::command();
    cli.build();
    let n = walk(&cli, &["hugeshm".to_owned()]);
    // create alone has a dozen options taking values.
    assert!(n > 60, "{n} values walked");
}

#[test]
fn the_walk_sees_hidden_commands_and_globals() {
    let mut cli = Cli::command();
    cli.build();
    let bench = cli.find_subcommand("bench").unwrap();
    assert!(bench
        .get_subcommands()
        .any(|s| s.is_hide_set() && s.get_name() == "oltp-worker"));
    // Global options reach every subcommand once built.
    let create = cli.find_subcommand("create").unwrap();
    assert!(create.get_arguments().any(|a| a.get_id() == "color"));
}
