//! How a launch differs from the signed launches recorded in the store:
//! the one line a launch with no cache logs, and what `keepwrap explain`
//! ([`crate::cmd::explain`]) prints.
//!
//! Both sides are redacted inputs (`Launch::redacted_inputs()`). An SGLang
//! server launch is compared in its canonical form (`launch`): argument
//! groups by option, so a reordering or a respelling is no difference, the
//! config file through the arguments it adds, models by what the
//! fingerprint records of them. Any other command is compared as argv,
//! parsed into positionals and flags (`--flag value...`, `--flag=value`,
//! switches). Environment variables are compared by name
//! (`changed`/`added`/`removed`, never a value), a secret-named flag only as
//! `changed`. The nearest launch has the fewest differences. Every step is
//! linear in the size of the inputs (hash maps, no pairwise search).

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use crate::clock::now_secs;
use crate::digest::Fingerprint;
use crate::engine::fingerprint::is_secret_name;
use crate::engine::{launch_items, strings};
use crate::events::Event;
use crate::store::{ago, LaunchRecord, Store};

/// argv split into positionals (by index, before the first flag) and flags
/// (name -> value; `None` for a switch), in order of first appearance.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ParsedArgs {
    pub positionals: Vec<String>,
    pub flags: Vec<(String, Option<String>)>,
}

pub fn parse_argv(argv: &[String]) -> ParsedArgs {
    let mut out = ParsedArgs::default();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut set =
        |flags: &mut Vec<(String, Option<String>)>, name: &str, v: Option<String>| match index
            .get(name)
        {
            Some(&i) => flags[i].1 = v,
            None => {
                index.insert(name.to_string(), flags.len());
                flags.push((name.to_string(), v));
            }
        };
    let mut i = 0;
    while i < argv.len() {
        let tok = &argv[i];
        if tok == "--" {
            out.positionals.extend(argv[i + 1..].iter().cloned());
            break;
        }
        if tok.starts_with("--") && tok.len() > 2 {
            if let Some((name, value)) = tok.split_once('=') {
                set(&mut out.flags, name, Some(value.to_string()));
                i += 1;
                continue;
            }
            let mut j = i + 1;
            while j < argv.len() && !argv[j].starts_with("--") {
                j += 1;
            }
            let value = (j > i + 1).then(|| argv[i + 1..j].join(" "));
            set(&mut out.flags, tok, value);
            i = j;
            continue;
        }
        // Before the first flag, or a stray token after `--flag=value`:
        // kept in order.
        out.positionals.push(tok.clone());
        i += 1;
    }
    out
}

/// A string as shown in a log line: as is when printable, else quoted.
fn show(s: &str) -> String {
    if s.chars().all(|c| !c.is_control() && c != '\u{10FFFF}') && !s.is_empty() {
        s.to_string()
    } else {
        format!("{s:?}")
    }
}

fn redacted(s: &str) -> bool {
    s.contains("<redacted sha256:")
}

/// Named items compared by name: changed, added (in `this` order), removed;
/// each line starts with `kind`.
fn diff_items(
    out: &mut Vec<String>,
    kind: &str,
    base: &[(String, Option<String>)],
    this: &[(String, Option<String>)],
) {
    let bmap: HashMap<&str, &Option<String>> = base.iter().map(|(n, v)| (n.as_str(), v)).collect();
    let tmap: HashMap<&str, &Option<String>> = this.iter().map(|(n, v)| (n.as_str(), v)).collect();
    let val = |v: &Option<String>| v.as_deref().map_or("(switch)".to_string(), show);
    for (name, tv) in this {
        let secret = is_secret_name(name) || tv.as_deref().is_some_and(redacted);
        let found = bmap.get(name.as_str());
        let name = show(name);
        match found {
            Some(bv) if *bv == tv => {}
            Some(bv) if secret || bv.as_deref().is_some_and(redacted) => {
                out.push(format!("{kind}{name} changed"))
            }
            Some(bv) => out.push(format!("{kind}{name} {} -> {}", val(bv), val(tv))),
            None if secret || tv.is_none() => out.push(format!("{kind}{name} added")),
            None => out.push(format!("{kind}{name} {} added", val(tv))),
        }
    }
    for (name, _) in base {
        if !tmap.contains_key(name.as_str()) {
            out.push(format!("{kind}{} removed", show(name)));
        }
    }
}

