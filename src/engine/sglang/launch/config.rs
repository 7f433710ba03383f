//! `--config FILE`: SGLang's server arguments from a YAML (or JSON) file,
//! turned into the argument tokens SGLang's `ConfigArgumentMerger` puts
//! before the command line.
//!
//! SGLang reads the file with PyYAML's `safe_load` (YAML 1.1 types) and
//! turns each `KEY: VALUE` of the top-level mapping into `--KEY` tokens:
//! `true` of a store_true option is the bare flag and `false` nothing; any
//! other boolean `true`/`false`; a list its items; a mapping its
//! `json.dumps`; anything else `str(VALUE)`. This module does the same over
//! an event parser (`saphyr-parser`), typing plain scalars the way PyYAML's
//! resolver does (`host: 0.0.0.0` is the string, `port: 31_555` the int
//! 31555, `0x1F` 31). A scalar whose Python value this module cannot
//! reproduce exactly (`2024-01-01`, `.inf`, ...) becomes a marker
//! token holding its text, which no command-line token can equal (it
//! contains a NUL byte): files that differ that way never share a
//! fingerprint, at worst files that mean the same do not.

use std::path::Path;

use saphyr_parser::{Event, Parser, ScalarStyle};
use serde_json::{Map, Number, Value};

use crate::launch::canonical::{self, Layout, Style};

/// Files larger than this are not read (a config is a few KiB).
pub const MAX_BYTES: u64 = 4 << 20;
/// Deeper nesting is refused (no recursion without a bound).
const MAX_DEPTH: usize = 64;
/// More values (scalars, lists, mappings) are refused: a few KiB of YAML
/// per value turned into tokens, copied a few times, would cost PID 1
/// hundreds of MiB for a file within [`MAX_BYTES`].
const MAX_NODES: usize = 100_000;

/// Why a config file is no YAML mapping this module reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unparsable {
    #[error("larger than {MAX_BYTES} bytes")]
    TooLarge,
    #[error("not UTF-8")]
    NotUtf8,
    #[error("a YAML 1.1 line break (NEL, LS or PS)")]
    Yaml11LineBreak,
    /// The parser's error, as it words it.
    #[error("not YAML: {0}")]
    NotYaml(String),
    #[error("more than {MAX_NODES} YAML values")]
    TooManyValues,
    #[error("more than one YAML document")]
    SeveralDocuments,
    #[error("YAML aliases are not read")]
    Alias,
    #[error("YAML anchors and tags are not read")]
    AnchorOrTag,
    #[error("nested deeper than {MAX_DEPTH}")]
    TooDeep,
    #[error("unbalanced YAML")]
    Unbalanced,
    #[error("the file is not a mapping of option names to values")]
    NotAMapping,
    #[error("a key is not a string")]
    KeyNotAString,
}

/// What reading the config file gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The tokens SGLang inserts before the command line.
    Args(Vec<String>),
    /// The file could not be read (the reason).
    Unreadable(String),
    /// The file is no YAML mapping this module reads (the reason): anchors,
    /// tags, several documents, not a mapping, not YAML, too large. The
    /// fingerprint then covers the file's bytes.
    Unparsable(Unparsable),
}

