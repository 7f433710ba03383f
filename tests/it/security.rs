//! Security: keepwrap never follows a symlink when it writes, renames or
//! deletes (a planted link leaves its target, a file we own outside the
//! root, untouched); it never trusts nor rewrites files in a directory
//! another user can write; and no environment value nor secret-named
//! argument value appears in any file it writes or any line it logs.

use crate::common;
use crate::harden;
use serde_json::json;

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use common::*;
use harden::*;

const DIR: &str = "0.7.2/sm121/0123456789abcdef";
const PRECIOUS: &str = "precious: not keepwrap's\n";

/// A file of ours outside the cache root, and its exact bytes.
fn precious(base: &Path) -> std::path::PathBuf {
    let p = base.join("outside/precious.txt");
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, PRECIOUS).unwrap();
    p
}

fn assert_untouched(p: &Path, what: &str) {
    let meta = std::fs::symlink_metadata(p).unwrap();
    assert!(meta.is_file(), "{what}: still a file");
    assert_eq!(
        std::fs::read_to_string(p).unwrap(),
        PRECIOUS,
        "{what}: bytes untouched"
    );
}

fn is_symlink(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
}

/// `keepwrap --done exit -- sh -c SCRIPT` in `base`, root `base/root`.
fn sh_launch(base: &Path, script: &str) -> Finished {
    boot(
        keepwrap(&base.join("root"))
            .current_dir(base)
            .args(["--done", "exit", "--", "sh", "-c", script]),
    )
}

/// [`sh_launch`] with `KEEPWRAP_LOG=debug`: each file's prune line is
/// logged.
fn sh_launch_debug(base: &Path, script: &str) -> Finished {
    boot_debug(
        keepwrap(&base.join("root"))
            .current_dir(base)
            .args(["--done", "exit", "--", "sh", "-c", script]),
    )
}

/// Two rank files in DIR saved as FlashInfer saves them (a temp file renamed onto
/// the rank file: unified rank files share one inode, and a save replaces
/// only its own path), then `then`.
fn two_ranks_then(then: &str) -> String {
    format!(
        "d=root/{DIR}; mkdir -p $d; for r in 0 1; do printf '{{\"k%s\": [\"R\", %s]}}' $r $r > $d/.autotuner_$r.tmp && mv $d/.autotuner_$r.tmp $d/rank_tp${{r}}_pp0_dp0.json; done; {then}"
    )
}

#[test]
fn a_sidecar_planted_as_a_symlink_is_replaced_by_sign_never_written_through() {
    let t = scratch();
    let target = precious(t.path());
    // The link appears while the engine runs, after prune.
    let script = two_ranks_then(&format!(
        "ln -s {} $d/rank_tp0_pp0_dp0.launch",
        target.display()
    ));
    let b = sh_launch(t.path(), &script);
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(b.logged_with("signed", json!({"files": 2})), "{}", b.stderr);
    let side = t.path().join(format!("root/{DIR}/rank_tp0_pp0_dp0.launch"));
    assert!(!is_symlink(&side), "the link was replaced by the sidecar");
    assert_untouched(&target, "sign");
    assert_eq!(whole_sets(&t.path().join("root")).len(), 1);
}

