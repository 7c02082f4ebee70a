//! A long job's plan, counted up front: how many steps, which one runs,
//! the time left (the mean of the steps that ran, times the steps to go).
//! The crate counts; a caller draws ([`StepHook`]: the CLI's progress line
//! on a terminal).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

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
}

/// A step as it begins, for a caller to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct Step<'a> {
    /// Its number, from 1.
    pub number: u64,
    /// Steps planned.
    pub total: u64,
    /// Seconds left (`None` until a step has run).
    pub seconds_left: Option<f64>,
    /// What it does (`2M pages, 2 threads, run 1`; prefixed by
    /// [`Steps::prefixed`]'s words).
    pub what: &'a str,
}

/// What a caller is told: a step begins, or the job is over (its line
/// goes).
#[derive(Debug, Clone, PartialEq)]
pub enum StepEvent<'a> {
    /// A step begins.
    Begin(Step<'a>),
    /// The job ended ([`Steps::finish`]).
    Finish,
}

/// The caller's hook, told each [`StepEvent`].
#[derive(Clone)]
pub struct StepHook(Arc<dyn Fn(StepEvent<'_>) + Send + Sync>);

impl StepHook {
    /// A hook calling `f`.
    pub fn new(f: impl Fn(StepEvent<'_>) + Send + Sync + 'static) -> Self {
        StepHook(Arc::new(f))
    }
}

impl std::fmt::Debug for StepHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StepHook")
    }
}

/// A long job's steps. Cloned handles share the plan;
/// [`prefixed`](Self::prefixed) ones put their own words before each
/// step (the lab's reproductions over a bench's steps).
#[derive(Clone, Debug)]
pub struct Steps {
    hook: Option<StepHook>,
    plan: Arc<Mutex<Plan>>,
    prefix: String,
}

impl Steps {
    /// A plan of `total` steps, each told to `hook`.
    pub fn new(total: u64, hook: StepHook) -> Self {
        Steps {
            hook: Some(hook),
            plan: Arc::new(Mutex::new(Plan::new(total))),
            prefix: String::new(),
        }
    }

    /// A plan nobody is told of (a measurement called without a line of
    /// its own).
    pub fn hidden() -> Self {
        Steps {
            hook: None,
            plan: Arc::new(Mutex::new(Plan::new(0))),
            prefix: String::new(),
        }
    }

    /// A handle on the same plan whose steps read `prefix: what`.
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
    /// plan was made).
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
        if let Some(hook) = &self.hook {
            (hook.0)(StepEvent::Begin(Step {
                number: plan.begun,
                total: plan.total,
                seconds_left: plan.seconds_left(now),
                what: &what,
            }));
        }
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

    /// The job is over: the hook is told [`StepEvent::Finish`].
    pub fn finish(&self) {
        if let Some(hook) = &self.hook {
            (hook.0)(StepEvent::Finish);
        }
    }

    /// A guard that calls [`finish`](Self::finish) when it goes (however
    /// the job ends).
    pub fn finish_on_drop(&self) -> Finish {
        Finish(self.clone())
    }
}

/// Calls [`Steps::finish`] when it goes ([`Steps::finish_on_drop`]).
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn time_left_is_the_mean_step_times_the_steps_to_go() {
        let t = Instant::now();
        let mut p = Plan::new(4);
        p.begin(t);
        assert_eq!(p.seconds_left(t), None);
        p.begin(t + Duration::from_secs(2));
        // One step of 2 s ran; two wait, and the running one has 2 s.
        assert_eq!(p.seconds_left(t + Duration::from_secs(2)), Some(6.0));
        assert_eq!(p.seconds_left(t + Duration::from_secs(3)), Some(5.0));
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
    fn the_hook_hears_each_step_with_its_prefix_and_the_end() {
        let heard = Arc::new(Mutex::new(Vec::new()));
        let h = heard.clone();
        let s = Steps::new(
            2,
            StepHook::new(move |e| {
                h.lock().unwrap().push(match e {
                    StepEvent::Begin(s) => format!("{} of {}: {}", s.number, s.total, s.what),
                    StepEvent::Finish => "end".to_owned(),
                })
            }),
        );
        s.begin("one");
        s.prefixed("lab").prefixed("2M").begin("two");
        drop(s.finish_on_drop());
        assert_eq!(
            *heard.lock().unwrap(),
            ["1 of 2: one", "2 of 2: lab: 2M: two", "end"]
        );
    }
}
