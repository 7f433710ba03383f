//! JSON byte-identical to Python's `json.dumps(..., sort_keys=True)`, built
//! on serde_json with a custom `Formatter`.
//!
//! # Strings that are bytes
//!
//! argv and the environment on Linux are bytes. Python decodes them as UTF-8
//! with `surrogateescape`: every byte its strict UTF-8 decoder cannot decode
//! becomes the lone surrogate U+DC00+byte. A Rust `String` cannot hold a lone
//! surrogate, so [`py_str`] stores each such byte as a *sentinel pair*: the
//! noncharacter U+10FFFF followed by the char U+0080..=U+00FF of the same
//! value; a real U+10FFFF is stored as U+10FFFF twice. The formatter turns a
//! sentinel pair back into `\udcNN` while it escapes.
//!
//! This works because serde_json's string writer only splits a string into
//! fragments at the bytes it escapes itself (`"`, `\` and 0x00..=0x1F, all
//! ASCII), and a sentinel pair is made of non-ASCII bytes only: a pair always
//! reaches [`Formatter::write_string_fragment`] whole.
//!
//! [`Formatter::write_string_fragment`]: serde_json::ser::Formatter::write_string_fragment
//!
//! Keys sort by Python code point order over the decoded string
//! ([`py_cmp`]): a lone surrogate sorts by its value (U+DC80..U+DCFF, between
//! U+D7FF and U+E000), not by the bytes of its sentinel.
//!
//! # Numbers
//!
//! serde_json is built with `arbitrary_precision`, so a number parsed from a
//! file is written back as its original text. A Rust `f64`/`f32` is written
//! the way Python's `float.__repr__` writes it (`1e+16`, `1e-05`, `0.0001`).
//! Non-finite floats cannot be told apart from `null` by a `Formatter`
//! (serde_json writes them as `null`); Python would write `NaN`/`Infinity`.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::io;

use serde::Serialize;
use serde_json::ser::Serializer;
use serde_json::{Map, Value};

mod float;
mod formatter;

pub use float::py_float_repr;
use formatter::{Mode, PyFormatter};

/// The noncharacter that opens a sentinel pair (see the module docs).
pub const SENTINEL: char = '\u{10FFFF}';

/// Separators and indentation, as Python's `json.dumps` arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `separators=(", ", ": ")`, no indent (Python's default)
    Default,
    /// `separators=(",", ":")`
    Compact,
    /// `indent=2` (separators `","` + newline and `": "`)
    Indent2,
}

/// How to write: a layout, and whether object keys are sorted
/// (`sort_keys=True`) or kept in their order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    pub layout: Layout,
    pub sort_keys: bool,
}

impl Style {
    /// `json.dumps(obj, sort_keys=True)`: the launch fingerprint's form.
    pub const CANONICAL: Style = Style {
        layout: Layout::Default,
        sort_keys: true,
    };
    /// `json.dumps(obj, sort_keys=True, separators=(",", ":"))`: FlashInfer's
    /// `_generation` input.
    pub const COMPACT_SORTED: Style = Style {
        layout: Layout::Compact,
        sort_keys: true,
    };
    /// `json.dump(obj, indent=2)`: a FlashInfer cache file (insertion order).
    pub const INDENT2: Style = Style {
        layout: Layout::Indent2,
        sort_keys: false,
    };
}

/// Python's `bytes.decode("utf-8", "surrogateescape")`, with each lone
/// surrogate stored as a sentinel pair (see the module docs).
pub fn py_str(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        push_real(&mut out, chunk.valid());
        // Rust's and Python's UTF-8 decoders agree on what is invalid
        // (overlongs, encoded surrogates, above U+10FFFF, truncated
        // sequences); surrogateescape maps every byte of an invalid run on its
        // own, and such a byte is never ASCII.
        for &b in chunk.invalid() {
            out.push(SENTINEL);
            out.push(char::from(b));
        }
    }
    out
}

/// A real string in the sentinel form: only a U+10FFFF needs doubling.
pub fn py_str_from_str(s: &str) -> Cow<'_, str> {
    if s.contains(SENTINEL) {
        let mut out = String::with_capacity(s.len() + 4);
        push_real(&mut out, s);
        Cow::Owned(out)
    } else {
        Cow::Borrowed(s)
    }
}

fn push_real(out: &mut String, s: &str) {
    for c in s.chars() {
        out.push(c);
        if c == SENTINEL {
            out.push(SENTINEL);
        }
    }
}

/// The code points of the Python string a sentinel-form string stands for.
/// A sentinel not followed by its partner counts as a real U+10FFFF.
pub fn py_code_points(s: &str) -> impl Iterator<Item = u32> + '_ {
    let mut chars = s.chars().peekable();
    std::iter::from_fn(move || {
        let c = chars.next()?;
        if c != SENTINEL {
            return Some(c as u32);
        }
        match chars.peek().copied() {
            Some(SENTINEL) => {
                chars.next();
                Some(0x10FFFF)
            }
            Some(n @ '\u{80}'..='\u{FF}') => {
                chars.next();
                Some(0xDC00 + n as u32)
            }
            _ => Some(0x10FFFF),
        }
    })
}

/// Python's `str` ordering (by code point) of two sentinel-form strings.
pub fn py_cmp(a: &str, b: &str) -> Ordering {
    py_code_points(a).cmp(py_code_points(b))
}

/// Python's `json.dumps(value, ...)` in `style`, `ensure_ascii` on. Fails only
/// where serde_json would (e.g. a map whose keys are not strings).
pub fn to_python_json<T: Serialize + ?Sized>(
    value: &T,
    style: Style,
) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::new();
    write_python_json(&mut out, value, style)?;
    Ok(out)
}

/// [`to_python_json`] of a `Value`, which cannot fail.
pub fn value_to_python_json(value: &Value, style: Style) -> Vec<u8> {
    let mut out = Vec::new();
    if style.sort_keys {
        write_with(&mut out, &sorted(value), style.layout, Mode::Python)
    } else {
        write_with(&mut out, value, style.layout, Mode::Python)
    }
    .expect("serializing a Value into a Vec cannot fail");
    out
}

/// [`to_python_json`] into a writer.
pub fn write_python_json<W: io::Write, T: Serialize + ?Sized>(
    writer: W,
    value: &T,
    style: Style,
) -> serde_json::Result<()> {
    if !style.sort_keys {
        return write_with(writer, value, style.layout, Mode::Python);
    }
    // Sorting needs the tree. Go through JSON text rather than
    // `serde_json::to_value`, so that floats keep Python's repr: write with
    // strings left raw (sentinels intact), parse back (numbers keep their
    // text), sort, write.
    let mut raw = Vec::new();
    write_with(&mut raw, value, Layout::Compact, Mode::Raw)?;
    let tree: Value = serde_json::from_slice(&raw)?;
    write_with(writer, &sorted(&tree), style.layout, Mode::Python)
}

fn write_with<W: io::Write, T: Serialize + ?Sized>(
    writer: W,
    value: &T,
    layout: Layout,
    mode: Mode,
) -> serde_json::Result<()> {
    let formatter = PyFormatter::new(layout, mode);
    let mut ser = Serializer::with_formatter(writer, formatter);
    value.serialize(&mut ser)
}

/// A copy of `value` with every object's keys in Python order.
fn sorted(value: &Value) -> Value {
    match value {
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| py_cmp(a.0, b.0));
            let mut out = Map::with_capacity(entries.len());
            for (k, v) in entries {
                out.insert(k.clone(), sorted(v));
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}
