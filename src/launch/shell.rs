//! The command inside `sh -c STRING`: a POSIX word splitter for the one
//! simple command such strings usually hold
//! (`exec python3 -m sglang.launch_server --port $PORT`).
//!
//! Understood: blanks, single and double quotes, backslashes, `$NAME` and
//! `${NAME}` from the child's environment, a whole-word `"$@"` (the
//! arguments after the string and its `$0`), leading `NAME=value`
//! assignments, an `exec` prefix. Anything whose meaning depends on more
//! than that is refused with the reason: operators (`|`, `&&`, `;`,
//! redirections, a second line), command substitution, special parameters,
//! `${NAME:-...}` forms, unset variables, globs, an unquoted `~`, a comment, brace
//! expansion, or an unquoted expansion whose value would be split or
//! globbed. Crates such as `shell-words` and `shlex` split words but neither
//! expand variables nor tell an operator from a word, which is what deciding
//! "safe" needs, hence this small hand-written splitter.

/// What a shell string runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Simple {
    /// Leading `NAME=value` assignments: the command's environment.
    pub assigns: Vec<(String, String)>,
    /// The command's words.
    pub argv: Vec<String>,
}

/// A shell program's base name, when `argv0` runs one that takes `-c`.
pub fn is_shell(argv0: &str) -> bool {
    let base = argv0.rsplit('/').next().unwrap_or(argv0);
    matches!(
        base,
        "sh" | "bash" | "dash" | "ash" | "ksh" | "zsh" | "busybox"
    )
}

/// The STRING of `SHELL [OPTIONS] -c STRING [NAME [ARGS...]]` and its
/// positional parameters ARGS (`"$@"`): `Ok(None)` when the shell runs no
/// `-c` string (an interactive shell, a script), `Err` when the options are
/// not understood.
pub fn c_string(argv: &[String]) -> Result<Option<(&str, &[String])>, &'static str> {
    let mut c = false;
    let mut i = 1;
    if argv.first().is_some_and(|a| a.ends_with("busybox")) {
        match argv.get(1).map(String::as_str) {
            Some("sh" | "ash") => i = 2,
            _ => return Ok(None),
        }
    }
    while i < argv.len() {
        let a = argv[i].as_str();
        if a == "--" {
            i += 1;
            break;
        }
        if matches!(a, "--login" | "--norc" | "--noprofile" | "--posix") {
            i += 1;
            continue;
        }
        if a.starts_with("--") {
            return Err("a shell option it does not know");
        }
        let Some(flags) = a.strip_prefix('-').or_else(|| a.strip_prefix('+')) else {
            break;
        };
        if flags.is_empty() {
            break;
        }
        for f in flags.chars() {
            match f {
                'c' => c = true,
                'e' | 'l' | 'x' | 'u' | 'v' | 'f' | 'a' | 'h' | 'b' | 'm' | 'p' | 'C' => {}
                _ => return Err("a shell option it does not know"),
            }
        }
        i += 1;
    }
    if !c {
        return Ok(None);
    }
    let script = argv.get(i).ok_or("no command string after -c")?;
    Ok(Some((script, argv.get(i + 2..).unwrap_or_default())))
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// A shell variable name: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_name(s: &str) -> bool {
    s.chars().next().is_some_and(is_name_start) && s.chars().all(is_name_char)
}

