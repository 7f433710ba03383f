//! The troubleshooting reference comes from the catalogue of events
//! (`src/events/`): no log call lives elsewhere in `src/`; every event the
//! catalogue logs (the variants of `Event`, as `keepwrap::events::CATALOGUE`
//! lists them with their levels and message templates) has
//! exactly one row of the reference, keyed by its code in the `Event`
//! column, at the levels it is logged at; no row names an event that does
//! not exist; and the row's `Line` column holds the fixed text of the
//! event's message, so that the wording a user greps for is the wording
//! keepwrap writes.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const LEVELS: [&str; 5] = ["info", "warn", "error", "debug", "trace"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every `tracing` level-macro call (`info!(`, `tracing::warn!(`, ...) in
/// the files under `dir`, as `path:line`.
fn log_calls(dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    files.sort();
    let mut calls = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let rel = f
            .strip_prefix(common::repo())
            .unwrap()
            .display()
            .to_string();
        for level in LEVELS {
            let mac = format!("{level}!");
            for (at, _) in text.match_indices(&mac) {
                // A whole name (`warn!`, `tracing::warn!`), not `prewarn!`.
                let before = text[..at].chars().last();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                if !text[at + mac.len()..].trim_start().starts_with('(') {
                    continue;
                }
                calls.push(format!("{rel}:{}", text[..at].matches('\n').count() + 1));
            }
        }
    }
    calls
}

/// The longest piece of fixed text between format arguments, trimmed of
/// punctuation; `None` when no piece has 8 characters or more.
fn fixed_text(message: &str) -> Option<String> {
    let mut pieces = vec![String::new()];
    let mut chars = message.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                pieces.last_mut().unwrap().push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                pieces.last_mut().unwrap().push('}');
            }
            '{' => {
                for c in chars.by_ref() {
                    if c == '}' {
                        break;
                    }
                }
                pieces.push(String::new());
            }
            c => pieces.last_mut().unwrap().push(c),
        }
    }
    pieces
        .into_iter()
        .map(|p| {
            p.trim_matches(|c: char| c.is_whitespace() || ":;,.()'\"".contains(c))
                .to_string()
        })
        .filter(|p| p.chars().count() >= 8)
        .max_by_key(|p| p.chars().count())
}

/// The catalogue: every event name, with the levels it is logged at and
/// the message templates it is logged with.
fn catalogue() -> BTreeMap<String, (BTreeSet<&'static str>, Vec<String>)> {
    typed_catalogue()
}

/// The variants of `keepwrap::events::Event`, as the library's catalogue
/// lists them: each code with its levels and message templates.
fn typed_catalogue() -> BTreeMap<String, (BTreeSet<&'static str>, Vec<String>)> {
    let mut codes: BTreeMap<String, (BTreeSet<&'static str>, Vec<String>)> = BTreeMap::new();
    for e in keepwrap::events::CATALOGUE {
        let entry = codes.entry(e.code.to_string()).or_default();
        for level in e.levels {
            let level = keepwrap::events::level_name(*level);
            let level = LEVELS
                .iter()
                .find(|l| **l == level)
                .unwrap_or_else(|| panic!("level {level} of {}", e.code));
            entry
                .0
                .insert(if *level == "trace" { "debug" } else { level });
        }
        assert!(e.target.starts_with("keepwrap::"), "{}", e.code);
        entry.1.push(e.template.to_string());
    }
    assert!(!codes.is_empty());
    codes
}

/// The troubleshooting reference: `docs/troubleshooting.md`, or the
/// README's section while it lives there.
fn reference() -> String {
    let docs = common::repo().join("docs/troubleshooting.md");
    if let Ok(text) = std::fs::read_to_string(docs) {
        return text;
    }
    let readme = std::fs::read_to_string(common::repo().join("README.md")).unwrap();
    let start = readme
        .find("## Troubleshooting")
        .expect("README: ## Troubleshooting");
    let section = &readme[start..];
    section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)].to_string()
}

