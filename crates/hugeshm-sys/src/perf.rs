//! Hardware event counters of the calling thread (`perf_event_open(2)`):
//! dTLB misses, for what huge pages save per transaction.
//!
//! Where the kernel cannot count (a VM without a virtual PMU: `ENOENT`;
//! `perf_event_paranoid` too high for the caller: `EACCES`/`EPERM`), opening
//! fails with that errno and [`PerfEvent::unavailable_reason`] says why in
//! words.

use std::os::fd::{FromRawFd, OwnedFd};

use crate::SysError;

/// `PERF_TYPE_SOFTWARE`.
const PERF_TYPE_SOFTWARE: u64 = 1;
/// `PERF_COUNT_SW_PAGE_FAULTS`.
const SW_PAGE_FAULTS: u64 = 2;
/// `PERF_TYPE_HW_CACHE`.
const PERF_TYPE_HW_CACHE: u64 = 3;
/// `PERF_COUNT_HW_CACHE_DTLB`.
const CACHE_DTLB: u64 = 3;
/// `PERF_COUNT_HW_CACHE_RESULT_MISS`.
const RESULT_MISS: u64 = 1;
/// `PERF_FLAG_FD_CLOEXEC`.
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
/// `exclude_kernel` and `exclude_hv` bits of the attr flags word.
const EXCLUDE_KERNEL_HV: u64 = (1 << 5) | (1 << 6);
/// `PERF_ATTR_SIZE_VER7`: the attr size passed (older fields only).
const ATTR_SIZE: u64 = 128;

/// A hardware event to count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PerfEvent {
    /// dTLB load misses (`dTLB-load-misses`).
    DtlbLoadMisses,
    /// dTLB store misses (`dTLB-store-misses`).
    DtlbStoreMisses,
    /// Page faults (`page-faults`, a software event the kernel counts
    /// with or without a PMU).
    PageFaults,
}

impl PerfEvent {
    /// `(type, config)` of the attr.
    fn type_config(self) -> (u64, u64) {
        let op = match self {
            PerfEvent::DtlbLoadMisses => 0,
            PerfEvent::DtlbStoreMisses => 1,
            PerfEvent::PageFaults => return (PERF_TYPE_SOFTWARE, SW_PAGE_FAULTS),
        };
        (
            PERF_TYPE_HW_CACHE,
            CACHE_DTLB | (op << 8) | (RESULT_MISS << 16),
        )
    }

    /// The `perf` name of the event.
    pub fn name(self) -> &'static str {
        match self {
            PerfEvent::DtlbLoadMisses => "dTLB-load-misses",
            PerfEvent::DtlbStoreMisses => "dTLB-store-misses",
            PerfEvent::PageFaults => "page-faults",
        }
    }

    /// Why a failed open cannot count, in words (with the fix where there
    /// is one).
    pub fn unavailable_reason(err: &SysError) -> String {
        match err.errno() {
            Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
                "the CPU (or the VM) exposes no hardware counter for dTLB misses \
                 (no PMU in /sys/bus/event_source/devices/cpu)"
                    .to_owned()
            }
            Some(libc::EACCES) | Some(libc::EPERM) => {
                "perf_event_open is not allowed: lower kernel.perf_event_paranoid \
                 (sysctl kernel.perf_event_paranoid=1) or run as root"
                    .to_owned()
            }
            _ => err.to_string(),
        }
    }
}

/// An open counter of one event for the calling thread (user space only),
/// counting from the moment it is opened; closed on drop.
#[derive(Debug)]
pub struct PerfCounter {
    fd: OwnedFd,
    event: PerfEvent,
}

impl PerfCounter {
    /// Opens a counter of `event` for the calling thread, on any CPU.
    pub fn open(event: PerfEvent) -> Result<PerfCounter, SysError> {
        let mut attr = [0u64; (ATTR_SIZE / 8) as usize];
        let (kind, config) = event.type_config();
        attr[0] = kind | (ATTR_SIZE << 32);
        attr[1] = config;
        attr[5] = EXCLUDE_KERNEL_HV;
        let call = || format!("perf_event_open({}, pid=0, cpu=-1)", event.name());
        // SAFETY: attr is a zero-filled perf_event_attr of the size given in
        // its size field, alive for the call; the kernel only reads it. The
        // returned descriptor is new and owned by nobody else.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                attr.as_ptr(),
                0 as libc::pid_t,
                -1 as libc::c_int,
                -1 as libc::c_int,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(SysError::last_os(call()));
        }
        // SAFETY: fd is a fresh descriptor returned by the kernel.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
        Ok(PerfCounter { fd, event })
    }

    /// The count so far.
    pub fn read(&self) -> Result<u64, SysError> {
        let mut buf = [0u8; 8];
        let n = rustix::io::read(&self.fd, &mut buf)
            .map_err(|e| SysError::os(format!("read({} counter)", self.event.name()), e))?;
        if n != 8 {
            return Err(SysError::invalid(
                format!("read({} counter)", self.event.name()),
                format!("{n} bytes instead of 8"),
            ));
        }
        Ok(u64::from_ne_bytes(buf))
    }

    /// The event counted.
    pub fn event(&self) -> PerfEvent {
        self.event
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The software event needs no PMU, so the open and read path is
    /// checked for real on any host: 300 first touches are 300 faults.
    #[test]
    fn page_faults_are_counted() {
        let c = match PerfCounter::open(PerfEvent::PageFaults) {
            Ok(c) => c,
            Err(e) if matches!(e.errno(), Some(libc::EACCES) | Some(libc::EPERM)) => {
                eprintln!(
                    "SKIP page_faults_are_counted: {}",
                    PerfEvent::unavailable_reason(&e)
                );
                return;
            }
            Err(e) => panic!("{e}"),
        };
        assert_eq!(c.event().name(), "page-faults");
        let m = crate::MapOptions::new(300 * 4096).map_anon().expect("mmap");
        let before = c.read().unwrap();
        let mut m = m;
        for i in 0..300 {
            m.write_at(i * 4096, &[1]).unwrap();
        }
        let faults = c.read().unwrap() - before;
        assert!(
            faults >= 300,
            "{faults} faults counted for 300 first touches"
        );
        assert!(
            faults < 400,
            "{faults} faults counted for 300 first touches"
        );
    }

    #[test]
    fn counter_counts_or_says_why_not() {
        match PerfCounter::open(PerfEvent::DtlbLoadMisses) {
            Ok(c) => {
                let a = c.read().unwrap();
                let v: Vec<u64> = (0..1_000_000).collect();
                std::hint::black_box(&v);
                assert!(c.read().unwrap() >= a);
            }
            Err(e) => {
                let why = PerfEvent::unavailable_reason(&e);
                assert!(!why.is_empty());
                assert!(e.errno().is_some(), "{e}");
            }
        }
    }
}
