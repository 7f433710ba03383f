//! SGLang: the root is `$SGLANG_CACHE_DIR/flashinfer/autotune` (else
//! `~/.cache/sglang/flashinfer/autotune`), its stock gate needs the rank
//! files unified, a multi-node launch takes the union of every node's
//! rank files from the share, and a server is done at its first `200` of
//! `/health`.

pub mod explain;
pub mod launch;
pub mod layout;
mod root;
pub mod store;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cache::Shape;
use crate::done::endpoint::{serves_tls, Endpoint};
use crate::done::{Done, DoneError};
use crate::engine::fingerprint::Launch;
use crate::share::Share;
use crate::stops::Stopped;

use super::{Engine, NoRoot};
pub use layout::TREE;

pub struct Sglang;

impl Engine for Sglang {
    /// `--cache-dir`, else `$SGLANG_CACHE_DIR/flashinfer/autotune` from the
    /// engine's environment, else `~/.cache/sglang/flashinfer/autotune`
    /// (`~`: `HOME`, else the password database, as Python expands it).
    fn root(
        &self,
        cache_dir: Option<&Path>,
        env: &[(OsString, OsString)],
    ) -> Result<PathBuf, NoRoot> {
        root::root_from(cache_dir, env).ok_or(NoRoot::NoHome)
    }

    fn outside_cache(
        &self,
        cache_dir: &Path,
        argv: &[OsString],
        env: &[(OsString, OsString)],
    ) -> Option<(PathBuf, &'static str)> {
        root::outside_engine_cache(Some(cache_dir), argv, env)
    }

    fn runs(&self, argv: &[OsString]) -> bool {
        launch::server_of(&crate::launch::strings(argv)).is_some()
    }

