//! `/proc/PID/status`.
//!
//! Every line is `Key:<TAB>value`. Only the fields hugeshm uses are kept;
//! unknown keys are skipped (kernels keep adding them). Kernel threads print
//! no `Vm*` lines at all, so those fields are `Option`.

use crate::error::{parse_u64, ParseError};
use serde::{Deserialize, Serialize};

const PATH: &str = "/proc/PID/status";

/// The fields of `/proc/PID/status` hugeshm uses. Sizes in bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PidStatus {
    /// `Name`: the command name (`comm`), exactly as the kernel prints it
    /// (it may contain spaces; the kernel escapes `\n` and `\\` itself).
    pub name: String,
    /// `Tgid`: the thread-group (process) id.
    pub tgid: Option<u32>,
    /// `PPid`: the parent's process id.
    pub ppid: Option<u32>,
    /// The real uid: the first number of `Uid:`.
    pub uid: Option<u32>,
    /// `VmRSS`: resident memory (hugetlb pages are not counted here).
    pub vm_rss_bytes: Option<u64>,
    /// `VmPTE`: memory used by this process's page tables.
    pub vm_pte_bytes: Option<u64>,
    /// `THP_enabled` (Linux 6.0+): false when the process turned
    /// transparent huge pages off (`prctl(PR_SET_THP_DISABLE)`), which
    /// refuses `MADV_COLLAPSE` on its memory too.
    #[serde(default)]
    pub thp_enabled: Option<bool>,
    /// `HugetlbPages`: memory of hugetlb pages mapped by this process.
    pub hugetlb_pages_bytes: Option<u64>,
    /// `VmLck`: memory locked with `mlock`.
    pub vm_lck_bytes: Option<u64>,
    /// The file-system gid: the fourth number of `Gid:` (what the kernel
    /// checks against `vm.hugetlb_shm_group`, with `groups`).
    #[serde(default)]
    pub fs_gid: Option<u32>,
    /// `Groups`: supplementary groups.
    #[serde(default)]
    pub groups: Vec<u32>,
    /// `CapEff`: effective capabilities, as a bit mask.
    #[serde(default)]
    pub cap_eff: Option<u64>,
}

/// `CAP_IPC_LOCK`: lock memory without the memlock limit, SysV
/// `SHM_HUGETLB` without `vm.hugetlb_shm_group`.
pub const CAP_IPC_LOCK: u32 = 14;

impl PidStatus {
    /// Whether the process has `CAP_IPC_LOCK` in its effective set.
    pub fn has_cap_ipc_lock(&self) -> bool {
        self.cap_eff.is_some_and(|c| c & (1 << CAP_IPC_LOCK) != 0)
    }

    /// Whether the process is in group `gid` (file-system or
    /// supplementary).
    pub fn in_group(&self, gid: u32) -> bool {
        self.fs_gid == Some(gid) || self.groups.contains(&gid)
    }
}

/// Parses a decimal `u32`, naming file, line and text on failure.
fn parse_u32(line: usize, what: &str, text: &str) -> Result<u32, ParseError> {
    let v = parse_u64(PATH, line, what, text)?;
    u32::try_from(v)
        .map_err(|_| ParseError::at(PATH, line, format!("{what}: {v} does not fit in 32 bits")))
}

fn parse_kb(line: usize, what: &str, text: &str) -> Result<u64, ParseError> {
    crate::error::parse_kb(PATH, line, what, text)
}

