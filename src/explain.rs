//! How a launch differs from the signed launches recorded in the store:
//! the one line a launch with no cache logs, and `keepwrap explain`.
//!
//! Both sides are redacted inputs (`Launch::redacted_inputs()`): argv is
//! parsed into positionals and flags (`--flag value...`, `--flag=value`,
//! switches), flags are compared by name, environment variables by name
//! (`changed`/`added`/`removed`, never a value), and a secret-named flag
//! only as `changed`. The nearest launch has the fewest differences.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use serde_json::Value;

use crate::fingerprint::{is_secret_name, Launch, Options};
use crate::store::{ago, now_secs, LaunchRecord, Store};

/// argv split into positionals (by index, before the first flag) and flags
/// (name -> value; `None` for a switch), in order of first appearance.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ParsedArgs {
    pub positionals: Vec<String>,
    pub flags: Vec<(String, Option<String>)>,
}

pub fn parse_argv(argv: &[String]) -> ParsedArgs {
    let mut out = ParsedArgs::default();
    let mut i = 0;
    let set = |flags: &mut Vec<(String, Option<String>)>, name: &str, v: Option<String>| match flags
        .iter_mut()
        .find(|(n, _)| n == name)
    {
        Some(slot) => slot.1 = v,
        None => flags.push((name.to_string(), v)),
    };
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
        if out.flags.is_empty() {
            out.positionals.push(tok.clone());
        } else {
            // A stray token after `--flag=value`: keep it in order.
            out.positionals.push(tok.clone());
        }
        i += 1;
    }
    out
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
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
    let bmap: BTreeMap<&str, &Option<String>> =
        b.flags.iter().map(|(n, v)| (n.as_str(), v)).collect();
    let tmap: BTreeMap<&str, &Option<String>> =
        t.flags.iter().map(|(n, v)| (n.as_str(), v)).collect();
    let val = |v: &Option<String>| v.as_deref().map_or("(switch)".to_string(), show);
    for (name, tv) in &t.flags {
        let secret = is_secret_name(name) || tv.as_deref().is_some_and(redacted);
        match bmap.get(name.as_str()) {
            Some(bv) if *bv == tv => {}
            Some(bv) if secret || bv.as_deref().is_some_and(redacted) => {
                out.push(format!("arg {name} changed"))
            }
            Some(bv) => out.push(format!("arg {name} {} -> {}", val(bv), val(tv))),
            None if secret || tv.is_none() => out.push(format!("arg {name} added")),
            None => out.push(format!("arg {name} {} added", val(tv))),
        }
    }
    for (name, _) in &b.flags {
        if !tmap.contains_key(name.as_str()) {
            out.push(format!("arg {name} removed"));
        }
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

/// Every recorded launch other than `fp`, nearest first (fewest
/// differences, then most recently signed), with its differences.
pub fn nearest(
    records: Vec<LaunchRecord>,
    fp: &str,
    inputs: &Value,
) -> Vec<(LaunchRecord, Vec<String>)> {
    let mut v: Vec<(LaunchRecord, Vec<String>)> = records
        .into_iter()
        .filter(|r| r.fingerprint != fp)
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

fn differences(d: &[String]) -> String {
    if d.is_empty() {
        "nothing visible (only in redacted or ignored values)".to_string()
    } else {
        d.join(", ")
    }
}

/// The line of a launch with no signed cache; None when no launch is
/// recorded.
pub fn no_cache_line(store: &Store, fp: &str, inputs: &Value) -> Option<String> {
    let (rec, d) = nearest(store.records(), fp, inputs).into_iter().next()?;
    Some(format!(
        "no cache for this launch; the nearest signed launch ({}..., {}) differs in: {}",
        &rec.fingerprint[..8.min(rec.fingerprint.len())],
        ago(rec.last_signed, now_secs()),
        differences(&d)
    ))
}

/// `keepwrap explain`: compare the launch of `command` with every signed
/// launch in the store, nearest first.
pub fn print(root: Option<std::path::PathBuf>, opts: &Options, command: &[OsString]) -> ExitCode {
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let launch = Launch::new(opts, command, &env);
    let fp = launch.fingerprint().to_string();
    let inputs = launch.redacted_inputs();
    let mut out = String::new();
    let Some(root) = root else {
        eprintln!(
            "keepwrap: error: no cache root: neither --cache-dir, SGLANG_CACHE_DIR nor HOME is set"
        );
        return ExitCode::FAILURE;
    };
    let store = Store::open_existing(&root);
    let now = now_secs();
    let records = store.as_ref().map(Store::records).unwrap_or_default();
    let own = records.iter().find(|r| r.fingerprint == fp).cloned();
    out.push_str(&format!(
        "this launch: {}... ({} profile)",
        &fp[..8],
        opts.profile.as_str()
    ));
    match &own {
        Some(r) => out.push_str(&format!(
            ": signed {} ({} files, last used {})\n",
            ago(r.last_signed, now),
            r.files,
            ago(r.last_used, now)
        )),
        None => out.push_str(": never signed under this cache root\n"),
    }
    let others = nearest(records, &fp, &inputs);
    if others.is_empty() {
        out.push_str(&format!(
            "no other signed launch recorded under {}\n",
            root.display()
        ));
    }
    for (r, d) in &others {
        let stored = store
            .as_ref()
            .and_then(|s| s.manifest(&r.fingerprint))
            .is_some();
        out.push_str(&format!(
            "{}... signed {}, {} files{}: differs in: {}\n",
            &r.fingerprint[..8.min(r.fingerprint.len())],
            ago(r.last_signed, now),
            r.files,
            if stored { " in the store" } else { "" },
            differences(d)
        ));
    }
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
}
