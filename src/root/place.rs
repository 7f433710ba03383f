//! What the engines' roots are read with: whether a variable is set, and a
//! path's normal form for comparing a `--cache-dir` with the engine's.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// Is variable `name` set, and not empty, in `env`?
pub fn is_set(env: &[(OsString, OsString)], name: &str) -> bool {
    env.iter().any(|(k, v)| k == name && !v.is_empty())
}

/// `path` without `.` components and with `..` folded lexically, or its
/// canonical form when it exists (so a symlinked mount compares equal).
pub fn normal(path: &Path) -> PathBuf {
    if let Ok(p) = path.canonicalize() {
        return p;
    }
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}
