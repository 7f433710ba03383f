//! `keepwrap fleet ls`, `keepwrap fleet gc --older-than D`, and the fleet's
//! lines of `keepwrap status`.

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
                println!("{launch}  set {set}  written {modified}");
            }
            println!("{} launches in {url}", launches.len());
            ExitCode::SUCCESS
        }
        Err(e) => {
            super::failed(format!("fleet: cannot list {url}: {e}"));
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
                println!("{verb} {l}");
            }
            println!(
                "{verb} {} launches unused for longer than {}",
                removed.len(),
                humantime::format_duration(older_than)
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            super::failed(format!("fleet: gc of {url} stopped: {e}"));
            ExitCode::from(1)
        }
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
    let url = url.split(['?', '#']).next().unwrap_or("");
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if path.is_empty() && !rest.contains('/') {
        format!("{scheme}://{host}")
    } else {
        format!("{scheme}://{host}/{path}")
    }
}

/// The text form of [`state_json`].
pub fn print_state(v: &Value) {
    if v.is_null() {
        return;
    }
    let text = |k: &str| v[k].as_str().unwrap_or("not set").to_string();
    println!("\nfleet: {} ({})", text("url"), text("mode"));
    let outcome = |what: &str, o: &Value| {
        if let (Some(out), Some(at)) = (o["outcome"].as_str(), o["at"].as_u64()) {
            println!("  {what}: {out} ({})", ago(at));
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
            "  last error: {key}: {status} {} ({})",
            e["error"].as_str().unwrap_or(""),
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
