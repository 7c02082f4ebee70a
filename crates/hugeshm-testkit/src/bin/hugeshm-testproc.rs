//! `hugeshm-testproc`: creates shared-memory objects for integration tests.
//!
//! ```text
//! hugeshm-testproc [--touch] [--orphan-sysv] [--page-size BYTES] [--key 0xKEY] SPEC...
//! ```
//!
//! Each SPEC is `KIND:SIZE` (or `devshm:NAME:SIZE`); see [`USAGE`]. Every
//! object is created and mapped/attached (and with `--touch` pre-faulted),
//! then one JSON line (a `hugeshm_testkit::TestProcReport`) is printed and
//! the process blocks until stdin reaches EOF, then removes everything it
//! made. With `--orphan-sysv` it exits right after printing, leaving its
//! System V segments in place (unattached, not marked for removal).
//!
//! Only the safe wrappers of `hugeshm_region::sys` are used.

#![forbid(unsafe_code)]

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::process::ExitCode;

use hugeshm_sys::{self as sys, Mapping, ShmFlags, SysError};
use hugeshm_testkit::{TestObject, TestProcReport};

const USAGE: &str = "\
usage: hugeshm-testproc [OPTIONS] SPEC...

SPEC (SIZE in bytes, or with K/M/G suffix, binary units):
  sysv-huge:SIZE           SysV segment, SHM_HUGETLB, attached
  sysv-plain:SIZE          SysV segment, base pages, attached
  memfd-huge:SIZE          memfd MFD_HUGETLB, mapped MAP_SHARED
  memfd-plain:SIZE         memfd, mapped MAP_SHARED
  private-huge:SIZE        anonymous MAP_PRIVATE|MAP_HUGETLB
  private-plain:SIZE       anonymous MAP_PRIVATE
  anon-shared-huge:SIZE    anonymous MAP_SHARED|MAP_HUGETLB
  anon-shared-plain:SIZE   anonymous MAP_SHARED
  devshm:NAME:SIZE         /dev/shm/NAME (shm_open O_EXCL), mapped MAP_SHARED
  hugetlbfs:PATH:SIZE      a new file PATH on a hugetlbfs mount, mapped MAP_SHARED
  dax:PATH:SIZE[:OFFSET]   a new file PATH (on a -o dax mount) of OFFSET+SIZE bytes,
                           allocated whole (fallocate), SIZE bytes of it mapped
                           MAP_SHARED from file offset OFFSET (default 0, a
                           multiple of 4096) at a 2 MiB-aligned address; or an
                           existing device-dax /dev/daxX.Y, mapped the same way

