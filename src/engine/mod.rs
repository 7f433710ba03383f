//! The engine seam: what differs between the engines keepwrap fronts
//! (SGLang, vLLM, TensorRT-LLM), each in its own folder behind one trait,
//! picked by one match on the profile ([`of`]). Each folder's `launch/`
//! reads its engine's command line; [`fingerprint`] holds the launch, read
//! once by the engine it runs, and its fingerprint. The cache root and the layout of its
//! tree, the unify default, the share of a multi-node launch, what the
//! share gives a node before the start, launches left alone, the files
//! kept that must go before the start, what `status` plans for them, and
//! when tuning is done for a server the engine knows.
//! Everything else (prune, the store, sign, done, the policy) is the same
//! machinery for every engine. Adding an engine is one folder here, one
//! arm in [`of`] and one entry in [`ALL`].

pub mod fingerprint;
pub mod flashinfer;
pub mod sglang;
pub mod trtllm;
pub mod vllm;

/// The items `explain` compares of a server launch's canonical inputs.
pub use sglang::explain::{launch_items, strings};

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cache::Shape;
use crate::done::endpoint::Endpoint;
use crate::done::{Done, DoneError, DoneRule};
use crate::engine::fingerprint::{Launch, ProfileName};
use crate::share::Share;
use crate::stops::Stopped;

/// One engine's side of a launch. The defaults are the common case.
pub trait Engine: Sync {
    /// The cache root keepwrap guards (`--cache-dir` if given, else the
    /// engine's own from the engine's environment). Err: why there is none.
    fn root(
        &self,
        cache_dir: Option<&Path>,
        env: &[(OsString, OsString)],
    ) -> Result<PathBuf, NoRoot>;

    /// The cache root of `launch`'s engine: [`Engine::root`] from the
    /// engine's environment, a relative one (`SGLANG_CACHE_DIR=cache`,
    /// `VLLM_CACHE_ROOT=cache`) resolved against the engine's working
    /// directory (`env -C DIR`, a shell's `cd DIR` read logically), which
    /// is where the engine writes, not keepwrap's.
    fn root_of_launch(&self, cache_dir: Option<&Path>, launch: &Launch) -> Result<PathBuf, NoRoot> {
        let root = self.root(cache_dir, &launch.command().env)?;
        Ok(where_the_engine_runs(root, cache_dir, launch))
    }

    /// The layout of the tree below [`Engine::root_of_launch`].
    fn shape_of_launch(&self, _cache_dir: Option<&Path>, launch: &Launch) -> Shape {
        self.shape(&launch.command().env)
    }

    /// The variables keepwrap sets for the engine on top of its own
    /// environment so that the engine writes where keepwrap keeps its
    /// cache (its own directory for a store the engine would otherwise
    /// share between launches); none by default. Never in the fingerprint.
    fn engine_env(&self, _launch: &Launch, _cache_dir: Option<&Path>) -> Vec<(OsString, OsString)> {
        Vec::new()
    }

    /// Whether a process running `argv` (its own command: a console script
    /// run through its shebang shows as the script) runs this engine's
    /// server, as the launch's words would name it.
    fn runs(&self, argv: &[OsString]) -> bool;

