//! Where the cache lives: vLLM's autotune root, FlashInfer's managed store
//! and the architecture component, from the child's environment.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// First value of `name` in `env` (as `getenv` sees it), set or not.
fn getenv<'a>(env: &'a [(OsString, OsString)], name: &str) -> Option<&'a OsStr> {
    env.iter()
        .find(|(k, _)| k.as_bytes() == name.as_bytes())
        .map(|(_, v)| v.as_os_str())
}

/// A value that is set and not empty (the first of `name`, as `getenv`
/// sees it).
pub fn nonempty<'a>(env: &'a [(OsString, OsString)], name: &str) -> Option<&'a OsStr> {
    getenv(env, name).filter(|v| !v.is_empty())
}

/// Why a cache location cannot be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RootError {
    /// `~` must be expanded, `HOME` is not set and the user has no entry in
    /// the password database (Python would leave `~` as written).
    #[error("{var} needs HOME to expand `~`; HOME is not set and this user has no password-database entry")]
    NoHome { var: &'static str },
    /// `~user` names a user the password database does not have.
    #[error("{var} starts with `~user`, a user the password database does not have")]
    OtherUser { var: &'static str },
}

/// The password database, as [`crate::launch::home::passwd_home`] reads it
/// (a parameter: these functions stay pure).
pub type Passwd<'a> = &'a dyn Fn(Option<&[u8]>) -> Option<PathBuf>;

/// Python's `os.path.expanduser` with `HOME` from `env`, else `passwd` (see
/// [`crate::launch::home`]).
fn expanduser(
    path: &OsStr,
    env: &[(OsString, OsString)],
    passwd: Passwd,
    var: &'static str,
) -> Result<PathBuf, RootError> {
    crate::launch::home::expanduser(path, getenv(env, "HOME"), passwd).ok_or(
        if path.as_bytes().starts_with(b"~/") || path.as_bytes() == b"~" {
            RootError::NoHome { var }
        } else {
            RootError::OtherUser { var }
        },
    )
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
/// directory, returned relative), and `~` is expanded as Python does
/// (`HOME`, else the password database: `passwd`).
pub fn autotune_root(
    env: &[(OsString, OsString)],
    passwd: Passwd,
) -> Result<AutotuneRoot, RootError> {
    const OVERRIDE: &str = "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR";
    if let Some(dir) = nonempty(env, OVERRIDE) {
        return expanduser(dir, env, passwd, OVERRIDE).map(AutotuneRoot::Override);
    }
    let root = match getenv(env, "VLLM_CACHE_ROOT") {
        Some(v) => expanduser(v, env, passwd, "VLLM_CACHE_ROOT")?,
        None => {
            let base = match getenv(env, "XDG_CACHE_HOME") {
                Some(x) => expanduser(x, env, passwd, "XDG_CACHE_HOME")?,
                None => expanduser(OsStr::new("~/.cache"), env, passwd, "HOME")?,
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
pub fn managed_store_root(
    env: &[(OsString, OsString)],
    passwd: Passwd,
) -> Result<PathBuf, RootError> {
    const OVERRIDE: &str = "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR";
    if let Some(dir) = nonempty(env, OVERRIDE) {
        return expanduser(dir, env, passwd, OVERRIDE);
    }
    if let Some(dir) = nonempty(env, "FLASHINFER_AUTOTUNE_CACHE_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let base = match getenv(env, "FLASHINFER_WORKSPACE_BASE") {
        Some(b) => PathBuf::from(b),
        None => expanduser(OsStr::new("~"), env, passwd, "HOME")?,
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