OPTIONS:
  --touch             pre-fault every page (MADV_POPULATE_WRITE, falling back
                      to touching one byte per page on old kernels)
  --orphan-sysv       exit right after the report, leaving SysV segments
                      (nattch 0, not IPC_RMID'd) for the caller to remove
  --keep-files        leave hugetlbfs files in place on exit (the caller
                      removes them)
  --page-size BYTES   huge page size for *-huge kinds (default 2097152)
  --align BYTES       attach or map each sysv-plain, memfd-plain, devshm and
                      anon-shared-plain object at a multiple of BYTES
  --map-offset BYTES  map memfd-plain and devshm objects from this file offset
                      (a multiple of 4096; the file is that much longer)
  --forks N           after creating (and touching) everything, fork N children
                      that hold the same mappings and write one byte of each
                      page every 20 ms until this process ends (their pids in
                      the report's children)
  --write-every MS    the children's interval (default 20); 0: they write
                      each page once, then only hold the mappings
  --key 0xKEY         SysV key of the first sysv object (the next get KEY+1,
                      ...); default IPC_PRIVATE
  -h, --help          this text

Prints one JSON line {\"pid\":..,\"objects\":[..]} to stdout, then waits for EOF
on stdin and removes everything it created.";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    SysvHuge,
    SysvPlain,
    MemfdHuge,
    MemfdPlain,
    PrivateHuge,
    PrivatePlain,
    AnonSharedHuge,
    AnonSharedPlain,
    DevShm,
    Hugetlbfs,
    Dax,
}

impl Kind {
    fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "sysv-huge" => Kind::SysvHuge,
            "sysv-plain" => Kind::SysvPlain,
            "memfd-huge" => Kind::MemfdHuge,
            "memfd-plain" => Kind::MemfdPlain,
            "private-huge" => Kind::PrivateHuge,
            "private-plain" => Kind::PrivatePlain,
            "anon-shared-huge" => Kind::AnonSharedHuge,
            "anon-shared-plain" => Kind::AnonSharedPlain,
            "devshm" => Kind::DevShm,
            "hugetlbfs" => Kind::Hugetlbfs,
            "dax" => Kind::Dax,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Kind::SysvHuge => "sysv-huge",
            Kind::SysvPlain => "sysv-plain",
            Kind::MemfdHuge => "memfd-huge",
            Kind::MemfdPlain => "memfd-plain",
            Kind::PrivateHuge => "private-huge",
            Kind::PrivatePlain => "private-plain",
            Kind::AnonSharedHuge => "anon-shared-huge",
            Kind::AnonSharedPlain => "anon-shared-plain",
            Kind::DevShm => "devshm",
            Kind::Hugetlbfs => "hugetlbfs",
            Kind::Dax => "dax",
        }
    }

    fn is_huge(self) -> bool {
        matches!(
            self,
            Kind::SysvHuge
                | Kind::MemfdHuge
                | Kind::PrivateHuge
                | Kind::AnonSharedHuge
                | Kind::Hugetlbfs
        )
    }
}

#[derive(Debug)]
struct Spec {
    kind: Kind,
    name: Option<String>,
    size: u64,
    /// File offset of the mapping (`dax`).
    offset: u64,
}

#[derive(Debug)]
struct Options {
    specs: Vec<Spec>,
    touch: bool,
    orphan_sysv: bool,
    keep_files: bool,
    page_size: u64,
    key: i32,
    align: Option<usize>,
    map_offset: u64,
    forks: u32,
    write_every_ms: u64,
}

/// `4096`, `0x1000`, `64K`, `2M`, `2MiB`, `1G` (hugeshm-parse's sizes, plus hex).
fn parse_size(s: &str) -> Result<u64, String> {
    let v = match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => hugeshm_parse::size::parse_size(s),
    }
    .ok_or_else(|| format!("bad size {s:?}"))?;
    if v == 0 {
        return Err(format!("size {s:?} is zero"));
    }
    Ok(v)
}

fn parse_key(s: &str) -> Result<i32, String> {
    let v = match s.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16).map(|v| v as i32),
        None => s.parse::<i32>(),
    };
    v.map_err(|_| format!("bad key {s:?}"))
}

fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Option<Options>, String> {
    let mut opts = Options {
        specs: Vec::new(),
        touch: false,
        orphan_sysv: false,
        keep_files: false,
        page_size: 2 << 20,
        key: sys::IPC_PRIVATE,
        align: None,
        map_offset: 0,
        forks: 0,
        write_every_ms: 20,
    };
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--touch" => opts.touch = true,
            "--orphan-sysv" => opts.orphan_sysv = true,
            "--keep-files" => opts.keep_files = true,
            "--page-size" => {
                let v = it.next().ok_or("--page-size needs a value")?;
                opts.page_size = parse_size(&v)?;
            }
            "--align" => {
                let v = it.next().ok_or("--align needs a value")?;
                opts.align = Some(parse_size(&v)? as usize);
            }
            "--map-offset" => {
                let v = it.next().ok_or("--map-offset needs a value")?;
                opts.map_offset = parse_size(&v)?;
            }
            "--write-every" => {
                let v = it.next().ok_or("--write-every needs a value")?;
                opts.write_every_ms = v.parse().map_err(|_| format!("bad --write-every {v:?}"))?;
            }
            "--forks" => {
                let v = it.next().ok_or("--forks needs a value")?;
                opts.forks = v.parse().map_err(|_| format!("bad --forks {v:?}"))?;
            }
            "--key" => {
                let v = it.next().ok_or("--key needs a value")?;
                opts.key = parse_key(&v)?;
            }
            a if a.starts_with('-') => return Err(format!("unknown option {a:?}")),
            spec => {
                let parts: Vec<&str> = spec.split(':').collect();
                let kind =
                    Kind::parse(parts[0]).ok_or_else(|| format!("unknown kind in {spec:?}"))?;
                let mut offset = 0;
                let (name, size) = match (kind, parts.as_slice()) {
                    (Kind::Dax, [_, path, size, rest @ ..])
                        if path.starts_with('/') && rest.len() <= 1 =>
                    {
                        if let Some(o) = rest.first() {
                            offset = match o.strip_prefix("0x") {
                                Some(hex) => u64::from_str_radix(hex, 16).ok(),
                                None => o.parse().ok(),
                            }
                            .filter(|o| o % 4096 == 0)
                            .ok_or_else(|| {
                                format!("{spec:?}: OFFSET must be a multiple of 4096")
                            })?;
                        }
                        (Some((*path).to_owned()), *size)
                    }
                    (Kind::Dax, _) => {
                        return Err(format!(
                            "{spec:?}: expected dax:/ABSOLUTE/PATH:SIZE[:OFFSET]"
                        ))
                    }
                    (Kind::DevShm, [_, name, size]) if !name.is_empty() => {
                        (Some((*name).to_owned()), *size)
                    }
                    (Kind::DevShm, _) => {
                        return Err(format!("{spec:?}: expected devshm:NAME:SIZE"))
                    }
                    (Kind::Hugetlbfs, [_, path, size]) if path.starts_with('/') => {
                        (Some((*path).to_owned()), *size)
                    }
                    (Kind::Hugetlbfs, _) => {
                        return Err(format!("{spec:?}: expected hugetlbfs:/ABSOLUTE/PATH:SIZE"))
                    }
                    (_, [_, size]) => (None, *size),
                    _ => return Err(format!("{spec:?}: expected KIND:SIZE")),
                };
                opts.specs.push(Spec {
                    kind,
                    name,
                    size: parse_size(size)?,
                    offset,
                });
            }
        }
    }
    if opts.specs.is_empty() {
        return Err("no objects requested".to_owned());
    }
    Ok(Some(opts))
}

/// A SysV segment that is removed (`IPC_RMID`) on drop unless disarmed.
struct SysvSegment {
    shmid: i32,
    armed: bool,
}

impl SysvSegment {
    fn remove(mut self) -> Result<(), SysError> {
        self.armed = false;
        sys::shm_remove(self.shmid)
    }

    fn keep(mut self) {
        self.armed = false;
    }
}

impl Drop for SysvSegment {
    fn drop(&mut self) {
        if self.armed {
            if let Err(e) = sys::shm_remove(self.shmid) {
                eprintln!("hugeshm-testproc: cleanup: {e}");
            }
        }
    }
}

/// A `/dev/shm` name that is unlinked on drop unless released.
struct DevShmName {
    name: String,
    armed: bool,
}

impl DevShmName {
    fn unlink(mut self) -> Result<(), SysError> {
        self.armed = false;
        sys::posix_shm_unlink(&self.name)
    }
}

impl Drop for DevShmName {
    fn drop(&mut self) {
        if self.armed {
            if let Err(e) = sys::posix_shm_unlink(&self.name) {
                eprintln!("hugeshm-testproc: cleanup: {e}");
            }
        }
    }
}

/// One created object. Fields drop in declaration order: detach/unmap
/// first, then remove the segment, close the fd and unlink the name.
struct Object {
    info: TestObject,
    attachment: Option<Mapping>,
    mapping: Option<Mapping>,
    segment: Option<SysvSegment>,
    fd: Option<OwnedFd>,
    devshm: Option<DevShmName>,
    /// A file this process created on a hugetlbfs mount (unlinked on release
    /// unless `--keep-files`).
    file: Option<std::path::PathBuf>,
}

