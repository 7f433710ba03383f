//! Instants plus durations that saturate instead of panicking: a duration
//! from the command line or the environment can be as long as the parser
//! allows, and `Instant + Duration` panics on overflow (in PID 1, with
//! `panic = "abort"`, that orphans the engine).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

/// Seconds since the Unix epoch (0 if the clock is before it), as the
/// store, the share and the statistics record times.
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The longest duration any option takes: `100years` (humantime's years of
/// 365.25 days). Every deadline keepwrap computes from one stays far from
/// what its clocks can represent.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 31_557_600);

/// Why a text is not a duration keepwrap takes. Each names the text as
/// given (clap adds the option's name).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("'{0}' is not a duration; try 5s, 500ms or 2m")]
    NotANumber(String),
    #[error("'{0}' is not a duration ({1}); try 5s, 500ms or 2m")]
    Unreadable(String, String),
    #[error("'{0}' is negative: a duration is 0 or more")]
    Negative(String),
    #[error("'{0}' is longer than the longest duration keepwrap takes (100years)")]
    TooLong(String),
}

/// `5s`, `500ms`, `2m`, `1h 30m`; a bare number is seconds. At most
/// [`MAX_DURATION`]; anything else is an error that says why.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let t = s.trim();
    let too_long = || DurationError::TooLong(s.to_string());
    if let Ok(secs) = t.parse::<f64>() {
        if secs.is_nan() || secs == f64::INFINITY {
            return Err(DurationError::NotANumber(s.to_string()));
        }
        if secs < 0.0 {
            return Err(DurationError::Negative(s.to_string()));
        }
        if secs > MAX_DURATION.as_secs_f64() {
            return Err(too_long());
        }
        if secs == 0.0 {
            return Ok(Duration::ZERO);
        }
        return Ok(Duration::from_secs_f64(secs));
    }
    match humantime::parse_duration(t) {
        Ok(d) if d > MAX_DURATION => Err(too_long()),
        Ok(d) => Ok(d),
        Err(humantime::DurationError::NumberOverflow) => Err(too_long()),
        Err(e) => Err(DurationError::Unreadable(s.to_string(), e.to_string())),
    }
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
