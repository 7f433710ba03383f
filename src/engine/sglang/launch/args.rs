//! SGLang server arguments as argparse reads them: each option with the
//! values it takes, grouped, so that spelling (`--flag=value`, aliases,
//! unambiguous abbreviations) and the order of groups stop mattering.
//!
//! The rules follow Python's `argparse` (3.10 to 3.12) over SGLang's own
//! table (`table::OPTIONS`):
//! - a token is an option when it starts with `-`, unless it is a negative
//!   number (`-1`, `-.5`) or contains a space; a known option matches
//!   exactly, as `OPTION=VALUE`, or as the unique prefix of one option
//!   string;
//! - an option consumes the values its `nargs` asks for among the following
//!   non-option tokens; `OPTION=VALUE` gives exactly one value;
//! - every action of the table stores (the last occurrence wins).
//!
//! The canonical form is a list of groups `[OPTION, VALUE...]`. When every
//! token belongs to a known option, groups are sorted by the attribute they
//! write, and only the last group of each attribute is kept: exactly what
//! argparse leaves in its namespace. Anything else (an unknown or ambiguous
//! option, a value a switch cannot take, a stray token, a `--`) makes the
//! launch *ordered*: every group stays where it was, repeats included, so two
//! launches agree only when their tokens do. The heads that trigger the
//! ordered form never occur in the sorted form, so an ordered launch never
//! equals a sorted one.

use std::collections::HashMap;

use super::table::OPTIONS;

/// How many values an option takes (argparse `nargs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nargs {
    /// `nargs=0`: store_true, store_const, BooleanOptionalAction, help
    Switch,
    /// `nargs=None`: exactly one
    One,
    /// `nargs='?'`
    Optional,
    /// `nargs='*'`
    Star,
    /// `nargs='+'`
    Plus,
}

/// One option string of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opt {
    pub option: &'static str,
    /// The spelling every alias of this option is written as.
    pub canonical: &'static str,
    /// The attribute the option writes.
    pub dest: &'static str,
    pub nargs: Nargs,
    /// A `store_true` action (a config file's `true` becomes the bare flag).
    pub store_true: bool,
}

/// Head of the group of tokens after a bare `--`.
pub const TAIL: &str = "--";
/// Head of stray tokens no option took (argparse rejects them).
pub const STRAY: &str = "\0stray";
/// Head of tokens before the first option.
pub const POSITIONAL: &str = "\0positional";

/// Options SGLang also finds by their exact token in argv
/// (`prepare_server_args`: `radix_eviction_policy_explicitly_set`), so that
/// an abbreviation means something else.
const EXACT_SPELLING: &[&str] = &["--radix-eviction-policy"];

/// How argparse reads one token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token<'a> {
    /// A value (or a stray).
    Value,
    /// A known option, with the value attached by `=`.
    Known(&'static Opt, Option<&'a str>),
    /// An option-like token the table does not know (or an ambiguous
    /// prefix): its name, and the value attached by `=`.
    Unknown(&'a str, Option<&'a str>),
}

fn exact(name: &str) -> Option<&'static Opt> {
    OPTIONS
        .binary_search_by(|o| o.option.as_bytes().cmp(name.as_bytes()))
        .ok()
        .map(|i| &OPTIONS[i])
}

/// The one option string starting with `prefix`, if exactly one does.
fn by_prefix(prefix: &str) -> Result<&'static Opt, usize> {
    let start = OPTIONS.partition_point(|o| o.option.as_bytes() < prefix.as_bytes());
    let mut it = OPTIONS[start..]
        .iter()
        .take_while(|o| o.option.starts_with(prefix));
    match (it.next(), it.next()) {
        (Some(o), None) => Ok(o),
        (None, _) => Err(0),
        (Some(_), Some(_)) => Err(2),
    }
}

fn is_negative_number(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('-') else {
        return false;
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    digits(rest)
        || rest
            .split_once('.')
            .is_some_and(|(a, b)| a.bytes().all(|c| c.is_ascii_digit()) && digits(b))
}

/// argparse's `_parse_optional` over SGLang's table.
pub fn classify(tok: &str) -> Token<'_> {
    if !tok.starts_with('-') {
        return Token::Value;
    }
    if let Some(o) = exact(tok) {
        return Token::Known(o, None);
    }
    if tok.len() == 1 {
        return Token::Value;
    }
    let (name, explicit) = match tok.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (tok, None),
    };
    if explicit.is_some() {
        if let Some(o) = exact(name) {
            return Token::Known(o, explicit);
        }
    }
    if tok.starts_with("--") {
        match by_prefix(name) {
            Ok(o) => return Token::Known(o, explicit),
            Err(0) => {}
            Err(_) => return Token::Unknown(name, explicit),
        }
    } else if let Some(rest) = tok.strip_prefix("-h") {
        // `-hX`: the short option with an attached argument
        if let Some(o) = exact("-h") {
            return Token::Known(o, Some(rest));
        }
    }
    if is_negative_number(tok) || tok.contains(' ') {
        return Token::Value;
    }
    Token::Unknown(name, explicit)
}