impl Object {
    fn new(kind: Kind, size: u64, page_size: u64) -> Object {
        Object {
            info: TestObject {
                kind: kind.name().to_owned(),
                shmid: None,
                key: None,
                addr: 0,
                size,
                page_size,
                path: None,
            },
            attachment: None,
            mapping: None,
            segment: None,
            fd: None,
            devshm: None,
            file: None,
        }
    }

    /// Explicit cleanup collecting errors; `keep_sysv` leaves segments.
    fn release(self, keep_sysv: bool, keep_files: bool) -> Vec<String> {
        let Object {
            attachment,
            mapping,
            segment,
            fd,
            devshm,
            file,
            ..
        } = self;
        let mut errs = Vec::new();
        if let Some(a) = attachment {
            errs.extend(a.release().err().map(|e| e.to_string()));
        }
        if let Some(m) = mapping {
            errs.extend(m.release().err().map(|e| e.to_string()));
        }
        if let Some(s) = segment {
            if keep_sysv {
                s.keep();
            } else {
                errs.extend(s.remove().err().map(|e| e.to_string()));
            }
        }
        drop(fd);
        if let Some(d) = devshm {
            errs.extend(d.unlink().err().map(|e| e.to_string()));
        }
        if let Some(f) = file.filter(|_| !keep_files) {
            errs.extend(
                std::fs::remove_file(&f)
                    .err()
                    .map(|e| format!("unlink {}: {e}", f.display())),
            );
        }
        errs
    }
}

/// Pre-faulting: the MADV_POPULATE_WRITE result, falling back to touching
/// pages when the kernel lacks the advice (EINVAL).
fn populate(populated: Result<(), SysError>, touch: impl FnOnce()) -> Result<(), String> {
    match populated {
        Ok(()) => Ok(()),
        Err(e) if e.errno() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
            touch();
            Ok(())
        }
        Err(e) => Err(e.to_string()),
    }
}

