//! Where `vllm serve`'s parser takes its model: the positional `model_tag`
//! (`nargs="?"`, `vllm/entrypoints/common/cli_args.py`) is the first
//! argument no option takes, wherever it stands (`vllm serve --port 8000
//! /m` serves `/m`). Which arguments an option takes comes from vLLM
//! 0.33.0's own table ([`OPTIONS`](super::table::OPTIONS)), read the way
//! argparse and `FlexibleArgumentParser.parse_args` read it: `--a_b` is
//! `--a-b`, `--flag=value`, unique abbreviations, `--x.y VALUE` (the next
//! argument whatever it is), `-O3`/`-O 3`, negative numbers as values, and
//! everything after `--` a positional.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

use super::canonical_flag;
use super::table::OPTIONS;

/// How many arguments an option takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arity {
    /// `store_true`, `BooleanOptionalAction`.
    Switch,
    /// `nargs="?"`: the next argument when it is no option.
    Optional,
    /// One argument.
    One,
    /// `nargs="+"`: every argument up to the next option.
    Plus,
    /// A fixed tuple.
    Exactly(u8),
}

/// Where the model of `vllm serve ARGS` is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Positional {
    /// The index in ARGS of the model argument, if any.
    pub model: Option<usize>,
    /// Other arguments that may be the model: after an option this table
    /// does not know (a newer vLLM's), whose arguments cannot be counted.
    pub maybe: Vec<usize>,
}

/// How argparse reads one argument.
enum Class {
    /// A positional (or an option's value).
    Arg,
    /// A known option; `attached` when its value is in the argument.
    Opt { arity: Arity, attached: bool },
    /// `--x.y VALUE`: the next argument is the value, whatever it is.
    Dotted,
    /// An option the table does not know.
    Unknown,
}

fn arity_of(name: &[u8]) -> Option<Arity> {
    if let Ok(i) = OPTIONS.binary_search_by(|(o, _)| o.as_bytes().cmp(name)) {
        return Some(OPTIONS[i].1);
    }
    // argparse's abbreviations: the one option string it starts
    let mut hits = OPTIONS
        .iter()
        .filter(|(o, _)| o.as_bytes().starts_with(name));
    match (hits.next(), hits.next()) {
        (Some((_, a)), None) => Some(*a),
        _ => None,
    }
}

fn is_negative_number(b: &[u8]) -> bool {
    let Some(rest) = b.strip_prefix(b"-") else {
        return false;
    };
    let (int, frac) = match rest.iter().position(|&c| c == b'.') {
        Some(p) => (&rest[..p], Some(&rest[p + 1..])),
        None => (rest, None),
    };
    let digits = |s: &[u8]| s.iter().all(u8::is_ascii_digit);
    match frac {
        None => !int.is_empty() && digits(int),
        Some(f) => !f.is_empty() && digits(int) && digits(f),
    }
}

fn classify(b: &[u8], next: Option<&[u8]>) -> Class {
    if !b.starts_with(b"-") || b == b"-" || is_negative_number(b) {
        return Class::Arg;
    }
    if let Some(level) = b.strip_prefix(b"-O") {
        // FlexibleArgumentParser: -O3, -O=3, -Odecode; -O followed by 0..3
        if !level.is_empty() {
            return Class::Opt {
                arity: Arity::One,
                attached: true,
            };
        }
        if next.is_some_and(|n| matches!(n, b"0" | b"1" | b"2" | b"3")) {
            return Class::Opt {
                arity: Arity::One,
                attached: false,
            };
        }
    }
    let (name, attached) = match b.iter().position(|&c| c == b'=') {
        Some(p) => (&b[..p], true),
        None => (b, false),
    };
    let name = canonical_flag(name);
    if name.starts_with(b"--") && name.contains(&b'.') {
        return if attached {
            Class::Opt {
                arity: Arity::One,
                attached,
            }
        } else {
            Class::Dotted
        };
    }
    match arity_of(&name) {
        Some(arity) => Class::Opt { arity, attached },
        None if b.contains(&b' ') => Class::Arg,
        None => Class::Unknown,
    }
}

