//! The serde_json `Formatter` that writes what Python's `json` module
//! writes: its separators and indentation, `ensure_ascii` escapes, and the
//! sentinel pairs of [`py_str`](super::py_str) turned back into `\udcNN`.

use std::io;

use serde_json::ser::{CharEscape, Formatter};

use super::{py_float_repr, Layout, SENTINEL};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// ensure_ascii escaping, sentinels become `\udcNN`
    Python,
    /// strings as they are (only what JSON requires is escaped), for the
    /// round trip through `Value`
    Raw,
}

/// serde_json `Formatter` that writes what Python's `json` module writes.
pub(super) struct PyFormatter {
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
    pub(super) fn new(layout: Layout, mode: Mode) -> PyFormatter {
        PyFormatter {
            layout,
            mode,
            depth: 0,
            has_value: false,
        }
    }

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
