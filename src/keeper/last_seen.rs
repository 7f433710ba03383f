//! What the engine of a launch last ran with, by the fingerprint keepwrap
//! read from the launch's words: `.keepwrap/seen/<read fingerprint>`, a
//! small JSON state file `{"seen": "<fingerprint>"}`. A launch whose words
//! do not show everything its engine gets (a login shell's profile, an
//! entrypoint's hooks) is offered the set of the fingerprint its engine
//! was last seen with, and checked again once its engine runs: an input
//! only the running engine shows costs one boot per change, never every
//! boot.
//!
//! Planted or stale, the file only chooses which signed set is offered:
//! the engine is seen before it reaches its cache, and a set of another
//! fingerprint than the one it runs with goes back to the store.

use std::os::fd::{AsFd, BorrowedFd};

use serde::{Deserialize, Serialize};

use crate::cache::fsx;
use crate::digest::Fingerprint;

/// The directory under `.keepwrap/`.
const DIR: &str = "seen";
/// The largest such file read.
const MAX: u64 = 4096;

#[derive(Serialize, Deserialize)]
struct Record {
    seen: String,
}

/// The fingerprint the engine of the launch read as `read` last ran with,
/// when it differed from `read`.
pub(super) fn get(state: BorrowedFd<'_>, read: &Fingerprint) -> Option<Fingerprint> {
    let dir = fsx::open_state_dir_at(state, DIR, None).ok()?;
    let shown = format!("{}/{DIR}/{}", crate::STATE_DIR, read.as_str());
    let r: Record = fsx::read_state_json(
        dir.as_fd(),
        &shown,
        read.as_str(),
        MAX,
        "the launch is offered the set of its fingerprint as read",
    )?;
    Fingerprint::parse(&r.seen).filter(|f| f != read)
}

/// Remember that the engine of the launch read as `read` ran with `seen`
/// (forgotten when they are the same). Best effort: without it, the next
/// boot of these words is offered the set of `read` and checked again.
pub(super) fn put(state: BorrowedFd<'_>, read: &Fingerprint, seen: &Fingerprint) {
    let Ok(dir) = fsx::open_state_dir_at(state, DIR, Some(0o755)) else {
        return;
    };
    let Ok(name) = std::ffi::CString::new(read.as_str()) else {
        return;
    };
    if seen == read {
        let _ = nix::unistd::unlinkat(
            dir.as_fd(),
            name.as_c_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
        return;
    }
    let record = Record {
        seen: seen.as_str().to_string(),
    };
    let Ok(mut bytes) = serde_json::to_vec(&record) else {
        return;
    };
    bytes.push(b'\n');
    let _ = fsx::write_atomic_at_with(dir.as_fd(), &name, &bytes, 0o644, false);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(c: char) -> Fingerprint {
        Fingerprint::parse(&c.to_string().repeat(64)).unwrap()
    }

    #[test]
    fn what_was_seen_is_offered_until_it_is_the_same_again() {
        let dir = tempfile::tempdir().unwrap();
        let state = fsx::open_root(dir.path()).unwrap();
        assert_eq!(get(state.as_fd(), &fp('a')), None);
        put(state.as_fd(), &fp('a'), &fp('b'));
        assert_eq!(get(state.as_fd(), &fp('a')), Some(fp('b')));
        assert_eq!(get(state.as_fd(), &fp('c')), None);
        put(state.as_fd(), &fp('a'), &fp('a'));
        assert_eq!(get(state.as_fd(), &fp('a')), None);
    }

    #[test]
    fn a_planted_file_that_is_not_a_record_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(DIR)).unwrap();
        std::fs::write(dir.path().join(DIR).join(fp('a').as_str()), "{\"seen\": 1}").unwrap();
        std::fs::write(
            dir.path().join(DIR).join(fp('c').as_str()),
            "{\"seen\": \"zz\"}",
        )
        .unwrap();
        let state = fsx::open_root(dir.path()).unwrap();
        assert_eq!(get(state.as_fd(), &fp('a')), None);
        assert_eq!(get(state.as_fd(), &fp('c')), None);
    }
}
