//! A region, in each front end's words for hugeshm's own operations:
//! another page size or backend, less memory or no pre-fault, the owner,
//! attach or remove, reclaim, trust another owner, wait or use the newer
//! hugeshm, and a SysV segment whose name is lost.

use crate::{human, shell_quote, short_size, Renderer};

/// [`Fix::OtherBackend`](crate::Fix::OtherBackend).
pub(super) fn other_backend(who: Renderer, page_size_bytes: Option<u64>) -> String {
    match (page_size_bytes, who) {
        (Some(p), Renderer::Cli) => format!(
            "use --page-size {} or a hugetlb backend (sysv, memfd, hugetlbfs, anon)",
            short_size(p).to_lowercase()
        ),
        (Some(p), _) => format!(
            "use {} pages or a hugetlb backend (sysv, memfd, hugetlbfs, anon)",
            short_size(p)
        ),
        (None, _) => "use the sysv, memfd, hugetlbfs or anon backend for hugetlb pages".to_owned(),
    }
}

/// [`Fix::FreeMemory`](crate::Fix::FreeMemory): and, where the region can
/// be made without its pages, no pre-fault in `who`'s words.
pub(super) fn free_memory(who: Renderer, missing_bytes: u64, on_demand: bool) -> String {
    let no_prefault = match who {
        Renderer::Cli => "--prefault-threads 0",
        Renderer::C => "hugeshm_options_set_prefault_threads(opts, 0)",
        Renderer::Rust => ".prefault_threads(0)",
    };
    let sparse = if on_demand {
        format!(
            "; or, if it is to be used sparsely, create it without the pre-fault \
             ({no_prefault}) so that pages are faulted on demand"
        )
    } else {
        String::new()
    };
    format!(
        "free {} of memory, or ask for a region that much smaller{sparse}",
        human(missing_bytes)
    )
}

/// [`Fix::RunAsOwner`](crate::Fix::RunAsOwner).
pub(super) fn run_as_owner() -> String {
    "run as the user that created the region (or root), or create it \
     with a mode that grants this user access (e.g. mode 0660 and a shared group)"
        .to_owned()
}

/// [`Fix::AttachOrRemove`](crate::Fix::AttachOrRemove).
pub(super) fn attach_or_remove(
    who: Renderer,
    name: &str,
    backend: &str,
    dir: Option<&str>,
    holders: &[u32],
) -> String {
    let rm = remove(who, name, backend, dir);
    if holders.is_empty() {
        format!("pick another name, or attach to it; {rm} removes it once nobody holds it")
    } else {
        format!(
            "attach to it instead, or stop pid(s) {} and remove it: {rm}",
            pids(holders)
        )
    }
}

/// [`Fix::Reclaim`](crate::Fix::Reclaim): reuse (where the contents are
/// complete), recreate or remove.
pub(super) fn reclaim(
    who: Renderer,
    name: &str,
    backend: &str,
    dir: Option<&str>,
    keep_contents: bool,
) -> String {
    let recreate = reclaim_text(who, name, backend, dir, "recreate");
    let rm = remove(who, name, backend, dir);
    if keep_contents {
        format!(
            "reuse it, keeping its contents: {}; or recreate it: {recreate}; \
             or remove it: {rm}",
            reclaim_text(who, name, backend, dir, "reuse")
        )
    } else {
        format!("recreate it: {recreate}; or remove it: {rm}")
    }
}

/// [`Fix::TrustOwner`](crate::Fix::TrustOwner): accept the owner and mode
/// explicitly, or have the owner remove it.
pub(super) fn trust_owner(
    who: Renderer,
    name: &str,
    backend: &str,
    dir: Option<&str>,
    uid: u32,
    mode: u32,
) -> String {
    let accept = match who {
        // attach and rm accept a mode; create's --mode sets the bits (and
        // accepts up to them).
        Renderer::Cli => format!(
            "add --owner {uid} --accept-mode {mode:04o} to attach or rm, --owner {uid} --mode \
             {mode:04o} to create"
        ),
        Renderer::C => format!(
            "hugeshm_options_set_owner(opts, {uid}) and \
             hugeshm_options_set_mode(opts, 0{mode:o})"
        ),
        Renderer::Rust => format!(".owner({uid}).mode(0o{mode:o})"),
    };
    format!(
        "only if uid {uid} and mode {mode:04o} are to be trusted: {accept}; \
         otherwise have uid {uid} remove it ({})",
        remove(who, name, backend, dir)
    )
}

/// [`Fix::IpcRm`](crate::Fix::IpcRm).
pub(super) fn ipc_rm(shmid: i32) -> String {
    format!("ipcrm -m {shmid}")
}

/// [`Fix::WaitUntilReady`](crate::Fix::WaitUntilReady).
pub(super) fn wait_until_ready() -> String {
    "retry once it is ready".to_owned()
}

/// [`Fix::NewerHugeshm`](crate::Fix::NewerHugeshm).
pub(super) fn newer_hugeshm() -> String {
    "use the hugeshm that created it".to_owned()
}

