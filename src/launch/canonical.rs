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
use serde_json::ser::{CharEscape, Formatter, Serializer};
use serde_json::{Map, Value};

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
    let formatter = PyFormatter {
        layout,
        mode,
        depth: 0,
        has_value: false,
    };
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// ensure_ascii escaping, sentinels become `\udcNN`
    Python,
    /// strings as they are (only what JSON requires is escaped), for the
    /// round trip through `Value`
    Raw,
}

/// serde_json `Formatter` that writes what Python's `json` module writes.
struct PyFormatter {
    layout: Layout,
    mode: Mode,
    depth: usize,
    has_value: bool,
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn write_u_escape<W: ?Sized + io::Write>(w: &mut W, unit: u32) -> io::Result<()> {
    let u = unit as usize;
    w.write_all(&[
        b'\\',
        b'u',
        HEX[(u >> 12) & 0xF],
        HEX[(u >> 8) & 0xF],
        HEX[(u >> 4) & 0xF],
        HEX[u & 0xF],
    ])
}

impl PyFormatter {
    fn item_separator<W: ?Sized + io::Write>(&self, w: &mut W, first: bool) -> io::Result<()> {
        match self.layout {
            Layout::Default => {
                if !first {
                    w.write_all(b", ")?;
                }
                Ok(())
            }
            Layout::Compact => {
                if !first {
                    w.write_all(b",")?;
                }
                Ok(())
            }
            Layout::Indent2 => {
                w.write_all(if first { b"\n" } else { b",\n" })?;
                self.indent(w)
            }
        }
    }

    fn indent<W: ?Sized + io::Write>(&self, w: &mut W) -> io::Result<()> {
        for _ in 0..self.depth {
            w.write_all(b"  ")?;
        }
        Ok(())
    }

    fn open<W: ?Sized + io::Write>(&mut self, w: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        w.write_all(bracket)
    }

    fn close<W: ?Sized + io::Write>(&mut self, w: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.depth -= 1;
        if self.layout == Layout::Indent2 && self.has_value {
            w.write_all(b"\n")?;
            self.indent(w)?;
        }
        w.write_all(bracket)
    }
}

impl Formatter for PyFormatter {
    fn write_f64<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: f64) -> io::Result<()> {
        writer.write_all(py_float_repr(value).as_bytes())
    }

