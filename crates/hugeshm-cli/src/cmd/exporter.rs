//! `hugeshm exporter`: the status and segments reports as Prometheus
//! metrics, over HTTP (`/metrics`), into node_exporter's textfile
//! directory, or once on stdout.
//!
//! Each scrape is a reading of hugeshm-doctor's `Scraper`; one that runs
//! over `--timeout` answers with the scrape metrics only (`hugeshm_up 0`,
//! the error counter raised).

use super::exporter_http::{self, Limits, Request, Response};
use crate::output::Out;
use hugeshm_doctor::metrics::{self, ScrapeInfo, OPENMETRICS_TYPE, PROMETHEUS_TYPE};
use hugeshm_doctor::scrape::Scraper;
use hugeshm_probe::Roots;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// The file written in `--textfile DIR`.
pub const TEXTFILE_NAME: &str = "hugeshm.prom";

/// `hugeshm exporter` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to serve /metrics on: IP:PORT, [IPv6]:PORT, HOST:PORT
    /// (localhost:9731), or :PORT for every IPv4 interface (node_exporter's
    /// spelling; anyone who reaches the host can read the metrics).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9731", value_parser = parse_listen)]
    pub listen: SocketAddr,
    /// Write one scrape to DIR/hugeshm.prom (atomically: a temporary file
    /// renamed over it) for node_exporter's textfile collector, and exit.
    #[arg(long, value_name = "DIR", conflicts_with = "once")]
    pub textfile: Option<PathBuf>,
    /// Print one scrape on stdout and exit.
    #[arg(long)]
    pub once: bool,
    /// With --once: OpenMetrics instead of the Prometheus text format.
    #[arg(long, requires = "once")]
    pub openmetrics: bool,
    /// Seconds a scrape may spend reading the host before it answers with
    /// the scrape error metrics only.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0, value_parser = parse_timeout)]
    pub timeout: f64,
    /// Report the hugetlb cgroup of this process (e.g. the database
    /// server's) instead of the exporter's own.
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
}

/// One scrape as metrics: the registry and whether it read the host.
fn scrape(scraper: &Scraper) -> (prometheus_client::registry::Registry, bool) {
    let got = scraper.scrape();
    let info = ScrapeInfo {
        duration_seconds: got.seconds,
        errors_total: got.errors_total,
    };
    match got.reading {
        Some(r) => (metrics::registry(&r.status, &r.segments, info), true),
        None => (metrics::failed(info), false),
    }
}

/// Past an hour a scrape timeout means nothing (Prometheus gives up long
/// before), and 1e300 seconds overflowed the timer and panicked.
fn check_timeout(seconds: f64) -> Result<(), crate::output::Usage> {
    if seconds > 0.0 && seconds <= 3600.0 {
        Ok(())
    } else {
        Err(crate::output::Usage(format!(
            "--timeout {seconds} must be a number of seconds above 0 and at most 3600"
        )))
    }
}

/// `--timeout`: a number of seconds, above 0, at most an hour.
fn parse_timeout(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    check_timeout(v).map_err(|e| e.to_string())?;
    Ok(v)
}

