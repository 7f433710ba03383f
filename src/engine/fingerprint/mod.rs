//! The launch fingerprint: which parts of the launch and environment
//! identify it, and their sha256 over Python-compatible canonical JSON.
//!
//! Fingerprint = lowercase sha256 hex of `json.dumps(PAYLOAD,
//! sort_keys=True)` (see [`crate::launch::canonical`]). For an SGLang server launch
//! under the `sglang` profile, PAYLOAD is `{"launch": LAUNCH, "env": env}`,
//! LAUNCH the canonical launch of [`crate::engine::sglang::launch::Canonical`] minus the
//! profile's ignored argument groups. Otherwise (any other command, and the
//! `seed` profile) it is `{"argv": argv, "env": env}`, `argv` the command
//! keepwrap execs (or the command inside a readable `sh -c` string, `sglang`
//! profile) minus the profile's ignored arguments. `env` holds the variables
//! of the child's environment whose name starts with one of the profile's
//! prefixes, minus its volatile names. Bytes that are not UTF-8 count the
//! way Python's `surrogateescape` decodes them, so the `seed` profile
//! reproduces the seed's `launch_fingerprint()` bit for bit.

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{json, Map, Value};

use crate::digest::Fingerprint;
use crate::engine::sglang::launch::{args, args::Group, Canonical};
use crate::engine::trtllm::launch as trtllm;
use crate::engine::vllm::launch::fingerprint as vllm;
use crate::launch::canonical::{self, py_str, Style};
use crate::launch::{self, Wrapper};

mod inputs;
mod profiles;
pub(crate) mod text;

pub(crate) use inputs::script_hash;
use inputs::*;
pub use profiles::*;
use text::*;

pub use crate::launch::{is_secret_name, redacted_hash, value_hash};

/// The fingerprint inputs of one launch.
#[derive(Debug, Clone)]
pub struct Launch {
    profile: ProfileName,
    /// The command line the `argv` form fingerprints: the command as given,
    /// or the command inside a readable shell wrapper (`sglang` profile).
    args: Vec<Arg>,
    /// prefix-selected variables, first occurrence of a name only, in Python
    /// key order
    env: Vec<EnvVar>,
    /// The command as given to keepwrap.
    given: Vec<OsString>,
    command: launch::Command,
    /// An SGLang server launch in canonical form.
    canonical: Option<Canonical>,
    /// The `sglang` profile fingerprints the canonical launch.
    canonical_payload: bool,
    /// A vLLM server launch (`vllm` profile).
    vllm: Option<vllm::VllmLaunch>,
    /// A TensorRT-LLM server launch (`trtllm` profile).
    trtllm: Option<trtllm::TrtllmLaunch>,
    /// The engine package of a server launch and its version (not for the
    /// `seed` profile, nor a command fingerprinted as its argv).
    engine: Option<launch::package::Package>,
    /// The Python script a command fingerprinted as its argv runs (not
    /// for the `seed` profile): its path and the sha256 of its bytes, or
    /// why they cannot be read.
    script: Option<(String, Result<String, String>)>,
    ignored: Ignored,
    fingerprint: Fingerprint,
}

impl Launch {
    /// Select the inputs from the command keepwrap will exec and the
    /// environment the child will get. Relative paths (a config file, a
    /// model directory) are read from the current directory, which the
    /// engine inherits.
    pub fn new(opts: &Options, argv: &[OsString], env: &[(OsString, OsString)]) -> Launch {
        Launch::of(opts, crate::engine::command(argv, env), argv, env)
    }

