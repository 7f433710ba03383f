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
//! resolver does. A scalar whose Python value this module cannot reproduce
//! exactly (`0x1F`, `1_000`, `2024-01-01`, `.inf`, ...) becomes a marker
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
    let read = super::open_regular(path).and_then(|mut f| {
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
    let hash = hex::encode(hasher.finalize());
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

/// PyYAML's implicit resolver (YAML 1.1) for a plain scalar.
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
    let Some(first) = t.chars().next() else {
        return Py::None;
    };
    if !"-+0123456789.".contains(first) {
        return Py::Str(t.to_string());
    }
    let body = t.strip_prefix(['-', '+']).unwrap_or(t);
    let neg = t.starts_with('-');
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if digits(body) && (body == "0" || !body.starts_with('0')) {
        let v = if neg && body != "0" {
            format!("-{body}")
        } else {
            body.to_string()
        };
        return Py::Int(v);
    }
    // [-+]?[0-9]+\.[0-9]*([eE][-+][0-9]+)?
    if let Some((int, rest)) = body.split_once('.') {
        let (frac, exp) = match rest.find(['e', 'E']) {
            Some(p) => (&rest[..p], Some(&rest[p + 1..])),
            None => (rest, None),
        };
        let exp_ok = exp.is_none_or(|e| {
            e.strip_prefix(['-', '+'])
                .is_some_and(|d| d.len() < e.len() && digits(d))
        });
        if digits(int) && (frac.is_empty() || digits(frac)) && exp_ok {
            if let Ok(v) = t.parse::<f64>() {
                if v.is_finite() {
                    return Py::Float(v);
                }
            }
        }
    }
    Py::Opaque(format!("\0plain:{t}"))
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
        for t in [
            "0x10",
            "1_000",
            "2024-01-01",
            ".inf",
            "010",
            "1:30",
            "+.5",
            "1e5",
        ] {
            let a = args(&format!("k: {t}")).unwrap();
            assert!(a[1].starts_with('\0'), "{t}: {a:?}");
            // and never the quoted string
            assert_ne!(a, args(&format!("k: '{t}'")).unwrap(), "{t}");
        }
        assert_eq!(args("k: 1.50").unwrap()[1], "1.5");
        assert_eq!(args("k: -0").unwrap()[1], "0");
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
