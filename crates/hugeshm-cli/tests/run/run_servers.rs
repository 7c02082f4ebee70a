//! `hugeshm run --private --prefault` with servers that reserve address
//! space, then commit inside it (`MAP_FIXED`), as root:
//!
//! * MariaDB 10.11 (Debian's, started as `mariadbd` with a 256 MiB buffer
//!   pool, `--min-size 128M`): the pool sits on 2 MiB pages, whole (mariadbd's smaps), with
//!   its record; the server answers queries over its socket and shuts down
//!   cleanly, its log free of errors and of `hugeshm run:` lines, and its
//!   records go with its reservation.
//! * OpenJDK 17 (`-Xms256m -Xmx256m`): the heap sits on 2 MiB pages but
//!   for the one 2 MiB page the JVM maps its archived heap (CDS) into,
//!   which is split onto base pages first (else that `MAP_FIXED` fails
//!   with `EINVAL` and the JVM dies at start), with a record for the
//!   piece; a program that allocates and collects runs to its end with
//!   exit 0.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use crate::run_postgres::{records_of, run_wrapper};
use hugeshm_testkit::live;
use hugeshm_testkit::postgres::{read_smaps, SmapsVma};
use hugeshm_testkit::run_servers::{jdk17_unavailable, mariadb_unavailable, JavaProgram, MariaDb};

const M2: u64 = 2 << 20;

/// The process's mappings on 2 MiB hugetlb pages.
fn on_2m(pid: u32) -> Vec<SmapsVma> {
    read_smaps(pid)
        .expect("smaps")
        .into_iter()
        .filter(|v| v.kernel_page_kb() == Some(2048) && v.path.contains("anon_hugepage"))
        .collect()
}

fn hugetlb_kb(v: &SmapsVma) -> u64 {
    ["Shared_Hugetlb", "Private_Hugetlb"]
        .iter()
        .map(|k| v.fields.get(*k).copied().unwrap_or(0))
        .sum()
}

#[test]
fn mariadb_buffer_pool_committed_in_its_reservation_goes_on_2m_pages() {
    let Some(pool) = live!() else { return };
    if let Some(why) = mariadb_unavailable() {
        hugeshm_testkit::skip(pool.name(), why);
        return;
    }
    // The buffer pool alone (128 pages): --min-size 128M leaves
    // mariadbd's two other private mappings (about 122 and 105 MiB,
    // ordinary mmaps) as they are.
    pool.ensure_free(M2, 130).expect("130 free 2 MiB pages");
    let mut db = MariaDb::install().expect("mariadb-install-db");
    let run = ["--private", "--prefault", "--min-size", "128M"];
    db.start(&run_wrapper(&run), "256M", &[])
        .expect("mariadbd under hugeshm run");
    let pid = db.pid().unwrap();
    let huge = on_2m(pid);
    let buffer_pool = huge
        .iter()
        .find(|v| v.size_kb() == Some(256 << 10))
        .unwrap_or_else(|| panic!("no 256 MiB mapping on 2 MiB pages: {huge:#?}\n{}", db.log()));
    assert_eq!(
        hugetlb_kb(buffer_pool),
        256 << 10,
        "pre-faulted whole: {buffer_pool:?}"
    );
    assert!(
        records_of(pid).contains(&format!("hugeshm-run.{pid}.{:x}", buffer_pool.start)),
        "its record: {:?}",
        records_of(pid)
    );
    // The server works on it.
    assert_eq!(
        db.query("SELECT @@innodb_buffer_pool_size").unwrap(),
        "268435456"
    );
    db.query(
        "CREATE DATABASE t; CREATE TABLE t.a (k INT PRIMARY KEY, v VARCHAR(100)) ENGINE=InnoDB; \
         INSERT INTO t.a SELECT seq, REPEAT('x', 100) FROM t.seq_1_to_20000",
    )
    .expect("a table in the buffer pool");
    assert_eq!(db.query("SELECT COUNT(*) FROM t.a").unwrap(), "20000");
    let st = db.shutdown().expect("shutdown");
    assert!(st.success(), "{st}\n{}", db.log());
    let log = db.log();
    assert!(log.contains("Shutdown complete"), "{log}");
    assert!(!log.contains("[ERROR]"), "{log}");
    assert!(!log.contains("hugeshm run:"), "nothing to say: {log}");
    assert!(
        records_of(pid).is_empty(),
        "records left: {:?}",
        records_of(pid)
    );
}

