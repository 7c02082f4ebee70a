//! A DPDK application's EAL arguments, one string as an admin passes them
//! (`-l 0-3 -m 1024 --in-memory --`): the options of DPDK 22.11's EAL that
//! decide how much huge page memory it takes at start, and where.
//!
//! Words are split on white space (no shell quoting); `--opt=value` and
//! `--opt value` are the same; `-m64` is `-m 64`, as getopt reads it. `--`
//! ends the EAL's arguments (the rest is the application's). Every other
//! option is kept in [`EalArgs::ignored`], with its value where the EAL
//! gives it one.

use crate::error::ParseError;
use serde::{Deserialize, Serialize};

const PATH: &str = "EAL arguments";

/// The memory options of an EAL command line; `None`/`false` when absent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EalArgs {
    /// `-m MB`: megabytes preallocated at start, over the nodes of its lcores.
    pub memory_mb: Option<u64>,
    /// `--socket-mem N0,N1,…`: megabytes preallocated on each node.
    pub socket_mem_mb: Option<Vec<u64>>,
    /// `--socket-limit N0,N1,…`: the most megabytes on each node (0: none).
    pub socket_limit_mb: Option<Vec<u64>>,
    /// `--in-memory`: memfds, no hugetlbfs mount, no files.
    pub in_memory: bool,
    /// `--single-file-segments`: one file per memory segment list.
    pub single_file_segments: bool,
    /// `--huge-dir DIR`: the hugetlbfs mount to use.
    pub huge_dir: Option<String>,
    /// `--no-huge`: no huge pages at all.
    pub no_huge: bool,
    /// `--legacy-mem`: every free huge page mapped at start.
    pub legacy_mem: bool,
    /// `--huge-unlink[=existing|always|never]` (`always` without a value;
    /// `existing`, the EAL's default, where absent).
    pub huge_unlink: Option<String>,
    /// `--file-prefix NAME`.
    pub file_prefix: Option<String>,
    /// The other options, as given (`-l 0-1`, `--vdev net_null0`).
    pub ignored: Vec<String>,
    /// Words after `--`: the application's own arguments.
    pub application_args: usize,
}

/// EAL options (DPDK 22.11, `eal_common_options.c`) that take a value, so
/// that the word after one is not read as an option of its own.
const WITH_VALUE: &[&str] = &[
    "-c",
    "-l",
    "-n",
    "-r",
    "-a",
    "-b",
    "-d",
    "-s",
    "-S",
    "--lcores",
    "--main-lcore",
    "--service-corelist",
    "--service-coremask",
    "--allow",
    "--block",
    "--vdev",
    "--proc-type",
    "--base-virtaddr",
    "--vfio-intr",
    "--vfio-vf-token",
    "--log-level",
    "--iova-mode",
    "--mbuf-pool-ops-name",
    "--force-max-simd-bitwidth",
    "--trace",
    "--trace-dir",
    "--trace-bufsz",
    "--trace-mode",
    "--create-uio-dev",
    "--master-lcore",
    "--pci-whitelist",
    "--pci-blacklist",
];

fn megabytes(opt: &str, v: &str) -> Result<u64, ParseError> {
    v.trim()
        .parse::<u64>()
        .map_err(|_| ParseError::file(PATH, format!("{opt} {v:?}: expected a number of megabytes")))
}

fn per_node(opt: &str, v: &str) -> Result<Vec<u64>, ParseError> {
    v.split(',').map(|n| megabytes(opt, n)).collect()
}

