//! Where SGLang keeps its autotune cache: the root it derives from its
//! environment, and whether a `--cache-dir` is where it writes.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::root::place::normal;

/// The cache root: `--cache-dir`, else `$SGLANG_CACHE_DIR/flashinfer/autotune`
/// from the child's environment (set but empty: `flashinfer/autotune`,
/// relative to the engine's working directory, as SGLang reads it), else `~/.cache/sglang/flashinfer/autotune`
/// with `~` expanded as SGLang's Python does (`os.path.expanduser`: `HOME`
/// when set, empty too, else the password database's home of the user the
/// engine runs as, see [`crate::launch::home`]). None: neither `HOME` nor
/// an entry.
pub fn root_from(cache_dir: Option<&Path>, env: &[(OsString, OsString)]) -> Option<PathBuf> {
    if let Some(dir) = cache_dir {
        return Some(dir.to_path_buf());
    }
    // SGLang's EnvStr: set (empty too) is the value, not expanded; an empty
    // one makes the root relative to the engine's working directory
    let sglang = match env.iter().find(|(k, _)| k == "SGLANG_CACHE_DIR") {
        Some((_, v)) => PathBuf::from(v),
        None => {
            let home = env
                .iter()
                .find(|(k, _)| k == "HOME")
                .map(|(_, v)| v.as_os_str());
            crate::launch::home::expanduser(
                std::ffi::OsStr::new("~/.cache/sglang"),
                home,
                &crate::launch::home::passwd_home,
            )?
        }
    };
    Some(sglang.join("flashinfer/autotune"))
}

/// Does the command run SGLang (an argument naming it: `sglang.launch_server`,
/// `sglang serve`, `.../sglang/launch_server.py`, `sglang.bench_one_batch`)?
fn runs_sglang(argv: &[OsString]) -> bool {
    argv.iter()
        .any(|a| a.to_string_lossy().to_ascii_lowercase().contains("sglang"))
}

/// The engine's cache directory, and the variable it derives from, when
/// `--cache-dir` is neither it nor below it as the child's environment
/// defines it and the command runs SGLang: the engine then writes elsewhere,
/// and keepwrap would guard a directory the engine never reads.
pub fn outside_engine_cache(
    cache_dir: Option<&Path>,
    argv: &[OsString],
    env: &[(OsString, OsString)],
) -> Option<(PathBuf, &'static str)> {
    let dir = cache_dir?;
    if !runs_sglang(argv) {
        return None;
    }
    let engine = root_from(None, env)?;
    if normal(dir).starts_with(normal(&engine)) {
        return None;
    }
    let from = if env.iter().any(|(k, _)| k == "SGLANG_CACHE_DIR") {
        "$SGLANG_CACHE_DIR/flashinfer/autotune"
    } else {
        "~/.cache/sglang/flashinfer/autotune"
    };
    Some((engine, from))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sglang() -> Vec<OsString> {
        ["python3", "-m", "sglang.launch_server"]
            .map(OsString::from)
            .to_vec()
    }

    #[test]
    fn only_an_sglang_command_is_checked() {
        let e = env(&[("HOME", "/nonexistent/home")]);
        let other = ["python3", "serve.py"].map(OsString::from).to_vec();
        assert_eq!(
            outside_engine_cache(Some(Path::new("/c")), &other, &e),
            None
        );
        let serve = ["sglang", "serve"].map(OsString::from).to_vec();
        assert!(outside_engine_cache(Some(Path::new("/c")), &serve, &e).is_some());
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(k, v)| (k.into(), v.into())).collect()
    }

    #[test]
    fn cache_dir_under_the_engine_directory_is_quiet() {
        let e = env(&[("SGLANG_CACHE_DIR", "/nonexistent/c")]);
        for ok in [
            "/nonexistent/c/flashinfer/autotune",
            "/nonexistent/c/flashinfer/autotune/",
            "/nonexistent/c/./flashinfer/autotune/0.7.2",
            "/nonexistent/x/../c/flashinfer/autotune",
        ] {
            assert_eq!(
                outside_engine_cache(Some(Path::new(ok)), &sglang(), &e),
                None,
                "{ok}"
            );
        }
        assert_eq!(outside_engine_cache(None, &sglang(), &e), None);
        // no HOME: the password database's home, as Python's expanduser
        let pw = crate::launch::home::passwd_home(None).unwrap();
        assert_eq!(
            outside_engine_cache(Some(Path::new("/x")), &sglang(), &[]),
            Some((
                pw.join(".cache/sglang/flashinfer/autotune"),
                "~/.cache/sglang/flashinfer/autotune"
            ))
        );
    }

    #[test]
    fn cache_dir_elsewhere_warns_naming_both() {
        let e = env(&[("HOME", "/nonexistent/home")]);
        let (engine, from) =
            outside_engine_cache(Some(Path::new("/cache/pod-1")), &sglang(), &e).unwrap();
        assert_eq!(
            engine,
            Path::new("/nonexistent/home/.cache/sglang/flashinfer/autotune")
        );
        assert_eq!(from, "~/.cache/sglang/flashinfer/autotune");
        let e = env(&[("SGLANG_CACHE_DIR", "/nonexistent/c"), ("HOME", "/h")]);
        let (_, from) =
            outside_engine_cache(Some(Path::new("/nonexistent/c")), &sglang(), &e).unwrap();
        assert_eq!(from, "$SGLANG_CACHE_DIR/flashinfer/autotune");
        // A prefix of the name is not a parent directory.
        let w = outside_engine_cache(
            Some(Path::new("/nonexistent/c/flashinfer/autotune2")),
            &sglang(),
            &e,
        );
        assert!(w.is_some());
    }
}
