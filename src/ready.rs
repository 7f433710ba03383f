//! When tuning is done: the rules (`--done`) and the HTTP health probe.

use std::time::Duration;

/// `--done`: when keepwrap considers the engine's tuning finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DoneRule {
    /// An SGLang server launch: the first 200 from its `/health`; any other
    /// command: a 0 exit.
    Auto,
    /// The first 200 from this URL (default: derived from the launch argv).
    Health(Option<String>),
    /// No cache write for this long after the last one.
    Quiet(Duration),
    /// The child exits 0.
    Exit,
}

impl DoneRule {
    pub fn parse(s: &str) -> Result<DoneRule, String> {
        let s = s.trim();
        let (name, value) = match s.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (s, None),
        };
        match (name, value) {
            ("auto", None) => Ok(DoneRule::Auto),
            ("exit", None) => Ok(DoneRule::Exit),
            ("health", None) => Ok(DoneRule::Health(None)),
            ("health", Some(url)) if !url.is_empty() => Ok(DoneRule::Health(Some(url.to_string()))),
            ("quiet", Some(d)) => crate::cli::parse_duration(d).map(DoneRule::Quiet),
            _ => Err(format!("'{s}' is not a done rule: use auto, health, health=URL, quiet=DURATION or exit")),
        }
    }
}