    fn commands(&self) -> &'static [&'static str] {
        &["sglang"]
    }

    fn shape(&self, _env: &[(OsString, OsString)]) -> Shape {
        layout::TREE
    }

    fn root_origin(&self, env: &[(OsString, OsString)]) -> &'static str {
        if env.iter().any(|(k, _)| k == "SGLANG_CACHE_DIR") {
            "SGLANG_CACHE_DIR"
        } else {
            super::home_origin(env)
        }
    }

    fn unifies_by_default(&self) -> bool {
        true
    }

    /// Rank files are saved at every boot; the managed store's entries
    /// are written only when tuned.
    fn saves_every_boot(&self, launch: &Launch) -> bool {
        self.runs(&launch.command().argv) && store::store_version(launch).is_none()
    }

    /// A launch on the managed store whose store keepwrap keeps: the
    /// store's root of its own.
    fn root_of_launch(&self, cache_dir: Option<&Path>, launch: &Launch) -> Result<PathBuf, NoRoot> {
        if let store::Managed::Kept { root, .. } = store::managed(launch, cache_dir) {
            return Ok(root);
        }
        let root = Engine::root(self, cache_dir, &launch.command().env)?;
        Ok(super::where_the_engine_runs(root, cache_dir, launch))
    }

    fn shape_of_launch(&self, cache_dir: Option<&Path>, launch: &Launch) -> Shape {
        match store::managed(launch, cache_dir) {
            store::Managed::Kept { .. } => super::flashinfer::STORE,
            _ => layout::TREE,
        }
    }

    fn engine_env(&self, launch: &Launch, cache_dir: Option<&Path>) -> Vec<(OsString, OsString)> {
        store::engine_env(launch, cache_dir)
    }

    fn note_launch(&self, launch: &Launch, cache_dir: Option<&Path>) {
        store::note(launch, cache_dir);
    }

    /// The store's own check of what was kept, for a launch whose store
    /// keepwrap keeps (the root is its own when the launch would keep it
    /// there, were that root its `--cache-dir`).
    fn before_start(&self, root: &Path, launch: &Launch, kept: &mut Vec<PathBuf>) {
        if let store::Managed::Kept { root: own, .. } = store::managed(launch, Some(root)) {
            if own == root {
                super::flashinfer::kept::check_kept(root, kept);
            }
        }
    }

    /// `--nnodes` and `--node-rank` as SGLang reads them: merged with its
    /// `--config` file for a server launch, else from the command line.
    fn node(&self, launch: &Launch) -> Result<crate::share::Node, String> {
        if launch.canonical().is_none() {
            return crate::share::node_of(&launch.command().argv).map_err(|e| e.to_string());
        }
        let read = |flag: &'static str, default: u32| match launch.option(flag) {
            None => Ok(default),
            Some(v) => v
                .parse::<u32>()
                .map_err(|_| crate::share::NodeError::NotANumber { flag, value: v }),
        };
        let node = crate::share::Node {
            nnodes: read("--nnodes", 1).map_err(|e| e.to_string())?,
            rank: read("--node-rank", 0).map_err(|e| e.to_string())?,
        };
        if node.nnodes == 0 || node.rank >= node.nnodes {
            return Err(crate::share::NodeError::OutOfRange {
                rank: node.rank,
                nnodes: node.nnodes,
            }
            .to_string());
        }
        Ok(node)
    }

    fn share(
        &self,
        args: &crate::share::Settings,
        launch: &Launch,
        shape: Shape,
        unify: bool,
        max_age: Duration,
    ) -> Option<Share> {
        if shape == super::flashinfer::STORE {
            // the store's entries are made one set, never unified
            return Share::for_node(
                args,
                || launch.cluster_of(args),
                self.node(launch),
                shape,
                max_age,
            );
        }
        Share::new(
            args,
            || launch.cluster_of(args),
            self.node(launch),
            shape,
            unify,
            max_age,
        )
    }

    /// The union of every node's rank files, written over this node's; on
    /// the managed store, every node's entries made one set, the same on
    /// every node, so that the engine's gate finds them equal.
    fn take_share(
        &self,
        share: &Share,
        root: &Path,
        fingerprint: &crate::digest::Fingerprint,
        kept: &[PathBuf],
    ) -> Result<Option<Vec<PathBuf>>, Stopped> {
        if share.shape() == super::flashinfer::STORE {
            return share.take_same(root, fingerprint, kept);
        }
        share.take_union(root, fingerprint)
    }
    fn server_done(&self, launch: &Launch) -> Option<Result<Done, DoneError>> {
        runs_sglang_server(launch).then(|| Ok(Done::Health(health(launch))))
    }

    fn health(&self, launch: &Launch) -> Endpoint {
        health(launch)
    }

    /// A launch on the managed store whose store keepwrap keeps is pinned
    /// as a one-rank vLLM launch's: one directory of entries. Across
    /// nodes, the set each node pins is the one the share or the fleet
    /// made the same on every node before the start.
    fn pin_why_not(&self, launch: &Launch, cache_dir: Option<&Path>) -> Option<String> {
        match store::managed(launch, cache_dir) {
            store::Managed::Kept { .. } => None,
            store::Managed::Alone { why, .. } => {
                Some(format!("FlashInfer's managed store is left alone ({why})"))
            }
            store::Managed::RankFiles => Some(super::PIN_RANK_FILES.to_string()),
        }
    }
}

/// Does argv run an SGLang server: `python -m sglang.launch_server ...`,
/// `.../sglang/launch_server.py ...` or `sglang serve ...`?
fn is_sglang_server(argv: &[OsString]) -> bool {
    argv.iter().enumerate().any(|(i, arg)| {
        let a = arg.as_encoded_bytes();
        let base = a.rsplit(|&b| b == b'/').next().unwrap_or(a);
        a == b"sglang.launch_server"
            || a.ends_with(b"sglang/launch_server.py")
            || (base == b"sglang" && argv.get(i + 1).is_some_and(|n| n == "serve"))
    })
}

/// Does the launch run an SGLang server: one keepwrap reads (directly,
/// behind launcher prefixes, inside a shell wrapper), or a command naming
/// one that keepwrap cannot read whole (`torchrun ... -m
/// sglang.launch_server ...`, kept only with `--keep always`)?
pub(super) fn runs_sglang_server(launch: &Launch) -> bool {
    launch.canonical().is_some() || is_sglang_server(&launch.command().argv)
}

