//! The checked-in header `include/hugeshm.h` is what cbindgen generates
//! from this crate now. After changing the C API, regenerate it with
//!
//! ```sh
//! HUGESHM_BLESS=1 cargo test -p hugeshm-capi --test header
//! ```

use std::path::Path;

#[test]
fn checked_in_header_is_current() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config =
        cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("read cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        // The crate's sources only (following its `mod` items), without
        // running `cargo metadata`.
        .with_src(crate_dir.join("src/lib.rs"))
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let generated = String::from_utf8(generated).expect("header is UTF-8");

    let path = crate_dir.join("include/hugeshm.h");
    if std::env::var_os("HUGESHM_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write include/hugeshm.h");
        println!("wrote {}", path.display());
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    if checked_in != generated {
        let first = checked_in
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(checked_in.lines().count().min(generated.lines().count()));
        panic!(
            "{} is out of date (first difference at line {}):\n  checked in: {:?}\n  generated:  {:?}\n\
             regenerate it with: HUGESHM_BLESS=1 cargo test -p hugeshm-capi --test header",
            path.display(),
            first + 1,
            checked_in.lines().nth(first).unwrap_or("<end of file>"),
            generated.lines().nth(first).unwrap_or("<end of file>"),
        );
    }
}

/// Every function the library exports is declared in the header, and the
/// other way round (cbindgen skips a function it cannot express silently).
#[test]
fn header_declares_every_exported_function() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let header = std::fs::read_to_string(crate_dir.join("include/hugeshm.h")).unwrap();
    let mut exported = Vec::new();
    for entry in std::fs::read_dir(crate_dir.join("src")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let mut lines = text.lines().peekable();
        while let Some(line) = lines.next() {
            if line.trim() == "#[no_mangle]" {
                let decl = lines.next().unwrap_or("");
                let name = decl
                    .split("fn ")
                    .nth(1)
                    .and_then(|r| r.split('(').next())
                    .unwrap_or_else(|| panic!("no fn after #[no_mangle]: {decl}"));
                exported.push(name.to_owned());
            }
        }
    }
    exported.sort();
    assert!(exported.len() > 30, "{exported:?}");
    for name in &exported {
        assert!(
            header.contains(&format!(" {name}(")) || header.contains(&format!("*{name}(")),
            "{name} is exported but not declared in include/hugeshm.h"
        );
    }
    // Declarations start a line (comments start with `//`).
    let declared = header
        .lines()
        .filter(|l| !l.starts_with("//") && !l.starts_with(' ') && l.contains('('))
        .filter_map(|l| l.split('(').next()?.rsplit([' ', '*']).next())
        .filter(|n| n.starts_with("hugeshm_"))
        .count();
    assert_eq!(declared, exported.len(), "{exported:?}");
}