    /// [`Launch::new`] of a command already read: `command` is
    /// [`launch::analyze`] of `argv` and `env`.
    pub fn of(
        opts: &Options,
        command: launch::Command,
        argv: &[OsString],
        env: &[(OsString, OsString)],
    ) -> Launch {
        let name = opts.profile.resolve(&command);
        let prof = profile(name);
        let seed = name == ProfileName::Seed;

        // Environment: the engine's (after env -i/-u, assignments, export;
        // the innermost assignment first); the first occurrence of a name
        // wins, as with getenv() and Python's os.environ.
        let engine_env = if seed { env } else { &command.env[..] };
        let mut seen = HashSet::new();
        let env: Vec<&(OsString, OsString)> = engine_env
            .iter()
            .filter(|(k, _)| seen.insert(k.as_bytes()))
            .collect();
        let cwd = command.cwd.clone().unwrap_or_else(|| PathBuf::from("."));

        let lookup = |name: &str| {
            env.iter()
                .find(|(k, _)| k.as_bytes() == name.as_bytes())
                .map(|(_, v)| String::from_utf8_lossy(v.as_bytes()).into_owned())
        };
        let is_vllm = name == ProfileName::Vllm;
        let canonical = (!is_vllm && name != ProfileName::Trtllm)
            .then(|| crate::engine::sglang::launch::server_of(&launch::strings(&command.argv)))
            .flatten()
            .map(|s| Canonical::new(&s, &cwd, &lookup));
        let vllm = if is_vllm {
            vllm::VllmLaunch::new(&command.argv, &command.wrapper, &cwd, &lookup)
        } else {
            None
        };
        let trtllm = if name == ProfileName::Trtllm {
            trtllm::TrtllmLaunch::new(&command.argv, &cwd, trtllm::machine_gpus())
        } else {
            None
        };
        let canonical_payload = !seed && canonical.is_some();
        let package = if vllm.is_some() {
            Some("vllm")
        } else if trtllm.is_some() {
            Some(trtllm::PACKAGE)
        } else if canonical_payload {
            Some("sglang")
        } else {
            None
        };
        // `trtllm-serve` itself, behind any launcher of its ranks
        let runs = trtllm
            .as_ref()
            .and_then(|_| trtllm::recognise(&command.argv))
            .map_or(&command.argv[..], |r| &command.argv[r.serve_at..]);
        let engine = package.map(|p| launch::package::find(p, runs, &lookup, &cwd));
        // an unreadable shell string's variables count, whatever their names
        let names: &[String] = if seed { &[] } else { &command.names };
        let env = selected_env(prof, opts, env, names);

        // Arguments.
        let ignored = ignored_flags(prof, opts, is_vllm);
        let words = if seed || matches!(command.wrapper, Wrapper::Direct | Wrapper::Unreadable(_)) {
            argv
        } else {
            &command.argv[..]
        };
        let args = marked_args(words, &ignored);
        // an offline script: what it runs is in its bytes
        let script = if seed
            || canonical_payload
            || vllm.is_some()
            || trtllm.is_some()
            || matches!(command.wrapper, Wrapper::Unreadable(_))
        {
            None
        } else {
            launch::script_of(&launch::strings(&command.argv))
                .map(|s| (s.to_string(), script_hash(&cwd.join(s))))
        };

        let mut launch = Launch {
            profile: name,
            vllm,
            trtllm,
            engine,
            script,
            args,
            env,
            given: argv.to_vec(),
            canonical_payload,
            canonical,
            command,
            ignored: Ignored::new(&ignored),
            fingerprint: Fingerprint::default(),
        };
        launch.fingerprint = launch.payload_hash(&[], false, &[]);
        launch
    }

    /// sha256 of the payload, leaving out the variables named in
    /// `node_local`, with `cluster` the node rank, and the flags `also`
    /// (with their values) as `--ignore-arg` would.
    fn payload_hash(&self, node_local: &[String], cluster: bool, also: &[&str]) -> Fingerprint {
        let also: Vec<(String, ArgKind)> = also
            .iter()
            .map(|f| (f.to_string(), ArgKind::Value))
            .collect();
        let mut env_json = Map::new();
        for e in self.env.iter().filter(|e| {
            !e.volatile && !node_local.iter().any(|n| n.as_bytes() == e.name.as_bytes())
        }) {
            env_json.insert(
                py_str(e.name.as_bytes()),
                Value::String(py_str(e.value.as_bytes())),
            );
        }
        let engine = self.engine.as_ref().map(launch::package::Package::to_json);
        if let Some(v) = &self.vllm {
            let mut payload = vllm::payload(v, env_json);
            if let Some(e) = engine {
                payload["vllm"]["engine"] = e;
            }
            return Fingerprint::of(&canonical::value_to_python_json(&payload, Style::CANONICAL));
        }
        if let Some(t) = &self.trtllm {
            let payload = trtllm::payload(t, engine, env_json);
            return Fingerprint::of(&canonical::value_to_python_json(&payload, Style::CANONICAL));
        }
        let payload = match (&self.canonical, self.canonical_payload) {
            (Some(c), true) => {
                let also = Ignored::new(&also);
                let drop = |g: &Group| {
                    self.ignored.contains(g)
                        || also.contains(g)
                        || (cluster && g.known && g.key == "node_rank")
                };
                let mut l = c.to_json(&drop);
                if let Some(e) = engine {
                    l["engine"] = e;
                }
                json!({ "launch": l, "env": env_json })
            }
            _ => {
                let mut args = std::borrow::Cow::Borrowed(&self.args);
                if !also.is_empty() {
                    mark_ignored(args.to_mut(), &also);
                }
                let drop = if cluster {
                    node_rank_tokens(&args)
                } else {
                    vec![false; args.len()]
                };
                let argv_json: Vec<Value> = args
                    .iter()
                    .zip(&drop)
                    .filter(|(a, dropped)| !a.ignored && !**dropped)
                    .map(|(a, _)| Value::String(py_str(a.raw.as_bytes())))
                    .collect();
                let mut p = json!({ "argv": argv_json, "env": env_json });
                if let Some((_, Ok(sha))) = &self.script {
                    p["script"] = Value::String(sha.clone());
                }
                // a readable prefix or shell that changes directory: where
                // the command runs is part of what it means
                if let (Some(cwd), false) = (&self.command.cwd, self.profile == ProfileName::Seed) {
                    p["cwd"] = Value::String(py_str(cwd.as_os_str().as_bytes()));
                }
                p
            }
        };
        Fingerprint::of(&canonical::value_to_python_json(&payload, Style::CANONICAL))
    }

