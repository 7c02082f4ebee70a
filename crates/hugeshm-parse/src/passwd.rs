//! `/etc/passwd` lines: login names and uids, both ways.
//!
//! Only the first three fields count (`name:password:uid:...`); a line with
//! fewer, a comment or a uid that is not a number is passed over, so a
//! malformed line never hides the well-formed ones after it.

/// `(name, uid)` of every well-formed line, in file order.
pub fn entries(text: &str) -> impl Iterator<Item = (&str, u32)> {
    text.lines().filter_map(|l| {
        if l.starts_with('#') {
            return None;
        }
        let mut f = l.split(':');
        let name = f.next().filter(|n| !n.is_empty())?;
        let _password = f.next()?;
        let uid = f.next()?.parse().ok()?;
        Some((name, uid))
    })
}

/// The first login name with this uid.
pub fn name_of(text: &str, uid: u32) -> Option<&str> {
    entries(text).find(|(_, u)| *u == uid).map(|(n, _)| n)
}

/// The login name of this uid where only one has it (a second name for
/// the same uid, as some hosts give a service account, would not match a
/// limits.conf line of the first).
pub fn only_name_of(text: &str, uid: u32) -> Option<&str> {
    let mut names = entries(text).filter(|(_, u)| *u == uid).map(|(n, _)| n);
    let first = names.next()?;
    names.next().is_none().then_some(first)
}

/// The uid of this login name.
pub fn uid_of(text: &str, name: &str) -> Option<u32> {
    entries(text).find(|(n, _)| *n == name).map(|(_, u)| u)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n\
        # a comment:x:5\n\
        broken line\n\
        bad:x:notanumber:0::/:/bin/false\n\
        postgres:x:105:110:PostgreSQL administrator:/var/lib/postgresql:/bin/bash\n\
        alias:x:105:110::/:/bin/false\n\
        oracle:x:54321:54321::/home/oracle:/bin/bash";

    #[test]
    fn both_ways() {
        assert_eq!(name_of(PASSWD, 0), Some("root"));
        assert_eq!(
            name_of(PASSWD, 105),
            Some("postgres"),
            "the first name wins"
        );
        assert_eq!(
            name_of(PASSWD, 54321),
            Some("oracle"),
            "no newline at the end"
        );
        assert_eq!(name_of(PASSWD, 7), None);
        assert_eq!(only_name_of(PASSWD, 105), None, "two names");
        assert_eq!(only_name_of(PASSWD, 54321), Some("oracle"));
        assert_eq!(only_name_of(PASSWD, 7), None);
        assert_eq!(uid_of(PASSWD, "oracle"), Some(54321));
        assert_eq!(uid_of(PASSWD, "alias"), Some(105));
        assert_eq!(uid_of(PASSWD, "bad"), None, "its uid is no number");
        assert_eq!(uid_of(PASSWD, "broken line"), None);
        assert_eq!(uid_of(PASSWD, "# a comment"), None);
        assert_eq!(uid_of("", "root"), None);
    }
}
