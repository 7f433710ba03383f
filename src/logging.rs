//! Log lines on stderr. Every line is an event of the catalogue in
//! [`crate::events`]. In text form every line starts with `keepwrap:` so a
//! user can grep for it among the engine's own output; warnings and errors
//! say so after the prefix, and the line shows the event's message only. In
//! JSON form every line is one object of the schema [`SCHEMA`]
//! (docs/troubleshooting.md, "JSON logs"): `schema`, `timestamp`, `level`,
//! `target`, `code`, `message`, `launch`, `root`, then the event's fields
//! as their types (`files`, `path`, ...). The level comes from `-v`/`-q`, else
//! `KEEPWRAP_LOG` (a level, or levels by target such as
//! `warn,keepwrap::done=debug`), else `info`.
//!
//! `tracing` carries each line (its filter, its subscriber, its writer): an
//! event travels as its one field, the typed [`Event`], which the line
//! writer takes back by downcasting and writes straight into the line, its
//! message through the escaper and its fields through serde, with no text
//! made along the way and none parsed back.
//!
//! A line is one line whatever it shows: the text form escapes every control
//! character of the message and its fields (newline, CR, ESC, the rest of C0
//! and C1, DEL, line and paragraph separators, bidirectional overrides), so a
//! file name can never forge a line nor repaint the terminal. Paths shown with
//! [`Shown`] also show bytes that are not UTF-8 as `\xNN`. The JSON form is
//! escaped by serde.

use std::fmt;

use clap::ValueEnum;
use tracing::field::{Field, Visit};
use tracing::{Level, Subscriber};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

use crate::events::{Event, Fields, Json};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// `keepwrap: ...` lines
    Text,
    /// One JSON object per line
    Json,
}

/// One line per event in the chosen form.
struct Line(LogFormat);

impl<S, N> FormatEvent<S, N> for Line
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> fmt::Result {
        let mut carried = Carried {
            format: self.0,
            level: *event.metadata().level(),
            target: event.metadata().target(),
            w: &mut w,
            written: Ok(()),
        };
        event.record(&mut carried);
        carried.written
    }
}

/// What a `tracing` event carries: the [`Event`] [`Event::emit`] passed,
/// taken back typed, and its line written from it.
struct Carried<'a, 'w> {
    format: LogFormat,
    level: Level,
    target: &'a str,
    w: &'a mut Writer<'w>,
    written: fmt::Result,
}

impl Visit for Carried<'_, '_> {
    fn record_error(&mut self, _field: &Field, value: &(dyn std::error::Error + 'static)) {
        if let Some(event) = value.downcast_ref::<Event>() {
            self.written = match self.format {
                LogFormat::Text => text_line(self.w, self.level, event),
                LogFormat::Json => json_line(self.w, self.level, self.target, event),
            };
        }
    }

    fn record_debug(&mut self, _field: &Field, _value: &dyn fmt::Debug) {}
}

/// The text form: `keepwrap: [error: |warning: |debug: ]<message>`.
fn text_line(w: &mut Writer<'_>, level: Level, event: &Event) -> fmt::Result {
    w.write_str("keepwrap: ")?;
    match level {
        Level::ERROR => w.write_str("error: ")?,
        Level::WARN => w.write_str("warning: ")?,
        Level::DEBUG | Level::TRACE => w.write_str("debug: ")?,
        Level::INFO => {}
    }
    fmt::Write::write_fmt(&mut Escaped(&mut *w), format_args!("{event}"))?;
    writeln!(w)
}

/// A writer that escapes what is written to it (see [`escape_into`]).
struct Escaped<'a, W>(&'a mut W);

impl<W: fmt::Write> fmt::Write for Escaped<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        escape_into(self.0, s)
    }
}

/// The version of the JSON form's schema: raised when a key changes
/// meaning or type, or goes (new keys and codes do not raise it).
pub const SCHEMA: u64 = 1;

