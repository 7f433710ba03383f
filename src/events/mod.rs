//! Everything keepwrap logs: one [`Event`] type, an enum whose variants are
//! the events, each with typed fields, its level, its stable reason code
//! (`snake_case`, e.g. `kept`) and its message (its `Display`, the line
//! users read). The variants are declared in [`catalogue`], grouped by the
//! folder they belong to; [`CATALOGUE`] lists every code with its target,
//! its levels and its message template, and the troubleshooting reference
//! has one row per code (a test holds it). No log call lives outside this
//! module (a test holds that).
//!
//! [`Event::emit`] logs one through `tracing`: the text form shows the
//! message (`keepwrap: tuned and signed 3 cache files`), the JSON form
//! (`--log-format json`) the schema of [`crate::logging`]: the code, the
//! message, and every field as its type (counts as numbers, durations as
//! seconds in `*_s`, paths as strings). The fields keep one vocabulary:
//! - `path`: a cache file or directory, relative to the cache root; `dir`:
//!   another directory; `file`: a state file;
//! - `fingerprint`: this launch's fingerprint, all 64 digits;
//!   `other_fingerprint`: another launch's (all its digits where known);
//! - counts by what they count: `files`, `entries`, `nodes`, `kept`, ...;
//! - `reason`: why keepwrap decided what it did; `error`: the system error;
//! - durations in seconds as numbers: `after_s`, `waited_s`, `grace_s`, ...;
//! - `pid`, `signal` (`SIGTERM`), `status` (the engine's exit, as shown).
//!
//! The target of each event is the folder it belongs to (`keepwrap::done`,
//! `keepwrap::cache`, ...), so `KEEPWRAP_LOG=warn,keepwrap::done=debug`
//! filters as the folders read.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Serialize, Serializer};
use tracing::Level;

/// Declares [`Event`]: per target, each variant with its fields, its
/// levels (the usual first), its code and its message.
macro_rules! catalogue {
    ($( $target:literal { $(
        $(#[$doc:meta])*
        $variant:ident { $($field:ident : $ty:ty),* $(,)? }
            $level:ident $(| $alt:ident)* $code:literal
            => $fmt:literal $(, $arg:expr)* ;
    )* } )*) => {
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum Event {
            $($( $(#[$doc])* $variant { $($field: $ty),* }, )*)*
        }

        impl Event {
            /// The stable reason code.
            pub fn code(&self) -> &'static str {
                match self { $($( Event::$variant { .. } => $code, )*)* }
            }

            /// The target: the folder the event belongs to.
            pub fn target(&self) -> &'static str {
                match self { $($( Event::$variant { .. } => $target, )*)* }
            }

            /// The levels it is logged at, its usual one first.
            pub fn levels(&self) -> &'static [tracing::Level] {
                match self { $($( Event::$variant { .. } => &[tracing::Level::$level $(, tracing::Level::$alt)*], )*)* }
            }

            /// Each declared field, in its order.
            pub(super) fn declared_fields(&self, out: &mut impl super::Fields) {
                let _ = &out;
                match self { $($(
                    #[allow(unused_variables)]
                    Event::$variant { $($field),* } => { $( out.field(stringify!($field), $field); )* }
                )*)* }
            }
        }

        impl std::fmt::Display for Event {
            fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self { $($(
                    #[allow(unused_variables)]
                    Event::$variant { $($field),* } => {
                        $( let $field = super::AsArg::arg($field); )*
                        write!(formatter, $fmt $(, $arg)*)
                    }
                )*)* }
            }
        }

        /// Every code of the catalogue.
        pub const CATALOGUE: &[super::Entry] = &[ $($( super::Entry {
            code: $code,
            target: $target,
            levels: &[tracing::Level::$level $(, tracing::Level::$alt)*],
            template: $fmt,
        }, )*)* ];
    };
}

mod catalogue;

pub use catalogue::{Event, Outcome};

/// One code of the catalogue: its target, the levels it is logged at (the
/// first is its usual one) and its message template (the format string,
/// `{name}` for a field or `{}` for a value made from the fields).
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub code: &'static str,
    pub target: &'static str,
    pub levels: &'static [Level],
    pub template: &'static str,
}

