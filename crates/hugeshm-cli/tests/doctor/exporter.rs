//! `hugeshm exporter` on the live host: `--once` and `--textfile` output that
//! parses and carries the kernel's pool, `promtool check metrics`, the HTTP
//! endpoint's 404/405 and content negotiation, and a real Prometheus server
//! scraping it. No pool is changed; the pool lock is held while a value is
//! compared with the kernel's so no other test resizes a pool meanwhile.

use crate::common;

use hugeshm_testkit::{observe, skip, test_name, TempDir};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NR_2M: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";
const POOL_2M_TOTAL: &str =
    r#"hugeshm_pool_pages{page_size_bytes="2097152",page_size="2Mi",state="total"}"#;

/// The kernel's 2 MiB pool size, or `None` (after a skip).
fn kernel_2m_pages(test: &str) -> Option<u64> {
    match std::fs::read_to_string(NR_2M) {
        Ok(s) => Some(s.trim().parse().expect("nr_hugepages is a number")),
        Err(e) => {
            skip(test, format_args!("no 2 MiB pool ({NR_2M}: {e})"));
            None
        }
    }
}

/// Samples of the Prometheus text format: `name{labels}` → value. Panics on
/// a line that is neither a comment nor `series value`.
fn parse(text: &str) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("not a sample: {line:?}"));
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("not a value: {line:?}"));
        assert!(
            m.insert(series.to_string(), value).is_none(),
            "{series} twice"
        );
    }
    m
}

/// A child process killed and reaped on drop (every path, panics included).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn on_path(bin: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
        .unwrap_or(false)
}

/// One HTTP/1.0 request: (status, headers lower-cased, body); `None` when
/// nothing listens yet.
fn http(
    port: u16,
    method: &str,
    path: &str,
    accept: Option<&str>,
) -> Option<(u16, String, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n{accept}Connection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, head.to_lowercase(), body.to_string()))
}

/// Starts `hugeshm exporter --listen` on a free port and waits for it.
fn start_exporter() -> (Killed, u16) {
    start_exporter_with_fd_limit(None)
}

/// Starts the exporter, with at most `fds` file descriptors when given
/// (`ulimit -n` in a shell that then runs it: same process).
fn start_exporter_with_fd_limit(fds: Option<u32>) -> (Killed, u16) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut c = common::cmd(&["exporter", "--listen", &listen]);
    if let Some(n) = fds {
        let bin = env!("CARGO_BIN_EXE_hugeshm");
        let script = format!("ulimit -n {n} && exec \"$0\" \"$@\"");
        let mut sh = Command::new("sh");
        sh.args(["-c", &script, bin, "exporter", "--listen", &listen]);
        // The same environment as common::cmd's.
        for (k, v) in c.get_envs() {
            match v {
                Some(v) => sh.env(k, v),
                None => sh.env_remove(k),
            };
        }
        c = sh;
    }
    let child = c
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start hugeshm exporter");
    let child = Killed(child);
    let t = Instant::now();
    while http(port, "GET", "/nothing", None).is_none() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "exporter not up on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (child, port)
}