/// The JSON form: one object per event, in the key order of [`SCHEMA`]:
/// `schema`, `timestamp`, `level`, `target`, `code`, `message`, `launch`,
/// `root` (this launch's, else the event's own `root` field, else null),
/// then the event's fields as their types.
fn json_line(w: &mut Writer<'_>, level: Level, target: &str, event: &Event) -> fmt::Result {
    use serde::ser::{SerializeMap, Serializer};
    let mut json = serde_json::Serializer::new(Utf8(&mut *w));
    let object = |map: &mut serde_json::ser::Compound<'_, Utf8, _>| {
        map.serialize_entry("schema", &SCHEMA)?;
        map.serialize_entry("timestamp", &AsText(Now))?;
        map.serialize_entry("level", &AsText(level))?;
        map.serialize_entry("target", target)?;
        map.serialize_entry("code", event.code())?;
        map.serialize_entry("message", &AsText(event))?;
        crate::events::with_context(|launch, root| {
            map.serialize_entry("launch", launch)?;
            if let Some(root) = root {
                return map.serialize_entry("root", root);
            }
            // An event about a root before the launch's is known.
            if !Entries::of(map, true).written(event)? {
                map.serialize_entry("root", &())?;
            }
            Ok(())
        })?;
        Entries::of(map, false).written(event).map(|_| ())
    };
    let mut map = json.serialize_map(None).map_err(|_| fmt::Error)?;
    object(&mut map)
        .and_then(|()| map.end())
        .map_err(|_| fmt::Error)?;
    writeln!(w)
}

/// The entries of an event's fields, written as they come: its `root`
/// alone, or every field but those of the [`HEADER`].
struct Entries<'a, M: serde::ser::SerializeMap> {
    map: &'a mut M,
    root: bool,
    wrote: bool,
    failed: Option<M::Error>,
}

impl<'a, M: serde::ser::SerializeMap> Entries<'a, M> {
    fn of(map: &'a mut M, root: bool) -> Self {
        Entries {
            map,
            root,
            wrote: false,
            failed: None,
        }
    }

    /// Write the entries of `event`'s fields: whether any was written.
    fn written(mut self, event: &Event) -> Result<bool, M::Error> {
        event.fields(&mut self);
        self.failed.map_or(Ok(self.wrote), Err)
    }
}

impl<M: serde::ser::SerializeMap> Fields for Entries<'_, M> {
    fn field<T: crate::events::Field>(&mut self, name: &'static str, value: &T) {
        let wanted = if self.root {
            name == "root" && !self.wrote
        } else {
            !HEADER.split(' ').any(|key| key == name)
        };
        if !wanted || self.failed.is_some() {
            return;
        }
        let key = format_args!("{name}{}", T::SUFFIX);
        match self.map.serialize_entry(&AsText(key), &Json(value)) {
            Ok(()) => self.wrote = true,
            Err(e) => self.failed = Some(e),
        }
    }
}

/// The keys every JSON line starts with: a field of the same name is not
/// written again.
const HEADER: &str = "schema timestamp level target code message launch root";

/// A value serialised as the string its `Display` writes.
struct AsText<T>(T);

impl<T: fmt::Display> serde::Serialize for AsText<T> {
    fn serialize<S: serde::Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        out.collect_str(&self.0)
    }
}

/// The time of the line, as `tracing-subscriber` writes it.
struct Now;

impl fmt::Display for Now {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use tracing_subscriber::fmt::time::FormatTime;
        tracing_subscriber::fmt::time::SystemTime.format_time(&mut Writer::new(f))
    }
}

/// The bytes `serde_json` writes, handed to the line's writer as the UTF-8
/// text they are.
struct Utf8<'a, 'w>(&'a mut Writer<'w>);

impl std::io::Write for Utf8<'_, '_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let text = std::str::from_utf8(bytes).map_err(std::io::Error::other)?;
        self.0.write_str(text).map_err(std::io::Error::other)?;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A subscriber writing the JSON form to `writer`, every level: for the
/// tests that read what a part of keepwrap logged.
#[cfg(test)]
pub(crate) fn json_subscriber<W>(writer: W) -> impl Subscriber + Send + Sync
where
    W: for<'a> tracing_subscriber::fmt::MakeWriter<'a> + Send + Sync + 'static,
{
    subscriber(LogFormat::Json, writer)
}

