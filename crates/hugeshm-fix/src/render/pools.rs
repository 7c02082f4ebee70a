//! The huge page pools: set one (host-wide or on a node), set several
//! nodes', retry a refusal, a size the kernel lacks, demote free pages to
//! a smaller size, reserve at boot.

use crate::short_size;

/// The command that sets the pool of `page_size_bytes` pages to `pages`:
/// `sysctl -w vm.nr_hugepages=N` for the default size, the sysfs file of
/// the size otherwise, the per-node sysfs file when `node` is given. The
/// one place in hugeshm that spells a pool resize.
pub fn pool_command(
    page_size_bytes: u64,
    pages: u64,
    default_size: bool,
    node: Option<u32>,
) -> String {
    match node {
        None if default_size => format!("sysctl -w vm.nr_hugepages={pages}"),
        _ => format!(
            "echo {pages} > {}",
            nr_hugepages_path(page_size_bytes, node)
        ),
    }
}

/// The sysfs file that holds the pool of one page size, host-wide or on a
/// NUMA node.
pub fn nr_hugepages_path(page_size_bytes: u64, node: Option<u32>) -> String {
    let kb = page_size_bytes / 1024;
    match node {
        Some(n) => {
            format!("/sys/devices/system/node/node{n}/hugepages/hugepages-{kb}kB/nr_hugepages")
        }
        None => format!("/sys/kernel/mm/hugepages/hugepages-{kb}kB/nr_hugepages"),
    }
}

/// [`Fix::SetNodePools`](crate::Fix::SetNodePools): one sysfs write per node.
pub(super) fn node_pools(page_size_bytes: u64, pools: &[(u32, u64)]) -> String {
    pools
        .iter()
        .map(|&(n, pages)| pool_command(page_size_bytes, pages, false, Some(n)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// [`Fix::RetryOrCheckLimits`](crate::Fix::RetryOrCheckLimits).
pub(super) fn retry_or_check_limits(page_size_bytes: u64, available: u64) -> String {
    format!(
        "the pool now has {available} pages available: retry; if it keeps failing, \
         check hugetlb cgroup limits (hugetlb.{}B.max, hugetlb.{}B.rsvd.max) and \
         hugetlbfs size= limits",
        short_size(page_size_bytes),
        short_size(page_size_bytes)
    )
}

/// [`Fix::BootPageSize`](crate::Fix::BootPageSize).
pub(super) fn boot_page_size(page_size_bytes: u64) -> String {
    format!(
        "pick an offered size, or boot with hugepagesz={} hugepages=N",
        short_size(page_size_bytes)
    )
}

/// [`Fix::Demote`](crate::Fix::Demote): the write to the larger pool's
/// `demote` (after its `demote_size` where that names another size).
pub(super) fn demote(
    page_size_bytes: u64,
    to_page_size_bytes: u64,
    pages: u64,
    set_demote_size: bool,
) -> String {
    let dir = nr_hugepages_path(page_size_bytes, None);
    let dir = dir.trim_end_matches("/nr_hugepages");
    let size = if set_demote_size {
        format!(
            "echo {}kB > {dir}/demote_size && ",
            to_page_size_bytes / 1024
        )
    } else {
        String::new()
    };
    format!(
        "{size}echo {pages} > {dir}/demote   # {pages} free {} page{} become{} {} {} pages",
        short_size(page_size_bytes),
        if pages == 1 { "" } else { "s" },
        if pages == 1 { "s" } else { "" },
        pages.saturating_mul(page_size_bytes / to_page_size_bytes.max(1)),
        short_size(to_page_size_bytes)
    )
}

/// [`Fix::ReserveAtBoot`](crate::Fix::ReserveAtBoot): the kernel command
/// line, or `hugetlb_cma=` where the command line asks for them already.
pub(super) fn reserve_at_boot(page_size_bytes: u64, pages: u64, on_cmdline: bool) -> String {
    let gib = pages
        .saturating_mul(page_size_bytes)
        .div_ceil(1 << 30)
        .max(1);
    if on_cmdline {
        return format!(
            "hugepagesz={} hugepages={pages} is on the kernel command line already: \
             boot with hugetlb_cma={gib}G instead, a CMA area that run-time writes \
             to nr_hugepages take them from",
            short_size(page_size_bytes)
        );
    }
    format!(
        "hugepagesz={} hugepages={pages} on the kernel command line (reserved before \
         memory fragments), or hugetlb_cma={gib}G to set aside a CMA area that run-time \
         writes to nr_hugepages can take them from",
        short_size(page_size_bytes)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Fix;

    #[test]
    fn pool_commands() {
        assert_eq!(
            pool_command(2 << 20, 7, true, None),
            "sysctl -w vm.nr_hugepages=7"
        );
        assert_eq!(
            pool_command(1 << 30, 3, true, Some(1)),
            "echo 3 > /sys/devices/system/node/node1/hugepages/hugepages-1048576kB/nr_hugepages"
        );
        assert_eq!(
            pool_command(1 << 30, 3, false, None),
            "echo 3 > /sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages"
        );
    }

    #[test]
    fn host_tuning_fixes() {
        let d = Fix::Demote {
            page_size_bytes: 1 << 30,
            to_page_size_bytes: 2 << 20,
            pages: 2,
            set_demote_size: false,
        };
        assert_eq!(
            d.to_string(),
            "echo 2 > /sys/kernel/mm/hugepages/hugepages-1048576kB/demote   # 2 free 1G pages become 1024 2M pages"
        );
        let d = Fix::Demote {
            page_size_bytes: 1 << 30,
            to_page_size_bytes: 2 << 20,
            pages: 1,
            set_demote_size: true,
        };
        assert!(d.to_string().starts_with(
            "echo 2048kB > /sys/kernel/mm/hugepages/hugepages-1048576kB/demote_size && echo 1 > "
        ));
        let b = Fix::ReserveAtBoot {
            page_size_bytes: 1 << 30,
            pages: 4,
            on_cmdline: false,
        };
        assert!(b
            .to_string()
            .starts_with("hugepagesz=1G hugepages=4 on the kernel command line"));
        assert!(b.to_string().contains("hugetlb_cma=4G"));
        let b = Fix::ReserveAtBoot {
            page_size_bytes: 1 << 30,
            pages: 8,
            on_cmdline: true,
        };
        assert!(
            b.to_string().contains("already: boot with hugetlb_cma=8G"),
            "{b}"
        );
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v["kind"], "demote");
    }

    #[test]
    fn node_pools_a_refusal_and_a_size_the_kernel_lacks() {
        let f = Fix::SetNodePools {
            page_size_bytes: 2 << 20,
            pools: vec![(0, 5), (1, 7)],
        };
        assert_eq!(
            f.to_string(),
            "echo 5 > /sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages; \
             echo 7 > /sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages"
        );
        let r = Fix::RetryOrCheckLimits {
            page_size_bytes: 1 << 30,
            available: 3,
        };
        assert_eq!(
            r.to_string(),
            "the pool now has 3 pages available: retry; if it keeps failing, check hugetlb \
             cgroup limits (hugetlb.1GB.max, hugetlb.1GB.rsvd.max) and hugetlbfs size= limits"
        );
        let b = Fix::BootPageSize {
            page_size_bytes: 1 << 30,
        };
        assert_eq!(
            b.to_string(),
            "pick an offered size, or boot with hugepagesz=1G hugepages=N"
        );
        // A demote_size of 0 (a fix read from JSON) divides by 1.
        let d = demote(1 << 30, 0, 3, false);
        assert!(
            d.ends_with("# 3 free 1G pages become 3221225472 0k pages"),
            "{d}"
        );
    }
}
