//! The fingerprint of a vLLM server launch (`vllm` profile): its engine
//! arguments in canonical form minus the front-end and per-node ones, the
//! bytes of its `--config` file, what the fingerprint covers of its model
//! (the `config.json`, as for SGLang), and the profile's environment.
//!
//! Canonical form of the engine arguments, as vLLM's parser reads them:
//! `--long_name` is `--long-name`; `--flag=value` is `--flag value` (when
//! the value does not start with `-`); a short alias is its long name
//! (`-tp` is `--tensor-parallel-size`); `vllm serve MODEL` is `--model MODEL`
//! (the serve command moves `--model` there itself). Otherwise the order is
//! kept: without vLLM's whole argument table, two launches agree only when
//! their tokens do (a reordering costs one tuning boot, never a wrong
//! cache).
//!
//! PAYLOAD = `{"vllm": {"entry", "args", "models", "config"?}, "env": ENV}`.

use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use serde_json::{json, Map, Value};

use crate::engine::sglang::launch::config;
use crate::engine::vllm::launch::{self as facts, ArgRole, Entrypoint, ParallelSizes};
use crate::launch::canonical::py_str;
use crate::launch::{is_secret_name, redacted_hash};
use crate::launch::{model, Wrapper};

/// One canonical engine argument.
#[derive(Debug, Clone)]
struct Tok {
    text: OsString,
    role: ArgRole,
    /// The value of a secret-named flag (shown only as a hash).
    secret: bool,
}

/// A vLLM server launch, understood.
#[derive(Debug, Clone)]
pub struct VllmLaunch {
    pub entry: Entrypoint,
    pub wrapper: Wrapper,
    toks: Vec<Tok>,
    /// `--config FILE`: the path as written, and the sha256 of its bytes
    /// (None: unreadable).
    pub config: Option<(String, Option<String>)>,
    /// The model's value and what the fingerprint records of it.
    pub model: Option<(String, Value)>,
    /// Arguments that may be the model (after an option vLLM 0.33.0 does
    /// not know, whose value count is unknown), described the same way.
    maybe_models: Vec<(String, Value)>,
    /// The other files the engine builds the model from, by option
    /// ([`vllm_files`]).
    files: Vec<(&'static str, Value)>,
    /// The engine arguments with the config file's keys in front (as vLLM
    /// inserts them): what the parallel sizes and the port are read from.
    merged: Vec<OsString>,
}

/// vLLM's short aliases (`vllm/engine/arg_utils.py`): a canonical launch
/// spells each by its long name, so `-tp 2` is `--tensor-parallel-size 2`.
const SHORT_ALIASES: &[(&str, &str)] = &[
    ("-tp", "--tensor-parallel-size"),
    ("-pp", "--pipeline-parallel-size"),
    ("-dp", "--data-parallel-size"),
    ("-dpn", "--data-parallel-rank"),
    ("-dpr", "--data-parallel-start-rank"),
    ("-dpl", "--data-parallel-size-local"),
    ("-dpa", "--data-parallel-address"),
    ("-dpp", "--data-parallel-rpc-port"),
    ("-dph", "--data-parallel-hybrid-lb"),
    ("-dpe", "--data-parallel-external-lb"),
    ("-ep", "--enable-expert-parallel"),
    ("-pcp", "--prefill-context-parallel-size"),
    ("-n", "--nnodes"),
    ("-r", "--node-rank"),
    ("-q", "--quantization"),
    ("-asc", "--api-server-count"),
];

fn long_name(short: &[u8]) -> Option<&'static str> {
    SHORT_ALIASES
        .iter()
        .find(|(s, _)| s.as_bytes() == short)
        .map(|(_, l)| *l)
}

/// `--flag=value` as vLLM's parser sees it: the canonical name and the value.
fn split_attached(tok: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    if !tok.starts_with(b"--") {
        return None;
    }
    let eq = tok.iter().position(|&c| c == b'=')?;
    Some((facts::canonical_flag(&tok[..eq]), &tok[eq + 1..]))
}

/// The engine arguments in canonical form: `vllm serve`'s positional model
/// first as `--model MODEL` (wherever the parser takes it), `--config` and
/// its value taken out (returned apart), and the arguments that may be the
/// model too (after an option vLLM 0.33.0 does not know).
struct Canon {
    toks: Vec<OsString>,
    config: Option<OsString>,
    maybe_models: Vec<OsString>,
}