/// A field as a message sees it: a count or a duration by value, a
/// string as `&str`, a path as `&Path`.
pub trait AsArg {
    type Out<'a>
    where
        Self: 'a;
    fn arg(&self) -> Self::Out<'_>;
}

macro_rules! copy_arg {
    ($($t:ty),*) => {$(
        impl AsArg for $t {
            type Out<'a> = $t;
            fn arg(&self) -> $t {
                *self
            }
        }
    )*};
}
copy_arg!(
    usize,
    u64,
    u32,
    u16,
    u8,
    i64,
    i32,
    bool,
    Duration,
    &'static str,
    Option<u16>,
    Option<usize>,
    crate::signals::Ended
);

impl AsArg for String {
    type Out<'a> = &'a str;
    fn arg(&self) -> &str {
        self
    }
}

impl AsArg for PathBuf {
    type Out<'a> = &'a std::path::Path;
    fn arg(&self) -> &std::path::Path {
        self
    }
}

impl AsArg for Option<String> {
    type Out<'a> = Option<&'a str>;
    fn arg(&self) -> Option<&str> {
        self.as_deref()
    }
}

impl<T> AsArg for Vec<T> {
    type Out<'a>
        = &'a [T]
    where
        T: 'a;
    fn arg(&self) -> &[T] {
        self
    }
}

/// Counts by kind, as a line says them (`300 unsigned, 2 changed after
/// signing`: the largest first) and as the JSON form gives them (an object,
/// `{"unsigned": 300, "changed": 2}`). Each kind has its key and the words
/// a line says it with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally(Vec<(&'static str, &'static str, usize)>);

impl Tally {
    /// Count one more of the kind `key`, said as `words`.
    pub fn add(&mut self, key: &'static str, words: &'static str) {
        match self.0.iter_mut().find(|(k, _, _)| *k == key) {
            Some((_, _, n)) => *n += 1,
            None => self.0.push((key, words, 1)),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The kinds, the largest count first (then by key).
    fn sorted(&self) -> Vec<(&'static str, &'static str, usize)> {
        let mut v = self.0.clone();
        v.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(b.0)));
        v
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (_, words, n)) in self.sorted().into_iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{n} {words}")?;
        }
        Ok(())
    }
}

impl AsArg for Tally {
    type Out<'a> = &'a Tally;
    fn arg(&self) -> &Tally {
        self
    }
}

impl Field for Tally {
    fn json<S: Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = out.serialize_map(Some(self.0.len()))?;
        for (key, _, n) in self.sorted() {
            map.serialize_entry(key, &n)?;
        }
        map.end()
    }
}

/// A field's value in the JSON form, by its type.
pub trait Field {
    /// Appended to the field's name in JSON (`_s` for a duration).
    const SUFFIX: &'static str = "";
    fn json<S: Serializer>(&self, out: S) -> Result<S::Ok, S::Error>;
}

impl Field for String {
    fn json<S: Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        out.serialize_str(self)
    }
}

impl Field for &'static str {
    fn json<S: Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        out.serialize_str(self)
    }
}

macro_rules! plain_field {
    ($($t:ty),*) => {$(
        impl Field for $t {
            fn json<S: Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
                self.serialize(out)
            }
        }
    )*};
}
plain_field!(bool, usize, u64, u32, i64, i32, u16, u8);

/// How the engine ended, as the status keepwrap reports: its code, or
/// 128+N for a signal (the message says which signal).
impl Field for crate::signals::Ended {
    fn json<S: Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        out.serialize_u8(self.exit_code())
    }
}

impl Field for Duration {
    const SUFFIX: &'static str = "_s";
    fn json<S: Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        out.serialize_f64(self.as_secs_f64())
    }
}

impl Field for PathBuf {
    fn json<S: Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        out.collect_str(&Shown(self))
    }
}

impl<T: Field> Field for Option<T> {
    const SUFFIX: &'static str = T::SUFFIX;
    fn json<S: Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        match self {
            Some(value) => value.json(out),
            None => out.serialize_none(),
        }
    }
}

impl<T: Field> Field for Vec<T> {
    fn json<S: Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        out.collect_seq(self.iter().map(Json))
    }
}

