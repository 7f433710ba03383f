//! What of a launch enters its fingerprint, token by token: the command's
//! words marked ignored or secret, the environment variables a profile
//! selects (each volatile or not), the argument groups left out, a
//! script's bytes.

use std::collections::HashSet;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

use super::text::{mark_ignored, mark_secrets};
use super::{ArgKind, Options, Profile};
use crate::digest::sha256_hex;
use crate::engine::sglang::launch::{args, args::Group};
use crate::launch;
use crate::launch::canonical::{self, py_str};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Secret {
    No,
    /// the whole token is the value of a secret-named flag
    Whole,
    /// `FLAG=VALUE` with a secret-named FLAG: the value starts at this byte
    After(usize),
}

#[derive(Debug, Clone)]
pub(super) struct Arg {
    pub(super) raw: OsString,
    pub(super) ignored: bool,
    pub(super) secret: Secret,
}

#[derive(Debug, Clone)]
pub(super) struct EnvVar {
    pub(super) name: OsString,
    pub(super) value: OsString,
    pub(super) volatile: bool,
}

/// Which server argument groups the profile and the user leave out.
#[derive(Debug, Clone, Default)]
pub(super) struct Ignored {
    /// attributes of known options
    pub(super) dests: HashSet<String>,
    /// heads of options the table does not know
    pub(super) heads: HashSet<String>,
}

impl Ignored {
    pub(super) fn new(flags: &[(String, ArgKind)]) -> Ignored {
        let mut out = Ignored::default();
        for (flag, _) in flags {
            match args::known(flag) {
                Some(o) => out.dests.insert(o.dest.to_string()),
                None => out.heads.insert(flag.clone()),
            };
        }
        out
    }

    pub(super) fn contains(&self, g: &Group) -> bool {
        if g.known {
            self.dests.contains(&g.key)
        } else {
            self.heads.contains(&g.head)
        }
    }
}

/// The most bytes of a script read.
const MAX_SCRIPT_BYTES: u64 = 16 << 20;

/// sha256 of a script's (or a file's) bytes, or why they cannot be read
/// (absent, no regular file, larger than 16 MiB).
pub(crate) fn script_hash(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    let f = launch::open_regular(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    f.take(MAX_SCRIPT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_SCRIPT_BYTES {
        return Err(format!("larger than {MAX_SCRIPT_BYTES} bytes"));
    }
    Ok(sha256_hex(&bytes))
}

/// The variables of `env` (first occurrences only) whose name starts with
/// one of the profile's or the user's prefixes, each marked volatile or
/// not, in Python's key order.
pub(super) fn selected_env(
    prof: &Profile,
    opts: &Options,
    env: Vec<&(OsString, OsString)>,
    names: &[String],
) -> Vec<EnvVar> {
    let prefixes: Vec<&[u8]> = prof
        .env_prefixes
        .iter()
        .map(|p| p.as_bytes())
        .chain(
            opts.env_prefixes
                .iter()
                .filter(|p| !p.is_empty())
                .map(|p| p.as_bytes()),
        )
        .collect();
    let tp4 = env
        .iter()
        .any(|(k, v)| k.as_bytes() == b"DSV41_LAUNCHER" && v.as_bytes() == b"tp4");
    let mut volatile: HashSet<&[u8]> = prof.volatile_env.iter().map(|n| n.as_bytes()).collect();
    if tp4 {
        volatile.extend(prof.volatile_env_tp4.iter().map(|n| n.as_bytes()));
    }
    volatile.extend(
        opts.volatile_env
            .iter()
            .filter(|n| !n.is_empty())
            .map(|n| n.as_bytes()),
    );
    let mut env: Vec<EnvVar> = env
        .into_iter()
        .filter(|(k, _)| {
            prefixes.iter().any(|p| k.as_bytes().starts_with(p))
                || names.iter().any(|n| n.as_bytes() == k.as_bytes())
        })
        .map(|(k, v)| EnvVar {
            name: k.clone(),
            value: v.clone(),
            volatile: volatile.contains(k.as_bytes()),
        })
        .collect();
    env.sort_by_cached_key(|e| {
        canonical::py_code_points(&py_str(e.name.as_bytes())).collect::<Vec<u32>>()
    });
    env
}

/// The arguments the profile and the user leave out (`--FLAG` for a bare
/// name), the profile's entry first.
pub(super) fn ignored_flags(
    prof: &Profile,
    opts: &Options,
    is_vllm: bool,
) -> Vec<(String, ArgKind)> {
    let mut ignored: Vec<(String, ArgKind)> = prof
        .ignored_args
        .iter()
        .map(|(f, k)| (f.to_string(), *k))
        .collect();
    if is_vllm {
        ignored.extend(vllm_ignored_args());
    }
    for flag in opts.ignored_args.iter().filter(|f| !f.is_empty()) {
        let flag = if flag.starts_with('-') {
            flag.clone()
        } else {
            format!("--{flag}")
        };
        // the profile's entry wins: a known switch never swallows a token
        if !ignored.iter().any(|(f, _)| *f == flag) {
            ignored.push((flag, ArgKind::Value));
        }
    }
    ignored
}

/// The command's words, each marked ignored and secret or not.
pub(super) fn marked_args(words: &[OsString], ignored: &[(String, ArgKind)]) -> Vec<Arg> {
    let mut args: Vec<Arg> = words
        .iter()
        .map(|a| Arg {
            raw: a.clone(),
            ignored: false,
            secret: Secret::No,
        })
        .collect();
    mark_ignored(&mut args, ignored);
    mark_secrets(&mut args);
    args
}

/// The `vllm` profile's ignored arguments for a command that is no vLLM
/// server launch (exact names): the front-end and per-node arguments.
pub(super) fn vllm_ignored_args() -> impl Iterator<Item = (String, ArgKind)> {
    use crate::engine::vllm::launch::{Takes, FRONT_END_ARGS, PER_NODE_ARGS};
    FRONT_END_ARGS.iter().chain(PER_NODE_ARGS).flat_map(|a| {
        let kind = match a.takes {
            Takes::Nothing => ArgKind::Flag,
            _ => ArgKind::Value,
        };
        std::iter::once(a.long)
            .chain(a.short)
            .map(move |f| (f.to_string(), kind))
    })
}
