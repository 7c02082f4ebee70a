//! Every parser against hostile input, in bounded time: arbitrary text,
//! and real kernel text (captured from a host, in the CLI's fixture tree)
//! mutated the ways a racing or broken kernel file goes wrong: bytes
//! flipped, lines cut, duplicated or swapped, digits made huge. Each
//! parser returns a value or an error naming its file (and line where it
//! has one); none panics.
//!
//! `PROPTEST_CASES` sets the cases per property (default 2048; CI runs the
//! default, which takes a few seconds).

use hugeshm_parse::error::ParseError;
use hugeshm_parse::*;
use proptest::prelude::*;

macro_rules! capture {
    ($rel:literal) => {
        include_str!(concat!(
            "../../hugeshm-cli/tests/fixtures/host-capture/",
            $rel
        ))
    };
}

/// A file of one of the CLI's hand-made fixture trees (real kernel formats).
macro_rules! fixture {
    ($rel:literal) => {
        include_str!(concat!("../../hugeshm-cli/tests/fixtures/", $rel))
    };
}

/// `/proc/self/mountinfo` and `/proc/self/cgroup` of a Linux 6.18 VM with
/// cgroup v1 controllers and the unified hierarchy (hybrid), as read.
const LIVE_MOUNTINFO: &str = "22 27 0:21 / /proc rw,relatime - proc proc rw
23 27 0:22 / /sys rw,relatime - sysfs sysfs rw
24 27 0:6 / /dev rw,relatime - devtmpfs devtmpfs rw,size=12334492k,nr_inodes=3083623,mode=755
25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24684092k
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard,resv_strict,resuid=65534,resgid=65534
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
const LIVE_CGROUP: &str = "9:name=systemd:/
8:pids:/
4:memory:/process_api/b8e3d68eff8cd74b7ce4f76be4109499
1:cpu:/
0::/
";

/// One parser: its name, a real sample of its file, and the parser.
type Parser = (
    &'static str,
    &'static str,
    fn(&str) -> Result<(), ParseError>,
);

fn ok<T>(r: Result<T, ParseError>) -> Result<(), ParseError> {
    r.map(|_| ())
}

