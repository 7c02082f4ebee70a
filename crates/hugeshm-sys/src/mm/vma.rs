//! One mapping of this process, read back from the kernel: what an
//! attachment the kernel sized really covers (a System V segment maps its
//! size rounded up to its page size, which nothing else tells).

use std::os::fd::AsFd;

use crate::procmap::{procmap_query, VmaQuery};

/// Start, end and page size (`KernelPageSize`: the huge page size of a
/// hugetlb mapping) of this process's mapping that starts at or covers
/// `addr`: through `PROCMAP_QUERY` (Linux 6.11), else `/proc/self/smaps`.
/// The error says what could not be read.
pub(crate) fn of_own(addr: u64) -> Result<(u64, u64, u64), String> {
    let maps = std::fs::File::open("/proc/self/maps")
        .map_err(|e| format!("cannot read the mapping at {addr:#x}: /proc/self/maps: {e}"))?;
    let q = VmaQuery {
        addr,
        ..VmaQuery::default()
    };
    match procmap_query(maps.as_fd(), q) {
        Ok(Some(v)) => Ok((v.start, v.end, v.page_size)),
        Ok(None) => Err(format!("no mapping at {addr:#x} in /proc/self/maps")),
        Err(e) if matches!(e.errno(), Some(libc::ENOTTY) | Some(libc::EINVAL)) => from_smaps(addr),
        Err(e) => Err(e.to_string()),
    }
}

/// [`of_own`] from `/proc/self/smaps` (kernels before 6.11).
fn from_smaps(addr: u64) -> Result<(u64, u64, u64), String> {
    let text = std::fs::read_to_string("/proc/self/smaps")
        .map_err(|e| format!("cannot read the mapping at {addr:#x}: /proc/self/smaps: {e}"))?;
    extent_in_smaps(&text, addr)
}

/// The mapping covering `addr` in smaps text: start, end, `KernelPageSize`.
fn extent_in_smaps(text: &str, addr: u64) -> Result<(u64, u64, u64), String> {
    let entries = hugeshm_parse::smaps::parse(text).map_err(|e| e.to_string())?;
    let e = entries
        .iter()
        .find(|e| e.map.start <= addr && addr < e.map.end)
        .ok_or_else(|| format!("no mapping at {addr:#x} in /proc/self/smaps"))?;
    let page = e.kernel_page_size_bytes.ok_or_else(|| {
        format!("no KernelPageSize for the mapping at {addr:#x} in /proc/self/smaps")
    })?;
    Ok((e.map.start, e.map.end, page))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smaps_text_gives_extent_and_page_size() {
        let text = "\
7f0000000000-7f0080000000 rw-s 00000000 00:10 5                          /SYSV7a5e0001 (deleted)
Size:            2097152 kB
KernelPageSize:  1048576 kB
MMUPageSize:     1048576 kB
Rss:                   0 kB
VmFlags: rd wr sh mr mw me ms de ht
7f0080000000-7f0080001000 rw-p 00000000 00:00 0
Size:                  4 kB
KernelPageSize:        4 kB
MMUPageSize:           4 kB
Rss:                   4 kB
VmFlags: rd wr mr mw me ac
";
        assert_eq!(
            extent_in_smaps(text, 0x7f00_0000_0000),
            Ok((0x7f00_0000_0000, 0x7f00_8000_0000, 1 << 30))
        );
        assert_eq!(
            extent_in_smaps(text, 0x7f00_8000_0000),
            Ok((0x7f00_8000_0000, 0x7f00_8000_1000, 4096))
        );
        assert!(extent_in_smaps(text, 0x1000)
            .unwrap_err()
            .contains("no mapping"));
    }

    #[test]
    fn own_mappings_read_back_by_either_way() {
        let m = crate::MapOptions::new(3 * 4096)
            .shared()
            .map_anon()
            .unwrap();
        let want = (m.addr() as u64, (m.addr() + m.len()) as u64, 4096);
        let (s, e, p) = of_own(m.addr() as u64).unwrap();
        assert!(s <= want.0 && e >= want.1 && p == 4096, "{s:#x}-{e:#x} {p}");
        let (s, e, p) = from_smaps(m.addr() as u64).unwrap();
        assert!(s <= want.0 && e >= want.1 && p == 4096, "{s:#x}-{e:#x} {p}");
    }
}
