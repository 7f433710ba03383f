//! SGLang's move to FlashInfer's managed store, written and not released
//! (docs/cache.md, "SGLang on the managed store"): a version after 0.5.23
//! whose `flashinfer_autotune.py` uses FlashInfer's store module keeps its
//! tactics in `<root>/v2/<env16>/entries/`, root
//! `$FLASHINFER_AUTOTUNE_CACHE_DIR`, else
//! `$SGLANG_CACHE_DIR/flashinfer/autotune`, shared by every model and
//! launch of one environment. Its entry gate digests every entry file of
//! the environment on every rank, and on any disagreement every rank
//! deletes all of them.
//!
//! keepwrap gives such a launch a store root of its own,
//! `FLASHINFER_AUTOTUNE_CACHE_DIR` set for the engine to `--cache-dir` or
//! `$SGLANG_CACHE_DIR/keepwrap-flashinfer-store`, and keeps it there as it
//! keeps rank files: pruned to this launch's set before the start, signed
//! at done, other launches' sets in the store. Every rank of a node writes
//! the one store directory, so a node's set is whole; the share makes every
//! node's set the same before the start, so the gate never deletes it.
//!
//! No released SGLang (0.5.23 and before) is read as this version: its
//! launches keep their rank files exactly as before.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::engine::fingerprint::Launch;
use crate::launch::package::Found;

/// FlashInfer's variable for the store's root, which this SGLang reads.
pub const VAR: &str = "FLASHINFER_AUTOTUNE_CACHE_DIR";
/// keepwrap's store root beside `flashinfer/` in SGLang's cache directory.
pub const OWN_DIR: &str = "keepwrap-flashinfer-store";
/// The last release that keeps rank files (the newest one read).
const LAST_RANK_FILE_RELEASE: (u64, u64, u64) = (0, 5, 23);
/// The module of the SGLang package that runs its autotune passes.
pub const STORE_MODULE: &str = "srt/model_executor/runner/flashinfer_autotune.py";
/// What that module holds when it uses FlashInfer's managed store: an
/// import of FlashInfer's store module (`flashinfer/autotune_cache.py`), a
/// statement at the start of a line (a comment or a string that names the
/// module is not one).
const STORE_IMPORTS: [&[u8]; 3] = [
    b"from flashinfer.autotune_cache import",
    b"import flashinfer.autotune_cache",
    b"from flashinfer import autotune_cache",
];
/// SGLang's switch that turns the reuse of tuned tactics off.
const CACHE_SWITCH: &str = "SGLANG_FLASHINFER_AUTOTUNE_CACHE";

/// What keepwrap does with an SGLang launch's tactics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Managed {
    /// Not the store version: rank files, as before.
    RankFiles,
    /// Kept in this root, keepwrap's own (absolute).
    Kept { root: PathBuf, version: String },
    /// Left alone: the store's root as the engine will find it, and why.
    Alone {
        store: String,
        version: String,
        why: String,
    },
}

/// The version of the installed SGLang when it is the store version: after
/// 0.5.23 by its metadata, and its [`STORE_MODULE`] beside the metadata
/// names FlashInfer's store ([`STORE_MARKER`]). None for every other
/// install (a release, an editable checkout, a package without metadata).
pub fn store_version(launch: &Launch) -> Option<String> {
    let pkg = launch.engine().filter(|p| p.package == "sglang")?;
    let Found::Version {
        version,
        dist_info,
        editable: None,
    } = &pkg.found
    else {
        return None;
    };
    if !after_last_release(version) {
        return None;
    }
    let module = dist_info.parent()?.join("sglang").join(STORE_MODULE);
    marks_store(&module).then(|| version.clone())
}

/// Whether the module at `module` imports FlashInfer's store
/// ([`STORE_IMPORTS`]), read once per path in a process: a launch asks at
/// each of its engine's questions (its root, its layout, the engine's
/// variables, the check before the start, `--pin`), and its package does
/// not change under it.
fn marks_store(module: &Path) -> bool {
    static READ: Mutex<Vec<(PathBuf, bool)>> = Mutex::new(Vec::new());
    let known = READ
        .lock()
        .ok()
        .and_then(|r| r.iter().find(|(p, _)| p == module).map(|(_, m)| *m));
    if let Some(marks) = known {
        return marks;
    }
    let marks = read_marks_store(module);
    if let Ok(mut r) = READ.lock() {
        r.push((module.to_path_buf(), marks));
    }
    marks
}