/// The lines a test's subscriber wrote.
#[cfg(test)]
#[derive(Clone, Default)]
pub(crate) struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

#[cfg(test)]
impl Logs {
    /// Every line written so far.
    pub(crate) fn text(&self) -> String {
        let bytes = self.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8(bytes).expect("log lines are UTF-8")
    }
}

#[cfg(test)]
impl std::io::Write for Logs {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut out) = self.0.lock() {
            out.extend_from_slice(b);
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

/// A subscriber writing `format` to `writer`, every level.
#[cfg(test)]
fn subscriber<W>(format: LogFormat, writer: W) -> impl Subscriber + Send + Sync
where
    W: for<'a> tracing_subscriber::fmt::MakeWriter<'a> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_writer(writer)
        .event_format(Line(format))
        .with_max_level(LevelFilter::TRACE)
        .finish()
}

/// Is `c` a character that must not reach a log line as it is: a control
/// character (C0, DEL, C1), a line or paragraph separator, or a
/// bidirectional override that reorders what the line shows.
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{061c}'
        )
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// Write `s` with every character of [`needs_escape`] escaped: `\n`, `\r`,
/// `\t`, `\xNN` below U+0100, `\u{NNNN}` above.
pub fn escape_into(out: &mut impl fmt::Write, s: &str) -> fmt::Result {
    let mut rest = s;
    while let Some(i) = rest.find(needs_escape) {
        out.write_str(&rest[..i])?;
        let c = rest[i..].chars().next().unwrap_or_default();
        match c {
            '\n' => out.write_str("\\n")?,
            '\r' => out.write_str("\\r")?,
            '\t' => out.write_str("\\t")?,
            c if (c as u32) < 0x100 => write!(out, "\\x{:02x}", c as u32)?,
            c => write!(out, "\\u{{{:04x}}}", c as u32)?,
        }
        rest = &rest[i + c.len_utf8()..];
    }
    out.write_str(rest)
}

pub use crate::events::Shown;

/// The levels, quietest first, as `-q`/`-v` step through them.
const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// The usual spelling of a level (`warning` -> `warn`, `err` -> `error`), or
/// `None` when `word` is not one.
fn level_word(word: &str) -> Option<&'static str> {
    match word.trim().to_ascii_lowercase().as_str() {
        "off" | "none" => Some("off"),
        "error" | "err" => Some("error"),
        "warn" | "warning" => Some("warn"),
        "info" => Some("info"),
        "debug" => Some("debug"),
        "trace" => Some("trace"),
        _ => None,
    }
}

/// The filter a `KEEPWRAP_LOG` value means: a level in any usual spelling,
/// or a list of filter directives (`keepwrap=debug`, `info,keepwrap::share=trace`)
/// whose levels may use those spellings too. `None` when it is neither: a
/// bare word such as `bogus` would otherwise be read as a target name and
/// mute every line.
pub fn parse_filter(value: &str) -> Option<String> {
    let mut out = Vec::new();
    for directive in value.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        if let Some(level) = level_word(directive) {
            out.push(level.to_string());
            continue;
        }
        let (target, level) = directive.rsplit_once('=')?;
        let level = level_word(level)?;
        if target.trim().is_empty() {
            return None;
        }
        out.push(format!("{}={level}", target.trim()));
    }
    if out.is_empty() {
        return None;
    }
    let filter = out.join(",");
    filter.parse::<Targets>().ok().map(|_| filter)
}

/// What sets the log filter, and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLevel {
    /// The filter installed.
    pub filter: String,
    /// `default`, `variable` or `flag`.
    pub source: &'static str,
    /// A `KEEPWRAP_LOG` value that is neither a level nor a filter: warned
    /// about once the subscriber is installed.
    pub unknown: Option<String>,
}

