//! The two log formats: `--log-format json` writes one JSON object per
//! line, each an event of the catalogue with its fields; the text format
//! shows the message alone after `keepwrap:`, as an operator reads it.

use crate::common::{self, output, BIN};

use std::path::Path;
use std::process::Command;

const DIR: &str = "0.7.2/sm121/0123456789abcdef";

/// A launch whose engine (a script file, so that no `sh -c` string is
/// warned about) saves two rank files as FlashInfer does, with
/// `--log-format FORMAT`, no keepwrap variable of the caller's.
fn launch(root: &Path, format: &str) -> Command {
    engine(
        root,
        format,
        &["--done", "exit"],
        "for r in 0 1; do printf '{\"k%s\": [\"R\", %s]}' $r $r > \"$d/.autotuner_$r.tmp\" && mv \"$d/.autotuner_$r.tmp\" \"$d/rank_tp${r}_pp0_dp0.json\"; done",
    )
}

/// keepwrap `--log-format FORMAT --keep always DONE` around a script file
/// that runs `body` with `$d` the cache directory of [`DIR`] (made).
fn engine(root: &Path, format: &str, done: &[&str], body: &str) -> Command {
    let script = root.with_extension("sh");
    std::fs::write(
        &script,
        format!("d=\"$1/{DIR}\"; mkdir -p \"$d\" 2>/dev/null || exit 0; {body}\n"),
    )
    .unwrap();
    let mut cmd = Command::new(BIN);
    common::without_keepwrap_env(&mut cmd)
        .args(["--log-format", format, "--keep", "always"])
        .args(done)
        .arg("--cache-dir")
        .arg(root)
        .arg("--")
        .arg("sh")
        .arg(&script)
        .arg(root);
    cmd
}

/// Every line of `stderr` as a JSON object of the log schema
/// ([`common::check_schema`]), or a panic naming the line.
fn objects(stderr: &str) -> Vec<serde_json::Map<String, serde_json::Value>> {
    stderr
        .lines()
        .map(|l| match serde_json::from_str::<serde_json::Value>(l) {
            Ok(v @ serde_json::Value::Object(_)) => {
                common::check_schema(&v, l);
                v.as_object().unwrap().clone()
            }
            other => panic!("not a JSON object ({other:?}): {l}"),
        })
        .collect()
}

fn named<'a>(
    events: &'a [serde_json::Map<String, serde_json::Value>],
    name: &str,
) -> Vec<&'a serde_json::Map<String, serde_json::Value>> {
    events.iter().filter(|e| e["code"] == name).collect()
}

#[test]
fn json_logs_are_one_event_per_line_with_its_fields() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    let tuned = output(&mut launch(&root, "json"));
    assert_eq!(tuned.code, 0, "{}", tuned.stderr);
    let events = objects(&tuned.stderr);
    for e in &events {
        for key in ["timestamp", "level", "target", "code", "message", "launch"] {
            assert!(e[key].is_string(), "{key} in {e:?}");
        }
        assert!(!e["message"].as_str().unwrap().starts_with("keepwrap:"));
    }
    // One launch id on every event, new at the next start; the root on
    // every event once it is known (from the first).
    let launch_id = events[0]["launch"].as_str().unwrap().to_string();
    for e in &events {
        assert_eq!(e["launch"], launch_id.as_str(), "{e:?}");
        assert_eq!(e["root"], root.to_str().unwrap(), "{e:?}");
        assert_eq!(e["schema"], 1, "{e:?}");
    }
    // The first event names the launch: its whole fingerprint, its
    // profile, its root.
    let first = &events[0];
    assert_eq!(first["code"], "launch");
    assert_eq!(first["level"], "INFO");
    let fp = first["fingerprint"].as_str().unwrap();
    assert!(
        fp.len() == 64 && fp.bytes().all(|b| b.is_ascii_hexdigit()),
        "{fp}"
    );
    assert_eq!(first["profile"], "sglang");
    assert_eq!(first["root"], root.to_str().unwrap());
    assert!(first["message"]
        .as_str()
        .unwrap()
        .starts_with(&format!("launch fingerprint {}... ", &fp[..8])));
    let pruned = named(&events, "pruned");
    assert_eq!(pruned.len(), 1, "{}", tuned.stderr);
    assert_eq!(pruned[0]["kept"], 0);
    assert_eq!(pruned[0]["removed"], 0);
    let done = named(&events, "tuning_done");
    assert_eq!(done.len(), 1, "{}", tuned.stderr);
    assert_eq!(done[0]["rule"], "exit");
    assert!(done[0]["after_s"].as_f64().unwrap() >= 0.0);
    let signed = named(&events, "signed");
    assert_eq!(signed.len(), 1, "{}", tuned.stderr);
    assert_eq!(signed[0]["files"], 2);
    assert_eq!(signed[0]["fingerprint"], fp);
    assert_eq!(signed[0]["message"], "tuned and signed 2 cache files");

    // The same launch again: both files kept, each named by its path (at
    // debug level).
    let reused = output(launch(&root, "json").env("KEEPWRAP_LOG", "debug"));
    assert_eq!(reused.code, 0, "{}", reused.stderr);
    let events = objects(&reused.stderr);
    assert_ne!(events[0]["launch"], launch_id.as_str());
    let kept: Vec<&str> = named(&events, "kept")
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        kept,
        [
            format!("{DIR}/rank_tp0_pp0_dp0.json"),
            format!("{DIR}/rank_tp1_pp0_dp0.json")
        ]
    );
    let r = named(&events, "reused");
    assert_eq!(r.len(), 1, "{}", reused.stderr);
    assert_eq!(r[0]["files"], 2);
    assert!(named(&events, "signed").is_empty());
}