fn pids(list: &[u32]) -> String {
    list.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
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

/// [`Fix::Remove`](crate::Fix::Remove), and the removal other fixes offer.
pub(super) fn remove(who: Renderer, name: &str, backend: &str, dir: Option<&str>) -> String {
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

#[cfg(test)]
mod tests {
    use crate::{Fix, Renderer};

    /// A name from a file anyone made is one quoted word in the commands.
    #[test]
    fn names_in_commands_are_shell_words() {
        let fix = Fix::Reclaim {
            name: "v'; touch /tmp/x; echo '".into(),
            backend: "posix".into(),
            dir: Some("/mnt/a b".into()),
            keep_contents: false,
        };
        assert_eq!(
            fix.render(Renderer::Cli),
            r"recreate it: hugeshm create 'v'\''; touch /tmp/x; echo '\''' --backend posix --dir '/mnt/a b' --reclaim recreate; or remove it: hugeshm rm 'v'\''; touch /tmp/x; echo '\''' --backend posix --dir '/mnt/a b'"
        );
        let fix = Fix::Remove {
            name: "a\"b".into(),
            backend: "posix".into(),
            dir: None,
        };
        assert_eq!(
            fix.render(Renderer::C),
            r#"hugeshm_remove("a\"b", HUGESHM_BACKEND_POSIX)"#
        );
    }

    #[test]
    fn front_ends_name_their_own_calls() {
        let f = Fix::Reclaim {
            name: "sga".into(),
            backend: "memfd".into(),
            dir: None,
            keep_contents: true,
        };
        let cli = f.render(Renderer::Cli);
        assert!(
            cli.contains("hugeshm create sga --backend memfd --reclaim reuse"),
            "{cli}"
        );
        assert!(cli.contains("hugeshm rm sga --backend memfd"), "{cli}");
        let c = f.render(Renderer::C);
        assert!(
            c.contains("HUGESHM_RECLAIM_REUSE")
                && c.contains("hugeshm_remove(\"sga\", HUGESHM_BACKEND_MEMFD)"),
            "{c}"
        );
        assert!(!c.contains("hugeshm create"), "{c}");
        let rust = f.to_string();
        assert!(
            rust.contains("Reclaim::Reuse") && !rust.contains("hugeshm rm"),
            "{rust}"
        );
    }

    #[test]
    fn a_region_in_a_directory_is_named_with_it() {
        let f = Fix::Reclaim {
            name: "sga".into(),
            backend: "posix".into(),
            dir: Some("/dev/shm/db1".into()),
            keep_contents: true,
        };
        let cli = f.render(Renderer::Cli);
        assert!(
            cli.contains("hugeshm create sga --backend posix --dir /dev/shm/db1 --reclaim reuse")
                && cli.contains("hugeshm rm sga --backend posix --dir /dev/shm/db1"),
            "{cli}"
        );
        let c = f.render(Renderer::C);
        assert!(
            c.contains("hugeshm_options_set_directory(opts, \"/dev/shm/db1\")")
                && c.contains(
                    "hugeshm_remove_in(\"sga\", HUGESHM_BACKEND_POSIX, \"/dev/shm/db1\")"
                ),
            "{c}"
        );
        let rust = f.to_string();
        assert!(
            rust.contains("RegionBuilder::directory(\"/dev/shm/db1\").reclaim(Reclaim::Reuse)")
                && rust.contains(
                    "Locator::new(\"sga\", Backend::Posix).directory(\"/dev/shm/db1\").remove()"
                ),
            "{rust}"
        );
        let json = serde_json::to_string(&f).unwrap();
        assert!(json.contains("\"dir\":\"/dev/shm/db1\""), "{json}");
        let none = serde_json::to_string(&Fix::Remove {
            name: "x".into(),
            backend: "sysv".into(),
            dir: None,
        })
        .unwrap();
        assert!(!none.contains("dir"), "{none}");
    }

    #[test]
    fn owners_holders_backends_and_memory_in_each_front_end() {
        let t = Fix::TrustOwner {
            name: "sga".into(),
            backend: "posix".into(),
            dir: None,
            uid: 1000,
            mode: 0o660,
        };
        assert_eq!(
            t.render(Renderer::Cli),
            "only if uid 1000 and mode 0660 are to be trusted: add --owner 1000 --accept-mode \
             0660 to attach or rm, --owner 1000 --mode 0660 to create; otherwise have uid 1000 \
             remove it (hugeshm rm sga --backend posix)"
        );
        assert!(t.render(Renderer::C).contains(
            "hugeshm_options_set_owner(opts, 1000) and hugeshm_options_set_mode(opts, 0660)"
        ));
        assert!(t.to_string().contains(".owner(1000).mode(0o660)"));
        let a = |holders: Vec<u32>| Fix::AttachOrRemove {
            name: "sga".into(),
            backend: "sysv".into(),
            dir: None,
            holders,
        };
        assert_eq!(
            a(vec![]).render(Renderer::Cli),
            "pick another name, or attach to it; hugeshm rm sga --backend sysv removes it once \
             nobody holds it"
        );
        assert!(a(vec![12, 34])
            .to_string()
            .starts_with("attach to it instead, or stop pid(s) 12, 34 and remove it: hugeshm_region::remove(\"sga\", Backend::Sysv)"));
        let o = Fix::OtherBackend {
            page_size_bytes: Some(2 << 20),
        };
        assert!(o.render(Renderer::Cli).starts_with("use --page-size 2m or"));
        assert!(o.render(Renderer::C).starts_with("use 2M pages or"));
        let m = Fix::FreeMemory {
            missing_bytes: 3 << 30,
            on_demand: true,
        };
        assert!(m
            .render(Renderer::C)
            .contains("(hugeshm_options_set_prefault_threads(opts, 0))"));
        assert_eq!(
            Fix::FreeMemory {
                missing_bytes: 3 << 20,
                on_demand: false
            }
            .render(Renderer::Cli),
            "free 3 MiB of memory, or ask for a region that much smaller"
        );
        assert_eq!(Fix::IpcRm { shmid: 32769 }.to_string(), "ipcrm -m 32769");
    }
}