    /// The engine's own commands (console scripts), by their file name.
    fn commands(&self) -> &'static [&'static str];

    /// The engine's cache directory, and the variable it derives from,
    /// when `cache_dir` (`--cache-dir`) is neither it nor below it as the
    /// engine's environment `env` defines it and `argv` runs the engine:
    /// the engine then writes elsewhere, and keepwrap would guard a
    /// directory the engine never reads.
    fn outside_cache(
        &self,
        _cache_dir: &Path,
        _argv: &[OsString],
        _env: &[(OsString, OsString)],
    ) -> Option<(PathBuf, &'static str)> {
        None
    }

    /// The layout of the tree below the root, as the engine's environment
    /// makes it.
    fn shape(&self, env: &[(OsString, OsString)]) -> Shape;

    /// The variable the default root came from (`config`), else where `~`
    /// came from.
    fn root_origin(&self, env: &[(OsString, OsString)]) -> &'static str;

    /// Whether `--unify auto` rewrites rank files as their union.
    fn unifies_by_default(&self) -> bool;

    /// Whether the engine's server saves every rank file it loaded again at
    /// every boot, tuned or not (SGLang: a save always follows each pass):
    /// a kept file it did not save again by done is one it refused (its
    /// `_metadata` is for another GPU, CUDA or FlashInfer build, and
    /// FlashInfer skips the save of a file it conflicts with). Said of a
    /// server launch only: a launch script need not save anything.
    fn saves_every_boot(&self, _launch: &Launch) -> bool {
        false
    }

    /// This node's place among the nodes of the launch, as the engine reads
    /// it (for the share and the fleet).
    fn node(&self, launch: &Launch) -> Result<crate::share::Node, String>;

    /// The share of a multi-node launch (`--share DIR`), if it has one, of
    /// the files of a tree of `shape`.
    fn share(
        &self,
        args: &crate::share::Settings,
        launch: &Launch,
        shape: Shape,
        unify: bool,
        max_age: Duration,
    ) -> Option<Share>;

    /// Before the start: what the share gives this node (`kept`: what
    /// prune kept), signed for `fingerprint`; the files signed, if any.
    fn take_share(
        &self,
        share: &Share,
        root: &Path,
        fingerprint: &crate::digest::Fingerprint,
        kept: &[PathBuf],
    ) -> Result<Option<Vec<PathBuf>>, Stopped>;

    /// Whether keepwrap only supervises this launch and leaves its cache as
    /// the engine leaves it; one line says why.
    fn left_alone(&self, _launch: &Launch, _cache_dir: Option<&Path>) -> bool {
        false
    }

    /// Lines to log at the launch, beside the launch's own.
    fn note_launch(&self, _launch: &Launch, _cache_dir: Option<&Path>) {}

    /// What prune must not keep for this launch although it is signed for
    /// it (the reason, given a file's path), so that such a file gets one
    /// line, its removal, rather than `kept` and then `removed`.
    fn refuse_at_prune(&self, _launch: &Launch) -> Option<Refuse> {
        None
    }

    /// Before the start: remove the kept files that would hurt this launch.
    fn before_start(&self, _root: &Path, _launch: &Launch, _kept: &mut Vec<PathBuf>) {}

    /// `--done auto` and a bare `--done health` for a launch that runs a
    /// server the engine knows (SGLang: its `/health`; vLLM: its `/health`,
    /// a headless node's head or rank files); None: the command's exit for
    /// `auto`, [`Engine::health`] for `health`.
    fn server_done(&self, launch: &Launch) -> Option<Result<Done, DoneError>>;

    /// What a bare `--done health` probes when the launch runs no server
    /// the engine knows.
    fn health(&self, launch: &Launch) -> Endpoint;

    /// The rule `--done` gives for this launch.
    fn done(&self, rule: &DoneRule, launch: &Launch) -> Result<Done, DoneError> {
        rule.resolve(
            exit_unproven_why(launch.command()),
            self.server_done(launch),
            self.health(launch),
        )
    }

    /// The flags that tell the nodes or data-parallel ranks of one launch
    /// apart.
    fn rank_flags(&self, _launch: &Launch) -> &'static [&'static str] {
        &sglang::RANK_FLAGS
    }

    /// `(flag, value)` of each of [`Engine::rank_flags`] the engine's own
    /// arguments give (after its prefixes, inside its shell string).
    fn ranks(&self, launch: &Launch) -> Vec<(&'static str, String)> {
        rank_values(&launch.command().argv, self.rank_flags(launch))
    }

    /// `status -- COMMAND`: the plan as this engine changes it (`cache_dir`:
    /// `--cache-dir`, when given).
    fn plan(&self, _report: &mut serde_json::Value, _launch: &Launch, _cache_dir: Option<&Path>) {}

    /// Why `--pin` does not apply to this launch, None when it does (a
    /// store of one file per tuned shape, which the engine never reads
    /// whole again mid-run: the set signed can be put back file by file).
    fn pin_why_not(&self, _launch: &Launch, _cache_dir: Option<&Path>) -> Option<String> {
        Some(PIN_RANK_FILES.to_string())
    }
}

/// Why `--pin` does not apply to a launch whose tactics are in rank files.
pub const PIN_RANK_FILES: &str = "this launch's tactics are in rank files, which the engine saves whole and keepwrap already restores byte for byte at each start; pinning applies to FlashInfer's managed store (a one-rank vLLM 0.33.0 or later launch, an SGLang after 0.5.23 on it)";

/// What a subcommand without a launch lacks when it has no cache root: the
/// settings the default profile's engine derives its root from.
pub const NO_DEFAULT_ROOT: &str = "neither --cache-dir, SGLANG_CACHE_DIR nor HOME is set";

/// Every engine, in the order a command is tried against them.
pub const ALL: [&dyn Engine; 3] = [&sglang::Sglang, &vllm::Vllm, &trtllm::Trtllm];