#[test]
fn a_warning_in_json_carries_its_level_and_error() {
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("file");
    std::fs::write(&file, "").unwrap();
    let b = output(&mut launch(&file, "json"));
    assert_ne!(b.code, -1, "{}", b.stderr);
    let events = objects(&b.stderr);
    let w = named(&events, "root_not_a_directory");
    assert_eq!(w.len(), 1, "{}", b.stderr);
    assert_eq!(w[0]["level"], "WARN");
    assert_eq!(w[0]["root"], file.to_str().unwrap());
}

#[test]
fn text_logs_show_the_message_alone_as_operators_read_it() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    let b = output(&mut launch(&root, "text"));
    assert_eq!(b.code, 0, "{}", b.stderr);
    let lines: Vec<&str> = b.stderr.lines().collect();
    assert!(
        lines.iter().all(|l| l.starts_with("keepwrap: ")),
        "{}",
        b.stderr
    );
    // No field is appended after the message.
    assert!(!b.stderr.contains("event="), "{}", b.stderr);
    assert!(!b.stderr.contains("fingerprint="), "{}", b.stderr);
    // The first line names the fingerprint, the profile, the root and the
    // done rule.
    let first = lines[0];
    assert!(
        first.starts_with("keepwrap: launch fingerprint ")
            && first.ends_with(&format!(
                "... (sglang profile); cache root {}; tuning is done when the command exits 0",
                root.display()
            )),
        "{first}"
    );
    assert!(lines.contains(&"keepwrap: tuned and signed 2 cache files"));
    // The same launch in JSON says the same messages.
    let json_root = t.path().join("json");
    let j = output(&mut launch(&json_root, "json"));
    let messages: Vec<String> = objects(&j.stderr)
        .iter()
        .map(|e| e["message"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(messages.len(), lines.len(), "{}\n{}", b.stderr, j.stderr);
    assert!(messages.contains(&"tuned and signed 2 cache files".to_string()));
}

/// keepwrap's lines of a text log.
fn keepwrap_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("keepwrap: "))
        .collect()
}

/// `line` is `head` then a number of seconds then ` s`.
fn after_seconds(line: &str, head: &str) -> bool {
    line.strip_prefix(head)
        .and_then(|rest| rest.strip_suffix(" s"))
        .is_some_and(|t| t.parse::<f64>().is_ok_and(|t| t >= 0.0))
}

#[test]
fn every_launch_ends_on_a_line_saying_how_the_engine_ended() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    let b = output(&mut launch(&root, "text"));
    assert_eq!(b.code, 0, "{}", b.stderr);
    let lines = keepwrap_lines(&b.stderr);
    assert!(
        lines.contains(&"keepwrap: tuned and signed 2 cache files"),
        "{}",
        b.stderr
    );
    let last = lines.last().unwrap();
    assert!(
        after_seconds(last, "keepwrap: the engine exited with status 0 after "),
        "{}",
        b.stderr
    );

    let failing = t.path().join("failing");
    let f = output(&mut engine(&failing, "text", &["--done", "exit"], "exit 3"));
    assert_eq!(f.code, 3, "{}", f.stderr);
    let last = *keepwrap_lines(&f.stderr).last().unwrap();
    assert!(
        after_seconds(last, "keepwrap: the engine exited with status 3 after "),
        "{}",
        f.stderr
    );
}

