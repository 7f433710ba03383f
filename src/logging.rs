//! Log lines on stderr. In text form every line starts with `keepwrap:` so a
//! user can grep for it among the engine's own output; warnings and errors
//! say so after the prefix. `KEEPWRAP_LOG` takes a filter of levels and
//! targets (`debug`, `warn,keepwrap::ready=debug`; `info` by default).

use std::fmt;

use clap::ValueEnum;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

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
        w.write_str("keepwrap: ")?;
        match *event.metadata().level() {
            Level::ERROR => w.write_str("error: ")?,
            Level::WARN => w.write_str("warning: ")?,
            Level::DEBUG | Level::TRACE => w.write_str("debug: ")?,
            Level::INFO => {}
        }
        ctx.format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

/// Install the subscriber. Safe to call once per process.
pub fn init(format: LogFormat) {
    let filter = std::env::var("KEEPWRAP_LOG")
        .ok()
        .and_then(|v| v.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(LevelFilter::INFO));
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // A log line that cannot be written (stderr a closed pipe) is lost;
        // reporting that on stderr too would panic in `eprintln!`.
        .log_internal_errors(false)
        .with_max_level(LevelFilter::TRACE);
    let _ = match format {
        LogFormat::Text => builder
            .event_format(KeepwrapLine)
            .finish()
            .with(filter)
            .try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(false)
            .with_target(false)
            .finish()
            .with(filter)
            .try_init(),
    };
}