/// A field as `serde` serialises it.
pub struct Json<'a, T>(pub &'a T);

impl<T: Field> Serialize for Json<'_, T> {
    fn serialize<S: Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        self.0.json(out)
    }
}

/// Where the fields of an event go, one by one in their order: its name
/// (its JSON key is the name and the type's [`Field::SUFFIX`]) and its
/// typed value.
pub trait Fields {
    fn field<T: Field>(&mut self, name: &'static str, value: &T);
}

impl Event {
    /// The level this event is logged at: its usual one, or another of its
    /// declared levels where its fields say so (a line after the first few
    /// of a kind, a file in a root said once to be untrusted).
    pub fn level(&self) -> Level {
        self.quieter().unwrap_or_else(|| self.levels()[0])
    }

    /// Every field in its order, then those made from others.
    pub fn fields(&self, out: &mut impl Fields) {
        self.declared_fields(out);
        self.derived_fields(out);
    }

    /// Log this event, then show it to the observer, if one was set.
    pub fn emit(&self) {
        dispatch(self.target(), self.level(), self);
        if let Some(observer) = OBSERVER.get() {
            observer(self);
        }
    }
}

/// What sees every event after it is logged, whatever the log level.
static OBSERVER: std::sync::OnceLock<fn(&Event)> = std::sync::OnceLock::new();

/// Show every event emitted from now on to `observer` (the metrics file),
/// on the thread that emits it; the first observer set stays. It may emit
/// events itself, once it no longer holds what it locks.
pub fn observe(observer: fn(&Event)) {
    let _ = OBSERVER.set(observer);
}

/// Whether an observer is set ([`observe`]): what only it needs may be
/// left uncounted otherwise.
pub fn observed() -> bool {
    OBSERVER.get().is_some()
}

/// An event travels through `tracing` as the one kind of field value a
/// subscriber can downcast to its type: [`crate::logging`] takes it back
/// typed and writes its line from it.
impl std::error::Error for Event {}

/// The entry of `code`, if it is one.
pub fn entry(code: &str) -> Option<&'static Entry> {
    CATALOGUE.iter().find(|e| e.code == code)
}

pub use catalogue::CATALOGUE;

/// The launch this process logs for: an id of its own (16 hex digits, new
/// at each start) and its cache root once known.
struct Context {
    launch: String,
    root: std::sync::Mutex<Option<String>>,
}

fn shared() -> &'static Context {
    static CONTEXT: std::sync::OnceLock<Context> = std::sync::OnceLock::new();
    CONTEXT.get_or_init(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let seed = format!(
            "{}:{}:{}",
            std::process::id(),
            now.as_nanos(),
            crate::digest::sha256_hex(
                &std::fs::read("/proc/sys/kernel/random/boot_id").unwrap_or_default()
            )
        );
        Context {
            launch: crate::digest::sha256_hex(seed.as_bytes())[..16].to_string(),
            root: std::sync::Mutex::new(None),
        }
    })
}

/// The cache root every JSON event names from now on.
pub fn set_root(root: &std::path::Path) {
    let shown = Shown(root).to_string();
    if let Ok(mut r) = shared().root.lock() {
        *r = Some(shown);
    }
}

/// `f` of the launch id and the cache root (once known) every JSON event
/// names.
pub fn with_context<R>(f: impl FnOnce(&str, Option<&str>) -> R) -> R {
    let c = shared();
    let root = c.root.lock().ok();
    f(&c.launch, root.as_ref().and_then(|r| r.as_deref()))
}

/// The lowercase name of a level, as the troubleshooting reference and
/// `KEEPWRAP_LOG` spell it.
pub fn level_name(level: Level) -> &'static str {
    match level {
        Level::ERROR => "error",
        Level::WARN => "warn",
        Level::INFO => "info",
        Level::DEBUG => "debug",
        Level::TRACE => "trace",
    }
}

