//! The command line as an operator meets it: `KEEPWRAP_*` variables (empty
//! means unset, an invalid value names the variable), log levels and
//! `-v`/`-q`, `keepwrap config`, and the hints for a forgotten `--`.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{output as boot, repo, Finished, BIN};

/// keepwrap with a scratch HOME and engine cache directory, and no
/// `KEEPWRAP_*` variable from the test's own environment.
fn kw(home: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    common::without_keepwrap_env(&mut cmd);
    cmd.env("HOME", home)
        .env("SGLANG_CACHE_DIR", home.join("sglang"));
    cmd
}

/// Every `KEEPWRAP_*` variable of the option table (docs/configuration.md).
fn documented_variables() -> Vec<String> {
    let readme = std::fs::read_to_string(repo().join("docs/configuration.md")).unwrap();
    let mut vars: Vec<String> = readme
        .lines()
        .filter(|l| l.starts_with("| `--") || l.starts_with("| |"))
        .flat_map(|l| l.split('`').map(str::to_string).collect::<Vec<_>>())
        .filter(|w| w.starts_with("KEEPWRAP_") && !w.contains(' ') && !w.contains('='))
        .collect();
    vars.sort();
    vars.dedup();
    assert!(
        vars.len() >= 20,
        "the option table of docs/configuration.md: {vars:?}"
    );
    vars
}

fn config_json(f: &Finished) -> serde_json::Value {
    assert_eq!(f.code, 0, "{}", f.stderr);
    serde_json::from_str(&f.stdout.join("\n")).unwrap()
}

#[test]
fn every_empty_variable_is_the_same_as_unset() {
    let home = tempfile::tempdir().unwrap();
    let vars = documented_variables();
    let mut cmd = kw(home.path());
    for v in &vars {
        cmd.env(v, "");
    }
    let f = boot(cmd.args(["config", "--json"]));
    let cfg = config_json(&f);
    for (name, entry) in cfg.as_object().unwrap() {
        assert_eq!(entry["source"], "default", "{name}: {entry}");
    }
    // Typed: durations in seconds, sizes in bytes, switches as booleans;
    // `text` is the value as written.
    assert_eq!(cfg["grace"]["value"], 5);
    assert_eq!(cfg["grace"]["text"], "5s");
    assert_eq!(cfg["probe-interval"]["value"], 0.5);
    assert_eq!(cfg["store-max-age"]["value"], 30 * 86_400);
    assert_eq!(cfg["store-max-size"]["value"], 1u64 << 30);
    assert_eq!(cfg["store-max-size"]["text"], "1GiB");
    assert_eq!(cfg["kill-group"]["value"], false);
    assert_eq!(cfg["strict"]["value"], false);
    assert_eq!(cfg["kill-after"]["value"], serde_json::Value::Null);
    assert_eq!(cfg["profile"]["value"], "auto");
    assert_eq!(cfg["log"]["value"], "info");
    // And a launch runs: the child's status is the launch's.
    let mut cmd = kw(home.path());
    for v in &vars {
        cmd.env(v, "");
    }
    let f = boot(cmd.args(["--", "sh", "-c", "exit 3"]));
    assert_eq!(f.code, 3, "{}", f.stderr);
    assert!(!f.stderr.contains("error"), "{}", f.stderr);
}

#[test]
fn an_invalid_variable_is_a_usage_error_under_strict_naming_it_and_its_value() {
    let home = tempfile::tempdir().unwrap();
    let marker = home.path().join("ran");
    for (i, (var, value)) in [
        ("KEEPWRAP_GRACE", "soon"),
        ("KEEPWRAP_KILL_AFTER", "-3"),
        ("KEEPWRAP_UNIFY", "sometimes"),
        ("KEEPWRAP_KILL_GROUP", "maybe"),
        ("KEEPWRAP_DISABLE", "2"),
        ("KEEPWRAP_PROFILE", "tgi"),
        ("KEEPWRAP_STORE_MAX_SIZE", "big"),
        ("KEEPWRAP_DONE", "later"),
        ("KEEPWRAP_LOG_FORMAT", "yaml"),
    ]
    .into_iter()
    .enumerate()
    {
        // --strict, or KEEPWRAP_STRICT=1: fail fast.
        let mut cmd = kw(home.path());
        if i % 2 == 0 {
            cmd.env("KEEPWRAP_STRICT", "1");
        } else {
            cmd.arg("--strict");
        }
        let f = boot(
            cmd.env(var, value)
                .args(["--", "touch", marker.to_str().unwrap()]),
        );
        assert_eq!(f.code, 2, "{var}={value}: {}", f.stderr);
        let first = f.stderr.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("keepwrap: error: ")
                && first.contains(var)
                && first.contains(&format!("\"{value}\"")),
            "{var}={value}: {}",
            f.stderr
        );
        assert!(!marker.exists(), "{var}={value}: the command must not run");
    }
}

