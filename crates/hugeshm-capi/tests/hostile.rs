//! The C ABI against hostile header bytes: a posix region's header is
//! bit-flipped and overwritten while `hugeshm_attach` is called through
//! the C entry points; every call returns HUGESHM_OK on an intact header
//! or one of the refusal codes with a message, never a panic (which would
//! come back as HUGESHM_ERROR_INTERNAL) or a crash.

use std::ffi::{CStr, CString};
use std::os::unix::fs::FileExt;
use std::ptr;

use ::hugeshm_region::{Backend, PageSize, Policy, RegionBuilder};
use hugeshm::*;

#[test]
fn c_attach_refuses_hostile_headers() {
    // Its region in /dev/shm is host state other tests compare under the
    // pool lock; the end checks that nothing is left.
    let pool = hugeshm_testkit::observe!();
    let name = format!("capi-hostile-{}", std::process::id());
    let (region, _) = RegionBuilder::new(1 << 20)
        .name(&name)
        .backend(Backend::Posix)
        .page_size(PageSize::Base)
        .policy(Policy::Only)
        .create()
        .unwrap();
    let path = region.path().unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let mut original = vec![0u8; 352];
    file.read_exact_at(&mut original, 0).unwrap();
    let cname = CString::new(name.clone()).unwrap();
    let mut seed = 0x5eed_u64 ^ std::process::id() as u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (mut ok, mut refused) = (0, 0);
    for round in 0..600 {
        let off = next() % original.len() as u64;
        match round % 3 {
            0 => file
                .write_all_at(&[original[off as usize] ^ (1 << (next() % 8))], off)
                .unwrap(),
            1 => {
                let junk: Vec<u8> = (0..1 + next() % 24).map(|_| next() as u8).collect();
                file.write_all_at(&junk, off).unwrap();
            }
            _ => file.write_all_at(&original, 0).unwrap(),
        }
        let mut out: *mut hugeshm_region = ptr::null_mut();
        let mut err: *mut hugeshm_error = ptr::null_mut();
        // SAFETY: a NUL-terminated name and two writable out pointers.
        let code =
            unsafe { hugeshm_attach(cname.as_ptr(), HUGESHM_BACKEND_POSIX, &mut out, &mut err) };
        if code == HUGESHM_OK {
            ok += 1;
            // SAFETY: a region handle just returned, detached once.
            assert_eq!(unsafe { hugeshm_detach(out, ptr::null_mut()) }, HUGESHM_OK);
        } else {
            refused += 1;
            assert!(
                [
                    HUGESHM_ERROR_NOT_OURS,
                    HUGESHM_ERROR_NEWER_LAYOUT,
                    HUGESHM_ERROR_HEADER_MISMATCH,
                    HUGESHM_ERROR_INCOMPLETE,
                ]
                .contains(&code),
                "round {round}: code {code}"
            );
            assert!(!err.is_null());
            // SAFETY: a live error object; its message lives as long as it.
            let msg = unsafe { CStr::from_ptr(hugeshm_error_message(err)) };
            assert!(!msg.to_bytes().is_empty());
            // SAFETY: freed once.
            unsafe { hugeshm_error_free(err) };
        }
    }
    println!("C attach: {ok} intact, {refused} refused");
    assert!(ok > 0 && refused > 0);
    file.write_all_at(&original, 0).unwrap();
    region.destroy().unwrap();
    pool.finish();
}
