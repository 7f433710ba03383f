//! The command inside `sh -c STRING`: the one simple command such strings
//! usually hold (`exec python3 -m sglang.launch_server --port $PORT`), or
//! harmless commands before an `exec` of it ([`read`]); the string and its
//! arguments in a shell's options ([`c_string`]). Its words are split by
//! `words.rs`.
//!
//! Understood: blanks, single and double quotes, backslashes, `$NAME` and
//! `${NAME}` from the child's environment, a whole-word `"$@"` (the
//! arguments after the string and its `$0`), leading `NAME=value`
//! assignments, an `exec` prefix. Anything whose meaning depends on more
//! than that is refused with the reason: operators (`|`, `&&`, `;`,
//! redirections, a second line), command substitution, special parameters,
//! `${NAME:-...}` forms, unset variables, globs, an unquoted `~`, a comment, brace
//! expansion, an unquoted expansion whose value would be split or
//! globbed, or (in [`read`]) an assignment to `IFS`.

pub mod words;

use words::{is_name, join_lines, Sep, Splitter};

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

/// Whether the environment variable `name` changes what a shell's `-c`
/// string runs before or instead of what it says: bash sources `BASH_ENV`
/// and takes functions (`BASH_FUNC_exec%%`, which even `exec` would call)
/// and options (`SHELLOPTS`, `BASHOPTS`) from the environment.
pub fn env_changes_the_string(name: &str) -> bool {
    matches!(name, "BASH_ENV" | "SHELLOPTS" | "BASHOPTS") || name.starts_with("BASH_FUNC_")
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

/// Split `script` into one simple command, expanding variables from `env`
/// and a whole-word `"$@"` to `positional`.
pub fn split(
    script: &str,
    env: &dyn Fn(&str) -> Option<String>,
    positional: &[String],
) -> Result<Simple, &'static str> {
    let chars = join_lines(script);
    let (words, next, _) = Splitter::new(&chars, 0, env, positional).statement()?;
    if chars[next..].iter().any(|c| !c.is_whitespace()) {
        return Err("a shell operator (|, &&, ;, redirection, subshell)");
    }
    simple(words)
}

/// What a shell string of simple commands does: the engine's command (the
/// last one, `exec`'d when others come before it), and what the commands
/// before it change for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    /// The engine's command.
    pub simple: Simple,
    /// Variables exported by the commands before it (`export A=1`, or a
    /// variable of the environment assigned anew), each with its last value.
    pub exports: Vec<(String, String)>,
    /// `cd` targets, in order.
    pub cds: Vec<String>,
}

/// A shell variable the commands before the engine set.
struct Var {
    name: String,
    value: Option<String>,
    exported: bool,
}

/// Read `script` as simple commands separated by `;`, `&&` or line breaks
/// (comments allowed), of which every one before the last is harmless
/// (`ulimit`, `export`, `cd DIR`, `echo`, `set` with options that change no
/// command, `:`, `true`, plain assignments) and the last `exec`s the engine.
/// A single command needs no `exec` (its status is the shell's). Anything
/// else is refused with the reason.
pub fn read(
    script: &str,
    env: &dyn Fn(&str) -> Option<String>,
    positional: &[String],
) -> Result<Script, &'static str> {
    let chars = join_lines(script);
    let mut vars: Vec<Var> = Vec::new();
    let mut cds = Vec::new();
    let mut last_words = None;
    let mut n = 0;
    let mut i = 0;
    loop {
        let lookup = |name: &str| match vars.iter().find(|v| v.name == name) {
            Some(v) => v.value.clone(),
            None => env(name),
        };
        let (words, next, sep) = Splitter::new(&chars, i, &lookup, positional).statement()?;
        i = next;
        let last = sep.is_none() || chars[i..].iter().all(|c| c.is_whitespace());
        if words.is_empty() {
            if sep == Some(Sep::Newline) || last {
                if last {
                    break;
                }
                continue;
            }
            return Err("an empty command");
        }
        n += 1;
        if last {
            last_words = Some(words);
            break;
        }
        leading(words, &mut vars, &mut cds, env)?;
    }
    let words = last_words.ok_or("no command")?;
    let execd = words.first().is_some_and(|(w, _)| w == "exec");
    let simple = simple(words)?;
    if n > 1 && !execd {
        return Err("commands before the engine and no exec of it (write exec before the engine)");
    }
    let exports = vars
        .into_iter()
        .filter(|v| v.exported)
        .filter_map(|v| Some((v.name, v.value?)))
        .collect();
    Ok(Script {
        simple,
        exports,
        cds,
    })
}