/// Every parser with a real sample of its file.
fn parsers() -> Vec<Parser> {
    vec![
        ("cmdline", capture!("proc/cmdline"), |t| {
            ok(cmdline::parse(t))
        }),
        ("meminfo", capture!("proc/meminfo"), |t| {
            ok(meminfo::parse(t))
        }),
        ("mounts", capture!("proc/mounts"), |t| ok(mounts::parse(t))),
        ("maps", capture!("proc/22388/maps"), |t| ok(maps::parse(t))),
        ("smaps", capture!("proc/22388/smaps"), |t| {
            ok(smaps::parse(t))
        }),
        ("numa_maps", capture!("proc/22388/numa_maps"), |t| {
            ok(numa_maps::parse(t))
        }),
        ("limits", capture!("proc/22388/limits"), |t| {
            ok(pid_limits::parse(t))
        }),
        ("status", capture!("proc/22388/status"), |t| {
            ok(pid_status::parse(t))
        }),
        ("sysvipc/shm", capture!("proc/sysvipc/shm"), |t| {
            ok(sysvipc_shm::parse(t))
        }),
        (
            "node meminfo",
            capture!("sys/devices/system/node/node0/meminfo"),
            |t| {
                ok(node::parse_meminfo(
                    "/sys/devices/system/node/node0/meminfo",
                    t,
                ))
            },
        ),
        (
            "cpulist",
            capture!("sys/devices/system/node/node0/cpulist"),
            |t| {
                ok(node::parse_list(
                    "/sys/devices/system/node/node0/cpulist",
                    t,
                ))
            },
        ),
        (
            "distance",
            capture!("sys/devices/system/node/node0/distance"),
            |t| {
                ok(node::parse_distance(
                    "/sys/devices/system/node/node0/distance",
                    t,
                ))
            },
        ),
        (
            "nr_hugepages",
            capture!("sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"),
            |t| ok(hugepages::parse_counter("nr_hugepages", t)),
        ),
        ("shmmax", capture!("proc/sys/kernel/shmmax"), |t| {
            ok(sysctl::parse_u64_value("/proc/sys/kernel/shmmax", t))
        }),
        (
            "min_free_kbytes",
            capture!("proc/sys/vm/min_free_kbytes"),
            |t| ok(sysctl::parse_i64_value("/proc/sys/vm/min_free_kbytes", t)),
        ),
        (
            "thp enabled",
            capture!("sys/kernel/mm/transparent_hugepage/enabled"),
            |t| ok(thp::parse_selector("enabled", t)),
        ),
        (
            "khugepaged defrag",
            capture!("sys/kernel/mm/transparent_hugepage/khugepaged/defrag"),
            |t| ok(thp::parse_flag("khugepaged/defrag", t)),
        ),
        (
            "sysctl.conf",
            "vm.nr_hugepages = 512\nkernel.shmmax=68719476736\n# comment\n",
            |t| ok(sysctl_conf::parse("/etc/sysctl.d/99-hugeshm.conf", t)),
        ),
        (
            "tmpfiles.d",
            "w /sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages - - - - 4\n",
            |t| {
                sysctl_conf::parse_tmpfiles_writes(t);
                Ok(())
            },
        ),
        ("passwd", fixture!("two-nodes-uneven/fs/etc/passwd"), |t| {
            let _ = passwd::entries(t).count();
            let _ = (passwd::name_of(t, 26), passwd::uid_of(t, "postgres"));
            Ok(())
        }),
        ("mountinfo", LIVE_MOUNTINFO, |t| ok(mountinfo::parse(t))),
        (
            "mountinfo v1",
            fixture!("cgroup-v1/proc/self/mountinfo"),
            |t| ok(mountinfo::parse(t)),
        ),
        ("cgroup", LIVE_CGROUP, |t| ok(cgroup::parse(t))),
        ("cgroup v1", fixture!("cgroup-v1/proc/1501/cgroup"), |t| {
            ok(cgroup::parse(t))
        }),
        (
            "hugetlb max",
            fixture!("cgroup-v2/fs/sys/fs/cgroup/kubepods/pod-db/hugetlb.2MB.max"),
            |t| ok(hugetlb_cgroup::parse_limit("hugetlb.2MB.max", t)),
        ),
        (
            "hugetlb limit_in_bytes",
            fixture!("cgroup-v1/fs/sys/fs/cgroup/hugetlb/hugetlb.2MB.limit_in_bytes"),
            |t| ok(hugetlb_cgroup::parse_limit("hugetlb.2MB.limit_in_bytes", t)),
        ),
        (
            "hugetlb current",
            fixture!("cgroup-v2/fs/sys/fs/cgroup/kubepods/pod-db/hugetlb.2MB.current"),
            |t| ok(hugetlb_cgroup::parse_counter("hugetlb.2MB.current", t)),
        ),
        (
            "hugetlb events",
            fixture!("cgroup-v2/fs/sys/fs/cgroup/kubepods/pod-db/postgres/hugetlb.2MB.events"),
            |t| ok(hugetlb_cgroup::parse_events("hugetlb.2MB.events", t)),
        ),
        (
            "hugetlb numa_stat v2",
            fixture!("cgroup-v2/fs/sys/fs/cgroup/kubepods/pod-db/hugetlb.2MB.numa_stat"),
            |t| ok(hugetlb_cgroup::parse_numa_stat("hugetlb.2MB.numa_stat", t)),
        ),
        (
            "hugetlb numa_stat v1",
            fixture!("cgroup-v1/fs/sys/fs/cgroup/hugetlb/kubepods/pod-db/hugetlb.2MB.numa_stat"),
            |t| ok(hugetlb_cgroup::parse_numa_stat("hugetlb.2MB.numa_stat", t)),
        ),
        ("hugetlb size name", "hugetlb.2MB.rsvd.max", |t| {
            hugetlb_cgroup::split_file_name(t);
            hugetlb_cgroup::hugetlb_size_from_name(t);
            Ok(())
        }),
        ("size", "2M", |t| {
            size::parse_size(t);
            Ok(())
        }),
    ]
}

