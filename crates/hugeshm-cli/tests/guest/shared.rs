//! What the guest modules share: booting a scenario of
//! `../guest-scenarios/` with this build's `hugeshm`, and the JSON blocks
//! its console printed.

use hugeshm_testkit::guest::{Boot, GuestRun, Scenario};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// This build's `hugeshm`.
pub fn hugeshm() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_hugeshm"))
}

/// `tests/guest-scenarios/NAME`.
pub fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/guest-scenarios")
        .join(name)
}

/// Boots scenario `name` once with `boot`, `hugeshm` and `more` binaries in
/// the image ([`Scenario::run`]: skips through the testkit where the host
/// has no QEMU or guest kernel).
pub fn boot(name: &str, more: &[&Path], boot: Boot) -> Scenario {
    let mut bins = vec![hugeshm()];
    bins.extend_from_slice(more);
    Scenario::run(&scenario(name), &bins, &[boot])
}

/// Prints how long each of the scenario's `marks` took in the guest.
pub fn print_marks(scenario: &Scenario, marks: &[&str]) {
    if let Scenario::Ran(runs) = scenario {
        let c = &runs[0].console;
        let took: Vec<String> = marks
            .iter()
            .map(|m| match c.mark_seconds(m) {
                Some(s) => format!("{m} {s:.1} s"),
                None => format!("{m} -"),
            })
            .collect();
        println!(
            "guest: /init at {:.1} s of guest uptime; scenarios: {}",
            c.init.unwrap_or(0.0),
            took.join(", ")
        );
    }
}

/// The JSON the console printed between block `block`'s marks.
pub fn json(run: &GuestRun, block: &str) -> Value {
    run.console.json(block).unwrap_or_else(|e| panic!("{e}"))
}

/// [`json`] of a command's `--json` document (schema 1).
pub fn json_v1(run: &GuestRun, block: &str) -> Value {
    let v = json(run, block);
    assert_eq!(v["schema"].as_u64(), Some(1), "{block}: {v:#}");
    v
}
