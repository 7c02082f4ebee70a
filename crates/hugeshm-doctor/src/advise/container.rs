//! What a container (a Kubernetes pod) running the counted regions needs:
//! its huge page resources, the `resources:` block, and what else to know.

use super::model::{ContainerAdvice, Plan, PodResource};
use hugeshm_parse::size::page_size_short;

/// What a pod needs for the counted regions: per page size the pages they
/// need (no pool spare: a pod's hugetlb limit covers its own memory), as
/// `resources.limits` and equal `requests`.
pub fn container_advice(plan: &Plan) -> ContainerAdvice {
    let mut by_size: std::collections::BTreeMap<u64, u64> = Default::default();
    for c in &plan.counted {
        // plan() checked that these fit.
        let bytes = c.pages.saturating_mul(c.page_size_bytes);
        let e = by_size.entry(c.page_size_bytes).or_default();
        *e = e.saturating_add(bytes);
    }
    let resources: Vec<PodResource> = by_size
        .into_iter()
        .map(|(page, bytes)| PodResource {
            name: format!("hugepages-{}i", page_size_short(page)),
            quantity: hugeshm_fix::k8s_quantity(bytes),
            bytes,
        })
        .collect();
    let lines: Vec<String> = resources
        .iter()
        .map(|r| format!("      {}: {}", r.name, r.quantity))
        .collect();
    let yaml = format!(
        "resources:\n  limits:\n{}\n      memory: <what the server needs besides huge pages>\n  requests:\n{}\n",
        lines.join("\n"),
        lines.join("\n")
    )
    .replace("\n      ", "\n    ");
    let notes = vec![
        "huge pages are not part of the memory limit: the memory request and limit cover \
         everything else the server uses"
            .to_owned(),
        "Kubernetes needs hugepages requests equal to limits, and the kubelet reads the \
         node's pools when it starts: reserve the host plan above, then restart the kubelet \
         so the node advertises the pages"
            .to_owned(),
        "container runtimes set hugetlb.<size>.max (charged when a page is first touched), \
         often without hugetlb.<size>.rsvd.max: a server that touches past the limit gets \
         SIGBUS; pre-fault at start (hugeshm create does, and turns a refusal into an error \
         with these numbers)"
            .to_owned(),
    ];
    ContainerAdvice {
        resources,
        yaml,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advise::testing::{host, M2};
    use crate::advise::{plan, Demand};
    use hugeshm_parse::size::{GIB, MIB};

    #[test]
    fn container_needs_the_regions_not_the_spares() {
        let h = host(1);
        let p = plan(
            &h,
            &[
                Demand::new("sga", 1536 * MIB, M2),
                Demand::new("pg", 140 * MIB, M2).with_pages(71),
                Demand::new("big", 3 * GIB, GIB),
            ],
            vec![],
            2,
        )
        .unwrap();
        let c = container_advice(&p);
        let r: Vec<(&str, &str)> = c
            .resources
            .iter()
            .map(|r| (r.name.as_str(), r.quantity.as_str()))
            .collect();
        // 768 + 71 pages of 2 MiB, no spare; 3 pages of 1 GiB.
        assert_eq!(
            r,
            vec![("hugepages-2Mi", "1678Mi"), ("hugepages-1Gi", "3Gi")]
        );
        assert!(
            c.yaml
                .contains("  limits:\n    hugepages-2Mi: 1678Mi\n    hugepages-1Gi: 3Gi\n"),
            "{}",
            c.yaml
        );
        assert!(
            c.yaml.contains("  requests:\n    hugepages-2Mi: 1678Mi"),
            "{}",
            c.yaml
        );
        assert!(c.notes.iter().any(|n| n.contains("restart the kubelet")));
    }
}
