//! What `hugeshm run` refuses before it starts a server ([`RunRefusal`])
//! and what it only warns of ([`RunWarning`]): facts, with the numbers and
//! paths; their `Display` is the sentence `hugeshm run` prints after
//! `error: ` or `warning: `.

use std::fmt;
use std::io;
use std::path::PathBuf;

use hugeshm_parse::elf::ElfInfo;
use hugeshm_parse::size::format_bytes;
use hugeshm_sys::SysError;

use super::{HostRefusal, LIBRARY_FILE, MIN_MIN_BYTES};
use crate::model::Placement;

/// Why `hugeshm run` does not start the server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunRefusal {
    /// No COMMAND, and not `--print-env` with `--target`.
    #[error(
        "no COMMAND: hugeshm run [OPTIONS] -- COMMAND [ARGS...] (or --print-env with --target)"
    )]
    NoCommand,
    /// `--min-size` below [`MIN_MIN_BYTES`].
    #[error(
        "--min-size {}: at least {} (smaller mappings are a server's own bookkeeping)",
        format_bytes(*.min_bytes),
        format_bytes(MIN_MIN_BYTES)
    )]
    MinSize {
        /// The size asked for.
        min_bytes: u64,
    },
    /// `--prefault=populate` with a placement.
    #[error(
        "--prefault=populate with --numa: MAP_POPULATE faults the pages inside mmap, before \
         mbind could place them; use --prefault (threads)"
    )]
    PopulateWithNuma,
    /// `--fallback thp` with `--policy only` (nothing falls back), or
    /// without a pre-fault (only blocks with pages can be collapsed).
    #[error(
        "--fallback thp collapses what a --policy try mapping placed on 4 KiB pages after its \
         pre-fault: give --policy try and --prefault"
    )]
    FallbackThp,
    /// COMMAND, a bare name, is in no directory of `PATH`.
    #[error("{}: not found in PATH", .command.display())]
    NotInPath {
        /// The name.
        command: PathBuf,
    },
    /// A file that could not be read (made canonical, its metadata).
    #[error("{}: {error}", .path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What the system said.
        error: io::Error,
    },
    /// An executable that could not be opened as a regular file.
    #[error("{0}")]
    Open(SysError),
    /// An executable that is neither ELF nor a script.
    #[error("{}: {message}", .path.display())]
    NotExecutable {
        /// The file.
        path: PathBuf,
        /// What its headers lack.
        message: String,
    },
    /// `--target` is not UTF-8.
    #[error("--target is not UTF-8")]
    TargetNotUtf8,
    /// `--target PATH` that cannot be made canonical.
    #[error("--target {target}: {error}")]
    TargetPath {
        /// The path given.
        target: String,
        /// What the system said.
        error: io::Error,
    },
    /// `--target PATH` whose canonical path is not UTF-8.
    #[error("--target: the path is not UTF-8")]
    TargetPathNotUtf8,
    /// `--target` empty, or a name over 255 bytes.
    #[error("--target: a file name or a path")]
    TargetName,
    /// COMMAND runs in secure-execution mode (the loader drops the
    /// environment).
    #[error(
        "{} is {why}: the loader runs it in secure-execution mode and ignores LD_PRELOAD",
        .path.display()
    )]
    SecureCommand {
        /// COMMAND's canonical path.
        path: PathBuf,
        /// What makes it secure.
        why: SecureExec,
    },
    /// COMMAND is a script and the target (no `--target`).
    #[error(
        "{} is a script (#!{interpreter}): name the server it starts with --target NAME|PATH",
        .path.display()
    )]
    ScriptCommand {
        /// COMMAND's canonical path.
        path: PathBuf,
        /// Its `#!` line.
        interpreter: String,
    },
    /// The target's executable runs in secure-execution mode.
    #[error("{role} {} is {why}: the loader ignores LD_PRELOAD for it", .path.display())]
    Secure {
        /// COMMAND or `--target`.
        role: FileRole,
        /// The executable.
        path: PathBuf,
        /// What makes it secure.
        why: SecureExec,
    },
    /// The target's executable is a script.
    #[error(
        "{role} {} is a script (#!{interpreter}): the target is the server's own executable",
        .path.display()
    )]
    Script {
        /// COMMAND or `--target`.
        role: FileRole,
        /// The executable.
        path: PathBuf,
        /// Its `#!` line.
        interpreter: String,
    },
    /// The target's executable is not 64-bit little-endian x86-64.
    #[error(
        "{role} {} is a {}{} ELF executable: libhugeshm-run.so is x86-64 Linux",
        .path.display(),
        if .elf.class64 { "64-bit " } else { "32-bit " },
        .elf.machine_name()
    )]
    Machine {
        /// COMMAND or `--target`.
        role: FileRole,
        /// The executable.
        path: PathBuf,
        /// Its headers.
        elf: ElfInfo,
    },
    /// The target's executable is statically linked.
    #[error(
        "{role} {} is statically linked: no loader runs to preload libhugeshm-run.so",
        .path.display()
    )]
    Static {
        /// COMMAND or `--target`.
        role: FileRole,
        /// The executable.
        path: PathBuf,
    },
    /// What the host cannot give ([`check_host`](super::check_host)).
    #[error("{}", host_refusal(.numa, .refusal))]
    Host {
        /// The placement asked for (`Default`: none).
        numa: Placement,
        /// What the host refuses.
        refusal: HostRefusal,
    },
    /// No library at any of the places looked at.
    #[error(
        "{} not found (looked at {}): install the hugeshm package, or give --library",
        LIBRARY_FILE,
        paths(.candidates)
    )]
    LibraryNotFound {
        /// Where it was looked for, in order.
        candidates: Vec<PathBuf>,
    },
    /// The library's path cannot stand in `LD_PRELOAD`.
    #[error(
        "{}: LD_PRELOAD cannot hold a path with ':', a space or a newline",
        .path.display()
    )]
    LibraryPath {
        /// Its canonical path.
        path: PathBuf,
    },
    /// Another user could replace the library.
    #[error("{0}: it could be replaced by another user")]
    LibraryReplaceable(Replaceable),
}