/// SGLang's cache tree.
pub const SGLANG: Shape = sglang::TREE;
/// vLLM's cache tree below its root.
pub const VLLM_TREE: Shape = vllm::layout::TREE;
/// vLLM's flat folders in its override directory.
pub const VLLM_FLAT: Shape = vllm::layout::FLAT;
/// keepwrap's tree for TensorRT-LLM's cache file.
pub const TRTLLM: Shape = trtllm::TREE;

impl Shape {
    /// Every engine's cache tree: a stored set laid out for another
    /// engine's tree than its store's is judged by its own.
    pub const ALL: [Shape; 5] = [SGLANG, VLLM_TREE, VLLM_FLAT, TRTLLM, flashinfer::STORE];

    /// The tree laid out below `root`, for a subcommand that has no launch
    /// to tell it: `default` when the root holds a top directory of its
    /// tree (or of none, or cannot be read), else the first tree of
    /// [`Shape::ALL`] whose top directory it holds (keepwrap's root of a
    /// managed store holds `v2/`).
    pub fn found_in(root: &Path, default: Shape) -> Shape {
        let Ok(dir) = std::fs::read_dir(root) else {
            return default;
        };
        let tops: Vec<OsString> = dir
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir() || t.is_symlink()))
            .map(|e| e.file_name())
            .collect();
        let holds = |shape: Shape| {
            tops.iter()
                .any(|n| shape.is_layout_dir(0, n.as_encoded_bytes()))
        };
        if holds(default) {
            return default;
        }
        Shape::ALL
            .into_iter()
            .find(|&s| holds(s))
            .unwrap_or(default)
    }
}

/// `root` as the engine of `launch` reads it: a relative one from its
/// environment against the engine's working directory (`env -C DIR`, a
/// shell's `cd`); `--cache-dir` as given.
pub fn where_the_engine_runs(root: PathBuf, cache_dir: Option<&Path>, launch: &Launch) -> PathBuf {
    match (&launch.command().cwd, cache_dir) {
        (Some(cwd), None) if root.is_relative() => cwd.join(root),
        _ => root,
    }
}

/// [`where_the_engine_runs`], absolute (a relative one against keepwrap's
/// working directory): a root keepwrap gives the engine in a variable,
/// which the engine reads from its own working directory.
pub fn for_the_engine(root: PathBuf, cache_dir: Option<&Path>, launch: &Launch) -> PathBuf {
    absolute(where_the_engine_runs(root, cache_dir, launch))
}

/// `dir`, a relative one against keepwrap's working directory.
pub fn absolute(dir: PathBuf) -> PathBuf {
    match std::env::current_dir() {
        Ok(here) if dir.is_relative() => here.join(dir),
        _ => dir,
    }
}

/// Warn when `--cache-dir` is not where the engine writes
/// ([`Engine::outside_cache`]).
pub fn warn_cache_dir(
    engine: &dyn Engine,
    cache_dir: Option<&Path>,
    argv: &[OsString],
    env: &[(OsString, OsString)],
) {
    let Some(dir) = cache_dir else { return };
    if let Some((engine, from)) = engine.outside_cache(dir, argv, env) {
        crate::events::Event::CacheDirNotEngines {
            dir: dir.to_path_buf(),
            engine,
            from: from.to_string(),
        }
        .emit();
    }
}

/// What every engine knows of a command, for the reader in `launch`.
pub const SERVERS: crate::launch::Servers = crate::launch::Servers {
    runs: |argv| ALL.iter().any(|e| e.runs(argv)),
    named_at: |argv, words, i| {
        sglang::launch::named(&words[i..]) || vllm::launch::named(&argv[i..], &words[i..])
    },
    instead: "put the engine command itself after keepwrap -- (python3 -m sglang.launch_server ..., vllm serve ...), behind any of the prefixes keepwrap reads",
};

/// The command `argv` runs in `env`, read through its launcher prefixes,
/// `env` and shell wrappers ([`crate::launch::analyze`]).
pub fn command(argv: &[OsString], env: &[(OsString, OsString)]) -> crate::launch::Command {
    crate::launch::analyze(argv, env, SERVERS)
}

