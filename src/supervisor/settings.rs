//! The settings of the supervisor of one launch.

use std::time::Duration;

/// How the child is supervised, and how its cache is kept.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How signals reach the child and how it is stopped.
    pub stopping: Stopping,
    /// The cache side.
    pub cache: crate::keeper::Settings,
    /// The metrics file (`--metrics-file`), if any.
    pub metrics_file: Option<std::path::PathBuf>,
}

/// How signals reach the child, and how it and its process group are
/// stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopping {
    /// Forward signals to the child's whole process group.
    pub kill_group: bool,
    /// After the child exits, how long the rest of its group gets between
    /// TERM and KILL.
    pub grace: Duration,
    /// KILL the group this long after the first forwarded TERM or INT.
    pub kill_after: Option<Duration>,
}
