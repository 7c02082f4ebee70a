//! The command line as a user types it: one vocabulary across commands,
//! values a parser refuses with exit 2 and a sentence that says why, sizes
//! read one way. These run the binary and change nothing on the host.

mod common;

use std::process::Output;

/// `hugeshm ARGS`, which must exit `code`; its stderr.
fn exits(args: &[&str], code: i32) -> String {
    let out: Output = common::hugeshm(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(code),
        "hugeshm {args:?}: {err}{}",
        String::from_utf8_lossy(&out.stdout)
    );
    err
}

#[test]
fn sizes_are_binary_and_ambiguous_units_are_refused_with_both_readings() {
    let err = exits(&["advise", "--size", "10gb", "--json"], 2);
    assert!(err.contains("write 10G or 10GiB"), "{err}");
    assert!(err.contains("or 10000000000 for 10 x 1000³"), "{err}");
    let err = exits(&["create", "sizes-test", "--size", "-1G"], 2);
    assert!(err.contains("\"-1G\": a size is positive"), "{err}");
    let err = exits(&["create", "sizes-test", "--size", "99999999999T"], 2);
    assert!(
        err.contains("is too large (max 18446744073709551615 bytes"),
        "{err}"
    );
    let err = exits(&["bench", "prefault", "--size", "1G,-2G"], 2);
    assert!(err.contains("a size is positive"), "{err}");
    // The binary spellings plan the same bytes.
    let plan = |size: &str| {
        let v = common::json(common::hugeshm(&[
            "advise",
            "--size",
            size,
            "--page-size",
            "2m",
            "--json",
        ]));
        v["pools"].clone()
    };
    assert_eq!(plan("10G"), plan("10GiB"));
    assert_eq!(plan("10G"), plan("10737418240"));
    // The --help says which units mean what.
    let out = common::hugeshm(&["--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("kB, MB, GB and TB are refused"), "{help}");
}

#[test]
fn a_spec_file_reads_sizes_the_same_way() {
    let dir = hugeshm_testkit::TempDir::new("cli-usage-spec");
    let spec = dir.path().join("plan.toml");
    std::fs::write(&spec, "[[region]]\nname = \"sga\"\nsize = \"18GB\"\n").unwrap();
    let err = exits(&["advise", "--spec", spec.to_str().unwrap(), "--json"], 3);
    assert!(err.contains("region \"sga\": size \"18GB\""), "{err}");
    assert!(err.contains("18G or 18GiB"), "{err}");
}