/// Where `vllm serve`'s parser takes the model among `args` (the arguments
/// after `serve`). A `--model` on the command line is the model instead
/// (`FlexibleArgumentParser` moves it into the positional): then `model` is
/// None and the caller reads `--model`.
pub fn model_positional(args: &[OsString]) -> Positional {
    let b = |i: usize| args.get(i).map(|a| a.as_bytes());
    let mut out = Positional::default();
    if args.iter().any(|a| {
        let a = a.as_bytes();
        a == b"--model" || (a.starts_with(b"--model=") && a.len() > 8)
    }) {
        return out;
    }
    let found = |i: usize, out: &mut Positional| {
        out.model.get_or_insert(i);
    };
    let mut i = 0;
    while let Some(a) = b(i) {
        if a == b"--" {
            // every later argument is a positional
            for j in i + 1..args.len() {
                found(j, &mut out);
            }
            break;
        }
        let takes_arg =
            |j: usize| b(j).is_some_and(|n| matches!(classify(n, b(j + 1)), Class::Arg));
        match classify(a, b(i + 1)) {
            Class::Arg => found(i, &mut out),
            Class::Dotted => i += 1,
            Class::Opt { attached: true, .. } => {}
            Class::Opt { arity, .. } => match arity {
                Arity::Switch => {}
                Arity::Optional | Arity::One => {
                    if takes_arg(i + 1) {
                        i += 1;
                    }
                }
                Arity::Plus => {
                    while takes_arg(i + 1) {
                        i += 1;
                    }
                }
                Arity::Exactly(n) => {
                    for _ in 0..n {
                        if takes_arg(i + 1) {
                            i += 1;
                        }
                    }
                }
            },
            Class::Unknown => {
                // taken as one value, most options' count; the value may
                // be the model, which then counts too
                if takes_arg(i + 1) {
                    i += 1;
                    if out.model.is_none() {
                        out.maybe.push(i);
                    }
                }
            }
        }
        i += 1;
    }
    if out.model.is_none() {
        // only possible models: the first is the model
        if !out.maybe.is_empty() {
            out.model = Some(out.maybe.remove(0));
        }
    }
    out.maybe.retain(|&j| Some(j) != out.model);
    out.maybe.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Positional {
        let v: Vec<OsString> = s.split_whitespace().map(OsString::from).collect();
        model_positional(&v)
    }

    fn p(model: Option<usize>, maybe: &[usize]) -> Positional {
        Positional {
            model,
            maybe: maybe.to_vec(),
        }
    }

    #[test]
    fn table_is_sorted() {
        assert!(OPTIONS
            .windows(2)
            .all(|w| w[0].0.as_bytes() < w[1].0.as_bytes()));
    }

    #[test]
    fn the_model_where_argparse_takes_it() {
        assert_eq!(at("/m -tp 2"), p(Some(0), &[]));
        assert_eq!(at("--port 8000 /m"), p(Some(2), &[]));
        assert_eq!(at("--port=8000 /m"), p(Some(1), &[]));
        assert_eq!(at("--enforce-eager /m"), p(Some(1), &[]));
        assert_eq!(at("--no-enforce-eager /m"), p(Some(1), &[]));
        assert_eq!(at("--headless /m"), p(Some(1), &[]));
        assert_eq!(at("-ep /m"), p(Some(1), &[]));
        assert_eq!(at("--served-model-name a b /m"), p(None, &[]));
        assert_eq!(at("--served-model-name a b -tp 2 /m"), p(Some(5), &[]));
        assert_eq!(at("--hf-token /m"), p(None, &[]));
        assert_eq!(at("--hf-token -tp 2 /m"), p(Some(3), &[]));
        assert_eq!(at("--seed -1 /m"), p(Some(2), &[]));
        assert_eq!(at("--tensor_parallel_size 2 /m"), p(Some(2), &[]));
        assert_eq!(at("--tensor-parallel 2 /m"), p(Some(2), &[]));
        assert_eq!(at("--compilation-config.level 3 /m"), p(Some(2), &[]));
        assert_eq!(at("--compilation-config.level -3 /m"), p(Some(2), &[]));
        assert_eq!(at("-O3 /m"), p(Some(1), &[]));
        assert_eq!(at("-O 3 /m"), p(Some(2), &[]));
        assert_eq!(at("--port 1 -- /m"), p(Some(3), &[]));
        assert_eq!(at("--model /m -tp 2"), p(None, &[]));
        assert_eq!(at("-tp 2 --model=/m x"), p(None, &[]));
        assert_eq!(at("--config c.yaml -tp 2"), p(None, &[]));
    }

    #[test]
    fn after_an_unknown_option_every_candidate_counts() {
        assert_eq!(at("--newer x /m"), p(Some(2), &[1]));
        assert_eq!(at("--newer /m"), p(Some(1), &[]));
        assert_eq!(at("/m --newer x"), p(Some(0), &[]));
        assert_eq!(at("--newer --port 1 /m"), p(Some(3), &[]));
    }
}
