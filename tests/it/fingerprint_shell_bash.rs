//! keepwrap's reading of `sh -c STRING` against the shells themselves: for
//! random strings of quotes, escapes, expansions and blanks, whenever
//! keepwrap says it understands the string, `bash -c` and `sh -c` run the
//! command with exactly the words keepwrap found (after the simple commands
//! before it: `ulimit`, `export`, assignments, `set`, `cd`).

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use keepwrap::launch::shell::read;
use proptest::prelude::*;

const ENV: &[(&str, &str)] = &[
    ("V", "v"),
    ("EMPTY", ""),
    ("SPACE", "a b"),
    ("GLOB", "*"),
    ("BS", "\\"),
    ("Q", "'\""),
    ("EQ", "a=b"),
    ("U", "é\u{1F600}"),
    // the shells do not take IFS from the environment
    ("IFS", "v"),
];

const PARTS: &[&str] = &[
    "a",
    "b=c",
    "--x=",
    " ",
    "  ",
    "\t",
    "'x y'",
    "''",
    "\"\"",
    "\"a\\\"b\"",
    "\\ ",
    "\\\"",
    "\\'",
    "\"'\"",
    "'\"'",
    "\"\\a\"",
    "\"\\\\\"",
    "\\\\",
    "\\$",
    "$",
    "=",
    "$V",
    "${V}",
    "\"$V\"",
    "$EMPTY",
    "${EMPTY}",
    "\"$EMPTY\"",
    "$SPACE",
    "\"$SPACE\"",
    "$GLOB",
    "\"$GLOB\"",
    "$BS",
    "\"$BS\"",
    "$Q",
    "$EQ",
    "$U",
    "\"${U}x\"",
    "$1",
    "\"$@\"",
    "$@",
    "#",
    "#x",
    "a#",
    "~",
    "a~",
    "{a,b}",
    "*",
    "\\*",
    "'*'",
    "\\\n",
    "\"a\\\nb\"",
    "\r",
    "!",
    "%",
    "^",
    "é",
    "$'x'",
    "$\"x\"",
    "${V:-x}",
    "$$",
    "-",
    "--",
    "\"",
    "'",
    "\\",
    "exec ",
    "A=1 ",
];

