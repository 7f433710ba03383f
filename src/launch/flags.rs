//! The one reader of `FLAG VALUE` / `FLAG=VALUE` options in a command line,
//! for the questions asked of a launch before (or without) its engine's own
//! parse: the node count and rank, the rank flags, an option's value.
//!
//! Every token is looked at (a value is never skipped: an option whose value
//! is another option's name is a launch the engine refuses anyway); a token
//! names an option by what comes before its first `=`, compared as the
//! engine's parser spells names ([`Names`]). The last occurrence wins, as
//! with argparse; a flag that ends the command line has no value.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

/// How an engine's parser compares option names.
#[derive(Debug, Clone, Copy)]
pub enum Names {
    /// Byte for byte.
    Exact,
    /// Through a spelling rule (vLLM: `_` and `-` alike in a long name).
    Spelled(fn(&[u8]) -> Vec<u8>),
}

impl Names {
    fn of<'a>(&self, name: &'a [u8]) -> Cow<'a, [u8]> {
        match self {
            Names::Exact => Cow::Borrowed(name),
            Names::Spelled(f) => Cow::Owned(f(name)),
        }
    }
}

/// One occurrence of a flag asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hit<'a> {
    /// Which of the flags asked for (its index).
    pub flag: usize,
    /// Where the flag's token is in the command line.
    pub at: usize,
    /// Its value: attached by `=`, else the next token; None when the flag
    /// is the last token.
    pub value: Option<&'a OsStr>,
    /// Whether the value was attached by `=` (else it is token `at + 1`).
    pub attached: bool,
}

/// Each occurrence of one of `flags` in `args`, in order.
pub fn hits<'a, 'f>(
    args: &'a [OsString],
    flags: &'f [&'f str],
    names: Names,
) -> impl Iterator<Item = Hit<'a>> + use<'a, 'f> {
    args.iter().enumerate().filter_map(move |(at, a)| {
        let b = a.as_bytes();
        let (name, attached) = match b.iter().position(|&c| c == b'=') {
            Some(p) => (&b[..p], Some(OsStr::from_bytes(&b[p + 1..]))),
            None => (b, None),
        };
        let name = names.of(name);
        let flag = flags.iter().position(|f| f.as_bytes() == &*name)?;
        Some(Hit {
            flag,
            at,
            value: attached.or_else(|| args.get(at + 1).map(OsString::as_os_str)),
            attached: attached.is_some(),
        })
    })
}

/// The value of the last occurrence of any of `flags` (None when there is
/// none, or when it has no value).
pub fn last<'a>(args: &'a [OsString], flags: &[&str], names: Names) -> Option<&'a OsStr> {
    hits(args, flags, names).last().and_then(|h| h.value)
}

/// [`last`] as text (lossy), names compared byte for byte.
pub fn last_text(args: &[OsString], flag: &str) -> Option<String> {
    let flags = [flag];
    last(args, &flags, Names::Exact).map(|v| v.to_string_lossy().into_owned())
}

/// The engine's arguments of a command line: after the program, up to a
/// bare `--` (what follows it is not the engine's options).
pub fn before_tail(argv: &[OsString]) -> &[OsString] {
    let args = argv.get(1..).unwrap_or(&[]);
    let end = args.iter().position(|a| a == "--").unwrap_or(args.len());
    &args[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_last_occurrence_wins_in_both_spellings() {
        let a = os(&["--tp", "2", "--tp=4", "--pp", "3"]);
        assert_eq!(last_text(&a, "--tp").as_deref(), Some("4"));
        assert_eq!(last_text(&a, "--pp").as_deref(), Some("3"));
        assert_eq!(last_text(&a, "--dp"), None);
        assert_eq!(last_text(&os(&["--tp=4", "--tp"]), "--tp"), None);
        assert_eq!(
            last_text(&os(&["--tp=a=b"]), "--tp").as_deref(),
            Some("a=b")
        );
    }

    #[test]
    fn a_spelling_rule_compares_names() {
        fn dashes(n: &[u8]) -> Vec<u8> {
            n.iter()
                .map(|&c| if c == b'_' { b'-' } else { c })
                .collect()
        }
        let a = os(&["--max_model_len=8", "-tp", "2"]);
        let flags = ["--max-model-len"];
        assert_eq!(
            last(&a, &flags, Names::Spelled(dashes)),
            Some(OsStr::new("8"))
        );
        let flags = ["--tensor-parallel-size", "-tp"];
        let h: Vec<_> = hits(&a, &flags, Names::Spelled(dashes)).collect();
        assert_eq!(
            h,
            vec![Hit {
                flag: 1,
                at: 1,
                value: Some(OsStr::new("2")),
                attached: false
            }]
        );
    }

    #[test]
    fn the_tail_and_the_program_are_not_options() {
        let a = os(&["--nnodes", "--nnodes", "2", "--", "--nnodes", "3"]);
        assert_eq!(before_tail(&a), &a[1..3]);
        assert_eq!(before_tail(&os(&[])), &[] as &[OsString]);
    }
}