/// One option with its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// What the group's values are ordered and replaced by: the attribute
    /// of a known option, else the head itself.
    pub key: String,
    /// The option as written in canonical form (`--tp-size`), an unknown
    /// option's name, `OPTION=` for a value given to a switch, or one of
    /// [`TAIL`], [`STRAY`], [`POSITIONAL`].
    pub head: String,
    pub values: Vec<String>,
    pub known: bool,
}

impl Group {
    /// `[head, values...]`
    pub fn tokens(&self) -> Vec<String> {
        std::iter::once(self.head.clone())
            .chain(self.values.iter().cloned())
            .collect()
    }
}

/// Server arguments in canonical form.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Parsed {
    pub groups: Vec<Group>,
    /// Some token was not understood: groups are in their original order.
    pub ordered: bool,
}

impl Parsed {
    /// The value argparse ends with for attribute `dest` (single-value
    /// options; the last group wins).
    pub fn value(&self, dest: &str) -> Option<&str> {
        self.groups
            .iter()
            .rev()
            .find(|g| g.known && g.key == dest)
            .and_then(|g| g.values.first().map(String::as_str))
    }
}

/// Group `tokens` (server arguments, without the program) and put them in
/// canonical form.
pub fn parse(tokens: &[String]) -> Parsed {
    let mut groups: Vec<Group> = Vec::new();
    let mut ordered = false;
    let mut i = 0;
    while i < tokens.len() {
        let tok = &tokens[i];
        if tok == "--" {
            groups.push(Group {
                key: TAIL.into(),
                head: TAIL.into(),
                values: tokens[i + 1..].to_vec(),
                known: false,
            });
            ordered = true;
            break;
        }
        i += 1;
        match classify(tok) {
            Token::Value => {
                let head = if groups.is_empty() { POSITIONAL } else { STRAY };
                let mut values = vec![tok.clone()];
                take_values(tokens, &mut i, usize::MAX, &mut values);
                groups.push(Group {
                    key: head.into(),
                    head: head.into(),
                    values,
                    known: false,
                });
                ordered = true;
            }
            Token::Known(o, explicit) => {
                groups.push(known_group(tokens, &mut i, tok, o, explicit, &mut ordered));
            }
            Token::Unknown(name, explicit) => {
                let mut values = Vec::new();
                match explicit {
                    Some(v) => values.push(v.to_string()),
                    None => take_values(tokens, &mut i, usize::MAX, &mut values),
                }
                groups.push(Group {
                    key: name.to_string(),
                    head: name.to_string(),
                    values,
                    known: false,
                });
                ordered = true;
            }
        }
    }
    if !ordered {
        groups = last_of_each(groups);
    }
    Parsed { groups, ordered }
}

/// Up to `max` values from `tokens[*i..]`, up to the next option or `--`.
fn take_values(tokens: &[String], i: &mut usize, max: usize, out: &mut Vec<String>) {
    while out.len() < max && *i < tokens.len() && tokens[*i] != "--" {
        if classify(&tokens[*i]) != Token::Value {
            break;
        }
        out.push(tokens[*i].clone());
        *i += 1;
    }
}

/// The group of known option `o` spelt `tok` (its values from `explicit`
/// or the tokens after it, `*i` moved past them); sets `ordered` where
/// argparse or SGLang would see the spelling or the order.
fn known_group(
    tokens: &[String],
    i: &mut usize,
    tok: &str,
    o: &'static Opt,
    explicit: Option<&str>,
    ordered: &mut bool,
) -> Group {
    let mut values = Vec::new();
    let mut head = o.canonical.to_string();
    let name = tok.split_once('=').map_or(tok, |(n, _)| n);
    if EXACT_SPELLING.contains(&o.option) && name != o.option {
        // SGLang also looks for this exact token: another
        // spelling is another launch, kept in order
        head = name.to_string();
        *ordered = true;
    }
    match explicit {
        Some(v) => {
            if o.nargs == Nargs::Switch {
                // argparse: "ignored explicit argument"
                head.push('=');
                *ordered = true;
            }
            values.push(v.to_string());
        }
        None => {
            let max = match o.nargs {
                Nargs::Switch => 0,
                Nargs::One | Nargs::Optional => 1,
                Nargs::Star | Nargs::Plus => usize::MAX,
            };
            take_values(tokens, i, max, &mut values);
            if values.is_empty() && matches!(o.nargs, Nargs::One | Nargs::Plus) {
                // argparse: "expected one argument"
                *ordered = true;
            }
        }
    }
    Group {
        key: o.dest.to_string(),
        head,
        values,
        known: true,
    }
}

