//! The exporter's HTTP server: HTTP/1.0 and 1.1 over `std::net`, one
//! request per connection, with every resource a client can hold bounded.
//!
//! The exporter answers one path to a scraper on the same host, so the
//! server is small and owns its limits (tiny_http 0.12 had none: ~600 idle
//! connections ran it out of file descriptors and the accept error ended
//! the process with status 0; a 300 MiB header line grew it to 315 MB):
//!
//! - at most [`Limits::connections`] connections at once; one more is
//!   answered `503` at once (a non-blocking write) and closed;
//! - the request head (request line and headers) is read into a buffer of
//!   [`Limits::head_bytes`]; a head that does not end within it is answered
//!   `431` and closed, so a client costs at most that much memory;
//! - the whole head must arrive within [`Limits::head_deadline`] (a
//!   slow-loris client trickling a byte at a time is cut off, then answered
//!   `408`), and a response must be taken within [`Limits::write_timeout`];
//! - an accept error (EMFILE, ENFILE, ENOBUFS, ...) never ends the server:
//!   it pauses [`ACCEPT_PAUSE`] and accepts again (the connections it holds
//!   time out meanwhile), saying so on stderr once per run of errors.
//!
//! The response always closes the connection (`Connection: close`).

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long the accept loop waits after an accept error.
pub const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// What one client may hold.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once.
    pub connections: usize,
    /// Bytes of request line and headers together.
    pub head_bytes: usize,
    /// Time from accept until the end of the request head.
    pub head_deadline: Duration,
    /// Time a response's write may block on a client that does not read.
    pub write_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connections: 32,
            head_bytes: 8 * 1024,
            head_deadline: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
        }
    }
}

/// A request head that parsed.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `HEAD`, ... as sent.
    pub method: String,
    /// The target without its query (`/metrics`).
    pub path: String,
    /// The `Accept` header's value (several joined with `,`).
    pub accept: Option<String>,
}

/// What the handler answers.
#[derive(Debug)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The `Content-Type` value.
    pub content_type: &'static str,
    /// Extra headers (`Allow`), each `Name: value` without the line end.
    pub headers: Vec<String>,
    /// The body (not sent for HEAD; its length is).
    pub body: String,
}

impl Response {
    /// A `text/plain` answer.
    pub fn text(status: u16, body: &str) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            headers: Vec::new(),
            body: body.to_string(),
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

/// The bytes of a response: status line, headers, blank line, and the body
/// unless `head_only`.
fn encode(r: &Response, head_only: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len()
    );
    for h in &r.headers {
        out.push_str(h);
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    if !head_only {
        bytes.extend_from_slice(r.body.as_bytes());
    }
    bytes
}

/// Parses a request head (everything before the blank line): the status
/// to answer with when it is not a request this server reads.
pub fn parse_head(head: &[u8]) -> Result<Request, u16> {
    let text = std::str::from_utf8(head).map_err(|_| 400u16)?;
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(400);
    };
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    };
    if !token(method) || !target.starts_with('/') || target.bytes().any(|b| !b.is_ascii_graphic()) {
        return Err(400);
    }
    match version {
        "HTTP/1.0" | "HTTP/1.1" => {}
        v if v.starts_with("HTTP/") => return Err(505),
        _ => return Err(400),
    }
    let mut accept: Option<String> = None;
    for l in lines.filter(|l| !l.is_empty()) {
        // No folded lines (RFC 9112 5.2), no space before the colon.
        let (name, value) = l.split_once(':').ok_or(400u16)?;
        if !token(name) || value.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
            return Err(400);
        }
        if name.eq_ignore_ascii_case("accept") {
            let v = value.trim_matches([' ', '\t']);
            match &mut accept {
                Some(a) => {
                    a.push(',');
                    a.push_str(v);
                }
                None => accept = Some(v.to_string()),
            }
        }
    }
    let path = target.split('?').next().unwrap_or_default().to_string();
    Ok(Request {
        method: method.to_string(),
        path,
        accept,
    })
}

/// Why no request head was read.
#[derive(Debug, PartialEq, Eq)]
enum HeadError {
    /// The client closed or failed before the head ended: nothing to answer.
    Gone,
    /// Answer with this status and close.
    Answer(u16),
}

/// Where the head ends (the index just past the blank line), if it does.
fn head_end(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Reads the request head within the limits: at most `head_bytes`, all of
/// it before `deadline`.
fn read_head(s: &mut TcpStream, limits: &Limits, deadline: Instant) -> Result<Vec<u8>, HeadError> {
    let mut buf = vec![0u8; limits.head_bytes];
    let mut len = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(HeadError::Answer(408));
        }
        s.set_read_timeout(Some(left))
            .map_err(|_| HeadError::Gone)?;
        match s.read(&mut buf[len..]) {
            Ok(0) => return Err(HeadError::Gone),
            Ok(n) => {
                // The blank line may straddle two reads.
                let from = len.saturating_sub(3);
                len += n;
                if let Some(end) = head_end(&buf[from..len]) {
                    buf.truncate(from + end);
                    return Ok(buf);
                }
                if len == buf.len() {
                    return Err(HeadError::Answer(431));
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(HeadError::Answer(408));
            }
            Err(_) => return Err(HeadError::Gone),
        }
    }
}

/// Writes the response, closes the sending side, and reads what the
/// client still sends (a body nobody asked for) for a moment, so that
/// closing does not reset the connection under the response.
fn finish(mut s: TcpStream, bytes: &[u8], limits: &Limits) {
    let _ = s.set_write_timeout(Some(limits.write_timeout));
    if s.write_all(bytes).is_err() {
        return;
    }
    let _ = s.shutdown(Shutdown::Write);
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut sink = [0u8; 4096];
    let mut drained = 0usize;
    while drained < 64 * 1024 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || s.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match s.read(&mut sink) {
            Ok(0) | Err(_) => return,
            Ok(n) => drained += n,
        }
    }
}