const ALLOC: &str = r#"
public class Alloc {
    static long churn(int rounds) {
        long sum = 0;
        for (int r = 0; r < rounds; r++) {
            java.util.List<byte[]> l = new java.util.ArrayList<>();
            for (int i = 0; i < 100; i++) l.add(new byte[1 << 20]);
            sum += l.size();
            System.gc();
        }
        return sum;
    }
    public static void main(String[] a) throws Exception {
        long sum = churn(5);
        System.out.println("ready");
        System.out.flush();
        new java.io.BufferedReader(new java.io.InputStreamReader(System.in)).readLine();
        sum += churn(10);
        System.out.println("done " + sum);
    }
}
"#;

#[test]
fn jvm_heap_committed_in_its_reservation_goes_on_2m_pages_and_gc_runs() {
    let Some(pool) = live!() else { return };
    if let Some(why) = jdk17_unavailable() {
        hugeshm_testkit::skip(pool.name(), why);
        return;
    }
    pool.ensure_free(M2, 140).expect("140 free 2 MiB pages");
    let prog = JavaProgram::compile("Alloc", ALLOC).expect("javac");
    let mut words = run_wrapper(&["--private", "--prefault"]);
    words.extend(prog.words(&["-Xms256m", "-Xmx256m"]));
    let mut child = Command::new(&words[0])
        .args(&words[1..])
        .current_dir(prog.dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("java under hugeshm run");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            if let Ok(None) = self.0.try_wait() {
                let _ = self.0.kill();
                let _ = self.0.wait();
                hugeshm_testkit::run_servers::remove_run_records(self.0.id());
            }
        }
    }
    let pid = child.id();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut stdin = child.stdin.take().unwrap();
    let mut child = Kill(child);
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    if line.trim() != "ready" {
        let _ = child.0.kill();
        let out = child.0.wait_with_output_stderr();
        panic!("the JVM did not get ready: {line:?}\n{out}");
    }
    let huge = on_2m(pid);
    let heap_kb: u64 = huge.iter().map(|v| v.size_kb().unwrap_or(0)).sum();
    // 256 MiB, less the 2 MiB page its archived heap was mapped into.
    assert!(
        ((254 << 10)..=(256 << 10)).contains(&heap_kb),
        "the heap on 2 MiB pages: {huge:#?}"
    );
    assert_eq!(
        huge.iter().map(hugetlb_kb).sum::<u64>(),
        heap_kb,
        "pre-faulted whole: {huge:#?}"
    );
    // Its record, for the piece left on 2 MiB pages.
    let heap = huge.iter().max_by_key(|v| v.size_kb()).unwrap();
    assert!(
        records_of(pid).contains(&format!("hugeshm-run.{pid}.{:x}", heap.start)),
        "its record: {:?}",
        records_of(pid)
    );
    writeln!(stdin, "go").unwrap();
    drop(stdin);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let st = child.0.wait().unwrap();
    let err = child.0.wait_with_output_stderr();
    assert!(st.success(), "{st}: {rest}\n{err}");
    assert!(rest.starts_with("done 1500"), "{rest}");
    assert!(!err.contains("hugeshm run:"), "nothing to say: {err}");
}

trait StderrText {
    fn wait_with_output_stderr(&mut self) -> String;
}

impl StderrText for std::process::Child {
    fn wait_with_output_stderr(&mut self) -> String {
        let mut s = String::new();
        if let Some(mut e) = self.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut s);
        }
        s
    }
}
