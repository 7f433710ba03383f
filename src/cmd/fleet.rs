//! `keepwrap fleet ls`, `keepwrap fleet gc --older-than D`, and the fleet's
//! lines of `keepwrap status`.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use crate::fleet::{self, FleetState};

fn client(url: &str, timeout: Duration) -> Option<fleet::s3::Client> {
    match fleet::client_of(url, timeout) {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!("keepwrap: error: {e}");
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
            eprintln!("keepwrap: error: fleet: cannot list {url}: {e}");
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
            eprintln!("keepwrap: error: fleet: gc of {url} stopped: {e}");
            ExitCode::from(1)
        }
    }
}

/// `keepwrap status`: the fleet and its mode, the last restore and
/// publish on this root with their outcomes, the last error.
pub fn print_state(root: Option<&Path>, url: Option<&str>) {
    let state = root.and_then(|r| FleetState::read(&r.join(crate::STATE_DIR)));
    if url.is_none() && state.is_none() {
        return;
    }
    let mode = std::env::var("KEEPWRAP_FLEET_MODE").unwrap_or_else(|_| "read-write".into());
    println!("\nfleet: {} ({mode})", url.unwrap_or("not set"));
    let Some(s) = state else {
        println!("  no restore or publish on this root yet");
        return;
    };
    if let Some(r) = &s.last_restore {
        println!("  last restore: {} ({})", r.outcome, ago(r.at));
    }
    if let Some(p) = &s.last_publish {
        println!("  last publish: {} ({})", p.outcome, ago(p.at));
    }
    if let Some(e) = &s.last_error {
        let status = e
            .status
            .map_or("no answer".to_string(), |s| format!("HTTP {s}"));
        println!(
            "  last error: {}: {status} {} ({})",
            e.key,
            e.error,
            ago(e.at)
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
