//! Hugetlb cgroup limits: both files of a level (faulted pages and
//! reservations), and the Kubernetes resource that sets them.

use crate::{shell_quote, short_size};

/// A Kubernetes quantity: `64Mi`, `2Gi`, else bytes.
pub fn k8s_quantity(bytes: u64) -> String {
    const GI: u64 = 1 << 30;
    const MI: u64 = 1 << 20;
    if bytes > 0 && bytes % GI == 0 {
        format!("{}Gi", bytes / GI)
    } else if bytes > 0 && bytes % MI == 0 {
        format!("{}Mi", bytes / MI)
    } else {
        bytes.to_string()
    }
}

/// The two hugetlb limit files of a cgroup level from either one: the
/// limit on faulted pages and the reservation limit beside it (`None`
/// where the name is neither form).
fn cgroup_limit_pair(file: &str) -> (String, Option<String>) {
    for (faults, rsvd) in [
        (".max", ".rsvd.max"),
        (".limit_in_bytes", ".rsvd.limit_in_bytes"),
    ] {
        if let Some(p) = file.strip_suffix(rsvd) {
            return (format!("{p}{faults}"), Some(file.to_owned()));
        }
        if let Some(p) = file.strip_suffix(faults) {
            return (file.to_owned(), Some(format!("{p}{rsvd}")));
        }
    }
    (file.to_owned(), None)
}

/// [`Fix::RaiseCgroupLimit`](crate::Fix::RaiseCgroupLimit): the writes to
/// the level's files where `file` names one, else the names to look for.
pub(super) fn raise_limit(page_size_bytes: u64, file: Option<&str>, bytes: u64) -> String {
    let size = format!("{}B", short_size(page_size_bytes));
    match file {
        Some(f) => {
            // Both limits of the level: on faulted pages (v2
            // `.max`, v1 `.limit_in_bytes`) and on reservations
            // (`.rsvd.max`, `.rsvd.limit_in_bytes`), whichever
            // of the two binds.
            let (faults, rsvd) = cgroup_limit_pair(f);
            let rsvd = rsvd
                .map(|r| format!(" && echo {bytes} > {}", shell_quote(&r)))
                .unwrap_or_default();
            format!(
                "echo {bytes} > {}{rsvd} (Kubernetes: \
                 resources.limits.hugepages-{}i: {})",
                shell_quote(&faults),
                size.trim_end_matches('B'),
                k8s_quantity(bytes)
            )
        }
        None => format!(
            "raise the hugetlb cgroup limit of this process (hugetlb.{size}.max, and \
             hugetlb.{size}.rsvd.max with it) to at least {bytes} bytes, or have the \
             container get hugepages-{}i: {}",
            size.trim_end_matches('B'),
            k8s_quantity(bytes)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Fix;

    #[test]
    fn cgroup_limits_name_both_files_and_the_pod_resource() {
        let f = Fix::RaiseCgroupLimit {
            page_size_bytes: 2 << 20,
            file: Some("/sys/fs/cgroup/pod/hugetlb.2MB.max".into()),
            bytes: 64 << 20,
        };
        assert_eq!(
            f.to_string(),
            "echo 67108864 > /sys/fs/cgroup/pod/hugetlb.2MB.max && echo 67108864 > \
             /sys/fs/cgroup/pod/hugetlb.2MB.rsvd.max (Kubernetes: \
             resources.limits.hugepages-2Mi: 64Mi)"
        );
        // From the reservation limit, both files too.
        let rsvd = Fix::RaiseCgroupLimit {
            page_size_bytes: 2 << 20,
            file: Some("/sys/fs/cgroup/pod/hugetlb.2MB.rsvd.max".into()),
            bytes: 64 << 20,
        };
        assert!(
            rsvd.to_string().starts_with(
                "echo 67108864 > /sys/fs/cgroup/pod/hugetlb.2MB.max && echo 67108864 > \
                 /sys/fs/cgroup/pod/hugetlb.2MB.rsvd.max (Kubernetes"
            ),
            "{rsvd}"
        );
        let v1 = Fix::RaiseCgroupLimit {
            page_size_bytes: 2 << 20,
            file: Some("/sys/fs/cgroup/hugetlb/pod/hugetlb.2MB.limit_in_bytes".into()),
            bytes: 2 << 20,
        };
        assert!(
            v1.to_string().contains(
                "&& echo 2097152 > /sys/fs/cgroup/hugetlb/pod/hugetlb.2MB.rsvd.limit_in_bytes"
            ),
            "{v1}"
        );
        assert_eq!(k8s_quantity(3 << 30), "3Gi");
        assert_eq!(k8s_quantity(4097), "4097");
    }

    #[test]
    fn a_limit_file_unknown_or_of_another_form() {
        let f = Fix::RaiseCgroupLimit {
            page_size_bytes: 1 << 30,
            file: None,
            bytes: 5 << 30,
        };
        assert_eq!(
            f.to_string(),
            "raise the hugetlb cgroup limit of this process (hugetlb.1GB.max, and \
             hugetlb.1GB.rsvd.max with it) to at least 5368709120 bytes, or have the \
             container get hugepages-1Gi: 5Gi"
        );
        // A name of neither form: that file alone, quoted.
        let odd = Fix::RaiseCgroupLimit {
            page_size_bytes: 2 << 20,
            file: Some("/sys/fs/cgroup/a b/limit".into()),
            bytes: 4097,
        };
        assert_eq!(
            odd.to_string(),
            "echo 4097 > '/sys/fs/cgroup/a b/limit' (Kubernetes: \
             resources.limits.hugepages-2Mi: 4097)"
        );
        assert_eq!(
            cgroup_limit_pair("x/hugetlb.2MB.rsvd.limit_in_bytes"),
            (
                "x/hugetlb.2MB.limit_in_bytes".to_string(),
                Some("x/hugetlb.2MB.rsvd.limit_in_bytes".to_string())
            )
        );
    }
}