#[test]
fn symlinks_in_the_tree_are_removed_as_links_and_their_targets_left_alone() {
    let t = scratch();
    let root = t.path().join("root");
    let target = precious(t.path());
    // An outside directory of rank files, another user's cache say.
    let outside = t.path().join("outside/cache");
    std::fs::create_dir_all(&outside).unwrap();
    for r in 0..2 {
        std::fs::write(outside.join(format!("rank_tp{r}_pp0_dp0.json")), PRECIOUS).unwrap();
    }
    std::fs::create_dir_all(root.join(DIR)).unwrap();
    std::fs::create_dir_all(root.join("0.7.2/sm121/aaaaaaaaaaaaaaaa")).unwrap();
    // A <key16> directory that is a link to the outside directory.
    symlink(&outside, root.join("0.7.2/sm121/bbbbbbbbbbbbbbbb")).unwrap();
    // A rank file that is a link; a sidecar that is a link beside a real
    // rank file; a FlashInfer temp file that is a link.
    symlink(&target, root.join(format!("{DIR}/rank_tp0_pp0_dp0.json"))).unwrap();
    std::fs::write(root.join(format!("{DIR}/rank_tp1_pp0_dp0.json")), b"{}").unwrap();
    symlink(&target, root.join(format!("{DIR}/rank_tp1_pp0_dp0.launch"))).unwrap();
    symlink(
        &target,
        root.join("0.7.2/sm121/aaaaaaaaaaaaaaaa/.autotuner_x1y2.tmp"),
    )
    .unwrap();
    symlink(
        &target,
        root.join("0.7.2/sm121/aaaaaaaaaaaaaaaa/rank_tp9_pp0_dp0.launch"),
    )
    .unwrap();

    let b = sh_launch_debug(t.path(), "exit 0");
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert_no_panic(&b.stderr, "symlinks");
    assert!(
        b.events_named("removed_symlink").iter().any(|e| e["path"]
            == "0.7.2/sm121/bbbbbbbbbbbbbbbb"
            && e["reason"]
                .as_str()
                .unwrap()
                .starts_with("a symlink to a directory")),
        "{}",
        b.stderr
    );
    assert!(b.logged_with(
        "removed",
        json!({"path": format!("{DIR}/rank_tp0_pp0_dp0.json"), "reason": "not a regular file (symlink)"})
    ));
    assert!(b.logged_with(
        "removed",
        json!({"path": format!("{DIR}/rank_tp1_pp0_dp0.json"), "reason": "sidecar unreadable (a symlink)"})
    ));
    for rel in [
        "0.7.2/sm121/bbbbbbbbbbbbbbbb".to_string(),
        format!("{DIR}/rank_tp0_pp0_dp0.json"),
        format!("{DIR}/rank_tp1_pp0_dp0.launch"),
        "0.7.2/sm121/aaaaaaaaaaaaaaaa/.autotuner_x1y2.tmp".to_string(),
        "0.7.2/sm121/aaaaaaaaaaaaaaaa/rank_tp9_pp0_dp0.launch".to_string(),
    ] {
        assert!(
            std::fs::symlink_metadata(root.join(&rel)).is_err(),
            "{rel} removed: {}",
            b.stderr
        );
    }
    assert_untouched(&target, "prune");
    for r in 0..2 {
        assert_untouched(
            &outside.join(format!("rank_tp{r}_pp0_dp0.json")),
            "the linked directory's files",
        );
    }
}

#[test]
fn rank_files_the_engine_leaves_as_symlinks_are_neither_unified_nor_signed() {
    let t = scratch();
    let target = precious(t.path());
    let script = two_ranks_then(&format!(
        "ln -s {} $d/rank_tp2_pp0_dp0.json",
        target.display()
    ));
    let b = sh_launch(t.path(), &script);
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(b.logged_with(
        "not_signed",
        json!({"path": format!("{DIR}/rank_tp2_pp0_dp0.json"), "reason": "not a regular file (symlink)"})
    ));
    assert!(sidecar_paths(&t.path().join("root")).is_empty());
    assert_untouched(&target, "unify and sign");
}

#[test]
fn a_cache_root_that_is_a_symlink_is_the_users_choice_and_kept() {
    let t = scratch();
    let real = t.path().join("bigdisk/autotune");
    std::fs::create_dir_all(&real).unwrap();
    symlink(&real, t.path().join("root")).unwrap();
    let script = two_ranks_then("true");
    let b1 = sh_launch(t.path(), &script);
    assert!(
        b1.logged_with("signed", json!({"files": 2})),
        "{}",
        b1.stderr
    );
    let b2 = sh_launch(t.path(), &script);
    assert!(
        b2.logged_with("reused", json!({"files": 2})),
        "{}",
        b2.stderr
    );
    assert!(is_symlink(&t.path().join("root")));
}

#[test]
fn files_in_a_directory_another_user_can_write_are_not_trusted_nor_rewritten() {
    // (mode of the directory, owner, trusted?)
    let cases: [(&str, u32, Option<u32>, bool); 4] = [
        ("world-writable", 0o777, None, false),
        ("world-writable with the sticky bit", 0o1777, None, true),
        ("owned by another user", 0o755, Some(65534), false),
        ("group-writable, ours", 0o775, None, true),
    ];
    for (what, mode, owner, trusted) in cases {
        if owner.is_some() && !common::has_need(is_root(), &format!("root to chown ({what})")) {
            continue;
        }
        let t = scratch();
        let root = t.path().join("root");
        let dir = root.join(DIR);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
        if let Some(uid) = owner {
            nix::unistd::chown(&dir, Some(nix::unistd::Uid::from_raw(uid)), None).unwrap();
        }
        // Boot 1: the engine writes two rank files with different entries
        // (unify would rewrite them both).
        let script = two_ranks_then("true");
        let b1 = sh_launch(t.path(), &script);
        assert_eq!(b1.code, 0, "{what}: {}", b1.stderr);
        let rank0 = std::fs::read_to_string(dir.join("rank_tp0_pp0_dp0.json")).unwrap();
        if trusted {
            assert!(
                b1.logged_with("signed", json!({"files": 2})),
                "{what}: {}",
                b1.stderr
            );
            continue;
        }
        assert_eq!(
            rank0, "{\"k0\": [\"R\", 0]}",
            "{what}: not rewritten by unify"
        );
        assert!(
            b1.events_named("unify_left").iter().any(|e| e["dir"] == DIR
                && e["reason"]
                    .as_str()
                    .unwrap()
                    .starts_with("left as they are: in a directory another user can write")),
            "{what}: {}",
            b1.stderr
        );
        assert!(
            b1.events_named("not_signed_unsafe")
                .iter()
                .any(
                    |e| e["path"] == format!("{DIR}/rank_tp0_pp0_dp0.json").as_str()
                        && e["reason"]
                            .as_str()
                            .unwrap()
                            .starts_with("in a directory another user can write")
                ),
            "{what}: {}",
            b1.stderr
        );
        assert!(sidecar_paths(&root).is_empty(), "{what}: nothing signed");
        // Boot 2: what is there is removed, with a warning, before the
        // engine can load it (a sidecar planted there is no help).
        let fp = fingerprint_of(&["sh", "-c", &script]);
        let rel = format!("{DIR}/rank_tp0_pp0_dp0.json");
        let bytes = std::fs::read(root.join(&rel)).unwrap();
        std::fs::write(
            root.join(format!("{DIR}/rank_tp0_pp0_dp0.launch")),
            serde_json::to_vec(&forged_sidecar(&fp, &rel, &bytes)).unwrap(),
        )
        .unwrap();
        put_manifest(&root, &forged_manifest(&fp, &rel, &bytes));
        let b2 = sh_launch(t.path(), &script);
        assert!(
            b2.events_named("removed_untrusted")
                .iter()
                .any(|e| e["path"] == rel.as_str()
                    && e["reason"]
                        .as_str()
                        .unwrap()
                        .starts_with("in a directory another user can write")),
            "{what}: {}",
            b2.stderr
        );
        assert!(
            b2.logged_with("pruned", json!({"kept": 0})),
            "{what}: {}",
            b2.stderr
        );
    }
}