/// The filter from `-v`/`-q` counts and `KEEPWRAP_LOG` (empty counts as
/// unset). The flags win: each `-v` is one level louder and each `-q` one
/// quieter than `KEEPWRAP_LOG`'s level (or `info`).
pub fn level(verbose: u8, quiet: u8, var: Option<&str>) -> LogLevel {
    let var = var.map(str::trim).filter(|v| !v.is_empty());
    let parsed = var.map(|v| (v, parse_filter(v)));
    let mut unknown = None;
    let base = match &parsed {
        Some((_, Some(filter))) => filter.clone(),
        Some((raw, None)) => {
            unknown = Some(raw.to_string());
            "info".to_string()
        }
        None => "info".to_string(),
    };
    if verbose == 0 && quiet == 0 {
        let source = match parsed {
            Some((_, Some(_))) => "variable",
            _ => "default",
        };
        return LogLevel {
            filter: base,
            source,
            unknown,
        };
    }
    let at = LEVELS.iter().position(|l| *l == base).unwrap_or(3) as i32;
    let at = (at + i32::from(verbose) - i32::from(quiet)).clamp(0, LEVELS.len() as i32 - 1);
    LogLevel {
        filter: LEVELS[at as usize].to_string(),
        source: "flag",
        unknown,
    }
}

/// Install the subscriber with `KEEPWRAP_LOG`'s filter (see [`level`]).
pub fn init(format: LogFormat) {
    init_with(
        format,
        &level(0, 0, std::env::var("KEEPWRAP_LOG").ok().as_deref()),
    );
}