/// Read `path` and convert it. Returns the outcome and the sha256 of the
/// file's bytes (None when they could not be read).
pub fn read(path: &Path) -> (Outcome, Option<String>) {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let mut bytes = Vec::new();
    let mut hasher = Sha256::new();
    let read = crate::launch::open_regular(path).and_then(|mut f| {
        (&mut f).take(MAX_BYTES + 1).read_to_end(&mut bytes)?;
        hasher.update(&bytes);
        if bytes.len() as u64 > MAX_BYTES {
            // too large to parse, yet the fingerprint covers all of it
            std::io::copy(&mut f, &mut hasher)?;
        }
        Ok(())
    });
    if let Err(e) = read {
        return (Outcome::Unreadable(e.to_string()), None);
    }
    let hash = crate::digest::hex(hasher.finalize());
    if bytes.len() as u64 > MAX_BYTES {
        return (Outcome::Unparsable(Unparsable::TooLarge), Some(hash));
    }
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return (Outcome::Unparsable(Unparsable::NotUtf8), Some(hash));
    };
    // PyYAML (YAML 1.1) breaks lines at NEL, LS and PS, which YAML 1.2
    // parsers read as characters: "x<NEL>y" is "x y" to SGLang, yet
    // "x\u{85}y" to this module, the very string `"x\Ny"` means
    if text.contains(['\u{85}', '\u{2028}', '\u{2029}']) {
        return (Outcome::Unparsable(Unparsable::Yaml11LineBreak), Some(hash));
    }
    let outcome = match parse(text) {
        Ok(node) => to_args(&node).map_or_else(Outcome::Unparsable, Outcome::Args),
        Err(e) => Outcome::Unparsable(e),
    };
    (outcome, Some(hash))
}

/// A YAML node as the parser gave it.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    Scalar(String, bool),
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

/// Parse one YAML document (an empty stream is an empty mapping).
fn parse(text: &str) -> Result<Node, Unparsable> {
    let mut stack: Vec<Node> = Vec::new();
    // a mapping's pending key, per open mapping
    let mut keys: Vec<Option<Node>> = Vec::new();
    let mut root: Option<Node> = None;
    let mut docs = 0;
    let mut nodes = 0;
    for ev in Parser::new_from_str(text) {
        let (ev, _) = ev.map_err(|e| Unparsable::NotYaml(e.to_string()))?;
        if matches!(
            ev,
            Event::Scalar(..) | Event::SequenceStart(..) | Event::MappingStart(..)
        ) {
            nodes += 1;
            if nodes > MAX_NODES {
                return Err(Unparsable::TooManyValues);
            }
        }
        let node = match ev {
            Event::DocumentStart(_) => {
                docs += 1;
                if docs > 1 {
                    return Err(Unparsable::SeveralDocuments);
                }
                continue;
            }
            Event::Alias(_) => return Err(Unparsable::Alias),
            Event::Scalar(v, style, anchor, tag) => {
                if anchor != 0 || tag.is_some() {
                    return Err(Unparsable::AnchorOrTag);
                }
                Node::Scalar(v.into_owned(), style == ScalarStyle::Plain)
            }
            Event::SequenceStart(anchor, ref tag) | Event::MappingStart(anchor, ref tag) => {
                if anchor != 0 || tag.is_some() {
                    return Err(Unparsable::AnchorOrTag);
                }
                if stack.len() >= MAX_DEPTH {
                    return Err(Unparsable::TooDeep);
                }
                if matches!(ev, Event::MappingStart(..)) {
                    stack.push(Node::Map(Vec::new()));
                } else {
                    stack.push(Node::Seq(Vec::new()));
                }
                keys.push(None);
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                keys.pop();
                match stack.pop() {
                    Some(n) => n,
                    None => return Err(Unparsable::Unbalanced),
                }
            }
            _ => continue,
        };
        match stack.last_mut() {
            None => root = Some(node),
            Some(Node::Seq(items)) => items.push(node),
            Some(Node::Map(pairs)) => {
                let Some(slot) = keys.last_mut() else {
                    return Err(Unparsable::Unbalanced);
                };
                match slot.take() {
                    None => *slot = Some(node),
                    Some(k) => pairs.push((k, node)),
                }
            }
            Some(Node::Scalar(..)) => return Err(Unparsable::Unbalanced),
        }
    }
    Ok(root.unwrap_or(Node::Map(Vec::new())))
}

/// A Python value from `yaml.safe_load`.
#[derive(Debug, Clone, PartialEq)]
enum Py {
    None,
    Bool(bool),
    /// decimal digits, as `str(int)` writes them
    Int(String),
    Float(f64),
    Str(String),
    /// a value this module cannot reproduce: a marker token
    Opaque(String),
    List(Vec<Py>),
    Dict(Vec<(Py, Py)>),
}

