//! hugetlbfs: the page size of the file system behind a descriptor.

use std::os::fd::BorrowedFd;

/// `HUGETLBFS_MAGIC`: `statfs.f_type` of hugetlbfs (memfd `MFD_HUGETLB`
/// files live there too).
const HUGETLBFS_MAGIC: u64 = 0x9584_58f6;

/// Returns the page size of the filesystem behind `fd` when it is hugetlbfs
/// (memfds created with a huge page size included), `None` otherwise.
pub fn hugetlbfs_page_size(fd: BorrowedFd<'_>) -> Option<usize> {
    let st = rustix::fs::fstatfs(fd).ok()?;
    #[allow(clippy::unnecessary_cast)]
    let f_type = st.f_type as u64 & 0xffff_ffff;
    if f_type == HUGETLBFS_MAGIC {
        #[allow(clippy::unnecessary_cast)]
        usize::try_from(st.f_bsize as i64).ok().filter(|b| *b > 0)
    } else {
        None
    }
}
