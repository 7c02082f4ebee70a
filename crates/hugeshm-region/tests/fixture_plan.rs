//! `create` decides from the host its probe reads: driven here by the
//! fixture tree `tests/fixtures/short-2m-pool` (a made-up `/proc` and
//! `/sys` with a 2 MiB pool of 100 pages, 10 available), whatever the real
//! pool holds. Runs without root: the
//! `only` case fails before any system call, the `try` case falls back to
//! base pages, which the real kernel then gives.

use std::path::Path;

use hugeshm_region::{
    Backend, Fix, PageSize, Policy, Probe, RegionBuilder, RegionError, Renderer, Roots,
};

const MIB2: u64 = 2 << 20;

/// The fixture tree: a 2 MiB pool of 100 pages, 12 free, 2 reserved.
fn fixture() -> Probe {
    Probe::new(Roots::fixture(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/short-2m-pool"),
    ))
}

#[test]
fn only_fails_with_the_fixture_pool_numbers() {
    let probe = fixture();
    for backend in [Backend::Anon, Backend::Sysv, Backend::Memfd] {
        let err = RegionBuilder::new(64 << 20)
            .backend(backend)
            .page_size(PageSize::HUGE_2M)
            .policy(Policy::Only)
            .probe(probe.clone())
            .create()
            .map(|_| ())
            .unwrap_err();
        let RegionError::PoolShortfall {
            shortfall,
            refused_by,
        } = &err
        else {
            panic!("{backend}: {err}");
        };
        assert_eq!(
            refused_by, &None,
            "{backend}: decided before the system call"
        );
        // 64 MiB (+ nothing: the header fits in the first page) = 32 pages;
        // available = free 12 − reserved 2.
        assert_eq!(
            (
                shortfall.required,
                shortfall.available,
                shortfall.free,
                shortfall.reserved
            ),
            (32, 10, 12, 2),
            "{backend}"
        );
        assert_eq!(
            err.to_string(),
            "2 MiB pages: required 32, available 10 (free 12, reserved 2)"
        );
        // 100 + (32 − 10) pages, as the default size's sysctl.
        assert_eq!(
            shortfall.fix,
            Fix::SetPool {
                page_size_bytes: MIB2,
                node: None,
                pages: 122,
                default_size: true
            }
        );
        assert_eq!(
            err.fix().unwrap().render(Renderer::Cli),
            "sysctl -w vm.nr_hugepages=122"
        );
    }
}

#[test]
fn try_falls_back_whole_with_the_fixture_reason() {
    let probe = fixture();
    let (mut region, report) = RegionBuilder::new(64 << 20)
        .backend(Backend::Anon)
        .page_size(PageSize::HUGE_2M)
        .policy(Policy::Try)
        .prefault_threads(1)
        .probe(probe)
        .create()
        .unwrap();
    let fallback = report.fallback.clone().expect("a fall-back");
    assert!(
        fallback
            .reason
            .starts_with("2 MiB pages: required 32, available 10 (free 12, reserved 2)"),
        "{}",
        fallback.reason
    );
    assert!(fallback
        .reason
        .ends_with("the whole region uses 4 KiB pages instead"));
    assert_eq!(fallback.shortfall.unwrap().required, 32);
    assert_eq!(report.page_size_bytes, 4096);
    assert_eq!(report.verified_page_size_bytes, 4096);
    assert_eq!(report.resident_bytes, 64 << 20);
    region.write_at(0, b"fixture").unwrap();
    region.destroy().unwrap();
    // JSON keeps the flat fields.
    let v = serde_json::to_value(&report).unwrap();
    assert_eq!(v["fell_back"], true);
    assert_eq!(v["shortfall"]["available"], 10);
    assert_eq!(v["shortfall"]["fix"]["kind"], "set-pool");
}