/// The last group of each attribute, ordered by attribute.
fn last_of_each(groups: Vec<Group>) -> Vec<Group> {
    let mut last: HashMap<&str, usize> = HashMap::with_capacity(groups.len());
    for (i, g) in groups.iter().enumerate() {
        last.insert(g.key.as_str(), i);
    }
    let keep: Vec<bool> = (0..groups.len())
        .map(|i| last.get(groups[i].key.as_str()) == Some(&i))
        .collect();
    let mut kept: Vec<Group> = groups
        .into_iter()
        .zip(keep)
        .filter_map(|(g, k)| k.then_some(g))
        .collect();
    kept.sort_by(|a, b| a.key.cmp(&b.key));
    kept
}

/// The table entry a flag named on keepwrap's command line stands for
/// (`--ignore-arg`): exact or an unambiguous prefix.
pub fn known(flag: &str) -> Option<&'static Opt> {
    match classify(flag) {
        Token::Known(o, None) => Some(o),
        _ => None,
    }
}

/// Whether a config file's `KEY: true` is the bare flag `--KEY` (SGLang's
/// `ConfigArgumentMerger`: the key, dashes as underscores, names a
/// `store_true` action by its attribute or any long spelling).
pub fn is_store_true_key(key: &str) -> bool {
    let norm = key.replace('-', "_");
    OPTIONS.iter().any(|o| {
        o.store_true
            && (o.dest == norm
                || o.option
                    .strip_prefix("--")
                    .is_some_and(|s| s.replace('-', "_") == norm))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Parsed {
        parse(&s.split_whitespace().map(str::to_string).collect::<Vec<_>>())
    }

    #[test]
    fn the_table_is_sorted_and_unique() {
        assert!(OPTIONS.windows(2).all(|w| w[0].option < w[1].option));
        assert!(OPTIONS.len() > 500);
    }

    #[test]
    fn spelling_aliases_prefixes_and_order() {
        let a = p("--model-path /m --tp-size 4 --trust-remote-code");
        assert!(!a.ordered);
        assert_eq!(a, p("--trust-remote-code --tp 4 --model=/m"));
        assert_eq!(
            a,
            p("--tensor-parallel-size=4 --model /m --trust-remote-code")
        );
        assert_eq!(
            a,
            p("--tp-size 2 --model-path /m --tp-size 4 --trust-remote-code")
        );
        assert_ne!(a, p("--model-path /m --tp-size 2 --trust-remote-code"));
        assert_eq!(a.value("tp_size"), Some("4"));
    }

    #[test]
    fn unknown_options_keep_the_order() {
        let a = p("--tp-size 4 --brand-new x");
        assert!(a.ordered);
        assert_ne!(a, p("--brand-new x --tp-size 4"));
        // ambiguous prefix: unknown
        assert!(p("--cuda-graph-bs 8").ordered);
        assert!(!p("--cuda-graph-bs-decode 1 2 4 --tp 2").ordered);
        assert!(p("--tp-size 4 stray").ordered);
        assert!(p("--trust-remote-code=1").ordered);
        assert!(!p("--numa-node -1 0").ordered);
        // an option SGLang also matches by its exact spelling
        assert!(!p("--radix-eviction-policy lru").ordered);
        assert!(p("--radix-eviction-pol lru").ordered);
        assert_ne!(
            p("--radix-eviction-policy a --radix-eviction-pol b"),
            p("--radix-eviction-pol b")
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]
        #[test]
        fn no_input_panics_and_the_form_is_stable(
            tokens in proptest::collection::vec("(--?[a-z-]{0,12}(=[a-z0-9]{0,3})?|[a-z0-9 .-]{0,4})", 0..12)
        ) {
            let a = parse(&tokens);
            // canonical: parsing the canonical tokens again gives the same groups
            if !a.ordered {
                let again: Vec<String> = a.groups.iter().flat_map(|g| g.tokens()).collect();
                proptest::prop_assert_eq!(parse(&again), a);
            }
        }
    }
}
