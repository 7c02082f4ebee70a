//! The system's user database through NSS (`getpwnam_r`, `getpwuid_r`):
//! `/etc/passwd`, and LDAP, SSSD or systemd-userdb users alike, as `id`
//! and `ls -l` see them. (Under a captured fixture root, read its
//! `etc/passwd` with `hugeshm_parse::passwd` instead.)

use crate::SysError;
use std::ffi::{CStr, CString};

/// One user of the database.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct User {
    /// The login name.
    pub name: String,
    /// The user id.
    pub uid: u32,
    /// The primary group id.
    pub gid: u32,
}

/// The most buffer a lookup grows to (an entry with a long GECOS field or
/// many members; glibc asks for 1 KiB at first).
const MAX_BUFFER: usize = 1 << 20;

/// Runs `lookup` (a `getpw*_r` call over the given entry and buffer) with
/// a buffer grown while it says `ERANGE`: the entry, `None` when there is
/// none.
fn lookup_with(
    call: &str,
    lookup: impl Fn(&mut libc::passwd, &mut [libc::c_char], &mut *mut libc::passwd) -> libc::c_int,
) -> Result<Option<User>, SysError> {
    let mut buf: Vec<libc::c_char> = vec![0; 1024];
    loop {
        // SAFETY: passwd is plain old data (integers and pointers); an
        // all-zero value is valid and the call overwrites it.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = lookup(&mut pwd, &mut buf, &mut result);
        if rc == libc::ERANGE && buf.len() < MAX_BUFFER {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        // 0 with no result, and the "not found" errnos some NSS modules
        // give, mean no such user.
        if result.is_null() {
            return match rc {
                0 | libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM => Ok(None),
                errno => Err(SysError::Os {
                    call: call.to_owned(),
                    errno,
                }),
            };
        }
        // SAFETY: on success pw_name points to a NUL-terminated string in
        // `buf`, which lives until the end of this function.
        let name = unsafe { CStr::from_ptr(pwd.pw_name) };
        return Ok(Some(User {
            name: name.to_string_lossy().into_owned(),
            uid: pwd.pw_uid,
            gid: pwd.pw_gid,
        }));
    }
}

/// The user named `name`, `None` when the database has none (a name with
/// a NUL byte has none).
pub fn user_by_name(name: &str) -> Result<Option<User>, SysError> {
    let Ok(cname) = CString::new(name) else {
        return Ok(None);
    };
    lookup_with(&format!("getpwnam_r({name:?})"), |pwd, buf, result| {
        // SAFETY: cname is NUL-terminated; pwd, buf (of buf.len() bytes)
        // and result are live and exclusively borrowed for the call.
        unsafe { libc::getpwnam_r(cname.as_ptr(), pwd, buf.as_mut_ptr(), buf.len(), result) }
    })
}

/// The user with id `uid`, `None` when the database has none.
pub fn user_by_uid(uid: u32) -> Result<Option<User>, SysError> {
    lookup_with(&format!("getpwuid_r({uid})"), |pwd, buf, result| {
        // SAFETY: pwd, buf (of buf.len() bytes) and result are live and
        // exclusively borrowed for the call.
        unsafe { libc::getpwuid_r(uid, pwd, buf.as_mut_ptr(), buf.len(), result) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_both_ways_and_nobody_else() {
        let root = user_by_uid(0).unwrap().expect("uid 0 has a name");
        assert_eq!((root.uid, root.gid), (0, 0));
        assert_eq!(user_by_name(&root.name).unwrap(), Some(root));
        assert_eq!(user_by_name("no-such-user-hugeshm").unwrap(), None);
        assert_eq!(user_by_name("a\0b").unwrap(), None);
        assert_eq!(user_by_name("").unwrap(), None);
        assert_eq!(user_by_uid(4_000_000_000).unwrap(), None);
    }
}
