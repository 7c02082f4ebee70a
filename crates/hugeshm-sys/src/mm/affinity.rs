//! CPU affinity of the calling thread (`sched_getaffinity`,
//! `sched_setaffinity`): where the threads that touch memory run.

use crate::SysError;

/// The CPUs the calling thread may run on (`sched_getaffinity(2)`),
/// ascending.
pub fn affinity() -> Result<Vec<u32>, SysError> {
    let set = rustix::thread::sched_getaffinity(None)
        .map_err(|e| SysError::os("sched_getaffinity(0)".to_owned(), e))?;
    Ok((0..rustix::thread::CpuSet::MAX_CPU)
        .filter(|&c| set.is_set(c))
        .map(|c| c as u32)
        .collect())
}

/// Pins the calling thread to `cpus` (`sched_setaffinity(2)`); threads it
/// starts afterwards inherit the set. An empty list, or a CPU beyond
/// `CPU_SETSIZE`, is rejected before the call.
pub fn set_affinity(cpus: &[u32]) -> Result<(), SysError> {
    let list = cpus
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let call = || format!("sched_setaffinity(0, cpus={list})");
    if cpus.is_empty() {
        return Err(SysError::invalid(call(), "no CPU given"));
    }
    let mut set = rustix::thread::CpuSet::new();
    for &c in cpus {
        if c as usize >= rustix::thread::CpuSet::MAX_CPU {
            return Err(SysError::invalid(
                call(),
                format!("CPU {c} is beyond CPU_SETSIZE"),
            ));
        }
        set.set(c as usize);
    }
    rustix::thread::sched_setaffinity(None, &set).map_err(|e| SysError::os(call(), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affinity_round_trips() {
        let cpus = affinity().expect("sched_getaffinity");
        assert!(!cpus.is_empty());
        set_affinity(&cpus[..1]).expect("pin to one CPU");
        assert_eq!(affinity().unwrap(), cpus[..1].to_vec());
        set_affinity(&cpus).expect("restore");
        assert_eq!(affinity().unwrap(), cpus);
        assert!(set_affinity(&[]).is_err());
        assert!(set_affinity(&[u32::MAX]).is_err());
    }
}
