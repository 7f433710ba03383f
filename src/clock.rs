//! Instants plus durations that saturate instead of panicking: a duration
//! from the command line or the environment can be as long as the parser
//! allows, and `Instant + Duration` panics on overflow (in PID 1, with
//! `panic = "abort"`, that orphans the engine).

use std::time::{Duration, Instant};

/// `from + d`, or the latest instant this clock can represent on the way
/// there (for practical purposes: never).
pub fn after(from: Instant, d: Duration) -> Instant {
    if let Some(t) = from.checked_add(d) {
        return t;
    }
    let mut step = d;
    let mut at = from;
    while !step.is_zero() {
        match at.checked_add(step) {
            Some(t) => at = t,
            None => step /= 2,
        }
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_what_fits_and_saturates_the_rest() {
        let now = Instant::now();
        assert_eq!(
            after(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
        let far = after(now, Duration::MAX);
        assert!(far > now + Duration::from_secs(100 * 365 * 86_400));
        assert_eq!(after(far, Duration::MAX), far);
        assert_eq!(after(far, Duration::from_secs(1)), far);
    }
}