fn printer(dir: &std::path::Path) {
    let p = dir.join("printargs");
    std::fs::write(
        &p,
        "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done\n",
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn shell_words(shell: &str, dir: &std::path::Path, script: &str) -> Option<Vec<String>> {
    let out = Command::new(shell)
        .arg("-c")
        .arg(script)
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", dir.display()))
        .envs(ENV.iter().copied())
        .current_dir(dir)
        .output()
        .unwrap();
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).unwrap();
    let mut words: Vec<String> = text.split('\0').map(str::to_string).collect();
    words.pop(); // after the last NUL
    Some(words)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    #[ignore = "slow: run by .ci/run"]
    fn what_keepwrap_reads_is_what_the_shell_runs(
        lead in prop::sample::select(&[
            "", "exec ", "A=1 ", "A=1 exec ",
            // simple commands before the engine, as charts write them
            "ulimit -n 1024; exec ", "export V=w; exec ", "V='x y'; exec ", "export EMPTY=e V\nexec ",
            "set -e\n# a comment\nexec ", ": ; true && exec ", "cd . && exec ",
            "x=; exec ", "$EMPTY exec ", "IFS=v; exec ",
        ][..]),
        parts in prop::collection::vec(prop::sample::select(PARTS), 0..8),
    ) {
        let script = format!("{lead}printargs {}", parts.concat());
        let env = |n: &str| ENV.iter().find(|(k, _)| *k == n).map(|(_, v)| v.to_string());
        let Ok(read) = read(&script, &env, &[]) else {
            return Ok(());
        };
        let simple = read.simple;
        let dir = tempfile::tempdir().unwrap();
        printer(dir.path());
        // a file a glob would find, so that an unnoticed glob shows
        std::fs::write(dir.path().join("ab"), "").unwrap();
        for shell in ["bash", "sh"] {
            if !common::have(shell) {
                continue;
            }
            let Some(words) = shell_words(shell, dir.path(), &script) else {
                // the shell rejects what keepwrap reads: it must not be a launch
                prop_assert!(false, "{shell} -c {script:?} fails, keepwrap reads {simple:?}");
                unreachable!();
            };
            prop_assert_eq!(&simple.argv[0], "printargs", "{:?}", script);
            prop_assert_eq!(&simple.argv[1..], &words[..], "{} -c {:?}", shell, script);
        }
    }
}

/// keepwrap's reading of `script`: its words after `printargs`, or `None`
/// when it refuses the string.
fn keepwrap_words(script: &str) -> Option<Vec<String>> {
    let env = |n: &str| {
        ENV.iter()
            .find(|(k, _)| *k == n)
            .map(|(_, v)| v.to_string())
    };
    let read = read(script, &env, &[]).ok()?;
    assert!(read.simple.assigns.is_empty(), "{script:?}: {read:?}");
    assert_eq!(read.simple.argv[0], "printargs", "{script:?}");
    Some(read.simple.argv[1..].to_vec())
}

/// A token that expands to nothing still is a token: a `#` after it is
/// part of a word, no comment, and a `NAME=value` after it is no
/// assignment. A change of IFS is refused. Each case exactly, against bash
/// and sh.
#[test]
fn an_empty_expansion_is_still_a_token() {
    let dir = tempfile::tempdir().unwrap();
    printer(dir.path());
    let read_as: &[(&str, &[&str])] = &[
        ("printargs $EMPTY#", &["#"]),
        ("printargs $EMPTY#x y", &["#x", "y"]),
        ("printargs ${EMPTY}#", &["#"]),
        ("printargs \"$EMPTY\"#", &["#"]),
        ("printargs $EMPTY$EMPTY#", &["#"]),
        ("printargs $EMPTY\\\n#", &["#"]),
        ("x=; exec printargs $x#", &["#"]),
        ("export EMPTY; exec printargs $EMPTY#", &["#"]),
        ("printargs $EMPTY #c", &[]),
        ("printargs $EMPTY", &[]),
        ("printargs $EMPTY$EMPTY", &[]),
        ("printargs $EMPTY\"\"", &[""]),
        ("printargs a$EMPTY#", &["a#"]),
        ("$EMPTY exec printargs a", &["a"]),
        ("exec $EMPTY printargs a", &["a"]),
        // IFS from the environment is not the shell's IFS
        ("printargs $V", &["v"]),
        // a comment ends at its newline: a backslash or a quote in it is text
        ("# don't\nexec printargs a \\\n b", &["a", "b"]),
        ("set -e # x \\\nexec printargs b", &["b"]),
    ];
    for (script, want) in read_as {
        let want: Vec<String> = want.iter().map(|w| w.to_string()).collect();
        assert_eq!(keepwrap_words(script), Some(want.clone()), "{script:?}");
        for shell in ["bash", "sh"] {
            assert!(common::have(shell), "needs {shell}");
            let words = shell_words(shell, dir.path(), script);
            assert_eq!(words, Some(want.clone()), "{shell} -c {script:?}");
        }
    }
    for script in [
        "printargs $1#",
        "printargs $@#",
        "printargs $*#",
        "printargs $#",
        "printargs \"$@\"#",
        "printargs $EMPTY\"$@\"",
        "printargs ${EMPTY:-}#",
        "IFS=v; exec printargs $V",
        "export IFS=v; exec printargs $V",
        "IFS=v export IFS; exec printargs $V",
        "$EMPTY; exec printargs a",
        "$EMPTY A=1; exec printargs a",
        // the line after a comment's backslash is a command of its own
        "A=1 printargs # \\\n''",
    ] {
        assert_eq!(keepwrap_words(script), None, "{script:?}");
    }
    // what the shell runs after an empty first token is the command `A=1`
    let env = |n: &str| {
        ENV.iter()
            .find(|(k, _)| *k == n)
            .map(|(_, v)| v.to_string())
    };
    let s = read("$EMPTY A=1 B=2 printargs", &env, &[]).unwrap().simple;
    assert!(s.assigns.is_empty(), "{s:?}");
    assert_eq!(s.argv, ["A=1", "B=2", "printargs"]);
    let s = read("A=1 $EMPTY B=2 printargs", &env, &[]).unwrap().simple;
    assert_eq!(s.assigns, [("A".to_string(), "1".to_string())]);
    assert_eq!(s.argv, ["B=2", "printargs"]);
    for shell in ["bash", "sh"] {
        assert_eq!(
            shell_words(shell, dir.path(), "$EMPTY A=1 printargs x"),
            None,
            "{shell}"
        );
    }
}