/// `/health` on the launch's `--host`/`--port` (SGLang's defaults
/// 127.0.0.1 and 30000; a wildcard bind is probed on loopback), over
/// TLS when the launch gives `--ssl-certfile` or `--ssl-keyfile`.
pub(super) fn health(launch: &Launch) -> Endpoint {
    Endpoint::health(
        launch.option("--host").as_deref(),
        launch.option("--port").as_deref(),
        30000,
        serves_tls(|f| launch.option(f)),
    )
}

/// The flags that tell the nodes or data-parallel ranks of one launch apart.
pub const RANK_FLAGS: [&str; 4] = [
    "--node-rank",
    "--data-parallel-rank",
    "--data-parallel-start-rank",
    "--dp-rank",
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::done::DoneRule;

    fn argv(s: &str) -> Vec<OsString> {
        s.split_whitespace().map(OsString::from).collect()
    }

    #[test]
    fn sglang_server_launches_are_recognised() {
        assert!(is_sglang_server(&argv(
            "python3 -m sglang.launch_server --model-path m"
        )));
        assert!(is_sglang_server(&argv(
            "/usr/bin/sglang serve --model-path m"
        )));
        assert!(is_sglang_server(&argv(
            "python /opt/sglang/launch_server.py"
        )));
        assert!(!is_sglang_server(&argv(
            "python3 -m sglang.bench_one_batch --model-path m"
        )));
        assert!(!is_sglang_server(&argv("sglang version")));
    }

    fn launch(s: &str) -> Launch {
        let opts = crate::engine::fingerprint::Options {
            profile: crate::engine::fingerprint::ProfileName::Sglang,
            env_prefixes: vec![],
            volatile_env: vec![],
            ignored_args: vec![],
        };
        let env = [(OsString::from("PORT"), OsString::from("8123"))];
        Launch::new(&opts, &argv(s), &env)
    }

    #[test]
    fn the_launch_endpoint_follows_host_and_port() {
        let ep = |s| health(&launch(s)).to_string();
        assert_eq!(
            ep("python -m sglang.launch_server"),
            "http://127.0.0.1:30000/health"
        );
        assert_eq!(
            ep("x --host 0.0.0.0 --port 8000"),
            "http://127.0.0.1:8000/health"
        );
        assert_eq!(ep("x --host=:: --port=9"), "http://[::1]:9/health");
        assert_eq!(ep("x --host 10.1.2.3"), "http://10.1.2.3:30000/health");
        assert_eq!(ep("x --host fe80::1"), "http://[fe80::1]:30000/health");
        // `type=int`: Python's int() of the text
        assert_eq!(ep("x --port 3_1555"), "http://127.0.0.1:31555/health");
        assert_eq!(ep("x --port=08000"), "http://127.0.0.1:8000/health");
        // uvicorn serves HTTPS with either file
        assert_eq!(
            ep("x --ssl-certfile /c.pem --ssl-keyfile /k.pem"),
            "https://127.0.0.1:30000/health"
        );
        assert_eq!(
            ep("x --ssl-certfile=/both.pem"),
            "https://127.0.0.1:30000/health"
        );
        // server arguments as SGLang reads them, inside a shell wrapper too
        assert_eq!(
            ep("sglang serve /m --port=1 --port 8000 --host=0.0.0.0"),
            "http://127.0.0.1:8000/health"
        );
        let opts = crate::engine::fingerprint::Options {
            profile: crate::engine::fingerprint::ProfileName::Sglang,
            env_prefixes: vec![],
            volatile_env: vec![],
            ignored_args: vec![],
        };
        let wrapped = [
            "sh",
            "-c",
            "exec python3 -m sglang.launch_server --host 10.0.0.2 --port $PORT",
        ]
        .map(OsString::from);
        let env = [(OsString::from("PORT"), OsString::from("8123"))];
        let l = Launch::new(&opts, &wrapped, &env);
        assert_eq!(health(&l).to_string(), "http://10.0.0.2:8123/health");
        assert_eq!(
            Sglang.done(&DoneRule::Auto, &l),
            Ok(Done::Health(health(&l)))
        );
    }
}