#[test]
fn a_command_keepwrap_only_supervises_ends_on_a_line_saying_how_it_ended() {
    let t = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(BIN);
    cmd.env("HOME", t.path())
        .env("KEEPWRAP_LOG_FORMAT", "text")
        .args(["--cache-dir"])
        .arg(t.path().join("root"))
        .args(["--", "sh", "-c", "exit 3"]);
    let f = output(&mut cmd);
    assert_eq!(f.code, 3, "{}", f.stderr);
    let lines = keepwrap_lines(&f.stderr);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("is no engine launch (--keep auto)")),
        "{}",
        f.stderr
    );
    let last = *lines.last().unwrap();
    assert!(
        after_seconds(last, "keepwrap: the command exited with status 3 after "),
        "{}",
        f.stderr
    );
    let mut cmd = Command::new(BIN);
    cmd.env("HOME", t.path())
        .env("KEEPWRAP_LOG_FORMAT", "text")
        .args(["--disable", "--", "sh", "-c", "kill -TERM $$"]);
    let f = output(&mut cmd);
    assert_eq!(f.code, 143, "{}", f.stderr);
    let last = *keepwrap_lines(&f.stderr).last().unwrap();
    assert!(
        after_seconds(
            last,
            "keepwrap: the command was killed by SIGTERM (status 143) after "
        ),
        "{}",
        f.stderr
    );
}

#[test]
fn a_stop_after_reused_still_ends_on_how_the_engine_ended() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    let server = |root: &Path| {
        engine(
            root,
            "text",
            &["--done", "quiet=300ms"],
            "printf '{\"k\": [\"R\", 0]}' > \"$d/rank_tp0_pp0_dp0.json\"; exec sleep 30",
        )
    };
    for verdict in [
        "keepwrap: tuned and signed 1 cache file",
        "keepwrap: reused 1 cache file signed for this launch",
    ] {
        let mut run = common::Running::spawn(&mut server(&root));
        run.wait_stderr(verdict, std::time::Duration::from_secs(20));
        run.guard.signal(nix::sys::signal::Signal::SIGTERM);
        let f = run.finish(std::time::Duration::from_secs(20));
        assert_eq!(f.code, 143, "{}", f.stderr);
        let lines = keepwrap_lines(&f.stderr);
        assert!(lines.contains(&verdict), "{}", f.stderr);
        assert!(
            after_seconds(
                lines.last().unwrap(),
                "keepwrap: the engine was killed by SIGTERM (status 143) after "
            ),
            "{}",
            f.stderr
        );
    }
}

#[test]
fn every_signal_and_a_kill_of_the_engine_after_reused_end_on_how_the_engine_ended() {
    use nix::sys::signal::{kill, Signal};
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    let server = || {
        engine(
            &root,
            "text",
            &["--done", "quiet=300ms"],
            "printf '{\"k\": [\"R\", 0]}' > \"$d/rank_tp0_pp0_dp0.json\"; exec sleep 30",
        )
    };
    let reused = "keepwrap: reused 1 cache file signed for this launch";
    let mut first = common::Running::spawn(&mut server());
    first.wait_stderr(
        "keepwrap: tuned and signed 1 cache file",
        std::time::Duration::from_secs(20),
    );
    first.guard.signal(Signal::SIGTERM);
    first.finish(std::time::Duration::from_secs(20));
    // Signals to keepwrap, forwarded; then a KILL of the engine itself.
    for (to_engine, sig, code) in [
        (false, Signal::SIGINT, 130),
        (false, Signal::SIGHUP, 129),
        (false, Signal::SIGQUIT, 131),
        (true, Signal::SIGKILL, 137),
    ] {
        let mut run = common::Running::spawn(&mut server());
        run.wait_stderr(reused, std::time::Duration::from_secs(20));
        if to_engine {
            let pid = run.guard.pid().as_raw();
            let engine = common::wait_for("the engine", std::time::Duration::from_secs(10), || {
                common::children_of(pid).first().copied()
            });
            kill(nix::unistd::Pid::from_raw(engine), sig).unwrap();
        } else {
            run.guard.signal(sig);
        }
        let f = run.finish(std::time::Duration::from_secs(20));
        assert_eq!(f.code, code, "{sig}: {}", f.stderr);
        let lines = keepwrap_lines(&f.stderr);
        assert!(lines.contains(&reused), "{}", f.stderr);
        assert!(
            after_seconds(
                lines.last().unwrap(),
                &format!(
                    "keepwrap: the engine was killed by {} (status {code}) after ",
                    sig.as_str()
                )
            ),
            "{sig}: {}",
            f.stderr
        );
    }
}