/// [`marks_store`], read now: a line of a regular file's first 4 MiB
/// imports the store.
fn read_marks_store(module: &Path) -> bool {
    let Ok(f) = crate::launch::open_regular(module) else {
        return false;
    };
    let mut text = Vec::new();
    if std::io::Read::read_to_end(&mut std::io::Read::take(f, 4 << 20), &mut text).is_err() {
        return false;
    }
    imports_store(&text)
}

/// Whether a line of `text` is an import of FlashInfer's store: one of
/// [`STORE_IMPORTS`] after the line's indentation, followed by a space, a
/// comma, a dot (a name below the module) or the end of the line.
fn imports_store(text: &[u8]) -> bool {
    text.split(|&b| b == b'\n').any(|line| {
        let line = line.trim_ascii_start();
        STORE_IMPORTS.iter().any(|i| {
            line.strip_prefix(*i).is_some_and(|rest| {
                matches!(
                    rest.first(),
                    None | Some(b' ' | b'\t' | b'\r' | b',' | b'.')
                )
            })
        })
    })
}

/// A version after 0.5.23: its first three numbers (`0.5.24`, `0.6.0rc1`,
/// `0.5.24.dev3`), a missing patch 0. Several versions (two
/// `*.dist-info`), or none that parses: no.
fn after_last_release(version: &str) -> bool {
    if version.contains(' ') {
        return false;
    }
    let mut parts = version.split(|c: char| !c.is_ascii_digit());
    let mut num = || parts.next().and_then(|p| p.parse::<u64>().ok());
    match (num(), num()) {
        (Some(major), Some(minor)) => (major, minor, num().unwrap_or(0)) > LAST_RANK_FILE_RELEASE,
        _ => false,
    }
}

/// What keepwrap does with `launch`'s tactics, given `--cache-dir`.
pub fn managed(launch: &Launch, cache_dir: Option<&Path>) -> Managed {
    let Some(version) = store_version(launch) else {
        return Managed::RankFiles;
    };
    let env = &launch.command().env[..];
    let theirs = nonempty(env, VAR).map(PathBuf::from);
    let alone = |store: String, why: String| Managed::Alone {
        store,
        version: version.clone(),
        why,
    };
    let own = match own_root(launch, cache_dir) {
        Some(own) => own,
        None => {
            return alone(
                theirs.map_or_else(|| "unknown".into(), |p| p.display().to_string()),
                "SGLang's cache directory cannot be told (neither SGLANG_CACHE_DIR nor a home)"
                    .into(),
            )
        }
    };
    if nonempty(env, CACHE_SWITCH).is_some_and(|v| {
        matches!(
            v.to_string_lossy().trim().to_ascii_lowercase().as_str(),
            "0" | "false" | "off" | "no"
        )
    }) {
        return alone(
            theirs.map_or_else(|| "a new directory every run".into(), |p| p.display().to_string()),
            format!("{CACHE_SWITCH} is off: the engine tunes into a directory of its own every run and reuses nothing"),
        );
    }
    match theirs {
        None => Managed::Kept { root: own, version },
        Some(t) if t == own || crate::engine::for_the_engine(t.clone(), None, launch) == own => {
            Managed::Kept { root: own, version }
        }
        Some(t) => alone(
            t.display().to_string(),
            format!(
                "{VAR} is set for the engine; keepwrap keeps the store only in a directory of its own (unset {VAR} to have it kept per launch)"
            ),
        ),
    }
}

/// The variables the engine is started with: the store's root, unless the
/// launch's environment already names it.
pub fn engine_env(launch: &Launch, cache_dir: Option<&Path>) -> Vec<(OsString, OsString)> {
    match managed(launch, cache_dir) {
        Managed::Kept { root, .. }
            if nonempty(&launch.command().env, VAR) != Some(root.as_os_str()) =>
        {
            vec![(VAR.into(), root.into_os_string())]
        }
        _ => Vec::new(),
    }
}

/// keepwrap's store root of SGLang's store version when no `--cache-dir`
/// is given, as `env` makes it: `keepwrap-flashinfer-store` in SGLang's
/// cache directory (`$SGLANG_CACHE_DIR`, else `~/.cache/sglang`); None
/// without either. A root a subcommand with no command looks at.
pub fn default_root(env: &[(OsString, OsString)]) -> Option<PathBuf> {
    let tree = super::root::root_from(None, env)?;
    Some(crate::engine::absolute(
        tree.parent()?.parent()?.join(OWN_DIR),
    ))
}

