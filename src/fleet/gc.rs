//! The bucket's housekeeping for `keepwrap fleet`: every launch in it
//! (`fleet ls`) and the removal of launches unused for a while (`fleet
//! gc`).

use super::*;

/// `keepwrap fleet ls`: every launch in the bucket, with its HEAD's set
/// and time.
pub fn list(bucket: &Client) -> Result<Vec<(String, String, String)>, Failure> {
    let top = bucket.location.key(&format!("{TOP}/"));
    let client: &dyn Storage = bucket;
    let mut out = Vec::new();
    for o in client.list(&top)? {
        let Some(rest) = o.key.strip_prefix(&top) else {
            continue;
        };
        let Some(launch) = rest.strip_suffix("/HEAD") else {
            continue;
        };
        // What the bucket holds is shown only once it is what keepwrap
        // writes (the caller escapes it all the same).
        let set = client
            .get(&o.key, MAX_HEAD)
            .ok()
            .flatten()
            .map(|h| read_head(&h.bytes));
        let set = match set {
            Some(HeadIs::Set(id)) => id,
            Some(HeadIs::Format(n)) => format!("(a HEAD of format {n}: read as no set)"),
            _ => "(not a valid HEAD)".to_string(),
        };
        out.push((launch.to_string(), set, o.modified));
    }
    Ok(out)
}

/// `keepwrap fleet gc --older-than D`: remove the launches none of whose
/// objects was written within D, in two phases. First each such launch's
/// HEAD (so no reader is sent to a set that is going); then, from a
/// listing made after that, the rest of each launch whose HEAD is still
/// absent and none of whose objects was written since gc began (a pod that
/// restored the set and publishes it again meanwhile creates HEAD: the
/// launch is kept). The launches removed.
pub fn gc(bucket: &Client, older_than: Duration, dry_run: bool) -> Result<Vec<String>, Failure> {
    let top = bucket.location.key(&format!("{TOP}/"));
    let client: &dyn Storage = bucket;
    let began = std::time::SystemTime::now();
    let written_at = |modified: &str| {
        humantime::parse_rfc3339_weak(
            modified
                .trim_end_matches('Z')
                .split('.')
                .next()
                .unwrap_or(""),
        )
        .ok()
    };
    // Within D, or at an unreadable time: kept.
    let fresh = |modified: &str| {
        written_at(modified)
            .and_then(|t| began.duration_since(t).ok())
            .is_none_or(|age| age < older_than)
    };
    let mut live: BTreeSet<String> = BTreeSet::new();
    let mut launches: BTreeSet<String> = BTreeSet::new();
    for o in client.list(&top)? {
        let Some(rest) = o.key.strip_prefix(&top) else {
            continue;
        };
        let parts: Vec<&str> = rest.splitn(3, '/').collect();
        if parts.len() < 3 {
            continue;
        }
        let launch = format!("{}/{}", parts[0], parts[1]);
        // Anything written within D keeps its launch (a set published
        // just now whose HEAD is not there yet, too).
        if fresh(&o.modified) {
            live.insert(launch.clone());
        }
        launches.insert(launch);
    }
    let stale: Vec<String> = launches.difference(&live).cloned().collect();
    if dry_run {
        return Ok(stale);
    }
    // Each HEAD goes only when a listing of its launch made just before
    // still shows nothing written within D: a warm boot that rewrote it
    // since the first listing keeps its launch.
    let mut headless = Vec::new();
    for launch in stale {
        let now = client.list(&format!("{top}{launch}/"))?;
        if now.iter().any(|o| fresh(&o.modified)) {
            continue;
        }
        client.delete(&format!("{top}{launch}/HEAD"))?;
        crate::failpoint::hit("fleet-gc");
        headless.push(launch);
    }
    // Written since gc began (the listing's times have whole seconds).
    let since_began = |modified: &str| {
        written_at(modified).is_none_or(|t| {
            t.checked_add(Duration::from_secs(1))
                .is_none_or(|t| t >= began)
        })
    };
    let mut removed = Vec::new();
    for launch in headless {
        let prefix = format!("{top}{launch}/");
        let now = client.list(&prefix)?;
        let head = format!("{prefix}HEAD");
        if now
            .iter()
            .any(|o| o.key == head || fresh(&o.modified) || since_began(&o.modified))
        {
            continue;
        }
        for o in &now {
            client.delete(&o.key)?;
        }
        removed.push(launch);
    }
    Ok(removed)
}