/// `--keep auto`: whether `command` is an engine whose cache is kept: a
/// server an engine reads, or a command an engine's words name (an offline
/// script under a Python interpreter, an engine's entry point), or a shell
/// string that cannot be read but names one. Everything else (`bash`,
/// `sleep`, `nvidia-smi`, a script) is only supervised.
pub fn is_engine(command: &crate::launch::Command) -> bool {
    use crate::launch::{strings, Wrapper};
    if ALL.iter().any(|e| e.runs(&command.argv)) {
        return true;
    }
    let words = strings(&command.argv);
    if let Wrapper::Unreadable(_) = command.wrapper {
        return words.iter().any(|w| {
            w.contains("python")
                || ALL
                    .iter()
                    .any(|e| e.commands().iter().any(|c| w.contains(c)))
        });
    }
    sglang::launch::runs_engine(&words)
}

/// Why the command's exit status may not be the engine's: a launch not
/// read whole that wraps an engine (`sh -c 'python3 ... || true'`),
/// `timeout --preserve-status`. A shell string that names no engine (kept
/// with `--keep always`: a launch script) is the engine itself.
pub fn exit_unproven_why(command: &crate::launch::Command) -> Option<String> {
    match &command.wrapper {
        crate::launch::Wrapper::Unreadable(u) if is_engine(command) => Some(u.why.clone()),
        _ => command.exit_unproven.clone(),
    }
}

/// `(flag, value)` of each rank flag in `argv` (the last one wins), up to a
/// bare `--`.
pub fn rank_values(argv: &[OsString], flags: &[&'static str]) -> Vec<(&'static str, String)> {
    use crate::launch::flags as scan;
    let mut out: Vec<(&'static str, String)> = Vec::new();
    for hit in scan::hits(scan::before_tail(argv), flags, scan::Names::Exact) {
        if let Some(v) = hit.value {
            let flag = flags[hit.flag];
            out.retain(|(f, _)| *f != flag);
            out.push((flag, v.to_string_lossy().into_owned()));
        }
    }
    out.sort();
    out
}

/// Why prune refuses a file signed for the launch (see
/// [`Engine::refuse_at_prune`]), None when it may keep it.
pub type Refuse = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The engine a launch fingerprinted with `profile` (resolved) runs.
pub fn of(profile: ProfileName) -> &'static dyn Engine {
    match profile {
        ProfileName::Vllm => &vllm::Vllm,
        ProfileName::Trtllm => &trtllm::Trtllm,
        ProfileName::Auto | ProfileName::Sglang | ProfileName::Seed => &sglang::Sglang,
    }
}

/// The default cache root of each engine (no `--cache-dir`), as `env`
/// makes it, each once, SGLang's first (TensorRT-LLM's: keepwrap's own,
/// `~/.cache/keepwrap/trtllm`), keepwrap's roots of the managed store
/// (one-rank vLLM launches', SGLang's store version's) last: the roots a
/// subcommand with no command looks at.
pub fn default_roots(env: &[(OsString, OsString)]) -> Vec<PathBuf> {
    default_roots_shaped(env)
        .into_iter()
        .map(|(root, _)| root)
        .collect()
}

/// [`default_roots`], each with the tree its engine lays out there.
fn default_roots_shaped(env: &[(OsString, OsString)]) -> Vec<(PathBuf, Shape)> {
    let mut roots: Vec<(PathBuf, Shape)> = Vec::new();
    let mut add = |root: PathBuf, shape: Shape| {
        if !roots.iter().any(|(r, _)| *r == root) {
            roots.push((root, shape));
        }
    };
    for engine in ALL {
        if let Ok(r) = engine.root(None, env) {
            add(r, engine.shape(env));
        }
    }
    if let Ok(r) = vllm::store::default_root(env) {
        add(r, flashinfer::STORE);
    }
    if let Some(r) = sglang::store::default_root(env) {
        add(r, flashinfer::STORE);
    }
    roots
}

/// The default roots that exist, each with the tree it holds
/// ([`Shape::found_in`]): what `status` with no command, no `--cache-dir`
/// and `--profile auto` shows.
pub fn existing_default_roots(env: &[(OsString, OsString)]) -> Vec<(PathBuf, Shape)> {
    default_roots_shaped(env)
        .into_iter()
        .filter(|(root, _)| root.is_dir())
        .map(|(root, shape)| {
            let shape = Shape::found_in(&root, shape);
            (root, shape)
        })
        .collect()
}

/// Why an engine's cache root cannot be told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoRoot {
    /// Neither `--cache-dir`, the engine's variable nor a home.
    NoHome,
    Vllm(vllm::NoVllmRoot),
}

impl NoRoot {
    /// The line that says why the launch goes on without keeping the cache.
    pub fn log(self) {
        match self {
            NoRoot::NoHome => crate::events::Event::NoCacheRoot {}.emit(),
            NoRoot::Vllm(e) => crate::events::Event::NoVllmCacheRoot {
                error: e.to_string(),
            }
            .emit(),
        }
    }
}

