//! Test only: the CLI's captured host trees (`crates/hugeshm-cli/tests/fixtures/`,
//! described in its README) as the doctor's unit tests read them.

use hugeshm_probe::{HostSnapshot, MapsSource, Probe, Roots};

/// A reader over fixture tree `name` (maps read as text), and its host.
pub(crate) fn tree(name: &str) -> (Probe, HostSnapshot) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../hugeshm-cli/tests/fixtures")
        .join(name);
    let probe = Probe::new(Roots::fixture(&dir)).with_maps(MapsSource::Text);
    let host = probe.host_without_free_lists();
    (probe, host)
}
