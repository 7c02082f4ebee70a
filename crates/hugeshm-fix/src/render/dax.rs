//! Persistent memory: room on a DAX file system or device-dax, what keeps
//! a mapping off 2 MiB faults ([`DaxCause`]), a file's own DAX flag.

use crate::{human, shell_quote, short_size, DaxCause, Renderer};

/// [`Fix::GrowDax`](crate::Fix::GrowDax).
pub(super) fn grow(mount: &str, missing_bytes: u64) -> String {
    format!(
        "free {} on {mount}, or put it on a larger persistent memory namespace \
         (ndctl list -N shows them; ndctl create-namespace --mode=fsdax --align=2M --size=<bytes>)",
        human(missing_bytes)
    )
}

/// [`Fix::GrowDeviceDax`](crate::Fix::GrowDeviceDax).
pub(super) fn grow_device(
    device: &str,
    size_bytes: u64,
    align_bytes: u64,
    missing_bytes: u64,
) -> String {
    format!(
        "ask for at most {} (the capacity of {device}), or give it a namespace {} larger \
         (ndctl destroy-namespace, then ndctl create-namespace --mode=devdax --align={} \
         --size=<bytes>)",
        human(size_bytes),
        human(missing_bytes),
        short_size(align_bytes)
    )
}

/// [`Fix::AlignDax`](crate::Fix::AlignDax): a step per cause, and (but for
/// a hugeshm region) hugeshm's own way in `who`'s words.
pub(super) fn align(
    who: Renderer,
    causes: &[DaxCause],
    path: &str,
    offset: u64,
    namespace: Option<&str>,
    region: bool,
) -> String {
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
            DaxCause::Extents if region => format!(
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
                namespace.unwrap_or("namespaceX.Y"),
                if path.starts_with("/dev/dax") {
                    "devdax"
                } else {
                    "fsdax"
                }
            ),
        })
        .collect();
    if region {
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

/// [`Fix::DaxFlag`](crate::Fix::DaxFlag): how to set the flag on `fstype`
/// (its file and its directory), and when the kernel applies it.
pub(super) fn flag(path: &str, fstype: &str, flag_set: bool) -> String {
    let dir = path
        .rsplit_once('/')
        .map_or(".", |(d, _)| if d.is_empty() { "/" } else { d });
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
    if flag_set {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Fix, Renderer};

    #[test]
    fn a_dax_fix_names_each_cause_and_hugeshm_s_own_way() {
        let f = Fix::AlignDax {
            causes: vec![DaxCause::FileOffset, DaxCause::NamespaceAlign],
            path: "/mnt/pmem/db".into(),
            offset: 4096,
            namespace: Some("namespace0.0".into()),
            region: false,
        };
        let cli = f.render(Renderer::Cli);
        assert_eq!(
            cli,
            "map /mnt/pmem/db at a file offset that is a multiple of 2 MiB (not 4096: 4 KiB \
             past a 2 MiB boundary); recreate its namespace with a 2 MiB alignment (its data is \
             lost): ndctl create-namespace -f -e namespace0.0 --mode=fsdax --align=2M; or let \
             hugeshm make it: hugeshm create NAME --backend dax (allocated whole, mapped at \
             2 MiB, MAP_SYNC)"
        );
        assert!(f.render(Renderer::C).contains("HUGESHM_BACKEND_DAX"));
        assert!(f.to_string().contains("Backend::Dax"));
        let e = Fix::AlignDax {
            causes: vec![DaxCause::Extents],
            path: "/mnt/pmem/db".into(),
            offset: 0,
            namespace: None,
            region: false,
        };
        assert!(e.to_string().contains("stride=512,stripe_width=512"), "{e}");
        // A hugeshm region: only the file system can be at fault, and
        // hugeshm create is not offered as the way out.
        let r = Fix::AlignDax {
            causes: vec![DaxCause::Extents],
            path: "/mnt/pmem/hugeshm.pm".into(),
            offset: 0,
            namespace: None,
            region: true,
        };
        assert_eq!(
            r.render(Renderer::Cli),
            "its file system did not give /mnt/pmem/hugeshm.pm 2 MiB-aligned blocks: make it \
             with mkfs.ext4 -b 4096 -E stride=512,stripe_width=512 (or mkfs.xfs -d su=2m,sw=1) \
             and create the region again"
        );
        assert!(e.to_string().contains("su=2m,sw=1"), "{e}");
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["kind"], "align-dax");
        assert_eq!(v["causes"][0], "file-offset");
        assert_eq!(serde_json::from_value::<Fix>(v).unwrap(), f);
    }

    #[test]
    fn dax_flag_says_how_to_set_it_and_when_it_applies() {
        let f = Fix::DaxFlag {
            path: "/mnt/pmem/plain".to_owned(),
            fstype: "ext4".to_owned(),
            flag_set: false,
        };
        let t = f.render(Renderer::Cli);
        assert!(
            t.starts_with("set its DAX flag: chattr +x /mnt/pmem/plain;"),
            "{t}"
        );
        assert!(
            t.contains("in a directory with the flag (chattr +x /mnt/pmem)"),
            "{t}"
        );
        assert!(
            t.contains("stop every process that has it open or mapped"),
            "{t}"
        );
        let x = Fix::DaxFlag {
            path: "/x/f".to_owned(),
            fstype: "xfs".to_owned(),
            flag_set: true,
        };
        let t = x.render(Renderer::Cli);
        assert!(
            t.starts_with("its DAX flag is set but not in force: the kernel applies"),
            "{t}"
        );
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["kind"], "dax-flag");
        assert_eq!(serde_json::from_value::<Fix>(v).unwrap(), f);
        let xf = Fix::DaxFlag {
            path: "/x/f".to_owned(),
            fstype: "xfs".to_owned(),
            flag_set: false,
        };
        assert!(xf
            .render(Renderer::Cli)
            .contains("xfs_io -c 'chattr +x' /x/f"));
    }

    #[test]
    fn grow_device_dax_names_the_capacity_and_the_devdax_namespace() {
        let f = Fix::GrowDeviceDax {
            device: "/dev/dax0.1".to_owned(),
            size_bytes: 110 << 20,
            align_bytes: 2 << 20,
            missing_bytes: 914 << 20,
        };
        let t = f.render(Renderer::Cli);
        assert!(
            t.starts_with("ask for at most 110 MiB (the capacity of /dev/dax0.1)"),
            "{t}"
        );
        assert!(t.contains("a namespace 914 MiB larger"), "{t}");
        assert!(t.contains("--mode=devdax --align=2M"), "{t}");
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["kind"], "grow-device-dax");
        assert_eq!(serde_json::from_value::<Fix>(v).unwrap(), f);
    }
}
