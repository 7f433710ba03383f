//! Log lines on stderr. In text form every line starts with `keepwrap:` so a
//! user can grep for it among the engine's own output; warnings and errors
//! say so after the prefix. `KEEPWRAP_LOG` takes a tracing filter (`info` by
//! default).
//!
//! A line is one line whatever it shows: the text form escapes every control
//! character of the message and its fields (newline, CR, ESC, the rest of C0
//! and C1, DEL, line and paragraph separators, bidirectional overrides), so a
//! file name can never forge a line nor repaint the terminal. Paths shown with
//! [`Shown`] also show bytes that are not UTF-8 as `\xNN`. The JSON form is
//! escaped by serde.

use std::fmt;

use clap::ValueEnum;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// `keepwrap: ...` lines
    Text,
    /// One JSON object per line
    Json,
}

struct KeepwrapLine;

impl<S, N> FormatEvent<S, N> for KeepwrapLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut text = String::new();
        ctx.format_fields(Writer::new(&mut text), event)?;
        w.write_str("keepwrap: ")?;
        match *event.metadata().level() {
            Level::ERROR => w.write_str("error: ")?,
            Level::WARN => w.write_str("warning: ")?,
            Level::DEBUG | Level::TRACE => w.write_str("debug: ")?,
            Level::INFO => {}
        }
        escape_into(&mut w, &text)?;
        writeln!(w)
    }
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

/// A path for a log line: bytes that are not UTF-8 as `\xNN` (control
/// characters are escaped by the line formatter).
pub struct Shown<'a>(pub &'a std::path::Path);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use std::os::unix::ffi::OsStrExt;
        for chunk in self.0.as_os_str().as_bytes().utf8_chunks() {
            f.write_str(chunk.valid())?;
            for byte in chunk.invalid() {
                write!(f, "\\x{byte:02x}")?;
            }
        }
        Ok(())
    }
}

/// Install the subscriber. Safe to call once per process.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_env("KEEPWRAP_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    let _ = match format {
        LogFormat::Text => builder.event_format(KeepwrapLine).try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(false)
            .with_target(false)
            .try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn paths_show_invalid_utf8_as_hex() {
        use std::os::unix::ffi::OsStrExt;
        let p = std::path::Path::new(std::ffi::OsStr::from_bytes(b"a/\xffb\xc3.json"));
        assert_eq!(Shown(p).to_string(), "a/\\xffb\\xc3.json");
    }
}