#[test]
fn a_root_another_user_can_write_trusts_nothing_below_it() {
    let t = scratch();
    let root = t.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
    for _ in 0..2 {
        let b = sh_launch(t.path(), &two_ranks_then("true"));
        assert_eq!(b.code, 0);
        assert!(
            b.logged_with(
                "root_untrusted",
                json!({"reason": "world-writable without the sticky bit"})
            ),
            "{}",
            b.stderr
        );
        assert!(b.logged_with("pruned", json!({"kept": 0})), "{}", b.stderr);
        assert!(sidecar_paths(&root).is_empty(), "{}", b.stderr);
    }
}

// ---- no secret and no environment value in what keepwrap writes or logs ----

/// Every file below `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file() {
                let bytes = std::fs::read(&p).unwrap_or_default();
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
                    || p.to_string_lossy().contains(needle)
                {
                    out.push(p.display().to_string());
                }
            }
        }
    }
    out
}

#[test]
fn no_env_value_nor_secret_argument_appears_in_any_file_or_log_line() {
    let canary = format!("canary-{:016x}", Rng::new(seed()).next());
    let token = format!("{canary}-token");
    let plain = format!("{canary}-plain");
    let key = format!("{canary}-api-key");
    let admin = format!("{canary}-admin");
    let h = scratch();
    let ep = |cps: &'static str| -> Vec<String> {
        [
            "--tp",
            "2",
            "--ep",
            "2",
            "--gate",
            "fixed",
            "--offline",
            "--chunked-prefill-size",
            cps,
            "--api-key",
            &key,
            &format!("--admin-api-key={admin}"),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let mut logs = String::new();
    let mut run = |kw: &[&str], args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut cmd = keepwrap_engine(h.path(), kw, &args);
        cmd.env("SGLANG_CANARY_TOKEN", &token)
            .env("SGLANG_CANARY_PLAIN", &plain)
            .env("NCCL_CANARY", &plain);
        let b = boot(&mut cmd);
        assert_eq!(b.code, 0, "{}", b.stderr);
        // keepwrap's lines only: the engine prints its own argv.
        for l in b.stderr.lines() {
            if l.starts_with("keepwrap:") || l.starts_with('{') {
                logs.push_str(l);
                logs.push('\n');
            }
        }
        b
    };
    // Tune, unify and sign; reuse; another launch (prune); JSON logs;
    // debug logs.
    let b = run(&[], ep("2048"));
    assert!(b.logged_with("signed", json!({"files": 2})), "{}", b.stderr);
    run(&[], ep("2048"));
    run(&["--log-format", "json"], ep("1024"));
    run(&[], ep("2048"));
    let mut dbg = keepwrap_engine(h.path(), &[], &[]);
    dbg.env("KEEPWRAP_LOG", "debug");
    let args: Vec<String> = ep("2048");
    let b = boot(
        dbg.args(&args)
            .env("SGLANG_CANARY_TOKEN", &token)
            .env("SGLANG_CANARY_PLAIN", &plain),
    );
    assert_eq!(b.code, 0);
    logs.push_str(
        &b.stderr
            .lines()
            .filter(|l| l.starts_with("keepwrap:"))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    // --explain, text and JSON logs.
    for fmt in ["text", "json"] {
        let out = std::process::Command::new(BIN)
            .args(["fingerprint", "--log-format", fmt, "--explain", "--"])
            .args(["python3", "-m", "sglang.launch_server", "--api-key", &key])
            .arg(format!("--admin-api-key={admin}"))
            .env("SGLANG_CANARY_TOKEN", &token)
            .env("SGLANG_CANARY_PLAIN", &plain)
            .output()
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("env \"SGLANG_CANARY_PLAIN\" <sha256:"),
            "{text}"
        );
        logs.push_str(&text);
        logs.push_str(&String::from_utf8_lossy(&out.stderr));
    }
    assert!(!logs.is_empty());
    for l in logs.lines() {
        assert!(!l.contains(&canary), "a log line holds a canary: {l}");
    }
    let leaks = files_containing(&cache_root(h.path()), &canary);
    assert!(leaks.is_empty(), "files holding a canary: {leaks:?}");
    assert!(!sidecar_paths(&cache_root(h.path())).is_empty());
}

