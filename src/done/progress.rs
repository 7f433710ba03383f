//! Tuning progress while the engine runs: one `landed` line per rank file a
//! small launch saves, and for a large one (more than [`PER_FILE`] distinct
//! files, 64 ranks or more) a line that sums up the landings at most every
//! [`EVERY`], so a tuning boot of many minutes shows progress without
//! flooding the log.

use crate::digest::Fingerprint;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// Distinct cache files logged one line each.
pub const PER_FILE: usize = 32;
/// The shortest time between two summing lines.
pub const EVERY: Duration = Duration::from_secs(10);

/// What a launch's landings have shown so far.
#[derive(Debug, Default)]
pub struct Progress {
    distinct: HashSet<PathBuf>,
    /// Landings since the last line that summed them up.
    pending: usize,
    /// When (after the launch) the last summing line was logged.
    last_sum: Option<Duration>,
}

/// One line to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A file landed: one line of its own.
    File(PathBuf),
    /// The switch to summing lines, at the first file past [`PER_FILE`].
    Switch { distinct: usize },
    /// Landings since the last summing line.
    Sum { landed: usize, distinct: usize },
}

impl Progress {
    /// The lines `landed` (files that landed `at` after the launch) gives.
    pub fn note(&mut self, landed: &[PathBuf], at: Duration) -> Vec<Line> {
        let mut lines = Vec::new();
        for rel in landed {
            let was_summing = self.distinct.len() > PER_FILE;
            self.distinct.insert(rel.clone());
            if !was_summing && self.distinct.len() <= PER_FILE {
                lines.push(Line::File(rel.clone()));
            } else if !was_summing {
                lines.push(Line::Switch {
                    distinct: self.distinct.len(),
                });
                self.last_sum = Some(at);
            } else {
                self.pending += 1;
            }
        }
        let due = self.last_sum.is_none_or(|t| at.saturating_sub(t) >= EVERY);
        if self.pending > 0 && due {
            lines.push(Line::Sum {
                landed: self.pending,
                distinct: self.distinct.len(),
            });
            self.pending = 0;
            self.last_sum = Some(at);
        }
        lines
    }
}

static PROGRESS: Mutex<Option<Progress>> = Mutex::new(None);

/// Log the landings of `landed` (relative to `root`), `at` after the launch
/// (one launch per process) of `fingerprint`: a file saved again as it was
/// signed for it, or gone before it was read, at debug level only.
pub fn landed(root: &Path, fingerprint: &Fingerprint, landed: &[PathBuf], at: Duration) {
    let lines = {
        let mut p = PROGRESS.lock().unwrap_or_else(|e| e.into_inner());
        p.get_or_insert_with(Progress::default).note(landed, at)
    };
    for line in lines {
        match line {
            Line::File(rel) => match crate::cache::landed(&root.join(&rel), Some(fingerprint)) {
                Ok(l) if l.as_signed => crate::events::Event::LandedUnchanged {
                    path: rel,
                    entries: l.entries,
                    after: at,
                }
                .emit(),
                Ok(l) => crate::events::Event::Landed {
                    path: rel,
                    entries: l.entries,
                    after: at,
                }
                .emit(),
                Err(crate::cache::Uncounted::Gone) => crate::events::Event::LandedGone {
                    path: rel,
                    after: at,
                }
                .emit(),
                Err(why) => crate::events::Event::LandedUncounted {
                    path: rel,
                    reason: why.to_string(),
                    after: at,
                }
                .emit(),
            },
            Line::Switch { distinct } => crate::events::Event::LandedSumming {
                distinct,
                after: at,
                every: EVERY,
            }
            .emit(),
            Line::Sum { landed, distinct } => crate::events::Event::LandedMore {
                landed,
                distinct,
                after: at,
            }
            .emit(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(from: usize, to: usize) -> Vec<PathBuf> {
        (from..to)
            .map(|i| PathBuf::from(format!("k/rank_tp{i}_pp0_dp0.json")))
            .collect()
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn eight_ranks_saving_three_times_get_a_line_per_landing() {
        let mut p = Progress::default();
        let mut lines = Vec::new();
        for pass in 0..3 {
            lines.extend(p.note(&files(0, 8), secs(pass)));
        }
        assert_eq!(lines.len(), 24);
        assert!(lines.iter().all(|l| matches!(l, Line::File(_))));
    }

    #[test]
    fn sixty_four_ranks_are_summed_up_at_a_bounded_rate() {
        let mut p = Progress::default();
        let mut lines = p.note(&files(0, 64), secs(1));
        assert_eq!(lines.len(), PER_FILE + 1, "{lines:?}");
        assert_eq!(
            lines[PER_FILE],
            Line::Switch {
                distinct: PER_FILE + 1
            }
        );
        // The rest of the first pass, then two more passes, one file a
        // second: a summing line at most every 10 s.
        let mut t = 2;
        for pass in 0..3 {
            let from = if pass == 0 { 64 } else { 0 };
            for f in files(from, 64).chunks(1) {
                lines.extend(p.note(f, secs(t)));
                t += 1;
            }
        }
        let sums: Vec<&Line> = lines
            .iter()
            .filter(|l| matches!(l, Line::Sum { .. }))
            .collect();
        assert!(
            sums.len() <= (t / 10 + 1) as usize,
            "{} sums over {t} s",
            sums.len()
        );
        assert!(sums.len() >= 10);
        let summed: usize = sums
            .iter()
            .map(|l| match l {
                Line::Sum { landed, .. } => *landed,
                _ => 0,
            })
            .sum();
        assert!(summed < 64 * 3 - PER_FILE);
        assert!(sums
            .iter()
            .all(|l| matches!(l, Line::Sum { distinct: 64, .. })));
    }
}