/// What differs from `base` (a signed launch) to `this` (the launch at
/// hand), both redacted inputs. Empty when nothing visible differs.
pub fn diff(base: &Value, this: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let (bp, tp) = (
        base["profile"].as_str().unwrap_or(""),
        this["profile"].as_str().unwrap_or(""),
    );
    if bp != tp {
        out.push(format!("profile {bp} -> {tp}"));
    }
    match (base.get("launch"), this.get("launch")) {
        (Some(b), Some(t)) => {
            let ((ba, br), (ta, tr)) = (launch_items(b), launch_items(t));
            diff_items(&mut out, "arg ", &ba, &ta);
            diff_items(&mut out, "", &br, &tr);
        }
        (None, None) => diff_argv(&mut out, base, this),
        (Some(_), None) => out.push(
            "the command: an SGLang server launch -> a command compared as written".into(),
        ),
        (None, Some(_)) => out.push(
            "the command: compared as written (an other command, or signed before keepwrap read SGLang launches by meaning) -> an SGLang server launch".into(),
        ),
    }
    // the engine's version (signed before keepwrap read it: none)
    let engine = |v: &Value| {
        v.get("engine")
            .map_or("(none)".to_string(), Value::to_string)
    };
    if base.get("engine") != this.get("engine") {
        out.push(format!("engine {} -> {}", engine(base), engine(this)));
    }
    let env = |v: &Value| -> BTreeMap<String, String> {
        v["env"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (be, te) = (env(base), env(this));
    for (name, v) in &te {
        match be.get(name) {
            Some(bv) if bv == v => {}
            Some(_) => out.push(format!("env {} changed", show(name))),
            None => out.push(format!("env {} added", show(name))),
        }
    }
    for name in be.keys() {
        if !te.contains_key(name) {
            out.push(format!("env {} removed", show(name)));
        }
    }
    out
}

/// argv compared as positionals by index and flags by name.
fn diff_argv(out: &mut Vec<String>, base: &Value, this: &Value) {
    let b = parse_argv(&strings(&base["argv"]));
    let t = parse_argv(&strings(&this["argv"]));
    for i in 0..b.positionals.len().max(t.positionals.len()) {
        match (b.positionals.get(i), t.positionals.get(i)) {
            (Some(x), Some(y)) if x == y => {}
            (Some(x), Some(y)) if redacted(x) || redacted(y) => {
                out.push(format!("argv {i} changed"))
            }
            (Some(x), Some(y)) => out.push(format!("argv {i} {} -> {}", show(x), show(y))),
            (None, Some(y)) => out.push(format!("argv {i} {} added", show(y))),
            (Some(x), None) => out.push(format!("argv {i} {} removed", show(x))),
            (None, None) => {}
        }
    }
    diff_items(out, "arg ", &b.flags, &t.flags);
}

/// Every recorded launch other than `fp`, nearest first (fewest
/// differences, then most recently signed), with its differences.
pub fn nearest(
    records: Vec<LaunchRecord>,
    fp: &Fingerprint,
    inputs: &Value,
) -> Vec<(LaunchRecord, Vec<String>)> {
    let mut v: Vec<(LaunchRecord, Vec<String>)> = records
        .into_iter()
        // a record that names no fingerprint is no signed launch (planted
        // or torn): it is never sliced into a line
        .filter(|r| *fp != r.fingerprint && crate::cache::is_sha256_hex(&r.fingerprint))
        .map(|r| {
            let d = diff(&r.inputs, inputs);
            (r, d)
        })
        .collect();
    v.sort_by(|a, b| {
        a.1.len()
            .cmp(&b.1.len())
            .then(b.0.last_signed.cmp(&a.0.last_signed))
    });
    v
}

pub use crate::events::differences;

/// The event of a launch with no signed cache; None when no launch is
/// recorded. A launch that signed before lost its files (removed by prune
/// as changed or incomplete, or deleted): that is the cause, not how
/// another launch differs.
pub fn no_cache_event(store: &Store, fp: &Fingerprint, inputs: &Value) -> Option<Event> {
    if let Some(own) = store.record(fp) {
        return Some(Event::NoCacheFilesGone {
            fingerprint: fp.to_string(),
            signed: ago(own.last_signed, now_secs()),
        });
    }
    let (rec, d) = nearest(store.records(), fp, inputs).into_iter().next()?;
    Some(Event::NoCacheNearest {
        fingerprint: fp.to_string(),
        other_signed: ago(rec.last_signed, now_secs()),
        other_fingerprint: rec.fingerprint,
        differences: d,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::fingerprint::{Launch, Options};
    use serde_json::json;
    use std::ffi::OsString;

    #[test]
    fn parses_flags_switches_and_positionals() {
        let a: Vec<String> = [
            "python", "-m", "x", "--tp", "4", "--log", "--bs", "1", "2", "--k=v",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let p = parse_argv(&a);
        assert_eq!(p.positionals, ["python", "-m", "x"]);
        assert_eq!(
            p.flags,
            vec![
                ("--tp".into(), Some("4".into())),
                ("--log".into(), None),
                ("--bs".into(), Some("1 2".into())),
                ("--k".into(), Some("v".into())),
            ]
        );
    }

    #[test]
    fn diffs_by_name_and_never_shows_env_values_or_secrets() {
        let base = json!({"profile": "sglang",
            "argv": ["python", "--chunked-prefill-size", "4096", "--hf-token", "<redacted sha256:aaaaaaaaaaaa>", "--old"],
            "env": {"SGLANG_FOO": "<sha256:111111111111>", "SGLANG_GONE": "<sha256:222222222222>"}});
        let this = json!({"profile": "sglang",
            "argv": ["python", "--chunked-prefill-size=8192", "--hf-token", "<redacted sha256:bbbbbbbbbbbb>", "--new", "1"],
            "env": {"SGLANG_FOO": "<sha256:333333333333>", "SGLANG_NEW": "<sha256:444444444444>"}});
        let d = diff(&base, &this);
        assert_eq!(
            d,
            [
                "arg --chunked-prefill-size 4096 -> 8192",
                "arg --hf-token changed",
                "arg --new 1 added",
                "arg --old removed",
                "env SGLANG_FOO changed",
                "env SGLANG_NEW added",
                "env SGLANG_GONE removed",
            ]
        );
        assert!(diff(&this, &this).is_empty());
    }

    fn inputs(argv: &[&str]) -> Value {
        let opts = Options {
            profile: crate::engine::fingerprint::ProfileName::Sglang,
            env_prefixes: vec![],
            volatile_env: vec![],
            ignored_args: vec![],
        };
        let argv: Vec<OsString> = argv.iter().map(OsString::from).collect();
        Launch::new(&opts, &argv, &[]).redacted_inputs()
    }

    #[test]
    fn canonical_launches_differ_by_meaning_not_spelling() {
        let a = inputs(&[
            "python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "/nonexistent/m",
            "--tp",
            "4",
            "--chunked-prefill-size=4096",
            "--api-key",
            "k1",
            "--port",
            "1",
        ]);
        let b = inputs(&[
            "sglang",
            "serve",
            "--chunked-prefill-size",
            "4096",
            "--tensor-parallel-size=4",
            "--model",
            "/nonexistent/m",
            "--api-key=k1",
            "--port",
            "2",
        ]);
        assert!(diff(&a, &b).is_empty(), "{:?}", diff(&a, &b));
        let c = inputs(&[
            "python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "/nonexistent/m",
            "--tp",
            "8",
            "--api-key",
            "k2",
            "--max-total-tokens",
            "9",
        ]);
        assert_eq!(
            diff(&a, &c),
            [
                "arg --max-total-tokens added",
                "arg --tp-size 4 -> 8",
                "arg --chunked-prefill-size removed"
            ]
        );
        let old = json!({"profile": "sglang", "argv": ["python3"], "env": {}});
        let d = diff(&old, &a);
        assert_eq!(d.len(), 2, "{d:?}");
        // signed before keepwrap read the engine's version
        assert!(d[1].starts_with("engine (none) -> {\"sglang\":"), "{d:?}");
    }

    #[test]
    fn sixty_thousand_arguments_diff_in_one_pass() {
        let many: Vec<String> = (0..30_000)
            .flat_map(|i| [format!("--flag-{i}"), i.to_string()])
            .collect();
        let mut other = many.clone();
        other[1] = "x".into();
        let a = json!({"profile": "sglang", "argv": many, "env": {}});
        let b = json!({"profile": "sglang", "argv": other, "env": {}});
        assert_eq!(diff(&a, &b), ["arg --flag-0 0 -> x"]);
    }
}