#[test]
fn an_invalid_flag_is_named_as_the_flag_even_with_the_variable_set() {
    let home = tempfile::tempdir().unwrap();
    let f = boot(
        kw(home.path())
            .env("KEEPWRAP_GRACE", "2s")
            .args(["--grace", "soon", "--", "true"]),
    );
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert!(
        f.stderr.contains("'soon'") && f.stderr.contains("--grace"),
        "{}",
        f.stderr
    );
    assert!(!f.stderr.contains("KEEPWRAP_GRACE"), "{}", f.stderr);
}

/// `keepwrap -- cmd` that cannot start: one error line (exit 127).
fn missing_command(home: &Path, cmd: &mut Command) -> Finished {
    let f = boot(cmd.args(["--done", "exit", "--", "/nonexistent/engine"]));
    assert_eq!(f.code, 127, "{}", f.stderr);
    let _ = home;
    f
}

fn warnings(f: &Finished) -> Vec<&str> {
    f.stderr
        .lines()
        .filter(|l| l.starts_with("keepwrap: warning:"))
        .collect()
}

fn count(f: &Finished, prefix: &str) -> usize {
    f.stderr.lines().filter(|l| l.starts_with(prefix)).count()
}

fn info_lines(f: &Finished) -> usize {
    f.stderr
        .lines()
        .filter(|l| {
            l.starts_with("keepwrap: ")
                && !l.starts_with("keepwrap: error:")
                && !l.starts_with("keepwrap: warning:")
                && !l.starts_with("keepwrap: debug:")
        })
        .count()
}

#[test]
fn usual_level_spellings_never_mute_errors() {
    let home = tempfile::tempdir().unwrap();
    for level in ["warning", "WARN", "err", "error"] {
        let f = missing_command(home.path(), kw(home.path()).env("KEEPWRAP_LOG", level));
        assert_eq!(
            count(&f, "keepwrap: error: cannot run"),
            1,
            "{level}: {}",
            f.stderr
        );
        assert_eq!(info_lines(&f), 0, "{level}: {}", f.stderr);
        assert_eq!(count(&f, "keepwrap: warning:"), 0, "{level}: {}", f.stderr);
    }
}

#[test]
fn an_unknown_level_logs_at_info_with_one_warning() {
    let home = tempfile::tempdir().unwrap();
    for level in ["bogus", "keepwrap", "loud"] {
        let f = missing_command(home.path(), kw(home.path()).env("KEEPWRAP_LOG", level));
        assert_eq!(
            count(&f, "keepwrap: error: cannot run"),
            1,
            "{level}: {}",
            f.stderr
        );
        assert!(
            info_lines(&f) >= 1,
            "{level}: info lines stay: {}",
            f.stderr
        );
        let warnings = warnings(&f);
        assert_eq!(warnings.len(), 1, "{level}: {}", f.stderr);
        assert!(
            warnings[0].contains(&format!("KEEPWRAP_LOG=\"{level}\"")),
            "{}",
            warnings[0]
        );
    }
}

#[test]
fn a_filter_directive_still_works() {
    let home = tempfile::tempdir().unwrap();
    let f = missing_command(
        home.path(),
        kw(home.path()).env("KEEPWRAP_LOG", "off,keepwrap=error"),
    );
    assert_eq!(count(&f, "keepwrap: error:"), 1, "{}", f.stderr);
    assert_eq!(info_lines(&f), 0, "{}", f.stderr);
}

