//! hugeshm in the QEMU test guest (`hugeshm_testkit::guest`,
//! `scripts/guest/`): a real 2-node kernel, an emulated NVDIMM, a
//! memory-only node. Each module boots the guest with its scenario of
//! `../guest-scenarios/` once and checks what it printed; the testkit boots
//! one guest at a time in this process.
//!
//! One test binary with a module per former test file (each module's docs
//! say what it covers). One module alone:
//! `cargo test -p hugeshm --test guest guest_pmem:: -- --nocapture`.

mod guest;
mod guest_bench_numa;
mod guest_collapse;
mod guest_dax;
mod guest_dmbc;
mod guest_memory_only_node;
mod guest_numa_doctor;
mod guest_numa_region;
mod guest_pmem;
mod guest_run;
mod shared;
