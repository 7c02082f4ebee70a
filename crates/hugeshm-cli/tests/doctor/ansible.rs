//! The Ansible collection (`contrib/ansible`) against a real PostgreSQL 15
//! cluster, as root, with Debian's `ansible-playbook -i localhost, -c local`:
//! the collection is built with `ansible-galaxy collection build` and
//! installed into a temporary collections path, and playbooks written to
//! temporary files run its modules with this build's `hugeshm` as `binary`.
//! The 2 MiB pool starts at 0 under the test kit's lock; the first run
//! reserves what `advise --postgres` says, the server then starts with
//! `huge_pages = on` and the facts module sees its segment on 2 MiB pages;
//! a second run changes nothing; `--check --diff` on a host that needs
//! more (a second cluster: both counted) shows the diff and changes
//! nothing; a plan the host cannot hold fails with hugeshm's numbers and
//! leaves the pool; `persist` writes under a temporary root, once.
//! `ansible-lint` passes on every playbook run. The role, with the `.deb`,
//! is `scripts/check-ansible-role.py` in CI.

use crate::common::{hugeshm, json, nr_2m};

use hugeshm_testkit::postgres::{skip_unless_postgres, PgCluster};
use hugeshm_testkit::{live, skip, TempDir};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const M2: u64 = 2 << 20;
const NR_2M: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";

/// The collection built and installed into `dir/coll`, and where the
/// playbooks and Ansible's own temporary files go.
struct Ansible {
    dir: TempDir,
    playbooks: Vec<PathBuf>,
}

/// One `ansible-playbook` run: its exit status and the JSON callback's
/// document.
struct Run {
    ok: bool,
    doc: Value,
}

