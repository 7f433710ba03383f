//! What `--explain` and the redacted inputs show of a launch ([`Launch::explain`],
//! [`Launch::redacted_inputs`]): argv lines, the canonical server launch's
//! lines, with secrets and environment values only as hashes; and which argv
//! tokens a profile leaves out.

use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt;

use serde_json::{json, Map, Value};

use super::{
    is_secret_name, redacted_hash, value_hash, Arg, ArgKind, EnvVar, Ignored, Launch, Secret,
};
use crate::engine::sglang::launch::{args::Group, config, Canonical};
use crate::launch::canonical::{self, py_str, Style};
use crate::launch::{self, Wrapper};

/// Which tokens are `--node-rank R` / `--node-rank=R` (before a bare `--`;
/// a next token that is an option is not its value).
pub(super) fn node_rank_tokens(args: &[Arg]) -> Vec<bool> {
    let argv: Vec<std::ffi::OsString> = args.iter().map(|a| a.raw.clone()).collect();
    let mut drop = vec![false; args.len()];
    let scanned = launch::flags::before_tail(&argv);
    for hit in launch::flags::hits(scanned, &["--node-rank"], launch::flags::Names::Exact) {
        drop[1 + hit.at] = true;
        let taken = hit.value.is_some_and(|v| !v.as_bytes().starts_with(b"--"));
        if !hit.attached && taken {
            drop[2 + hit.at] = true;
        }
    }
    drop
}

/// A group's tokens with the values of a secret-named option redacted.
pub(super) fn redacted_group(g: &Group) -> Vec<String> {
    let secret = is_secret_name(&g.head);
    std::iter::once(g.head.clone())
        .chain(g.values.iter().map(|v| {
            if secret {
                redacted_hash(v.as_bytes())
            } else {
                v.clone()
            }
        }))
        .collect()
}

/// A sentinel-form string as a JSON string in Python's ensure_ascii form.
pub(crate) fn quote_str(s: &str) -> String {
    let v = Value::String(s.to_string());
    String::from_utf8(canonical::value_to_python_json(&v, Style::CANONICAL))
        .expect("ensure_ascii output is ASCII")
}

/// The canonical launch's `--explain` lines: the launch, its groups, config
/// and models (`ignored` false), or its ignored groups (`ignored` true).
pub(super) fn explain_canonical(
    out: &mut String,
    c: &Canonical,
    wrapper: &Wrapper,
    ign: &Ignored,
    ignored: bool,
) {
    let group = |g: &Group| {
        let secret = is_secret_name(&g.head);
        std::iter::once(quote_str(&g.head))
            .chain(g.values.iter().map(|v| {
                if secret {
                    redacted_hash(v.as_bytes())
                } else {
                    quote_str(v)
                }
            }))
            .collect::<Vec<_>>()
            .join(" ")
    };
    if ignored {
        for g in c.parsed.groups.iter().filter(|g| ign.contains(g)) {
            let _ = writeln!(out, "ignored-arg {}", group(g));
        }
        return;
    }
    let entry = c.server.entry.name();
    let via = match wrapper {
        Wrapper::Shell => " (inside a shell command)",
        Wrapper::Env => " (through env)",
        Wrapper::Prefix => " (through launcher prefixes)",
        _ => "",
    };
    let order = if c.parsed.ordered {
        "arguments in the order given (not all understood)"
    } else {
        "arguments by name"
    };
    let _ = writeln!(out, "launch {entry}{via}, {order}");
    for o in &c.server.python_opts {
        let _ = writeln!(out, "python-opt {}", quote_str(o));
    }
    if let Some(t) = &c.server.model_type {
        let _ = writeln!(out, "model-type {}", quote_str(t));
    }
    for g in c.parsed.groups.iter().filter(|g| !ign.contains(g)) {
        let _ = writeln!(out, "arg {}", group(g));
    }
    if let Some(f) = &c.config {
        let state = match &f.outcome {
            config::Outcome::Args(_) => "merged into the arguments",
            config::Outcome::Unreadable(_) => "unreadable",
            config::Outcome::Unparsable(_) => "unparsable",
        };
        let hash = f
            .sha256
            .as_deref()
            .map_or("-".to_string(), |h| format!("<sha256:{}>", &h[..12]));
        let _ = writeln!(out, "config {} {hash} {state}", quote_str(&f.path));
    }
    for (opt, desc) in &c.models {
        let _ = writeln!(out, "model {opt} {}", launch::model::explain(desc));
    }
}