// ---- markers of launches on the root ----

/// Hold byte 0 of `file` (an open file description lock, as a live
/// launch's marker holds it) for as long as `file` is open.
fn hold_alive_byte(file: &std::fs::File) {
    // SAFETY: flock is plain data; zero is a valid value of every field.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = 0;
    fl.l_len = 1;
    nix::fcntl::fcntl(file, nix::fcntl::FcntlArg::F_OFD_SETLK(&fl)).unwrap();
}

#[test]
fn a_live_marker_another_user_planted_never_stops_the_prune() {
    if !common::has_need(is_root(), "root to plant a file owned by another user") {
        return;
    }
    let t = scratch();
    let root = t.path().join("root");
    // A root shared by several users: the sticky bit keeps each user's
    // files theirs, and lets anyone add one.
    let running = root.join(".keepwrap/running");
    std::fs::create_dir_all(&running).unwrap();
    for d in [&root, &root.join(".keepwrap"), &running] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o1777)).unwrap();
    }
    // A cache file of nobody's launch, unsigned: the prune removes it.
    let dir = root.join(DIR);
    std::fs::create_dir_all(&dir).unwrap();
    let planted = dir.join("rank_tp0_pp0_dp0.json");
    std::fs::write(&planted, r#"{"k": ["planted", 0]}"#).unwrap();
    // Another user's marker saying a launch runs hands-off, held alive.
    let marker = running.join("4242-1");
    let hex = "ab".repeat(32);
    std::fs::write(&marker, format!("handsoff {hex} 1 {hex} - pod-x\n")).unwrap();
    nix::unistd::chown(&marker, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
    let held = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&marker)
        .unwrap();
    hold_alive_byte(&held);

    let b = boot(keepwrap(&root).args(["--done", "exit", "--", "true"]));
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(
        !planted.exists(),
        "a marker another user planted made the launch skip the prune: {}",
        b.stderr
    );
    assert!(
        b.logged_with(
            "foreign_marker",
            json!({"marker": ".keepwrap/running/4242-1", "uid": 65534})
        ),
        "{}",
        b.stderr
    );
    assert!(marker.exists(), "another user's file is left alone");
    drop(held);
}

// ---- a file name never forges a log line ----

#[test]
fn file_names_with_newlines_and_escape_sequences_never_forge_a_log_line() {
    let t = scratch();
    let root = t.path().join("root");
    let forge = "\n keepwrap: signed 8 cache files\x1b[2K\r";
    // Planted before the launch: a rank file of the engine's shape, and a
    // directory under the root, both named to forge a line.
    std::fs::create_dir_all(root.join(DIR)).unwrap();
    std::fs::write(
        root.join(format!("{DIR}/rank_tp7_pp0_dp0{forge}.json")),
        b"{}",
    )
    .unwrap();
    let odd = root.join(format!("x{forge}"));
    std::fs::create_dir_all(odd.join("a/b")).unwrap();
    std::fs::write(odd.join("a/b/rank_tp0_pp0_dp0.json"), b"{}").unwrap();
    // Written by the engine while it runs.
    let script = two_ranks_then(
        "f=$(printf 'rank_tp2_pp0_dp0\\n keepwrap: tuned and signed 8 cache files\\033[31m.json'); printf '{}' > \"$d/$f\"",
    );
    // The text form: one event, one line, whatever a name holds.
    let b = boot_debug(
        keepwrap(&root)
            .env("KEEPWRAP_LOG_FORMAT", "text")
            .current_dir(t.path())
            .args(["--done", "exit", "--", "sh", "-c", &script]),
    );
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(!b.stderr.is_empty());
    for line in b.stderr.lines() {
        assert!(
            line.starts_with("keepwrap:"),
            "a forged line: {line:?}\n{}",
            b.stderr
        );
        assert!(!line.contains('\x1b'), "an escape sequence: {line:?}");
        assert!(!line.contains('\r'), "a carriage return: {line:?}");
        assert!(
            !line.starts_with("keepwrap: signed 8")
                && !line.starts_with("keepwrap: tuned and signed 8"),
            "a forged line: {line:?}"
        );
    }
    // The names were shown, escaped.
    assert!(
        b.stderr
            .contains("rank_tp7_pp0_dp0\\n keepwrap: signed 8 cache files\\x1b[2K\\r.json"),
        "{}",
        b.stderr
    );
    assert!(
        b.stderr
            .contains("rank_tp2_pp0_dp0\\n keepwrap: tuned and signed 8 cache files\\x1b[31m.json"),
        "{}",
        b.stderr
    );
}