fn paths(p: &[PathBuf]) -> String {
    p.iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `--numa PLACEMENT: this host has N NUMA node(s): there is nothing to
/// place`.
fn one_node(numa: &Placement, nodes: usize) -> String {
    format!(
        "--numa {numa}: this host has {nodes} NUMA node{}: there is nothing to place",
        if nodes == 1 { "" } else { "s" }
    )
}

fn host_refusal(numa: &Placement, refusal: &HostRefusal) -> String {
    match refusal {
        HostRefusal::PageSize { page_size, offered } => format!(
            "--page-size {}: this kernel offers {} (/sys/kernel/mm/hugepages)",
            format_bytes(*page_size),
            if offered.is_empty() {
                "no huge pages".to_owned()
            } else {
                offered
                    .iter()
                    .map(|p| format_bytes(*p))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ),
        HostRefusal::TooFewNodes { nodes } => {
            format!("{} (--policy only)", one_node(numa, *nodes))
        }
        HostRefusal::NoSuchNode { node, nodes } => format!(
            "--numa {numa}: node {node} does not exist (nodes: {})",
            nodes
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// What `hugeshm run` does as asked, and says.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunWarning {
    /// Another user could replace the program run (COMMAND or the
    /// `--target` path): the server's binary is the admin's choice.
    Replaceable {
        /// The first file or directory that fails.
        replaceable: Replaceable,
        /// The effective uid the program is run as.
        uid: u32,
    },
    /// A placement on a host of fewer than two nodes under `try`: dropped.
    NumaIgnored {
        /// The placement asked for.
        numa: Placement,
        /// The host's nodes.
        nodes: usize,
    },
}

impl fmt::Display for RunWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunWarning::Replaceable { replaceable, uid } => write!(
                f,
                "{replaceable}: another user can replace the program run as uid {uid}; it is run \
                 as asked (the server's binary is your choice), but install it owned by root, not \
                 writable by group or others, in directories that are too"
            ),
            RunWarning::NumaIgnored { numa, nodes } => {
                write!(f, "{}; --numa is ignored", one_node(numa, *nodes))
            }
        }
    }
}

/// Which file of `hugeshm run` a check is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FileRole {
    /// COMMAND.
    Command,
    /// The `--target` path.
    Target,
    /// `libhugeshm-run.so`.
    Library,
}

