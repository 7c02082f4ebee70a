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

/// Formats a size in bytes the way the kernel names page sizes: `2MiB`,
/// `1GiB`, `64KiB`, or plain bytes when not a whole number of KiB.
pub fn format_size(bytes: u64) -> String {
    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    if bytes >= GIB && bytes % GIB == 0 {
        format!("{}GiB", bytes / GIB)
    } else if bytes >= MIB && bytes % MIB == 0 {
        format!("{}MiB", bytes / MIB)
    } else if bytes >= KIB && bytes % KIB == 0 {
        format!("{}KiB", bytes / KIB)
    } else {
        format!("{bytes}B")
    }
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
    use crate::ShmFlags;

    #[test]
    fn format_size_names() {
        assert_eq!(format_size(2 << 20), "2MiB");
        assert_eq!(format_size(1 << 30), "1GiB");
        assert_eq!(format_size(64 << 10), "64KiB");
        assert_eq!(format_size(100), "100B");
        assert_eq!(
            ShmFlags::create_new(Some(1 << 30)).to_string(),
            "IPC_CREAT|IPC_EXCL|SHM_HUGETLB|1GiB|0600"
        );
    }
}
