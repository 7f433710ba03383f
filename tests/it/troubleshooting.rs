//! The troubleshooting reference (docs/troubleshooting.md) lists every line keepwrap logs,
//! with the severity it is logged at: this test reads every log call in
//! `src/` (`tracing::info!`, `warn!`, `error!`, `debug!`, `trace!`), takes
//! the longest fixed piece of its message (the text between format
//! arguments), and requires a code span of the reference that contains it
//! and starts with the call's severity (`error: `, `warning: `, `debug: `, or
//! none for an info line). Messages made only of format arguments (`"{e}"`)
//! are composed elsewhere and have no fixed text to match.

use crate::common;

use std::path::{Path, PathBuf};

#[derive(Debug)]
struct Call {
    at: String,
    level: &'static str,
    message: String,
}

const MACROS: [(&str, &str); 5] = [
    ("info!", "info"),
    ("warn!", "warn"),
    ("error!", "error"),
    ("debug!", "debug"),
    ("trace!", "debug"),
];

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

/// The string literal at the start of `s` (after whitespace): plain or raw,
/// with `\` line continuations folded as Rust folds them.
fn literal(s: &str) -> Option<String> {
    let s = s.trim_start();
    if let Some(rest) = s.strip_prefix('r') {
        let hashes = rest.len() - rest.trim_start_matches('#').len();
        let body = rest[hashes..].strip_prefix('"')?;
        let end = body.find(&format!("\"{}", "#".repeat(hashes)))?;
        return Some(body[..end].to_string());
    }
    let body = s.strip_prefix('"')?;
    let mut out = String::new();
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                '\n' => {
                    let rest: String = chars.clone().collect();
                    let skip = rest.len() - rest.trim_start().len();
                    for _ in 0..rest[..skip].chars().count() {
                        chars.next();
                    }
                }
                'n' => out.push('\n'),
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

/// Every log call with a literal message, in every file of `src/`.
fn log_calls() -> Vec<Call> {
    let mut files = Vec::new();
    rust_files(&common::repo().join("src"), &mut files);
    files.sort();
    let mut calls = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let rel = f
            .strip_prefix(common::repo())
            .unwrap()
            .display()
            .to_string();
        for (mac, level) in MACROS {
            for (at, _) in text.match_indices(mac) {
                // A whole name (`warn!`, `tracing::warn!`), not `prewarn!`.
                let before = text[..at].chars().last();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                let after = text[at + mac.len()..].trim_start();
                let Some(args) = after.strip_prefix('(') else {
                    continue;
                };
                let line = text[..at].matches('\n').count() + 1;
                if let Some(message) = literal(args) {
                    calls.push(Call {
                        at: format!("{rel}:{line}"),
                        level,
                        message,
                    });
                }
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

/// The code spans of the troubleshooting reference (docs/troubleshooting.md).
fn reference_spans() -> Vec<String> {
    let readme = std::fs::read_to_string(common::repo().join("docs/troubleshooting.md")).unwrap();
    let start = readme
        .find("# Troubleshooting")
        .expect("docs/troubleshooting.md: # Troubleshooting");
    let section = &readme[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let mut spans = Vec::new();
    for line in section.lines().filter(|l| l.starts_with('|')) {
        let parts: Vec<&str> = line.split('`').collect();
        spans.extend(parts.iter().skip(1).step_by(2).map(|s| s.to_string()));
    }
    spans
}

fn severity(span: &str) -> &'static str {
    if span.starts_with("error: ") {
        "error"
    } else if span.starts_with("warning: ") {
        "warn"
    } else if span.starts_with("debug: ") {
        "debug"
    } else {
        "info"
    }
}

#[test]
fn the_scanner_reads_the_calls_it_must() {
    // The scanner itself: it finds calls across lines and in every form.
    let calls = log_calls();
    assert!(calls.len() >= 100, "{} calls", calls.len());
    for level in ["info", "warn", "error", "debug"] {
        assert!(calls.iter().any(|c| c.level == level), "{level}");
    }
    assert_eq!(
        fixed_text("prune: kept {}, removed {} cache files and {} leftovers").as_deref(),
        Some("cache files and")
    );
    assert_eq!(fixed_text("{e}"), None);
    assert_eq!(fixed_text("removed {}: {}"), None);
    assert_eq!(
        literal("\n    \"a \\\n     b {x}\", x)").as_deref(),
        Some("a b {x}")
    );
    assert_eq!(
        literal(" r#\"say \"hi\"\"#)").as_deref(),
        Some("say \"hi\"")
    );
}

#[test]
fn every_log_line_is_in_the_troubleshooting_reference_at_its_severity() {
    let spans = reference_spans();
    assert!(spans.len() >= 50, "{} spans", spans.len());
    let mut missing = Vec::new();
    let mut wrong = Vec::new();
    for call in log_calls() {
        let Some(fixed) = fixed_text(&call.message) else {
            continue;
        };
        let found: Vec<&String> = spans.iter().filter(|s| s.contains(&fixed)).collect();
        if found.is_empty() {
            missing.push(format!("{} {}: {:?}", call.at, call.level, call.message));
        } else if !found.iter().any(|s| severity(s) == call.level) {
            wrong.push(format!(
                "{} is logged at {} but the reference says {:?}: {:?}",
                call.at, call.level, found[0], call.message
            ));
        }
    }
    assert!(
        missing.is_empty() && wrong.is_empty(),
        "log lines missing from the troubleshooting reference (docs/troubleshooting.md):\n{}\n\nat another severity:\n{}",
        missing.join("\n"),
        wrong.join("\n")
    );
}