// ---- state files under .keepwrap/: never followed, never blocked on ----

/// How many warnings a run logged, leaving out the one that says the
/// stand-in `sh -c` engine's script is fingerprinted as written.
fn warning_count(b: &Finished) -> usize {
    b.warnings()
        .iter()
        .filter(|e| e["code"] != "launch_warning")
        .count()
}

/// The warnings of a run named `event`.
fn warnings_named(b: &Finished, event: &str) -> Vec<serde_json::Value> {
    b.warnings()
        .into_iter()
        .filter(|e| e["code"] == event)
        .collect()
}

fn error(e: &serde_json::Value) -> &str {
    e["error"].as_str().unwrap()
}

#[test]
fn a_fifo_planted_as_the_statistics_file_neither_blocks_nor_stops_the_launch() {
    let t = scratch();
    let state = t.path().join("root/.keepwrap");
    std::fs::create_dir_all(&state).unwrap();
    mkfifo(&state.join("stats.json"));
    let b = sh_launch(t.path(), &two_ranks_then("true"));
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(b.logged_with("signed", json!({"files": 2})), "{}", b.stderr);
    let w = warnings_named(&b, "state_file_ignored");
    assert_eq!(w.len(), 1, "{}", b.stderr);
    assert_eq!(w[0]["file"], ".keepwrap/stats.json");
    assert!(
        error(&w[0]).contains("a FIFO, not a regular file"),
        "{}",
        w[0]
    );
    assert_eq!(warning_count(&b), 1, "{}", b.stderr);
}

#[test]
fn a_fifo_planted_as_the_fleet_state_file_does_not_block_status() {
    let t = scratch();
    let state = t.path().join("root/.keepwrap");
    std::fs::create_dir_all(&state).unwrap();
    mkfifo(&state.join("fleet.json"));
    let mut cmd = keepwrap(&t.path().join("root"));
    cmd.args(["status", "--json"]);
    let f = output_within(&mut cmd, Duration::from_secs(10));
    assert_eq!(f.code, 0, "{}", f.stderr);
    let w = f.events_named("state_file_ignored");
    assert_eq!(w.len(), 1, "{}", f.stderr);
    assert_eq!(w[0]["file"], ".keepwrap/fleet.json");
    assert!(
        error(&w[0]).contains("a FIFO, not a regular file"),
        "{}",
        w[0]
    );
}

#[test]
fn a_lock_planted_as_a_fifo_or_a_link_to_dev_zero_is_never_opened_through() {
    for what in ["a FIFO", "a symlink"] {
        let t = scratch();
        let state = t.path().join("root/.keepwrap");
        std::fs::create_dir_all(&state).unwrap();
        let lock = state.join("lock");
        if what == "a FIFO" {
            mkfifo(&lock);
        } else {
            symlink("/dev/zero", &lock).unwrap();
        }
        let b = sh_launch(t.path(), &two_ranks_then("exit 7"));
        assert_eq!(b.code, 7, "{what}: the exit status passes: {}", b.stderr);
        let w = warnings_named(&b, "lock_failed");
        assert_eq!(w.len(), 1, "{what}: {}", b.stderr);
        assert!(
            error(&w[0]).contains(&format!("{what}, not a regular file"))
                && w[0]["what"] == "launch"
                && w[0]["message"]
                    .as_str()
                    .unwrap()
                    .ends_with("the launch goes on without keeping the cache"),
            "{what}: {}",
            w[0]
        );
        assert_eq!(warning_count(&b), 1, "{}", b.stderr);
        let meta = std::fs::symlink_metadata(&lock).unwrap();
        assert_eq!(
            meta.file_type().is_symlink(),
            what == "a symlink",
            "{what}: left as it was"
        );
    }
}