#[test]
fn a_warm_boot_that_tuned_nothing_logs_no_landed_line() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    let one = |root: &Path| {
        engine(
            root,
            "text",
            &["--done", "exit"],
            "printf '{\"k\": [\"R\", 0]}' > \"$d/rank_tp0_pp0_dp0.json\"",
        )
    };
    let cold = output(&mut one(&root));
    assert_eq!(cold.code, 0, "{}", cold.stderr);
    let landed = format!("keepwrap: landed {DIR}/rank_tp0_pp0_dp0.json (1 entry, ");
    assert!(
        keepwrap_lines(&cold.stderr)
            .iter()
            .any(|l| l.starts_with(&landed) && l.ends_with(" s after the launch)")),
        "{}",
        cold.stderr
    );
    assert!(
        cold.stderr
            .contains("keepwrap: tuned and signed 1 cache file\n"),
        "{}",
        cold.stderr
    );

    // The same launch saves the same file again: nothing tuned, no
    // progress line; at debug level it says so.
    let warm = output(&mut one(&root));
    assert_eq!(warm.code, 0, "{}", warm.stderr);
    let lines = keepwrap_lines(&warm.stderr);
    assert!(
        lines.contains(&"keepwrap: reused 1 cache file signed for this launch"),
        "{}",
        warm.stderr
    );
    assert!(
        !lines.iter().any(|l| l.starts_with("keepwrap: landed")),
        "{}",
        warm.stderr
    );
    let debug = output(one(&root).env("KEEPWRAP_LOG", "debug"));
    let unchanged = format!(
        "keepwrap: debug: landed {DIR}/rank_tp0_pp0_dp0.json unchanged: as signed for this launch, nothing new tuned ("
    );
    assert!(
        keepwrap_lines(&debug.stderr)
            .iter()
            .any(|l| l.starts_with(&unchanged) && l.ends_with(" s after the launch)")),
        "{}",
        debug.stderr
    );
}

/// An engine whose entry gate removes what it just saved, file after file,
/// for over a second (40 rounds of 20 files): keepwrap watches the
/// directory the engine creates only once it has seen it, so an engine
/// that saves and removes only a few files may be done before the watch.
/// Each file is saved as FlashInfer saves it (a temporary file renamed over
/// it), so that keepwrap never reads one half written. One python3, not a
/// `mv` and an `rm` per file (1,600 processes a boot).
const GATE: &str = r#"exec python3 -S -c 'import os, sys, time
d = sys.argv[1]
for _ in range(40):
    for r in range(20):
        f, t = f"{d}/rank_tp{r}_pp0_dp0.json", f"{d}/.autotuner_{r}.tmp"
        with open(t, "w") as out:
            out.write("{\"k\": [\"R\", 0]}")
        os.rename(t, f)
        os.remove(f)
    time.sleep(0.03)
' "$d""#;

#[test]
fn a_file_the_engine_removes_is_told_at_debug_level_not_as_unreadable() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    let mut cmd = engine(&root, "text", &["--done", "exit"], GATE);
    let b = output(cmd.env("KEEPWRAP_LOG", "debug"));
    assert_eq!(b.code, 0, "{}", b.stderr);
    let lines = keepwrap_lines(&b.stderr);
    assert!(
        !lines.iter().any(|l| l.contains("unreadable")),
        "{}",
        b.stderr
    );
    let gone = format!("keepwrap: debug: {DIR}/rank_tp");
    assert!(
        lines.iter().any(|l| l.starts_with(&gone)
            && l.contains("_pp0_dp0.json was saved and then removed or renamed by the engine before keepwrap read it (")),
        "{}",
        b.stderr
    );
    // At info level, no line about those files but the count of one read
    // before it went.
    let info = output(&mut engine(
        &t.path().join("info"),
        "text",
        &["--done", "exit"],
        GATE,
    ));
    assert!(
        !keepwrap_lines(&info.stderr)
            .iter()
            .any(|l| l.starts_with("keepwrap: landed") && !l.contains(" entry, ")),
        "{}",
        info.stderr
    );
}