/// Runs the command.
pub fn run(roots: &Roots, args: &Args, out: &mut Out) -> anyhow::Result<ExitCode> {
    // Past an hour a scrape timeout means nothing (Prometheus gives up
    // long before), and 1e300 seconds overflowed the timer and panicked.
    check_timeout(args.timeout)?;
    let scraper = Scraper::new(
        crate::cmd::doctor_probe(roots),
        args.pid,
        Duration::from_secs_f64(args.timeout),
    );
    if let Some(dir) = &args.textfile {
        let (reg, ok) = scrape(&scraper);
        let path = write_textfile(dir, &metrics::prometheus_text(&reg))?;
        if !ok {
            anyhow::bail!(
                "reading the host ran over {}s: {} has the scrape error metrics only",
                args.timeout,
                path.display()
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    if args.once {
        let (reg, ok) = scrape(&scraper);
        let text = if args.openmetrics {
            metrics::openmetrics(&reg)
        } else {
            metrics::prometheus_text(&reg)
        };
        out.exact(text.trim_end())?;
        out.flush()?;
        if !ok {
            anyhow::bail!(
                "reading the host ran over {}s: printed the scrape error metrics only",
                args.timeout
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    serve(&scraper, args.listen)
}

/// Writes `DIR/hugeshm.prom`, mode 0644, through a new file of a random
/// name in DIR (`.hugeshm.prom.*.tmp`, a name the textfile collector
/// ignores) renamed over it; a `hugeshm.prom` that is a symlink or not a
/// regular file is refused, never followed.
fn write_textfile(dir: &Path, text: &str) -> anyhow::Result<PathBuf> {
    use anyhow::Context;
    let path = dir.join(TEXTFILE_NAME);
    hugeshm_sys::DirHandle::open(dir)
        .and_then(|d| d.write_atomic(TEXTFILE_NAME, text.as_bytes(), 0o644))
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// `--listen`: `IP:PORT`, `[IPv6]:PORT`, `HOST:PORT` (the first address
/// HOST resolves to, IPv4 first: `localhost` is 127.0.0.1), or `:PORT`,
/// every IPv4 interface, as node_exporter's `--web.listen-address=:9100`.
fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    use std::net::{Ipv4Addr, ToSocketAddrs};
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err(format!(
            "{s:?} is not an address: give IP:PORT, HOST:PORT or :PORT (e.g. :9731)"
        ));
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{s:?}: {port:?} is not a port (1 to 65535)"))?;
    if host.is_empty() {
        return Ok(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)));
    }
    if host.eq_ignore_ascii_case("localhost") {
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    let mut all: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{s:?}: cannot resolve {host:?}: {e}"))?
        .collect();
    all.sort_by_key(|a| a.is_ipv6());
    all.first()
        .copied()
        .ok_or_else(|| format!("{s:?}: {host:?} has no address"))
}

/// Serves /metrics until the process is killed (the server's limits are
/// in [`exporter_http`]).
fn serve(scraper: &Scraper, addr: SocketAddr) -> anyhow::Result<ExitCode> {
    let listener = std::net::TcpListener::bind(addr)
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    if addr.ip().is_unspecified() {
        crate::terminal::eprintln(format_args!(
            "hugeshm: warning: serving on every interface ({addr}): anyone who can reach this \
             host can read its pools, segments and their processes; the default, \
             127.0.0.1:9731, serves only this host"
        ));
    }
    crate::terminal::eprintln(format_args!("hugeshm: serving http://{addr}/metrics"));
    exporter_http::serve(&listener, Limits::default(), &|req| answer(scraper, req))
}

/// The answer to one request: /metrics to GET and HEAD, in the format the
/// `Accept` header prefers; 404 elsewhere, 405 to other methods.
fn answer(scraper: &Scraper, req: &Request) -> Response {
    if req.path != "/metrics" {
        return Response::text(404, "not found: the metrics are at /metrics\n");
    }
    if req.method != "GET" && req.method != "HEAD" {
        return Response {
            headers: vec!["Allow: GET, HEAD".to_string()],
            ..Response::text(405, "method not allowed: use GET\n")
        };
    }
    let (reg, _) = scrape(scraper);
    let (content_type, body) = if metrics::wants_openmetrics(req.accept.as_deref()) {
        (OPENMETRICS_TYPE, metrics::openmetrics(&reg))
    } else {
        (PROMETHEUS_TYPE, metrics::prometheus_text(&reg))
    };
    Response {
        status: 200,
        content_type,
        headers: Vec::new(),
        body,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_as_admins_type_them() {
        let a = |s: &str| parse_listen(s).map(|a| a.to_string());
        assert_eq!(a("127.0.0.1:9731"), Ok("127.0.0.1:9731".into()));
        assert_eq!(a("[::1]:9731"), Ok("[::1]:9731".into()));
        assert_eq!(a(":9100"), Ok("0.0.0.0:9100".into()));
        assert_eq!(a("localhost:9731"), Ok("127.0.0.1:9731".into()));
        assert_eq!(a("LocalHost:1"), Ok("127.0.0.1:1".into()));
        assert!(a("9731").unwrap_err().contains("e.g. :9731"));
        assert!(a(":").unwrap_err().contains("not a port"));
        assert!(a(":65536").unwrap_err().contains("not a port"));
        assert!(a("localhost:x").unwrap_err().contains("not a port"));
    }
}