/// `script` without its line continuations: a backslash-newline outside
/// single quotes is removed before the shell reads words or names, so that
/// `$V\<newline>a` is `$Va`.
fn join_lines(script: &str) -> Vec<char> {
    let chars: Vec<char> = script.chars().collect();
    let mut out = Vec::with_capacity(chars.len());
    let (mut single, mut double) = (false, false);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        if single {
            single = c != '\'';
            out.push(c);
            continue;
        }
        match c {
            '\\' => match chars.get(i) {
                Some('\n') => i += 1,
                Some(&n) => {
                    out.extend([c, n]);
                    i += 1;
                }
                None => out.push(c),
            },
            '\'' if !double => {
                single = true;
                out.push(c);
            }
            '"' => {
                double = !double;
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

/// Split `script` into one simple command, expanding variables from `env`
/// and a whole-word `"$@"` to `positional`.
pub fn split(
    script: &str,
    env: &dyn Fn(&str) -> Option<String>,
    positional: &[String],
) -> Result<Simple, &'static str> {
    let chars = join_lines(script);
    let mut words: Vec<(String, Option<usize>)> = Vec::new();
    let mut cur = String::new();
    // the word exists (it has content or quotes)
    let mut started = false;
    // byte position of the first unquoted `=` when everything before it was
    // plain unquoted name characters
    let mut eq: Option<usize> = None;
    let mut plain_so_far = true;
    let mut i = 0;

    fn expand(
        chars: &[char],
        i: &mut usize,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<String>, &'static str> {
        // chars[*i] is just after `$`
        let name: String = match chars.get(*i) {
            Some('{') => {
                let start = *i + 1;
                let mut j = start;
                while j < chars.len() && is_name_char(chars[j]) {
                    j += 1;
                }
                if j == start || !is_name_start(chars[start]) || chars.get(j) != Some(&'}') {
                    return Err("a ${...} form other than ${NAME}");
                }
                *i = j + 1;
                chars[start..j].iter().collect()
            }
            Some(&c) if is_name_start(c) => {
                let start = *i;
                let mut j = start;
                while j < chars.len() && is_name_char(chars[j]) {
                    j += 1;
                }
                *i = j;
                chars[start..j].iter().collect()
            }
            Some('(') => return Err("command substitution"),
            Some('\'' | '"') => return Err("$'...' or $\"...\" quoting"),
            Some(c) if c.is_ascii_digit() || "@*#?$!-".contains(*c) => {
                return Err("a special parameter ($1, $@, $$, ...)")
            }
            _ => return Ok(None), // a literal `$`
        };
        env(&name).map(Some).ok_or("an unset variable")
    }

    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' => {
                if started {
                    words.push((std::mem::take(&mut cur), eq));
                }
                started = false;
                eq = None;
                plain_so_far = true;
                i += 1;
            }
            '\n' => {
                if chars[i..].iter().all(|c| c.is_whitespace()) {
                    break;
                }
                return Err("more than one line");
            }
            '\'' => {
                let end = chars[i + 1..]
                    .iter()
                    .position(|&c| c == '\'')
                    .ok_or("an unterminated quote")?;
                cur.extend(&chars[i + 1..i + 1 + end]);
                started = true;
                plain_so_far = false;
                i += end + 2;
            }
            '"' if !started
                && chars[i..].starts_with(&['"', '$', '@', '"'])
                && chars.get(i + 4).is_none_or(|c| c.is_whitespace()) =>
            {
                // "$@": the positional parameters, one word each
                words.extend(positional.iter().map(|p| (p.clone(), None)));
                i += 4;
            }
            '"' => {
                i += 1;
                started = true;
                plain_so_far = false;
                loop {
                    match chars.get(i) {
                        None => return Err("an unterminated quote"),
                        Some('"') => {
                            i += 1;
                            break;
                        }
                        Some('\\') => match chars.get(i + 1) {
                            Some(&n @ ('$' | '`' | '"' | '\\')) => {
                                cur.push(n);
                                i += 2;
                            }
                            Some('\n') => i += 2,
                            _ => {
                                cur.push('\\');
                                i += 1;
                            }
                        },
                        Some('`') => return Err("command substitution"),
                        Some('$') => {
                            i += 1;
                            match expand(&chars, &mut i, env)? {
                                Some(v) => cur.push_str(&v),
                                None => cur.push('$'),
                            }
                        }
                        Some(&c) => {
                            cur.push(c);
                            i += 1;
                        }
                    }
                }
            }
            '\\' => match chars.get(i + 1) {
                Some('\n') => i += 2,
                Some(&n) => {
                    cur.push(n);
                    started = true;
                    plain_so_far = false;
                    i += 2;
                }
                None => return Err("a trailing backslash"),
            },
            '$' => {
                i += 1;
                match expand(&chars, &mut i, env)? {
                    Some(v) => {
                        if v.chars().any(|c| " \t\n*?[".contains(c)) {
                            return Err(
                                "an unquoted variable whose value would be split or globbed",
                            );
                        }
                        if !v.is_empty() {
                            started = true;
                        }
                        cur.push_str(&v);
                    }
                    None => {
                        cur.push('$');
                        started = true;
                    }
                }
                plain_so_far = false;
            }
            '|' | '&' | ';' | '<' | '>' | '(' | ')' => {
                return Err("a shell operator (|, &&, ;, redirection, subshell)")
            }
            '`' => return Err("command substitution"),
            '*' | '?' | '[' => return Err("a glob pattern"),
            '{' | '}' => return Err("brace expansion"),
            // bash also expands `NAME=~...` in arguments: any unquoted ~
            '~' => return Err("a tilde"),
            '#' if !started => return Err("a comment"),
            _ => {
                if c == '=' && eq.is_none() && plain_so_far && started {
                    eq = Some(cur.len());
                } else if !is_name_char(c) || (!started && !is_name_start(c)) {
                    plain_so_far = false;
                }
                cur.push(c);
                started = true;
                i += 1;
            }
        }
    }
    if started {
        words.push((cur, eq));
    }

    let mut assigns = Vec::new();
    let mut it = words.into_iter().peekable();
    while let Some((w, Some(p))) = it.peek() {
        assigns.push((w[..*p].to_string(), w[*p + 1..].to_string()));
        it.next();
    }
    let mut argv: Vec<String> = it.map(|(w, _)| w).collect();
    if argv.first().is_some_and(|w| w == "exec") {
        argv.remove(0);
        if argv.first().is_some_and(|w| w.starts_with('-')) {
            return Err("exec with options");
        }
    }
    if argv.is_empty() {
        return Err("no command");
    }
    Ok(Simple { assigns, argv })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "PORT" => Some("8000".into()),
            "MODEL" => Some("/models/a b".into()),
            "EMPTY" => Some(String::new()),
            "GLOB" => Some("*".into()),
            _ => None,
        }
    }

    fn ok(s: &str) -> Simple {
        split(s, &env, &[]).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn splits_quotes_variables_assignments_and_exec() {
        let s = ok("exec python3 -m sglang.launch_server --port $PORT --model-path \"$MODEL\" --x='a b' --y=${PORT}0 \\$HOME");
        assert!(s.assigns.is_empty());
        assert_eq!(
            s.argv,
            [
                "python3",
                "-m",
                "sglang.launch_server",
                "--port",
                "8000",
                "--model-path",
                "/models/a b",
                "--x=a b",
                "--y=80000",
                "$HOME"
            ]
        );
        let s = ok("SGLANG_X=1 B='2 3' exec python3 x.py $EMPTY \"$EMPTY\"\n");
        assert_eq!(
            s.assigns,
            [("SGLANG_X".into(), "1".into()), ("B".into(), "2 3".into())]
        );
        assert_eq!(s.argv, ["python3", "x.py", ""]);
        // a quoted `=` is no assignment
        assert_eq!(ok("'A=1' cmd").argv, ["A=1", "cmd"]);
        // "$@" as a whole word: the positional parameters
        let pos = ["--tp".to_string(), "a b".to_string()];
        let s = split("X=1 exec python3 \"$@\" --port $PORT", &env, &pos).unwrap();
        assert_eq!(s.argv, ["python3", "--tp", "a b", "--port", "8000"]);
        assert!(split("echo x\"$@\"", &env, &pos).is_err());
    }

    #[test]
    fn refuses_what_it_cannot_read_safely() {
        for s in [
            "a | b",
            "a && b",
            "a; b",
            "a > f",
            "echo $(date)",
            "echo `date`",
            "echo $1",
            "echo ${PORT:-1}",
            "echo $UNSET",
            "ls *.json",
            "echo $MODEL",
            "echo $GLOB",
            "a\nb",
            "~/run",
            "cmd a=~/x",
            "echo $'a'",
            "# comment",
            "echo {a,b}",
            "'open",
            "exec -a x cmd",
            "A=1",
        ] {
            assert!(split(s, &env, &[]).is_err(), "{s}");
        }
    }

    #[test]
    fn finds_the_c_string() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let none: &[String] = &[];
        assert_eq!(c_string(&v(&["sh", "-c", "x"])), Ok(Some(("x", none))));
        assert_eq!(
            c_string(&v(&["bash", "-lc", "x", "y"])),
            Ok(Some(("x", none)))
        );
        assert_eq!(
            c_string(&v(&["/bin/sh", "-e", "-c", "x", "sh", "a"])),
            Ok(Some(("x", &v(&["a"])[..])))
        );
        assert_eq!(c_string(&v(&["bash"])), Ok(None));
        assert_eq!(c_string(&v(&["bash", "run.sh"])), Ok(None));
        assert!(c_string(&v(&["bash", "-c"])).is_err());
        assert!(c_string(&v(&["bash", "-O", "x", "-c", "y"])).is_err());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]
        #[test]
        fn no_input_panics(text in "[-a-zA-Z0-9 '\"\\\\$@{}()=|;&<>*?~#\n\u{e9}]{0,60}") {
            let pos = ["x".to_string()];
            let _ = split(&text, &env, &pos);
            let words: Vec<String> = text.split(' ').map(str::to_string).collect();
            let _ = c_string(&words);
        }
    }
}