impl Run {
    /// The result of task `name` on localhost.
    fn task(&self, name: &str) -> &Value {
        self.doc["plays"][0]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["task"]["name"] == name)
            .map(|t| &t["hosts"]["localhost"])
            .unwrap_or_else(|| panic!("no task {name}: {:#}", self.doc))
    }

    /// The PLAY RECAP's `changed` for localhost.
    fn changed(&self) -> u64 {
        self.doc["stats"]["localhost"]["changed"].as_u64().unwrap()
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tool(name: &str) -> Option<PathBuf> {
    ["/usr/bin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

impl Ansible {
    /// Builds the collection and installs it; `None` after a skip when
    /// Ansible is not installed (CI installs it: there the skip fails).
    fn install(test: &str) -> Option<Ansible> {
        for t in ["ansible-playbook", "ansible-galaxy", "ansible-lint"] {
            if tool(t).is_none() {
                skip(
                    test,
                    format_args!("{t} is not installed (apt install ansible ansible-lint)"),
                );
                return None;
            }
        }
        let dir = TempDir::new("ansible");
        let a = Ansible {
            dir,
            playbooks: Vec::new(),
        };
        let out = a
            .command("ansible-galaxy")
            .args(["collection", "build", "--output-path"])
            .arg(a.dir.path())
            .arg(repo_root().join("contrib/ansible"))
            .output()
            .expect("ansible-galaxy");
        assert!(out.status.success(), "build: {}", show(&out));
        let tarball = a.dir.join("hugeshm-hugeshm-0.1.0.tar.gz");
        assert!(tarball.is_file(), "build: {}", show(&out));
        let out = a
            .command("ansible-galaxy")
            .args(["collection", "install", "-p"])
            .arg(a.dir.join("coll"))
            .arg(&tarball)
            .output()
            .expect("ansible-galaxy");
        assert!(out.status.success(), "install: {}", show(&out));
        Some(a)
    }

    /// An Ansible program with the collections path and every temporary
    /// directory of Ansible's inside the test's directory.
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        let d = self.dir.path();
        c.env("ANSIBLE_COLLECTIONS_PATH", d.join("coll"))
            .env("ANSIBLE_HOME", d.join("home"))
            .env("XDG_CACHE_HOME", d.join("cache"))
            .env("ANSIBLE_LOCAL_TEMP", d.join("local-tmp"))
            .env("ANSIBLE_REMOTE_TEMP", d.join("remote-tmp"))
            .env("ANSIBLE_NOCOLOR", "1")
            .env("ANSIBLE_PYTHON_INTERPRETER", "auto_silent")
            .env("LC_ALL", "C.UTF-8");
        c
    }

    /// Writes `text` as a playbook and runs it on localhost with `extra`
    /// options (`--check`, `--diff`), the JSON callback on stdout
    /// (`ansible.posix.json`, in Debian's `ansible`).
    fn play(&mut self, name: &str, text: &str, extra: &[&str]) -> Run {
        let path = self.dir.join(format!("{name}.yml"));
        std::fs::write(&path, text).unwrap();
        if !self.playbooks.contains(&path) {
            self.playbooks.push(path.clone());
        }
        let out = self
            .command("ansible-playbook")
            .env("ANSIBLE_STDOUT_CALLBACK", "ansible.posix.json")
            .args(["-i", "localhost,", "-c", "local"])
            .args(extra)
            .arg(&path)
            .output()
            .expect("ansible-playbook");
        let doc: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{name}: JSON callback: {e}: {}", show(&out)));
        Run {
            ok: out.status.success(),
            doc,
        }
    }

    /// `ansible-lint` on every playbook run (the collection installed).
    fn lint(&self) {
        let out = self
            .command("ansible-lint")
            .args(["--offline", "--nocolor", "-p"])
            .args(&self.playbooks)
            .current_dir(self.dir.path())
            .output()
            .expect("ansible-lint");
        assert!(out.status.success(), "ansible-lint: {}", show(&out));
    }
}

fn show(out: &std::process::Output) -> String {
    format!(
        "{}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A play of one `hugeshm_pools` task (named `Pools`) with these options.
fn pools_play(options: &str) -> String {
    format!(
        "---\n- name: Huge page pools\n  hosts: all\n  gather_facts: false\n  tasks:\n    \
         - name: Pools\n      hugeshm.hugeshm.hugeshm_pools:\n{options}"
    )
}

#[test]
fn collection_sizes_reserves_and_reports_a_postgres_cluster() {
    let Some(pool) = live!() else { return };
    if skip_unless_postgres(pool.name()) {
        return;
    }
    let Some(mut ans) = Ansible::install(pool.name()) else {
        return;
    };
    let bin = env!("CARGO_BIN_EXE_hugeshm");
    {
        let mut pg = PgCluster::init("512MB").expect("initdb");
        let dd = pg.datadir().display().to_string();
        let own: u64 = pg
            .postgres_c("shared_memory_size_in_huge_pages")
            .expect("postgres -C")
            .parse()
            .expect("a page count");
        let plan = json(hugeshm(&[
            "advise",
            "--postgres",
            &dd,
            "--spare",
            "0",
            "--json",
        ]));
        assert_eq!(plan["pools"][0]["pages"].as_u64(), Some(own), "{plan:#}");

        // The 2 MiB pool at 0 (the guard restores it).
        std::fs::write(NR_2M, "0").unwrap();
        assert_eq!(nr_2m(), 0, "pages of the 2 MiB pool are in use by others");

        let options = format!(
            "        binary: {bin}\n        postgres:\n          - {dd}\n        spare: 0\n"
        );
        let first = ans.play("reserve", &pools_play(&options), &[]);
        assert!(first.ok, "{:#}", first.doc);
        let task = first.task("Pools");
        assert_eq!(task["changed"], true, "{task:#}");
        assert_eq!(task["pools"][0]["before"].as_u64(), Some(0), "{task:#}");
        assert_eq!(task["pools"][0]["after"].as_u64(), Some(own), "{task:#}");
        assert_eq!(nr_2m(), own, "the pool after the first run");

        // The server starts requiring huge pages; the facts see it there.
        pg.start("on")
            .expect("PostgreSQL starts with huge_pages=on on the pool the collection set");
        let postmaster = pg.postmaster_pid().expect("postmaster pid");
        let facts_play = format!(
            "---\n- name: Facts\n  hosts: all\n  gather_facts: false\n  tasks:\n    \
             - name: Facts\n      hugeshm.hugeshm.hugeshm_facts:\n        binary: {bin}\n"
        );
        let facts = ans.play("facts", &facts_play, &[]);
        assert!(facts.ok, "{:#}", facts.doc);
        let fact = &facts.task("Facts")["ansible_facts"]["hugeshm"];
        let seg = fact["segments"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| {
                s["kind"] == "anon"
                    && s["attached_pids"]
                        .as_array()
                        .is_some_and(|p| p.contains(&Value::from(postmaster)))
            })
            .unwrap_or_else(|| panic!("no segment of postmaster {postmaster}: {fact:#}"));
        assert_eq!(seg["page_size_bytes"].as_u64(), Some(M2), "{seg:#}");
        assert_eq!(seg["on_huge_pages"], true, "{seg:#}");
        assert_eq!(seg["size_bytes"].as_u64(), Some(own * M2), "{seg:#}");
        assert_eq!(fact["fell_back"], serde_json::json!([]), "{fact:#}");
        assert_eq!(
            fact["pools_by_size"]["2M"]["all"]["total"].as_u64(),
            Some(own),
            "{fact:#}"
        );

        // Second run: nothing changes (the running server is asked now).
        let second = ans.play("reserve", &pools_play(&options), &[]);
        assert!(second.ok, "{:#}", second.doc);
        assert_eq!(second.changed(), 0, "second run: {:#}", second.doc);
        assert_eq!(nr_2m(), own);

        // A host that needs more (a second cluster, down: postgres -C):
        // --check --diff shows it, changes nothing.
        let pg2 = PgCluster::init("128MB").expect("initdb");
        let dd2 = pg2.datadir().display().to_string();
        let own2: u64 = pg2
            .postgres_c("shared_memory_size_in_huge_pages")
            .expect("postgres -C")
            .parse()
            .expect("a page count");
        let root = TempDir::new("ansible-root");
        let more = format!(
            "{}          - {dd2}\n        persist: true\n        root: {}\n",
            options.replace("        spare: 0\n", ""),
            root.path().display()
        );
        let more = format!("{more}        spare: 0\n");
        let check = ans.play("more", &pools_play(&more), &["--check", "--diff"]);
        assert!(check.ok, "{:#}", check.doc);
        let task = check.task("Pools");
        assert_eq!(task["changed"], true, "{task:#}");
        let diff = &task["diff"];
        assert_eq!(diff[0]["before"], format!("2M all: {own}\n"), "{diff:#}");
        assert_eq!(
            diff[0]["after"],
            format!("2M all: {}\n", own + own2),
            "{diff:#}"
        );
        let sysctl = root.join("etc/sysctl.d/60-hugeshm.conf");
        let d = diff
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["after_header"] == sysctl.display().to_string())
            .unwrap_or_else(|| panic!("no diff of {}: {diff:#}", sysctl.display()));
        assert!(
            d["after"]
                .as_str()
                .unwrap()
                .contains(&format!("vm.nr_hugepages = {}", own + own2)),
            "{d:#}"
        );
        assert_eq!(nr_2m(), own, "--check changed the pool");
        assert!(!root.join("etc").exists(), "--check wrote files");

        // More than the host can hold: fails with the numbers, pool kept.
        let huge = format!("{options}        size: 64T\n");
        let failed = ans.play("too-large", &pools_play(&huge), &[]);
        assert!(!failed.ok, "{:#}", failed.doc);
        let task = failed.task("Pools");
        assert_eq!(task["failed"], true, "{task:#}");
        let msg = task["msg"].as_str().unwrap();
        assert!(
            msg.contains("adds 64 TiB")
                && msg.contains("MemAvailable")
                && msg.contains("nothing was changed"),
            "{msg}"
        );
        assert_eq!(nr_2m(), own, "a failed plan changed the pool");

        // persist: the files under the temporary root, once.
        let persist = format!(
            "{options}        persist: true\n        root: {}\n",
            root.path().display()
        );
        let written = ans.play("persist", &pools_play(&persist), &[]);
        assert!(written.ok, "{:#}", written.doc);
        let task = written.task("Pools");
        assert_eq!(task["changed"], true, "{task:#}");
        assert_eq!(task["files"][0]["action"], "created", "{task:#}");
        let text = std::fs::read_to_string(&sysctl).expect("sysctl.d file under the root");
        assert!(text.contains(&format!("vm.nr_hugepages = {own}")), "{text}");
        let again = ans.play("persist", &pools_play(&persist), &[]);
        assert!(again.ok, "{:#}", again.doc);
        assert_eq!(again.changed(), 0, "second persist: {:#}", again.doc);

        ans.lint();
        pg.stop().expect("pg_ctl stop");
    }
    pool.finish();
}