/// The fake engine on `port` behind `keepwrap -v --done health=...`: it
/// loads for `load_ms`, then serves /health with 200 for `exit_after_ms`.
fn probed_engine(home: &Path, port: &str, load_ms: &str, exit_after_ms: &str) -> Command {
    let done = format!("health=http://127.0.0.1:{port}/health");
    common::keepwrap_engine(
        home,
        &["-v", "--done", &done],
        &[
            "--port",
            port,
            "--load-ms",
            load_ms,
            "--exit-after-ms",
            exit_after_ms,
        ],
    )
}

#[test]
fn a_health_probe_line_shows_the_status_as_a_number() {
    let home = common::home();
    let port = common::free_port().to_string();
    let mut cmd = probed_engine(home.path(), &port, "800", "100");
    let f = common::boot(cmd.env("KEEPWRAP_LOG_FORMAT", "text"));
    assert_eq!(f.code, 0, "{}", f.stderr);
    let line =
        format!("keepwrap: debug: health probe of http://127.0.0.1:{port}/health: status 503");
    assert!(
        keepwrap_lines(&f.stderr).contains(&line.as_str()),
        "{}",
        f.stderr
    );
    assert!(!f.stderr.contains("Some("), "{}", f.stderr);
}

#[test]
fn a_boot_whose_signed_file_was_corrupted_says_so_not_how_another_launch_differs() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    // Another launch (one more argument) signs first, then this one: the
    // other's set goes to the store, and both have a launch record.
    let other = output(launch(&root, "text").arg("x"));
    assert_eq!(other.code, 0, "{}", other.stderr);
    let first = output(&mut launch(&root, "text"));
    assert!(
        first
            .stderr
            .contains("keepwrap: tuned and signed 2 cache files\n"),
        "{}",
        first.stderr
    );
    std::fs::write(root.join(DIR).join("rank_tp1_pp0_dp0.json"), "garbage\n").unwrap();

    // a file of this launch's own set changed after signing is named at
    // the default level
    let b = output(&mut launch(&root, "text"));
    assert_eq!(b.code, 0, "{}", b.stderr);
    let lines = keepwrap_lines(&b.stderr);
    assert!(
        lines.contains(
            &format!("keepwrap: removed {DIR}/rank_tp1_pp0_dp0.json: changed after signing (size 8 != signed 147)")
                .as_str()
        ),
        "{}",
        b.stderr
    );
    assert!(
        lines.iter().any(|l| l
            .strip_prefix("keepwrap: no cache for this launch: it was signed ")
            .and_then(|l| l.strip_suffix(" ago, but its cache files were removed or are gone (the prune line above counts why; KEEPWRAP_LOG=debug names each file); it tunes again"))
            .is_some_and(|ago| ago.ends_with(" seconds") || ago == "1 second")),
        "{}",
        b.stderr
    );
    assert!(!b.stderr.contains("nearest signed launch"), "{}", b.stderr);
}

#[test]
fn a_world_writable_root_gets_one_line_not_a_removal_every_boot() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
    let line = format!(
        "keepwrap: warning: cache root {0} is world-writable without the sticky bit: will never keep here (another user could plant what keepwrap would sign), so every cache file in it is removed at each boot and none is signed: chmod o-w {0}",
        root.display()
    );
    for boot in 0..2 {
        let b = output(&mut launch(&root, "text"));
        assert_eq!(b.code, 0, "{}", b.stderr);
        let lines = keepwrap_lines(&b.stderr);
        let about: Vec<&&str> = lines
            .iter()
            .filter(|l| l.contains("another user") || l.contains(": removed "))
            .collect();
        assert_eq!(about, [&line.as_str()], "boot {boot}: {}", b.stderr);
        assert!(
            lines.contains(&"keepwrap: nothing signed: none of the 2 cache files present can be signed (see the lines above); the next launch tunes again"),
            "boot {boot}: {}",
            b.stderr
        );
    }
    // Still fail closed: the second boot removed what the first saved (at
    // debug level), and nothing is signed.
    let b = output(launch(&root, "text").env("KEEPWRAP_LOG", "debug"));
    assert!(
        b.stderr.contains(&format!(
            "keepwrap: debug: removed {DIR}/rank_tp1_pp0_dp0.json: in a directory another user can write (.: world-writable without the sticky bit)\n"
        )),
        "{}",
        b.stderr
    );
    assert!(!root.join(DIR).join("rank_tp1_pp0_dp0.launch").exists());

    // With the sticky bit (as /tmp), the root is kept as any other.
    let sticky = t.path().join("sticky");
    std::fs::create_dir(&sticky).unwrap();
    std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let b = output(&mut launch(&sticky, "text"));
    assert!(
        b.stderr
            .contains("keepwrap: tuned and signed 2 cache files\n"),
        "{}",
        b.stderr
    );
    assert!(!b.stderr.contains("will never keep here"), "{}", b.stderr);
}

