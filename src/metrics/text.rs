//! The metrics as numbers, what each event does to them, and their text in
//! Prometheus' exposition format (written, and read back at the start).
//! No I/O here.

use std::time::Duration;

use crate::events::Event;

/// How a boot went: its label value, in the order the file lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Boot {
    /// It loaded a set signed for it (`reused`).
    Reused,
    /// It tuned, and its set was signed (`signed`).
    TunedSigned,
    /// It kept the cache but nothing was signed: stopped or failed before
    /// done, another launch on the root, nothing to sign, a refused set.
    NotSigned,
    /// keepwrap only supervised it (`supervising_only`; a launch whose
    /// cache keepwrap leaves to the engine or cannot read).
    SupervisedOnly,
}

const BOOTS: [(Boot, &str); 4] = [
    (Boot::Reused, "reused"),
    (Boot::TunedSigned, "tuned_signed"),
    (Boot::NotSigned, "not_signed"),
    (Boot::SupervisedOnly, "supervised_only"),
];

/// The outcomes of a fleet restore.
const RESTORES: [&str; 3] = ["restored", "empty", "failed"];

/// The outcomes of a fleet publication.
const PUBLISHES: [&str; 5] = [
    "published",
    "published_other",
    "part_published",
    "failed",
    "abandoned",
];

/// Every metric of the file: its name, type and help.
const BOOTS_TOTAL: &str = "keepwrap_boots_total";
const TIME_TO_DONE: &str = "keepwrap_time_to_done_seconds";
const KEPT_FILES: &str = "keepwrap_kept_files";
const KEPT_ENTRIES: &str = "keepwrap_kept_entries";
const RESTORES_TOTAL: &str = "keepwrap_fleet_restores_total";
const PUBLISHES_TOTAL: &str = "keepwrap_fleet_publishes_total";
const LAST_OUTCOME: &str = "keepwrap_last_outcome_timestamp_seconds";
const PINNED_MISSING: &str = "keepwrap_pinned_missing_shapes";

/// What the file holds, and what this process knows of its boot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics {
    /// Boots by [`BOOTS`]' order.
    pub boots: [u64; 4],
    /// The seconds to done of the last boot of each outcome that reached
    /// done, by [`BOOTS`]' order.
    pub time_to_done: [Option<f64>; 4],
    /// The cache files and the entries (tuned shapes) the last boot kept.
    pub kept_files: u64,
    pub kept_entries: u64,
    /// Fleet restores by [`RESTORES`]' order.
    pub restores: [u64; 3],
    /// Fleet publications by [`PUBLISHES`]' order.
    pub publishes: [u64; 5],
    /// The unix time of the last outcome.
    pub last_outcome: Option<f64>,
    /// The shapes the last boot tuned that its pinned set lacks (`--pin`;
    /// None: the last boot was not pinned).
    pub pinned_missing: Option<u64>,
    /// This process: its boot is pinned (a `pinned` line).
    pinned: bool,
    /// This process: its boot's done, not yet told by an outcome.
    done_after: Option<Duration>,
    /// This process: its boot is counted.
    counted: bool,
}