/// A command before the engine: what it changes, or why it is refused.
fn leading(
    words: Vec<(String, Option<usize>)>,
    vars: &mut Vec<Var>,
    cds: &mut Vec<String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), &'static str> {
    let mut set = |name: &str, value: Option<String>, export: bool| {
        if name == "IFS" {
            // it changes how every unquoted expansion after it splits
            return Err("a change of IFS");
        }
        let was = vars.iter().position(|v| v.name == name);
        let exported = export
            || match was {
                Some(k) => vars[k].exported,
                None => env(name).is_some(),
            };
        let value = value.or_else(|| match was {
            Some(k) => vars[k].value.clone(),
            None => env(name),
        });
        if let Some(k) = was {
            vars.remove(k);
        }
        vars.push(Var {
            name: name.to_string(),
            value,
            exported,
        });
        Ok(())
    };
    if words.iter().all(|(_, eq)| eq.is_some()) {
        // `A=1 B=2`: shell variables (exported when already in the environment)
        for (w, eq) in &words {
            let p = eq.unwrap_or_default();
            set(&w[..p], Some(w[p + 1..].to_string()), false)?;
        }
        return Ok(());
    }
    if words.iter().any(|(_, eq)| eq.is_some()) && words[0].1.is_some() {
        return Err("an assignment before a command other than the engine");
    }
    let argv: Vec<&str> = words.iter().map(|(w, _)| w.as_str()).collect();
    match argv[..] {
        ["ulimit", ..] | ["echo", ..] | [":", ..] | ["true"] => Ok(()),
        ["export", ref names @ ..] if !names.is_empty() => {
            for (w, eq) in &words[1..] {
                match eq {
                    Some(p) => set(&w[..*p], Some(w[*p + 1..].to_string()), true)?,
                    None if is_name(w) => set(w, None, true)?,
                    None => return Err("export with an option or a word that is no name"),
                }
            }
            Ok(())
        }
        ["cd", dir] if !dir.is_empty() && !dir.starts_with('-') => {
            let relative =
                !dir.starts_with('/') && !dir.starts_with("./") && !dir.starts_with("../");
            if relative && env("CDPATH").is_some_and(|c| !c.is_empty()) {
                return Err("cd to a relative directory with CDPATH set");
            }
            cds.push(dir.to_string());
            Ok(())
        }
        ["set", ref opts @ ..] if !opts.is_empty() && set_options(opts) => Ok(()),
        ["exec", ..] => Err("commands after exec"),
        _ => Err("a command before the engine other than ulimit, export, cd DIR, echo, set, :"),
    }
}

/// `set` options that change no command's arguments or environment:
/// `-e`, `-u`, `-x`, `-v` (and their `+` forms), `-o pipefail|errexit|nounset|xtrace`.
fn set_options(opts: &[&str]) -> bool {
    let mut it = opts.iter();
    while let Some(o) = it.next() {
        match *o {
            "-o" | "+o" => {
                if !matches!(
                    it.next().copied(),
                    Some("pipefail" | "errexit" | "nounset" | "xtrace" | "verbose")
                ) {
                    return false;
                }
            }
            o => {
                let Some(flags) = o.strip_prefix('-').or_else(|| o.strip_prefix('+')) else {
                    return false;
                };
                if flags.is_empty() || !flags.chars().all(|c| "euxv".contains(c)) {
                    return false;
                }
            }
        }
    }
    true
}