#[test]
fn once_parses_and_carries_the_kernel_pool() {
    let _lock = observe!();
    let Some(nr) = kernel_2m_pages(test_name!()) else {
        return;
    };
    let out = common::hugeshm(&["exporter", "--once"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let m = parse(&text);
    assert_eq!(m.get(POOL_2M_TOTAL), Some(&(nr as f64)), "{text}");
    assert_eq!(m.get("hugeshm_up"), Some(&1.0), "{text}");
    assert_eq!(m.get("hugeshm_scrape_errors_total"), Some(&0.0), "{text}");
    assert!(m.contains_key("hugeshm_scrape_duration_seconds"), "{text}");
    assert!(m.contains_key("hugeshm_silent_fallback_bytes"), "{text}");
    assert!(text.contains("# TYPE hugeshm_scrape_errors_total counter\n"));
    assert!(!text.contains("# EOF"));

    let om = common::hugeshm(&["exporter", "--once", "--openmetrics"]);
    let om = String::from_utf8(om.stdout).unwrap();
    assert!(om.ends_with("# EOF\n"), "{om}");
    assert!(
        om.contains("# TYPE hugeshm_scrape_errors counter\n"),
        "{om}"
    );
}

/// A `--timeout` that is no time is a usage error, exit 2 (1e300
/// overflowed the timer and panicked).
#[test]
fn timeouts_that_are_no_time_are_refused() {
    for t in ["0", "-1", "nan", "inf", "1e300", "3601"] {
        let arg = format!("--timeout={t}");
        let out = common::hugeshm(&["exporter", "--once", &arg]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{t}: {err}");
        assert!(
            err.contains("must be a number of seconds above 0 and at most 3600"),
            "{t}: {err}"
        );
        assert!(!err.contains("panicked"), "{t}: {err}");
        assert!(out.stdout.is_empty(), "{t}");
    }
}

#[test]
fn promtool_check_metrics_passes() {
    if !on_path("promtool") {
        return skip(
            test_name!(),
            "no promtool on PATH (apt-get install prometheus)",
        );
    }
    let out = common::hugeshm(&["exporter", "--once"]);
    assert!(out.status.success());
    let mut p = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    p.stdin.take().unwrap().write_all(&out.stdout).unwrap();
    let r = p.wait_with_output().unwrap();
    assert!(
        r.status.success(),
        "promtool check metrics: {}{}\n{}",
        String::from_utf8_lossy(&r.stdout),
        String::from_utf8_lossy(&r.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn textfile_is_written_whole_and_alone() {
    let _lock = observe!();
    let dir = TempDir::new("exporter-textfile");
    let d = dir.path().to_str().unwrap();
    let out = common::hugeshm(&["exporter", "--textfile", d]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["hugeshm.prom"], "only the file, no temporary left");
    let text = std::fs::read_to_string(Path::new(dir.path()).join("hugeshm.prom")).unwrap();
    let m = parse(&text);
    if let Some(nr) = kernel_2m_pages(test_name!()) {
        assert_eq!(m.get(POOL_2M_TOTAL), Some(&(nr as f64)), "{text}");
    }
    // A directory that does not exist is an error, not a crash.
    let missing = dir.path().join("missing");
    let out = common::hugeshm(&["exporter", "--textfile", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot write"));
}

#[test]
fn http_paths_methods_and_content_types() {
    let (_exporter, port) = start_exporter();
    let (status, _, _) = http(port, "GET", "/", None).unwrap();
    assert_eq!(status, 404);
    let (status, _, _) = http(port, "GET", "/metricsx", None).unwrap();
    assert_eq!(status, 404);
    for method in ["POST", "PUT", "DELETE"] {
        let (status, head, _) = http(port, method, "/metrics", None).unwrap();
        assert_eq!(status, 405, "{method}");
        assert!(head.contains("allow: get"), "{head}");
    }
    // Garbage is answered (or the connection closed), and the server lives on.
    if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
        let _ = s.write_all(b"\x00\x01 nonsense\r\n\r\n");
    }
    let (status, head, body) = http(port, "GET", "/metrics", None).unwrap();
    assert_eq!(status, 200);
    assert!(
        head.contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    let m = parse(&body);
    assert_eq!(m.get("hugeshm_up"), Some(&1.0), "{body}");
    let (status, head, body) = http(
        port,
        "GET",
        "/metrics?x=1",
        Some("application/openmetrics-text;version=1.0.0,text/plain;q=0.5"),
    )
    .unwrap();
    assert_eq!(status, 200);
    assert!(
        head.contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");
}

#[test]
fn prometheus_scrapes_the_kernel_pool() {
    let test = test_name!();
    if !on_path("prometheus") {
        return skip(test, "no prometheus on PATH (apt-get install prometheus)");
    }
    let _lock = observe!();
    let Some(nr) = kernel_2m_pages(test) else {
        return;
    };
    let (_exporter, port) = start_exporter();
    let dir = TempDir::new("exporter-prometheus");
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
             scrape_configs:\n  - job_name: hugeshm\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        ),
    )
    .unwrap();
    let prom_port = free_port();
    let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
    let prom = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start prometheus");
    let _prom = Killed(prom);
    let query = "/api/v1/query?query=hugeshm_pool_pages%7Bpage_size_bytes%3D%222097152%22%2Cstate%3D%22total%22%7D";
    let t = Instant::now();
    let mut last = String::new();
    loop {
        if let Some((200, _, body)) = http(prom_port, "GET", query, None) {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            if let Some(value) = v["data"]["result"][0]["value"][1].as_str() {
                assert_eq!(v["data"]["result"][0]["metric"]["job"], "hugeshm");
                assert_eq!(value, nr.to_string(), "{body}");
                break;
            }
            last = body;
        }
        if t.elapsed() > Duration::from_secs(90) {
            let log =
                std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default();
            panic!("Prometheus never had the pool metric; last answer {last}\nlog:\n{log}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A copy of the `clean` fixture tree whose `proc/meminfo` is a named pipe
/// nobody writes: reading the host blocks in open(2) until the test writes
/// the fixture's meminfo into it.
struct BlockedProc {
    dir: TempDir,
    meminfo: String,
}

impl BlockedProc {
    fn new() -> BlockedProc {
        let dir = TempDir::new("exporter-blocked");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/clean");
        let st = Command::new("cp")
            .arg("-a")
            .arg(src.join("."))
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(st.success());
        let fifo = dir.path().join("proc/meminfo");
        let meminfo = std::fs::read_to_string(&fifo).unwrap();
        std::fs::remove_file(&fifo).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        BlockedProc { dir, meminfo }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = common::cmd(&[]);
        c.arg("--proc-root")
            .arg(self.dir.path().join("proc"))
            .arg("--sys-root")
            .arg(self.dir.path().join("sys"))
            .arg("--fs-root")
            .arg(self.dir.path().join("fs"))
            .args(args);
        c
    }

    /// Writes meminfo into the pipe once a reader has it open (waits up to
    /// 10 s for one); false when none came.
    fn unblock(&self) -> bool {
        let fifo = self.dir.path().join("proc/meminfo");
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            // O_NONBLOCK: fails with ENXIO while no reader has it open.
            match std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
                .open(&fifo)
            {
                Ok(mut f) => {
                    // A full pipe would only mean the reader stopped reading.
                    let _ = f.write_all(self.meminfo.as_bytes());
                    return true;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        false
    }
}

/// The exporter answers while /proc stays blocked (the test never
/// unblocks it): the timer fired, and said so.
#[test]
fn once_with_a_blocked_proc_answers_within_the_timeout() {
    let blocked = BlockedProc::new();
    let out = blocked
        .cmd(&["exporter", "--once", "--timeout", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ran over 1s"), "{err}");
    let text = String::from_utf8(out.stdout).unwrap();
    let m = parse(&text);
    assert_eq!(m.get("hugeshm_up"), Some(&0.0), "{text}");
    assert_eq!(m.get("hugeshm_scrape_errors_total"), Some(&1.0), "{text}");
    assert!(
        m["hugeshm_scrape_duration_seconds"] >= 1.0,
        "the scrape ended by its 1 s timer: {text}"
    );
    assert!(
        !m.keys().any(|k| k.starts_with("hugeshm_pool_pages")),
        "{text}"
    );
}

/// The threads of process `pid` named `name` (`/proc/PID/task/*/comm`).
fn threads_named(pid: u32, name: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim_end() == name)
        })
        .count()
}

#[test]
fn http_with_a_blocked_proc_answers_within_the_timeout_and_recovers() {
    let blocked = BlockedProc::new();
    let port = free_port();
    let child = blocked
        .cmd(&[
            "exporter",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--timeout",
            "1",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let exporter = Killed(child);
    let t = Instant::now();
    while http(port, "GET", "/nothing", None).is_none() {
        assert!(t.elapsed() < Duration::from_secs(20), "exporter not up");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Two scrapes while /proc hangs: each is answered when its timer
    // fires, with the error metric counting up; the second waits on the
    // same stuck reading instead of starting another (one reader thread).
    let pid = exporter.0.id();
    for n in 1..=2 {
        let (status, _, body) = http(port, "GET", "/metrics", None).unwrap();
        assert_eq!(status, 200);
        let m = parse(&body);
        assert_eq!(m.get("hugeshm_up"), Some(&0.0), "{body}");
        assert_eq!(
            m.get("hugeshm_scrape_errors_total"),
            Some(&f64::from(n)),
            "{body}"
        );
        assert!(
            m["hugeshm_scrape_duration_seconds"] >= 1.0,
            "scrape {n} ended by its 1 s timer: {body}"
        );
        assert_eq!(threads_named(pid, "hugeshm-scrape"), 1, "scrape {n}");
    }
    // Bad requests are still answered meanwhile (/proc is still blocked).
    assert_eq!(http(port, "GET", "/", None).unwrap().0, 404);
    // /proc answers: the stuck reading completes and the next scrape
    // serves it (the errors so far stay counted).
    assert!(blocked.unblock(), "no reader opened the pipe");
    let (status, _, body) = http(port, "GET", "/metrics", None).unwrap();
    assert_eq!(status, 200);
    let m = parse(&body);
    assert_eq!(m.get("hugeshm_up"), Some(&1.0), "{body}");
    assert_eq!(m.get("hugeshm_scrape_errors_total"), Some(&2.0), "{body}");
    assert!(
        m.contains_key(
            r#"hugeshm_pool_pages{page_size_bytes="2097152",page_size="2Mi",state="total"}"#
        ),
        "{body}"
    );
}

/// The open file descriptors of a process.
fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// A `kB` field of /proc/PID/status (VmHWM, VmRSS).
fn status_kib(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"));
    line.trim().trim_end_matches("kB").trim().parse().unwrap()
}

/// `n` connections that send nothing (fewer if the test's own descriptor
/// limit is near, or connecting stalls for 30 s).
fn idle_connections(port: u16, n: usize) -> Vec<TcpStream> {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    let n = n.min(usize::try_from(soft.saturating_sub(64)).unwrap_or(usize::MAX));
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let t = Instant::now();
    let mut conns = Vec::new();
    while conns.len() < n && t.elapsed() < Duration::from_secs(30) {
        if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            conns.push(s);
        }
    }
    conns
}

/// GET /metrics until it answers 200 (up to 60 s); the body.
fn metrics_once_up(port: u16) -> String {
    let t = Instant::now();
    loop {
        if let Some((200, _, body)) = http(port, "GET", "/metrics", None) {
            return body;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the exporter never answered /metrics again"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// 1000 idle connections: the exporter holds a bounded number of them
/// (tiny_http took every one, ~600 of them ran it out of descriptors),
/// answers the rest 503, drops the idle ones at its head deadline, and
/// serves /metrics again.
#[test]
fn idle_connections_are_bounded_and_the_exporter_serves_on() {
    let (mut exporter, port) = start_exporter();
    let pid = exporter.0.id();
    let base = fd_count(pid);
    let idle = idle_connections(port, 1000);
    assert!(idle.len() >= 200, "only {} connections opened", idle.len());
    // Each accepted connection is either held (a descriptor) or answered
    // 503 and closed: the descriptors stay bounded however many come.
    let held = fd_count(pid).saturating_sub(base);
    assert!(
        held <= 40,
        "the exporter holds {held} descriptors for {} idle connections",
        idle.len()
    );
    let busy = idle.iter().filter(|s| {
        let mut s = *s;
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut b = [0u8; 64];
        matches!(s.read(&mut b), Ok(n) if n > 0 && b[..n].starts_with(b"HTTP/1.1 503"))
    });
    assert!(busy.count() > 0, "no connection was answered 503");
    // Idle connections are cut at the head deadline; then /metrics answers.
    let body = metrics_once_up(port);
    assert_eq!(parse(&body).get("hugeshm_up"), Some(&1.0), "{body}");
    assert!(
        exporter.0.try_wait().unwrap().is_none(),
        "the exporter ended"
    );
    drop(idle);
}

/// With its descriptors used up (a limit of 24, below its connection
/// bound), accept fails with EMFILE: the exporter pauses and accepts again
/// once connections close (tiny_http either ended the process with status
/// 0, so Restart=on-failure never restarted it, or stopped answering).
#[test]
fn an_accept_error_does_not_end_the_exporter() {
    let (mut exporter, port) = start_exporter_with_fd_limit(Some(24));
    let pid = exporter.0.id();
    let idle = idle_connections(port, 100);
    // Wait (a while at most) until the exporter has its descriptors used
    // up, or has ended; accept fails from then on.
    let t = Instant::now();
    while fd_count(pid) < 23
        && exporter.0.try_wait().unwrap().is_none()
        && t.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        exporter.0.try_wait().unwrap().is_none(),
        "the exporter ended on EMFILE"
    );
    drop(idle);
    let body = metrics_once_up(port);
    assert_eq!(parse(&body).get("hugeshm_up"), Some(&1.0), "{body}");
    assert!(
        exporter.0.try_wait().unwrap().is_none(),
        "the exporter ended"
    );
}

/// A 300 MiB header line is cut off at the head limit (8 KiB) and
/// answered 431 and closed: the exporter's peak memory stays small
/// (tiny_http read the whole line: 315 MB), and the client learns it at
/// once, not after a limit (30 s, far beyond the exporter's 5 s head
/// deadline) spent writing to an exporter that stopped reading.
#[test]
fn a_huge_header_line_is_cut_off_early() {
    use std::io::ErrorKind;
    const LIMIT: Duration = Duration::from_secs(30);
    let (mut exporter, port) = start_exporter();
    let pid = exporter.0.id();
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nX-Long: ").unwrap();
    // Short waits: a peer that stops reading still takes a few hundred
    // KiB now and then, so a single write's timeout may never fire.
    s.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
    let chunk = vec![b'a'; 1 << 20];
    let mut sent = 0usize;
    let started = Instant::now();
    // The sending ends because the exporter closed (a reset, a broken
    // pipe), not because it stopped reading and left the connection open.
    let cut = loop {
        assert!(sent < 300 << 20, "the exporter read a 300 MiB header line");
        match s.write(&chunk) {
            Ok(n) => sent += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => break e,
        }
        assert!(
            started.elapsed() < LIMIT,
            "the exporter neither read on nor closed within {LIMIT:?} ({sent} bytes sent)"
        );
    };
    assert!(
        matches!(
            cut.kind(),
            ErrorKind::BrokenPipe | ErrorKind::ConnectionReset
        ),
        "{cut}"
    );
    let mut answer = Vec::new();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    match s.read_to_end(&mut answer) {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Err(e) => panic!("the connection was not closed within {LIMIT:?}: {e}"),
    }
    let hwm = status_kib(pid, "VmHWM");
    assert!(hwm < 64 * 1024, "the exporter's peak memory is {hwm} kB");
    let body = metrics_once_up(port);
    assert_eq!(parse(&body).get("hugeshm_up"), Some(&1.0), "{body}");
    assert!(
        exporter.0.try_wait().unwrap().is_none(),
        "the exporter ended"
    );
    // What came back, when the answer was read before the reset: 431.
    if !answer.is_empty() {
        assert!(
            answer.starts_with(b"HTTP/1.1 431 "),
            "{}",
            String::from_utf8_lossy(&answer)
        );
    }
}

/// A client that trickles its head a header every 100 ms is answered 408
/// and closed at the head deadline instead of holding its connection.
#[test]
fn a_slow_loris_is_cut_off() {
    let (_exporter, port) = start_exporter();
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    let t = Instant::now();
    let mut answer = Vec::new();
    let mut b = [0u8; 4096];
    loop {
        // Guards against a hang only: the head deadline is 5 s.
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "still connected after 2 minutes of trickling"
        );
        if s.write_all(b"X-Slow: 1\r\n").is_err() {
            break;
        }
        match s.read(&mut b) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&b[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    assert!(
        answer.starts_with(b"HTTP/1.1 408 "),
        "{}",
        String::from_utf8_lossy(&answer)
    );
}