/// A row of a table of the reference whose header has an `Event` column.
/// A row whose Event cell reads ``see `name` `` shows another form of an
/// event keyed elsewhere (a vLLM launch's first line, say): its event must
/// exist, and its own row is the one keyed by its name.
#[derive(Debug)]
struct Row {
    events: Vec<String>,
    levels: BTreeSet<String>,
    line: String,
    see: bool,
}

fn cells(line: &str) -> Vec<String> {
    line.trim()
        .trim_matches('|')
        .split(" | ")
        .map(|c| c.trim().to_string())
        .collect()
}

fn rows(reference: &str) -> Vec<Row> {
    let mut out = Vec::new();
    let mut columns: Option<(usize, usize, usize)> = None;
    for line in reference.lines() {
        if !line.starts_with('|') {
            columns = None;
            continue;
        }
        let c = cells(line);
        if line.starts_with("|---") {
            continue;
        }
        if columns.is_none() {
            let find = |name: &str| c.iter().position(|x| x == name);
            columns = match (find("Event"), find("Level"), find("Line")) {
                (Some(e), Some(l), Some(t)) => Some((e, l, t)),
                _ => Some((usize::MAX, 0, 0)),
            };
            continue;
        }
        let (e, l, t) = columns.unwrap();
        if e == usize::MAX {
            continue;
        }
        let names = |cell: &str| -> Vec<String> {
            cell.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect()
        };
        out.push(Row {
            events: names(&c[e]),
            levels: c[l].split(',').map(|x| x.trim().to_string()).collect(),
            line: c[t].clone(),
            see: c[e].starts_with("see "),
        });
    }
    out
}

/// Every line goes through `Event::emit`: no level macro anywhere in
/// `src/`, the catalogue included.
#[test]
fn no_log_call_outside_the_events_catalogue() {
    let calls = log_calls(&common::repo().join("src"));
    assert!(
        calls.is_empty(),
        "log calls that are no `Event` variant: {calls:?}"
    );
}

#[test]
fn the_catalogue_reader_reads_every_code() {
    let names = catalogue();
    let levels: BTreeSet<&str> = names
        .values()
        .flat_map(|(l, _)| l.iter().copied())
        .collect();
    assert!(names.len() >= 100, "{} events", names.len());
    for level in ["info", "warn", "error", "debug"] {
        assert!(levels.contains(level), "{level}");
    }
    for code in ["tuning_done", "late_not_signed_stopped", "late_as_signed"] {
        assert!(names.contains_key(code), "{code}");
    }
    assert_eq!(
        fixed_text("prune: kept {}, removed {} cache files and {} leftovers").as_deref(),
        Some("cache files and")
    );
    assert_eq!(fixed_text("{self}"), None);
}

#[test]
fn every_event_has_one_row_in_the_troubleshooting_reference_at_its_level() {
    let catalogue = catalogue();
    let rows = rows(&reference());
    assert!(rows.len() >= 50, "{} rows keyed by event", rows.len());
    let mut problems = Vec::new();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for row in &rows {
        if row.events.is_empty() {
            problems.push(format!("a row names no event: {}", row.line));
        }
        for name in &row.events {
            let Some((levels, messages)) = catalogue.get(name) else {
                problems.push(format!(
                    "the row of `{name}` names no event of the catalogue"
                ));
                continue;
            };
            if row.see {
                continue;
            }
            *seen.entry(name).or_default() += 1;
            let levels: BTreeSet<String> = levels.iter().map(|l| l.to_string()).collect();
            if levels != row.levels {
                problems.push(format!(
                    "`{name}` is logged at {levels:?}, its row says {:?}",
                    row.levels
                ));
            }
            for m in messages {
                if let Some(fixed) = fixed_text(m) {
                    if !row.line.contains(&fixed) {
                        problems.push(format!(
                            "the row of `{name}` does not show {fixed:?} (message {m:?})"
                        ));
                    }
                }
            }
        }
    }
    for name in catalogue.keys() {
        match seen.get(name.as_str()) {
            Some(1) => {}
            Some(n) => problems.push(format!("`{name}` has {n} rows")),
            None => problems.push(format!("`{name}` has no row")),
        }
    }
    assert!(
        problems.is_empty(),
        "the troubleshooting reference and the catalogue of events differ:\n{}",
        problems.join("\n")
    );
}