/// The simple command of `words`: its leading assignments, and its argv
/// without an `exec` prefix.
fn simple(words: Vec<(String, Option<usize>)>) -> Result<Simple, &'static str> {
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
    use super::words::names;
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

    fn script(s: &str) -> Result<Script, &'static str> {
        read(s, &env, &[])
    }

    #[test]
    fn reads_simple_commands_then_exec() {
        let s = script("ulimit -n 65536; exec python3 x --port $PORT").unwrap();
        assert_eq!(s.simple.argv, ["python3", "x", "--port", "8000"]);
        assert!(s.exports.is_empty() && s.cds.is_empty());
        let s = script(
            "set -e\n# limits\nulimit -n 1 -l unlimited\nexport A=1 B\ncd /w && cd sub\nexec python3 x\n",
        )
        .unwrap();
        assert_eq!(s.exports, [("A".to_string(), "1".to_string())]);
        assert_eq!(s.cds, ["/w", "sub"]);
        // a variable of the environment assigned anew is exported with its new value
        let s = script("PORT=9; X=2; exec python3 x --port $PORT $X").unwrap();
        assert_eq!(s.exports, [("PORT".to_string(), "9".to_string())]);
        assert_eq!(s.simple.argv, ["python3", "x", "--port", "9", "2"]);
        // exported later, after an assignment
        let s = script("X=2; export X; exec python3 x").unwrap();
        assert_eq!(s.exports, [("X".to_string(), "2".to_string())]);
        // a single command needs no exec, and may end in ; or a newline
        assert_eq!(script("python3 x;").unwrap().simple.argv, ["python3", "x"]);
        assert_eq!(
            script("python3 x\n\n").unwrap().simple.argv,
            ["python3", "x"]
        );
        assert_eq!(
            script("set -eux -o pipefail; : ; true; echo hi; exec python3 x")
                .unwrap()
                .simple
                .argv,
            ["python3", "x"]
        );
    }

    #[test]
    fn refuses_lists_it_cannot_read_whole() {
        for s in [
            "ulimit -n 1; python3 x", // no exec
            "python3 x; exit 0",      // the engine is not last
            "python3 x || true",
            "exec python3 x; echo",
            "source env.sh; exec python3 x",
            "set -a; A=1; exec python3 x",
            "set -- a; exec python3 x",
            "cd; exec python3 x",
            "cd -; exec python3 x",
            "export -p; exec python3 x",
            "export -n A; exec python3 x",
            "A=1 echo; exec python3 x",
            "; exec python3 x",
            "a;; exec python3 x",
            "ulimit -n 1 & exec python3 x",
            "ulimit -n 1 | exec python3 x",
            "echo $UNSET; exec python3 x",
            "IFS=:; exec python3 x",
            "export IFS; exec python3 x",
            "$EMPTY; exec python3 x",
            "$EMPTY A=1; exec python3 x",
        ] {
            assert!(script(s).is_err(), "{s}");
        }
        let cdpath = |n: &str| (n == "CDPATH").then(|| "/x".to_string());
        assert!(read("cd sub; exec python3 x", &cdpath, &[]).is_err());
        assert!(read("cd ./sub; exec python3 x", &cdpath, &[]).is_ok());
    }

    #[test]
    fn a_token_that_expands_to_nothing_is_still_a_token() {
        assert_eq!(ok("python3 $EMPTY#x").argv, ["python3", "#x"]);
        assert_eq!(ok("python3 $EMPTY #x").argv, ["python3"]);
        let s = ok("$EMPTY A=1 python3");
        assert!(s.assigns.is_empty());
        assert_eq!(s.argv, ["A=1", "python3"]);
        assert!(split("python3 $EMPTY\"$@\"", &env, &["a".into()]).is_err());
    }

    #[test]
    fn a_comment_ends_at_its_newline() {
        // a backslash in a comment continues no line, a quote opens nothing
        let s = script("# don't\nexec python3 x \\\n --port 1 # a \\\n").unwrap();
        assert_eq!(s.simple.argv, ["python3", "x", "--port", "1"]);
        assert!(script("python3 x # a \\\n''").is_err());
        // no comment inside a word
        assert_eq!(ok("python3 x\\\n#").argv, ["python3", "x#"]);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]
        #[test]
        fn no_input_panics(text in "[-a-zA-Z0-9 '\"\\\\$@{}()=|;&<>*?~#\n\u{e9}]{0,60}") {
            let pos = ["x".to_string()];
            let _ = split(&text, &env, &pos);
            let _ = read(&text, &env, &pos);
            let _ = names(&text);
            let words: Vec<String> = text.split(' ').map(str::to_string).collect();
            let _ = c_string(&words);
        }
    }
}
