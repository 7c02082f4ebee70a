//! Shared memory objects: POSIX (`shm_open`, files in `/dev/shm`) and
//! System V (`shmget`, `shmat`).

mod devices;
mod posix;
mod sysv;

pub use devices::sysv_devices;
pub use posix::{posix_shm_create, posix_shm_open, posix_shm_unlink};
pub use sysv::{
    shm_attach, shm_attach_placed, shm_get, shm_peek, shm_remove, shm_stat, ShmFlags, ShmStat,
    IPC_PRIVATE, SHM_DEST, SHM_LOCKED,
};
