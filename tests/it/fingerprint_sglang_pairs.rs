//! The `sglang` profile against SGLang's own argument parser: launch pairs
//! in tests/fixtures/sglang_launch_pairs.jsonl, each with SGLang 0.5.23's
//! verdict (equal namespaces after `prepare_server_args`: the `--config`
//! merge and argparse), made once by tests/py/sglang_launch_pairs.py from
//! the real wheel. Two launches SGLang reads differently must never share a
//! fingerprint. Two it reads the same may differ only in the ways docs/fingerprint.md
//! documents (a value's spelling argparse converts: `04`, `.8`, `{"a":1}`;
//! a value equal to the default; YAML scalars PyYAML types that keepwrap
//! keeps as their text), never for reordering, `=`, aliases,
//! abbreviations, repeats or a config file's formatting.

use std::collections::BTreeMap;
use std::ffi::OsString;

use keepwrap::engine::fingerprint::{Launch, Options, ProfileName};
use serde_json::Value;

const CORPUS: &str = include_str!("../fixtures/sglang_launch_pairs.jsonl");

fn fingerprint(side: &Value, dir: &std::path::Path, name: &str) -> String {
    let config = side["config"].as_str();
    let path = dir.join(format!("{name}.yaml"));
    if let Some(text) = config {
        std::fs::write(&path, text).unwrap();
    }
    let argv: Vec<OsString> = ["python3", "-m", "sglang.launch_server"]
        .into_iter()
        .map(OsString::from)
        .chain(side["args"].as_array().unwrap().iter().map(|a| {
            let a = a.as_str().unwrap();
            if a == "@CONFIG@" {
                path.clone().into_os_string()
            } else {
                OsString::from(a)
            }
        }))
        .collect();
    let opts = Options {
        profile: ProfileName::Sglang,
        env_prefixes: vec![],
        volatile_env: vec![],
        ignored_args: vec![],
    };
    Launch::new(&opts, &argv, &[]).fingerprint().to_string()
}

/// Pair kinds whose every SGLang-equal pair keepwrap must find equal too.
const MUST_AGREE: &[&str] = &["reorder", "spelling", "repeat"];

#[test]
#[ignore = "slow: run by .ci/run"]
fn keepwrap_never_merges_launches_sglang_tells_apart() {
    let dir = tempfile::tempdir().unwrap();
    let mut collisions = Vec::new();
    let mut split = Vec::new();
    let mut counts: BTreeMap<(String, bool, bool), usize> = BTreeMap::new();
    let mut n = 0;
    for line in CORPUS.lines() {
        let case: Value = serde_json::from_str(line).unwrap();
        let kind = case["kind"].as_str().unwrap().to_string();
        let same = case["same"].as_bool().unwrap();
        let ours =
            fingerprint(&case["a"], dir.path(), "a") == fingerprint(&case["b"], dir.path(), "b");
        *counts.entry((kind.clone(), same, ours)).or_default() += 1;
        if ours && !same {
            collisions.push(line.to_string());
        }
        if same && !ours && MUST_AGREE.contains(&kind.as_str()) {
            split.push(line.to_string());
        }
        n += 1;
    }
    eprintln!("(kind, sglang same, keepwrap same): count");
    for (k, v) in &counts {
        eprintln!("{k:?}: {v}");
    }
    assert!(n >= 1000, "the corpus holds {n} pairs");
    assert!(
        collisions.is_empty(),
        "{} pairs SGLang reads differently share a fingerprint:\n{}",
        collisions.len(),
        collisions.join("\n")
    );
    assert!(
        split.is_empty(),
        "{} pairs SGLang reads the same differ by spelling or order:\n{}",
        split.len(),
        split.join("\n")
    );
}

const CONFIGS: &str = include_str!("../fixtures/sglang_config_files.jsonl");

/// Config files of tricky YAML (typing, quoting, block scalars, escapes,
/// line breaks, repeated keys), with the tokens SGLang's
/// `ConfigArgumentMerger` makes of each. keepwrap either makes the same
/// tokens, or marks a value it cannot reproduce (a token with a NUL byte),
/// or refuses the file (then its bytes count); and two files whose tokens
/// SGLang makes differently never get the same tokens from keepwrap.
#[test]
#[ignore = "slow: run by .ci/run"]
fn config_files_read_as_sglang_reads_them() {
    use keepwrap::engine::sglang::launch::config::{read, Outcome};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    let mut wrong = Vec::new();
    let mut by_ours: BTreeMap<Vec<String>, (Value, String)> = BTreeMap::new();
    let (mut exact, mut marked, mut refused) = (0, 0, 0);
    for line in CONFIGS.lines() {
        let case: Value = serde_json::from_str(line).unwrap();
        let yaml = case["yaml"].as_str().unwrap();
        std::fs::write(&path, yaml).unwrap();
        let ours = match read(&path).0 {
            Outcome::Args(a) => a,
            Outcome::Unparsable(_) => {
                refused += 1;
                continue;
            }
            Outcome::Unreadable(e) => panic!("{yaml:?}: {e}"),
        };
        let theirs = &case["args"];
        if ours.iter().any(|t| t.contains('\0')) {
            marked += 1;
        } else if serde_json::to_value(&ours).unwrap() == *theirs {
            exact += 1;
        } else {
            wrong.push(format!("{yaml:?}: keepwrap {ours:?}, SGLang {theirs}"));
        }
        if let Some((other, other_yaml)) = by_ours.get(&ours) {
            if other != theirs {
                wrong.push(format!(
                    "{yaml:?} and {other_yaml:?}: keepwrap {ours:?} for both, SGLang {theirs} and {other}"
                ));
            }
        } else {
            by_ours.insert(ours, (theirs.clone(), yaml.to_string()));
        }
    }
    eprintln!("exact {exact}, marked {marked}, refused {refused}");
    assert!(exact + marked + refused >= 1000);
    assert!(
        exact * 3 > exact + marked + refused,
        "a third of the files are read exactly"
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