/// Where `~` comes from: `HOME` when set (empty too), else the password
/// database.
fn home_origin(env: &[(OsString, OsString)]) -> &'static str {
    if env.iter().any(|(k, _)| k == "HOME") {
        "HOME"
    } else {
        "passwd"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_flags_in_both_spellings() {
        let argv: Vec<OsString> = [
            "x",
            "--node-rank",
            "1",
            "--data-parallel-rank=3",
            "--",
            "--dp-rank",
            "9",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        assert_eq!(
            rank_values(&argv, &sglang::RANK_FLAGS),
            vec![
                ("--data-parallel-rank", "3".to_string()),
                ("--node-rank", "1".to_string())
            ]
        );
    }

    fn launch(argv: &[&str], env: &[(&str, &str)]) -> Launch {
        Launch::auto(argv, env)
    }

    #[test]
    fn each_engine_reads_its_nodes_as_it_does() {
        use crate::share::Node;
        // vLLM: a data-parallel launch spread over nodes is node 1 of 2,
        // which SGLang's `--nnodes` reader would take for one node
        let argv = ["vllm", "serve", "m", "-dp", "4", "-dpl", "2", "-dpr", "2"];
        let l = launch(&argv, &[]);
        assert_eq!(l.profile(), ProfileName::Vllm);
        assert_eq!(of(l.profile()).node(&l), Ok(Node { nnodes: 2, rank: 1 }));
        let os: Vec<OsString> = argv.iter().map(OsString::from).collect();
        assert_eq!(crate::share::node_of(&os), Ok(Node { nnodes: 1, rank: 0 }));
        // SGLang: its --config file counts
        let t = tempfile::tempdir().unwrap();
        let c = t.path().join("c.yaml");
        std::fs::write(&c, "nnodes: 4\nnode-rank: 3\n").unwrap();
        let c = c.to_str().unwrap();
        let server = ["python3", "-m", "sglang.launch_server", "--model-path", "m"];
        let l = launch(&[&server[..], &["--config", c]].concat(), &[]);
        assert_eq!(of(l.profile()).node(&l), Ok(Node { nnodes: 4, rank: 3 }));
        let l = launch(
            &[&server[..], &["--nnodes", "2", "--node-rank", "2"]].concat(),
            &[],
        );
        assert_eq!(
            of(l.profile()).node(&l),
            Err("--node-rank 2 is out of range for --nnodes 2".to_string())
        );
    }

    #[test]
    fn a_relative_root_is_where_the_engine_runs() {
        let t = tempfile::tempdir().unwrap();
        let w = t.path().join("w");
        std::fs::create_dir_all(&w).unwrap();
        let w = w.to_str().unwrap();
        let script = format!("cd {w} && exec python3 -m sglang.launch_server --model-path m");
        let l = launch(&["sh", "-c", &script], &[("SGLANG_CACHE_DIR", "cache")]);
        let engine = of(l.profile());
        let want = Path::new(w).join("cache/flashinfer/autotune");
        assert_eq!(engine.root_of_launch(None, &l).unwrap(), want);
        // --cache-dir is keepwrap's own, as given
        let given = Path::new("mine");
        assert_eq!(engine.root_of_launch(Some(given), &l).unwrap(), given);
        // env -C, and vLLM's VLLM_CACHE_ROOT
        let l = launch(
            &[
                "env",
                "-C",
                w,
                "VLLM_CACHE_ROOT=cache",
                "vllm",
                "serve",
                "m",
            ],
            &[("HOME", "/h")],
        );
        assert_eq!(l.profile(), ProfileName::Vllm);
        let root = of(l.profile()).root_of_launch(None, &l).unwrap();
        assert!(root.starts_with(Path::new(w).join("cache")), "{root:?}");
        // an absolute root, or no change of directory: as before
        let l = launch(
            &["sh", "-c", &script],
            &[("SGLANG_CACHE_DIR", "/abs"), ("HOME", "/h")],
        );
        assert_eq!(
            of(l.profile()).root_of_launch(None, &l).unwrap(),
            Path::new("/abs/flashinfer/autotune")
        );
        let l = launch(
            &["python3", "-m", "sglang.launch_server"],
            &[("SGLANG_CACHE_DIR", "c")],
        );
        assert_eq!(
            of(l.profile()).root_of_launch(None, &l).unwrap(),
            Path::new("c/flashinfer/autotune")
        );
    }
}
