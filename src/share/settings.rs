//! The settings of a multi-node launch's share.

use std::path::PathBuf;
use std::time::Duration;

/// `--share`, `--node-local-env`, `--share-timeout`.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// The directory every node mounts, if any.
    pub dir: Option<PathBuf>,
    /// Env names left out of the cluster fingerprint besides the defaults.
    pub node_local_env: Vec<String>,
    /// How long reading or publishing the share may take.
    pub share_timeout: Duration,
}

impl Settings {
    /// The node-local env names: `defaults` (the engines') plus
    /// `--node-local-env`.
    pub fn node_local(&self, defaults: &[&str]) -> Vec<String> {
        let mut names: Vec<String> = defaults.iter().map(|n| n.to_string()).collect();
        for n in self.node_local_env.iter().filter(|n| !n.is_empty()) {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
        names
    }
}
