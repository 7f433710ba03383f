//! The launch fingerprint: which parts of argv and environment identify a
//! launch, and their sha256 over Python-compatible canonical JSON.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::ValueEnum;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProfileName {
    /// What a user of a stock SGLang image wants
    Sglang,
    /// Bit for bit the seed's launch_fingerprint()
    Seed,
}

/// A profile plus the user's extensions.
#[derive(Debug, Clone)]
pub struct Options {
    pub profile: ProfileName,
    pub env_prefixes: Vec<String>,
    pub volatile_env: Vec<String>,
    pub ignored_args: Vec<String>,
}

/// The fingerprint inputs of one launch.
#[derive(Debug, Clone)]
pub struct Launch {
    fingerprint: String,
}

impl Launch {
    /// Select the inputs from the command keepwrap will exec and the
    /// environment the child will get.
    pub fn new(_opts: &Options, _argv: &[OsString], _env: &[(OsString, OsString)]) -> Launch {
        unimplemented!("fingerprint::Launch::new")
    }

    /// Lowercase sha256 hex.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
}

/// `keepwrap fingerprint`: print the fingerprint (and with `explain` the
/// inputs, secrets redacted) of the launch of `command` in this environment.
pub fn print(_opts: &Options, _command: &[OsString], _explain: bool) -> ExitCode {
    unimplemented!("keepwrap fingerprint")
}