/// PyYAML's implicit resolver (YAML 1.1) for a plain scalar, and its
/// constructors: the regular expressions of `yaml/resolver.py` (float,
/// then int, then timestamp for a scalar starting with a digit, a sign or
/// a dot), matched by hand. A scalar none of them matches is a string
/// (`0.0.0.0`, `1e5`, `08`). Timestamps, `.inf`, `.nan`, values past 128
/// bits and scalars PyYAML itself fails on (`0b_`) are [`Py::Opaque`].
fn resolve_plain(t: &str) -> Py {
    match t {
        "" | "~" | "null" | "Null" | "NULL" => return Py::None,
        "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Py::Bool(true)
        }
        "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Py::Bool(false)
        }
        "<<" | "=" => return Py::Opaque(format!("\0plain:{t}")),
        _ => {}
    }
    let opaque = || Py::Opaque(format!("\0plain:{t}"));
    let Some(first) = t.bytes().next() else {
        return Py::None;
    };
    if !b"-+0123456789.".contains(&first) {
        return Py::Str(t.to_string());
    }
    if yaml::is_float(t) {
        return yaml::float(t).map_or_else(opaque, Py::Float);
    }
    if yaml::is_int(t) {
        return yaml::int(t).map_or_else(opaque, Py::Int);
    }
    if yaml::is_timestamp(t) {
        return opaque();
    }
    Py::Str(t.to_string())
}

/// PyYAML's implicit types for plain scalars (YAML 1.1), without regular
/// expressions: each `is_*` is one of `yaml/resolver.py`'s patterns,
/// anchored at both ends; `int` and `float` are `construct_yaml_int` and
/// `construct_yaml_float`.
mod yaml {
    fn sign(t: &str) -> (bool, &str) {
        match t.as_bytes().first() {
            Some(b'-') => (true, &t[1..]),
            Some(b'+') => (false, &t[1..]),
            _ => (false, t),
        }
    }

    /// `[chars]+` (`at_least` 1) or `[chars]*` (0).
    fn all(s: &str, at_least: usize, ok: impl Fn(u8) -> bool) -> bool {
        s.len() >= at_least && s.bytes().all(ok)
    }

    fn digit_(b: u8) -> bool {
        b.is_ascii_digit() || b == b'_'
    }

    /// `[0-9][0-9_]*`
    fn digits_(s: &str) -> bool {
        s.as_bytes().first().is_some_and(u8::is_ascii_digit) && all(s, 1, digit_)
    }

    /// `[eE][-+][0-9]+`
    fn exponent(s: &str) -> bool {
        let b = s.as_bytes();
        b.len() >= 3
            && matches!(b[0], b'e' | b'E')
            && matches!(b[1], b'-' | b'+')
            && all(&s[2..], 1, |c| c.is_ascii_digit())
    }

    /// `[0-9_]*([eE][-+][0-9]+)?`
    fn fraction(s: &str) -> bool {
        match s.find(['e', 'E']) {
            Some(i) => all(&s[..i], 0, digit_) && exponent(&s[i..]),
            None => all(s, 0, digit_),
        }
    }

    /// `(:[0-5]?[0-9])+` (with the leading `:`)
    fn sexagesimal(s: &str) -> bool {
        s.starts_with(':')
            && s[1..].split(':').all(|p| match p.as_bytes() {
                [d] => d.is_ascii_digit(),
                [a, d] => (b'0'..=b'5').contains(a) && d.is_ascii_digit(),
                _ => false,
            })
    }