    /// Lowercase sha256 hex.
    pub fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }

    /// The command as given to keepwrap.
    pub fn argv(&self) -> &[OsString] {
        &self.given
    }

    /// The command, understood.
    pub fn command(&self) -> &launch::Command {
        &self.command
    }

    /// The SGLang server launch in canonical form, if the command is one
    /// (not an offline benchmark read with the server's arguments).
    pub fn canonical(&self) -> Option<&Canonical> {
        self.canonical
            .as_ref()
            .filter(|c| c.server.entry.is_server())
    }

    /// The Python script the command runs and the sha256 of its bytes (or
    /// why they cannot be read), for a command fingerprinted as its argv.
    pub fn script(&self) -> Option<(&str, Result<&str, &str>)> {
        self.script.as_ref().map(|(p, h)| {
            (
                p.as_str(),
                h.as_ref().map(String::as_str).map_err(String::as_str),
            )
        })
    }

    /// The vLLM server launch, if the command is one (`vllm` profile).
    pub fn vllm(&self) -> Option<&vllm::VllmLaunch> {
        self.vllm.as_ref()
    }

    /// The TensorRT-LLM server launch, if the command is one (`trtllm`
    /// profile).
    pub fn trtllm(&self) -> Option<&trtllm::TrtllmLaunch> {
        self.trtllm.as_ref()
    }

    /// The engine package and its version, for a server launch.
    pub fn engine(&self) -> Option<&launch::package::Package> {
        self.engine.as_ref()
    }

    /// The profile this launch was fingerprinted with (`auto` resolved).
    pub fn profile(&self) -> ProfileName {
        self.profile
    }

    /// Why the prediction of this launch cannot be trusted, if so: an input
    /// the fingerprint records as a constant although the engine will read
    /// something (a server launch whose engine package is not found). Such
    /// a launch is never offered a set nor signed under its prediction.
    pub fn unresolved(&self) -> Option<String> {
        let all = self.unresolved_inputs();
        (!all.is_empty()).then(|| all.join("; "))
    }

    /// Each reason of [`Launch::unresolved`].
    pub fn unresolved_inputs(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(e) = &self.engine {
            if let launch::package::Found::NotFound(why) = &e.found {
                out.push(format!("engine {} not found: {why}", e.package));
            }
        }
        if let Some(c) = self.canonical.as_ref().filter(|_| self.canonical_payload) {
            for (opt, desc) in &c.models {
                if let Some(why) = launch::model::unresolved(opt, desc) {
                    let value = args::known(opt).and_then(|o| c.parsed.value(o.dest));
                    out.push(match value {
                        Some(v) => format!("model '{}' ({why})", v.escape_debug()),
                        None => format!("model {why}"),
                    });
                }
            }
        }
        if let Some(why) = self
            .vllm
            .as_ref()
            .and_then(vllm::VllmLaunch::unresolved_model)
        {
            out.push(why);
        }
        if let Some((path, Err(why))) = &self.script {
            out.push(format!(
                "script '{}' cannot be read ({why})",
                path.escape_debug()
            ));
        }
        out
    }

    /// Lines to log once at the launch: a config file that cannot be used, a
    /// shell string that cannot be read.
    pub fn warnings(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .canonical
            .iter()
            .filter(|_| self.canonical_payload)
            .filter_map(Canonical::config_warning)
            .collect();
        if let Wrapper::Unreadable(why) = &self.command.wrapper {
            out.push(format!(
                "the launch cannot be read whole ({why}): it is fingerprinted as written, with the values of the variables it names"
            ));
        }
        out
    }

    /// The value of server option `--FLAG`: the server's merged arguments
    /// (config file included), else `--FLAG VALUE`/`--FLAG=VALUE` in the
    /// command (the last one wins, as with argparse).
    pub fn option(&self, flag: &str) -> Option<String> {
        if let Some(c) = &self.canonical {
            let dest = args::known(flag)?.dest;
            return c.parsed.value(dest).map(str::to_string);
        }
        launch::flags::last_text(self.command.argv.get(1..).unwrap_or(&[]), flag)
    }

    /// The cluster fingerprint: the launch fingerprint's canonical JSON
    /// without what differs between the nodes of one multi-node launch, so
    /// that every node of one engine computes the same value. Leaves out the
    /// `--node-rank` argument (`--node-rank R` and `--node-rank=R`, before a
    /// bare `--`) and the variables named in `node_local`. The launch
    /// fingerprint is unchanged.
    pub fn cluster_fingerprint(&self, node_local: &[String]) -> Fingerprint {
        self.payload_hash(node_local, true, &[])
    }

    /// Who this launch is to the other launches on its root: its nodes or
    /// data-parallel ranks told apart by `flags` (the engine's), `ranks`
    /// being its values of them.
    pub fn identity(
        &self,
        node_local: &[String],
        flags: &[&'static str],
        ranks: &[(&'static str, String)],
    ) -> crate::root::running::Identity {
        // `--node-rank` is left out of the cluster fingerprint already; the
        // data-parallel ranks only when present, from this same reading.
        let also: &[&str] = if ranks.iter().any(|(f, _)| *f != "--node-rank") {
            flags
        } else {
            &[]
        };
        let peer_key = self.payload_hash(node_local, true, also);
        crate::root::running::Identity::new(self.fingerprint.clone(), peer_key, ranks)
    }

    /// [`Launch::cluster_fingerprint`] with the node-local names of `share`.
    pub fn cluster_of(&self, share: &crate::share::Settings) -> String {
        self.cluster_fingerprint(&node_local(share)).into()
    }
}

#[cfg(test)]
impl Launch {
    /// The launch of `argv` in `env` under `--profile auto`.
    pub fn auto(argv: &[&str], env: &[(&str, &str)]) -> Launch {
        let opts = Options {
            profile: ProfileName::Auto,
            env_prefixes: vec![],
            volatile_env: vec![],
            ignored_args: vec![],
        };
        let argv: Vec<OsString> = argv.iter().map(OsString::from).collect();
        let env: Vec<(OsString, OsString)> = env
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect();
        Launch::new(&opts, &argv, &env)
    }
}

/// `keepwrap fingerprint`: print the fingerprint (and with `explain` the
/// inputs, secrets redacted) of the launch of `command` in this environment.
pub fn print(opts: &Options, command: &[OsString], explain: bool) -> ExitCode {
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let launch = Launch::new(opts, command, &env);
    let text = if explain {
        launch.explain()
    } else {
        format!("{}\n", launch.fingerprint())
    };
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("keepwrap: error: writing the fingerprint: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A data-parallel rank's peer key is its cluster fingerprint with the
    /// rank flags ignored as `--ignore-arg` ignores them, made from the one
    /// reading of the launch.
    #[test]
    fn a_peer_key_is_the_cluster_fingerprint_with_the_rank_flags_ignored() {
        let flags = &crate::engine::sglang::RANK_FLAGS;
        for words in [
            "python3 -m sglang.launch_server --tp 2 --dp-rank 1 --node-rank 1 --nnodes 2",
            "python3 -m sglang.launch_server --tp 2 --data-parallel-rank=3",
            "python3 gen.py --data-parallel-rank 1 --x --dp-rank=2 -- --dp-rank 5",
            "sh -c 'exec python3 x.py --dp-rank 4'",
        ] {
            let argv: Vec<OsString> = shell_words(words);
            let mut opts = Options {
                profile: ProfileName::Auto,
                env_prefixes: vec![],
                volatile_env: vec![],
                ignored_args: vec![],
            };
            let launch = Launch::new(&opts, &argv, &[]);
            let ranks = crate::engine::rank_values(&launch.command().argv, flags);
            assert!(!ranks.is_empty(), "{words}");
            let id = launch.identity(&[], flags, &ranks);
            opts.ignored_args = flags.iter().map(|f| f.to_string()).collect();
            let ignored = Launch::new(&opts, &argv, &[]).cluster_fingerprint(&[]);
            assert_eq!(id.peer_key, String::from(ignored), "{words}");
            assert_ne!(
                id.peer_key,
                String::from(launch.cluster_fingerprint(&[])),
                "{words}"
            );
        }
    }

    fn shell_words(s: &str) -> Vec<OsString> {
        match s.strip_prefix("sh -c '") {
            Some(inner) => ["sh", "-c", inner.trim_end_matches('\'')]
                .iter()
                .map(OsString::from)
                .collect(),
            None => s.split(' ').map(OsString::from).collect(),
        }
    }
}