impl Metrics {
    /// Take in `event`, at unix time `now`: whether the metrics changed
    /// (an outcome).
    pub fn apply(&mut self, event: &Event, now: f64) -> bool {
        let changed = match event {
            Event::DoneHealth { after, .. }
            | Event::DoneQuiet { after, .. }
            | Event::DoneExit { after } => {
                self.done_after = Some(*after);
                false
            }
            Event::Pinned { missing, .. } => {
                // at done, before the outcome; again at exit, after it
                let was = self.pinned_missing.replace(*missing as u64);
                self.pinned = true;
                self.counted && was != self.pinned_missing
            }
            Event::Reused { files, entries, .. } => {
                self.boot(Boot::Reused, (*files, entries.unwrap_or(0)))
            }
            Event::Signed { files, entries, .. } => {
                self.boot(Boot::TunedSigned, (*files, entries.unwrap_or(0)))
            }
            Event::SupervisingOnly { .. }
            | Event::ManagedStore {
                supervising: true,
                ..
            }
            | Event::RayLaunch { .. }
            | Event::UnreadablePruned { .. } => self.boot(Boot::SupervisedOnly, (0, 0)),
            Event::NothingSigned { .. }
            | Event::NothingToKeep {}
            | Event::NotSigningStopped { .. }
            | Event::NotSigningEarly { .. }
            | Event::NotSigningHeadless {}
            | Event::NotSigningExitUnproven {}
            | Event::OtherLaunch { .. }
            | Event::NotSignedOffered { .. }
            | Event::NotSignedUnresolved { .. }
            | Event::NotSignedUnseen { .. }
            | Event::KeptRefused { .. }
            | Event::CannotSign { .. }
            // A launch that ended with no outcome said: nothing was signed.
            | Event::EngineExited { .. }
            | Event::EngineKilled { .. } => self.boot(Boot::NotSigned, (0, 0)),
            Event::CommandExited { .. } | Event::CommandKilled { .. } => {
                self.boot(Boot::SupervisedOnly, (0, 0))
            }
            Event::FleetRestored { .. } => bump(&mut self.restores, &RESTORES, "restored"),
            // A HEAD of another format is read as no set.
            Event::FleetEmpty { .. } | Event::FleetOtherFormat { .. } => {
                bump(&mut self.restores, &RESTORES, "empty")
            }
            Event::FleetRestoreFailed { .. }
            | Event::FleetCannotPlace { .. }
            | Event::FleetUnusable { .. }
            | Event::FleetNoGpuModel { .. } => bump(&mut self.restores, &RESTORES, "failed"),
            Event::FleetPublished { .. } => bump(&mut self.publishes, &PUBLISHES, "published"),
            Event::FleetPublishedOther { .. } => {
                bump(&mut self.publishes, &PUBLISHES, "published_other")
            }
            Event::FleetPartPublished { .. } => {
                bump(&mut self.publishes, &PUBLISHES, "part_published")
            }
            Event::FleetPublishFailed { .. } => bump(&mut self.publishes, &PUBLISHES, "failed"),
            Event::FleetPublishAbandoned { .. } | Event::FleetPublishStopped {} => {
                bump(&mut self.publishes, &PUBLISHES, "abandoned")
            }
            _ => false,
        };
        if changed {
            self.last_outcome = Some(now);
        }
        changed
    }

    /// This process's boot went `how`, keeping `kept` (files, entries):
    /// counted once, at its first outcome.
    fn boot(&mut self, how: Boot, (files, entries): (usize, usize)) -> bool {
        if std::mem::replace(&mut self.counted, true) {
            return false;
        }
        let i = BOOTS.iter().position(|(b, _)| *b == how).unwrap_or(0);
        self.boots[i] = self.boots[i].saturating_add(1);
        if let Some(after) = self.done_after.take() {
            self.time_to_done[i] = Some(after.as_secs_f64());
        }
        self.kept_files = files as u64;
        self.kept_entries = entries as u64;
        if !self.pinned {
            self.pinned_missing = None;
        }
        true
    }

