//! `keepwrap fleet ls`, `keepwrap fleet gc --older-than D`, `keepwrap fleet
//! check`, and the fleet's lines of `keepwrap status`.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{json, Value};

use crate::fleet::{self, FleetState};

fn client(url: &str, timeout: Duration) -> Option<fleet::s3::Client> {
    match fleet::client_of(url, timeout) {
        Ok(c) => Some(c),
        Err(e) => {
            super::failed(e.to_string());
            None
        }
    }
}

/// Every launch in the bucket, one line each: `PROFILE/FINGERPRINT SET WRITTEN`.
pub fn ls(url: &str, timeout: Duration) -> ExitCode {
    let Some(c) = client(url, timeout) else {
        return ExitCode::from(1);
    };
    match fleet::list(&c) {
        Ok(launches) => {
            for (launch, set, modified) in &launches {
                println!(
                    "{}  set {}  written {}",
                    escaped(launch),
                    escaped(set),
                    escaped(modified)
                );
            }
            println!(
                "{} in {}",
                crate::events::counted(launches.len(), "launch", "launches"),
                redact(url)
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            super::failed(format!(
                "fleet: cannot list {}: {}",
                redact(url),
                escaped(&fleet::check::described(&e))
            ));
            ExitCode::from(1)
        }
    }
}

/// Remove the launches unused for longer than `older_than`.
pub fn gc(url: &str, timeout: Duration, older_than: Duration, dry_run: bool) -> ExitCode {
    let Some(c) = client(url, timeout) else {
        return ExitCode::from(1);
    };
    match fleet::gc(&c, older_than, dry_run) {
        Ok(removed) => {
            let verb = if dry_run { "would remove" } else { "removed" };
            for l in &removed {
                println!("{verb} {}", escaped(l));
            }
            println!(
                "{verb} {} unused for longer than {}",
                crate::events::counted(removed.len(), "launch", "launches"),
                humantime::format_duration(older_than)
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            super::failed(format!(
                "fleet: gc of {} stopped: {}",
                redact(url),
                escaped(&fleet::check::described(&e))
            ));
            ExitCode::from(1)
        }
    }
}

/// `keepwrap fleet check`: one line per check (`ok`, `FAIL`, or `skip`
/// after a problem it depends on), then a summary; exit 1 on a problem.
pub fn check(url: &str, timeout: Duration, mode: fleet::Mode) -> ExitCode {
    let Some(c) = client(url, timeout) else {
        return ExitCode::from(1);
    };
    let checks = fleet::check::check(&c, mode);
    let mut failed = 0;
    for c in &checks {
        let (tag, text) = match &c.found {
            Some(Ok(t)) => ("ok  ", t.as_str()),
            Some(Err(t)) => {
                failed += 1;
                ("FAIL", t.as_str())
            }
            None => ("skip", "not checked after the problem above"),
        };
        println!("{tag}  {}: {}", c.what, escaped(text));
    }
    let all = crate::events::counted(checks.len(), "check", "checks");
    if failed == 0 {
        println!(
            "fleet check: {} is ready for {} ({all} passed)",
            redact(url),
            mode.as_str()
        );
        ExitCode::SUCCESS
    } else {
        let skipped = checks.iter().filter(|c| c.found.is_none()).count();
        println!(
            "fleet check: {} is not ready for {}: {} of {all} failed{}",
            redact(url),
            mode.as_str(),
            failed,
            if skipped > 0 {
                format!(", {skipped} not checked")
            } else {
                String::new()
            }
        );
        ExitCode::from(1)
    }
}

/// The fleet's part of `keepwrap status` (text and `--json`): the fleet
/// (its URL without credentials) and its mode, the last restore and
/// publish on this root with their outcomes, the last error with its key
/// and HTTP status. Null when no fleet is set and none was used here.
pub fn state_json(root: Option<&Path>, url: Option<&str>, mode: Option<&str>) -> Value {
    let state = root.and_then(FleetState::read);
    if url.is_none() && state.is_none() {
        return Value::Null;
    }
    let s = state.unwrap_or_default();
    json!({
        "url": url.map(without_credentials),
        "mode": mode.unwrap_or(fleet::Mode::default().as_str()),
        "last_restore": s.last_restore,
        "last_publish": s.last_publish,
        "last_error": s.last_error,
    })
}

/// `s3://user:secret@bucket/p` -> `s3://bucket/p`; a query is dropped too.
pub fn without_credentials(url: &str) -> String {
    fleet::s3::redact(url)
}

/// What a bucket (or a state file written from it) holds, for a
/// terminal: every control character escaped, as log lines are.
fn escaped(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let _ = crate::logging::escape_into(&mut out, s);
    out
}

fn redact(url: &str) -> String {
    escaped(&fleet::s3::redact(url))
}

/// The text form of [`state_json`].
pub fn print_state(v: &Value) {
    if v.is_null() {
        return;
    }
    let text = |k: &str| escaped(v[k].as_str().unwrap_or("not set"));
    println!("\nfleet: {} ({})", text("url"), text("mode"));
    let outcome = |what: &str, o: &Value| {
        if let (Some(out), Some(at)) = (o["outcome"].as_str(), o["at"].as_u64()) {
            println!("  {what}: {} ({})", escaped(out), ago(at));
        }
    };
    if v["last_restore"].is_null() && v["last_publish"].is_null() {
        println!("  no restore or publish on this root yet");
    }
    outcome("last restore", &v["last_restore"]);
    outcome("last publish", &v["last_publish"]);
    let e = &v["last_error"];
    if let (Some(key), Some(at)) = (e["key"].as_str(), e["at"].as_u64()) {
        let status = e["status"]
            .as_u64()
            .map_or("no answer".to_string(), |s| format!("HTTP {s}"));
        println!(
            "  last error: {}: {status} {} ({})",
            escaped(key),
            escaped(e["error"].as_str().unwrap_or("")),
            ago(at)
        );
    }
}

fn ago(at: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(at);
    format!(
        "{} ago",
        humantime::format_duration(Duration::from_secs(now.saturating_sub(at)))
    )
}

#[cfg(test)]
mod tests {
    use super::without_credentials;

    #[test]
    fn status_shows_no_credentials_of_the_url() {
        for (url, shown) in [
            ("s3://b-1/p/q", "s3://b-1/p/q"),
            ("s3://AKIA:secret@b-1/p", "s3://b-1/p"),
            ("s3://tok@b-1", "s3://b-1"),
            ("s3://b-1/p?X-Amz-Credential=k", "s3://b-1/p"),
            ("b-1", "b-1"),
        ] {
            assert_eq!(without_credentials(url), shown, "{url}");
        }
    }
}
