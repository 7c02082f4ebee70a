//! NUMA memory policy: `mbind` of a mapping, the thread's policy.

use std::ffi::c_void;
use std::fmt;

use super::mapping::Mapping;
use crate::SysError;

impl Mapping {
    /// `mbind` of the whole mapping: where its pages are allocated from now
    /// on (call it before anything touches them). `strict`
    /// (`MPOL_MF_STRICT`) makes pages already faulted elsewhere an error.
    pub fn mbind(&self, policy: &MemPolicy, strict: bool) -> Result<(), SysError> {
        let (mode, nodes) = policy.mode_and_nodes();
        let mask = NodeMask::of(nodes);
        let call = || {
            format!(
                "mbind(addr={:#x}, len={}, {policy}{})",
                self.addr(),
                self.len,
                if strict { ", MPOL_MF_STRICT" } else { "" }
            )
        };
        if nodes.iter().any(|&n| n as usize >= NodeMask::BITS) {
            return Err(SysError::invalid(call(), "node number out of range"));
        }
        let flags: libc::c_ulong = if strict { MPOL_MF_STRICT } else { 0 };
        // SAFETY: a live mapping owned by self; the mask outlives the call
        // and `maxnode` matches its size; mbind changes placement, never
        // contents.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_mbind,
                self.base().cast::<c_void>(),
                self.len,
                mode,
                mask.0.as_ptr(),
                NodeMask::MAXNODE,
                flags,
            )
        };
        if rc < 0 {
            return Err(SysError::last_os(call()));
        }
        Ok(())
    }
}

/// `MPOL_MF_STRICT`: mbind fails if pages already sit elsewhere.
const MPOL_MF_STRICT: libc::c_ulong = 1;

/// A memory policy for [`Mapping::mbind`] (see `set_mempolicy(2)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemPolicy {
    /// The process's policy (`MPOL_DEFAULT`).
    Default,
    /// Only these nodes (`MPOL_BIND`).
    Bind(Vec<u32>),
    /// Round-robin over these nodes, page by page (`MPOL_INTERLEAVE`).
    Interleave(Vec<u32>),
    /// This node first, others when it is full (`MPOL_PREFERRED`).
    Preferred(u32),
    /// Interleave weighted by `/sys/kernel/mm/mempolicy/weighted_interleave`
    /// (`MPOL_WEIGHTED_INTERLEAVE`, Linux 6.9+).
    WeightedInterleave(Vec<u32>),
}

impl MemPolicy {
    fn mode_and_nodes(&self) -> (libc::c_int, &[u32]) {
        match self {
            MemPolicy::Default => (0, &[]),
            MemPolicy::Preferred(n) => (1, std::slice::from_ref(n)),
            MemPolicy::Bind(n) => (2, n),
            MemPolicy::Interleave(n) => (3, n),
            MemPolicy::WeightedInterleave(n) => (6, n),
        }
    }
}

impl fmt::Display for MemPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |n: &[u32]| n.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        match self {
            MemPolicy::Default => f.write_str("MPOL_DEFAULT"),
            MemPolicy::Bind(n) => write!(f, "MPOL_BIND {}", list(n)),
            MemPolicy::Interleave(n) => write!(f, "MPOL_INTERLEAVE {}", list(n)),
            MemPolicy::Preferred(n) => write!(f, "MPOL_PREFERRED {n}"),
            MemPolicy::WeightedInterleave(n) => write!(f, "MPOL_WEIGHTED_INTERLEAVE {}", list(n)),
        }
    }
}

/// A node mask of 1024 nodes, as the kernel's mempolicy calls take it.
struct NodeMask([libc::c_ulong; 16]);

impl NodeMask {
    const BITS: usize = 1024;
    /// The kernel reads `maxnode - 1` bits.
    const MAXNODE: libc::c_ulong = Self::BITS as libc::c_ulong + 1;

    fn of(nodes: &[u32]) -> NodeMask {
        let mut m = [0 as libc::c_ulong; 16];
        for &n in nodes {
            let n = n as usize;
            if n < Self::BITS {
                m[n / 64] |= 1 << (n % 64);
            }
        }
        NodeMask(m)
    }

    fn nodes(&self) -> Vec<u32> {
        (0..Self::BITS)
            .filter(|&n| self.0[n / 64] & (1 << (n % 64)) != 0)
            .map(|n| n as u32)
            .collect()
    }
}

/// The calling thread's memory policy (`get_mempolicy(2)`): what `numactl
/// --membind`, `--interleave` or `--preferred` set for the process.
pub fn thread_mempolicy() -> Result<MemPolicy, SysError> {
    let mut mode: libc::c_int = 0;
    let mut mask = NodeMask([0; 16]);
    // SAFETY: mode and mask are valid out pointers; maxnode matches the
    // mask's size; no address is given (flags 0: the thread's policy).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut libc::c_int,
            mask.0.as_mut_ptr(),
            NodeMask::MAXNODE,
            std::ptr::null_mut::<c_void>(),
            0 as libc::c_ulong,
        )
    };
    if rc < 0 {
        return Err(SysError::last_os("get_mempolicy()".to_owned()));
    }
    // Mode flags (MPOL_F_STATIC_NODES, ...) live in the high bits.
    Ok(match mode & 0xff {
        1 => match mask.nodes().first() {
            Some(&n) => MemPolicy::Preferred(n),
            None => MemPolicy::Default,
        },
        2 => MemPolicy::Bind(mask.nodes()),
        3 => MemPolicy::Interleave(mask.nodes()),
        6 => MemPolicy::WeightedInterleave(mask.nodes()),
        _ => MemPolicy::Default,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base_page_size as page;
    use crate::MapOptions;

    #[test]
    fn mbind_to_the_node_we_have() {
        let m = MapOptions::new(4 * page()).shared().map_anon().unwrap();
        // Node 0 exists on every NUMA-capable kernel; without NUMA the
        // call is ENOSYS.
        match m.mbind(&MemPolicy::Bind(vec![0]), true) {
            Ok(()) => {}
            Err(e) => assert_eq!(e.errno(), Some(libc::ENOSYS), "{e}"),
        }
        assert!(m.mbind(&MemPolicy::Bind(vec![5000]), false).is_err());
        assert_eq!(
            MemPolicy::Interleave(vec![0, 1]).to_string(),
            "MPOL_INTERLEAVE 0,1"
        );
        let p = thread_mempolicy().unwrap_or(MemPolicy::Default);
        assert!(!matches!(p, MemPolicy::Bind(ref n) if n.is_empty()));
        assert_eq!(NodeMask::of(&[0, 65, 1023]).nodes(), vec![0, 65, 1023]);
    }
}
