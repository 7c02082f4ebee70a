//! When `hugeshm run` changed nothing in the target, it says so once, so
//! that an admin is not left believing the server is on huge pages: at the
//! first `mmap` of the target after [`QUIET_SECONDS`] from its start, or at
//! its exit, whichever comes first.
//!
//! Servers map their big shared memory while they start (PostgreSQL,
//! MariaDB's buffer pool and the JVM's heap in their first second, before
//! recovery or the first request), so a target that made no qualifying
//! mapping in its first 30 s will not make one: the line then comes with
//! the server's next `mmap`, from a thread that maps anyway (a new thread
//! stack is not one: glibc maps those itself). A target that maps nothing
//! more says it at its exit, if it ran for [`QUIET_MIN_LIFE`] at least (a
//! one-shot run such as `postgres -V`, which `pg_ctl` makes before each
//! start, says nothing). No timer thread is started in the server.

use hugeshm_parse::size::format_bytes;

use super::Settings;

/// Seconds after the target's start from which its first `mmap` says that
/// nothing was placed.
pub const QUIET_SECONDS: u64 = 30;

/// A target that exits sooner than this (seconds) says nothing at its
/// exit: it was a one-shot run of the server's program (`postgres -V`,
/// which `pg_ctl` runs before each start; `java -version`), not a server.
pub const QUIET_MIN_LIFE: u64 = 1;

/// The largest anonymous read-write `mmap` of the target that did not
/// qualify, for the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Missed {
    /// Its length.
    pub len: usize,
    /// Its flags.
    pub flags: i32,
}

/// The line: `hugeshm run: pid 4242 (mariadbd) made no mapping that
/// qualifies (…) in its first 30 s: nothing was placed; …`. `exited`:
/// said at the target's exit.
pub fn nothing_placed(s: &Settings, exe: &str, exited: bool, missed: Missed) -> String {
    let min = format_bytes(s.min_bytes);
    let private = if s.private { ", a private one" } else { "" };
    let when = if exited {
        "by its exit".to_owned()
    } else {
        format!("in its first {QUIET_SECONDS} s")
    };
    let mut line = format!(
        "hugeshm run: pid {} ({exe}) made no mapping that qualifies (anonymous, read-write, \
         at least {min} (--min-size): a shared mmap, a SysV segment{private}, or such a \
         MAP_FIXED commit inside a PROT_NONE reservation of its own) {when}: nothing was placed",
        std::process::id()
    );
    if missed.len > 0 {
        let shared = missed.flags & 0x0f == libc::MAP_SHARED;
        let fixed = missed.flags & libc::MAP_FIXED != 0;
        let why = if (missed.len as u64) < s.min_bytes {
            "smaller than --min-size".to_owned()
        } else if !shared && !s.private {
            "private: --private places it".to_owned()
        } else if fixed {
            "MAP_FIXED outside a PROT_NONE reservation of its own".to_owned()
        } else {
            format!("flags {:#x}, which run leaves as they are", missed.flags)
        };
        line.push_str(&format!(
            "; its largest anonymous read-write mmap: {}, {} ({why})",
            format_bytes(missed.len as u64),
            if shared { "MAP_SHARED" } else { "MAP_PRIVATE" },
        ));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::Target;

    #[test]
    fn the_line_says_what_would_have_qualified_and_the_nearest_miss() {
        let s = Settings::new(Target::Name("mariadbd".into()));
        let missed = Missed {
            len: 256 << 20,
            flags: libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
        };
        let line = nothing_placed(&s, "mariadbd", false, missed);
        assert!(
            line.contains("(mariadbd) made no mapping that qualifies"),
            "{line}"
        );
        assert!(
            line.contains("in its first 30 s: nothing was placed"),
            "{line}"
        );
        assert!(
            line.ends_with("256 MiB, MAP_PRIVATE (private: --private places it)"),
            "{line}"
        );
        let line = nothing_placed(&s, "x", true, Missed::default());
        assert!(line.ends_with("by its exit: nothing was placed"), "{line}");
    }
}
