//! keepwrap::launch::canonical against Python's own `json.dumps` (tests/py/pyjson_oracle.py):
//! property tests over arbitrary byte strings, nested lists and maps, ints
//! and floats, in every style, batched into one python3 run; plus
//! library-level checks of `Launch`.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::process::Command;

use keepwrap::engine::fingerprint::{is_secret_name, Launch, Options, ProfileName};
use keepwrap::launch::canonical::{
    self, py_cmp, py_float_repr, py_str, to_python_json, value_to_python_json, Layout, Style,
};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::{json, Value};

/// The styles of pyjson_oracle.py's STYLES, in its order.
const STYLES: [Style; 5] = [
    Style {
        layout: Layout::Default,
        sort_keys: false,
    },
    Style::CANONICAL,
    Style::COMPACT_SORTED,
    Style::INDENT2,
    Style {
        layout: Layout::Indent2,
        sort_keys: true,
    },
];

#[derive(Debug, Clone)]
enum Tree {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Vec<u8>),
    List(Vec<Tree>),
    Map(Vec<(Vec<u8>, Tree)>),
}

impl Serialize for Tree {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Tree::Null => s.serialize_unit(),
            Tree::Bool(b) => s.serialize_bool(*b),
            Tree::Int(i) => s.serialize_i64(*i),
            Tree::Float(f) => s.serialize_f64(*f),
            Tree::Str(b) => s.serialize_str(&py_str(b)),
            Tree::List(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for x in items {
                    seq.serialize_element(x)?;
                }
                seq.end()
            }
            Tree::Map(entries) => {
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(&py_str(k), v)?;
                }
                map.end()
            }
        }
    }
}

impl Tree {
    /// The oracle's input form.
    fn to_oracle(&self) -> Value {
        match self {
            Tree::Null => json!({"t": "null"}),
            Tree::Bool(b) => json!({"t": "bool", "v": b}),
            Tree::Int(i) => json!({"t": "int", "v": i.to_string()}),
            Tree::Float(f) => json!({"t": "float", "v": crate::common::hex(f.to_be_bytes())}),
            Tree::Str(b) => json!({"t": "str", "v": crate::common::hex(b)}),
            Tree::List(items) => {
                json!({"t": "list", "v": items.iter().map(Tree::to_oracle).collect::<Vec<_>>()})
            }
            Tree::Map(entries) => json!({
                "t": "map",
                "v": entries.iter().map(|(k, v)| json!([crate::common::hex(k), v.to_oracle()])).collect::<Vec<_>>(),
            }),
        }
    }

    /// A serde_json Value, floats as the text Python would have written
    /// (what a file written by Python parses to).
    fn to_value(&self) -> Value {
        match self {
            Tree::Null => Value::Null,
            Tree::Bool(b) => Value::Bool(*b),
            Tree::Int(i) => json!(i),
            Tree::Float(f) => serde_json::from_str(&py_float_repr(*f)).unwrap(),
            Tree::Str(b) => Value::String(py_str(b)),
            Tree::List(items) => Value::Array(items.iter().map(Tree::to_value).collect()),
            Tree::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (py_str(k), v.to_value()))
                    .collect(),
            ),
        }
    }
}

const PIECES: &[&[u8]] = &[
    b"a",
    b"Z",
    b" ",
    b"\"",
    b"\\",
    b"/",
    b"\n",
    b"\r",
    b"\t",
    b"\x08",
    b"\x0c",
    b"\x00",
    b"\x01",
    b"\x1f",
    b"\x7f",
    b"\xc2\x80",
    b"\xc3\xbf",
    b"\xc3\xa9",
    b"\xe2\x80\xa8",
    b"\xed\x9f\xbf",
    b"\xee\x80\x80",
    b"\xef\xbf\xbf",
    b"\xf0\x9f\xa6\x80",
    b"\xf4\x8f\xbf\xbf",
    b"\x80",
    b"\xff",
    b"\xc0\x80",
    b"\xe2\x82",
    b"\xf0\x9f\xa6",
    b"\xed\xa0\x80",
    b"\xed\xbf\xbf",
    b"\xf4\x90\x80\x80",
];

fn bytes_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => prop::collection::vec(prop::sample::select(PIECES), 0..6).prop_map(|ps| ps.concat()),
        1 => prop::collection::vec(any::<u8>(), 0..10),
    ]
}

fn float_strategy() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>().prop_filter("finite", |f| f.is_finite()),
        prop::sample::select(vec![
            0.0,
            -0.0,
            0.1,
            1.5,
            1e15,
            1e16,
            123456789012345680.0,
            1e-4,
            1e-5,
            0.00012345,
            5e-324,
            f64::MAX,
            f64::MIN_POSITIVE,
            -2.5e-7,
            1e22,
            1e100,
        ]),
        (-1_000_000i64..1_000_000).prop_map(|i| i as f64 / 64.0),
    ]
}