#[test]
fn quiet_and_verbose_flags_step_through_the_levels() {
    let home = tempfile::tempdir().unwrap();
    // A launch that logs info lines, one warning and one error: --cache-dir
    // outside the engine's directory (warning), a command that cannot run
    // (error).
    let run = |flags: &[&str]| {
        boot(
            kw(home.path())
                .args(flags)
                .args(["--cache-dir"])
                .arg(home.path().join("elsewhere"))
                .args([
                    "--keep",
                    "always",
                    "--done",
                    "exit",
                    "--",
                    "/nonexistent/sglang",
                ]),
        )
    };
    let f = run(&[]);
    assert!(info_lines(&f) >= 1, "{}", f.stderr);
    assert_eq!(count(&f, "keepwrap: warning:"), 1, "{}", f.stderr);
    assert_eq!(count(&f, "keepwrap: error:"), 1, "{}", f.stderr);
    let f = run(&["-q"]);
    assert_eq!(info_lines(&f), 0, "{}", f.stderr);
    assert_eq!(count(&f, "keepwrap: warning:"), 1, "{}", f.stderr);
    assert_eq!(count(&f, "keepwrap: error:"), 1, "{}", f.stderr);
    for qq in [&["-qq"][..], &["-q", "--quiet"][..]] {
        let f = run(qq);
        assert_eq!(count(&f, "keepwrap: warning:"), 0, "{qq:?}: {}", f.stderr);
        assert_eq!(count(&f, "keepwrap: error:"), 1, "{qq:?}: {}", f.stderr);
    }
    let f = run(&["-qqq"]);
    assert_eq!(
        f.stderr
            .lines()
            .filter(|l| l.starts_with("keepwrap:"))
            .count(),
        0,
        "{}",
        f.stderr
    );
    assert_eq!(f.code, 127);
    // The flags win over KEEPWRAP_LOG, one level per flag.
    for (flags, var, want) in [
        (&["-v"][..], None, "debug"),
        (&["-vv"][..], None, "trace"),
        (&["-q"][..], Some("debug"), "info"),
        (&["-v"][..], Some("warning"), "info"),
    ] {
        let mut cmd = kw(home.path());
        if let Some(v) = var {
            cmd.env("KEEPWRAP_LOG", v);
        }
        let cfg = config_json(&boot(cmd.args(flags).args(["config", "--json"])));
        assert_eq!(cfg["log"]["value"], want, "{flags:?} {var:?}");
        assert_eq!(cfg["log"]["source"], "flag", "{flags:?} {var:?}");
    }
}