    pub(super) fn is_float(t: &str) -> bool {
        let (_, body) = sign(t);
        let signed = body.len() < t.len();
        // `[-+]?\.(inf|Inf|INF)` and `\.(nan|NaN|NAN)`
        if matches!(body, ".inf" | ".Inf" | ".INF")
            || (!signed && matches!(body, ".nan" | ".NaN" | ".NAN"))
        {
            return true;
        }
        // `\.[0-9][0-9_]*([eE][-+][0-9]+)?`
        if let Some(rest) = body.strip_prefix('.') {
            return !signed
                && rest.as_bytes().first().is_some_and(u8::is_ascii_digit)
                && fraction(rest);
        }
        let Some((int, frac)) = body.split_once('.') else {
            return false;
        };
        // `[-+]?[0-9][0-9_]*\.[0-9_]*([eE][-+][0-9]+)?`
        if digits_(int) && fraction(frac) {
            return true;
        }
        // `[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+\.[0-9_]*`
        match int.find(':') {
            Some(i) => digits_(&int[..i]) && sexagesimal(&int[i..]) && all(frac, 0, digit_),
            None => false,
        }
    }

    pub(super) fn is_int(t: &str) -> bool {
        let (_, body) = sign(t);
        if let Some(bits) = body.strip_prefix("0b") {
            return all(bits, 1, |b| matches!(b, b'0' | b'1' | b'_'));
        }
        if let Some(hex) = body.strip_prefix("0x") {
            return all(hex, 1, |b| b.is_ascii_hexdigit() || b == b'_');
        }
        if let Some(oct) = body.strip_prefix('0') {
            return oct.is_empty() || all(oct, 1, |b| matches!(b, b'0'..=b'7' | b'_'));
        }
        let (head, tail) = match body.find(':') {
            Some(i) => (&body[..i], &body[i..]),
            None => (body, ""),
        };
        head.as_bytes()
            .first()
            .is_some_and(|b| (b'1'..=b'9').contains(b))
            && all(head, 1, digit_)
            && (tail.is_empty() || sexagesimal(tail))
    }

    /// `[0-9]{4}-[0-9]{1,2}-...`: any scalar PyYAML may read as a date or
    /// a time (a superset of its pattern, all opaque anyway).
    pub(super) fn is_timestamp(t: &str) -> bool {
        let b = t.as_bytes();
        b.len() >= 5 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-'
    }

    /// `construct_yaml_int`: `str()` of the value, None when PyYAML fails
    /// on it or it needs more than 128 bits.
    pub(super) fn int(t: &str) -> Option<String> {
        let v: String = t.chars().filter(|&c| c != '_').collect();
        let (neg, body) = sign(&v);
        let n: u128 = if body == "0" {
            0
        } else if let Some(b) = body.strip_prefix("0b") {
            u128::from_str_radix(b, 2).ok()?
        } else if let Some(h) = body.strip_prefix("0x") {
            u128::from_str_radix(h, 16).ok()?
        } else if body.starts_with('0') {
            u128::from_str_radix(body, 8).ok()?
        } else if body.contains(':') {
            let mut value: u128 = 0;
            for part in body.split(':') {
                value = value.checked_mul(60)?.checked_add(part.parse().ok()?)?;
            }
            value
        } else {
            body.parse().ok()?
        };
        Some(if neg && n != 0 {
            format!("-{n}")
        } else {
            n.to_string()
        })
    }

    /// `construct_yaml_float`, None for `.inf`, `.nan` and an overflow
    /// (whose `str()` is not the JSON form this module writes).
    pub(super) fn float(t: &str) -> Option<f64> {
        let v: String = t.chars().filter(|&c| c != '_').collect();
        let v = v.to_ascii_lowercase();
        let (neg, body) = sign(&v);
        let value = if body.contains(':') {
            // summed from the last part, in the order PyYAML adds them
            let mut value = 0.0f64;
            let mut base = 1.0f64;
            for part in body.rsplit(':') {
                value += part.parse::<f64>().ok()? * base;
                base *= 60.0;
            }
            value
        } else {
            body.parse::<f64>().ok()?
        };
        let value = if neg { -value } else { value };
        value.is_finite().then_some(value)
    }
}