/// What no line may hold: Rust's debug output of an `Option`, a `Result`
/// or a list, or a count of one with a plural noun ("1 cache files").
fn misworded(line: &str) -> Option<String> {
    for debug in ["Some(", "None", "Ok(", "Err(", "[\"", "[]"] {
        if line.contains(debug) {
            return Some(format!("Rust debug output {debug:?}"));
        }
    }
    if line
        .as_bytes()
        .windows(2)
        .any(|w| w[0] == b'[' && w[1].is_ascii_digit())
    {
        return Some("a list in Rust debug output".to_string());
    }
    const PLURALS: [&str; 9] = [
        "files",
        "entries",
        "leftovers",
        "nodes",
        "directories",
        "ranks",
        "launches",
        "sets",
        "seconds",
    ];
    let words: Vec<&str> = line
        .split(|c: char| c.is_whitespace() || c == '(' || c == ',')
        .filter(|w| !w.is_empty())
        .collect();
    for (i, w) in words.iter().enumerate() {
        if *w != "1" {
            continue;
        }
        // The noun a count of one goes with: the next word, or the one
        // after it (`1 cache files`, `1 rank files`).
        for noun in words.iter().skip(i + 1).take(2) {
            if PLURALS.contains(&noun.trim_end_matches([':', '.', ';', ')'])) {
                return Some(format!("\"1 ... {noun}\""));
            }
        }
    }
    None
}

/// keepwrap's lines of `out` that [`misworded`] finds fault with.
fn misworded_lines(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| misworded(l).map(|why| format!("{why}: {l}")))
        .collect()
}

/// The paths one boot's text log gave more than one verdict (`kept P:`,
/// `removed P:`, `stored P:`, at any level), with those lines.
fn two_verdicts(stderr: &str) -> Vec<String> {
    let mut by_path: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for line in stderr.lines() {
        let Some(rest) = line
            .strip_prefix("keepwrap: ")
            .map(|l| l.strip_prefix("debug: ").unwrap_or(l))
        else {
            continue;
        };
        for verb in ["kept ", "removed ", "stored "] {
            if let Some((path, _)) = rest.strip_prefix(verb).and_then(|r| r.split_once(": ")) {
                by_path.entry(path).or_default().push(line);
            }
        }
    }
    by_path
        .into_values()
        .filter(|lines| lines.len() > 1)
        .map(|lines| lines.join("\n"))
        .collect()
}

#[test]
fn the_scanner_of_misworded_lines_finds_what_it_looks_for() {
    for bad in [
        "keepwrap: prune: kept 0, removed 1 cache files and 0 leftovers",
        "keepwrap: unified 2 rank files in d: 1 entries each, 1 conflicting",
        "keepwrap: debug: health probe: status Some(503)",
        "keepwrap: debug: sockets: inodes [\"1\"]",
        "keepwrap: debug: sockets listening for 127.0.0.1:1: inodes [1996738]",
    ] {
        assert!(misworded(bad).is_some(), "{bad}");
    }
    assert_eq!(
        two_verdicts("keepwrap: kept d/a.json: signed for this launch\nkeepwrap: kept d/b.json: signed for this launch\nkeepwrap: debug: removed d/a.json: why\n").len(),
        1
    );
    for good in [
        "keepwrap: prune: kept 1, removed 0 cache files and 0 leftovers",
        "keepwrap: tuned and signed 1 cache file",
        "keepwrap: landed d/rank_tp0_pp0_dp0.json (1 entry, 0.1 s after the launch)",
    ] {
        assert!(misworded(good).is_none(), "{good}");
    }
}