fn create(
    spec: &Spec,
    opts: &Options,
    sysv_index: &mut i32,
    objects: &mut Vec<Object>,
) -> Result<(), String> {
    let huge = spec.kind.is_huge().then_some(opts.page_size);
    let page_size = huge.unwrap_or(sys::base_page_size() as u64);
    objects.push(Object::new(spec.kind, spec.size, page_size));
    let obj = objects.last_mut().ok_or("internal: no object")?;
    let err = |e: SysError| format!("{}:{}: {e}", spec.kind.name(), spec.size);
    match spec.kind {
        Kind::SysvHuge | Kind::SysvPlain => {
            let key = if opts.key == sys::IPC_PRIVATE {
                sys::IPC_PRIVATE
            } else {
                opts.key.wrapping_add(*sysv_index)
            };
            *sysv_index += 1;
            let shmid = sys::shm_get(key, spec.size, ShmFlags::create_new(huge)).map_err(err)?;
            obj.segment = Some(SysvSegment { shmid, armed: true });
            obj.info.shmid = Some(shmid);
            obj.info.key = Some(key);
            let align = opts.align.filter(|_| spec.kind == Kind::SysvPlain);
            let att = sys::shm_attach_placed(shmid, align).map_err(err)?;
            obj.info.addr = att.addr() as u64;
            // The segment's size (the attachment is that rounded up to
            // its page size).
            obj.info.size = spec.size;
            if opts.touch {
                populate(att.populate_write(), || att.touch())?;
            }
            obj.attachment = Some(att);
        }
        Kind::MemfdHuge | Kind::MemfdPlain | Kind::DevShm | Kind::Hugetlbfs => {
            let len = spec.size.div_ceil(page_size) * page_size;
            let fd = if spec.kind == Kind::Hugetlbfs {
                let path = spec.name.clone().unwrap_or_default();
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .map_err(|e| format!("hugetlbfs:{path}: create: {e}"))?;
                obj.file = Some(path.clone().into());
                obj.info.path = Some(path);
                OwnedFd::from(file)
            } else if let Some(name) = &spec.name {
                let fd = sys::posix_shm_create(name, 0o600).map_err(err)?;
                obj.devshm = Some(DevShmName {
                    name: name.clone(),
                    armed: true,
                });
                obj.info.path = Some(format!("/dev/shm/{name}"));
                fd
            } else {
                sys::memfd_create(&format!("hugeshm-testproc-{}", spec.kind.name()), huge)
                    .map_err(err)?
            };
            let plain = matches!(spec.kind, Kind::MemfdPlain | Kind::DevShm);
            let offset = if plain { opts.map_offset } else { 0 };
            sys::set_len(fd.as_fd(), len + offset).map_err(err)?;
            let map_len = usize::try_from(len)
                .map_err(|_| format!("{}: size too large", spec.kind.name()))?;
            let map = sys::MapOptions::new(map_len)
                .offset(offset)
                .align(opts.align.filter(|_| plain))
                .map(fd.as_fd())
                .map_err(err)?;
            obj.fd = Some(fd);
            obj.info.addr = map.addr() as u64;
            obj.info.size = len;
            if opts.touch {
                populate(map.populate_write(), || map.touch())?;
            }
            obj.mapping = Some(map);
        }
        Kind::Dax => {
            let path = spec.name.clone().unwrap_or_default();
            let device = path.starts_with("/dev/");
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(!device)
                .open(&path)
                .map_err(|e| format!("dax:{path}: open: {e}"))?;
            if !device {
                obj.file = Some(path.clone().into());
                sys::fallocate(file.as_fd(), spec.offset + spec.size).map_err(err)?;
            }
            obj.info.path = Some(path);
            let fd = OwnedFd::from(file);
            let len = usize::try_from(spec.size)
                .map_err(|_| format!("{}: size too large", spec.kind.name()))?;
            let map = sys::MapOptions::new(len)
                .offset(spec.offset)
                .align(2 << 20)
                .map(fd.as_fd())
                .map_err(err)?;
            obj.fd = Some(fd);
            obj.info.addr = map.addr() as u64;
            obj.info.size = map.len() as u64;
            if opts.touch {
                populate(map.populate_write(), || map.touch())?;
            }
            obj.mapping = Some(map);
        }
        Kind::PrivateHuge | Kind::PrivatePlain | Kind::AnonSharedHuge | Kind::AnonSharedPlain => {
            let shared = matches!(spec.kind, Kind::AnonSharedHuge | Kind::AnonSharedPlain);
            let len = usize::try_from(spec.size)
                .map_err(|_| format!("{}: size too large", spec.kind.name()))?;
            let mut anon = sys::MapOptions::new(len);
            if shared {
                anon.shared();
            }
            if spec.kind == Kind::AnonSharedPlain {
                anon.align(opts.align);
            }
            let map = anon.huge(huge).map_anon().map_err(err)?;
            obj.info.addr = map.addr() as u64;
            obj.info.size = map.len() as u64;
            if opts.touch {
                populate(map.populate_write(), || map.touch())?;
            }
            obj.mapping = Some(map);
        }
    }
    Ok(())
}

/// A forked child's work: writes one byte of each page of `maps` every
/// 20 ms (a server's traffic over its shared memory) until its parent is
/// gone; returns 0.
fn hold_and_write(parent: u32, maps: &[&Mapping], every_ms: u64) -> i32 {
    let mut first = true;
    while std::os::unix::process::parent_id() == parent {
        if first || every_ms > 0 {
            for m in maps {
                m.touch();
            }
        }
        first = false;
        std::thread::sleep(std::time::Duration::from_millis(every_ms.max(20)));
    }
    0
}

fn release_all(objects: Vec<Object>, keep_sysv: bool, keep_files: bool) -> Vec<String> {
    objects
        .into_iter()
        .rev()
        .flat_map(|o| o.release(keep_sysv, keep_files))
        .collect()
}

