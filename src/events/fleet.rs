//! Events of the fleet store (`--fleet s3://BUCKET/PREFIX`): restoring a
//! set before the start, publishing one after done.

use std::fmt::Display;
use std::path::Path;
use std::time::Duration;

use super::secs;
use super::Shown;

const TARGET: &str = "keepwrap::fleet";

pub fn fleet_unusable(url: &str, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "fleet_unusable",
        url,
        error = %error,
        "fleet: {error}; the fleet {url} is not used"
    );
}

pub fn fleet_multi_node(url: &str) {
    tracing::info!(
        target: TARGET,
        event = "fleet_multi_node",
        url,
        "fleet: a multi-node launch: the fleet {url} is not used (multi-node sets travel through --share)"
    );
}

pub fn fleet_on(url: &str, mode: &str, endpoint: Option<&str>) {
    let endpoint = endpoint.unwrap_or("AWS S3");
    tracing::info!(
        target: TARGET,
        event = "fleet_on",
        url,
        mode,
        endpoint,
        "fleet: {url} ({mode}, endpoint {endpoint})"
    );
}

pub fn fleet_empty(key: &str) {
    tracing::info!(
        target: TARGET,
        event = "fleet_empty",
        key,
        "fleet: no set for this launch yet ({key}: HTTP 404); a cold boot"
    );
}

pub fn fleet_restore_failed(miss: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "fleet_restore_failed",
        reason = %miss,
        "fleet: not restored: {miss}; a cold boot"
    );
}

pub fn fleet_cannot_place(root: &Path, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "fleet_cannot_place",
        root = %Shown(root),
        error = %error,
        "fleet: cannot place the restored set in {}: {error}; nothing restored, a cold boot",
        Shown(root)
    );
}

pub fn fleet_restored(files: usize, set: &str, took: Duration) {
    tracing::info!(
        target: TARGET,
        event = "fleet_restored",
        files,
        set,
        took_s = secs(took),
        "fleet: restored and signed {files} cache files of set {set} in {:.1}s",
        secs(took)
    );
}

pub fn fleet_published(set: &str, head: bool) {
    if head {
        tracing::info!(
            target: TARGET,
            event = "fleet_published",
            set,
            "fleet: published set {set}; HEAD names it"
        );
    } else {
        tracing::info!(
            target: TARGET,
            event = "fleet_published_other",
            set,
            "fleet: uploaded set {set}; HEAD already names another complete set, left as it is"
        );
    }
}

pub fn fleet_publish_failed(error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "fleet_publish_failed",
        error = %error,
        "fleet: not published: {error}"
    );
}

pub fn fleet_publish_abandoned(timeout: Duration) {
    tracing::warn!(
        target: TARGET,
        event = "fleet_publish_abandoned",
        timeout_s = secs(timeout),
        "fleet: the publication did not finish within {:.1}s; keepwrap exits without it (HEAD never names an incomplete set)",
        secs(timeout)
    );
}

pub fn fleet_no_thread(error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "fleet_no_thread",
        error = %error,
        "fleet: cannot start its thread: {error}; the fleet is not used this time"
    );
}