fn tree_strategy() -> impl Strategy<Value = Tree> {
    let leaf = prop_oneof![
        Just(Tree::Null),
        any::<bool>().prop_map(Tree::Bool),
        any::<i64>().prop_map(Tree::Int),
        float_strategy().prop_map(Tree::Float),
        bytes_strategy().prop_map(Tree::Str),
        bytes_strategy().prop_map(Tree::Str),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Tree::List),
            prop::collection::vec((bytes_strategy(), inner), 0..6).prop_map(|mut entries| {
                // a dict has each key once
                let mut seen = std::collections::HashSet::new();
                entries.retain(|(k, _)| seen.insert(k.clone()));
                Tree::Map(entries)
            }),
        ]
    })
}

fn python_outputs(trees: &[Tree]) -> Vec<Vec<String>> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("trees.json");
    let cases: Vec<Value> = trees.iter().map(Tree::to_oracle).collect();
    std::fs::write(&file, serde_json::to_vec(&cases).unwrap()).unwrap();
    let oracle = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/pyjson_oracle.py");
    let out = Command::new("python3")
        .arg(oracle)
        .arg(&file)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "oracle failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn canonical_json_equals_python_json_dumps_in_every_style() {
    let mut runner = TestRunner::default();
    let strategy = tree_strategy();
    let n = (runner.config().cases as usize * 2).max(64);
    let mut trees: Vec<Tree> = (0..n)
        .map(|_| strategy.new_tree(&mut runner).unwrap().current())
        .collect();
    // and a few by hand
    trees.push(Tree::Map(vec![]));
    trees.push(Tree::List(vec![]));
    trees.push(Tree::List(vec![
        Tree::List(vec![]),
        Tree::Map(vec![]),
        Tree::Map(vec![(b"a".to_vec(), Tree::List(vec![]))]),
    ]));
    trees.push(Tree::Str("\u{10FFFF}\u{80}\u{10FFFF}".as_bytes().to_vec()));
    // Doubles exactly halfway between two shortest decimal strings: Python
    // picks the even last digit, Rust's `{:e}` rounds up.
    trees.push(Tree::List(vec![
        Tree::Float(f64::from_bits(0xc318_6ebb_328c_5aa5)), // -1719287431763625.25
        Tree::Float(f64::from_bits(0x4318_6ebb_328c_5aa5)),
        Tree::Float(0.5),
        Tree::Float(2.5e-320),
    ]));
    trees.push(Tree::Map(
        [
            &b"\x80"[..],
            b"\xff",
            "\u{D7FF}".as_bytes(),
            "\u{E000}".as_bytes(),
            "\u{10FFFF}".as_bytes(),
            b"",
            b"a",
            "\u{1F980}".as_bytes(),
        ]
        .iter()
        .map(|k| (k.to_vec(), Tree::Null))
        .collect(),
    ));

    let expected = python_outputs(&trees);
    assert_eq!(expected.len(), trees.len());
    for (tree, want) in trees.iter().zip(&expected) {
        let value = tree.to_value();
        for (style, want) in STYLES.iter().zip(want) {
            let got = to_python_json(tree, *style).unwrap();
            assert_eq!(
                String::from_utf8(got).unwrap(),
                *want,
                "to_python_json {style:?} of {tree:?}"
            );
            let got = value_to_python_json(&value, *style);
            assert_eq!(
                String::from_utf8(got).unwrap(),
                *want,
                "value_to_python_json {style:?} of {tree:?}"
            );
        }
    }
}

#[test]
fn py_str_is_surrogateescape() {
    assert_eq!(py_str(b"abc"), "abc");
    assert_eq!(py_str(b"a\xffb"), "a\u{10FFFF}\u{FF}b");
    assert_eq!(py_str("\u{10FFFF}".as_bytes()), "\u{10FFFF}\u{10FFFF}");
    // a truncated valid prefix is one escape per byte
    assert_eq!(py_str(b"\xe2\x82x"), "\u{10FFFF}\u{E2}\u{10FFFF}\u{82}x");
    assert_eq!(
        canonical::py_str_from_str("a\u{10FFFF}"),
        "a\u{10FFFF}\u{10FFFF}"
    );
    assert_eq!(
        canonical::py_code_points(&py_str(b"\xed\xa0\x80")).collect::<Vec<_>>(),
        vec![0xDCED, 0xDCA0, 0xDC80]
    );
    // lone surrogates sort between U+D7FF and U+E000
    assert!(py_cmp(&py_str("\u{D7FF}".as_bytes()), &py_str(b"\x80")).is_lt());
    assert!(py_cmp(&py_str(b"\xff"), &py_str("\u{E000}".as_bytes())).is_lt());
    assert!(py_cmp(
        &py_str("\u{FFFF}".as_bytes()),
        &py_str("\u{10FFFF}".as_bytes())
    )
    .is_lt());
}