/// Parses `/proc/PID/status`. Fails when there is no `Name:` line or a field
/// hugeshm uses cannot be read.
pub fn parse(text: &str) -> Result<PidStatus, ParseError> {
    let mut s = PidStatus::default();
    let mut have_name = false;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let (key, value) = raw.split_once(':').ok_or_else(|| {
            ParseError::at(PATH, n, format!("expected \"Key:\\tvalue\", found {raw:?}"))
        })?;
        match key {
            // Only the first Name line counts.
            "Name" if !have_name => {
                // The name is everything after "Name:\t"; it may have
                // leading or trailing spaces of its own.
                s.name = match value.strip_prefix('\t') {
                    Some(rest) => rest.to_string(),
                    None => value.trim_start().to_string(),
                };
                have_name = true;
            }
            "Tgid" => s.tgid = Some(parse_u32(n, key, value)?),
            "PPid" => s.ppid = Some(parse_u32(n, key, value)?),
            "Uid" => {
                let first = value.split_whitespace().next().ok_or_else(|| {
                    ParseError::at(PATH, n, "Uid: expected four numbers, found nothing")
                })?;
                s.uid = Some(parse_u32(n, key, first)?);
            }
            "VmRSS" => s.vm_rss_bytes = Some(parse_kb(n, key, value)?),
            "VmPTE" => s.vm_pte_bytes = Some(parse_kb(n, key, value)?),
            "THP_enabled" => s.thp_enabled = Some(value.trim() != "0"),
            "HugetlbPages" => s.hugetlb_pages_bytes = Some(parse_kb(n, key, value)?),
            "VmLck" => s.vm_lck_bytes = Some(parse_kb(n, key, value)?),
            "Gid" => {
                let fs = value
                    .split_whitespace()
                    .nth(3)
                    .ok_or_else(|| ParseError::at(PATH, n, "Gid: expected four numbers"))?;
                s.fs_gid = Some(parse_u32(n, key, fs)?);
            }
            "Groups" => {
                s.groups = value
                    .split_whitespace()
                    .map(|g| parse_u32(n, key, g))
                    .collect::<Result<_, _>>()?;
            }
            "CapEff" => {
                s.cap_eff = Some(u64::from_str_radix(value.trim(), 16).map_err(|_| {
                    ParseError::at(
                        PATH,
                        n,
                        format!("CapEff: not a hex mask: {:?}", value.trim()),
                    )
                })?);
            }
            _ => {}
        }
    }
    if !have_name {
        return Err(ParseError::file(
            PATH,
            "no \"Name:\" line (empty or not a status file)",
        ));
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/proc/self/status` of `cat` on Linux 6.18 (after mapping hugetlb pages).
    const REAL: &str = "Name:\tcat
Umask:\t0022
State:\tR (running)
Tgid:\t2653
Ngid:\t0
Pid:\t2653
PPid:\t2649
TracerPid:\t0
Uid:\t1000\t1001\t1002\t1003
Gid:\t0\t0\t0\t0
FDSize:\t256
Groups:\t 
NStgid:\t2653
NSpid:\t2653
NSpgid:\t2649
NSsid:\t2026
Kthread:\t0
VmPeak:\t   10712 kB
VmSize:\t   10676 kB
VmLck:\t      16 kB
VmPin:\t       0 kB
VmHWM:\t    1584 kB
VmRSS:\t    1584 kB
RssAnon:\t     104 kB
RssFile:\t    1472 kB
RssShmem:\t       8 kB
VmData:\t    2272 kB
VmStk:\t     132 kB
VmExe:\t       4 kB
VmLib:\t    1528 kB
VmPTE:\t      40 kB
VmSwap:\t       0 kB
HugetlbPages:\t    8192 kB
CoreDumping:\t0
THP_enabled:\t1
untag_mask:\t0xffffffffffffffff
Threads:\t1
SigQ:\t0/96365
SigPnd:\t0000000000000000
ShdPnd:\t0000000000000000
SigBlk:\t0000000000000000
SigIgn:\t0000000000000000
SigCgt:\t0000000000000000
CapInh:\t0000000000000000
CapPrm:\t000001fffeffffff
CapEff:\t000001fffeffffff
CapBnd:\t000001fffeffffff
CapAmb:\t0000000000000000
NoNewPrivs:\t0
Seccomp:\t0
Seccomp_filters:\t0
Speculation_Store_Bypass:\tvulnerable
SpeculationIndirectBranch:\talways enabled
Cpus_allowed:\t3
Cpus_allowed_list:\t0-1
Mems_allowed:\t00000000,00000001
Mems_allowed_list:\t0
voluntary_ctxt_switches:\t0
nonvoluntary_ctxt_switches:\t0
";

    /// A kernel thread: no `Vm*` lines, no `HugetlbPages`.
    const KTHREAD: &str = "Name:\tkworker/0:1-events
Umask:\t0000
State:\tI (idle)
Tgid:\t42
Ngid:\t0
Pid:\t42
PPid:\t2
TracerPid:\t0
Uid:\t0\t0\t0\t0
Gid:\t0\t0\t0\t0
FDSize:\t64
Groups:\t 
Kthread:\t1
Threads:\t1
";

    #[test]
    fn groups_and_capabilities() {
        let s =
            parse("Name:\tdb\nGid:\t5\t5\t5\t6\nGroups:\t27 1001 \nCapEff:\t0000000000000000\n")
                .unwrap();
        assert_eq!(s.fs_gid, Some(6));
        assert_eq!(s.groups, vec![27, 1001]);
        assert!(s.in_group(1001) && s.in_group(6) && !s.in_group(5));
        assert!(!s.has_cap_ipc_lock());
        assert!(parse("Name:\tx\nCapEff:\tzz\n").is_err());
        assert!(parse("Name:\tx\nGid:\t1\n").is_err());
    }

    #[test]
    fn real_text() {
        let s = parse(REAL).unwrap();
        assert_eq!(s.name, "cat");
        assert_eq!(s.tgid, Some(2653));
        assert_eq!(s.ppid, Some(2649));
        assert_eq!(s.uid, Some(1000));
        assert_eq!(s.vm_rss_bytes, Some(1584 * 1024));
        assert_eq!(s.vm_pte_bytes, Some(40 * 1024));
        assert_eq!(s.thp_enabled, Some(true));
        assert_eq!(s.hugetlb_pages_bytes, Some(8192 * 1024));
        assert_eq!(s.vm_lck_bytes, Some(16 * 1024));
        assert_eq!((s.fs_gid, s.groups.len()), (Some(0), 0));
        assert!(s.has_cap_ipc_lock() && s.in_group(0) && !s.in_group(7));
    }

    #[test]
    fn kernel_thread_has_no_vm_fields() {
        let s = parse(KTHREAD).unwrap();
        assert_eq!(s.name, "kworker/0:1-events");
        assert_eq!(s.tgid, Some(42));
        assert_eq!(s.ppid, Some(2));
        assert_eq!(s.uid, Some(0));
        assert_eq!(s.vm_rss_bytes, None);
        assert_eq!(s.vm_pte_bytes, None);
        assert_eq!(s.hugetlb_pages_bytes, None);
        assert_eq!(s.vm_lck_bytes, None);
    }

    #[test]
    fn odd_names() {
        // Spaces, colons and a trailing space are part of the name.
        let s = parse("Name:\tWeb Content: x \nTgid:\t7\n").unwrap();
        assert_eq!(s.name, "Web Content: x ");
        // An empty name is still a name.
        let s = parse("Name:\t\nTgid:\t7\n").unwrap();
        assert_eq!(s.name, "");
        // Without the tab (not what the kernel prints) leading blanks are dropped.
        let s = parse("Name:   cat\n").unwrap();
        assert_eq!(s.name, "cat");
        // Only the first Name line counts.
        let s = parse("Name:\tone\nName:\ttwo\n").unwrap();
        assert_eq!(s.name, "one");
        // Non-ASCII and escaped text is kept as printed.
        let s = parse("Name:\tné\\\\w\\n\n").unwrap();
        assert_eq!(s.name, "né\\\\w\\n");
    }

    #[test]
    fn missing_name() {
        let e = parse("Tgid:\t1\nPPid:\t0\n").unwrap_err();
        assert_eq!(e.path, "/proc/PID/status");
        assert_eq!(e.line, None);
        assert!(parse("").is_err());
        assert!(parse("\n\n").is_err());
    }

    #[test]
    fn malformed() {
        let e = parse("Name:\tx\nTgid:\tabc\n").unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(e.to_string().contains("Tgid"), "{e}");
        let e = parse("Name:\tx\nPPid:\t99999999999\n").unwrap_err();
        assert_eq!(e.line, Some(2));
        let e = parse("Name:\tx\nUid:\t\n").unwrap_err();
        assert_eq!(e.line, Some(2));
        let e = parse("Name:\tx\nUid:\t-1\t0\t0\t0\n").unwrap_err();
        assert_eq!(e.line, Some(2));
        let e = parse("Name:\tx\nVmRSS:\t 12 MB\n").unwrap_err();
        assert_eq!(e.line, Some(2));
        let e = parse("Name:\tx\nVmPTE:\t\n").unwrap_err();
        assert_eq!(e.line, Some(2));
        let e = parse("Name:\tx\nHugetlbPages:\t18446744073709551615 kB\n").unwrap_err();
        assert_eq!(e.line, Some(2));
        let e = parse("Name:\tx\nno colon here\n").unwrap_err();
        assert_eq!(e.line, Some(2));
        assert_eq!(e.path, "/proc/PID/status");
    }

    #[test]
    fn unknown_fields_are_ignored() {
        let s = parse("Name:\tx\nFutureField:\twhatever ::: kB\nVmLck:\t0 kB\n").unwrap();
        assert_eq!(s.vm_lck_bytes, Some(0));
    }

    #[test]
    fn truncated() {
        // Cut in the middle of a number: the unit is gone, so it is an error.
        let cut = &REAL[..REAL.find("VmRSS:\t    15").unwrap() + "VmRSS:\t    15".len()];
        let e = parse(cut).unwrap_err();
        assert_eq!(e.line, Some(23));
        // Cut at a line boundary: what is there is read.
        let cut = &REAL[..REAL.find("VmRSS").unwrap()];
        let s = parse(cut).unwrap();
        assert_eq!(s.vm_lck_bytes, Some(16 * 1024));
        assert_eq!(s.vm_rss_bytes, None);
        // Every prefix parses or fails, never panics.
        for end in 0..=REAL.len() {
            if REAL.is_char_boundary(end) {
                let _ = parse(&REAL[..end]);
            }
        }
    }
}