#[test]
fn config_says_where_each_setting_came_from() {
    let home = tempfile::tempdir().unwrap();
    let f = boot(
        kw(home.path())
            .env("KEEPWRAP_GRACE", "3s")
            .env("KEEPWRAP_KILL_AFTER", "4s")
            .env("KEEPWRAP_LOG", "warning")
            .args([
                "--kill-after",
                "7s",
                "--ignore-arg",
                "--foo",
                "config",
                "--json",
            ]),
    );
    let cfg = config_json(&f);
    let entry = |name: &str| {
        (
            cfg[name]["value"].clone(),
            cfg[name]["source"].clone(),
            cfg[name]["from"].clone(),
        )
    };
    use serde_json::json;
    assert_eq!(
        entry("grace"),
        (json!(3), json!("variable"), json!("KEEPWRAP_GRACE"))
    );
    assert_eq!(
        entry("kill-after"),
        (json!(7), json!("flag"), json!("--kill-after"))
    );
    assert_eq!(
        entry("ignore-arg"),
        (json!("--foo"), json!("flag"), json!("--ignore-arg"))
    );
    // Each setting names the variable that sets it, whatever set it now.
    assert_eq!(cfg["probe-interval"]["variable"], "KEEPWRAP_PROBE_INTERVAL");
    assert_eq!(cfg["log"]["variable"], "KEEPWRAP_LOG");
    assert_eq!(
        entry("probe-interval"),
        (json!(0.5), json!("default"), json!(null))
    );
    assert_eq!(entry("share"), (json!(null), json!("default"), json!(null)));
    assert_eq!(
        entry("log"),
        (json!("warn"), json!("variable"), json!("KEEPWRAP_LOG"))
    );
    let root = home.path().join("sglang/flashinfer/autotune");
    assert_eq!(
        entry("cache-root"),
        (
            json!(root.to_str().unwrap()),
            json!("default"),
            json!("SGLANG_CACHE_DIR")
        )
    );

    // The text form, one line per setting, as `ccache -p` prints them; the
    // flag form `--show-config` prints the same.
    let text = boot(kw(home.path()).env("KEEPWRAP_GRACE", "3s").args([
        "config",
        "--",
        "python3",
        "-m",
        "sglang.launch_server",
        "--port",
        "8001",
    ]));
    assert_eq!(text.code, 0, "{}", text.stderr);
    let line = |name: &str| {
        text.stdout
            .iter()
            .find(|l| l.contains(&format!(" {name} = ")))
            .unwrap_or_else(|| panic!("{name}: {:?}", text.stdout))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(line("grace"), "(variable KEEPWRAP_GRACE) grace = 3s");
    assert_eq!(line("kill-after"), "(default) kill-after = (off)");
    assert!(
        line("done-for-command").ends_with("GET http://127.0.0.1:8001/health first answers 200")
    );
    let flag = boot(kw(home.path()).env("KEEPWRAP_GRACE", "3s").args([
        "--show-config",
        "--",
        "python3",
        "-m",
        "sglang.launch_server",
        "--port",
        "8001",
    ]));
    assert_eq!(flag.code, 0, "{}", flag.stderr);
    assert_eq!(flag.stdout, text.stdout);
}

#[test]
fn a_command_without_the_separator_gets_a_hint() {
    let home = tempfile::tempdir().unwrap();
    let marker = home.path().join("ran");
    let f = boot(
        kw(home.path())
            .args(["--grace", "2s", "touch"])
            .arg(&marker),
    );
    assert_eq!(f.code, 2, "{}", f.stderr);
    assert!(!marker.exists());
    let first = f.stderr.lines().next().unwrap();
    assert_eq!(
        first,
        format!(
            "keepwrap: error: unexpected argument 'touch': the command to run goes after `--`, as in: keepwrap --grace 2s -- touch {}",
            marker.display()
        )
    );
    let f = boot(kw(home.path()).arg("true"));
    assert_eq!(f.code, 2);
    assert!(f.stderr.contains("keepwrap -- true"), "{}", f.stderr);
    // Words that need quoting are quoted, and no control character reaches
    // the terminal.
    let f = boot(kw(home.path()).args(["echo", "a b", "\x1b[31m"]));
    assert_eq!(f.code, 2);
    assert!(
        f.stderr.contains(r#"keepwrap -- echo "a b" "\u{1b}[31m""#),
        "{}",
        f.stderr
    );
    assert!(!f.stderr.contains('\x1b'), "{}", f.stderr);
}

#[test]
fn ignore_arg_takes_a_dashed_flag_without_a_misleading_tip() {
    let home = tempfile::tempdir().unwrap();
    let fp = |args: &[&str]| {
        let f = boot(
            kw(home.path())
                .arg("fingerprint")
                .args(args)
                .args(["--", "python3", "serve.py", "--foo", "1", "--tp", "2"]),
        );
        assert_eq!(f.code, 0, "{args:?}: {}", f.stderr);
        assert!(!f.stderr.contains("tip"), "{}", f.stderr);
        f.stdout.last().unwrap().clone()
    };
    let spaced = fp(&["--ignore-arg", "--foo"]);
    assert_eq!(spaced, fp(&["--ignore-arg=--foo"]));
    assert_eq!(spaced, fp(&["--ignore-arg", "foo"]));
    assert_ne!(spaced, fp(&[]));
    // And on a run.
    let f = boot(kw(home.path()).args(["--ignore-arg", "--foo", "--done", "exit", "--", "true"]));
    assert_eq!(f.code, 0, "{}", f.stderr);
    // A missing value is still an error, not the `--` taken as the flag.
    let f = boot(kw(home.path()).args(["--ignore-arg", "--", "true"]));
    assert_eq!(f.code, 2, "{}", f.stderr);
}

#[test]
fn a_cache_dir_outside_the_engine_directory_warns() {
    let home = tempfile::tempdir().unwrap();
    let engine = home.path().join("sglang/flashinfer/autotune");
    let elsewhere = home.path().join("elsewhere");
    let run = |dir: &Path| {
        boot(kw(home.path()).arg("--cache-dir").arg(dir).args([
            "--log-format",
            "json",
            "--keep",
            "always",
            "--done",
            "exit",
            "--",
            "sh",
            "-c",
            "exit 0",
            "sglang.launch_server",
        ]))
    };
    let f = run(&elsewhere);
    assert_eq!(f.code, 0, "{}", f.stderr);
    let w = f.warnings();
    assert_eq!(w.len(), 1, "{}", f.stderr);
    assert_eq!(w[0]["code"], "cache_dir_not_engines", "{}", f.stderr);
    assert_eq!(w[0]["dir"], elsewhere.to_str().unwrap(), "{}", f.stderr);
    assert_eq!(w[0]["engine"], engine.to_str().unwrap(), "{}", f.stderr);
    let f = run(&engine);
    assert!(f.warnings().is_empty(), "{}", f.stderr);
}

/// The first line of a subcommand's output.
fn first_line(f: &Finished) -> &str {
    f.stdout.first().map(String::as_str).unwrap_or_default()
}

#[test]
fn an_option_before_a_subcommand_applies_to_it() {
    let home = tempfile::tempdir().unwrap();
    let other = home.path().join("other");
    let other_s = other.to_str().unwrap();
    // evict and clean work on the root named before them.
    for sub in [&["evict", "--all"][..], &["clean"]] {
        let f = boot(kw(home.path()).args(["--cache-dir", other_s]).args(sub));
        assert_eq!(f.code, 0, "{sub:?}: {}", f.stderr);
        assert!(
            first_line(&f).contains(&format!("{other_s} has no store")),
            "{sub:?}: {:?}",
            f.stdout
        );
    }
    // status reads that root, and the profile named before it (neither
    // exists yet, as the line says).
    const MISSING: &str = ": does not exist (nothing is cached here; the first launch creates it)";
    let f = boot(kw(home.path()).args(["--cache-dir", other_s, "status"]));
    assert_eq!(
        first_line(&f),
        format!("cache root {other_s}{MISSING}"),
        "{}",
        f.stderr
    );
    let vllm = home.path().join(".cache/vllm/flashinfer_autotune_cache");
    let f = boot(kw(home.path()).args(["--profile", "vllm", "status"]));
    assert_eq!(
        first_line(&f),
        format!("cache root {}{MISSING}", vllm.display()),
        "{}",
        f.stderr
    );
    // explain too.
    let f = boot(kw(home.path()).args([
        "--cache-dir",
        other_s,
        "explain",
        "--",
        "python3",
        "-m",
        "sglang.launch_server",
    ]));
    assert!(
        f.stdout.join("\n").contains(other_s),
        "{:?} {}",
        f.stdout,
        f.stderr
    );
    // The fingerprint leaves out what --ignore-arg names, wherever it is
    // written (and both places add up).
    let launch = [
        "--",
        "python3",
        "-m",
        "sglang.launch_server",
        "--foo",
        "1",
        "--bar",
        "2",
    ];
    let fp = |opts: &[&str]| {
        let f = boot(kw(home.path()).args(opts).args(launch));
        assert_eq!(f.code, 0, "{opts:?}: {}", f.stderr);
        f.stdout.join("\n")
    };
    let counted = |explain: &str, flag: &str| explain.contains(&format!("\narg \"{flag}\""));
    let after = fp(&["fingerprint", "--ignore-arg", "--foo", "--explain"]);
    assert!(
        !counted(&after, "--foo") && counted(&after, "--bar"),
        "{after}"
    );
    assert_eq!(
        fp(&["--ignore-arg", "--foo", "fingerprint", "--explain"]),
        after
    );
    assert_eq!(
        fp(&["--ignore-arg=--foo", "fingerprint", "--explain"]),
        after
    );
    assert_ne!(fp(&["fingerprint", "--explain"]), after);
    let both = fp(&[
        "--ignore-arg",
        "--foo",
        "fingerprint",
        "--ignore-arg",
        "--bar",
        "--explain",
    ]);
    assert!(
        !counted(&both, "--foo") && !counted(&both, "--bar"),
        "{both}"
    );
}

#[test]
fn an_option_a_subcommand_does_not_take_is_refused() {
    let home = tempfile::tempdir().unwrap();
    for (opts, sub) in [
        (&["--grace", "3s"][..], &["status"][..]),
        (&["--unify", "off"], &["evict", "--all"]),
        (&["--done", "exit"], &["fingerprint", "--", "true"]),
        (&["--kill-group"], &["clean"]),
        (&["--store-max-size", "1k"], &["explain", "--", "true"]),
    ] {
        let f = boot(kw(home.path()).args(opts).args(sub));
        assert_eq!(f.code, 2, "{opts:?} {sub:?}: {}", f.stderr);
        let first = f.stderr.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("keepwrap: error: ")
                && first.contains(opts[0])
                && first.contains(&format!("`keepwrap {}`", sub[0])),
            "{opts:?} {sub:?}: {}",
            f.stderr
        );
        assert!(f.stdout.is_empty(), "{opts:?} {sub:?}: {:?}", f.stdout);
    }
    // Written twice, before and after, is refused as any repeated option.
    let f = boot(kw(home.path()).args(["--cache-dir", "/a", "status", "--cache-dir", "/b"]));
    assert_eq!(f.code, 2, "{}", f.stderr);
    assert!(f.stderr.contains("--cache-dir"), "{}", f.stderr);
}

/// A launch of `touch MARKER` kept as an engine's (`--keep always`), in JSON
/// logs, with `env` and `args` before `--`.
fn launch_with(home: &Path, env: &[(&str, &str)], args: &[&str]) -> (Finished, bool) {
    let marker = home.join("ran");
    let _ = std::fs::remove_file(&marker);
    let f = boot(
        kw(home)
            .env("KEEPWRAP_KEEP", "always")
            .env("KEEPWRAP_LOG_FORMAT", "json")
            .envs(env.iter().copied())
            .args(args)
            .args(["--", "touch", marker.to_str().unwrap()]),
    );
    (f, marker.exists())
}

#[test]
fn an_invalid_setting_is_said_and_the_engine_starts() {
    let home = tempfile::tempdir().unwrap();
    // A valid launch keeps the cache: no `supervising_only`.
    let (f, ran) = launch_with(home.path(), &[], &[]);
    assert!(ran && f.code == 0, "{}", f.stderr);
    assert!(
        common::events_named(&f.stderr, "supervising_only").is_empty(),
        "{}",
        f.stderr
    );
    // (variable or flag, value, a cache setting?, what the line says then)
    let cases: [(&str, &str, bool); 9] = [
        ("KEEPWRAP_UNIFY", "yes", true),
        ("KEEPWRAP_STORE_MAX_SIZE", "1PB", true),
        ("KEEPWRAP_DONE", "later", true),
        ("KEEPWRAP_PROFILE", "tgi", true),
        ("--unify", "yes", true),
        ("KEEPWRAP_GRACE", "soon", false),
        ("KEEPWRAP_KILL_GROUP", "maybe", false),
        ("--kill-after", "1e20", false),
        ("KEEPWRAP_LOG_FORMAT", "yaml", false),
    ];
    for (name, value, cache) in cases {
        let flag = [name, value];
        let (env, args): (&[(&str, &str)], &[&str]) = if name.starts_with("--") {
            (&[], &flag)
        } else {
            (&[(name, value)], &[])
        };
        let (f, ran) = launch_with(home.path(), env, args);
        assert_eq!(f.code, 0, "{name}={value}: {}", f.stderr);
        assert!(ran, "{name}={value}: the engine must start: {}", f.stderr);
        // One line says which setting and what it was; the log format it
        // names is json, unless it is the log format that was wrong.
        let lines: Vec<&str> = f.stderr.lines().collect();
        let said: Vec<serde_json::Value> = if name == "KEEPWRAP_LOG_FORMAT" {
            assert!(
                lines[0]
                    .starts_with("keepwrap: error: invalid value \"yaml\" in KEEPWRAP_LOG_FORMAT"),
                "{}",
                f.stderr
            );
            assert!(
                lines.iter().all(|l| l.starts_with("keepwrap: ")),
                "{}",
                f.stderr
            );
            continue;
        } else {
            common::events_named(&f.stderr, "setting_invalid")
        };
        assert_eq!(said.len(), 1, "{name}={value}: {}", f.stderr);
        let msg = said[0]["message"].as_str().unwrap();
        assert_eq!(said[0]["level"], "ERROR", "{msg}");
        assert!(
            msg.starts_with("invalid value ") && msg.contains(name) && msg.contains(value),
            "{msg}"
        );
        assert!(msg.contains("--strict"), "{msg}");
        let alone = common::events_named(&f.stderr, "supervising_only");
        if cache {
            assert!(msg.contains("leaves the cache alone"), "{msg}");
            assert_eq!(
                alone.len(),
                1,
                "{name}={value}: the cache left alone: {}",
                f.stderr
            );
            // ... and it names the setting, not a flag nobody passed
            let why = alone[0]["message"].as_str().unwrap();
            assert!(
                why.contains(name) && !why.contains("--disable"),
                "{name}={value}: {why}"
            );
            assert_eq!(alone[0]["reason"], "invalid_setting", "{why}");
        } else {
            assert!(msg.contains("default"), "{msg}");
            assert!(
                alone.is_empty(),
                "{name}={value}: the cache still kept: {}",
                f.stderr
            );
        }
    }
    // Bytes that are not UTF-8, in a variable or a flag, are one more
    // invalid value.
    use std::os::unix::ffi::OsStrExt;
    let bad = std::ffi::OsStr::from_bytes(b"a\xff");
    let marker = home.path().join("ran");
    for strict in [false, true] {
        let mut cmd = kw(home.path());
        if strict {
            cmd.arg("--strict");
        }
        let f = boot(cmd.env("KEEPWRAP_VOLATILE_ENV", bad).args([
            "--",
            "touch",
            marker.to_str().unwrap(),
        ]));
        assert_eq!(f.code, if strict { 2 } else { 0 }, "{}", f.stderr);
        assert_eq!(marker.exists(), !strict, "{}", f.stderr);
        assert!(
            f.stderr.starts_with("keepwrap: error: invalid value \"a\u{fffd}\" in KEEPWRAP_VOLATILE_ENV (for --volatile-env): not UTF-8"),
            "{}",
            f.stderr
        );
        let _ = std::fs::remove_file(&marker);
    }
    let f = boot(kw(home.path()).arg("--grace").arg(bad).args(["--", "true"]));
    assert_eq!(f.code, 0, "{}", f.stderr);
    // A missing command stays a usage error.
    let f = boot(kw(home.path()).env("KEEPWRAP_GRACE", "soon"));
    assert_eq!(f.code, 2, "{}", f.stderr);
}

/// Command lines keepwrap refuses, each for another reason.
const REFUSED: [&[&str]; 9] = [
    &["--bogus", "--", "true"],
    &["--bogus"],
    &["status", "--bogus"],
    &["evict"],
    &["evict", "--all", "--older-than", "1d"],
    &["--strict", "--grace", "soon", "--", "true"],
    &["--strict", "--unify", "yes", "--", "true"],
    &["stauts"],
    &[],
];

#[test]
fn every_line_keepwrap_says_on_a_usage_error_starts_with_its_name() {
    let home = tempfile::tempdir().unwrap();
    for args in REFUSED {
        let f = boot(kw(home.path()).args(args));
        assert_eq!(f.code, 2, "{args:?}: {}", f.stderr);
        assert!(f.stdout.is_empty(), "{args:?}: {:?}", f.stdout);
        let lines: Vec<&str> = f.stderr.lines().collect();
        assert!(!lines.is_empty(), "{args:?}");
        assert!(
            lines[0].starts_with("keepwrap: error: "),
            "{args:?}: {}",
            f.stderr
        );
        for l in &lines {
            assert!(
                l.starts_with("keepwrap: "),
                "{args:?}: {l:?} in\n{}",
                f.stderr
            );
        }
        // No tip that would run the wrong thing: `-- --bogus` runs
        // `--bogus` as the command.
        assert!(!f.stderr.contains("'-- "), "{args:?}: {}", f.stderr);
        // The same error in JSON, one object a line, when the logs are JSON.
        for json in [&["--log-format", "json"][..], &["--log-format=json"]] {
            let f = boot(kw(home.path()).args(json).args(args));
            assert_eq!(f.code, 2, "{args:?}: {}", f.stderr);
            let events = common::log_events(&f.stderr);
            assert_eq!(
                events.len(),
                f.stderr.lines().count(),
                "{args:?}: {}",
                f.stderr
            );
            assert_eq!(events[0]["code"], "usage_error", "{args:?}: {}", f.stderr);
            assert_eq!(events[0]["level"], "ERROR");
            // The same words (a hint shows the command line, with the
            // --log-format words in it).
            let head = |l: &str| {
                let l = l.split(" as in: ").next().unwrap();
                l.split(" (a command").next().unwrap().to_string()
            };
            let said = events[0]["message"].as_str().unwrap();
            assert_eq!(
                format!("keepwrap: error: {}", head(said)),
                head(lines[0]),
                "{args:?}"
            );
        }
        let f = boot(
            kw(home.path())
                .env("KEEPWRAP_LOG_FORMAT", "json")
                .args(args),
        );
        assert_eq!(
            common::log_events(&f.stderr)[0]["code"],
            "usage_error",
            "{args:?}: {}",
            f.stderr
        );
    }
}

#[test]
fn a_mistyped_subcommand_suggests_the_subcommand() {
    let home = tempfile::tempdir().unwrap();
    for (typed, meant) in [
        ("stauts", "status"),
        ("evcit", "evict"),
        ("fingerprnt", "fingerprint"),
        ("confg", "config"),
    ] {
        let f = boot(kw(home.path()).arg(typed));
        assert_eq!(f.code, 2, "{}", f.stderr);
        let first = f.stderr.lines().next().unwrap_or_default();
        assert!(
            first.contains(&format!("`keepwrap {meant}`")),
            "{typed}: {}",
            f.stderr
        );
        // and still where a command to run would go
        assert!(
            first.contains(&format!("keepwrap -- {typed}")),
            "{typed}: {}",
            f.stderr
        );
    }
    // A word that is no subcommand's near miss gets only the `--` hint.
    let f = boot(kw(home.path()).args(["python3", "-m", "x"]));
    assert!(!f.stderr.contains("did you mean"), "{}", f.stderr);
}

#[test]
fn help_and_version_say_what_they_should() {
    let home = tempfile::tempdir().unwrap();
    let out = |args: &[&str]| {
        let f = boot(kw(home.path()).args(args));
        assert_eq!(f.code, 0, "{args:?}: {}", f.stderr);
        f.stdout
    };
    assert_eq!(out(&["-V"]), out(&["--version"]));
    // The version names the sidecar format it writes.
    assert_eq!(
        out(&["--version"]).join("\n").trim(),
        format!(
            "keepwrap {} (sidecar format {})",
            env!("CARGO_PKG_VERSION"),
            keepwrap::SIDECAR_FORMAT
        )
    );
    // Each subcommand's help starts with what it does.
    let top = out(&["--help"]).join("\n");
    for sub in [
        "status",
        "explain",
        "fingerprint",
        "evict",
        "clean",
        "config",
        "share-status",
    ] {
        let help = out(&[sub, "--help"]);
        let title = &help[0];
        let word = match sub {
            "status" => "cache file",
            "explain" => "Compare",
            "fingerprint" => "fingerprint",
            "evict" => "Evict",
            "clean" => "Evict",
            "config" => "settings",
            _ => "share",
        };
        assert!(title.contains(word), "{sub}: {title:?}");
        assert!(!title.starts_with("What identifies"), "{sub}: {title:?}");
        assert!(
            top.contains(&format!("keepwrap {sub}")),
            "{sub} in the usage:\n{top}"
        );
    }
}

#[test]
fn a_command_that_cannot_start_says_why() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    let bin = home.path().join("bin");
    std::fs::create_dir_all(bin.join("engine-dir")).unwrap();
    let script = bin.join("engine.sh");
    std::fs::write(&script, "#!/nonexistent/python9 -u\nprint('hi')\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    for (command, code, says) in [
        (
            bin.join("engine-dir").display().to_string(),
            126,
            "is a directory",
        ),
        ("engine-dir".to_string(), 126, "is a directory"),
        (
            script.display().to_string(),
            127,
            "its interpreter /nonexistent/python9 (its #! line) is not found",
        ),
        (
            "engine.sh".to_string(),
            127,
            "its interpreter /nonexistent/python9 (its #! line) is not found",
        ),
        ("no-such-engine".to_string(), 127, "not found"),
    ] {
        let f = boot(kw(home.path()).env("PATH", &path).args(["--", &command]));
        assert_eq!(f.code, code, "{command}: {}", f.stderr);
        let line = f
            .stderr
            .lines()
            .find(|l| l.starts_with("keepwrap: error: cannot run"))
            .unwrap_or_else(|| panic!("{command}: {}", f.stderr));
        assert!(line.contains(says), "{command}: {line}");
    }
}