#[test]
fn store_records_planted_as_links_to_dev_zero_are_ignored_with_one_warning_each() {
    let t = scratch();
    let root = t.path().join("root");
    let script = two_ranks_then("true");
    let b1 = sh_launch(t.path(), &script);
    assert!(
        b1.logged_with("signed", json!({"files": 2})),
        "{}",
        b1.stderr
    );
    let fp = fingerprint_of(&["sh", "-c", &script]);
    // This launch's record, and the manifest of a stored set of another.
    let record = root.join(format!(".keepwrap/launches/{fp}.json"));
    assert!(record.is_file());
    std::fs::remove_file(&record).unwrap();
    symlink("/dev/zero", &record).unwrap();
    let other = root.join(format!(".keepwrap/store/{}", "ab".repeat(32)));
    std::fs::create_dir_all(&other).unwrap();
    symlink("/dev/zero", other.join(".set.json")).unwrap();
    let b2 = sh_launch(t.path(), &script);
    assert_eq!(b2.code, 0, "{}", b2.stderr);
    assert!(
        b2.logged_with("reused", json!({"files": 2})),
        "{}",
        b2.stderr
    );
    for shown in [
        format!(".keepwrap/launches/{fp}.json"),
        format!(".keepwrap/store/{}/.set.json", "ab".repeat(32)),
    ] {
        let w: Vec<_> = warnings_named(&b2, "state_file_ignored")
            .into_iter()
            .filter(|e| e["file"] == shown.as_str())
            .collect();
        assert_eq!(w.len(), 1, "{shown}: {}", b2.stderr);
        assert!(
            error(&w[0]).contains("a symlink, not a regular file"),
            "{}",
            w[0]
        );
    }
    assert_eq!(warning_count(&b2), 2, "{}", b2.stderr);
}

#[test]
fn a_state_directory_that_is_a_symlink_is_never_written_through() {
    let t = scratch();
    let root = t.path().join("root");
    let elsewhere = t.path().join("elsewhere");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    symlink(&elsewhere, root.join(".keepwrap")).unwrap();
    let b = sh_launch(t.path(), &two_ranks_then("exit 5"));
    assert_eq!(b.code, 5, "the exit status passes: {}", b.stderr);
    let w = warnings_named(&b, "cannot_open_running");
    assert_eq!(w.len(), 1, "{}", b.stderr);
    assert!(
        error(&w[0]).contains(".keepwrap is a symlink, which keepwrap does not follow"),
        "{}",
        w[0]
    );
    assert_eq!(warning_count(&b), 1, "{}", b.stderr);
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "nothing written through the link"
    );
    assert!(is_symlink(&root.join(".keepwrap")));
}

// ---- only the engine's files are judged ----

/// Every entry below `dir` (keepwrap's own `.keepwrap/` left out): its
/// path, kind, and bytes or link target.
fn snapshot(dir: &Path) -> Vec<(String, String)> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            let rel = p.strip_prefix(base).unwrap().display().to_string();
            if rel == ".keepwrap" {
                continue;
            }
            let ft = std::fs::symlink_metadata(&p).unwrap().file_type();
            if ft.is_symlink() {
                out.push((
                    rel,
                    format!("-> {}", std::fs::read_link(&p).unwrap().display()),
                ));
            } else if ft.is_dir() {
                out.push((rel.clone(), "dir".into()));
                walk(base, &p, out);
            } else {
                out.push((rel, sha256_hex(&std::fs::read(&p).unwrap())));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out
}

#[test]
fn a_cache_dir_pointed_at_a_model_directory_leaves_every_file_of_it_alone() {
    let t = scratch();
    let model = t.path().join("models/m");
    std::fs::create_dir_all(model.join("1_Pooling")).unwrap();
    std::fs::create_dir_all(model.join("blobs")).unwrap();
    std::fs::write(model.join("config.json"), b"{\"architectures\": [\"X\"]}").unwrap();
    std::fs::write(model.join("tokenizer.json"), b"{\"version\": \"1.0\"}").unwrap();
    std::fs::write(model.join("model.safetensors"), vec![7u8; 4096]).unwrap();
    std::fs::write(model.join("1_Pooling/config.json"), b"{\"pooling\": 1}").unwrap();
    std::fs::write(model.join("blobs/abc"), b"{\"chat_template\": \"\"}").unwrap();
    // As in a Hugging Face snapshot: files and directories that are links.
    symlink("blobs/abc", model.join("tokenizer_config.json")).unwrap();
    symlink("1_Pooling", model.join("pooling")).unwrap();
    let before = snapshot(&model);
    let b = boot(keepwrap(&model).args(["--done", "exit", "--", "sh", "-c", "exit 0"]));
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert_eq!(
        snapshot(&model),
        before,
        "byte for byte the same: {}",
        b.stderr
    );
    let warnings: Vec<String> = b
        .log()
        .into_iter()
        .filter(|l| l.contains("warning:"))
        .collect();
    assert_eq!(warnings, vec![
        "keepwrap: warning: left 7 entries under the cache root untouched: not the engine's autotune cache (first: 1_Pooling); is --cache-dir the engine's cache directory ($SGLANG_CACHE_DIR/flashinfer/autotune)?"
    ], "{}", b.stderr);
    assert!(
        b.logged_with(
            "pruned",
            json!({"kept": 0, "stored": 0, "removed": 0, "leftovers": 0, "left": 0})
        ),
        "{}",
        b.stderr
    );
}