/// keepwrap's store root for `launch`: `--cache-dir` (relative to
/// keepwrap's directory), else `keepwrap-flashinfer-store` in SGLang's
/// cache directory (`$SGLANG_CACHE_DIR`, else `~/.cache/sglang`), a
/// relative one against the engine's working directory; absolute
/// ([`crate::engine::for_the_engine`]: the engine is given it).
fn own_root(launch: &Launch, cache_dir: Option<&Path>) -> Option<PathBuf> {
    if let Some(dir) = cache_dir {
        return Some(crate::engine::for_the_engine(
            dir.to_path_buf(),
            cache_dir,
            launch,
        ));
    }
    let env: Vec<(OsString, OsString)> = launch
        .command()
        .env
        .iter()
        .filter(|(k, _)| k != VAR)
        .cloned()
        .collect();
    // `<SGLANG_CACHE_DIR>/flashinfer/autotune`
    let tree = super::root::root_from(None, &env)?;
    let sglang = tree.parent()?.parent()?;
    Some(crate::engine::for_the_engine(
        sglang.join(OWN_DIR),
        None,
        launch,
    ))
}

fn nonempty<'a>(env: &'a [(OsString, OsString)], name: &str) -> Option<&'a std::ffi::OsStr> {
    crate::engine::vllm::launch::nonempty(env, name)
}

/// One line at the launch: where the store is kept, or why it is left
/// alone; nothing for a launch that keeps rank files.
pub fn note(launch: &Launch, cache_dir: Option<&Path>) {
    match managed(launch, cache_dir) {
        Managed::RankFiles => {}
        Managed::Kept { root, version } => crate::events::Event::SglangStoreKept {
            store: root.join("v2"),
            var: VAR.to_string(),
            version,
        }
        .emit(),
        Managed::Alone {
            store,
            version,
            why,
        } => crate::events::Event::SglangStoreLeft {
            store,
            version,
            why,
        }
        .emit(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_module_is_read_once_per_path() {
        let dir = tempfile::tempdir().unwrap();
        let (on, off) = (dir.path().join("on.py"), dir.path().join("off.py"));
        std::fs::write(&on, b"from flashinfer.autotune_cache import X\n").unwrap();
        std::fs::write(&off, b"import flashinfer\n").unwrap();
        assert!(marks_store(&on));
        assert!(!marks_store(&off));
        assert!(!marks_store(&dir.path().join("missing.py")));
        // what was read first is the answer for the rest of the launch
        std::fs::remove_file(&on).unwrap();
        std::fs::write(&off, b"from flashinfer.autotune_cache import X\n").unwrap();
        assert!(marks_store(&on));
        assert!(!marks_store(&off));
    }

    #[test]
    fn only_an_import_of_the_store_reads_as_the_store_version() {
        for yes in [
            "from flashinfer.autotune_cache import ManagedAutotuneCache\n",
            "import os\n    from flashinfer.autotune_cache import (\n  X,\n)\n",
            "import flashinfer.autotune_cache as fac\n",
            "import flashinfer.autotune_cache\r\n",
            "from flashinfer import autotune_cache, autotuner\n",
        ] {
            assert!(imports_store(yes.as_bytes()), "{yes:?}");
        }
        for no in [
            "# from flashinfer.autotune_cache import ManagedAutotuneCache\n",
            "x = 'flashinfer.autotune_cache'\n",
            "import flashinfer.autotune_cache_old\n",
            "from flashinfer.autotune_cacher import X\n",
            "import flashinfer\n",
            "",
        ] {
            assert!(!imports_store(no.as_bytes()), "{no:?}");
        }
    }

    #[test]
    fn only_versions_after_the_last_release_read() {
        for v in [
            "0.5.24",
            "0.5.24rc1",
            "0.5.24.dev3",
            "0.6",
            "0.6.0",
            "1.0.0",
        ] {
            assert!(after_last_release(v), "{v}");
        }
        for v in [
            "0.5.23",
            "0.5.23.post1",
            "0.5.9",
            "0.4.99",
            "dev",
            "",
            "0.5.24 0.5.23",
        ] {
            assert!(!after_last_release(v), "{v}");
        }
    }
}
