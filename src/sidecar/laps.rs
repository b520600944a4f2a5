//! The stages of one request's turn, timed for the debug log: what each step of a
//! `transform` took, so that a profile of a long session can tell the work that grows with
//! the history from the work that grows with what is new. Timing is off (no clock read)
//! unless debug logging is on.

use std::fmt;
use std::time::{Duration, Instant};

/// The stages timed so far, in order, and when the last one ended.
#[derive(Debug, Default)]
pub struct Laps {
    last: Option<Instant>,
    laps: Vec<(&'static str, Duration)>,
}

impl Laps {
    /// Starts timing, when debug logging is on.
    pub fn start() -> Laps {
        let on = tracing::enabled!(tracing::Level::DEBUG);
        Laps { last: on.then(Instant::now), laps: Vec::new() }
    }

    /// Ends stage `name`: the time since the last stage ended (or timing started).
    pub fn lap(&mut self, name: &'static str) {
        if let Some(last) = self.last {
            let now = Instant::now();
            self.laps.push((name, now - last));
            self.last = Some(now);
        }
    }

    /// Whether anything was timed.
    pub fn on(&self) -> bool {
        self.last.is_some()
    }
}

/// `name=12.3µs name=4.5µs`, the stages in order, in microseconds.
impl fmt::Display for Laps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (name, took)) in self.laps.iter().enumerate() {
            let sep = if i == 0 { "" } else { " " };
            write!(f, "{sep}{name}={:.1}µs", took.as_secs_f64() * 1e6)?;
        }
        Ok(())
    }
}