fn canonical_tokens(args: &[OsString], entry: Entrypoint) -> Canon {
    let mut out: Vec<OsString> = Vec::with_capacity(args.len() + 1);
    let mut config = None;
    let mut skip = None;
    let mut maybe_models = Vec::new();
    if entry == Entrypoint::Serve {
        let p = facts::model_positional(args);
        if let Some(m) = p.model {
            out.push("--model".into());
            out.push(args[m].clone());
            skip = Some(m);
        }
        maybe_models = p.maybe.iter().map(|&j| args[j].clone()).collect();
    }
    let mut i = 0;
    while i < args.len() {
        if Some(i) == skip {
            i += 1;
            continue;
        }
        let b = args[i].as_bytes();
        if let Some((name, value)) = split_attached(b) {
            if name == b"--config" {
                config = Some(OsStr::from_bytes(value).to_os_string());
            } else if value.starts_with(b"-") {
                let mut t = name;
                t.push(b'=');
                t.extend_from_slice(value);
                out.push(OsString::from_vec(t));
            } else {
                out.push(OsString::from_vec(name));
                out.push(OsStr::from_bytes(value).to_os_string());
            }
            i += 1;
            continue;
        }
        let name = if b.starts_with(b"--") {
            facts::canonical_flag(b)
        } else if let Some(long) = long_name(b) {
            long.as_bytes().to_vec()
        } else {
            b.to_vec()
        };
        if name == b"--config" {
            config = args.get(i + 1).cloned();
            i += 2;
            continue;
        }
        out.push(OsString::from_vec(name));
        i += 1;
    }
    Canon {
        toks: out,
        config,
        maybe_models,
    }
}

impl VllmLaunch {
    /// Why what the fingerprint records of a model cannot be trusted (a
    /// hub id no local cache resolves), if so.
    pub fn unresolved_model(&self) -> Option<String> {
        let model = self
            .model
            .as_ref()
            .map(|(m, d)| ("--model", Some(m.as_str()), d));
        let files = self.files.iter().map(|(o, d)| (*o, None, d));
        model
            .into_iter()
            .chain(files)
            .find_map(|(opt, value, desc)| {
                let why = crate::launch::model::unresolved(opt, desc)?;
                Some(match value {
                    Some(v) => format!("model '{}' ({why})", v.escape_debug()),
                    None => format!("model {why}"),
                })
            })
    }

    /// Understand the vLLM launch `argv` (the command keepwrap runs, or the
    /// one inside a shell wrapper), reading files relative to `cwd` and the
    /// hub cache from `env`. None when `argv` is no vLLM server launch.
    pub fn new(
        argv: &[OsString],
        wrapper: &Wrapper,
        cwd: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Option<VllmLaunch> {
        let l = facts::recognise(argv)?;
        let Canon {
            toks: canon,
            config: config_path,
            maybe_models,
        } = canonical_tokens(l.args(argv), l.entrypoint);
        let roles = facts::arg_roles(&canon);
        let mut toks: Vec<Tok> = canon
            .into_iter()
            .zip(roles)
            .map(|(text, role)| Tok {
                text,
                role,
                secret: false,
            })
            .collect();
        for i in 0..toks.len() {
            let t = toks[i].text.as_bytes();
            let flag =
                |b: &[u8]| b.starts_with(b"-") && is_secret_name(&String::from_utf8_lossy(b));
            // `--api-key=-x` stays one token: all of it is the secret's
            if t.contains(&b'=') && flag(t) {
                toks[i].secret = true;
            } else if i > 0
                && flag(toks[i - 1].text.as_bytes())
                && !toks[i - 1].text.as_bytes().contains(&b'=')
            {
                toks[i].secret = !t.starts_with(b"--");
            }
        }
        let mut merged = Vec::new();
        let config = config_path.map(|p| {
            let (outcome, sha) = config::read(&cwd.join(Path::new(&p)));
            if let config::Outcome::Args(a) = outcome {
                merged.extend(a.into_iter().map(OsString::from));
            }
            (py_str(p.as_bytes()), sha)
        });
        merged.extend(toks.iter().map(|t| t.text.clone()));
        let value = |flag: &str| last_value(&merged, flag);
        let revision = value("--revision");
        let download = value("--download-dir");
        let describe = |m: &str| {
            let reads = model::Reads::Model;
            let hub = hub(env);
            model::describe_in(
                m,
                revision.as_deref(),
                cwd,
                env,
                reads,
                download.as_deref(),
                hub,
            )
        };
        let model = value("--model").map(|m| {
            let desc = describe(&m);
            (m, desc)
        });
        let files = vllm_files(&merged, cwd, env, revision.as_deref());
        let maybe_models = maybe_models
            .iter()
            .map(|m| {
                let m = String::from_utf8_lossy(m.as_bytes()).into_owned();
                let desc = describe(&m);
                (m, desc)
            })
            .collect();
        Some(VllmLaunch {
            entry: l.entrypoint,
            wrapper: wrapper.clone(),
            toks,
            config,
            model,
            maybe_models,
            files,
            merged,
        })
    }

    /// The engine's parallel sizes and node placement (config file included).
    pub fn sizes(&self) -> ParallelSizes {
        ParallelSizes::from_args(&self.merged)
    }

    /// The value of engine option `flag` (config file included; the command
    /// line wins), as vLLM reads it.
    pub fn option(&self, flag: &str) -> Option<String> {
        last_value(&self.merged, flag)
    }

    /// The engine arguments, config file included (for the MoE decision).
    pub fn merged_args(&self) -> &[OsString] {
        &self.merged
    }

    fn entry_words(&self) -> &'static [&'static str] {
        match self.entry {
            Entrypoint::Serve => &["vllm", "serve"],
            Entrypoint::ApiServer => &["python", "-m", "vllm.entrypoints.openai.api_server"],
        }
    }

