//! Words inside the shell commands a fix prints. A name or a path in a fix
//! may come from anyone (a file a user left in /dev/shm, a cgroup a
//! container made): [`quote`] makes it one shell word that stands for
//! itself, so that a command copied from a fix cannot run anything else.

use std::borrow::Cow;

/// Whether `c` means nothing to a POSIX shell, anywhere in a word.
fn plain(c: char) -> bool {
    c.is_ascii_alphanumeric()
        || matches!(c, '_' | '@' | '%' | '+' | '=' | ':' | ',' | '.' | '/' | '-')
}

/// `s` as one shell word: as it is when every character is plain (so
/// ordinary names and paths read as before), else in single quotes, each
/// `'` in it written `'\''`.
pub fn quote(s: &str) -> Cow<'_, str> {
    if !s.is_empty() && s.chars().all(plain) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(format!("'{}'", s.replace('\'', r"'\''")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_words_stay_and_the_rest_is_quoted() {
        assert_eq!(quote("sga-0.db_1"), "sga-0.db_1");
        assert_eq!(
            quote("/sys/fs/cgroup/db/hugetlb.2MB.max"),
            "/sys/fs/cgroup/db/hugetlb.2MB.max"
        );
        assert_eq!(quote(""), "''");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("x'; rm -rf /"), r"'x'\''; rm -rf /'");
        assert_eq!(quote("$(id)`id`*?~"), "'$(id)`id`*?~'");
        assert_eq!(quote("-rf"), "-rf");
    }

    /// A shell given `printf %s WORD` prints the text back byte for byte:
    /// one argument, nothing run, nothing expanded.
    #[test]
    fn a_shell_reads_a_quoted_word_back_whole() {
        for s in [
            "x'; touch /tmp/hugeshm-pwned; echo '",
            "a b\tc\nd",
            "$(id) `id` $HOME ~ * ? [a] {a,b} \\ \" ' ;&|<>!#",
            "\x1b]0;PWNED\x07",
            "'",
            "''",
        ] {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf %s {}", quote(s)))
                .output()
                .unwrap();
            assert!(out.status.success(), "{s:?}");
            assert_eq!(String::from_utf8_lossy(&out.stdout), s, "{s:?}");
        }
    }
}
