//! The subcommands that report and do not launch: `keepwrap status`,
//! `keepwrap explain` and `keepwrap config`.

pub mod config;
pub mod explain;
pub mod status;