    fn write_f32<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: f32) -> io::Result<()> {
        // Python has only doubles: float(value) has the f64's repr.
        self.write_f64(writer, f64::from(value))
    }

    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        if self.mode == Mode::Raw {
            return writer.write_all(fragment.as_bytes());
        }
        let bytes = fragment.as_bytes();
        let mut start = 0;
        let mut chars = fragment.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if (' '..='~').contains(&c) {
                continue;
            }
            writer.write_all(&bytes[start..i])?;
            let cp = if c == SENTINEL {
                match chars.peek().copied() {
                    Some((_, SENTINEL)) => {
                        chars.next();
                        0x10FFFF
                    }
                    Some((_, n @ '\u{80}'..='\u{FF}')) => {
                        chars.next();
                        0xDC00 + n as u32
                    }
                    _ => 0x10FFFF,
                }
            } else {
                c as u32
            };
            match cp {
                // Never reached through serde_json (it escapes these itself
                // and splits the fragment there), kept for completeness.
                0x22 => writer.write_all(b"\\\"")?,
                0x5C => writer.write_all(b"\\\\")?,
                0x0A => writer.write_all(b"\\n")?,
                0x0D => writer.write_all(b"\\r")?,
                0x09 => writer.write_all(b"\\t")?,
                0x08 => writer.write_all(b"\\b")?,
                0x0C => writer.write_all(b"\\f")?,
                0x10000.. => {
                    let v = cp - 0x10000;
                    write_u_escape(writer, 0xD800 | (v >> 10))?;
                    write_u_escape(writer, 0xDC00 | (v & 0x3FF))?;
                }
                _ => write_u_escape(writer, cp)?,
            }
            start = chars.peek().map_or(bytes.len(), |&(j, _)| j);
        }
        writer.write_all(&bytes[start..])
    }

    fn write_char_escape<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        char_escape: CharEscape,
    ) -> io::Result<()> {
        // serde_json's escapes are Python's: \" \\ \b \f \n \r \t, and
        // lowercase \u00XX for the other controls.
        let s: &[u8] = match char_escape {
            CharEscape::Quote => b"\\\"",
            CharEscape::ReverseSolidus => b"\\\\",
            CharEscape::Solidus => b"/",
            CharEscape::Backspace => b"\\b",
            CharEscape::FormFeed => b"\\f",
            CharEscape::LineFeed => b"\\n",
            CharEscape::CarriageReturn => b"\\r",
            CharEscape::Tab => b"\\t",
            CharEscape::AsciiControl(byte) => return write_u_escape(writer, u32::from(byte)),
        };
        writer.write_all(s)
    }

    fn begin_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.open(writer, b"[")
    }

    fn end_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.close(writer, b"]")
    }

    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.item_separator(writer, first)
    }

    fn end_array_value<W: ?Sized + io::Write>(&mut self, _writer: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.open(writer, b"{")
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.close(writer, b"}")
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.item_separator(writer, first)
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        writer.write_all(if self.layout == Layout::Compact {
            b":"
        } else {
            b": "
        })
    }

    fn end_object_value<W: ?Sized + io::Write>(&mut self, _writer: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

/// Python's `repr(float)` of a finite double: the shortest round-trip digits,
/// positional when the decimal exponent is in -4..16, else `d.ddde+XX`.
pub fn py_float_repr(value: f64) -> String {
    if !value.is_finite() {
        // What Python's json writes (allow_nan=True); not reachable through
        // serde_json, which writes non-finite floats as null.
        return if value.is_nan() {
            "NaN".into()
        } else if value > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    let (neg, digits, exp) = shortest_digits(value);
    let mut out = String::with_capacity(digits.len() + 8);
    if neg {
        out.push('-');
    }
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', int_len - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        } else {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            out.push_str(&digits);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        let e = exp.unsigned_abs();
        if e < 10 {
            out.push('0');
        }
        out.push_str(&e.to_string());
    }
    out
}

/// The sign, the significant digits and the decimal exponent of `value`'s
/// shortest round-trip representation, as Python's `repr` picks it: among
/// the shortest strings that read back as `value`, the nearest, and of two
/// equally near (the double lies exactly halfway between them), the one
/// whose last digit is even. Rust's `{:e}` rounds that halfway case up
/// (-1719287431763625.25 is `...625.3` in Rust, `...625.2` in Python).
fn shortest_digits(value: f64) -> (bool, String, i32) {
    // `{:e}` is Rust's shortest round-trip representation: "-1.2345e-5".
    let (neg, digits, exp) = split_sci(&format!("{value:e}"));
    // The exact decimal expansion of a double has at most 767 significant
    // digits; 800 after the point leaves it whole.
    let (_, exact, exact_exp) = split_sci(&format!("{value:.800e}"));
    let n = digits.len();
    let halfway = exact_exp == exp
        && exact.len() > n
        && exact.as_bytes()[n] == b'5'
        && exact.bytes().skip(n + 1).all(|b| b == b'0');
    if !halfway {
        return (neg, digits, exp);
    }
    let down = &exact[..n];
    let even = down
        .bytes()
        .last()
        .is_some_and(|b| (b - b'0').is_multiple_of(2));
    let sign = if neg { "-" } else { "" };
    let reads_back = format!("{sign}0.{down}e{}", exp + 1)
        .parse::<f64>()
        .is_ok_and(|v| v == value);
    if even && reads_back && down != digits {
        // The shortest digits never end in 0, so `down` has n digits too.
        let trimmed = down.trim_end_matches('0');
        let kept = if trimmed.is_empty() { "0" } else { trimmed };
        return (neg, kept.to_string(), exp);
    }
    (neg, digits, exp)
}

/// `-d.ddde-X` as (negative, the digits without the point, the exponent).
fn split_sci(sci: &str) -> (bool, String, i32) {
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    (neg, mantissa.chars().filter(|c| *c != '.').collect(), exp)
}
