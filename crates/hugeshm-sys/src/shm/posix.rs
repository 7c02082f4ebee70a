//! POSIX shared memory: `shm_open`, `shm_unlink` (files in `/dev/shm`).

use std::os::fd::OwnedFd;

use crate::fs::OpenCheck;
use crate::SysError;

/// `shm_open(name, O_RDWR|O_CREAT|O_EXCL, mode)`: creates a new POSIX shared
/// memory object (a file in `/dev/shm`). Fails with `EEXIST` if it exists.
pub fn posix_shm_create(name: &str, mode: u32) -> Result<OwnedFd, SysError> {
    use rustix::shm;
    shm::open(
        name,
        shm::OFlags::RDWR | shm::OFlags::CREATE | shm::OFlags::EXCL,
        shm::Mode::from_bits_truncate(mode),
    )
    .map_err(|e| {
        SysError::os(
            format!("shm_open(name={name:?}, O_RDWR|O_CREAT|O_EXCL, mode={mode:#o})"),
            e,
        )
    })
}

/// Opens an existing POSIX shared memory object read-write: what
/// `shm_open(name, O_RDWR)` opens, `/dev/shm/NAME`, through
/// [`OpenCheck`] (no link followed, no FIFO waited on, a regular file).
pub fn posix_shm_open(name: &str) -> Result<OwnedFd, SysError> {
    let name = name.strip_prefix('/').unwrap_or(name);
    if name.is_empty() || name.contains('/') {
        return Err(SysError::invalid(
            format!("shm_open(name={name:?})"),
            "a POSIX shared memory name is one path component",
        ));
    }
    let path = std::path::Path::new("/dev/shm").join(name);
    Ok(OpenCheck::read_write().open(&path)?.into_fd())
}

/// `shm_unlink(name)`: removes a POSIX shared memory object from `/dev/shm`.
pub fn posix_shm_unlink(name: &str) -> Result<(), SysError> {
    rustix::shm::unlink(name).map_err(|e| SysError::os(format!("shm_unlink(name={name:?})"), e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base_page_size as page;
    use crate::{set_len, MapOptions, SysError};
    use std::os::fd::AsFd;

    #[test]
    fn posix_shm_create_open_unlink() {
        let name = format!("hugeshm-region-test-{}", std::process::id());
        let fd = posix_shm_create(&name, 0o600).expect("shm_open");
        let res = (|| -> Result<(), SysError> {
            assert_eq!(
                posix_shm_create(&name, 0o600).unwrap_err().errno(),
                Some(libc::EEXIST)
            );
            set_len(fd.as_fd(), page() as u64)?;
            let mut m = MapOptions::new(page()).map(fd.as_fd())?;
            m.write_at(0, b"q")?;
            let fd2 = posix_shm_open(&name)?;
            let m2 = MapOptions::new(page()).map(fd2.as_fd())?;
            let mut b = [0u8];
            m2.read_at(0, &mut b)?;
            assert_eq!(&b, b"q");
            Ok(())
        })();
        posix_shm_unlink(&name).expect("shm_unlink");
        res.unwrap();
        assert!(posix_shm_unlink(&name).is_err());
    }
}
