//! The fingerprint inputs of a `trtllm-serve` launch (`trtllm` profile):
//! its options in order (`--name=value` read as `--name value`) minus the
//! front end's, the bytes of its `--extra_llm_api_options` YAML in place of
//! the file's path, the GPU models the machine shows, and (added by the
//! fingerprint) the installed `tensorrt_llm` version and the profile's
//! environment.
//!
//! Every option the launch gives counts, not only the ones known to shape
//! tuning (the model, the parallel sizes, `--max_batch_size`,
//! `--max_num_tokens`, `--max_seq_len`, `--backend`): an option that
//! changes nothing costs one tuning boot, never a wrong cache.
//!
//! PAYLOAD = `{"trtllm": {"args", "extra_llm_api_options"?, "gpu",
//! "engine"}, "env": ENV}`.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use serde_json::{json, Map, Value};

use super::{
    extra_options, option_value, sizes, Sizes, EXTRA_OPTIONS, EXTRA_OPTIONS_ALIAS, FRONT_END_ARGS,
    NO_GPU,
};
use crate::engine::fingerprint::{is_secret_name, redacted_hash, script_hash};
use crate::launch::canonical::py_str;

/// A `trtllm-serve` launch, understood.
#[derive(Debug, Clone)]
pub struct TrtllmLaunch {
    /// The options in canonical form, as the payload holds them.
    args: Vec<String>,
    /// The options as given (after `trtllm-serve [serve]`).
    given: Vec<OsString>,
    /// `--extra_llm_api_options FILE` (or `--config FILE`): its path as written and the sha256 of
    /// its bytes, or why they cannot be read.
    pub extra: Option<(String, Result<String, String>)>,
    /// That file as the engine opens it (relative to its directory).
    pub extra_path: Option<std::path::PathBuf>,
    /// The GPU models the machine shows, or why none is seen.
    pub gpu: Result<String, String>,
}

impl TrtllmLaunch {
    /// The launch `argv` (recognised by [`super::recognise`]) run in `cwd`,
    /// on a machine showing `gpu`. None: not a `trtllm-serve` launch.
    pub fn new(argv: &[OsString], cwd: &Path, gpu: Result<String, String>) -> Option<TrtllmLaunch> {
        let r = super::recognise(argv)?;
        let given = argv.get(r.args_start..).unwrap_or(&[]).to_vec();
        let extra = extra_options(&given).map(|p| {
            let shown = String::from_utf8_lossy(p.as_bytes()).into_owned();
            (shown, script_hash(&cwd.join(p)))
        });
        let extra_path = extra_options(&given).map(|p| cwd.join(p));
        Some(TrtllmLaunch {
            extra_path,
            args: canonical_args(&given),
            given,
            extra,
            gpu,
        })
    }

    /// The options as given.
    pub fn given(&self) -> &[OsString] {
        &self.given
    }

    /// The value of option `flag` as given (the last one wins).
    pub fn option(&self, flag: &str) -> Option<String> {
        option_value(&self.given, flag).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    }

    /// The parallel sizes of the launch.
    pub fn sizes(&self) -> Sizes {
        sizes(&self.given)
    }

    /// The GPU models as the fingerprint records them.
    pub fn gpu_shown(&self) -> &str {
        self.gpu.as_deref().unwrap_or(NO_GPU)
    }

    /// The `"trtllm"` part of the payload (without the engine).
    pub fn to_json(&self) -> Value {
        let mut t = json!({ "args": self.args, "gpu": self.gpu_shown() });
        if let Some((_, h)) = &self.extra {
            t[EXTRA_OPTIONS.trim_start_matches('-')] = match h {
                Ok(sha) => Value::String(sha.clone()),
                Err(why) => json!({ "unreadable": why }),
            };
        }
        t
    }

    /// The `--explain` lines.
    pub fn explain(&self, out: &mut String) {
        let _ = writeln!(out, "entry trtllm-serve");
        for (i, a) in self.args.iter().enumerate() {
            let _ = writeln!(out, "arg {i} {a:?}");
        }
        if let Some((path, h)) = &self.extra {
            let _ = match h {
                Ok(sha) => writeln!(
                    out,
                    "extra_llm_api_options {path:?} <sha256:{}>",
                    &sha[..12]
                ),
                Err(why) => writeln!(out, "extra_llm_api_options {path:?} unreadable: {why}"),
            };
        }
        let _ = match &self.gpu {
            Ok(m) => writeln!(out, "gpu {m}"),
            Err(why) => writeln!(out, "gpu {NO_GPU} ({why})"),
        };
    }
}

/// The payload of a `trtllm` launch: `{"trtllm": ..., "env": ENV}`.
pub fn payload(t: &TrtllmLaunch, engine: Option<Value>, env: Map<String, Value>) -> Value {
    let mut inner = t.to_json();
    if let Some(e) = engine {
        inner["engine"] = e;
    }
    json!({ "trtllm": inner, "env": env })
}

/// The options in canonical form: `--name=value` as `--name value`, the
/// front end's options and their values left out, the YAML file's path as
/// `<file>` (its bytes are recorded apart), a secret-named option's value
/// as its hash.
fn canonical_args(args: &[OsString]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut i = 0;
    while i < args.len() {
        let tok = args[i].as_bytes();
        let (name, attached) = match tok.iter().position(|&c| c == b'=') {
            Some(p) if tok.starts_with(b"--") => (&tok[..p], Some(&tok[p + 1..])),
            _ => (tok, None),
        };
        let name_s = py_str(name);
        let takes_next = attached.is_none() && args.get(i + 1).is_some();
        let value = attached.or_else(|| takes_next.then(|| args[i + 1].as_bytes()));
        if FRONT_END_ARGS.contains(&name_s.as_str()) {
            i += if takes_next { 2 } else { 1 };
            continue;
        }
        let extra = name_s == EXTRA_OPTIONS || name_s == EXTRA_OPTIONS_ALIAS;
        if extra || (name_s.starts_with("--") && is_secret_name(&name_s)) {
            // either name of the YAML's option is one launch
            out.push(if extra {
                EXTRA_OPTIONS.to_string()
            } else {
                name_s.clone()
            });
            if let Some(v) = value {
                out.push(if extra {
                    "<file>".to_string()
                } else {
                    redacted_hash(v)
                });
            }
            i += if takes_next { 2 } else { 1 };
            continue;
        }
        out.push(name_s);
        if let Some(v) = attached {
            out.push(py_str(v));
        }
        i += 1;
    }
    out
}
