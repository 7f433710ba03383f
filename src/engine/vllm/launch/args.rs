//! What the fingerprint leaves out of the arguments: the front-end and
//! per-node arguments and the role of every token of an argv.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

use super::canonical_flag;

/// How an argument takes its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takes {
    /// A switch. vLLM also accepts its paired spellings (`--no-X`,
    /// `--enable-X`/`--disable-X`); see [`switch_spellings`].
    Nothing,
    /// `FLAG VALUE` or `FLAG=VALUE`.
    One,
    /// `FLAG V1 V2 ...` (argparse `nargs="+"`) or `FLAG=V1`.
    OneOrMore,
}

/// One vLLM argument: its long name, its short alias, and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arg {
    pub long: &'static str,
    pub short: Option<&'static str>,
    pub takes: Takes,
}

const fn arg(long: &'static str, takes: Takes) -> Arg {
    Arg {
        long,
        short: None,
        takes,
    }
}

const fn arg_short(long: &'static str, short: &'static str, takes: Takes) -> Arg {
    Arg {
        long,
        short: Some(short),
        takes,
    }
}

/// Arguments of the API front end: where and how it listens, authenticates
/// and logs. They change nothing that is tuned.
pub const FRONT_END_ARGS: &[Arg] = &[
    arg("--host", Takes::One),
    arg("--port", Takes::One),
    arg("--uds", Takes::One),
    arg("--grpc-port", Takes::One),
    arg_short("--api-server-count", "-asc", Takes::One),
    arg("--api-key", Takes::OneOrMore),
    arg("--ssl-keyfile", Takes::One),
    arg("--ssl-certfile", Takes::One),
    arg("--ssl-ca-certs", Takes::One),
    arg("--ssl-cert-reqs", Takes::One),
    arg("--ssl-ciphers", Takes::One),
    arg("--enable-ssl-refresh", Takes::Nothing),
    arg("--root-path", Takes::One),
    arg("--middleware", Takes::OneOrMore),
    arg("--allow-credentials", Takes::Nothing),
    arg("--allowed-origins", Takes::OneOrMore),
    arg("--allowed-methods", Takes::OneOrMore),
    arg("--allowed-headers", Takes::OneOrMore),
    arg("--served-model-name", Takes::OneOrMore),
    arg("--uvicorn-log-level", Takes::One),
    arg("--disable-uvicorn-access-log", Takes::Nothing),
    arg("--disable-access-log-for-endpoints", Takes::One),
    arg("--enable-log-requests", Takes::Nothing),
    arg("--disable-log-stats", Takes::Nothing),
    arg("--max-log-len", Takes::One),
    arg("--enable-request-id-headers", Takes::Nothing),
    arg("--disable-fastapi-docs", Takes::Nothing),
    arg("--enable-offline-docs", Takes::Nothing),
    arg("--data-parallel-supervisor-port", Takes::One),
    arg("--dp-supervisor-probe-interval-s", Takes::One),
    arg("--dp-supervisor-probe-timeout-s", Takes::One),
    arg("--dp-supervisor-probe-failure-threshold", Takes::One),
];

/// Arguments that differ between the nodes of one launch (which node this
/// is, which ranks it hosts, whether it serves), or name rendezvous
/// addresses and ports that change from boot to boot. vLLM's own cache key
/// leaves them out too (`vllm/config/parallel.py`).
pub const PER_NODE_ARGS: &[Arg] = &[
    arg_short("--node-rank", "-r", Takes::One),
    arg("--headless", Takes::Nothing),
    arg_short("--data-parallel-rank", "-dpn", Takes::One),
    arg_short("--data-parallel-start-rank", "-dpr", Takes::One),
    arg_short("--data-parallel-size-local", "-dpl", Takes::One),
    arg_short("--data-parallel-address", "-dpa", Takes::One),
    arg_short("--data-parallel-rpc-port", "-dpp", Takes::One),
    arg("--master-addr", Takes::One),
    arg("--master-port", Takes::One),
];

/// The spellings vLLM accepts for switch `long`: `--X` and `--no-X`, and for
/// `--enable-X` / `--disable-X` the opposite prefix too
/// (`vllm/utils/argparse_utils.py`, `EnableDisableAction`).
pub fn switch_spellings(long: &str) -> Vec<String> {
    let bare = long.trim_start_matches('-');
    let mut out = vec![format!("--{bare}"), format!("--no-{bare}")];
    if let Some(x) = bare.strip_prefix("enable-") {
        out.push(format!("--disable-{x}"));
    } else if let Some(x) = bare.strip_prefix("disable-") {
        out.push(format!("--enable-{x}"));
    }
    out
}

/// Which list an argument of a vLLM launch belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgRole {
    /// Part of the launch: fingerprinted.
    Launch,
    /// A [`FRONT_END_ARGS`] flag or its value.
    FrontEnd,
    /// A [`PER_NODE_ARGS`] flag or its value.
    PerNode,
}

fn find_arg(token: &[u8]) -> Option<(ArgRole, &'static Arg, bool)> {
    let (name, attached) = match token.iter().position(|&c| c == b'=') {
        Some(p) => (&token[..p], true),
        None => (token, false),
    };
    let name = canonical_flag(name);
    let lists = [
        (ArgRole::FrontEnd, FRONT_END_ARGS),
        (ArgRole::PerNode, PER_NODE_ARGS),
    ];
    for (role, list) in lists {
        for a in list {
            let hit = if a.takes == Takes::Nothing {
                !attached
                    && switch_spellings(a.long)
                        .iter()
                        .any(|s| s.as_bytes() == name.as_slice())
            } else {
                a.long.as_bytes() == name.as_slice()
                    || a.short.is_some_and(|s| s.as_bytes() == name.as_slice())
            };
            if hit {
                return Some((role, a, attached));
            }
        }
    }
    // `-r1`: argparse's attached value of a two-letter short flag
    if token.len() > 2 && token.starts_with(b"-r") && token[2].is_ascii_digit() {
        let node_rank = PER_NODE_ARGS.iter().find(|a| a.short == Some("-r"))?;
        return Some((ArgRole::PerNode, node_rank, true));
    }
    None
}

/// The role of each of a launch's engine arguments (see [`Launch::args`](super::Launch::args)):
/// a listed flag and its value(s) are [`ArgRole::FrontEnd`] or
/// [`ArgRole::PerNode`], everything else [`ArgRole::Launch`]. A value is
/// the next argument unless that starts with `--` (a missing value: the
/// next flag is never swallowed); `nargs="+"` flags take every following
/// argument up to one that starts with `-`.
pub fn arg_roles(args: &[OsString]) -> Vec<ArgRole> {
    let mut roles = vec![ArgRole::Launch; args.len()];
    let mut i = 0;
    while i < args.len() {
        let Some((role, a, attached)) = find_arg(args[i].as_bytes()) else {
            i += 1;
            continue;
        };
        roles[i] = role;
        i += 1;
        if attached {
            continue;
        }
        match a.takes {
            Takes::Nothing => {}
            Takes::One => {
                if args
                    .get(i)
                    .is_some_and(|v| !v.as_bytes().starts_with(b"--"))
                {
                    roles[i] = role;
                    i += 1;
                }
            }
            Takes::OneOrMore => {
                while args.get(i).is_some_and(|v| !v.as_bytes().starts_with(b"-")) {
                    roles[i] = role;
                    i += 1;
                }
            }
        }
    }
    roles
}