#[test]
fn prune_acts_only_on_paths_shaped_like_the_engines_cache() {
    let t = scratch();
    let root = t.path().join("root");
    let put = |rel: &str, bytes: &[u8]| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    };
    // The engine's: unsigned, so removed.
    put(&format!("{DIR}/rank_tp0_pp0_dp0.json"), b"{}");
    put(&format!("{DIR}/rank_tp1_pp0_dp0_gpuGPU-1234.json"), b"{}");
    put(&format!("{DIR}/.autotuner_ab12cd.tmp"), b"{");
    put(&format!("{DIR}/rank_tp9_pp0_dp0.launch"), b"{}");
    // The engine's, never read back: left alone, not reported.
    put(
        &format!("{DIR}/runs/rank_tp0_pp0_dp0.20260101_000000.ab.json"),
        b"{}",
    );
    // Not the engine's: left alone, reported once.
    let foreign = [
        "rank_tp0_pp0_dp0.json".to_string(),
        "0.7.2/notes.json".to_string(),
        "0.7.2/sm121/x.json".to_string(),
        "0.7.2/sm121/0123/rank_tp0_pp0_dp0.json".to_string(),
        format!("{DIR}/other.json"),
        format!("{DIR}/sub/rank_tp0_pp0_dp0.json"),
    ];
    for f in &foreign {
        put(f, b"{\"not\": \"the engine's\"}");
    }
    let b = sh_launch_debug(t.path(), "exit 0");
    assert_eq!(b.code, 0, "{}", b.stderr);
    for rel in [
        format!("{DIR}/rank_tp0_pp0_dp0.json"),
        format!("{DIR}/rank_tp1_pp0_dp0_gpuGPU-1234.json"),
    ] {
        assert!(
            b.logged_with(
                "removed",
                json!({"path": rel, "reason": "no sidecar (unsigned)"})
            ),
            "{}",
            b.stderr
        );
        assert!(!root.join(&rel).exists());
    }
    assert!(!root.join(format!("{DIR}/.autotuner_ab12cd.tmp")).exists());
    assert!(!root.join(format!("{DIR}/rank_tp9_pp0_dp0.launch")).exists());
    assert!(root
        .join(format!(
            "{DIR}/runs/rank_tp0_pp0_dp0.20260101_000000.ab.json"
        ))
        .is_file());
    for f in &foreign {
        assert_eq!(
            std::fs::read(root.join(f)).unwrap(),
            b"{\"not\": \"the engine's\"}",
            "{f} untouched: {}",
            b.stderr
        );
        assert!(
            !b.log_events().iter().any(|e| e["path"] == f.as_str()),
            "{}",
            b.stderr
        );
    }
    let warnings = b.warnings();
    assert_eq!(warnings.len(), 1, "{}", b.stderr);
    // root: rank_tp0...; 0.7.2: notes.json; sm121: 0123, x.json; DIR: other.json, sub
    assert_eq!(warnings[0]["code"], "untouched", "{}", b.stderr);
    assert_eq!(warnings[0]["entries"], 6, "{}", b.stderr);
    assert_eq!(
        warnings[0]["first"], "rank_tp0_pp0_dp0.json",
        "{}",
        b.stderr
    );
}

/// Maps the file argv[1] shared and writable and writes its first byte as
/// it is (the page is now written, its bytes unchanged), says `mapped`,
/// then, once argv[2] exists, changes one digit of a tactic through the map
/// (same size, still JSON), says `changed` and exits.
const MAPPER: &str = r#"
import mmap, os, sys, time
with open(sys.argv[1], "r+b") as f:
    m = mmap.mmap(f.fileno(), 0, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
m[0:1] = m[0:1]
print("mapped", flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.01)
i = m.find(b'["R", ') + 6
m[i:i + 1] = b"7" if m[i:i + 1] != b"7" else b"8"
print("changed", flush=True)
"#;

/// The file's change time in nanoseconds.
fn ctime(p: &Path) -> i128 {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).unwrap();
    m.ctime() as i128 * 1_000_000_000 + m.ctime_nsec() as i128
}

/// One map phase of the test below: `MAPPER` maps the signed rank file
/// `file` writable and writes its page, its change time settles, a boot
/// keeps the set (the bytes are the signed ones) and signs it again while
/// the map is held, then the mapper changes the file through the map.
/// True when that change left the file's change time as it was.
fn map_sign_and_change(base: &Path, file: &Path, ctx: &str) -> bool {
    let go = base.join("go");
    let _ = std::fs::remove_file(&go);
    let mut mapper = Running::spawn(
        std::process::Command::new("python3")
            .args(["-c", MAPPER])
            .arg(file)
            .arg(&go),
    );
    mapper.wait_stdout("the map written", Duration::from_secs(10), |l| {
        l == "mapped"
    });
    // Its change time settled, so that a sign may record it.
    let written = ctime(file);
    wait_for("the change time to settle", Duration::from_secs(5), || {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i128;
        (now - written > 300_000_000).then_some(())
    });
    let second = boot(&mut writer_launch(base, "mm", 1, None));
    assert!(
        second.logged_with("pruned", json!({"kept": 4})),
        "{ctx}: {}",
        second.stderr
    );
    std::fs::write(&go, "").unwrap();
    mapper.wait_stdout("the file changed", Duration::from_secs(10), |l| {
        l == "changed"
    });
    assert_eq!(mapper.finish(Duration::from_secs(10)).code, 0);
    ctime(file) == written
}