fn to_py(node: &Node) -> Py {
    match node {
        Node::Scalar(t, true) => resolve_plain(t),
        Node::Scalar(t, false) => Py::Str(t.clone()),
        Node::Seq(items) => Py::List(items.iter().map(to_py).collect()),
        Node::Map(pairs) => Py::Dict(pairs.iter().map(|(k, v)| (to_py(k), to_py(v))).collect()),
    }
}

/// A marker for a value with no exact string form: its canonical JSON.
fn marker(kind: &str, py: &Py) -> String {
    let json = canonical::value_to_python_json(&tagged(py), Style::CANONICAL);
    format!("\0{kind}:{}", String::from_utf8_lossy(&json))
}

fn tagged(py: &Py) -> Value {
    match py {
        Py::None => Value::Null,
        Py::Bool(b) => Value::Bool(*b),
        Py::Int(s) => Value::String(format!("int:{s}")),
        Py::Float(f) => Value::String(format!("float:{}", canonical::py_float_repr(*f))),
        Py::Str(s) => Value::String(format!("str:{}", canonical::py_str_from_str(s))),
        Py::Opaque(s) => Value::String(format!("opaque:{}", canonical::py_str_from_str(s))),
        Py::List(v) => Value::Array(v.iter().map(tagged).collect()),
        Py::Dict(v) => Value::Array(
            v.iter()
                .map(|(k, v)| Value::Array(vec![tagged(k), tagged(v)]))
                .collect(),
        ),
    }
}

/// Python's `str(value)` as an argument token.
fn str_of(py: &Py) -> String {
    match py {
        Py::None => "None".into(),
        Py::Bool(true) => "True".into(),
        Py::Bool(false) => "False".into(),
        Py::Int(s) => s.clone(),
        Py::Float(f) => canonical::py_float_repr(*f),
        Py::Str(s) if s.contains('\0') => format!("\0quoted:{s}"),
        Py::Str(s) => s.clone(),
        Py::Opaque(m) => m.clone(),
        Py::List(_) | Py::Dict(_) => marker("repr", py),
    }
}

/// `json.dumps(value)` (Python's default separators, keys in file order),
/// or None when it cannot be reproduced exactly.
fn json_of(py: &Py) -> Option<Value> {
    Some(match py {
        Py::None => Value::Null,
        Py::Bool(b) => Value::Bool(*b),
        Py::Int(s) => Value::Number(s.parse::<i64>().ok()?.into()),
        Py::Float(f) => serde_json::from_str::<Number>(&canonical::py_float_repr(*f))
            .ok()
            .map(Value::Number)?,
        Py::Str(s) => Value::String(canonical::py_str_from_str(s).into_owned()),
        Py::Opaque(_) => return None,
        Py::List(v) => Value::Array(v.iter().map(json_of).collect::<Option<_>>()?),
        Py::Dict(pairs) => {
            let mut m = Map::new();
            for (k, v) in pairs {
                let Py::Str(k) = k else { return None };
                m.insert(canonical::py_str_from_str(k).into_owned(), json_of(v)?);
            }
            Value::Object(m)
        }
    })
}