fn fail_and_clean(msg: &str, objects: Vec<Object>) -> ExitCode {
    eprintln!("hugeshm-testproc: {msg}");
    for e in release_all(objects, false, false) {
        eprintln!("hugeshm-testproc: cleanup: {e}");
    }
    ExitCode::from(1)
}

fn main() -> ExitCode {
    let opts = match parse_args(std::env::args().skip(1)) {
        Ok(Some(opts)) => opts,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("hugeshm-testproc: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };

    let mut objects = Vec::new();
    let mut sysv_index = 0;
    for spec in &opts.specs {
        if let Err(e) = create(spec, &opts, &mut sysv_index, &mut objects) {
            return fail_and_clean(&e, objects);
        }
    }

    let mut children = Vec::new();
    for _ in 0..opts.forks {
        let parent = std::process::id();
        let maps: Vec<&Mapping> = objects
            .iter()
            .filter_map(|o| o.attachment.as_ref().or(o.mapping.as_ref()))
            .collect();
        match sys::fork_child(|| hold_and_write(parent, &maps, opts.write_every_ms)) {
            Ok(pid) => children.push(pid),
            Err(e) => return fail_and_clean(&format!("fork: {e}"), objects),
        }
    }
    let report = TestProcReport {
        pid: std::process::id(),
        objects: objects.iter().map(|o| o.info.clone()).collect(),
        children,
    };
    let line = match serde_json::to_string(&report) {
        Ok(l) => l,
        Err(e) => return fail_and_clean(&format!("serialize report: {e}"), objects),
    };
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
        return fail_and_clean(&format!("write report to stdout: {e}"), objects);
    }
    drop(out);

    if !opts.orphan_sysv {
        // Hold everything until the test closes our stdin (or dies).
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
    }

    let errs = release_all(objects, opts.orphan_sysv, opts.keep_files);
    if errs.is_empty() {
        ExitCode::SUCCESS
    } else {
        for e in errs {
            eprintln!("hugeshm-testproc: cleanup: {e}");
        }
        ExitCode::from(3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Result<Option<Options>, String> {
        parse_args(a.iter().map(|s| s.to_string()))
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("0x1000"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("2M"), Ok(2 << 20));
        assert_eq!(parse_size("2MiB"), Ok(2 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert!(parse_size("0").is_err());
        assert!(parse_size("abc").is_err());
        assert!(parse_size("99999999999G").is_err());
    }

    #[test]
    fn specs_and_options() {
        let o = args(&[
            "sysv-huge:2M",
            "devshm:foo:64K",
            "--touch",
            "--key",
            "0x4853",
            "--page-size",
            "1G",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(o.specs.len(), 2);
        assert_eq!(o.specs[1].kind, Kind::DevShm);
        assert_eq!(o.specs[1].name.as_deref(), Some("foo"));
        assert!(o.touch && !o.orphan_sysv);
        assert_eq!(o.key, 0x4853);
        assert_eq!(o.page_size, 1 << 30);
        assert!(args(&["--help"]).unwrap().is_none());
        assert!(args(&[]).is_err());
        assert!(args(&["bogus:1"]).is_err());
        assert!(args(&["devshm:1M"]).is_err());
        assert!(args(&["sysv-plain:1M:x"]).is_err());
        assert!(args(&["--frob"]).is_err());
        assert_eq!(parse_key("0xffffffff"), Ok(-1));
        let d = args(&["dax:/mnt/pmem/a:64M:4096", "dax:/dev/dax0.0:2M"])
            .unwrap()
            .unwrap();
        assert_eq!((d.specs[0].offset, d.specs[0].size), (4096, 64 << 20));
        assert_eq!(d.specs[1].offset, 0);
        assert!(args(&["dax:/mnt/pmem/a:64M:100"]).is_err());
        assert!(args(&["dax:rel:64M"]).is_err());
    }
}
