//! Progress on stderr, drawn only when stderr is a terminal (`indicatif`;
//! `bench prefault > out.txt` on a terminal still shows it, `2> log` or a
//! pipe shows nothing): [`Steps`], the plan of a long command (a bench,
//! the lab), and [`Bytes`], `create`'s pre-fault.
//!
//! ```text
//! bench prefault [=====>              ] step 4 of 14, about 12 s left: 2M pages, 2 threads, run 1
//! pre-faulting [=========>          ] 256 MiB of 512 MiB, 1.0 GB/s, 0.3 s left
//! ```
//!
//! Neither starts a thread: a line is redrawn when a step begins or a
//! sample arrives (the benches fork workers, which is only safe from a
//! single-threaded process). Text a user chose (a region's name in a
//! label) is made safe for the terminal ([`crate::terminal`]).

use crate::terminal::terminal_safe;
use hugeshm_parse::size::format_bytes;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// At most this many redraws a second (a burst of 20 is allowed).
const HZ: u8 = 10;

/// A line on stderr, drawn only when stderr is a terminal (not when it is
/// a file or a pipe, nor with `TERM=dumb`), cut to the terminal's width.
/// Its whole text is the message, so that a change is one draw.
fn line() -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::hidden();
    if let Ok(style) = indicatif::ProgressStyle::with_template("{wide_msg}") {
        bar.set_style(style);
    }
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr_with_hz(HZ));
    bar
}

/// `label [=====>              ] text`: `done` of `total` as a bar of 20.
fn bar_line(label: &str, done: u64, total: u64, text: &str) -> String {
    const WIDTH: u64 = 20;
    let filled = (done.min(total) * WIDTH).checked_div(total).unwrap_or(0);
    let mut bar = "=".repeat(filled as usize);
    if filled < WIDTH {
        bar.push(if filled > 0 { '>' } else { ' ' });
        bar.push_str(&" ".repeat((WIDTH - filled - 1) as usize));
    }
    format!("{label} [{bar}] {text}")
}

/// Whole seconds above a minute, tenths below ten seconds:
/// `0.4 s`, `12 s`, `3 min 05 s`, `1 h 02 min`.
pub fn duration_text(secs: f64) -> String {
    let secs = secs.max(0.0);
    if secs < 10.0 {
        format!("{secs:.1} s")
    } else if secs < 60.0 {
        format!("{secs:.0} s")
    } else if secs < 3600.0 {
        let s = secs.round() as u64;
        format!("{} min {:02} s", s / 60, s % 60)
    } else {
        let m = (secs / 60.0).round() as u64;
        format!("{} h {:02} min", m / 60, m % 60)
    }
}

/// Where a plan stands.
#[derive(Debug)]
struct Plan {
    /// Steps planned (never below `begun`).
    total: u64,
    /// Steps begun or passed over; the running one is the last of them.
    begun: u64,
    /// When the running step began (`None`: none runs).
    running: Option<Instant>,
    /// Steps that ran to their end, and the seconds they took.
    ran: u64,
    ran_seconds: f64,
}

impl Plan {
    fn new(total: u64) -> Self {
        Plan {
            total,
            begun: 0,
            running: None,
            ran: 0,
            ran_seconds: 0.0,
        }
    }

    /// The running step, if any, ends now.
    fn end_running(&mut self, now: Instant) {
        if let Some(t) = self.running.take() {
            self.ran += 1;
            self.ran_seconds += now.duration_since(t).as_secs_f64();
        }
    }

    /// Step `begun + 1` begins now.
    fn begin(&mut self, now: Instant) {
        self.end_running(now);
        self.begun += 1;
        self.total = self.total.max(self.begun);
        self.running = Some(now);
    }

    /// Seconds left: the mean of the steps that ran, for each step not
    /// begun, and what is left of the mean for the running one. `None`
    /// until a step has run.
    fn seconds_left(&self, now: Instant) -> Option<f64> {
        if self.ran == 0 {
            return None;
        }
        let mean = self.ran_seconds / self.ran as f64;
        let current = self
            .running
            .map(|t| (mean - now.duration_since(t).as_secs_f64()).max(0.0))
            .unwrap_or(0.0);
        Some(mean * self.total.saturating_sub(self.begun) as f64 + current)
    }

    /// `step 4 of 14, about 12 s left`.
    fn text(&self, now: Instant) -> String {
        let mut s = format!("step {} of {}", self.begun.max(1), self.total);
        if let Some(left) = self.seconds_left(now) {
            s.push_str(&format!(", about {} left", duration_text(left)));
        }
        s
    }
}

