//! Byte sizes as the kernel and admins write them (`2M`, `1G`, `2048kB`,
//! `hugepages-2048kB`), and as hugeshm prints them.
//!
//! The workspace's size formatters are all here, three forms, each for
//! its place (write no fourth; pick one of these):
//!
//! - [`format_bytes`]: human text (reports, messages, tables), rounded to
//!   one decimal of the largest unit: `2 MiB`, `1.5 GiB`, `4.0 KiB`.
//! - [`format_exact`]: a system call's arguments in an error, as the
//!   kernel names page sizes (`mmap(len=1, MAP_PRIVATE|MAP_ANONYMOUS|
//!   MAP_HUGETLB|2MiB)`): exact, no space: `2MiB`, `1536MiB`, `4097B`.
//! - [`page_size_short`]: flags and kernel parameters (`--page-size 2M`,
//!   `hugepagesz=1G`): exact, one letter: `2M`, `1536M`, `4k`.
//!
//! The hugetlb cgroup's file names (`hugetlb.2MB.max`) are written by
//! `hugetlb_size_name` in the `hugetlb_cgroup` module, beside their parser.

/// 4 KiB, the base page size on x86-64 and most other architectures.
pub const BASE_PAGE: u64 = 4096;
/// 1 KiB.
pub const KIB: u64 = 1024;
/// 1 MiB.
pub const MIB: u64 = 1024 * KIB;
/// 1 GiB.
pub const GIB: u64 = 1024 * MIB;

/// Parses a size such as `4096`, `4k`, `2M`, `2m`, `1G`, `1GiB`, `2048kB`, `1.5G`.
///
/// Suffixes are binary (k = 1024). Returns `None` for anything else, including a
/// value that overflows 64 bits.
///
/// ```
/// use hugeshm_parse::size::{parse_size, MIB, GIB};
/// assert_eq!(parse_size("2M"), Some(2 * MIB));
/// assert_eq!(parse_size("1GiB"), Some(GIB));
/// assert_eq!(parse_size("2048kB"), Some(2 * MIB));
/// assert_eq!(parse_size("1.5g"), Some(3 * GIB / 2));
/// assert_eq!(parse_size("lots"), None);
/// ```
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    if num.is_empty() {
        return None;
    }
    let mult = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => KIB,
        "m" | "mb" | "mib" => MIB,
        "g" | "gb" | "gib" => GIB,
        "t" | "tb" | "tib" => 1024 * GIB,
        _ => return None,
    };
    if let Some((int, frac)) = num.split_once('.') {
        if int.is_empty() && frac.is_empty() {
            return None;
        }
        let int: u64 = if int.is_empty() { 0 } else { int.parse().ok()? };
        if frac.contains('.') || frac.len() > 9 {
            return None;
        }
        let scale = 10u64.pow(frac.len() as u32);
        let frac_v: u64 = if frac.is_empty() {
            0
        } else {
            frac.parse().ok()?
        };
        let whole = int.checked_mul(mult)?;
        let part = (frac_v as u128 * mult as u128 / scale as u128) as u64;
        whole.checked_add(part)
    } else {
        num.parse::<u64>().ok()?.checked_mul(mult)
    }
}

/// The page size named by a sysfs directory such as `hugepages-2048kB`.
///
/// ```
/// assert_eq!(hugeshm_parse::size::hugepages_dir_size("hugepages-1048576kB"), Some(1 << 30));
/// assert_eq!(hugeshm_parse::size::hugepages_dir_size("hugepages-x"), None);
/// ```
pub fn hugepages_dir_size(name: &str) -> Option<u64> {
    let kb = name.strip_prefix("hugepages-")?.strip_suffix("kB")?;
    kb.parse::<u64>().ok()?.checked_mul(KIB)
}

/// Human form with binary units: `0 B`, `4 KiB`, `2 MiB`, `1.5 GiB`, `10.3 GiB`.
///
/// ```
/// use hugeshm_parse::size::format_bytes;
/// assert_eq!(format_bytes(2 * 1024 * 1024), "2 MiB");
/// assert_eq!(format_bytes(3 << 29), "1.5 GiB");
/// assert_eq!(format_bytes(512), "512 B");
/// ```
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [(&str, u64); 5] = [
        ("TiB", 1 << 40),
        ("GiB", GIB),
        ("MiB", MIB),
        ("KiB", KIB),
        ("B", 1),
    ];
    for (name, unit) in UNITS {
        if bytes >= unit {
            if bytes % unit == 0 {
                return format!("{} {}", bytes / unit, name);
            }
            let v = bytes as f64 / unit as f64;
            return if v >= 100.0 {
                format!("{v:.0} {name}")
            } else {
                format!("{v:.1} {name}")
            };
        }
    }
    "0 B".to_string()
}

