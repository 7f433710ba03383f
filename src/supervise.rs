//! The supervisor loop.
use std::ffi::OsString;
use std::process::ExitCode;

use crate::cli::RunArgs;

pub fn run(_args: &RunArgs, _command: Vec<OsString>) -> ExitCode {
    unimplemented!()
}