/// A long command's steps, counted up front: one line on stderr with a
/// bar, `step k of n`, the time left (the mean of the steps so far times
/// the steps to go) and what the step does. Cloned handles share the line;
/// [`prefixed`](Self::prefixed) ones put their own words before each
/// step (the lab's reproductions over a bench's steps).
#[derive(Clone)]
pub struct Steps {
    bar: indicatif::ProgressBar,
    label: String,
    plan: Arc<Mutex<Plan>>,
    prefix: String,
}

impl Steps {
    /// A plan of `total` steps under `label` (`bench prefault`), drawn on
    /// stderr when it is a terminal, from the first [`begin`](Self::begin).
    pub fn new(label: &str, total: u64) -> Self {
        Steps {
            bar: line(),
            label: terminal_safe(label).into_owned(),
            plan: Arc::new(Mutex::new(Plan::new(total))),
            prefix: String::new(),
        }
    }

    /// A plan that draws nothing (a measurement called without a line of
    /// its own).
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn hidden() -> Self {
        Steps {
            bar: indicatif::ProgressBar::hidden(),
            label: String::new(),
            plan: Arc::new(Mutex::new(Plan::new(0))),
            prefix: String::new(),
        }
    }

    /// A handle on the same line whose steps read `prefix: what`.
    pub fn prefixed(&self, prefix: &str) -> Self {
        let mut s = self.clone();
        s.prefix = if self.prefix.is_empty() {
            prefix.to_owned()
        } else {
            format!("{}: {prefix}", self.prefix)
        };
        s
    }

    /// Sets the number of steps planned (when it is known only after the
    /// line was made).
    pub fn plan(&self, total: u64) {
        let mut plan = self.state();
        plan.total = total.max(plan.begun);
    }

    fn state(&self) -> MutexGuard<'_, Plan> {
        self.plan.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next step begins (the one before it, if any, is done); `what`
    /// says what it does.
    pub fn begin(&self, what: &str) {
        let now = Instant::now();
        let mut plan = self.state();
        plan.begin(now);
        let what = if self.prefix.is_empty() {
            what.to_owned()
        } else {
            format!("{}: {what}", self.prefix)
        };
        let text = format!("{}: {}", plan.text(now), terminal_safe(&what));
        self.bar
            .set_message(bar_line(&self.label, plan.begun - 1, plan.total, &text));
    }

    /// A part of the plan of `steps` steps: when the returned guard goes
    /// (the part ended, failed, or found nothing to do), the steps of it
    /// that did not run are passed over, so that what follows keeps its
    /// place in the plan.
    pub fn part(&self, steps: u64) -> Part {
        let end = self.state().begun + steps;
        Part {
            steps: self.clone(),
            end,
        }
    }

    /// Steps begun so far (the running one included).
    pub fn begun(&self) -> u64 {
        self.state().begun
    }

    /// Rubs the line out.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }

    /// A guard that rubs the line out when it goes (however the command
    /// ends).
    pub fn finish_on_drop(&self) -> Finish {
        Finish(self.clone())
    }
}

/// Rubs a [`Steps`] line out when it goes ([`Steps::finish_on_drop`]).
pub struct Finish(Steps);

impl Drop for Finish {
    fn drop(&mut self) {
        self.0.finish();
    }
}

/// A part of a [`Steps`] plan ([`Steps::part`]).
pub struct Part {
    steps: Steps,
    end: u64,
}

impl Drop for Part {
    fn drop(&mut self) {
        let now = Instant::now();
        let mut plan = self.steps.state();
        if plan.begun < self.end {
            // What the part did not run is passed over; its running step
            // (if any) ended with it.
            plan.end_running(now);
            plan.begun = self.end;
            plan.total = plan.total.max(self.end);
        }
    }
}

/// `128 MiB of 512 MiB, 1.1 GB/s, 0.4 s left`: `done` of `total` bytes,
/// `since` of them in the `secs` since the first sample (the first
/// sample's count was done before the clock started, so it is not in the
/// rate); no rate before one.
fn bytes_text(done: u64, total: u64, since: u64, secs: f64) -> String {
    let mut text = format!("{} of {}", format_bytes(done), format_bytes(total));
    if secs > 0.0 && since > 0 {
        let rate = since as f64 / secs;
        text.push_str(&format!(
            ", {:.1} GB/s, {} left",
            rate / 1e9,
            duration_text(total.saturating_sub(done) as f64 / rate)
        ));
    }
    text
}