    /// The file's text: every metric with its `# HELP` and `# TYPE` lines,
    /// every counter's every label value (0 included).
    pub fn render(&self) -> String {
        let by =
            |labels: &[&'static str], values: Vec<String>| -> Vec<(Option<&'static str>, String)> {
                labels.iter().map(|l| Some(*l)).zip(values).collect()
            };
        let boots: Vec<&str> = BOOTS.iter().map(|(_, l)| *l).collect();
        let counts = |c: &[u64]| c.iter().map(u64::to_string).collect::<Vec<_>>();
        let done: Vec<(Option<&str>, String)> = boots
            .iter()
            .zip(self.time_to_done)
            .filter_map(|(l, s)| s.map(|s| (Some(*l), format!("{s:.3}"))))
            .collect();
        let metrics = [
            (BOOTS_TOTAL, "counter", "Boots of this launch by outcome: reused, tuned_signed, not_signed, supervised_only.", by(&boots, counts(&self.boots))),
            (TIME_TO_DONE, "gauge", "Seconds from the engine's start to tuning done, of the last boot of each outcome that reached done.", done),
            (KEPT_FILES, "gauge", "Cache files of the set the last boot reused or signed (0: it kept none).", vec![(None, self.kept_files.to_string())]),
            (KEPT_ENTRIES, "gauge", "Entries (tuned shapes) in the cache files of the set the last boot reused or signed.", vec![(None, self.kept_entries.to_string())]),
            (RESTORES_TOTAL, "counter", "Fleet restores by outcome: restored, empty (no set yet), failed.", by(&RESTORES, counts(&self.restores))),
            (PUBLISHES_TOTAL, "counter", "Fleet publications by outcome: published, published_other, part_published, failed, abandoned.", by(&PUBLISHES, counts(&self.publishes))),
            (LAST_OUTCOME, "gauge", "Unix time of the last outcome written to this file.", self.last_outcome.iter().map(|t| (None, format!("{t:.3}"))).collect()),
            (PINNED_MISSING, "gauge", "Shapes the last boot tuned that its pinned set lacks (--pin; tuned for that boot only). Absent when the last boot was not pinned.", self.pinned_missing.iter().map(|n| (None, n.to_string())).collect()),
        ];
        let mut out = String::new();
        for (name, kind, help, samples) in metrics {
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
            for (label, value) in samples {
                match label {
                    Some(l) => out.push_str(&format!("{name}{{outcome=\"{l}\"}} {value}\n")),
                    None => out.push_str(&format!("{name} {value}\n")),
                }
            }
        }
        out
    }

    /// The metrics of a file [`Metrics::render`] wrote (a sample of a name
    /// or label value it does not know is left out, as a later version's
    /// would be); Err: why it is not such a file.
    pub fn parse(text: &str) -> Result<Metrics, String> {
        let mut m = Metrics::default();
        for (n, line) in text.lines().enumerate() {
            let at = |what: &str| format!("line {}: {what}", n + 1);
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (series, value) = line
                .rsplit_once(' ')
                .ok_or_else(|| at("not a sample (NAME VALUE)"))?;
            let value: f64 = value
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| at("not a number of zero or more"))?;
            let (name, label) = match series.split_once('{') {
                None => (series, None),
                Some((name, rest)) => {
                    let label = rest
                        .strip_prefix("outcome=\"")
                        .and_then(|r| r.strip_suffix("\"}"))
                        .ok_or_else(|| at("not a sample (NAME{outcome=\"VALUE\"} VALUE)"))?;
                    (name, Some(label))
                }
            };
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(at("not a metric name"));
            }
            let count = || {
                (value.fract() == 0.0 && value < u64::MAX as f64)
                    .then_some(value as u64)
                    .ok_or_else(|| at("a counter that is not a whole number"))
            };
            match (name, label) {
                (BOOTS_TOTAL, Some(l)) => {
                    if let Some(i) = BOOTS.iter().position(|(_, b)| *b == l) {
                        m.boots[i] = count()?;
                    }
                }
                (TIME_TO_DONE, Some(l)) => {
                    if let Some(i) = BOOTS.iter().position(|(_, b)| *b == l) {
                        m.time_to_done[i] = Some(value);
                    }
                }
                (RESTORES_TOTAL, Some(l)) => {
                    if let Some(i) = RESTORES.iter().position(|r| *r == l) {
                        m.restores[i] = count()?;
                    }
                }
                (PUBLISHES_TOTAL, Some(l)) => {
                    if let Some(i) = PUBLISHES.iter().position(|p| *p == l) {
                        m.publishes[i] = count()?;
                    }
                }
                (KEPT_FILES, None) => m.kept_files = count()?,
                (KEPT_ENTRIES, None) => m.kept_entries = count()?,
                (LAST_OUTCOME, None) => m.last_outcome = Some(value),
                (PINNED_MISSING, None) => m.pinned_missing = Some(count()?),
                _ => {}
            }
        }
        Ok(m)
    }
}