/// The `tracing` call of `target` at `level`: a call site has both fixed.
/// The event is its one field, typed.
fn dispatch(target: &str, level: Level, event: &Event) {
    let event = event as &(dyn std::error::Error + 'static);
    macro_rules! at {
        ($t:literal) => {
            match level {
                Level::ERROR => tracing::event!(target: $t, Level::ERROR, event),
                Level::WARN => tracing::event!(target: $t, Level::WARN, event),
                Level::INFO => tracing::event!(target: $t, Level::INFO, event),
                Level::DEBUG => tracing::event!(target: $t, Level::DEBUG, event),
                Level::TRACE => tracing::event!(target: $t, Level::TRACE, event),
            }
        };
    }
    match target {
        "keepwrap::cache" => at!("keepwrap::cache"),
        "keepwrap::cli" => at!("keepwrap::cli"),
        "keepwrap::done" => at!("keepwrap::done"),
        "keepwrap::fleet" => at!("keepwrap::fleet"),
        "keepwrap::keeper" => at!("keepwrap::keeper"),
        "keepwrap::metrics" => at!("keepwrap::metrics"),
        "keepwrap::root" => at!("keepwrap::root"),
        "keepwrap::share" => at!("keepwrap::share"),
        "keepwrap::store" => at!("keepwrap::store"),
        "keepwrap::supervisor" => at!("keepwrap::supervisor"),
        "keepwrap::unify" => at!("keepwrap::unify"),
        "keepwrap::vllm" => at!("keepwrap::vllm"),
        _ => at!("keepwrap"),
    }
}

/// Another launch on the cache root, as its events name it: shown in full
/// by `Display` (`launch 0123abcd... (pid 7 on host h, tuning since ...)`).
pub trait OtherLaunch: std::fmt::Display {
    fn fingerprint(&self) -> &str;
    fn pid(&self) -> u32;
}

/// A path for a log line: bytes that are not UTF-8 as `\xNN` (control
/// characters are escaped by the line formatter).
pub struct Shown<'a>(pub &'a std::path::Path);

impl std::fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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

/// A duration in seconds, as a number for the JSON form.
fn secs(d: std::time::Duration) -> f64 {
    d.as_secs_f64()
}

/// A reason that names the cache root itself as a directory another user
/// can write: said once by `root_untrusted`, so each file's line about it
/// is at debug level.
fn in_untrusted_root(reason: &str) -> bool {
    reason.starts_with("in a directory another user can write (.: ")
}

/// `cache file` or `cache files`, for a count of `n`.
/// What `--start-cold` did with the launch's own set (`files` of it).
fn start_cold_line(files: usize, put_aside: bool) -> String {
    match (files, put_aside) {
        (0, true) => "this launch has no signed set; the engine tunes from scratch".to_string(),
        (n, true) => format!(
            "this launch's signed set ({}) is put aside in the store, neither restored nor reused; it is deleted once this boot signs its own, and the next boot restores it if this one never does",
            counted(n, "cache file", "cache files")
        ),
        (_, false) => "no store to put this launch's signed set aside in: what the tree held of it is removed (the prune line counts it); the engine tunes from scratch".to_string(),
    }
}

fn cache_files(n: usize) -> &'static str {
    if n == 1 {
        "cache file"
    } else {
        "cache files"
    }
}

/// `n` and its noun, in the singular for one: `counted(1, "entry",
/// "entries")` is `1 entry`.
pub fn counted(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// Why the shared cache file is removed for this launch (`why`: what makes
/// it a MoE launch of more than one rank): prune's reason for such a file
/// signed for it, and the text of [`Event::RemovedSharedFile`].
pub fn shared_file_hangs(why: impl std::fmt::Display) -> String {
    format!("vLLM 0.27.1-0.31.x keeps one cache file for all ranks with rank 0's MoE tactics only, and a kept one hangs every warm boot of a MoE model under more than one rank until the 30-minute collective timeout (vLLM issues 57423, 54618; fixed in vLLM 0.32.0 by per-rank files): the engine re-tunes ({why})")
}

/// How a launch differs from another, as a line shows it: `arg --tp 4 ->
/// 8, env X added`.
pub fn differences(d: &[String]) -> String {
    if d.is_empty() {
        "nothing visible (only in redacted or ignored values)".to_string()
    } else {
        d.join(", ")
    }
}

/// Items as a line shows them: `1, 2, 3`.
fn listed<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    items
        .into_iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