    /// The `"vllm"` part of the payload.
    pub fn to_json(&self) -> Value {
        let args: Vec<Value> = self
            .toks
            .iter()
            .filter(|t| t.role == ArgRole::Launch)
            .map(|t| Value::String(py_str(t.text.as_bytes())))
            .collect();
        let mut models = Map::new();
        if let Some((_, desc)) = &self.model {
            models.insert("--model".into(), desc.clone());
        }
        for (value, desc) in &self.maybe_models {
            models.insert(format!("maybe {}", py_str(value.as_bytes())), desc.clone());
        }
        for (opt, desc) in &self.files {
            models.insert(opt.to_string(), desc.clone());
        }
        let mut m = Map::new();
        m.insert(
            "entry".into(),
            match self.entry {
                Entrypoint::Serve => "serve",
                Entrypoint::ApiServer => "api_server",
            }
            .into(),
        );
        m.insert("args".into(), args.into());
        m.insert("models".into(), models.into());
        if let Some((_, sha)) = &self.config {
            m.insert(
                "config".into(),
                sha.clone().unwrap_or_else(|| "unreadable".into()).into(),
            );
        }
        Value::Object(m)
    }

    fn shown(t: &Tok) -> String {
        if t.secret {
            redacted_hash(t.text.as_bytes())
        } else {
            py_str(t.text.as_bytes())
        }
    }

    /// `(argv, ignored)` for the redacted inputs: the entry words and the
    /// canonical arguments that count, and those left out.
    pub fn redacted_argv(&self) -> (Vec<Value>, Vec<Value>) {
        let argv = self
            .entry_words()
            .iter()
            .map(|w| Value::String(w.to_string()))
            .chain(
                self.toks
                    .iter()
                    .filter(|t| t.role == ArgRole::Launch)
                    .map(|t| Value::String(Self::shown(t))),
            )
            .collect();
        let ignored = self
            .toks
            .iter()
            .filter(|t| t.role != ArgRole::Launch)
            .map(|t| Value::String(Self::shown(t)))
            .collect();
        (argv, ignored)
    }

    /// The `--explain` lines before the environment (`ignored` false) or
    /// after it (`ignored` true).
    pub fn explain(&self, out: &mut String, ignored: bool) {
        let quote = |t: &Tok| {
            if t.secret {
                redacted_hash(t.text.as_bytes())
            } else {
                crate::engine::fingerprint::text::quote(t.text.as_bytes())
            }
        };
        if ignored {
            for t in self.toks.iter().filter(|t| t.role != ArgRole::Launch) {
                let why = match t.role {
                    ArgRole::FrontEnd => "front end",
                    _ => "per node",
                };
                let _ = writeln!(out, "ignored-arg {} ({why})", quote(t));
            }
            return;
        }
        let entry = match self.entry {
            Entrypoint::Serve => "vllm serve",
            Entrypoint::ApiServer => "vllm.entrypoints.openai.api_server",
        };
        let inside = if self.wrapper == Wrapper::Shell {
            " (inside a shell command)"
        } else {
            ""
        };
        let _ = writeln!(out, "launch {entry}{inside}, arguments in the order given");
        for t in self.toks.iter().filter(|t| t.role == ArgRole::Launch) {
            let _ = writeln!(out, "arg {}", quote(t));
        }
        if let Some((path, sha)) = &self.config {
            let h = match sha {
                Some(s) => format!("<sha256:{}>", &s[..12.min(s.len())]),
                None => "unreadable".into(),
            };
            let _ = writeln!(
                out,
                "config {} {h} (its contents count)",
                crate::engine::fingerprint::text::quote_str(path)
            );
        }
        if let Some((_, desc)) = &self.model {
            let _ = writeln!(out, "model --model {}", model::explain(desc));
        }
        for (opt, desc) in &self.files {
            let _ = writeln!(out, "model {opt} {}", model::explain(desc));
        }
        for (value, desc) in &self.maybe_models {
            let _ = writeln!(
                out,
                "model {} (maybe the model: after an option vLLM 0.33.0 does not know) {}",
                crate::engine::fingerprint::text::quote_str(value),
                model::explain(desc)
            );
        }
    }
}