/// A way real text goes wrong.
#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Truncate(usize),
    DropLine(usize),
    DupLine(usize),
    SwapLines(usize, usize),
    HugeNumber(usize),
    Insert(usize, String),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        any::<usize>().prop_map(Mutation::Truncate),
        any::<usize>().prop_map(Mutation::DropLine),
        any::<usize>().prop_map(Mutation::DupLine),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
        any::<usize>().prop_map(Mutation::HugeNumber),
        (any::<usize>(), "[ -~\t\n]{0,12}").prop_map(|(i, s)| Mutation::Insert(i, s)),
    ]
}

/// The i-th run of digits (mod 16) replaced by one that overflows u64
/// (and u64 × 1024).
fn huge_number(text: &str, i: usize) -> String {
    let target = i % 16 + 1;
    let mut out = String::new();
    let mut run = 0;
    let mut in_digits = false;
    for c in text.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                in_digits = true;
                run += 1;
                if run == target {
                    out.push_str("18446744073709551615999");
                }
            }
            if run == target {
                continue;
            }
        } else {
            in_digits = false;
        }
        out.push(c);
    }
    out
}

fn apply(text: &str, m: &Mutation) -> String {
    let bytes = text.as_bytes();
    let at = |i: usize| i % bytes.len().max(1);
    let mut lines: Vec<&str> = text.lines().collect();
    let n = lines.len().max(1);
    match m {
        Mutation::Flip(i, b) => {
            let mut v = bytes.to_vec();
            if !v.is_empty() {
                v[at(*i)] = *b;
            }
            String::from_utf8_lossy(&v).into_owned()
        }
        Mutation::Truncate(i) => String::from_utf8_lossy(&bytes[..at(*i)]).into_owned(),
        Mutation::Insert(i, s) => {
            let k = at(*i).min(bytes.len());
            format!(
                "{}{s}{}",
                String::from_utf8_lossy(&bytes[..k]),
                String::from_utf8_lossy(&bytes[k..])
            )
        }
        Mutation::HugeNumber(i) => huge_number(text, *i),
        Mutation::DropLine(i) | Mutation::DupLine(i) | Mutation::SwapLines(i, _)
            if lines.is_empty() =>
        {
            let _ = i;
            text.to_owned()
        }
        Mutation::DropLine(i) => {
            lines.remove(i % n);
            lines.join("\n") + "\n"
        }
        Mutation::DupLine(i) => {
            lines.insert(i % n, lines[i % n]);
            lines.join("\n") + "\n"
        }
        Mutation::SwapLines(a, b) => {
            lines.swap(a % n, b % n);
            lines.join("\n") + "\n"
        }
    }
}

fn check(name: &str, f: fn(&str) -> Result<(), ParseError>, text: &str) {
    if let Err(e) = f(text) {
        assert!(!e.path.is_empty(), "{name}: error without a file: {e}");
        assert!(
            e.to_string().contains(&e.path),
            "{name}: error text does not name the file: {e}"
        );
    }
}

#[test]
fn real_samples_parse() {
    for (name, sample, f) in parsers() {
        if let Err(e) = f(sample) {
            panic!("{name}: {e}");
        }
    }
}

#[test]
fn huge_numbers_are_errors_not_wrapped() {
    let text = huge_number(capture!("proc/meminfo"), 0);
    let e = meminfo::parse(&text).unwrap_err();
    assert!(e.line.is_some(), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in "(?s).{0,400}") {
        for (name, _, f) in parsers() {
            check(name, f, &text);
        }
    }

    #[test]
    fn mutated_kernel_text_never_panics(ms in proptest::collection::vec(mutation(), 1..6)) {
        for (name, sample, f) in parsers() {
            let mut text = sample.to_owned();
            for m in &ms {
                text = apply(&text, m);
            }
            check(name, f, &text);
        }
    }
}
