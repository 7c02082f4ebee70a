//! [`Fix::render`]: each fix in the words of each front end.

use crate::{
    human, k8s_quantity, nr_hugepages_path, pool_command, shell_quote, short_size, DaxCause, Fix,
    Renderer,
};

/// The two hugetlb limit files of a cgroup level from either one: the
/// limit on faulted pages and the reservation limit beside it (`None`
/// where the name is neither form).
fn cgroup_limit_pair(file: &str) -> (String, Option<String>) {
    for (faults, rsvd) in [
        (".max", ".rsvd.max"),
        (".limit_in_bytes", ".rsvd.limit_in_bytes"),
    ] {
        if let Some(p) = file.strip_suffix(rsvd) {
            return (format!("{p}{faults}"), Some(file.to_owned()));
        }
        if let Some(p) = file.strip_suffix(faults) {
            return (file.to_owned(), Some(format!("{p}{rsvd}")));
        }
    }
    (file.to_owned(), None)
}

fn pids(list: &[u32]) -> String {
    list.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The fix as text for `who`.
pub(crate) fn render(fix: &Fix, who: Renderer) -> String {
    match fix {
        Fix::SetPool {
            page_size_bytes,
            node,
            pages,
            default_size,
        } => pool_command(*page_size_bytes, *pages, *default_size, *node),
        Fix::SetNodePools {
            page_size_bytes,
            pools,
        } => pools
            .iter()
            .map(|&(n, pages)| pool_command(*page_size_bytes, pages, false, Some(n)))
            .collect::<Vec<_>>()
            .join("; "),
        Fix::RetryOrCheckLimits {
            page_size_bytes,
            available,
        } => format!(
            "the pool now has {available} pages available: retry; if it keeps failing, \
             check hugetlb cgroup limits (hugetlb.{}B.max, hugetlb.{}B.rsvd.max) and \
             hugetlbfs size= limits",
            short_size(*page_size_bytes),
            short_size(*page_size_bytes)
        ),
        Fix::RaiseCgroupLimit {
            page_size_bytes,
            file,
            bytes,
        } => {
            let size = format!("{}B", short_size(*page_size_bytes));
            match file {
                Some(f) => {
                    // Both limits of the level: on faulted pages (v2
                    // `.max`, v1 `.limit_in_bytes`) and on reservations
                    // (`.rsvd.max`, `.rsvd.limit_in_bytes`), whichever
                    // of the two binds.
                    let (faults, rsvd) = cgroup_limit_pair(f);
                    let rsvd = rsvd
                        .map(|r| format!(" && echo {bytes} > {}", shell_quote(&r)))
                        .unwrap_or_default();
                    format!(
                        "echo {bytes} > {}{rsvd} (Kubernetes: \
                         resources.limits.hugepages-{}i: {})",
                        shell_quote(&faults),
                        size.trim_end_matches('B'),
                        k8s_quantity(*bytes)
                    )
                }
                None => format!(
                    "raise the hugetlb cgroup limit of this process (hugetlb.{size}.max, and \
                     hugetlb.{size}.rsvd.max with it) to at least {bytes} bytes, or have the \
                     container get hugepages-{}i: {}",
                    size.trim_end_matches('B'),
                    k8s_quantity(*bytes)
                ),
            }
        }
        Fix::BootPageSize { page_size_bytes } => format!(
            "pick an offered size, or boot with hugepagesz={} hugepages=N",
            short_size(*page_size_bytes)
        ),
        Fix::MountHugetlbfs {
            page_size_bytes,
            dir,
        } => {
            let dir = shell_quote(dir);
            format!(
                "mkdir -p {dir} && mount -t hugetlbfs -o pagesize={},mode=1770 nodev {dir}",
                short_size(*page_size_bytes)
            )
        }
        Fix::RemountTmpfsHuge { mount } => {
            format!("mount -o remount,huge=within_size {}", shell_quote(mount))
        }
        Fix::ShmemEnabledNever => {
            "echo never > /sys/kernel/mm/transparent_hugepage/shmem_enabled \
             (then the mount's huge= option applies)"
                .to_owned()
        }
        Fix::OtherBackend { page_size_bytes } => match (page_size_bytes, who) {
            (Some(p), Renderer::Cli) => format!(
                "use --page-size {} or a hugetlb backend (sysv, memfd, hugetlbfs, anon)",
                short_size(*p).to_lowercase()
            ),
            (Some(p), _) => format!(
                "use {} pages or a hugetlb backend (sysv, memfd, hugetlbfs, anon)",
                short_size(*p)
            ),
            (None, _) => {
                "use the sysv, memfd, hugetlbfs or anon backend for hugetlb pages".to_owned()
            }
        },
        Fix::GrowFilesystem {
            mount,
            missing_bytes,
        } => format!(
            "free {} on {mount}, or grow it: mount -o remount,size=<bytes> {}",
            human(*missing_bytes),
            shell_quote(mount)
        ),
        Fix::FreeMemory {
            missing_bytes,
            on_demand,
        } => {
            let no_prefault = match who {
                Renderer::Cli => "--prefault-threads 0",
                Renderer::C => "hugeshm_options_set_prefault_threads(opts, 0)",
                Renderer::Rust => ".prefault_threads(0)",
            };
            let sparse = if *on_demand {
                format!(
                    "; or, if it is to be used sparsely, create it without the pre-fault \
                     ({no_prefault}) so that pages are faulted on demand"
                )
            } else {
                String::new()
            };
            format!(
                "free {} of memory, or ask for a region that much smaller{sparse}",
                human(*missing_bytes)
            )
        }
        Fix::GrowDax {
            mount,
            missing_bytes,
        } => format!(
            "free {} on {mount}, or put it on a larger persistent memory namespace \
             (ndctl list -N shows them; ndctl create-namespace --mode=fsdax --align=2M --size=<bytes>)",
            human(*missing_bytes)
        ),
        Fix::GrowDeviceDax {
            device,
            size_bytes,
            align_bytes,
            missing_bytes,
        } => format!(
            "ask for at most {} (the capacity of {device}), or give it a namespace {} larger \
             (ndctl destroy-namespace, then ndctl create-namespace --mode=devdax --align={} \
             --size=<bytes>)",
            human(*size_bytes),
            human(*missing_bytes),
            short_size(*align_bytes)
        ),
        Fix::AlignDax {
            causes,
            path,
            offset,
            namespace,
            region,
        } => {
            let mut steps: Vec<String> = causes
                .iter()
                .map(|c| match c {
                    DaxCause::FileOffset => format!(
                        "map {path} at a file offset that is a multiple of 2 MiB \
                         (not {offset}: {} past a 2 MiB boundary)",
                        human(offset % (2 << 20))
                    ),
                    DaxCause::Address => "map it at an address congruent to its file offset \
                         modulo 2 MiB (reserve length + 2 MiB with PROT_NONE, then MAP_FIXED \
                         on the 2 MiB-aligned part)"
                        .to_owned(),
                    DaxCause::Extents if *region => format!(
                        "its file system did not give {path} 2 MiB-aligned blocks: make it \
                         with mkfs.ext4 -b 4096 -E stride=512,stripe_width=512 (or \
                         mkfs.xfs -d su=2m,sw=1) and create the region again"
                    ),
                    DaxCause::Extents => format!(
                        "give {path} 2 MiB-aligned extents: a file system made with \
                         mkfs.ext4 -b 4096 -E stride=512,stripe_width=512 (or \
                         mkfs.xfs -d su=2m,sw=1), and the file preallocated whole \
                         (fallocate -l SIZE FILE) before it is written"
                    ),
                    DaxCause::NamespaceAlign => format!(
                        "recreate its namespace with a 2 MiB alignment (its data is lost): \
                         ndctl create-namespace -f -e {} --mode={} --align=2M",
                        namespace.as_deref().unwrap_or("namespaceX.Y"),
                        if path.starts_with("/dev/dax") {
                            "devdax"
                        } else {
                            "fsdax"
                        }
                    ),
                })
                .collect();
            if *region {
                return steps.join("; ");
            }
            steps.push(match who {
                Renderer::Cli => "or let hugeshm make it: hugeshm create NAME --backend dax \
                     (allocated whole, mapped at 2 MiB, MAP_SYNC)"
                    .to_owned(),
                Renderer::C => "or let hugeshm make it: hugeshm_create with \
                     hugeshm_options_set_backend(opts, HUGESHM_BACKEND_DAX) (allocated whole, mapped at 2 MiB, MAP_SYNC)"
                    .to_owned(),
                Renderer::Rust => "or let hugeshm make it: RegionBuilder::backend(Backend::Dax) \
                     (allocated whole, mapped at 2 MiB, MAP_SYNC)"
                    .to_owned(),
            });
            steps.join("; ")
        }
        Fix::DaxFlag {
            path,
            fstype,
            flag_set,
        } => {
            let dir = path.rsplit_once('/').map_or(".", |(d, _)| if d.is_empty() { "/" } else { d });
            let chattr = |p: &str| {
                let p = shell_quote(p);
                if fstype == "xfs" {
                    format!("xfs_io -c 'chattr +x' {p}")
                } else {
                    format!("chattr +x {p}")
                }
            };
            let apply = "the kernel applies the flag when it next loads the file's inode: \
                 stop every process that has it open or mapped, then open and map it again";
            if *flag_set {
                format!("its DAX flag is set but not in force: {apply}")
            } else {
                format!(
                    "set its DAX flag: {}; {apply}; files created later in a directory with \
                     the flag ({}) are DAX from the start (or mount it with -o dax=always)",
                    chattr(path),
                    chattr(dir)
                )
            }
        }
        Fix::Sysctl { key, value } => {
            format!("sysctl -w {}", shell_quote(&format!("{key}={value}")))
        }
        Fix::Demote {
            page_size_bytes,
            to_page_size_bytes,
            pages,
            set_demote_size,
        } => {
            let dir = nr_hugepages_path(*page_size_bytes, None);
            let dir = dir.trim_end_matches("/nr_hugepages");
            let size = if *set_demote_size {
                format!("echo {}kB > {dir}/demote_size && ", to_page_size_bytes / 1024)
            } else {
                String::new()
            };
            format!(
                "{size}echo {pages} > {dir}/demote   # {pages} free {} page{} become{} {} {} pages",
                short_size(*page_size_bytes),
                if *pages == 1 { "" } else { "s" },
                if *pages == 1 { "s" } else { "" },
                pages.saturating_mul(page_size_bytes / (*to_page_size_bytes).max(1)),
                short_size(*to_page_size_bytes)
            )
        }
        Fix::ReserveAtBoot {
            page_size_bytes,
            pages,
            on_cmdline,
        } => {
            let gib = pages.saturating_mul(*page_size_bytes).div_ceil(1 << 30).max(1);
            if *on_cmdline {
                return format!(
                    "hugepagesz={} hugepages={pages} is on the kernel command line already: \
                     boot with hugetlb_cma={gib}G instead, a CMA area that run-time writes \
                     to nr_hugepages take them from",
                    short_size(*page_size_bytes)
                );
            }
            format!(
                "hugepagesz={} hugepages={pages} on the kernel command line (reserved before \
                 memory fragments), or hugetlb_cma={gib}G to set aside a CMA area that run-time \
                 writes to nr_hugepages can take them from",
                short_size(*page_size_bytes)
            )
        }
        Fix::MinFreeKbytes { kib } => format!(
            "sysctl -w vm.min_free_kbytes={kib} && echo 'vm.min_free_kbytes = {kib}' > \
             /etc/sysctl.d/60-hugeshm-min-free.conf"
        ),
        Fix::EnableHvo => "sysctl -w vm.hugetlb_optimize_vmemmap=1, then shrink and regrow \
             the pools (pages allocated before keep their struct pages), or boot with \
             hugetlb_free_vmemmap=on"
            .to_owned(),
        Fix::HugetlbShmGroup { gid, memlock_kib } => format!(
            "sysctl -w vm.hugetlb_shm_group={gid} (persist it in /etc/sysctl.d), \
             or give the process CAP_IPC_LOCK (systemd: AmbientCapabilities=CAP_IPC_LOCK), \
             or (deprecated) raise the memlock limit to at least {memlock_kib} KiB"
        ),
        Fix::RaiseMemlock { user, kib } => format!(
            "add `{user} - memlock {kib}` to /etc/security/limits.conf, or \
             `LimitMEMLOCK={}` to the service's [Service] section, or grant CAP_IPC_LOCK",
            kib * 1024
        ),
        Fix::HugetlbfsOwner { dir, uid, gid } => format!(
            "mount the hugetlbfs at {dir} with options that let uid {uid} create files \
             (e.g. -o uid={uid},gid={gid},mode=0770)"
        ),
        Fix::MakeWritable { path } => format!("make {path} writable for this user"),
        Fix::RunAsOwner => "run as the user that created the region (or root), or create it \
             with a mode that grants this user access (e.g. mode 0660 and a shared group)"
            .to_owned(),
        Fix::AttachOrRemove {
            name,
            backend,
            dir,
            holders,
        } => {
            let rm = remove_text(who, name, backend, dir.as_deref());
            if holders.is_empty() {
                format!(
                    "pick another name, or attach to it; {rm} removes it once nobody holds it"
                )
            } else {
                format!(
                    "attach to it instead, or stop pid(s) {} and remove it: {rm}",
                    pids(holders)
                )
            }
        }
        Fix::Reclaim {
            name,
            backend,
            dir,
            keep_contents,
        } => {
            let dir = dir.as_deref();
            let recreate = reclaim_text(who, name, backend, dir, "recreate");
            let rm = remove_text(who, name, backend, dir);
            if *keep_contents {
                format!(
                    "reuse it, keeping its contents: {}; or recreate it: {recreate}; \
                     or remove it: {rm}",
                    reclaim_text(who, name, backend, dir, "reuse")
                )
            } else {
                format!("recreate it: {recreate}; or remove it: {rm}")
            }
        }
        Fix::Remove { name, backend, dir } => remove_text(who, name, backend, dir.as_deref()),
        Fix::TrustOwner {
            name,
            backend,
            dir,
            uid,
            mode,
        } => {
            let accept = match who {
                Renderer::Cli => format!("add --owner {uid} --mode {mode:04o}"),
                Renderer::C => format!(
                    "hugeshm_options_set_owner(opts, {uid}) and \
                     hugeshm_options_set_mode(opts, 0{mode:o})"
                ),
                Renderer::Rust => format!(".owner({uid}).mode(0o{mode:o})"),
            };
            format!(
                "only if uid {uid} and mode {mode:04o} are to be trusted: {accept}; \
                 otherwise have uid {uid} remove it ({})",
                remove_text(who, name, backend, dir.as_deref())
            )
        }
        Fix::IpcRm { shmid } => format!("ipcrm -m {shmid}"),
        Fix::WaitUntilReady => "retry once it is ready".to_owned(),
        Fix::NewerHugeshm => "use the hugeshm that created it".to_owned(),
    }
}

fn reclaim_text(who: Renderer, name: &str, backend: &str, dir: Option<&str>, how: &str) -> String {
    match who {
        Renderer::Cli => format!(
            "hugeshm create {} --backend {backend}{} --reclaim {how}",
            shell_quote(name),
            dir_option(dir)
        ),
        Renderer::C => {
            let set_dir = dir
                .map(|d| format!("hugeshm_options_set_directory(opts, {d:?}) and "))
                .unwrap_or_default();
            format!(
                "{set_dir}hugeshm_options_set_reclaim(opts, HUGESHM_RECLAIM_{})",
                how.to_uppercase()
            )
        }
        Renderer::Rust => {
            let v = if how == "reuse" { "Reuse" } else { "Recreate" };
            let set_dir = dir
                .map(|d| format!("directory({d:?})."))
                .unwrap_or_default();
            format!("RegionBuilder::{set_dir}reclaim(Reclaim::{v})")
        }
    }
}

fn remove_text(who: Renderer, name: &str, backend: &str, dir: Option<&str>) -> String {
    match (who, dir) {
        (Renderer::Cli, _) => {
            format!(
                "hugeshm rm {} --backend {backend}{}",
                shell_quote(name),
                dir_option(dir)
            )
        }
        (Renderer::C, None) => format!(
            "hugeshm_remove({name:?}, HUGESHM_BACKEND_{})",
            backend.to_uppercase()
        ),
        (Renderer::C, Some(d)) => format!(
            "hugeshm_remove_in({name:?}, HUGESHM_BACKEND_{}, {d:?})",
            backend.to_uppercase()
        ),
        (Renderer::Rust, None) => format!(
            "hugeshm_region::remove({name:?}, Backend::{})",
            capitalize(backend)
        ),
        (Renderer::Rust, Some(d)) => format!(
            "Locator::new({name:?}, Backend::{}).directory({d:?}).remove()",
            capitalize(backend)
        ),
    }
}

/// ` --dir DIR` where a region must be looked for in `dir`.
fn dir_option(dir: Option<&str>) -> String {
    dir.map(|d| format!(" --dir {}", shell_quote(d)))
        .unwrap_or_default()
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}