#[test]
fn completions_and_the_man_page_come_from_the_definitions() {
    let home = tempfile::tempdir().unwrap();
    let out = |args: &[&str]| {
        let f = boot(kw(home.path()).args(args));
        assert_eq!(f.code, 0, "{args:?}: {}", f.stderr);
        f.stdout.join("\n")
    };
    // bash takes the script: `keepwrap <TAB>` completes keepwrap's words.
    let script = out(&["completions", "bash"]);
    let f = boot(Command::new("bash").args([
        "-c",
        "source /dev/stdin <<<\"$0\"; complete -p keepwrap",
        &script,
    ]));
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert!(
        f.stdout[0].ends_with("-F _keepwrap keepwrap"),
        "{:?}",
        f.stdout
    );
    for word in [
        "status",
        "evict",
        "--cache-dir",
        "--store-max-size",
        "--dry-run",
    ] {
        assert!(script.contains(word), "{word} in the bash completions");
    }
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        assert!(
            out(&["completions", shell]).contains("cache-dir"),
            "{shell}"
        );
    }
    // The man page: roff, with every option and subcommand.
    let man = out(&["man"]);
    assert!(
        man.contains(".TH keepwrap 1"),
        "{}",
        &man[..man.len().min(400)]
    );
    for word in [
        "\\-\\-cache\\-dir",
        "\\-\\-strict",
        "KEEPWRAP_GRACE",
        "share\\-status",
    ] {
        assert!(man.contains(word), "{word} in the man page");
    }
    // Only pages that exist are cited (there is one page: keepwrap(1)),
    // and it says what each exit status means.
    assert!(
        !man.contains("keepwrap\\-evict(1)") && !man.contains("(1)\n"),
        "{man}"
    );
    let exit = man
        .split(".SH ")
        .find(|s| s.starts_with("EXIT STATUS"))
        .unwrap_or_else(|| panic!("no EXIT STATUS section: {man}"));
    for code in ["127", "126", "128+N", "2", "1"] {
        let item = format!(".TP\n\\fB{code}\\fR\n");
        assert!(exit.contains(&item), "{code} in {exit}");
    }
    // Neither is a subcommand the help lists.
    let help = out(&["--help"]);
    assert!(
        !help.contains("completions") && !help.contains("\n  man"),
        "{help}"
    );
    // A shell keepwrap has no completions for is a usage error.
    let f = boot(kw(home.path()).args(["completions", "tcsh"]));
    assert_eq!(f.code, 2, "{}", f.stderr);
}
