//! When tuning is done: the rules (`--done`), resolved for one launch.
//! `endpoint.rs` is what `health` probes, `probe.rs` the probe itself.

pub mod endpoint;
pub mod owner;
pub mod probe;
pub mod progress;
pub mod tls;
pub mod watch;

use std::time::Duration;

use crate::clock::DurationError;
use endpoint::Endpoint;

/// Why a `--done` rule cannot be used, for this launch or at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DoneError {
    #[error("'{0}' is not a done rule: use auto, health, health=URL, quiet=DURATION or exit")]
    NotARule(String),
    /// `quiet=` and a text that is not a duration.
    #[error(transparent)]
    Quiet(#[from] DurationError),
    /// A health URL that cannot be probed: the URL and why.
    #[error("health URL '{0}': {1}")]
    Url(String, &'static str),
    /// `auto` for a vLLM server that requires a client certificate.
    #[error("a vLLM server that requires a client certificate (--ssl-cert-reqs 2) cannot be probed: give --done quiet=DURATION")]
    ClientCertificate,
    /// An HTTPS server, on a CPU without what keepwrap's TLS needs.
    #[error("{0} cannot be probed: this CPU lacks {1}, which keepwrap's TLS needs: give --done quiet=DURATION")]
    TlsUnsupported(String, &'static str),
    /// `auto` for a vLLM server on a Unix socket.
    #[error("a vLLM server on a Unix socket (--uds) cannot be probed: give --done health=URL or --done quiet=DURATION")]
    UnixSocket,
    /// `auto` for a headless vLLM node whose launch names neither the
    /// head's address and API port nor this node's ranks.
    #[error("a headless vLLM node whose head address and API port, or ranks, cannot be read from the launch: give --done health=http://HEAD:PORT/health")]
    HeadlessUnknown,
    /// `auto` for a command whose exit status may not be the engine's.
    #[error("an exit 0 of this launch would not prove the engine's ({0}): give --done health=URL or --done quiet=DURATION")]
    ExitUnproven(String),
}

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
    pub fn parse(s: &str) -> Result<DoneRule, DoneError> {
        let s = s.trim();
        let (name, value) = match s.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (s, None),
        };
        match (name, value) {
            ("auto", None) => Ok(DoneRule::Auto),
            ("exit", None) => Ok(DoneRule::Exit),
            ("health", None) => Ok(DoneRule::Health(None)),
            ("health", Some(url)) => {
                Endpoint::parse(url).map(|_| DoneRule::Health(Some(url.to_string())))
            }
            ("quiet", Some(d)) => Ok(DoneRule::Quiet(crate::clock::parse_duration(d)?)),
            _ => Err(DoneError::NotARule(s.to_string())),
        }
    }
}

/// What decides that tuning is done, resolved for one launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Done {
    /// The first 200 from this endpoint.
    Health(Endpoint),
    /// No cache write for this long after the last one.
    Quiet(Duration),
    /// The child exits 0.
    Exit,
    /// A headless vLLM node: the first 200 from the head's endpoint (another
    /// process, on another node: trusted as given).
    HeadHealth(Endpoint),
    /// A headless vLLM node: every one of these rank files (names) has
    /// landed, then none for this long.
    RankFiles(Vec<String>, Duration),
}

impl DoneRule {
    /// Resolve `auto` and a bare `health`: `server_done`, the engine's rule
    /// for both when the launch runs a server the engine knows; `health`,
    /// what a bare `health` probes otherwise (`engine::Engine::done`);
    /// `exit_unproven`, why the command's exit 0 does not prove the
    /// engine's (then `auto` has no rule).
    pub fn resolve(
        &self,
        exit_unproven: Option<String>,
        server_done: Option<Result<Done, DoneError>>,
        health: Endpoint,
    ) -> Result<Done, DoneError> {
        let done = self.resolve_rule(exit_unproven, server_done, health)?;
        if let Done::Health(ep) | Done::HeadHealth(ep) = &done {
            if let Some(missing) = ep.tls.then(tls::unsupported).flatten() {
                return Err(DoneError::TlsUnsupported(ep.to_string(), missing));
            }
        }
        Ok(done)
    }

    fn resolve_rule(
        &self,
        exit_unproven: Option<String>,
        server_done: Option<Result<Done, DoneError>>,
        health: Endpoint,
    ) -> Result<Done, DoneError> {
        match (self, server_done) {
            (DoneRule::Auto | DoneRule::Health(None), Some(done)) => done,
            (DoneRule::Auto, None) => match exit_unproven {
                Some(why) => Err(DoneError::ExitUnproven(why)),
                None => Ok(Done::Exit),
            },
            (DoneRule::Exit, _) => Ok(Done::Exit),
            (DoneRule::Health(None), None) => Ok(Done::Health(health)),
            (DoneRule::Health(Some(url)), _) => Endpoint::parse(url).map(Done::Health),
            (DoneRule::Quiet(d), _) => Ok(Done::Quiet(*d)),
        }
    }
}

impl Done {
    /// A headless node's rank-files rule with the quiet window `quiet`
    /// (`--headless-quiet`); any other rule as it is.
    pub fn headless_quiet(self, quiet: Duration) -> Done {
        match self {
            Done::RankFiles(names, _) => Done::RankFiles(names, quiet),
            done => done,
        }
    }
}

impl std::fmt::Display for Done {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Done::Health(ep) => write!(f, "when GET {ep} first answers 200"),
            Done::Quiet(d) => write!(
                f,
                "when no cache file has landed for {}",
                humantime::format_duration(*d)
            ),
            Done::Exit => write!(f, "when the command exits 0"),
            Done::HeadHealth(ep) => write!(
                f,
                "when GET {ep} (the head's API server; this node is headless) first answers 200"
            ),
            Done::RankFiles(names, d) => write!(
                f,
                "when this headless node's {} ({}) have landed and no cache file has for {}",
                crate::events::counted(names.len(), "rank file", "rank files"),
                names.join(", "),
                humantime::format_duration(*d)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn done_rules_parse() {
        assert_eq!(
            DoneRule::parse("quiet=30s").unwrap(),
            DoneRule::Quiet(Duration::from_secs(30))
        );
        assert_eq!(DoneRule::parse("health").unwrap(), DoneRule::Health(None));
        assert!(DoneRule::parse("later")
            .unwrap_err()
            .to_string()
            .contains("auto, health"));
        assert_eq!(
            DoneRule::parse("health=https://x:8443").unwrap(),
            DoneRule::Health(Some("https://x:8443".into()))
        );
        assert!(DoneRule::parse("health=ftp://x").is_err());
    }
}