/// A process holds a kept rank file mapped writable while a boot signs,
/// then changes it through the map: the kernel gives the file no new change
/// time (on disk, a page written before is written again without a fault
/// until it is written back; in memory, never), so its stamp would still
/// vouch for it. The next boot must not keep it: on disk keepwrap records
/// no stamp for a file open for writing when it reads it, and in memory
/// (tmpfs) no stamp vouches for any file.
#[test]
fn a_rank_file_changed_through_a_writable_map_is_not_kept_by_its_stamp() {
    // On a disk of its own where it can have one: other tests sign on /tmp,
    // and each sign's `syncfs` writes back the page the map wrote.
    let disk = tempfile::tempdir().unwrap();
    let own = own_disk(disk.path());
    let mut bases = vec![disk];
    let shm = Path::new("/dev/shm");
    if has_need(shm.is_dir(), "a tmpfs at /dev/shm") {
        bases.push(tempfile::tempdir_in(shm).unwrap());
    }
    for (i, base) in bases.iter().enumerate() {
        let base = match (i, &own) {
            (0, Some(own)) => own.as_path(),
            _ => base.path(),
        };
        let ctx = base.display().to_string();
        install_writer(base);
        let first = boot(&mut writer_launch(base, "mm", 1, None));
        assert!(
            first.logged_with("signed", json!({"files": 4})),
            "{ctx}: {}",
            first.stderr
        );
        let file = base
            .join("root/0.7.2/sm121")
            .join(writer_key("mm", 1))
            .join("rank_tp0_pp0_dp0.json");
        // On disk, a write-back of the page the map wrote (a `sync` or
        // `syncfs` by any process, the kernel's flusher) between the map
        // and the change makes the change fault again, which gives the file
        // a new change time: its stamp then no longer vouches for it and
        // the scenario tests nothing. Such a round is run to its end (the
        // next boot finds the change and signs the files again) and the map
        // phase is tried again, until the change leaves the change time
        // as it was.
        let mut rounds = 0;
        let third = loop {
            rounds += 1;
            let unchanged = map_sign_and_change(base, &file, &ctx);
            let third = boot(&mut writer_launch(base, "mm", 1, None));
            assert_eq!(third.code, 0, "{ctx}: {}", third.stderr);
            if unchanged {
                break third;
            }
            assert!(
                third.logged_with("signed", json!({"files": 4})),
                "{ctx}: a change with a new change time is found and the set signed again: {}",
                third.stderr
            );
            assert!(
                rounds < 20,
                "{ctx}: in 20 rounds, every write through the map gave the file a new change time"
            );
        };
        assert!(
            third.logged_with("pruned", json!({"kept": 0})),
            "{ctx}: the changed file and its set are not kept: {}",
            third.stderr
        );
    }
    // In memory, a map made after the sign that reads the file first and
    // writes it then gives it no new change time either.
    let Some(base) = bases.get(1).map(|t| t.path()) else {
        return;
    };
    let file = base
        .join("root/0.7.2/sm121")
        .join(writer_key("mm", 1))
        .join("rank_tp0_pp0_dp0.json");
    let before = std::fs::metadata(&file).unwrap();
    let late = output(
        std::process::Command::new("python3")
            .args(["-c", LATE_MAPPER])
            .arg(&file),
    );
    assert_eq!(late.code, 0, "{}", late.stderr);
    let after = std::fs::metadata(&file).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (after.ctime(), after.ctime_nsec(), after.ino()),
        (before.ctime(), before.ctime_nsec(), before.ino()),
        "tmpfs gave the file no new change time"
    );
    let fourth = boot(&mut writer_launch(base, "mm", 1, None));
    assert!(
        fourth.logged_with("pruned", json!({"kept": 0})),
        "in memory, no stamp vouches for a file: {}",
        fourth.stderr
    );
}

/// Maps the file argv[1] shared and writable, reads it, then changes one
/// digit of a tactic through the map and exits.
const LATE_MAPPER: &str = r#"
import mmap, sys
with open(sys.argv[1], "r+b") as f:
    m = mmap.mmap(f.fileno(), 0, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
i = m.find(b'["R", ') + 6
m[i:i + 1] = b"7" if m[i:i + 1] != b"7" else b"8"
"#;