/// Drop the ignored flags (tokens after argv[0], up to a bare `--`).
pub(super) fn mark_ignored(args: &mut [Arg], ignored: &[(String, ArgKind)]) {
    let mut i = 1;
    while i < args.len() {
        let tok = args[i].raw.as_bytes();
        if tok == b"--" {
            break;
        }
        let hit = ignored.iter().find_map(|(flag, kind)| {
            let f = flag.as_bytes();
            if tok == f {
                Some(Some(*kind))
            } else if tok.len() > f.len() && tok.starts_with(f) && tok[f.len()] == b'=' {
                Some(None)
            } else {
                None
            }
        });
        if let Some(kind) = hit {
            args[i].ignored = true;
            if kind == Some(ArgKind::Value)
                && i + 1 < args.len()
                && !args[i + 1].raw.as_bytes().starts_with(b"--")
            {
                i += 1;
                args[i].ignored = true;
            }
        }
        i += 1;
    }
}

/// Mark the values of secret-named flags (`--api-key=V`, `--api-key V`).
pub(super) fn mark_secrets(args: &mut [Arg]) {
    let mut i = 1;
    while i < args.len() {
        let tok = args[i].raw.as_bytes();
        if tok.len() > 1 && tok[0] == b'-' && tok != b"--" {
            let (name, eq) = match tok.iter().position(|&b| b == b'=') {
                Some(p) => (&tok[..p], Some(p)),
                None => (tok, None),
            };
            if is_secret_name(&String::from_utf8_lossy(name)) {
                match eq {
                    Some(p) => args[i].secret = Secret::After(p + 1),
                    None => {
                        if i + 1 < args.len() && !args[i + 1].raw.as_bytes().starts_with(b"--") {
                            i += 1;
                            args[i].secret = Secret::Whole;
                        }
                    }
                }
            }
        }
        i += 1;
    }
}

/// A JSON string in Python's ensure_ascii form.
pub(crate) fn quote(bytes: &[u8]) -> String {
    let v = Value::String(py_str(bytes));
    String::from_utf8(canonical::value_to_python_json(&v, Style::CANONICAL))
        .expect("ensure_ascii output is ASCII")
}

pub(super) fn explain_arg(a: &Arg) -> String {
    let raw = a.raw.as_bytes();
    match a.secret {
        Secret::No => quote(raw),
        Secret::Whole => redacted_hash(raw),
        Secret::After(p) => format!("{} {}", quote(&raw[..p]), redacted_hash(&raw[p..])),
    }
}

pub(super) fn redacted_arg(a: &Arg) -> String {
    let raw = a.raw.as_bytes();
    match a.secret {
        Secret::No => py_str(raw),
        Secret::Whole => redacted_hash(raw),
        Secret::After(p) => format!("{}{}", py_str(&raw[..p]), redacted_hash(&raw[p..])),
    }
}

pub(super) fn env_value_hash(e: &EnvVar) -> String {
    if is_secret_name(&String::from_utf8_lossy(e.name.as_bytes())) {
        redacted_hash(e.value.as_bytes())
    } else {
        value_hash(e.value.as_bytes())
    }
}

impl Launch {
    /// The inputs with every environment value hashed and secret-named
    /// flags' values redacted:
    /// `{"profile", "argv" or "launch", "env", "ignored_args",
    /// "volatile_env"}`. `argv` is the fingerprinted argv (`launch`: the
    /// canonical server launch, groups `[OPTION, VALUE...]`),
    /// `ignored_args` what the profile left out, `env` maps name to
    /// `<sha256:...>` (or `<redacted sha256:...>` for a secret-named
    /// variable). Strings are in [`canonical::py_str`] form: write them with
    /// [`canonical`], not plain serde_json.
    pub fn redacted_inputs(&self) -> Value {
        let mut env = Map::new();
        let mut volatile = Vec::new();
        for e in &self.env {
            let name = py_str(e.name.as_bytes());
            if e.volatile {
                volatile.push(Value::String(name));
            } else {
                env.insert(name, Value::String(env_value_hash(e)));
            }
        }
        let engine = self.engine.as_ref().map(|e| e.to_json());
        let with_engine = |mut v: Value| {
            if let Some(e) = &engine {
                v["engine"] = e.clone();
            }
            v
        };
        if let Some(v) = &self.vllm {
            let (argv, ignored) = v.redacted_argv();
            return with_engine(json!({
                "profile": self.profile.as_str(),
                "argv": argv,
                "env": env,
                "ignored_args": ignored,
                "volatile_env": volatile,
            }));
        }
        if let (Some(c), true) = (&self.canonical, self.canonical_payload) {
            let mut launch = c.to_json(&|g| self.ignored.contains(g));
            launch["args"] = c
                .parsed
                .groups
                .iter()
                .filter(|g| !self.ignored.contains(g))
                .map(|g| Value::from(redacted_group(g)))
                .collect();
            let ignored: Vec<Value> = c
                .parsed
                .groups
                .iter()
                .filter(|g| self.ignored.contains(g))
                .map(|g| Value::from(redacted_group(g)))
                .collect();
            return with_engine(json!({
                "profile": self.profile.as_str(),
                "launch": launch,
                "env": env,
                "ignored_args": ignored,
                "volatile_env": volatile,
            }));
        }
        let argv: Vec<Value> = self
            .args
            .iter()
            .filter(|a| !a.ignored)
            .map(|a| Value::String(redacted_arg(a)))
            .collect();
        let ignored: Vec<Value> = self
            .args
            .iter()
            .filter(|a| a.ignored)
            .map(|a| Value::String(redacted_arg(a)))
            .collect();
        json!({
            "profile": self.profile.as_str(),
            "argv": argv,
            "env": env,
            "ignored_args": ignored,
            "volatile_env": volatile,
        })
    }