/// A one-rank engine that saves its rank file as FlashInfer does (a
/// temporary renamed over it), `extra` after it.
fn one_rank(root: &Path, done: &[&str], extra: &str) -> Command {
    let mut cmd = engine(
        root,
        "text",
        done,
        &format!("printf '{{\"k\": [\"R\", 0]}}' > \"$d/.autotuner_0.tmp\" && mv \"$d/.autotuner_0.tmp\" \"$d/rank_tp0_pp0_dp0.json\"; {extra}"),
    );
    cmd.env("KEEPWRAP_LOG", "debug");
    cmd
}

#[test]
fn no_line_of_many_boots_shows_rust_debug_output_or_a_count_of_one_in_the_plural() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    let all = std::cell::RefCell::new(String::new());
    let run = |cmd: &mut Command| {
        let f = output(cmd);
        assert_eq!(
            two_verdicts(&f.stderr),
            Vec::<String>::new(),
            "{}",
            f.stderr
        );
        all.borrow_mut().push_str(&f.stderr);
        f
    };
    // Cold, warm, another launch (this one's set stored), this one again
    // (restored), with one rank file.
    let exit = ["--done", "exit"];
    for b in [
        run(&mut one_rank(&root, &exit, "")),
        run(&mut one_rank(&root, &exit, "")),
        run(one_rank(&root, &exit, "").arg("other")),
        run(&mut one_rank(&root, &exit, "")),
    ] {
        assert_eq!(b.code, 0, "{}", b.stderr);
    }
    // Two rank files of one entry each that differ: unified.
    let two = t.path().join("two");
    let same_key =
        "for r in 0 1; do printf '{\"k\": [\"R\", %s]}' $r > \"$d/rank_tp${r}_pp0_dp0.json\"; done";
    let u = run(engine(&two, "text", &exit, same_key).env("KEEPWRAP_LOG", "debug"));
    assert!(
        u.stderr.contains("keepwrap: unified 2 rank files"),
        "{}",
        u.stderr
    );
    // A signed file corrupted: removed, one of one; one of two, and a
    // file planted beside them: each file one verdict.
    std::fs::write(root.join(DIR).join("rank_tp0_pp0_dp0.json"), "garbage\n").unwrap();
    run(&mut one_rank(&root, &exit, ""));
    std::fs::write(two.join(DIR).join("rank_tp1_pp0_dp0.json"), "{}").unwrap();
    std::fs::write(two.join(DIR).join("rank_tp2_pp0_dp0.json"), "{}").unwrap();
    run(engine(&two, "text", &exit, same_key).env("KEEPWRAP_LOG", "debug"));
    // A file that lands after done, then a stop.
    let late = t.path().join("late");
    let mut r = common::Running::spawn(&mut one_rank(
        &late,
        &["--done", "quiet=300ms"],
        "sleep 1; printf '{\"j\": [\"R\", 0]}' > \"$d/rank_tp1_pp0_dp0.json\"; exec sleep 30",
    ));
    r.wait_stderr(
        "keepwrap: a cache file landed after tuning was done",
        std::time::Duration::from_secs(20),
    );
    r.guard.signal(nix::sys::signal::Signal::SIGTERM);
    all.borrow_mut()
        .push_str(&r.finish(std::time::Duration::from_secs(20)).stderr);
    // A health probe, the sockets on its port and the engine's processes.
    let home = common::home();
    let port = common::free_port().to_string();
    let mut cmd = probed_engine(home.path(), &port, "300", "1500");
    let h = run(cmd.env("KEEPWRAP_LOG_FORMAT", "text"));
    assert!(h.stderr.contains("sockets listening for"), "{}", h.stderr);
    // What status says of those roots.
    for r in [&root, &two, &late] {
        let mut st = Command::new(BIN);
        common::without_keepwrap_env(&mut st)
            .arg("--cache-dir")
            .arg(r)
            .arg("status");
        let s = output(st.args(["--", "sh", "x"]));
        all.borrow_mut().push_str(&s.stdout.join("\n"));
    }
    let all = all.into_inner();
    // A temporary renamed over a rank file, or a file the engine removed,
    // is no unreadable file.
    assert!(!all.contains("No such file or directory"), "{all}");
    let bad = misworded_lines(&all);
    assert!(bad.is_empty(), "{}\n\nin:\n{all}", bad.join("\n"));
}