/// `create`'s pre-fault on stderr: bytes done of the total, the rate in
/// decimal GB/s (as the report under it) from the first sample on, and the
/// time left. Drawn at once ([`new`](Self::new): what is being created,
/// while it is set up), then from the first sample of the pre-fault.
#[derive(Clone)]
pub struct Bytes {
    bar: indicatif::ProgressBar,
    /// The pre-fault's first sample (when, and the count then), and the
    /// last count seen.
    start: Arc<Mutex<Option<(Instant, u64, u64)>>>,
}

impl Bytes {
    /// A line that says `setting up` until the pre-fault starts; hidden
    /// unless stderr is a terminal.
    pub fn new(what: &str) -> Self {
        let bar = line();
        bar.set_message(bar_line(&terminal_safe(what), 0, 1, "setting up"));
        Bytes {
            bar,
            start: Arc::new(Mutex::new(None)),
        }
    }

    /// `done` of `total` bytes (from any thread; serialized, growing).
    /// A count below the last one is a new pre-fault (the next part of
    /// `--numa per-node`): its clock starts there.
    pub fn update(&self, done: u64, total: u64) {
        let now = Instant::now();
        let mut start = self.start.lock().unwrap_or_else(|p| p.into_inner());
        let (t0, at_t0) = match *start {
            Some((t0, at_t0, last)) if done >= last => (t0, at_t0),
            _ => (now, done),
        };
        *start = Some((t0, at_t0, done));
        let text = bytes_text(
            done,
            total,
            done - at_t0,
            now.duration_since(t0).as_secs_f64(),
        );
        self.bar
            .set_message(bar_line("pre-faulting", done, total, &text));
    }

    /// Rubs the line out.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn time_left_is_the_mean_step_times_the_steps_to_go() {
        let t = Instant::now();
        let mut p = Plan::new(4);
        p.begin(t);
        assert_eq!(p.text(t), "step 1 of 4");
        p.begin(t + Duration::from_secs(2));
        // One step of 2 s ran; two wait, and the running one has 2 s.
        assert_eq!(p.seconds_left(t + Duration::from_secs(2)), Some(6.0));
        assert_eq!(
            p.text(t + Duration::from_secs(3)),
            "step 2 of 4, about 5.0 s left"
        );
        // A step that runs past the mean leaves the others' time.
        assert_eq!(p.seconds_left(t + Duration::from_secs(9)), Some(4.0));
    }

    #[test]
    fn a_part_passes_over_what_it_did_not_run() {
        let s = Steps::hidden();
        {
            let _p = s.part(3);
            s.begin("one");
        }
        assert_eq!(s.begun(), 3);
        {
            let _p = s.part(2);
            s.begin("a");
            s.begin("b");
            s.begin("c, more than the part planned");
        }
        assert_eq!(s.begun(), 6);
        s.begin("after");
        assert_eq!(s.begun(), 7);
        let plan = s.state();
        assert_eq!(plan.total, 7, "the count never runs past the plan");
        assert_eq!(plan.ran, 4, "passed-over steps take no time: {plan:?}");
    }

    #[test]
    fn the_bar_fills_with_the_count() {
        assert_eq!(bar_line("x", 0, 4, "t"), "x [                    ] t");
        assert_eq!(bar_line("x", 1, 4, "t"), "x [=====>              ] t");
        assert_eq!(bar_line("x", 4, 4, "t"), "x [====================] t");
        assert_eq!(bar_line("x", 9, 4, "t"), "x [====================] t");
        assert_eq!(bar_line("x", 0, 0, "t"), "x [                    ] t");
    }

    #[test]
    fn the_rate_counts_the_bytes_since_the_first_sample() {
        const M: u64 = 1 << 20;
        assert_eq!(bytes_text(0, 512 * M, 0, 0.0), "0 B of 512 MiB");
        // 256 MiB at the first sample (another thread's), 100 MB faulted
        // in the 0.1 s since: 1.0 GB/s, not (256 MiB + 100 MB) / 0.1 s.
        let done = 256 * M + 100_000_000;
        assert_eq!(
            bytes_text(done, 512 * M, 100_000_000, 0.1),
            format!(
                "{} of 512 MiB, 1.0 GB/s, {} left",
                format_bytes(done),
                duration_text((512 * M - done) as f64 / 1e9)
            )
        );
        // No bytes since the first sample: no rate yet.
        assert_eq!(bytes_text(256 * M, 512 * M, 0, 0.5), "256 MiB of 512 MiB");
    }

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(duration_text(0.44), "0.4 s");
        assert_eq!(duration_text(12.4), "12 s");
        assert_eq!(duration_text(185.0), "3 min 05 s");
        assert_eq!(duration_text(3720.0), "1 h 02 min");
        assert_eq!(duration_text(-1.0), "0.0 s");
    }
}