/// Install the subscriber with `level`'s filter, then warn about an unknown
/// `KEEPWRAP_LOG` value. Safe to call once per process.
pub fn init_with(format: LogFormat, level: &LogLevel) {
    let filter = level
        .filter
        .parse::<Targets>()
        .unwrap_or_else(|_| Targets::new().with_default(LevelFilter::INFO));
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // A log line that cannot be written (stderr a closed pipe) is lost;
        // reporting that on stderr too would panic in `eprintln!`.
        .log_internal_errors(false)
        .with_max_level(LevelFilter::TRACE);
    let _ = builder
        .event_format(Line(format))
        .finish()
        .with(filter)
        .try_init();
    if let Some(raw) = &level.unknown {
        crate::events::Event::UnknownLogLevel {
            value: raw.to_string(),
        }
        .emit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usual_spellings_are_levels() {
        for (v, f) in [
            ("warning", "warn"),
            ("WARN", "warn"),
            ("err", "error"),
            ("Error", "error"),
            ("info", "info"),
            (" debug ", "debug"),
            ("trace", "trace"),
            ("off", "off"),
            ("keepwrap=warning", "keepwrap=warn"),
            ("info,keepwrap::share=debug", "info,keepwrap::share=debug"),
        ] {
            assert_eq!(parse_filter(v).as_deref(), Some(f), "{v}");
        }
        for v in ["bogus", "keepwrap", "=debug", "keepwrap=loud", "", ","] {
            assert_eq!(parse_filter(v), None, "{v}");
        }
    }

    #[test]
    fn flags_step_from_the_variable_and_win() {
        assert_eq!(level(0, 0, None).filter, "info");
        assert_eq!(level(0, 0, Some("")).source, "default");
        assert_eq!(level(1, 0, None).filter, "debug");
        assert_eq!(level(5, 0, None).filter, "trace");
        assert_eq!(level(0, 1, None).filter, "warn");
        assert_eq!(level(0, 9, None).filter, "off");
        assert_eq!(level(0, 1, Some("debug")).filter, "info");
        assert_eq!(level(0, 1, Some("debug")).source, "flag");
        let bogus = level(0, 0, Some("bogus"));
        assert_eq!((bogus.filter.as_str(), bogus.source), ("info", "default"));
        assert_eq!(bogus.unknown.as_deref(), Some("bogus"));
    }

    fn esc(s: &str) -> String {
        let mut out = String::new();
        escape_into(&mut out, s).unwrap();
        out
    }

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(esc("plain é ✓ \\ path/x.json"), "plain é ✓ \\ path/x.json");
        assert_eq!(
            esc("a\n keepwrap: signed 8\r\t\u{1b}[2Jz"),
            "a\\n keepwrap: signed 8\\r\\t\\x1b[2Jz"
        );
        assert_eq!(esc("\u{7f}\u{85}\u{9b}"), "\\x7f\\x85\\x9b");
        assert_eq!(
            esc("x\u{2028}y\u{202e}z\u{2066}"),
            "x\\u{2028}y\\u{202e}z\\u{2066}"
        );
        assert_eq!(esc(""), "");
    }

    /// What `events` write in `format`, a line each.
    fn written(format: LogFormat, events: &[crate::events::Event]) -> Vec<String> {
        let out = Logs::default();
        tracing::subscriber::with_default(subscriber(format, out.clone()), || {
            for e in events {
                e.emit();
            }
        });
        let text = out.text();
        assert!(text.ends_with('\n'), "{text:?}");
        text.lines().map(str::to_string).collect()
    }

    /// A JSON line with its timestamp, launch and root (which other tests
    /// of this process may set) as `T`, `L` and `R`: each key is there
    /// once, in the schema's order.
    fn stable(line: &str) -> String {
        let mut out = line.to_string();
        for key in ["timestamp", "launch", "root"] {
            let tag = format!("\"{key}\":");
            assert_eq!(out.matches(&tag).count(), 1, "{key}: {line}");
            let at = out.find(&tag).unwrap() + tag.len();
            let end = if out[at..].starts_with('"') {
                at + 1 + out[at + 1..].find('"').unwrap() + 1
            } else {
                at + out[at..].find([',', '}']).unwrap()
            };
            let mark = &key[..1].to_uppercase();
            out.replace_range(at..end, mark);
        }
        out
    }

    /// The lines of both forms, byte for byte, for every kind of field: a
    /// path not UTF-8 and with a newline, a message with control and
    /// bidirectional characters, durations, counts, lists, an absent
    /// value, a status, an outcome, the fields made from others, an
    /// event's own `root`, and a quieter level.
    #[test]
    fn lines_are_written_byte_for_byte() {
        use crate::events::{Event, Outcome};
        use std::os::unix::ffi::OsStrExt;
        use std::path::PathBuf;
        use std::time::Duration;
        let odd = PathBuf::from(std::ffi::OsStr::from_bytes(b"0.7/a\xff\nb.json"));
        let events = [
            Event::Landed {
                path: odd.clone(),
                entries: 1,
                after: Duration::from_millis(1500),
            },
            Event::ProbeStatus {
                url: "http://h/\"q\\\"".to_string(),
                status: None,
            },
            Event::ProbeStatus {
                url: "http://h/".to_string(),
                status: Some(503),
            },
            Event::PortListeners {
                address: "127.0.0.1:30000".to_string(),
                inodes: vec![],
                tables: Duration::from_micros(1234),
                pids: vec![1, 22],
            },
            Event::DoneQuiet {
                quiet: Duration::from_secs(30),
                after: Duration::from_nanos(100),
            },
            Event::LateNotSignedStopped {
                paths: vec![odd.clone(), PathBuf::from("b.json")],
                outcome: Outcome::Broken {
                    changed: vec![PathBuf::from("c.json")],
                },
                status: crate::signals::Ended::Signaled(15),
                signal: "SIGTERM".to_string(),
            },
            Event::LateNotSignedStopped {
                paths: vec![],
                outcome: Outcome::Holds { signed: 2 },
                status: crate::signals::Ended::Exited(0),
                signal: "SIGINT".to_string(),
            },
            Event::RootCreated {
                root: PathBuf::from("/cache/r\u{1b}[2J"),
            },
            Event::SignedAgain {
                files: 3,
                late: 1,
                fingerprint: "ab".repeat(32),
            },
            Event::SettingInvalid {
                what: "bad\tvalue\u{2028}x\u{202e}y\u{7f}".to_string(),
                option: "--done".to_string(),
                variable: None,
                value: "é ✓ \u{0}".to_string(),
                then: "ignored".to_string(),
            },
            Event::StoppedBeforeStart {
                signal: "SIGTERM".to_string(),
                status: -1,
            },
            Event::NotStamping {
                files: 1,
                settle_ns: -7,
            },
            Event::Kept {
                path: "k.json".to_string(),
            },
            Event::EngineExited {
                status: 0,
                uptime: Duration::from_secs(3),
            },
        ];
        let text = written(LogFormat::Text, &events);
        let json: Vec<String> = written(LogFormat::Json, &events)
            .iter()
            .map(|l| stable(l))
            .collect();
        let expected_text = [
            "keepwrap: landed 0.7/a\\xff\\nb.json (1 entry, 1.5 s after the launch)",
            "keepwrap: debug: health probe of http://h/\"q\\\": no HTTP status line",
            "keepwrap: debug: health probe of http://h/: status 503",
            "keepwrap: debug: sockets listening for 127.0.0.1:30000: inodes  (socket tables read in 1.2 ms); the engine's tree: pids 1, 22",
            "keepwrap: tuning is done: no cache file landed for 30s (0.0 s after the launch)",
            "keepwrap: not signing the 2 cache files that landed after tuning was done (0.7/a\\xff\\nb.json, b.json): the engine ended with status 143 (killed by SIGTERM) after keepwrap forwarded SIGTERM; the set signed at done no longer holds (c.json changed or gone since it was signed): the next launch tunes again",
            "keepwrap: not signing the 0 cache files that landed after tuning was done (): the engine ended with status 0 after keepwrap forwarded SIGINT; the 2 cache files signed at done stay signed as they were: the next launch keeps them and removes the late ones",
            "keepwrap: cache root /cache/r\\x1b[2J did not exist (first boot): created it",
            "keepwrap: signed again at exit: 3 cache files, with the 1 that landed after tuning was done",
            "keepwrap: error: bad\\tvalue\\u{2028}x\\u{202e}y\\x7f; ignored (--strict, or KEEPWRAP_STRICT=1, refuses it)",
            "keepwrap: received SIGTERM before the engine started: exiting with -1 without starting it",
            "keepwrap: debug: not stamping 1 cache file: their change times settle in -7 ns",
            "keepwrap: debug: kept k.json: signed for this launch",
            "keepwrap: the engine exited with status 0 after 3.0 s",
        ];
        let expected_json = [
            "{\"schema\":1,\"timestamp\":T,\"level\":\"INFO\",\"target\":\"keepwrap::done\",\"code\":\"landed\",\"message\":\"landed 0.7/a\\\\xff\\nb.json (1 entry, 1.5 s after the launch)\",\"launch\":L,\"root\":R,\"path\":\"0.7/a\\\\xff\\nb.json\",\"entries\":1,\"after_s\":1.5}",
            "{\"schema\":1,\"timestamp\":T,\"level\":\"DEBUG\",\"target\":\"keepwrap::done\",\"code\":\"probe_status\",\"message\":\"health probe of http://h/\\\"q\\\\\\\": no HTTP status line\",\"launch\":L,\"root\":R,\"url\":\"http://h/\\\"q\\\\\\\"\",\"status\":null}",
            "{\"schema\":1,\"timestamp\":T,\"level\":\"DEBUG\",\"target\":\"keepwrap::done\",\"code\":\"probe_status\",\"message\":\"health probe of http://h/: status 503\",\"launch\":L,\"root\":R,\"url\":\"http://h/\",\"status\":503}",
            "{\"schema\":1,\"timestamp\":T,\"level\":\"DEBUG\",\"target\":\"keepwrap::done\",\"code\":\"port_listeners\",\"message\":\"sockets listening for 127.0.0.1:30000: inodes  (socket tables read in 1.2 ms); the engine's tree: pids 1, 22\",\"launch\":L,\"root\":R,\"address\":\"127.0.0.1:30000\",\"inodes\":[],\"tables_s\":0.001234,\"pids\":[1,22]}",
            "{\"schema\":1,\"timestamp\":T,\"level\":\"INFO\",\"target\":\"keepwrap::keeper\",\"code\":\"tuning_done\",\"message\":\"tuning is done: no cache file landed for 30s (0.0 s after the launch)\",\"launch\":L,\"root\":R,\"quiet_s\":30.0,\"after_s\":1e-7,\"rule\":\"quiet\"}",
            "{\"schema\":1,\"timestamp\":T,\"level\":\"INFO\",\"target\":\"keepwrap::keeper\",\"code\":\"late_not_signed_stopped\",\"message\":\"not signing the 2 cache files that landed after tuning was done (0.7/a\\\\xff\\nb.json, b.json): the engine ended with status 143 (killed by SIGTERM) after keepwrap forwarded SIGTERM; the set signed at done no longer holds (c.json changed or gone since it was signed): the next launch tunes again\",\"launch\":L,\"root\":R,\"paths\":[\"0.7/a\\\\xff\\nb.json\",\"b.json\"],\"outcome\":\"broken\",\"status\":143,\"signal\":\"SIGTERM\",\"late\":2,\"set_holds\":false}",
            "{\"schema\":1,\"timestamp\":T,\"level\":\"INFO\",\"target\":\"keepwrap::keeper\",\"code\":\"late_not_signed_stopped\",\"message\":\"not signing the 0 cache files that landed after tuning was done (): the engine ended with status 0 after keepwrap forwarded SIGINT; the 2 cache files signed at done stay signed as they were: the next launch keeps them and removes the late ones\",\"launch\":L,\"root\":R,\"paths\":[],\"outcome\":\"holds\",\"status\":0,\"signal\":\"SIGINT\",\"late\":0,\"set_holds\":true}",
            "{\"schema\":1,\"timestamp\":T,\"level\":\"INFO\",\"target\":\"keepwrap::keeper\",\"code\":\"root_created\",\"message\":\"cache root /cache/r\\u001b[2J did not exist (first boot): created it\",\"launch\":L,\"root\":R}",
            "{\"schema\":1,\"timestamp\":T,\"level\":\"INFO\",\"target\":\"keepwrap::keeper\",\"code\":\"signed_again\",\"message\":\"signed again at exit: 3 cache files, with the 1 that landed after tuning was done\",\"launch\":L,\"root\":R,\"files\":3,\"late\":1,\"fingerprint\":\"abababababababababababababababababababababababababababababababab\"}",
            "{\"schema\":1,\"timestamp\":T,\"level\":\"ERROR\",\"target\":\"keepwrap::cli\",\"code\":\"setting_invalid\",\"message\":\"bad\\tvalue\u{2028}x\u{202e}y\u{7f}; ignored (--strict, or KEEPWRAP_STRICT=1, refuses it)\",\"launch\":L,\"root\":R,\"what\":\"bad\\tvalue\u{2028}x\u{202e}y\u{7f}\",\"option\":\"--done\",\"variable\":null,\"value\":\"\u{e9} \u{2713} \\u0000\",\"then\":\"ignored\"}",
            "{\"schema\":1,\"timestamp\":T,\"level\":\"INFO\",\"target\":\"keepwrap::supervisor\",\"code\":\"stopped_before_start\",\"message\":\"received SIGTERM before the engine started: exiting with -1 without starting it\",\"launch\":L,\"root\":R,\"signal\":\"SIGTERM\",\"status\":-1}",
            "{\"schema\":1,\"timestamp\":T,\"level\":\"DEBUG\",\"target\":\"keepwrap::cache\",\"code\":\"not_stamping\",\"message\":\"not stamping 1 cache file: their change times settle in -7 ns\",\"launch\":L,\"root\":R,\"files\":1,\"settle_ns\":-7}",
            "{\"schema\":1,\"timestamp\":T,\"level\":\"DEBUG\",\"target\":\"keepwrap::cache\",\"code\":\"kept\",\"message\":\"kept k.json: signed for this launch\",\"launch\":L,\"root\":R,\"path\":\"k.json\"}",
            "{\"schema\":1,\"timestamp\":T,\"level\":\"INFO\",\"target\":\"keepwrap::supervisor\",\"code\":\"engine_ended\",\"message\":\"the engine exited with status 0 after 3.0 s\",\"launch\":L,\"root\":R,\"status\":0,\"uptime_s\":3.0}",
        ];
        assert_eq!(text, expected_text);
        assert_eq!(json, expected_json);
        assert_eq!((text.len(), json.len()), (events.len(), events.len()));
    }

    #[test]
    fn paths_show_invalid_utf8_as_hex() {
        use std::os::unix::ffi::OsStrExt;
        let p = std::path::Path::new(std::ffi::OsStr::from_bytes(b"a/\xffb\xc3.json"));
        assert_eq!(Shown(p).to_string(), "a/\\xffb\\xc3.json");
    }
}