impl fmt::Display for FileRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileRole::Command => "COMMAND",
            FileRole::Target => "--target",
            FileRole::Library => "the library",
        })
    }
}

/// What makes the loader ignore `LD_PRELOAD` (secure execution).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SecureExec {
    /// The set-user-ID bit.
    Setuid,
    /// The set-group-ID bit (with group execute).
    Setgid,
    /// File capabilities (`security.capability`).
    Capabilities,
}

impl fmt::Display for SecureExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SecureExec::Setuid => "setuid",
            SecureExec::Setgid => "setgid",
            SecureExec::Capabilities => "given file capabilities (security.capability)",
        })
    }
}

/// The first file or directory on a path that another user could replace.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Replaceable {
    /// Its path.
    pub path: PathBuf,
    /// The file itself (its role), a symbolic link or a directory above it.
    pub part: PathPart,
    /// Why others could replace it.
    pub exposure: Exposure,
}

/// Where on the path a [`Replaceable`] stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PathPart {
    /// The file itself.
    File(FileRole),
    /// A symbolic link on the way (of a path not made canonical).
    Link,
    /// A directory above it.
    Directory,
}

/// Why others could replace a file or directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Exposure {
    /// It belongs to this uid, neither root nor a trusted user.
    Owner(u32),
    /// Group or others may write to it (these mode bits; not a sticky
    /// directory).
    Writable(u32),
}

impl fmt::Display for Replaceable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let part = match self.part {
            PathPart::File(role) => role.to_string(),
            PathPart::Link => "a symbolic link on the way".to_owned(),
            PathPart::Directory => "a directory above it".to_owned(),
        };
        match self.exposure {
            Exposure::Owner(uid) => write!(
                f,
                "{} ({part}) belongs to uid {uid}, neither root nor you",
                self.path.display()
            ),
            Exposure::Writable(mode) => write!(
                f,
                "{} ({part}) is writable by group or others (mode {mode:04o}); chmod go-w it",
                self.path.display()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_and_warnings_read_as_hugeshm_run_says_them() {
        let numa = Placement::Interleave(Vec::new());
        let host = |refusal| RunRefusal::Host {
            numa: numa.clone(),
            refusal,
        };
        assert_eq!(
            host(HostRefusal::PageSize {
                page_size: 16 << 20,
                offered: vec![2 << 20, 1 << 30]
            })
            .to_string(),
            "--page-size 16 MiB: this kernel offers 2 MiB, 1 GiB (/sys/kernel/mm/hugepages)"
        );
        assert_eq!(
            host(HostRefusal::TooFewNodes { nodes: 1 }).to_string(),
            "--numa interleave: this host has 1 NUMA node: there is nothing to place \
             (--policy only)"
        );
        assert_eq!(
            RunWarning::NumaIgnored { numa, nodes: 0 }.to_string(),
            "--numa interleave: this host has 0 NUMA nodes: there is nothing to place; \
             --numa is ignored"
        );
        let open_dir = Replaceable {
            path: PathBuf::from("/srv/open"),
            part: PathPart::Directory,
            exposure: Exposure::Writable(0o777),
        };
        assert_eq!(
            RunRefusal::LibraryReplaceable(open_dir).to_string(),
            "/srv/open (a directory above it) is writable by group or others (mode 0777); \
             chmod go-w it: it could be replaced by another user"
        );
        let theirs = Replaceable {
            path: PathBuf::from("/home/u/postgres"),
            part: PathPart::File(FileRole::Target),
            exposure: Exposure::Owner(1000),
        };
        assert!(RunWarning::Replaceable {
            replaceable: theirs,
            uid: 0
        }
        .to_string()
        .starts_with(
            "/home/u/postgres (--target) belongs to uid 1000, neither root nor you: another \
             user can replace the program run as uid 0;"
        ));
        assert_eq!(
            RunRefusal::MinSize { min_bytes: 1 << 20 }.to_string(),
            "--min-size 1 MiB: at least 2 MiB (smaller mappings are a server's own bookkeeping)"
        );
    }
}
