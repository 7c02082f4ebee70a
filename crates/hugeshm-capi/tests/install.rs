//! `scripts/install-capi.sh` into a temporary prefix, then the example C
//! program built the way a user builds it: `pkg-config --cflags --libs
//! hugeshm` (shared library) and `pkg-config --static` (static library),
//! and run.
//!
//! The script is given `--from target/<profile>/deps` (the library this
//! `cargo test` built) rather than running its own `cargo build --release`
//! from inside the test run.

use std::path::{Path, PathBuf};
use std::process::Command;

use hugeshm_testkit::{observe, skip, test_name};

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `target/<profile>/deps`, where `cargo test` left `libhugeshm.so/.a`.
fn built_lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().to_owned()
}

#[track_caller]
fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n--- stdout\n{stdout}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Removes the temporary prefix, also when the test fails.
struct TempPrefix(PathBuf);
impl Drop for TempPrefix {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn install_script_pkg_config_and_example() {
    if Command::new("pkg-config")
        .arg("--version")
        .output()
        .is_err()
    {
        return skip(
            test_name!(),
            "pkg-config is not installed (Debian package pkg-config)",
        );
    }
    let prefix = TempPrefix(
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("prefix-{}", std::process::id())),
    );
    let _ = std::fs::remove_dir_all(&prefix.0);
    let p = &prefix.0;
    let script = crate_dir().join("../../scripts/install-capi.sh");
    let out = run(Command::new("bash")
        .arg(&script)
        .arg("--from")
        .arg(built_lib_dir())
        .arg(p));
    println!("{out}");
    for f in [
        "lib/libhugeshm.so",
        "lib/libhugeshm.a",
        "include/hugeshm.h",
        "lib/pkgconfig/hugeshm.pc",
    ] {
        assert!(p.join(f).is_file(), "{f} not installed:\n{out}");
    }
    assert_eq!(
        std::fs::read(p.join("include/hugeshm.h")).unwrap(),
        std::fs::read(crate_dir().join("include/hugeshm.h")).unwrap()
    );

    let pkg_config = |args: &[&str]| -> String {
        run(Command::new("pkg-config")
            .args(args)
            .arg("hugeshm")
            .env("PKG_CONFIG_PATH", p.join("lib/pkgconfig")))
        .trim()
        .to_owned()
    };
    assert_eq!(pkg_config(&["--modversion"]), env!("CARGO_PKG_VERSION"));
    let flags = pkg_config(&["--cflags", "--libs"]);
    println!("pkg-config --cflags --libs hugeshm: {flags}");
    assert_eq!(
        flags,
        format!("-I{0}/include -L{0}/lib -lhugeshm", p.display())
    );
    let static_libs = pkg_config(&["--static", "--libs"]);
    assert!(static_libs.contains("-lpthread"), "{static_libs}");

    let example = crate_dir().join("examples/c/region.c");
    // Shared: as a user would, `cc region.c $(pkg-config --cflags --libs hugeshm)`.
    let shared = p.join("region");
    run(Command::new("cc")
        .arg(&example)
        .arg("-o")
        .arg(&shared)
        .args(flags.split_whitespace()));
    // Static: libhugeshm.a plus its Libs.private; no libhugeshm.so needed.
    let fully_static = p.join("region-static");
    let cflags = pkg_config(&["--cflags"]);
    let private: Vec<String> = static_libs
        .split_whitespace()
        .filter(|f| *f != "-lhugeshm")
        .map(str::to_owned)
        .collect();
    run(Command::new("cc")
        .arg(&example)
        .arg("-o")
        .arg(&fully_static)
        .args(cflags.split_whitespace())
        .arg(p.join("lib/libhugeshm.a"))
        .args(&private));
    let ldd = run(Command::new("ldd").arg(&fully_static));
    assert!(!ldd.contains("libhugeshm"), "{ldd}");

    let pool = observe!();
    for (exe, tag) in [(&shared, "shared"), (&fully_static, "static")] {
        let name = format!("capi-install-{tag}-{}", std::process::id());
        let out = run(Command::new(exe)
            .args([&name, "2", "posix", "4k", "off"])
            .env("LD_LIBRARY_PATH", p.join("lib")));
        println!("{tag}:\n{out}");
        assert!(out.contains("size            2097152 bytes"), "{out}");
        assert!(out.contains("destroyed"), "{out}");
    }
    pool.finish();
}
