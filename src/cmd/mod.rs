//! The subcommands that report and do not launch: `keepwrap status`,
//! `keepwrap explain` and `keepwrap config`.

pub mod config;
pub mod explain;
pub mod status;

/// Exit status for keepwrap's own usage errors (as clap uses).
pub const EXIT_USAGE: u8 = 2;
