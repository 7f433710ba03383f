//! The rules of the layout, checked over the source tree: nothing below
//! `cli` imports `cli`; the top modules import each other without a
//! circle; engines are told apart in `engine/` only, and neither the
//! engine nor the tree's shape is a process-global; every `unsafe` block
//! is in `sys`, each under a `SAFETY:` note, and the crate root denies
//! `unsafe_code` everywhere else.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `src/`, as (path relative to `src/`, text).
fn sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    files.sort();
    assert!(files.len() > 20, "found only {} files in src/", files.len());
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(&src).unwrap().display().to_string();
            (rel, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// The code of a line: without a `//` comment (a `//` inside a string
/// cuts it short too, which only hides text, never adds any).
fn code(line: &str) -> &str {
    line.split("//").next().unwrap_or("")
}

/// The top module a file belongs to: `keeper` for `keeper/policy.rs`.
fn top(rel: &str) -> &str {
    let first = rel.split('/').next().unwrap_or(rel);
    first.strip_suffix(".rs").unwrap_or(first)
}

/// A file's code: every line without its `//` comment.
fn code_of(text: &str) -> String {
    text.lines().map(code).collect::<Vec<_>>().join("\n")
}

/// Is `rel` a file of tests only (`tests.rs`, a file under `tests/`)?
fn is_test_file(rel: &str) -> bool {
    rel.ends_with("tests.rs") || rel.contains("/tests/")
}

/// The code a build without tests compiles of a file: its code up to its
/// `#[cfg(test)]` module (which the layout keeps last in a file), nothing
/// of a test file.
fn product_code(rel: &str, text: &str) -> String {
    if is_test_file(rel) {
        return String::new();
    }
    let c = code_of(text);
    match c.find("#[cfg(test)]\nmod ") {
        Some(i) => c[..i].to_string(),
        None => c,
    }
}

/// The leading name of `s` (lower case: a module; empty for anything else).
fn name(s: &str) -> &str {
    let s = s.trim_start();
    let end = s
        .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// Every top module `code` names through `crate::NAME`, including each
/// name of a group `crate::{a::x, b, c::{y, z}}` over any number of lines.
fn crate_paths(code: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for (i, m) in code.match_indices("crate::") {
        if code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[i + m.len()..];
        let Some(group) = rest.strip_prefix('{') else {
            out.push(name(rest));
            continue;
        };
        let (mut depth, mut start) = (1, 0);
        for (j, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 1 => {
                    out.push(name(&group[start..j]));
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 1 => {
                    out.push(name(&group[start..j]));
                    start = j + 1;
                }
                _ => {}
            }
        }
    }
    out.retain(|n| !n.is_empty() && *n != "self");
    out
}

#[test]
fn crate_paths_reads_plain_and_grouped_imports() {
    let code = "use crate::a::x;\nuse crate::{b, c::{d, e},\n    f::g, self};\nlet _ = crate::h::i(); my_crate::j;";
    assert_eq!(crate_paths(code), ["a", "b", "c", "f", "h"]);
}

#[test]
fn nothing_below_cli_imports_cli() {
    let mut offenders = Vec::new();
    for (rel, text) in sources() {
        if top(&rel) == "cli" || rel == "main.rs" || rel == "architecture.rs" {
            continue;
        }
        let c = code_of(&text);
        if crate_paths(&c).contains(&"cli") || c.contains("super::cli") {
            offenders.push(format!("src/{rel}"));
        }
    }
    assert!(
        offenders.is_empty(),
        "a module below cli imports cli (give it its own settings struct instead):\n{}",
        offenders.join("\n")
    );
}

#[test]
fn top_modules_import_each_other_without_a_circle() {
    let files = sources();
    let tops: BTreeSet<&str> = files.iter().map(|(rel, _)| top(rel)).collect();
    let mut uses: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (rel, text) in &files {
        let from = top(rel);
        if from == "lib" || from == "main" {
            continue;
        }
        // Tests may build their fixtures from any module.
        for to in crate_paths(&product_code(rel, text)) {
            if to != from && tops.contains(to) {
                uses.entry(from).or_default().insert(tops.get(to).unwrap());
            }
        }
    }
    // Depth-first search; a module met again while on the path closes a circle.
    fn visit<'a>(
        m: &'a str,
        uses: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<&'a str>> {
        if let Some(i) = path.iter().position(|p| *p == m) {
            let mut circle = path[i..].to_vec();
            circle.push(m);
            return Some(circle);
        }
        if !done.insert(m) {
            return None;
        }
        path.push(m);
        for next in uses.get(m).into_iter().flatten() {
            if let Some(c) = visit(next, uses, path, done) {
                return Some(c);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    for m in uses.keys() {
        if let Some(circle) = visit(m, &uses, &mut Vec::new(), &mut done) {
            panic!(
                "the top modules import in a circle: {}",
                circle.join(" -> ")
            );
        }
    }
    // The layering the README describes: the command line on top, the
    // supervisor above the keeper, the unsafe module at the bottom.
    let reaches = |from: &str, to: &str| uses.get(from).is_some_and(|s| s.contains(to));
    assert!(reaches("cli", "supervisor") && reaches("supervisor", "keeper"));
    assert!(uses.get("sys").is_none_or(|s| s.is_empty()), "{uses:?}");
}

/// `code` with every string literal emptied (`"..."` -> `""`), and each
/// literal's text: identifiers apart from what lines say.
fn split_strings(code: &str) -> (String, Vec<&str>) {
    let mut out = String::with_capacity(code.len());
    let mut lits = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find('"') {
        // A `'"'` char literal, or a `\"` outside a string: not an opening.
        let quoted_char = rest[..i].ends_with('\'') && rest[i + 1..].starts_with('\'');
        out.push_str(&rest[..=i]);
        rest = &rest[i + 1..];
        if quoted_char {
            continue;
        }
        let mut end = None;
        let mut escaped = false;
        for (j, c) in rest.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => {
                    end = Some(j);
                    break;
                }
                _ => {}
            }
        }
        let Some(j) = end else { break };
        lits.push(&rest[..j]);
        out.push('"');
        rest = &rest[j + 1..];
    }
    out.push_str(rest);
    (out, lits)
}

#[test]
fn split_strings_keeps_code_and_takes_literals() {
    let (code, lits) = split_strings(r#"let a = "x \" y"; f('"', "z");"#);
    assert_eq!(code, r#"let a = ""; f('"', "");"#);
    assert_eq!(lits, [r#"x \" y"#, "z"]);
}

/// The folders that may name an engine: the engines' own (each reads its
/// own launch) and the catalogue of every line keepwrap logs
/// (docs/troubleshooting.md is checked against it as one file). The
/// command line's help may spell them in its text.
const MAY_NAME_ENGINES: [&str; 2] = ["engine", "events"];

#[test]
fn engines_are_named_in_engine_only() {
    // Outside the engines' folders no code names an engine (an identifier
    // such as `Sglang`, `vllm::`, `is_vllm`), nor spells out an engine's
    // file layout or its variables in a string: what differs between
    // engines is a method of `engine::Engine` or of its `cache::Layout`.
    let engine = ["sglang", "vllm", "trtllm", "tensorrt"];
    let layout = [
        "rank_tp",
        "rank_",
        "autotune_config",
        "flashinfer_autotune",
        "flashinfer/autotune",
        "SGLANG_",
        "VLLM_",
        "TLLM_",
        "TRTLLM_",
    ];
    let mut offenders = Vec::new();
    for (rel, text) in sources() {
        if MAY_NAME_ENGINES.contains(&top(&rel)) || rel == "architecture.rs" {
            continue;
        }
        let product = product_code(&rel, &text);
        let (code, lits) = split_strings(&product);
        let lower = code.to_ascii_lowercase();
        if let Some(w) = engine.iter().find(|w| lower.contains(*w)) {
            offenders.push(format!("src/{rel}: names {w}"));
        }
        let help = rel == "cli/args.rs";
        for lit in lits.iter().filter(|_| !help) {
            if let Some(w) = layout.iter().chain(&engine).find(|w| lit.contains(*w)) {
                offenders.push(format!("src/{rel}: \"{lit}\" spells {w}"));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "an engine named outside engine/ (give engine::Engine or cache::Layout a method instead):\n{}",
        offenders.join("\n")
    );
}

/// The engine and the shape of the tree it keeps are values, passed from
/// where the launch (or a subcommand) knows them to every function that
/// reads them: no `static` (nor thread-local) holds one.
#[test]
fn neither_the_engine_nor_the_shape_is_a_static() {
    let kinds = ["Shape", "Engine", "ProfileName"];
    let mut found = Vec::new();
    for (rel, text) in sources() {
        if rel == "architecture.rs" {
            continue;
        }
        let c = code_of(&text);
        let statics = c.match_indices("static ").filter_map(|(i, m)| {
            let before = c[..i].chars().next_back();
            let rest = &c[i + m.len()..];
            // An item `static NAME: TYPE = ...;` (not a `'static` lifetime).
            let item = !before.is_some_and(|b| b.is_alphanumeric() || b == '_' || b == '\'')
                && rest.starts_with(|ch: char| ch.is_ascii_uppercase());
            item.then(|| rest.split(['=', ';']).next().unwrap_or(rest))
        });
        let locals = c
            .match_indices(concat!("thread_", "local!"))
            .map(|(i, _)| &c[i..c.len().min(i + 400)]);
        for decl in statics.chain(locals) {
            let names = |k: &&str| {
                decl.match_indices(*k).any(|(j, _)| {
                    let after = decl[j + k.len()..].chars().next();
                    !after.is_some_and(|a| a.is_alphanumeric() || a == '_')
                })
            };
            if kinds.iter().any(names) {
                found.push(format!("src/{rel}: {}", decl.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the engine or the tree's shape kept in a static (pass it as a value):\n{}",
        found.join("\n")
    );
}

#[test]
fn unsafe_code_lives_in_sys_only_each_block_with_a_safety_note() {
    let word = concat!("un", "safe");
    let mut outside = Vec::new();
    let mut unnoted = Vec::new();
    let mut blocks = 0;
    for (rel, text) in sources() {
        if rel == "architecture.rs" {
            continue;
        }
        let lines: Vec<&str> = text.lines().collect();
        for (n, line) in lines.iter().enumerate() {
            let c = code(line);
            let has = c.match_indices(word).any(|(i, _)| {
                let before = c[..i].chars().next_back();
                let after = c[i + word.len()..].chars().next();
                !before.is_some_and(|b| b.is_alphanumeric() || b == '_')
                    && !after.is_some_and(|a| a.is_alphanumeric() || a == '_')
            });
            if !has {
                continue;
            }
            if rel != "sys.rs" {
                outside.push(format!("src/{rel}:{}: {}", n + 1, line.trim()));
                continue;
            }
            blocks += 1;
            let noted = lines[n.saturating_sub(8)..=n]
                .iter()
                .any(|l| l.trim_start().starts_with("// SAFETY:"));
            if !noted {
                unnoted.push(format!("src/{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        outside.is_empty(),
        "unsafe code outside src/sys.rs:\n{}",
        outside.join("\n")
    );
    assert!(
        unnoted.is_empty(),
        "unsafe without a SAFETY note:\n{}",
        unnoted.join("\n")
    );
    assert!(
        blocks >= 5,
        "found only {blocks} unsafe blocks in src/sys.rs"
    );
    // The lint: denied at the crate root, allowed once, on `mod sys`.
    let lint = concat!("unsafe", "_code");
    let files = sources();
    let lib = &files.iter().find(|(rel, _)| rel == "lib.rs").unwrap().1;
    assert!(lib.contains(&format!("#![deny({lint})]")));
    let allow = format!("allow({lint})");
    let allows: Vec<&str> = files
        .iter()
        .filter(|(rel, _)| rel != "architecture.rs")
        .flat_map(|(rel, text)| text.matches(allow.as_str()).map(move |_| rel.as_str()))
        .collect();
    assert_eq!(allows, ["lib.rs"], "one allow, in lib.rs");
    let sys_decl = lib.contains(&format!("#[allow({lint})]\npub mod sys;"));
    assert!(sys_decl, "the one allow must be on `mod sys`");
}
