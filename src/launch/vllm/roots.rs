//! Where the cache lives: vLLM's autotune root, FlashInfer's managed store
//! and the architecture component, from the child's environment.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// First value of `name` in `env` (as `getenv` sees it), set or not.
fn getenv<'a>(env: &'a [(OsString, OsString)], name: &str) -> Option<&'a OsStr> {
    env.iter()
        .find(|(k, _)| k.as_bytes() == name.as_bytes())
        .map(|(_, v)| v.as_os_str())
}

/// A value that is set and not empty.
fn nonempty<'a>(env: &'a [(OsString, OsString)], name: &str) -> Option<&'a OsStr> {
    getenv(env, name).filter(|v| !v.is_empty())
}

/// Why a cache location cannot be computed from the environment alone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RootError {
    /// `~` must be expanded and `HOME` is not set (Python would read the
    /// password database).
    #[error("{var} needs HOME to expand `~`, and HOME is not set")]
    NoHome { var: &'static str },
    /// `~user` forms need the password database.
    #[error("{var} starts with `~user`, which keepwrap does not expand")]
    OtherUser { var: &'static str },
}

/// Python's `os.path.expanduser` for `~` and `~/...` with `HOME` from `env`.
fn expanduser(
    path: &OsStr,
    env: &[(OsString, OsString)],
    var: &'static str,
) -> Result<PathBuf, RootError> {
    let b = path.as_bytes();
    if !b.starts_with(b"~") {
        return Ok(PathBuf::from(path));
    }
    let end = b.iter().position(|&c| c == b'/').unwrap_or(b.len());
    if end != 1 {
        return Err(RootError::OtherUser { var });
    }
    let home = getenv(env, "HOME").ok_or(RootError::NoHome { var })?;
    let mut out = home.as_bytes().to_vec();
    while out.last() == Some(&b'/') {
        out.pop();
    }
    out.extend_from_slice(&b[end..]);
    if out.is_empty() {
        out.push(b'/');
    }
    Ok(PathBuf::from(OsString::from_vec(out)))
}

/// The directory that holds vLLM's `<sha256 hex>/` folders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AutotuneRoot {
    /// `$VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR` (`~` expanded): the folders are
    /// right in it, with no FlashInfer version or arch levels. With a
    /// one-rank launch on 0.33.0, FlashInfer's managed store is here too
    /// (`v2/`).
    Override(PathBuf),
    /// `$VLLM_CACHE_ROOT/flashinfer_autotune_cache`: the folders are in
    /// `<flashinfer version>/<arch>/` below it (see [`arch_component`]).
    VllmCacheRoot(PathBuf),
}

impl AutotuneRoot {
    /// The directory itself.
    pub fn path(&self) -> &Path {
        match self {
            AutotuneRoot::Override(p) | AutotuneRoot::VllmCacheRoot(p) => p,
        }
    }
}

/// Where vLLM (0.27.1 and later) keeps the autotune files, from the child's
/// environment: `$VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR` when set and not
/// empty; else `$VLLM_CACHE_ROOT`, else `$XDG_CACHE_HOME/vllm`, else
/// `~/.cache/vllm`, then `flashinfer_autotune_cache`. As in vLLM, a variable
/// set to the empty string counts as set for `VLLM_CACHE_ROOT` and
/// `XDG_CACHE_HOME` (giving a path relative to the engine's working
/// directory, returned relative), and `~` is expanded with `HOME`.
pub fn autotune_root(env: &[(OsString, OsString)]) -> Result<AutotuneRoot, RootError> {
    const OVERRIDE: &str = "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR";
    if let Some(dir) = nonempty(env, OVERRIDE) {
        return expanduser(dir, env, OVERRIDE).map(AutotuneRoot::Override);
    }
    let root = match getenv(env, "VLLM_CACHE_ROOT") {
        Some(v) => expanduser(v, env, "VLLM_CACHE_ROOT")?,
        None => {
            let base = match getenv(env, "XDG_CACHE_HOME") {
                Some(x) => expanduser(x, env, "XDG_CACHE_HOME")?,
                None => expanduser(OsStr::new("~/.cache"), env, "HOME")?,
            };
            base.join("vllm")
        }
    };
    Ok(AutotuneRoot::VllmCacheRoot(
        root.join("flashinfer_autotune_cache"),
    ))
}

/// Root of FlashInfer's managed autotune store, used by one-rank launches on
/// vLLM 0.33.0 (`<root>/v2/<env hash>/manifest.json`, `entries/*.json`):
/// `$VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR` when set and not empty, else
/// `$FLASHINFER_AUTOTUNE_CACHE_DIR`, else
/// `${FLASHINFER_WORKSPACE_BASE:-~}/.cache/flashinfer/autotune`.
pub fn managed_store_root(env: &[(OsString, OsString)]) -> Result<PathBuf, RootError> {
    if let Some(dir) = nonempty(env, "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR") {
        return expanduser(dir, env, "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR");
    }
    if let Some(dir) = nonempty(env, "FLASHINFER_AUTOTUNE_CACHE_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let base = match getenv(env, "FLASHINFER_WORKSPACE_BASE") {
        Some(b) => PathBuf::from(b),
        None => expanduser(OsStr::new("~"), env, "HOME")?,
    };
    Ok(base.join(".cache/flashinfer/autotune"))
}

/// The `<arch>` level below the FlashInfer version when
/// `FLASHINFER_CUDA_ARCH_LIST` decides it (`"10.0a 9.0a"` -> `90a_100a`:
/// dots dropped, sorted by compute capability, `_`-joined). `None` when the
/// variable is unset or empty: then the visible GPUs decide, which only the
/// engine's process can see.
pub fn arch_component(env: &[(OsString, OsString)]) -> Option<String> {
    let list = nonempty(env, "FLASHINFER_CUDA_ARCH_LIST")?.to_string_lossy();
    let mut archs: Vec<(u32, u32, String)> = list
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| {
            let (major, minor) = s.split_once('.').unwrap_or((s, ""));
            let digits: String = minor.chars().take_while(char::is_ascii_digit).collect();
            (
                major.parse().unwrap_or(0),
                digits.parse().unwrap_or(0),
                s.replace('.', ""),
            )
        })
        .collect();
    if archs.is_empty() {
        return None;
    }
    archs.sort();
    Some(
        archs
            .into_iter()
            .map(|(_, _, s)| s)
            .collect::<Vec<_>>()
            .join("_"),
    )
}
