//! How a region's name maps to a kernel object.
//!
//! * `sysv`: the key is [`sysv_key`]`(name)`, the 32-bit FNV-1a hash of
//!   `hugeshm.<name>` (never 0, which is `IPC_PRIVATE`). Nothing is stored
//!   anywhere else: any process computes the same key. Two names may hash to
//!   the same key, and any program may use any key: the region's
//!   [header](crate::header) carries its name, so attach, create and remove
//!   recognise a foreign segment or another name's region under the key and
//!   refuse it ([`RegionError::NotOurs`]),
//!   never trusting or removing it.
//! * `hugetlbfs`: the file `<mount>/hugeshm.<name>` on a hugetlbfs mount of
//!   the region's page size (found in `/proc/mounts`, or the directory given
//!   to the builder). A `try` fall-back to base pages puts the file in
//!   `/dev/shm` instead.
//! * `posix`: the file `/dev/shm/hugeshm.<name>` (what `shm_open("hugeshm.<name>")`
//!   opens), or `<directory>/hugeshm.<name>` when the builder names a tmpfs
//!   directory.
//! * `memfd`: the memfd is called `hugeshm.<name>` (visible in
//!   `/proc/PID/fd` and `/proc/PID/maps` as `/memfd:hugeshm.<name>`); its
//!   creator publishes the record `/dev/shm/hugeshm-memfd.<name>` (pid,
//!   descriptor, device, inode, generation) through which other processes
//!   open it as `/proc/PID/fd/N` (see [`memfd_record`](crate::memfd_record)).
//!   It lives while some process holds it.
//! * `anon`: the name is only a label; the memory is shared with children
//!   created by `fork` after the region.

use crate::error::RegionError;
pub(crate) use crate::model::{object_file_name, DEFAULT_POSIX_DIR, OBJECT_PREFIX};

/// Longest accepted region name.
pub const MAX_NAME_LEN: usize = 200;

/// Checks a region name: 1 to [`MAX_NAME_LEN`] characters out of
/// `A-Z a-z 0-9 . _ -`, not starting with `.`.
pub fn validate_name(name: &str) -> Result<(), RegionError> {
    let bad = |reason: &str| RegionError::InvalidName {
        name: name.to_owned(),
        reason: reason.to_owned(),
    };
    if name.is_empty() {
        return Err(bad("empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(bad(&format!("longer than {MAX_NAME_LEN} bytes")));
    }
    if name.starts_with('.') {
        return Err(bad("starts with '.'"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(bad(&format!(
            "character {c:?} not allowed (use A-Z a-z 0-9 . _ -)"
        )));
    }
    Ok(())
}

/// The System V key of a named region: 32-bit FNV-1a of `hugeshm.<name>`,
/// with 0 (`IPC_PRIVATE`) mapped to 1.
pub fn sysv_key(name: &str) -> i32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in OBJECT_PREFIX.bytes().chain(name.bytes()) {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    if h == 0 {
        h = 1;
    }
    h as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["db", "sga-0", "a.b_c", "X9"] {
            validate_name(ok).unwrap();
        }
        for bad in ["", ".hidden", "a/b", "a b", "ü", &"x".repeat(201)] {
            let e = validate_name(bad).unwrap_err();
            assert!(e.to_string().contains("invalid region name"), "{e}");
        }
        assert_eq!(object_file_name("sga"), "hugeshm.sga");
    }

    #[test]
    fn keys_are_stable_and_nonzero() {
        // FNV-1a of "hugeshm.sga": fixed forever (other processes and
        // versions must compute the same key).
        assert_eq!(sysv_key("sga") as u32, 0xf2ce_9693);
        assert_ne!(sysv_key("a"), sysv_key("b"));
        assert_ne!(sysv_key("x"), 0);
    }
}
