//! The exporter's reading of the host: `status` and `segments` read
//! afresh, once per scrape, in a worker thread, with a timeout. A reading
//! that runs over the timeout is not abandoned: the next scrape waits for
//! that same reading rather than starting another one, so a hung /proc
//! costs one thread, not one per scrape.

use crate::segments::{KeptRegions, SegmentsReport};
use crate::status::{self, StatusReport};
use hugeshm_probe::Probe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One reading of the host: the status report (with the cgroup section of
/// the process asked for) and the segments report it scanned.
#[derive(Debug)]
pub struct Reading {
    /// What `status` reports.
    pub status: StatusReport,
    /// What `segments` reports.
    pub segments: SegmentsReport,
}

/// One scrape's outcome.
#[derive(Debug)]
pub struct Scrape {
    /// The reading; `None` when it ran over the timeout, panicked or no
    /// thread could be started.
    pub reading: Option<Reading>,
    /// Seconds the reading took (or, without one, the scrape waited).
    pub seconds: f64,
    /// Scrapes without a reading so far, this one included.
    pub errors_total: u64,
}

/// Reads the host in a worker thread, with a timeout.
pub struct Scraper {
    probe: Probe,
    pid: Option<u32>,
    timeout: Duration,
    errors: AtomicU64,
    /// A reading still running from a scrape that timed out.
    pending: Mutex<Option<Receiver<(Reading, f64)>>>,
}

impl Scraper {
    /// A scraper of the host `probe` reads, with the cgroup section of
    /// process `pid` (`None`: the caller's), each reading given at most
    /// `timeout`.
    pub fn new(probe: Probe, pid: Option<u32>, timeout: Duration) -> Scraper {
        Scraper {
            probe,
            pid,
            timeout,
            errors: AtomicU64::new(0),
            pending: Mutex::new(None),
        }
    }

    fn start(&self) -> std::io::Result<Receiver<(Reading, f64)>> {
        let (tx, rx) = mpsc::channel();
        let (probe, pid) = (self.probe.clone(), self.pid);
        std::thread::Builder::new()
            .name("hugeshm-scrape".into())
            .spawn(move || {
                let t = Instant::now();
                let kept = KeptRegions::find(&probe);
                let (status, segments) = status::build_with_segments(&probe, pid, &kept);
                let _ = tx.send((Reading { status, segments }, t.elapsed().as_secs_f64()));
            })?;
        Ok(rx)
    }

    /// One scrape: the reading still running from a scrape that timed out,
    /// else a new one, waited for at most the timeout.
    pub fn scrape(&self) -> Scrape {
        let t = Instant::now();
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let rx = match pending.take() {
            Some(rx) => Ok(rx),
            None => self.start(),
        };
        let got = match rx {
            Ok(rx) => match rx.recv_timeout(self.timeout) {
                Ok(r) => Some(r),
                Err(RecvTimeoutError::Timeout) => {
                    *pending = Some(rx);
                    None
                }
                // The reader panicked.
                Err(RecvTimeoutError::Disconnected) => None,
            },
            // No thread could be started.
            Err(_) => None,
        };
        match got {
            Some((reading, seconds)) => Scrape {
                reading: Some(reading),
                seconds,
                errors_total: self.errors.load(Ordering::Relaxed),
            },
            None => Scrape {
                reading: None,
                seconds: t.elapsed().as_secs_f64(),
                errors_total: self.errors.fetch_add(1, Ordering::Relaxed) + 1,
            },
        }
    }
}