#[test]
fn float_repr_matches_python_examples() {
    for (f, s) in [
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (1.0, "1.0"),
        (0.1, "0.1"),
        (1e15, "1000000000000000.0"),
        (1e16, "1e+16"),
        (1e-4, "0.0001"),
        (1e-5, "1e-05"),
        (1.5e300, "1.5e+300"),
        (5e-324, "5e-324"),
        (123.456, "123.456"),
    ] {
        assert_eq!(py_float_repr(f), s);
    }
}

// ------------------------------------------------------------- library level

fn opts(profile: ProfileName) -> Options {
    Options {
        profile,
        env_prefixes: vec![],
        volatile_env: vec![],
        ignored_args: vec![],
    }
}

fn osv(items: &[&[u8]]) -> Vec<OsString> {
    items
        .iter()
        .map(|b| OsString::from_vec(b.to_vec()))
        .collect()
}

fn envv(items: &[(&[u8], &[u8])]) -> Vec<(OsString, OsString)> {
    items
        .iter()
        .map(|(k, v)| {
            (
                OsString::from_vec(k.to_vec()),
                OsString::from_vec(v.to_vec()),
            )
        })
        .collect()
}

#[test]
fn first_occurrence_of_a_duplicated_variable_wins() {
    let argv = osv(&[b"python"]);
    let first = Launch::new(
        &opts(ProfileName::Seed),
        &argv,
        &envv(&[(b"SGLANG_A", b"1"), (b"SGLANG_A", b"2")]),
    );
    let only_first = Launch::new(
        &opts(ProfileName::Seed),
        &argv,
        &envv(&[(b"SGLANG_A", b"1")]),
    );
    assert_eq!(first.fingerprint(), only_first.fingerprint());
    // DSV41_LAUNCHER too
    let tp4_first = envv(&[
        (b"DSV41_LAUNCHER", b"tp4"),
        (b"DSV41_LAUNCHER", b"tp3"),
        (b"DSV41_ROUTE_RING", b"1"),
    ]);
    let tp4 = envv(&[(b"DSV41_LAUNCHER", b"tp4")]);
    assert_eq!(
        Launch::new(&opts(ProfileName::Seed), &argv, &tp4_first).fingerprint(),
        Launch::new(&opts(ProfileName::Seed), &argv, &tp4).fingerprint()
    );
}

#[test]
fn redacted_inputs_hash_env_values_and_secret_args() {
    let argv = osv(&[
        b"python",
        b"--api-key",
        b"sk-1",
        b"--hf-token=hf-2",
        b"--tp",
        b"4",
        b"--port",
        b"1",
    ]);
    let env = envv(&[
        (b"SGLANG_A", b"x"),
        (b"SGLANG_AUTH_TOKEN", b"t"),
        (b"SGLANG_RUN_ID", b"r"),
        (b"PATH", b"/bin"),
    ]);
    let launch = Launch::new(&opts(ProfileName::Sglang), &argv, &env);
    let h =
        |b: &[u8]| crate::common::hex(<sha2::Sha256 as sha2::Digest>::digest(b))[..12].to_string();
    let want = json!({
        "profile": "sglang",
        "argv": ["python", format!("--hf-token=<redacted sha256:{}>", h(b"hf-2")), "--tp", "4"],
        "env": {
            "SGLANG_A": format!("<sha256:{}>", h(b"x")),
            "SGLANG_AUTH_TOKEN": format!("<redacted sha256:{}>", h(b"t")),
        },
        "ignored_args": ["--api-key", format!("<redacted sha256:{}>", h(b"sk-1")), "--port", "1"],
        "volatile_env": ["SGLANG_RUN_ID"],
    });
    assert_eq!(launch.redacted_inputs(), want);
    let text = String::from_utf8(value_to_python_json(
        &launch.redacted_inputs(),
        Style::CANONICAL,
    ))
    .unwrap();
    assert!(
        !text.contains("sk-1") && !text.contains("hf-2") && !text.contains("\"x\""),
        "{text}"
    );
}

#[test]
fn secret_names() {
    for name in [
        "--api-key",
        "api_key",
        "HF_TOKEN",
        "--hf-token=x",
        "db_password",
        "MY_SECRET",
        "Key",
        "--ssl-keyfile-password",
    ] {
        assert!(is_secret_name(name), "{name}");
    }
    for name in [
        "--tp",
        "--model-path",
        "SGLANG_RUN_ID",
        "--host",
        "K-E-Y",
        "--port=KEY",
    ] {
        assert!(!is_secret_name(name), "{name}");
    }
}