/// The units [`format_exact`] and [`page_size_short`] use, largest first.
const WHOLE_UNITS: [u64; 3] = [GIB, MIB, KIB];

/// `bytes` as a whole number of the largest of [`WHOLE_UNITS`] it is a
/// non-zero multiple of, with the unit's index.
fn whole_unit(bytes: u64) -> Option<(u64, usize)> {
    let i = WHOLE_UNITS
        .iter()
        .position(|&u| bytes >= u && bytes % u == 0)?;
    Some((bytes / WHOLE_UNITS[i], i))
}

/// Exact, with binary units and no space, the way the kernel names page
/// sizes: `2MiB`, `1GiB`, `64KiB`, `1536MiB`, or plain bytes (`4097B`)
/// when not a whole number of KiB. What hugeshm-sys writes into the
/// system calls its errors name.
///
/// ```
/// use hugeshm_parse::size::format_exact;
/// assert_eq!(format_exact(2 << 20), "2MiB");
/// assert_eq!(format_exact(3 << 29), "1536MiB");
/// assert_eq!(format_exact(100), "100B");
/// ```
pub fn format_exact(bytes: u64) -> String {
    match whole_unit(bytes) {
        Some((n, i)) => format!("{n}{}", ["GiB", "MiB", "KiB"][i]),
        None => format!("{bytes}B"),
    }
}

/// Short page size label as used in flags and tables: `4k`, `2M`, `1G`
/// (exact: `1536M`; plain bytes when not a whole number of KiB).
///
/// ```
/// use hugeshm_parse::size::page_size_short;
/// assert_eq!(page_size_short(2 << 20), "2M");
/// assert_eq!(page_size_short(4096), "4k");
/// ```
pub fn page_size_short(bytes: u64) -> String {
    match whole_unit(bytes) {
        Some((n, i)) => format!("{n}{}", ["G", "M", "k"][i]),
        // Zero is a whole number of KiB too.
        None if bytes == 0 => "0k".to_owned(),
        None => bytes.to_string(),
    }
}

/// Rounds `bytes` up to a multiple of `page` (`None` on overflow or page 0).
pub fn round_up(bytes: u64, page: u64) -> Option<u64> {
    if page == 0 {
        return None;
    }
    bytes.div_ceil(page).checked_mul(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("4k"), Some(4096));
        assert_eq!(parse_size("4K"), Some(4096));
        assert_eq!(parse_size(" 2m "), Some(2 * MIB));
        assert_eq!(parse_size("10G"), Some(10 * GIB));
        assert_eq!(parse_size("0.5G"), Some(GIB / 2));
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("G"), None);
        assert_eq!(parse_size("."), None);
        assert_eq!(parse_size("1.2.3G"), None);
        assert_eq!(parse_size("-1G"), None);
        assert_eq!(parse_size("99999999999999999999G"), None);
        assert_eq!(parse_size("18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_size("16777216T"), None);
    }

    #[test]
    fn formatting() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(GIB), "1 GiB");
        assert_eq!(format_bytes(10 * GIB + GIB / 3), "10.3 GiB");
        assert_eq!(format_bytes(u64::MAX), "16777216 TiB");
        assert_eq!(page_size_short(4096), "4k");
        assert_eq!(page_size_short(2 * MIB), "2M");
        assert_eq!(page_size_short(GIB), "1G");
        assert_eq!(page_size_short(3 * GIB / 2), "1536M");
        assert_eq!(page_size_short(0), "0k");
        assert_eq!(page_size_short(4097), "4097");
        assert_eq!(format_exact(2 * MIB), "2MiB");
        assert_eq!(format_exact(GIB), "1GiB");
        assert_eq!(format_exact(64 * KIB), "64KiB");
        assert_eq!(format_exact(100), "100B");
        assert_eq!(format_exact(0), "0B");
        assert_eq!(format_exact(1 << 40), "1024GiB");
        assert_eq!(format_exact(3 * GIB / 2), "1536MiB");
        assert_eq!(round_up(1, 4096), Some(4096));
        assert_eq!(round_up(8192, 4096), Some(8192));
        assert_eq!(round_up(u64::MAX, 4096), None);
        assert_eq!(round_up(5, 0), None);
    }
}