/// Add one to the counter of `label` among `labels`: true.
fn bump<const N: usize>(counts: &mut [u64; N], labels: &[&str; N], label: &str) -> bool {
    if let Some(i) = labels.iter().position(|l| *l == label) {
        counts[i] = counts[i].saturating_add(1);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(files: usize, entries: usize) -> Event {
        Event::Signed {
            files,
            entries: Some(entries),
            fingerprint: "f".repeat(64),
        }
    }

    #[test]
    fn a_boot_is_counted_once_at_its_first_outcome_with_its_time_to_done() {
        let mut m = Metrics::default();
        assert!(!m.apply(
            &Event::DoneExit {
                after: Duration::from_millis(2500)
            },
            1.0
        ));
        assert!(m.apply(&signed(4, 120), 2.0));
        assert!(!m.apply(
            &Event::EngineExited {
                status: 0,
                uptime: Duration::from_secs(3)
            },
            3.0
        ));
        assert_eq!(m.boots, [0, 1, 0, 0]);
        assert_eq!(m.time_to_done, [None, Some(2.5), None, None]);
        assert_eq!((m.kept_files, m.kept_entries), (4, 120));
        assert_eq!(m.last_outcome, Some(2.0));
    }

    #[test]
    fn a_launch_that_ends_with_no_outcome_said_is_not_signed() {
        let mut m = Metrics::default();
        assert!(m.apply(
            &Event::EngineKilled {
                status: 137,
                signal: "SIGKILL".into(),
                uptime: Duration::from_secs(1)
            },
            5.0
        ));
        assert_eq!(m.boots, [0, 0, 1, 0]);
    }

    #[test]
    fn what_it_renders_it_reads_back_and_a_later_boot_adds_to_it() {
        let mut m = Metrics::default();
        m.apply(
            &Event::DoneExit {
                after: Duration::from_secs(7),
            },
            1.0,
        );
        m.apply(&signed(2, 9), 1.5);
        m.apply(&Event::FleetEmpty { key: "k".into() }, 1.6);
        let old = Event::FleetOtherFormat {
            key: "k".into(),
            format: 1,
            reads: 2,
        };
        m.apply(&old, 1.65);
        m.apply(&Event::FleetPublishFailed { error: "e".into() }, 1.7);
        let text = m.render();
        assert!(text.contains("# TYPE keepwrap_boots_total counter\n"));
        assert!(text.contains("keepwrap_boots_total{outcome=\"tuned_signed\"} 1\n"));
        assert!(text.contains("keepwrap_boots_total{outcome=\"reused\"} 0\n"));
        assert!(text.contains("keepwrap_time_to_done_seconds{outcome=\"tuned_signed\"} 7.000\n"));
        assert!(text.contains("keepwrap_fleet_restores_total{outcome=\"empty\"} 2\n"));
        assert!(text.contains("keepwrap_fleet_publishes_total{outcome=\"failed\"} 1\n"));
        assert!(text.contains("keepwrap_last_outcome_timestamp_seconds 1.700\n"));
        let mut back = Metrics::parse(&text).unwrap();
        assert_eq!(back.render(), text);
        back.apply(&signed(2, 9), 2.0);
        assert_eq!(back.boots, [0, 2, 0, 0]);
    }

    #[test]
    fn a_file_keepwrap_did_not_write_is_refused_with_its_line() {
        for (text, line) in [
            ("garbage", "line 1: not a sample"),
            (
                "# ok\nkeepwrap_boots_total{outcome=\"reused\"} x",
                "line 2: not a number",
            ),
            (
                "keepwrap_boots_total{outcome=\"reused\"} -1",
                "line 1: not a number",
            ),
            (
                "keepwrap_boots_total{outcome=\"reused\"} NaN",
                "line 1: not a number",
            ),
            (
                "keepwrap_boots_total{outcome=\"reused\"} 1.5",
                "line 1: a counter",
            ),
            ("keepwrap_boots_total{job=\"x\"} 1", "line 1: not a sample"),
            ("a-b 1", "line 1: not a metric name"),
            ("\u{0}\u{1} 2", "line 1: not a metric name"),
        ] {
            let e = Metrics::parse(text).unwrap_err();
            assert!(e.starts_with(line), "{text:?}: {e}");
        }
        let unknown =
            "keepwrap_later_total{outcome=\"x\"} 4\nkeepwrap_boots_total{outcome=\"later\"} 2\n";
        assert_eq!(Metrics::parse(unknown), Ok(Metrics::default()));
    }
}
