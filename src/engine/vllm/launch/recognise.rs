//! Recognising a vLLM server launch: its entrypoint, where its engine
//! arguments start, its model and `--config` file, and vLLM's spelling of a
//! flag.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// How a vLLM server was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entrypoint {
    /// `vllm serve [MODEL] ...`, or `python -m vllm.entrypoints.cli.main serve ...`
    Serve,
    /// `python -m vllm.entrypoints.openai.api_server --model MODEL ...` (deprecated, still works)
    ApiServer,
}

/// A recognised vLLM launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub entrypoint: Entrypoint,
    /// Index in argv of the first engine argument (after `serve`, or after
    /// the api_server module name).
    pub args_start: usize,
}

impl Launch {
    /// The engine arguments of `argv` (the argv this launch was recognised in).
    pub fn args<'a>(&self, argv: &'a [OsString]) -> &'a [OsString] {
        argv.get(self.args_start..).unwrap_or(&[])
    }

    /// The model: the positional argument where `vllm serve`'s parser
    /// takes it ([`model_positional`](super::model_positional): `vllm serve
    /// MODEL`, `vllm serve --port 8000 MODEL`), else the value of `--model`
    /// (`--model M`, `--model=M`). `None` when neither is on the command
    /// line (it may be in the `--config` file).
    pub fn model<'a>(&self, argv: &'a [OsString]) -> Option<&'a OsStr> {
        let args = self.args(argv);
        if self.entrypoint == Entrypoint::Serve {
            if let Some(i) = super::model_positional(args).model {
                return args.get(i).map(OsString::as_os_str);
            }
        }
        option_value(args, "--model")
    }

    /// The `--config FILE` (or `--config=FILE`) of the launch: vLLM inserts
    /// its keys as arguments, so its contents belong to the launch.
    pub fn config_file<'a>(&self, argv: &'a [OsString]) -> Option<&'a OsStr> {
        option_value(self.args(argv), "--config")
    }
}

/// The value of the last `FLAG VALUE` or `FLAG=VALUE` in `args` (flag names
/// compared the way vLLM's parser does: `_` and `-` alike).
pub(super) fn option_value<'a>(args: &'a [OsString], flag: &str) -> Option<&'a OsStr> {
    crate::launch::flags::last(args, &[flag], NAMES)
}

/// [`option_value`] for a flag with several spellings (`--long`, `-short`):
/// the value of the last occurrence of any of them.
pub(super) fn option_value_any<'a>(args: &'a [OsString], flags: &[&str]) -> Option<&'a OsStr> {
    crate::launch::flags::last(args, flags, NAMES)
}

/// Option names as vLLM's parser compares them.
pub const NAMES: crate::launch::flags::Names = crate::launch::flags::Names::Spelled(canonical_flag);

/// Whether `argv` is a vLLM server launch: `vllm serve ...` (any path to a
/// program named `vllm`), or a Python interpreter (`python`, `python3`,
/// `python3.12`, any path) running `-m vllm.entrypoints.openai.api_server`
/// or `-m vllm.entrypoints.cli.main serve`, after interpreter options such
/// as `-u`, `-O`, `-X opt`, `-W arg`. Other `vllm` subcommands and shell
/// wrappers are not recognised here.
pub fn recognise(argv: &[OsString]) -> Option<Launch> {
    let prog = Path::new(argv.first()?).file_name()?.as_bytes();
    if prog == b"vllm" {
        return (argv.get(1)?.as_bytes() == b"serve").then_some(Launch {
            entrypoint: Entrypoint::Serve,
            args_start: 2,
        });
    }
    if !crate::launch::is_python(&String::from_utf8_lossy(prog)) {
        return None;
    }
    let mut i = 1;
    let module: &[u8] = loop {
        let a = argv.get(i)?.as_bytes();
        if a == b"-m" {
            i += 1;
            break argv.get(i)?.as_bytes();
        }
        if let Some(m) = a.strip_prefix(b"-m") {
            break m;
        }
        if !a.starts_with(b"-") || a == b"-" || a == b"-c" || a.starts_with(b"--") {
            return None; // a script, stdin, -c, or --help/--version
        }
        // -X and -W take a value, attached or as the next argument
        if (a == b"-X" || a == b"-W") && argv.get(i + 1).is_some() {
            i += 1;
        }
        i += 1;
    };
    match module {
        b"vllm.entrypoints.openai.api_server" => Some(Launch {
            entrypoint: Entrypoint::ApiServer,
            args_start: i + 1,
        }),
        b"vllm.entrypoints.cli.main" => {
            (argv.get(i + 1)?.as_bytes() == b"serve").then_some(Launch {
                entrypoint: Entrypoint::Serve,
                args_start: i + 2,
            })
        }
        _ => None,
    }
}

/// A flag name the way vLLM's parser sees it: in `--long_name` (up to a `.`),
/// underscores become dashes. Short flags (`-tp`) are returned as they are.
pub fn canonical_flag(name: &[u8]) -> Vec<u8> {
    match name.strip_prefix(b"--") {
        Some(rest) => {
            let dot = rest.iter().position(|&c| c == b'.').unwrap_or(rest.len());
            let mut out = b"--".to_vec();
            out.extend(
                rest[..dot]
                    .iter()
                    .map(|&c| if c == b'_' { b'-' } else { c }),
            );
            out.extend_from_slice(&rest[dot..]);
            out
        }
        None => name.to_vec(),
    }
}

/// Whether `argv` (from a word after a program keepwrap does not read,
/// `words` its text) names a vLLM server: `vllm serve`, the module of its
/// API server.
pub fn named(argv: &[OsString], words: &[String]) -> bool {
    recognise(argv).is_some()
        || words
            .first()
            .is_some_and(|w| w == "vllm.entrypoints.openai.api_server")
}
