//! Page sizes: the base page, huge page sizes as the kernel's flag bits
//! take them, lengths rounded up to a page.

use crate::SysError;

/// Shift of the huge page size (as log2) in `MAP_HUGETLB`, `SHM_HUGETLB` and
/// `MFD_HUGETLB` flags (`MAP_HUGE_SHIFT` = `SHM_HUGE_SHIFT` = `MFD_HUGE_SHIFT`).
pub const HUGE_SHIFT: u32 = 26;

/// The base (smallest) page size of the system, e.g. 4096.
pub fn base_page_size() -> usize {
    rustix::param::page_size()
}

/// Validates a huge page size and returns its log2 (16..=63).
pub(crate) fn huge_page_log2(call: &str, size: u64) -> Result<u32, SysError> {
    if !size.is_power_of_two() {
        return Err(SysError::invalid(
            call.to_owned(),
            format!("huge page size {size} is not a power of two"),
        ));
    }
    let log2 = size.trailing_zeros();
    if !(16..=63).contains(&log2) {
        return Err(SysError::invalid(
            call.to_owned(),
            format!("huge page size {size} is outside 64KiB..2^63"),
        ));
    }
    Ok(log2)
}

pub(crate) fn round_up(len: usize, page: usize) -> Option<usize> {
    debug_assert!(page > 0);
    len.checked_add(page - 1).map(|v| v / page * page)
}

pub(crate) fn huge_usize(call: &str, size: u64) -> Result<usize, SysError> {
    usize::try_from(size).map_err(|_| {
        SysError::invalid(
            call.to_owned(),
            format!("huge page size {size} does not fit in usize"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A huge page size is a power of two from 64 KiB up, named in the
    /// error with the call; lengths round up to a page, or overflow.
    #[test]
    fn huge_page_sizes_are_checked() {
        assert_eq!(huge_page_log2("x", 2 << 20).unwrap(), 21);
        assert_eq!(huge_page_log2("x", 1 << 30).unwrap(), 30);
        assert_eq!(huge_page_log2("x", 64 << 10).unwrap(), 16);
        let err = huge_page_log2("shmget(..)", 21).unwrap_err();
        assert_eq!(
            err.to_string(),
            "shmget(..): invalid argument: huge page size 21 is not a power of two"
        );
        let err = huge_page_log2("x", 32 << 10).unwrap_err();
        assert!(err.to_string().contains("outside 64KiB..2^63"), "{err}");
        assert_eq!(round_up(1, 4096), Some(4096));
        assert_eq!(round_up(4096, 4096), Some(4096));
        assert_eq!(round_up(usize::MAX, 4096), None);
    }
}