/// One connection: head, handler, response.
fn connection(
    mut s: TcpStream,
    limits: &Limits,
    accepted: Instant,
    handler: &(dyn Fn(&Request) -> Response + Sync),
) {
    let deadline = accepted + limits.head_deadline;
    let head = match read_head(&mut s, limits, deadline) {
        Ok(h) => h,
        Err(HeadError::Gone) => return,
        Err(HeadError::Answer(status)) => {
            let r = Response::text(status, &format!("{status} {}\n", reason(status)));
            return finish(s, &encode(&r, false), limits);
        }
    };
    let (response, head_only) = match parse_head(&head) {
        Ok(req) => (handler(&req), req.method == "HEAD"),
        Err(status) => (
            Response::text(status, &format!("{status} {}\n", reason(status))),
            false,
        ),
    };
    finish(s, &encode(&response, head_only), limits);
}

/// Serves `listener` forever: each connection in a thread of its own, at
/// most `limits.connections` of them; `handler` answers each request.
pub fn serve(
    listener: &TcpListener,
    limits: Limits,
    handler: &(dyn Fn(&Request) -> Response + Sync),
) -> ! {
    let active = AtomicUsize::new(0);
    let busy = encode(
        &Response {
            headers: vec!["Retry-After: 1".to_string()],
            ..Response::text(503, "busy: too many connections, try again\n")
        },
        false,
    );
    std::thread::scope(|scope| {
        let mut failing: Option<(std::io::Error, u64)> = None;
        loop {
            let (s, _) = match listener.accept() {
                Ok(c) => c,
                Err(e) => {
                    match &mut failing {
                        Some((_, n)) => *n += 1,
                        None => {
                            crate::terminal::eprintln(format_args!(
                                "hugeshm: exporter: accept failed ({e}): pausing and retrying"
                            ));
                            failing = Some((e, 1));
                        }
                    }
                    std::thread::sleep(ACCEPT_PAUSE);
                    continue;
                }
            };
            if let Some((e, n)) = failing.take() {
                crate::terminal::eprintln(format_args!(
                    "hugeshm: exporter: accepting again after {n} failed accepts ({e})"
                ));
            }
            let accepted = Instant::now();
            if active.load(Ordering::Acquire) >= limits.connections {
                // Full: say so without waiting on the client, and close.
                let _ = s.set_nonblocking(true);
                let _ = (&s).write(&busy);
                continue;
            }
            active.fetch_add(1, Ordering::AcqRel);
            let active = &active;
            let spawned = std::thread::Builder::new()
                .name("hugeshm-http".into())
                .spawn_scoped(scope, move || {
                    connection(s, &limits, accepted, handler);
                    active.fetch_sub(1, Ordering::AcqRel);
                });
            if spawned.is_err() {
                // No thread: the connection (moved into the closure) is closed.
                active.fetch_sub(1, Ordering::AcqRel);
                std::thread::sleep(ACCEPT_PAUSE);
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_get_with_accept_headers_parses() {
        let r = parse_head(
            b"GET /metrics?x=1 HTTP/1.1\r\nHost: h\r\naccept: a/b\r\nAccept:  c/d ;q=1\r\n\r\n",
        )
        .unwrap();
        assert_eq!(
            r,
            Request {
                method: "GET".into(),
                path: "/metrics".into(),
                accept: Some("a/b,c/d ;q=1".into()),
            }
        );
        let r = parse_head(b"HEAD / HTTP/1.0\n\n").unwrap();
        assert_eq!(
            (r.method.as_str(), r.path.as_str(), r.accept),
            ("HEAD", "/", None)
        );
    }

    #[test]
    fn what_is_not_an_http_1_request_is_refused() {
        for (head, status) in [
            (&b"\x00\x01 nonsense\r\n\r\n"[..], 400),
            (b"GET /metrics\r\n\r\n", 400),
            (b"GET  /metrics HTTP/1.1\r\n\r\n", 400),
            (b"GET metrics HTTP/1.1\r\n\r\n", 400),
            (b"GET /m\x1b HTTP/1.1\r\n\r\n", 400),
            (b"GET /metrics HTTP/2.0\r\n\r\n", 505),
            (b"GET /metrics SPDY/1\r\n\r\n", 400),
            (b"GET /metrics HTTP/1.1\r\nfolded\r\n\r\n", 400),
            (b"GET /metrics HTTP/1.1\r\nBad Name: x\r\n\r\n", 400),
            (b"GET /metrics HTTP/1.1\r\nA: \x1b]0;x\x07\r\n\r\n", 400),
            (b"GET /metrics HTTP/1.1\r\nA: \xff\r\n\r\n", 400),
        ] {
            assert_eq!(
                parse_head(head),
                Err(status),
                "{}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn the_head_ends_at_the_first_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.0\r\n\r\nbody"), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.0\n\nbody"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.0\r\nA: b\r\n"), None);
    }

    #[test]
    fn a_head_response_has_the_length_and_no_body() {
        let r = Response::text(200, "abc");
        let full = String::from_utf8(encode(&r, false)).unwrap();
        assert!(full.starts_with("HTTP/1.1 200 OK\r\n"), "{full}");
        assert!(
            full.contains("Content-Length: 3\r\nConnection: close\r\n"),
            "{full}"
        );
        assert!(full.ends_with("\r\n\r\nabc"), "{full}");
        let head = String::from_utf8(encode(&r, true)).unwrap();
        assert!(
            head.ends_with("Content-Length: 3\r\nConnection: close\r\n\r\n"),
            "{head}"
        );
    }
}
