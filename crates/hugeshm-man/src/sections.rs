//! What the generated man pages add to clap's: EXAMPLES (real commands),
//! EXIT STATUS, FILES and SEE ALSO on every page, and the overview page
//! hugeshm(8) (the findings and where the JSON schema is described).
//! Written by hand, as roff; `generate man` appends it to each page.

/// `text` as roff body text: backslashes doubled, `-` as `\-` (a hyphen
/// that man does not break or turn into a dash), and a line that starts
/// with `.` or `'` (a roff request) protected with `\&`.
fn roff(text: &str) -> String {
    text.lines()
        .map(|l| {
            let l = l.replace('\\', "\\e").replace('-', "\\-");
            if l.starts_with(['.', '\'']) {
                format!("\\&{l}")
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A section: `.SH NAME`, then paragraphs.
fn section(name: &str, body: &str) -> String {
    format!(".SH {name}\n{body}\n")
}

/// Tagged paragraphs: the tag in bold (a command, a file), then its text.
fn tagged(items: &[(&str, &str)]) -> String {
    items
        .iter()
        .map(|(tag, text)| format!(".TP\n\\fB{}\\fR\n{}\n", roff(tag), roff(text)))
        .collect()
}

/// The examples of the page of command `path` (`["bench", "oltp"]`; `[]`
/// for hugeshm(1)): real commands, each with what it does.
fn examples(path: &[&str]) -> Vec<(&'static str, &'static str)> {
    match path {
        [] | ["status"] => vec![
            ("hugeshm status", "The pools per page size and node, THP, limits, and the findings."),
            ("hugeshm status --check", "Exit 1 when a warning or an error is found (for config management)."),
            ("hugeshm status --json | jq .findings", "The findings as JSON."),
        ],
        ["segments"] => vec![
            ("hugeshm segments", "Every shared memory segment and the page size really backing it."),
            ("hugeshm segments --json", "The same as JSON."),
        ],
        ["create"] => vec![
            ("hugeshm create sga --size 1G --page-size 2m --policy only", "A SysV region of 1 GiB on 2 MiB pages, kept after the command exits; refused if the pool cannot hold it."),
            ("hugeshm create cache --size 512M --backend memfd --hold", "A memfd region held until Ctrl-C."),
        ],
        ["rm"] => vec![("hugeshm rm sga", "Remove the region sga (refused while processes are attached).")],
        ["attach"] => vec![("hugeshm attach sga", "Check sga's header and page size and list who holds it.")],
        ["ls"] => vec![
            ("hugeshm ls", "The hugeshm regions of this host: kept, held, orphaned."),
            ("hugeshm ls --check", "Exit 1 when a region is orphaned, crashed or damaged."),
        ],
        ["advise"] => vec![
            ("hugeshm advise --size 64M --container", "The pools, configuration and pod resources a 64 MiB region needs; its last line is the apply command."),
            ("hugeshm advise --postgres /var/lib/postgresql/16/main", "What the PostgreSQL cluster of that data directory needs."),
        ],
        ["apply"] => vec![
            ("hugeshm apply --size 64M --dry-run", "What reserving the plan would change."),
            ("hugeshm apply --spec /etc/hugeshm/plan.toml --persist", "Reserve the boot plan now and write the files that keep it."),
        ],
        ["run"] => vec![("hugeshm run -- postgres -D /var/lib/postgresql/16/main", "Start a server with its shared memory on huge pages, pre-faulted and recorded.")],
        ["exporter"] => vec![
            ("hugeshm exporter --listen :9731", "Serve /metrics on every interface (the default is 127.0.0.1:9731)."),
            ("hugeshm exporter --once", "Print the metrics once."),
        ],
        ["collapse"] => vec![
            ("hugeshm collapse --pid 4242 --dry-run", "What moving process 4242's shared memory onto 2 MiB pages would do, and whether the kernel allows it."),
            ("hugeshm collapse --pid 4242 --shmid 32769", "Collapse one SysV segment in place, for every process attached to it."),
        ],
        ["lab"] => vec![("hugeshm lab --quick --only startup", "A first look at one reproduction, in seconds.")],
        ["bench"] | ["bench", "prefault"] => vec![("hugeshm bench prefault --size 1G --page-size 4k,2m", "Time creating and pre-faulting 1 GiB on base and 2 MiB pages.")],
        ["bench", "oltp"] => vec![("hugeshm bench oltp --page-size 4k,2m --backend sysv", "The shared buffer cache's transactions per second on both page sizes.")],
        ["bench", "dmbc"] => vec![("hugeshm bench dmbc --data-dir /var/tmp", "Classic and direct reads of a data file in /var/tmp.")],
        ["bench", "numa"] => vec![("hugeshm bench numa --page-size 2m", "Local, remote and interleaved bandwidth on 2 MiB pages.")],
        ["bench", "pagetables"] => vec![("hugeshm bench pagetables --page-size 4k,2m", "Page-table bytes per attached process.")],
        ["bench", "attach"] => vec![("hugeshm bench attach --size 1G", "How long attaching a 1 GiB region takes.")],
        ["bench", "scan"] => vec![("hugeshm bench scan", "How long hugeshm segments takes with many processes attached.")],
        _ => Vec::new(),
    }
}

/// EXIT STATUS, the same for every command.
const EXIT_STATUS: [(&str, &str); 4] = [
    ("0", "Success; with --check, nothing found."),
    ("1", "A finding (--check: a warning or an error in the report; ls --check: an orphaned, crashed or damaged region)."),
    ("2", "A usage error: an unknown option, a value outside its list, a size or name that is not one."),
    ("3", "A failure: the host refused (a pool too small, a permission), a file could not be read or written."),
];

/// FILES: what `apply --persist` writes and the boot plan.
const FILES: [(&str, &str); 6] = [
    ("/etc/hugeshm/plan.toml", "The boot plan: the regions the servers need (hugeshm-apply.service runs apply --spec on it at boot)."),
    ("/etc/sysctl.d/60-hugeshm.conf", "Written by apply --persist: the default-size pool (vm.nr_hugepages) and vm.hugetlb_shm_group."),
    ("/etc/tmpfiles.d/60-hugeshm.conf", "Written by apply --persist: per-size and per-node pools at boot."),
    ("/etc/security/limits.d/60-hugeshm.conf", "Written by apply --persist: the memlock limit of the servers' users."),
    ("/etc/systemd/system/UNIT.d/60-hugeshm.conf", "Written by apply --persist --systemd-unit UNIT: LimitMEMLOCK= for a service."),
    ("/proc/meminfo, /sys/kernel/mm/hugepages/, /sys/devices/system/node/", "What status, segments and advise read (see proc(5))."),
];

/// The sections appended to the page of command `path` (`[]`: hugeshm(1)),
/// which `subs` (its visible subcommands) and `parent` link to.
pub(crate) fn extra_sections(path: &[&str], subs: &[String]) -> String {
    let mut s = String::new();
    let ex = examples(path);
    if !ex.is_empty() {
        s.push_str(&section("EXAMPLES", &tagged(&ex)));
    }
    s.push_str(&section("EXIT STATUS", &tagged(&EXIT_STATUS)));
    s.push_str(&section("FILES", &tagged(&FILES)));
    let mut see = vec!["hugeshm(8)".to_owned()];
    if !path.is_empty() {
        see.push(format!(
            "hugeshm{}(1)",
            if path.len() > 1 {
                format!("-{}", path[..path.len() - 1].join("-"))
            } else {
                String::new()
            }
        ));
    }
    let me = std::iter::once("hugeshm")
        .chain(path.iter().copied())
        .collect::<Vec<_>>()
        .join("-");
    see.extend(subs.iter().map(|sub| format!("{me}-{sub}(1)")));
    see.extend(["hugeadm(8)", "numactl(8)", "proc(5)"].map(String::from));
    s.push_str(&section("SEE ALSO", &roff(&see.join(", "))));
    s
}

/// The overview page hugeshm(8): what hugeshm is, its findings, its JSON
/// and its pages.
pub(crate) fn overview(version: &str, pages: &[String]) -> String {
    let mut s = format!(
        ".TH hugeshm 8 \"\" \"hugeshm {}\" \"System Administration\"\n",
        roff(version)
    );
    s.push_str(&section(
        "NAME",
        "hugeshm \\- huge page shared memory for database servers: doctor, regions, plans",
    ));
    s.push_str(&section(
        "DESCRIPTION",
        &roff(
            "hugeshm reads the huge page pools, the shared memory segments and the limits of a Linux host, \
             says what is wrong and how to fix it (status, segments), plans and reserves the pools servers \
             need (advise, apply), and creates, attaches and lists shared regions on huge pages (create, \
             attach, ls, rm). Each command has its page, hugeshm-COMMAND(1).",
        ),
    ));
    s.push_str(&section(
        "FINDINGS",
        &(roff(
            "status and segments end with findings: one line each, a severity, a code and what to do, e.g. \
             WARN orphan, info reserved-untouched. With --check the command exits 1 when a warning or an \
             error is found; with --json each finding is an object with severity, code, message and fix. \
             The severities:",
        ) + "\n"
            + &tagged(&[
                ("ERROR", "The host will refuse what a server asks (a pool smaller than its regions, a limit under its size)."),
                ("WARN", "Memory or time lost, or a server that will fall back to base pages (an orphaned segment, a silent fallback, a pool on the wrong node)."),
                ("info", "Worth knowing, nothing to fix (pages reserved but not touched yet, a region kept and not attached)."),
            ])),
    ));
    s.push_str(&section(
        "JSON",
        &roff(
            "Every --json output is one object whose first key, schema, is the version of its shape (1); \
             /usr/share/doc/hugeshm/docs/json.md (docs/json.md in the source) describes each \
             command's keys, and docs/findings.md every finding. apply --plan reads the plan advise --json prints.",
        ),
    ));
    s.push_str(&section("EXIT STATUS", &tagged(&EXIT_STATUS)));
    s.push_str(&section("FILES", &tagged(&FILES)));
    let mut see: Vec<String> = pages.to_vec();
    see.extend(["hugeadm(8)", "numactl(8)", "proc(5)"].map(String::from));
    s.push_str(&section("SEE ALSO", &roff(&see.join(", "))));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roff_escapes_requests_hyphens_and_backslashes() {
        assert_eq!(roff(".x -y"), "\\&.x \\-y");
        assert_eq!(roff("'a\\b"), "\\&'a\\eb");
        assert_eq!(roff("a\n.b"), "a\n\\&.b");
    }
}