/// Reads `args`, one string of EAL arguments.
pub fn parse(args: &str) -> Result<EalArgs, ParseError> {
    let mut e = EalArgs::default();
    let mut words = args.split_whitespace();
    while let Some(w) = words.next() {
        if w == "--" {
            e.application_args = words.by_ref().count();
            break;
        }
        let (opt, inline) = match w.split_once('=') {
            Some((o, v)) if o.starts_with("--") => (o, Some(v)),
            _ if w.starts_with("-m") && w.len() > 2 && !w.starts_with("--") => {
                ("-m", Some(&w[2..]))
            }
            _ => (w, None),
        };
        let mut value = |o: &str| -> Result<String, ParseError> {
            match inline {
                Some(v) => Ok(v.to_owned()),
                None => words
                    .next()
                    .map(str::to_owned)
                    .ok_or_else(|| ParseError::file(PATH, format!("{o} needs a value"))),
            }
        };
        match opt {
            "-m" => e.memory_mb = Some(megabytes("-m", &value("-m")?)?),
            "--socket-mem" => e.socket_mem_mb = Some(per_node(opt, &value(opt)?)?),
            "--socket-limit" => e.socket_limit_mb = Some(per_node(opt, &value(opt)?)?),
            "--in-memory" => e.in_memory = true,
            "--single-file-segments" => e.single_file_segments = true,
            "--huge-dir" => e.huge_dir = Some(value(opt)?),
            "--no-huge" => e.no_huge = true,
            "--legacy-mem" => e.legacy_mem = true,
            "--huge-unlink" => {
                let v = inline.unwrap_or("always");
                if !["existing", "always", "never"].contains(&v) {
                    return Err(ParseError::file(
                        PATH,
                        format!("--huge-unlink={v}: expected existing, always or never"),
                    ));
                }
                e.huge_unlink = Some(v.to_owned());
            }
            "--file-prefix" => e.file_prefix = Some(value(opt)?),
            o if WITH_VALUE.contains(&o) => {
                let v = value(o)?;
                e.ignored.push(format!("{o} {v}"));
            }
            o => e.ignored.push(o.to_owned()),
        }
    }
    // The EAL's own refusals (eal_check_common_options), in its words.
    let unlink = e.huge_unlink.as_deref();
    let refused = [
        (
            e.memory_mb.is_some() && e.socket_mem_mb.is_some(),
            "Options -m and --socket-mem cannot be specified at the same time",
        ),
        (
            e.no_huge && e.socket_mem_mb.is_some(),
            "Option --socket-mem cannot be specified together with --no-huge",
        ),
        (
            e.no_huge && unlink.is_some(),
            "Option --huge-unlink cannot be specified together with --no-huge",
        ),
        (
            e.legacy_mem && e.socket_limit_mb.is_some(),
            "Option --socket-limit is only supported in non-legacy memory mode",
        ),
        (
            e.single_file_segments && unlink == Some("always") && !e.in_memory,
            "Option --single-file-segments is not compatible with --huge-unlink",
        ),
        (
            e.in_memory && unlink == Some("never"),
            "Option --in-memory is not compatible with --huge-unlink=never",
        ),
        (
            e.legacy_mem && e.in_memory,
            "Option --legacy-mem is not compatible with --in-memory",
        ),
    ];
    if let Some((_, why)) = refused.iter().find(|(bad, _)| *bad) {
        return Err(ParseError::file(PATH, format!("the EAL refuses it: {why}")));
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_options_are_read_and_the_rest_kept() {
        let e = parse(
            "-l 0-1 --no-pci --vdev net_null0 --in-memory --file-prefix=pmd -m 64 \
             --single-file-segments -- -i --total-num-mbufs=2048",
        )
        .unwrap();
        assert_eq!(e.memory_mb, Some(64));
        assert!(e.in_memory && e.single_file_segments && !e.no_huge);
        assert_eq!(e.file_prefix.as_deref(), Some("pmd"));
        assert_eq!(e.ignored, ["-l 0-1", "--no-pci", "--vdev net_null0"]);
        assert_eq!(e.application_args, 2);
        let e = parse(
            "--socket-mem=1024,0,512 --socket-limit 2048,0 --huge-dir /mnt/huge --huge-unlink",
        )
        .unwrap();
        assert_eq!(e.socket_mem_mb, Some(vec![1024, 0, 512]));
        assert_eq!(e.socket_limit_mb, Some(vec![2048, 0]));
        assert_eq!(e.huge_dir.as_deref(), Some("/mnt/huge"));
        assert_eq!(e.huge_unlink.as_deref(), Some("always"));
        assert_eq!(parse("-m128").unwrap().memory_mb, Some(128));
        assert_eq!(
            parse("--huge-unlink=never --legacy-mem")
                .unwrap()
                .huge_unlink
                .as_deref(),
            Some("never")
        );
    }

    #[test]
    fn what_the_eal_refuses_is_refused() {
        for bad in [
            "-m 64 --socket-mem 64",
            "--no-huge --socket-mem 64",
            "-m",
            "-m lots",
            "--socket-mem 64,,1",
            "--huge-unlink=sometimes",
            "--legacy-mem --socket-limit 64",
            "--single-file-segments --huge-unlink",
            "--in-memory --huge-unlink=never",
            "--in-memory --legacy-mem",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(parse("--no-huge -m 64").unwrap().no_huge);
    }
}