    /// The `--explain` text: one input per line, then the fingerprint.
    ///
    /// ```text
    /// profile sglang
    /// argv 0 "python"
    /// argv 5 "--api-key=" <redacted sha256:0123456789ab>
    /// env "SGLANG_X" <sha256:0123456789ab>
    /// ignored-arg 7 "--port"
    /// ignored-arg 8 "30000"
    /// volatile-env "SGLANG_RUN_ID"
    /// 0123...cdef
    /// ```
    ///
    /// An SGLang server launch (`sglang` profile) shows its canonical form
    /// instead of argv lines: `launch`, `arg` groups, `config`, `model`, and
    /// `ignored-arg` groups. Strings are JSON (Python `ensure_ascii` form),
    /// numbers are argv indices, environment values appear only as hashes.
    pub fn explain(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "profile {}", self.profile.as_str());
        let canonical = self.canonical.as_ref().filter(|_| self.canonical_payload);
        match canonical {
            Some(c) => explain_canonical(&mut out, c, &self.command.wrapper, &self.ignored, false),
            None if self.vllm.is_some() => {
                if let Some(v) = &self.vllm {
                    v.explain(&mut out, false);
                }
            }
            None if self.trtllm.is_some() => {
                if let Some(t) = &self.trtllm {
                    t.explain(&mut out);
                }
            }
            None => {
                if let Wrapper::Unreadable(why) = &self.command.wrapper {
                    let _ = writeln!(out, "unreadable: {why}");
                }
                for (i, a) in self.args.iter().enumerate().filter(|(_, a)| !a.ignored) {
                    let _ = writeln!(out, "argv {i} {}", explain_arg(a));
                }
                if let (Some(cwd), false) =
                    (&self.command.cwd, self.profile == super::ProfileName::Seed)
                {
                    let _ = writeln!(out, "cwd {}", quote(cwd.as_os_str().as_bytes()));
                }
                if let Some((path, Ok(sha))) = self.script() {
                    let _ = writeln!(out, "script {} <sha256:{}>", quote_str(path), &sha[..12]);
                }
            }
        }
        if let Some(e) = &self.engine {
            let _ = writeln!(out, "{}", e.explain());
        }
        for e in self.env.iter().filter(|e| !e.volatile) {
            let _ = writeln!(
                out,
                "env {} {}",
                quote(e.name.as_bytes()),
                env_value_hash(e)
            );
        }
        match canonical {
            Some(c) => explain_canonical(&mut out, c, &self.command.wrapper, &self.ignored, true),
            None if self.vllm.is_some() => {
                if let Some(v) = &self.vllm {
                    v.explain(&mut out, true);
                }
            }
            None => {
                for (i, a) in self.args.iter().enumerate().filter(|(_, a)| a.ignored) {
                    let _ = writeln!(out, "ignored-arg {i} {}", explain_arg(a));
                }
            }
        }
        for e in self.env.iter().filter(|e| e.volatile) {
            let _ = writeln!(out, "volatile-env {}", quote(e.name.as_bytes()));
        }
        for why in self.unresolved_inputs() {
            let _ = writeln!(out, "unresolved: {why}");
        }
        let _ = writeln!(out, "{}", self.fingerprint);
        out
    }
}
