//! advise and apply refuse what they cannot plan exactly (issue 25): sums
//! of pages and bytes past 64 bits (`--spare 18446744073709551615` planned
//! 511 pages, a wrapped sum), and page sizes the host does not offer
//! (`page_size = "3"` wrote `hugepages-0kB`). Usage errors: exit 2, with the
//! numbers and what the host offers. On the `clean` fixture (2 MiB and
//! 1 GiB pools).

use crate::common;

use hugeshm_testkit::TempDir;
use std::process::Output;

const MAX: &str = "18446744073709551615";

/// Exit 2, no panic, nothing on stdout; stderr.
fn usage_error(what: &str, out: Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!err.contains("panicked"), "{what}: {err}");
    assert_eq!(out.status.code(), Some(2), "{what}: {err}");
    assert!(
        out.stdout.is_empty(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    err
}

#[test]
fn a_spare_past_64_bits_is_refused_with_the_numbers() {
    for cmd in [&["advise"][..], &["apply", "--dry-run"]] {
        let out = common::on_fixture("clean")
            .args(cmd)
            .args(["--size", "1G", "--spare", MAX])
            .output()
            .unwrap();
        let err = usage_error(&cmd.join(" "), out);
        assert!(
            err.contains(&format!(
                "the 2 MiB pool (host-wide): pages and spare: 512 + {MAX}"
            )),
            "{err}"
        );
    }
    // The largest spare that fits is planned as asked.
    let out = common::on_fixture("clean")
        .args(["advise", "--size", "1G", "--json", "--spare"])
        .arg((u64::MAX / (2 << 20) - 512).to_string())
        .output()
        .unwrap();
    let v = common::json(out);
    assert_eq!(v["pools"][0]["pages"], u64::MAX / (2 << 20));
}

#[test]
fn a_plan_file_past_64_bits_is_refused_before_anything_changes() {
    let v = common::json(
        common::on_fixture("clean")
            .args(["advise", "--size", "64M", "--json"])
            .output()
            .unwrap(),
    );
    let mut plan = v.clone();
    let pages = u64::MAX / 1024;
    plan["pools"][0]["pages"] = pages.into();
    let tmp = TempDir::new("advise-limits");
    let file = tmp.join("plan.json");
    std::fs::write(&file, serde_json::to_string(&plan).unwrap()).unwrap();
    for force in [false, true] {
        let mut c = common::on_fixture("clean");
        c.args(["apply", "--dry-run", "--plan"]).arg(&file);
        if force {
            c.arg("--force");
        }
        let err = usage_error("apply --plan", c.output().unwrap());
        assert!(
            err.contains(&format!("bytes: {pages} * 2097152 is more than")),
            "{err}"
        );
    }
}

#[test]
fn page_sizes_the_host_does_not_offer_are_refused() {
    let tmp = TempDir::new("advise-page-size");
    let spec = tmp.join("spec.toml");
    for page in ["3", "16M", "4k"] {
        std::fs::write(
            &spec,
            format!("[[region]]\nname = \"sga\"\nsize = \"64M\"\npage_size = \"{page}\"\n"),
        )
        .unwrap();
        for cmd in [&["advise"][..], &["apply", "--dry-run"]] {
            let out = common::on_fixture("clean")
                .args(cmd)
                .arg("--spec")
                .arg(&spec)
                .output()
                .unwrap();
            let err = usage_error(&format!("{} page_size {page}", cmd.join(" ")), out);
            assert!(
                err.contains("region \"sga\": page_size: this kernel offers no")
                    && err.contains("it offers 2M, 1G"),
                "{page}: {err}"
            );
            assert!(!err.contains("0kB"), "{err}");
        }
    }
    let err = usage_error(
        "--page-size 3",
        common::on_fixture("clean")
            .args(["advise", "--size", "64M", "--page-size", "3"])
            .output()
            .unwrap(),
    );
    // Refused by the option's parser: no page size is 3 bytes.
    assert!(err.contains("\"3\" is not a page size"), "{err}");
    // An offered size plans.
    std::fs::write(
        &spec,
        "[[region]]\nname = \"sga\"\nsize = \"64M\"\npage_size = \"1G\"\n",
    )
    .unwrap();
    let out = common::on_fixture("clean")
        .args(["advise", "--json", "--spec"])
        .arg(&spec)
        .output()
        .unwrap();
    let v = common::json(out);
    assert_eq!(v["pools"][0]["page_size_bytes"], 1u64 << 30);
}
