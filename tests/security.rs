//! Security: keepwrap never follows a symlink when it writes, renames or
//! deletes (a planted link leaves its target, a file we own outside the
//! root, untouched); it never trusts nor rewrites files in a directory
//! another user can write; and no environment value nor secret-named
//! argument value appears in any file it writes or any line it logs.

mod common;
mod harden;

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

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
    assert!(b.logged("tuned and signed 2 cache files"), "{}", b.stderr);
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
    std::fs::create_dir_all(root.join("0.7.2/sm121/aaaa")).unwrap();
    // A <key16> directory that is a link to the outside directory.
    symlink(&outside, root.join("0.7.2/sm121/bbbbbbbbbbbbbbbb")).unwrap();
    // A rank file that is a link; a sidecar that is a link beside a real
    // rank file; a FlashInfer temp file that is a link.
    symlink(&target, root.join(format!("{DIR}/rank_tp0_pp0_dp0.json"))).unwrap();
    std::fs::write(root.join(format!("{DIR}/rank_tp1_pp0_dp0.json")), b"{}").unwrap();
    symlink(&target, root.join(format!("{DIR}/rank_tp1_pp0_dp0.launch"))).unwrap();
    symlink(&target, root.join("0.7.2/sm121/aaaa/.autotuner_x1y2.tmp")).unwrap();
    symlink(
        &target,
        root.join("0.7.2/sm121/aaaa/rank_tp9_pp0_dp0.launch"),
    )
    .unwrap();

    let b = sh_launch(t.path(), "exit 0");
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert_no_panic(&b.stderr, "symlinks");
    assert!(
        b.logged("warning: removed 0.7.2/sm121/bbbbbbbbbbbbbbbb: a symlink to a directory"),
        "{}",
        b.stderr
    );
    assert!(b.logged(&format!(
        "removed {DIR}/rank_tp0_pp0_dp0.json: not a regular file (symlink)"
    )));
    assert!(b.logged(&format!(
        "removed {DIR}/rank_tp1_pp0_dp0.json: sidecar unreadable (a symlink)"
    )));
    for rel in [
        "0.7.2/sm121/bbbbbbbbbbbbbbbb".to_string(),
        format!("{DIR}/rank_tp0_pp0_dp0.json"),
        format!("{DIR}/rank_tp1_pp0_dp0.launch"),
        "0.7.2/sm121/aaaa/.autotuner_x1y2.tmp".to_string(),
        "0.7.2/sm121/aaaa/rank_tp9_pp0_dp0.launch".to_string(),
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
    assert!(b.logged(&format!(
        "not signed {DIR}/rank_tp2_pp0_dp0.json: not a regular file (symlink)"
    )));
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
    assert!(b1.logged("tuned and signed 2 cache files"), "{}", b1.stderr);
    let b2 = sh_launch(t.path(), &script);
    assert!(
        b2.logged("reused 2 cache files signed for this launch"),
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
        if owner.is_some() && !is_root() {
            eprintln!("{what}: skipped, needs root to chown");
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
                b1.logged("tuned and signed 2 cache files"),
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
            b1.logged(&format!(
                "{DIR}: left as they are: in a directory another user can write"
            )),
            "{what}: {}",
            b1.stderr
        );
        assert!(
            b1.logged(&format!(
                "warning: not signed {DIR}/rank_tp0_pp0_dp0.json: in a directory another user can write"
            )),
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
            b2.logged(&format!(
                "warning: removed {rel}: in a directory another user can write"
            )),
            "{what}: {}",
            b2.stderr
        );
        assert!(b2.logged("prune: kept 0, "), "{what}: {}", b2.stderr);
    }
}

#[test]
fn a_root_another_user_can_write_trusts_nothing_below_it() {
    let t = scratch();
    let root = t.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
    let b = sh_launch(t.path(), &two_ranks_then("true"));
    assert_eq!(b.code, 0);
    assert!(
        b.logged(
            "in a directory another user can write (.: world-writable without the sticky bit)"
        ),
        "{}",
        b.stderr
    );
    assert!(sidecar_paths(&root).is_empty(), "{}", b.stderr);
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
    assert!(b.logged("tuned and signed 2 cache files"), "{}", b.stderr);
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
