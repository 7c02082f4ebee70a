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
use hugeshm_lab::steps::{Step, StepEvent, StepHook, Steps};
use hugeshm_parse::size::format_bytes;
use std::sync::{Arc, Mutex};
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

/// `step 4 of 14, about 12 s left: what`.
fn step_text(s: &Step<'_>) -> String {
    let mut text = format!("step {} of {}", s.number.max(1), s.total);
    if let Some(left) = s.seconds_left {
        text.push_str(&format!(", about {} left", duration_text(left)));
    }
    format!("{text}: {}", terminal_safe(s.what))
}

/// A long command's steps, counted up front (a bench, the lab, `apply`):
/// one line on stderr under `label` (`bench prefault`) with a bar,
/// `step k of n`, the time left and what the step does, drawn from the
/// first step when stderr is a terminal; the line goes at
/// [`Steps::finish`]. The count is `hugeshm_lab::Steps`'s.
pub fn steps(label: &str, total: u64) -> Steps {
    let bar = line();
    let label = terminal_safe(label).into_owned();
    Steps::new(
        total,
        StepHook::new(move |e| match e {
            StepEvent::Begin(s) => {
                bar.set_message(bar_line(&label, s.number - 1, s.total, &step_text(&s)))
            }
            StepEvent::Finish => bar.finish_and_clear(),
        }),
    )
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

    #[test]
    fn a_step_says_its_place_the_time_left_and_what_it_does() {
        let step = |number, seconds_left| Step {
            number,
            total: 4,
            seconds_left,
            what: "2M\x1b[2J",
        };
        assert_eq!(step_text(&step(1, None)), "step 1 of 4: 2M\\x1b[2J");
        assert_eq!(
            step_text(&step(2, Some(5.0))),
            "step 2 of 4, about 5.0 s left: 2M\\x1b[2J"
        );
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