/// The files vLLM 0.33.0 builds the model from besides `--model`'s
/// (`vllm/engine/arg_utils.py`, `vllm/config/model.py`,
/// `vllm/config/speculative.py`, `vllm/entrypoints/common/cli_args.py`):
///
/// - `--hf-config-path`: the config read instead of the model's (a
///   directory's `config.json`, or a hub id's revision);
/// - the draft model of speculative decoding: `--spec-model`, else the
///   `model` of `--speculative-config` (`--speculative-config.model M`, or
///   its JSON; the last one wins, as the dotted keys are appended last);
/// - the LoRA adapters of `--lora-modules` (`NAME=PATH` or JSON): each
///   one's `adapter_config.json`.
///
/// Every other option that names a file counts as written: the tokenizer,
/// the chat template, `--generation-config` (sampling defaults), TLS and
/// log configs, `--mm-encoder-fp8-scale-path` (scales: values, no shapes),
/// `--download-dir` (read as the hub cache of `--model`).
fn vllm_files(
    merged: &[OsString],
    cwd: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    revision: Option<&str>,
) -> Vec<(&'static str, Value)> {
    let value = |flag: &str| last_value(merged, flag);
    let download = value("--download-dir");
    let hub = hub(env);
    let describe =
        |v: &str, reads| model::describe_in(v, revision, cwd, env, reads, download.as_deref(), hub);
    let mut out = Vec::new();
    if let Some(v) = value("--hf-config-path") {
        out.push(("--hf-config-path", describe(&v, model::Reads::Model)));
    }
    // the dotted keys are appended after every --speculative-config, and
    // --spec-model goes into it (both given: vLLM refuses to start)
    let draft = value("--spec-model")
        .or_else(|| value("--speculative-config.model"))
        .or_else(|| {
            let json = value("--speculative-config")?;
            let v: Value = serde_json::from_str(&json).ok()?;
            v.get("model").and_then(Value::as_str).map(str::to_string)
        });
    if let Some(d) = draft {
        out.push((
            "--speculative-config.model",
            model::describe_in(
                &d,
                None,
                cwd,
                env,
                model::Reads::Model,
                download.as_deref(),
                hub,
            ),
        ));
    }
    let loras = lora_values(merged);
    if let Some(d) = model::describe_adapters(&loras, cwd, env, download.as_deref()) {
        out.push(("--lora-modules", d));
    }
    out
}

/// The values of the last `--lora-modules V...` (`nargs="+"`; a JSON list
/// spreads into its items).
fn lora_values(args: &[OsString]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let b = args[i].as_bytes();
        if let Some((name, v)) = split_attached(b) {
            if name == b"--lora-modules" {
                out = vec![String::from_utf8_lossy(v).into_owned()];
            }
        } else if facts::canonical_flag(b) == b"--lora-modules" {
            out.clear();
            while let Some(v) = args.get(i + 1).filter(|v| !v.as_bytes().starts_with(b"-")) {
                out.push(String::from_utf8_lossy(v.as_bytes()).into_owned());
                i += 1;
            }
        }
        i += 1;
    }
    out.into_iter()
        .flat_map(|v| match serde_json::from_str::<Value>(&v) {
            Ok(Value::Array(items)) => items.iter().map(Value::to_string).collect(),
            _ => vec![v],
        })
        .collect()
}

/// The value of the last `FLAG VALUE` / `FLAG=VALUE` in `args` (canonical
/// flag names), as text.
fn last_value(args: &[OsString], flag: &str) -> Option<String> {
    crate::launch::flags::last(args, &[flag], facts::NAMES)
        .map(|v| v.to_string_lossy().into_owned())
}

/// `json!` helper kept local: the payload of a vLLM launch.
pub fn payload(v: &VllmLaunch, env: Map<String, Value>) -> Value {
    json!({ "vllm": v.to_json(), "env": env })
}

/// vLLM's switch: `VLLM_USE_MODELSCOPE` is `true` in any case.
fn hub(env: &dyn Fn(&str) -> Option<String>) -> model::Hub {
    match env("VLLM_USE_MODELSCOPE") {
        Some(v) if v.eq_ignore_ascii_case("true") => model::Hub::ModelScope,
        _ => model::Hub::HuggingFace,
    }
}