/// `ConfigArgumentMerger._convert_config_to_args`.
fn to_args(root: &Node) -> Result<Vec<String>, Unparsable> {
    let Py::Dict(pairs) = to_py(root) else {
        return Err(Unparsable::NotAMapping);
    };
    // a Python dict: a repeated key keeps its first place and its last value
    let mut dict: Vec<(&str, &Py)> = Vec::with_capacity(pairs.len());
    let mut place = std::collections::HashMap::with_capacity(pairs.len());
    for (k, v) in &pairs {
        let Py::Str(key) = k else {
            return Err(Unparsable::KeyNotAString);
        };
        match place.get(key.as_str()) {
            Some(&i) => dict[i] = (key.as_str(), v),
            None => {
                place.insert(key.as_str(), dict.len());
                dict.push((key, v));
            }
        }
    }
    let mut out = Vec::new();
    for (key, v) in dict {
        let flag = format!("--{key}");
        match v {
            Py::Bool(b) => {
                if super::args::is_store_true_key(key) {
                    if *b {
                        out.push(flag);
                    }
                } else {
                    out.push(flag);
                    out.push(if *b { "true" } else { "false" }.into());
                }
            }
            Py::List(items) => {
                if !items.is_empty() {
                    out.push(flag);
                    out.extend(items.iter().map(str_of));
                }
            }
            Py::Dict(_) => {
                out.push(flag);
                let style = Style {
                    layout: Layout::Default,
                    sort_keys: false,
                };
                out.push(match json_of(v) {
                    Some(j) => String::from_utf8_lossy(&canonical::value_to_python_json(&j, style))
                        .into_owned(),
                    None => marker("json", v),
                });
            }
            _ => {
                out.push(flag);
                out.push(str_of(v));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(yaml: &str) -> Result<Vec<String>, Unparsable> {
        to_args(&parse(yaml)?)
    }

    #[test]
    fn converts_as_sglang_does() {
        let a = args(
            "model-path: /models/m\ntp-size: 4\nmem-fraction-static: 0.85\n\
             trust-remote-code: true\nenable-torch-compile: false\n\
             cuda-graph-bs-decode: [1, 2, 4]\nnot-a-store-true: yes\n\
             json-model-override-args: {\"a\": 1, b: [x, 2.5]}\nrevision: ~\n",
        )
        .unwrap();
        assert_eq!(
            a,
            [
                "--model-path",
                "/models/m",
                "--tp-size",
                "4",
                "--mem-fraction-static",
                "0.85",
                "--trust-remote-code",
                "--cuda-graph-bs-decode",
                "1",
                "2",
                "4",
                "--not-a-store-true",
                "true",
                "--json-model-override-args",
                "{\"a\": 1, \"b\": [\"x\", 2.5]}",
                "--revision",
                "None",
            ]
        );
        // reformatting does not matter; quoting a number does not either
        assert_eq!(
            args("{tp-size: '4', model-path: \"/models/m\"}").unwrap(),
            args("tp-size: 4\n# comment\nmodel-path:   /models/m\n").unwrap()
        );
        assert_eq!(args("").unwrap(), Vec::<String>::new());
    }

    #[test]
    fn values_it_cannot_reproduce_are_markers() {
        let huge = format!("1{}.", "0".repeat(400));
        for t in ["2024-01-01", ".inf", "-.Inf", ".nan", "0b_", "0x_", &huge] {
            let a = args(&format!("k: {t}")).unwrap();
            assert!(a[1].starts_with('\0'), "{t}: {a:?}");
            // and never the quoted string
            assert_ne!(a, args(&format!("k: '{t}'")).unwrap(), "{t}");
        }
    }

    #[test]
    fn plain_scalars_are_typed_as_pyyaml_types_them() {
        // (scalar, str() of PyYAML's value)
        for (t, py) in [
            ("0.0.0.0", "0.0.0.0"),
            ("10.0.0.7", "10.0.0.7"),
            ("31_555", "31555"),
            ("0x1F", "31"),
            ("-0b1_0", "-2"),
            ("010", "8"),
            ("08", "08"),
            ("1:30", "90"),
            ("1:60", "1:60"),
            ("1:30.5", "90.5"),
            ("1_000.5_5", "1000.55"),
            ("1.", "1.0"),
            ("1.e+5", "100000.0"),
            ("1e5", "1e5"),
            ("1.0e5", "1.0e5"),
            (".5", "0.5"),
            ("+.5", "+.5"),
            ("-0.0", "-0.0"),
            ("1.50", "1.5"),
            ("-0", "0"),
            ("0_", "0"),
            ("::1", "::1"),
            ("fe80::1", "fe80::1"),
        ] {
            assert_eq!(args(&format!("k: {t}")).unwrap()[1], py, "{t}");
        }
    }

    /// Scalars made of the characters PyYAML's number patterns read, typed
    /// by this module and by python3's PyYAML (`str()` of the value, or
    /// `None` when PyYAML fails or this module writes a marker).
    #[test]
    fn plain_scalars_agree_with_pyyaml() {
        // Asked quietly: without PyYAML, python3's traceback is no test
        // output.
        let python = std::process::Command::new("python3")
            .args(["-c", "import yaml"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        if !python.is_ok_and(|s| s.success()) {
            assert!(
                std::env::var_os("CI").is_none(),
                "this test needs python3 with PyYAML, and CI must run it"
            );
            eprintln!("not run: needs python3 with PyYAML");
            return;
        }
        const ALPHABET: &[u8] = b"0123456789_.:+-eExb";
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut scalars: Vec<String> = (0..4000)
            .map(|_| {
                let len = 1 + (next() % 7) as usize;
                (0..len)
                    .map(|_| ALPHABET[(next() % ALPHABET.len() as u64) as usize] as char)
                    .collect()
            })
            .collect();
        scalars.retain(|s| args(&format!("k: {s}")).is_ok_and(|a| a.len() == 2));
        let ours: Vec<Option<String>> = scalars
            .iter()
            .map(|s| {
                let a = args(&format!("k: {s}")).unwrap();
                (!a[1].starts_with('\0')).then(|| a[1].clone())
            })
            .collect();
        let script = "import json, sys, yaml\n\
            out = []\n\
            for s in json.load(sys.stdin):\n\
            \x20   try:\n\
            \x20       v = yaml.safe_load('k: ' + s)['k']\n\
            \x20       out.append(None if isinstance(v, (bool, list, dict)) or v is None else str(v))\n\
            \x20   except Exception:\n\
            \x20       out.append(None)\n\
            json.dump(out, sys.stdout)\n";
        let input = tempfile::tempfile().unwrap();
        serde_json::to_writer(&input, &scalars).unwrap();
        let mut input = input;
        std::io::Seek::rewind(&mut input).unwrap();
        let out = std::process::Command::new("python3")
            .args(["-c", script])
            .stdin(input)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let theirs: Vec<Option<String>> = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(theirs.len(), scalars.len());
        let mut compared = 0;
        for ((s, ours), theirs) in scalars.iter().zip(&ours).zip(&theirs) {
            // a marker is allowed (never equal to anything); a value must be PyYAML's
            if let Some(v) = ours {
                assert_eq!(Some(v), theirs.as_ref(), "{s:?}");
                compared += 1;
            }
        }
        assert!(
            compared > scalars.len() / 2,
            "{compared} of {}",
            scalars.len()
        );
    }

    #[test]
    fn refuses_what_sglang_cannot_use() {
        assert_eq!(args("- a\n- b"), Err(Unparsable::NotAMapping));
        assert_eq!(args("a: &x 1\nb: *x"), Err(Unparsable::AnchorOrTag));
        assert_eq!(args("a: 1\n---\nb: 2"), Err(Unparsable::SeveralDocuments));
        assert!(matches!(args("a: [1"), Err(Unparsable::NotYaml(_))));
        assert_eq!(args("1: x"), Err(Unparsable::KeyNotAString));
        // a repeated key: its first place, its last value
        assert_eq!(
            args("a: 1\nb: 2\na: [3, 4]\n'a': 5").unwrap(),
            ["--a", "5", "--b", "2"]
        );
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert_eq!(args(&format!("a: {deep}")), Err(Unparsable::TooDeep));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]
        #[test]
        fn no_input_panics(text in "[-a-z0-9:{}\\[\\],'\"!&*|>#%@ \n\t.~?=]{0,80}") {
            let _ = parse(&text).map(|n| to_args(&n));
        }
    }
}
