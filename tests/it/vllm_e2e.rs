//! keepwrap in front of the fake vLLM engine (`tests/fixtures/engines/fake_vllm.py`,
//! launched as `vllm serve MODEL ...` through `tests/fixtures/engines/bin/vllm`): the
//! `vllm` profile end to end. Each boot is a server launch; the test waits
//! (with a deadline) for keepwrap's outcome line, then stops it with TERM as
//! an orchestrator would.

use crate::common;
use serde_json::json;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::vllm::{hermetic, kw_cmd, kw_vllm, until_outcome, DEADLINE};
use common::{Finished, Running};
use nix::sys::signal::Signal;

/// One server boot on a free port: wait for the outcome line, then TERM.
/// The paths that got more than one verdict line in one boot (kept,
/// removed, stored, ...), with those lines' events: one file, one verdict.
fn two_verdicts(b: &Finished) -> Vec<(String, Vec<String>)> {
    const VERDICTS: [&str; 6] = [
        "kept",
        "removed",
        "removed_untrusted",
        "stored",
        "kept_shared_file",
        "removed_shared_file",
    ];
    let mut by_path: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for e in b.log_events() {
        let name = e["code"].as_str().unwrap_or("");
        if let (true, Some(path)) = (VERDICTS.contains(&name), e["path"].as_str()) {
            by_path
                .entry(path.to_string())
                .or_default()
                .push(name.to_string());
        }
    }
    by_path.into_iter().filter(|(_, v)| v.len() > 1).collect()
}

fn serve(home: &Path, args: &[&str], env: &[(&str, &str)]) -> Finished {
    serve_with(home, &[], args, env)
}

fn serve_with(home: &Path, kw: &[&str], args: &[&str], env: &[(&str, &str)]) -> Finished {
    let port = common::free_port().to_string();
    let mut all = vec!["--port", &port];
    all.extend_from_slice(args);
    until_outcome(Running::spawn(&mut kw_vllm(home, kw, &all, env)))
}

/// [`serve`] with `KEEPWRAP_LOG=debug`: each file's prune line is logged.
fn serve_debug(home: &Path, args: &[&str], env: &[(&str, &str)]) -> Finished {
    let port = common::free_port().to_string();
    let mut all = vec!["--port", &port];
    all.extend_from_slice(args);
    let mut cmd = kw_vllm(home, &[], &all, env);
    until_outcome(Running::spawn(cmd.env("KEEPWRAP_LOG", "debug")))
}

/// `status` showed vLLM's default root under `home`, with the 2 files of
/// [`tp2_ep_signed`].
fn assert_shows_the_signed_vllm_root(st: &Finished, home: &Path) {
    assert_eq!(st.code, 0, "{}", st.stderr);
    let out = st.stdout.join("\n");
    assert!(
        out.contains(&format!("cache root {}", root(home).display())),
        "{out}"
    );
    assert!(out.contains("totals: 2 signed"), "{out}");
}

/// A cold `-tp 2 -ep` boot under `home`, which signs its 2 rank files.
fn tp2_ep_signed(home: &Path) {
    let cold = serve(home, &["-tp", "2", "-ep"], &[]);
    assert!(
        cold.logged_with("signed", json!({"files": 2})),
        "{}",
        cold.stderr
    );
}

/// vLLM's default cache root under `home`.
fn root(home: &Path) -> PathBuf {
    home.join(".cache/vllm/flashinfer_autotune_cache")
}

fn tactics_of(f: &Finished) -> std::collections::BTreeMap<u64, String> {
    f.tactics()
}

#[test]
fn layout_c_keeps_each_rank_file_and_a_warm_boot_tunes_nothing() {
    let home = common::home();
    let args = ["-tp", "2", "-ep"];
    let cold = serve(home.path(), &args, &[]);
    assert_eq!(cold.code, 0, "{}", cold.stderr);
    assert_eq!(cold.event("launch")["profile"], "vllm", "{}", cold.stderr);
    assert!(
        cold.logged_with("signed", json!({"files": 2})),
        "{}",
        cold.stderr
    );
    assert!(cold.tuned_by_rank().values().all(|&t| t > 0));
    // per-rank files as the engine wrote them (no union), each signed
    let files = common::cache_files(&root(home.path()));
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "autotune_configs_dp0_rank0.json",
            "autotune_configs_dp0_rank1.json"
        ]
    );
    let bytes: Vec<Vec<u8>> = files
        .iter()
        .map(|p| std::fs::read(root(home.path()).join(p)).unwrap())
        .collect();
    assert_ne!(
        bytes[0], bytes[1],
        "expert-parallel ranks keep their own files"
    );
    assert_eq!(common::sidecars(&root(home.path())).len(), 2);

    let warm = serve(home.path(), &args, &[]);
    assert_eq!(warm.code, 0, "{}", warm.stderr);
    assert!(
        warm.logged_with("reused", json!({"files": 2})),
        "{}",
        warm.stderr
    );
    assert_eq!(warm.tuned(), 0, "{:#?}", warm.stdout);
    assert_eq!(tactics_of(&warm), tactics_of(&cold));
    // the warm boot wrote nothing, and the files are the ones signed
    let after: Vec<Vec<u8>> = files
        .iter()
        .map(|p| std::fs::read(root(home.path()).join(p)).unwrap())
        .collect();
    assert_eq!(after, bytes);
}

#[test]
fn a_vllm_variable_change_retunes_and_going_back_restores_with_nothing_tuned() {
    let home = common::home();
    let args = ["-tp", "2", "-ep"];
    let other = [("VLLM_FLASHINFER_MOE_BACKEND", "latency")];
    let a = serve(home.path(), &args, &[]);
    assert!(a.logged_with("signed", json!({"files": 2})), "{}", a.stderr);
    // the engine's own key ignores the variable: same folder, and without
    // keepwrap it would reuse A's tactics; keepwrap stores A's set instead
    let b = serve_debug(home.path(), &args, &other);
    assert!(b.has_event("stored"), "{}", b.stderr);
    assert!(
        b.events_named("no_cache").iter().any(|e| e["message"]
            .as_str()
            .unwrap()
            .ends_with("differs in: env VLLM_FLASHINFER_MOE_BACKEND added")),
        "{}",
        b.stderr
    );
    assert!(
        b.tuned_by_rank().values().all(|&t| t > 0),
        "{:#?}",
        b.stdout
    );
    assert!(b.logged_with("signed", json!({"files": 2})), "{}", b.stderr);
    let a2 = serve(home.path(), &args, &[]);
    assert!(
        a2.logged_with("restored", json!({"files": 2})),
        "{}",
        a2.stderr
    );
    assert!(
        a2.logged_with("reused", json!({"files": 2})),
        "{}",
        a2.stderr
    );
    assert_eq!(a2.tuned(), 0, "{:#?}", a2.stdout);
    assert_eq!(tactics_of(&a2), tactics_of(&a));
    let b2 = serve(home.path(), &args, &other);
    // Each per-rank file one verdict per boot: stored, or kept.
    for boot in [&b, &a2, &b2] {
        assert_eq!(two_verdicts(boot), [], "{}", boot.stderr);
    }
    assert_eq!(b2.tuned(), 0, "{:#?}", b2.stdout);
    assert_eq!(tactics_of(&b2), tactics_of(&b));
}

#[test]
fn layout_a_under_ep_never_hangs_behind_keepwrap_and_hangs_without_it() {
    let home = common::home();
    let args = ["-tp", "2", "-ep"];
    let layout_a = [("FAKE_VLLM_LAYOUT", "A")];
    let cold = serve(home.path(), &args, &layout_a);
    assert_eq!(cold.code, 0, "{}", cold.stderr);
    // the file the next boot removes is never signed: the boot says it
    // keeps nothing, and why
    assert_keeps_nothing(&cold);
    // status says it too, before any launch
    let st = common::output(&mut kw_vllm(home.path(), &["status"], &args, &layout_a));
    let out = st.stdout.join("\n");
    assert!(
        out.contains("this launch would keep 0, restore 0, store 0 and remove 1 cache file"),
        "{out}"
    );
    assert!(
        out.contains("shared file hangs a warm boot of a MoE model"),
        "{out}"
    );
    for boot in 0..2 {
        let warm = serve_debug(home.path(), &args, &layout_a);
        assert_eq!(warm.code, 0, "boot {boot}: {}", warm.stderr);
        assert!(warm.events("hang").is_empty(), "{:#?}", warm.stdout);
        assert_eq!(two_verdicts(&warm), [], "boot {boot}: {}", warm.stderr);
        // the file the last boot left, never signed, goes before the start
        let line = warm
            .events_named("removed")
            .into_iter()
            .find(|e| {
                e["path"]
                    .as_str()
                    .unwrap()
                    .ends_with("autotune_configs.json")
            })
            .unwrap_or_else(|| panic!("no removal event:\n{}", warm.stderr))["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(line.ends_with("no sidecar (unsigned)"), "{line}");
        assert!(warm.tuned_by_rank().values().all(|&t| t > 0));
        assert_keeps_nothing(&warm);
    }
    // the file the engine left is what hangs the engine without keepwrap
    let mut bare = kw_vllm(
        home.path(),
        &["--disable"],
        &["-tp", "2", "-ep", "--offline"],
        &layout_a,
    );
    let f = Running::spawn(&mut bare).finish(DEADLINE);
    assert_eq!(f.code, 89, "{}", f.stderr);
    assert!(!f.events("hang").is_empty());
}

/// A boot of layout A under expert parallelism: nothing signed, one line
/// saying the launch keeps nothing and why.
fn assert_keeps_nothing(b: &Finished) {
    assert!(!b.has_event("signed"), "{}", b.stderr);
    let line = b.event("keeps_nothing");
    assert_eq!(line["level"], "INFO", "{}", b.stderr);
    assert_eq!(line["files"], 1, "{}", b.stderr);
    let message = line["message"].as_str().unwrap();
    for says in ["keeps nothing", "57423", "fixed in vLLM 0.32.0", "2 ranks"] {
        assert!(message.contains(says), "{says}: {message}");
    }
}

#[test]
fn layout_a_keeps_the_shared_file_for_a_dense_model() {
    let home = common::home();
    let model = home.path().join("dense");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(
        model.join("config.json"),
        r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 4096}"#,
    )
    .unwrap();
    let m = model.to_str().unwrap();
    let args = ["--model", m, "-tp", "2"];
    let layout_a = [("FAKE_VLLM_LAYOUT", "A")];
    let cold = serve(home.path(), &args, &layout_a);
    assert!(
        cold.logged_with("signed", json!({"files": 1})),
        "{}",
        cold.stderr
    );
    let warm = serve_with(home.path(), &["-v"], &args, &layout_a);
    assert_eq!(warm.code, 0, "{}", warm.stderr);
    assert!(
        warm.logged_starting("kept", "message", "kept "),
        "{}",
        warm.stderr
    );
    // Why a shared file is safe here is said at debug level: the verdict
    // is the one line that kept it.
    let info = serve(home.path(), &args, &layout_a);
    assert_eq!(two_verdicts(&info), [], "{}", info.stderr);
    assert!(
        warm.events_named("kept_shared_file")
            .iter()
            .any(|e| e["reason"].as_str().unwrap().starts_with("a dense model")),
        "{}",
        warm.stderr
    );
    assert_eq!(warm.tuned(), 0, "{:#?}", warm.stdout);
}

#[test]
fn the_api_server_entry_point_is_a_vllm_launch_too() {
    let home = common::home();
    let port = common::free_port().to_string();
    let engines = common::repo().join("tests/fixtures/engines");
    let run = || {
        let command = [
            "python3",
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            "/models/fake-moe",
            "--tune-ms",
            "2",
            "-tp",
            "2",
            "--port",
            &port,
        ];
        let mut cmd = kw_cmd(home.path(), &[], &command, &[]);
        cmd.env("PYTHONPATH", &engines);
        until_outcome(Running::spawn(&mut cmd))
    };
    let cold = run();
    assert_eq!(cold.event("launch")["profile"], "vllm", "{}", cold.stderr);
    assert!(
        cold.event("launch")["done"]
            .as_str()
            .unwrap()
            .contains(&format!("GET http://127.0.0.1:{port}/health")),
        "{}",
        cold.stderr
    );
    assert!(
        cold.logged_with("signed", json!({"files": 2})),
        "{}",
        cold.stderr
    );
    let warm = run();
    assert!(
        warm.logged_with("reused", json!({"files": 2})),
        "{}",
        warm.stderr
    );
    assert_eq!(warm.tuned(), 0);
}

#[test]
fn a_crash_mid_tune_leaves_nothing_trusted() {
    let home = common::home();
    let args = ["-tp", "2", "-ep"];
    // rank 1 dies while saving: rank 0's file and a partial temp file stay
    let crashed = serve(home.path(), &args, &[("FAKE_VLLM_CRASH", "1:save")]);
    assert_ne!(crashed.code, 0);
    assert!(
        crashed.has_event("not_signing_early_exit"),
        "{}",
        crashed.stderr
    );
    assert!(common::sidecars(&root(home.path())).is_empty());
    let next = serve_debug(home.path(), &args, &[]);
    assert_removed_unsigned(&next);
    assert!(
        next.events_named("removed_leftover")
            .iter()
            .any(|e| e["reason"] == "FlashInfer temp file left by a crash"),
        "{}",
        next.stderr
    );
    assert_retuned_and_signed_whole(&next);
}

#[test]
fn sigkill_of_keepwrap_and_its_engine_mid_tune_leaves_nothing_trusted() {
    let home = common::home();
    let port = common::free_port().to_string();
    let args = ["-tp", "2", "-ep", "--tune-ms", "150", "--port", &port];
    let mut r = Running::spawn(&mut kw_vllm(home.path(), &[], &args, &[]));
    // the first rank file lands; the other rank is still tuning
    r.wait_event("landed", DEADLINE);
    common::sigkill_with_children(r.guard.pid().as_raw());
    let f = r.finish(DEADLINE);
    assert_eq!(f.code, 128 + 9);
    common::wait_until_nothing_holds(&root(home.path()), DEADLINE);
    assert!(common::sidecars(&root(home.path())).is_empty());
    let next = serve_debug(home.path(), &["-tp", "2", "-ep"], &[]);
    assert_removed_unsigned(&next);
    assert_retuned_and_signed_whole(&next);
}

#[test]
fn a_one_rank_launch_leaves_the_managed_store_alone_and_says_so() {
    let home = common::home();
    let cold = serve(home.path(), &[], &[]);
    assert_eq!(cold.code, 0, "{}", cold.stderr);
    assert!(cold.has_event("managed_store"), "{}", cold.stderr);
    let store = home.path().join(".cache/flashinfer/autotune/v2");
    let before = common::cache_files(&store);
    assert!(!before.is_empty(), "the fake wrote its managed store");
    let warm = serve(home.path(), &[], &[]);
    assert_eq!(warm.tuned(), 0, "{:#?}", warm.stdout);
    assert_eq!(common::cache_files(&store), before);
    assert!(common::sidecars(&store).is_empty());
}

/// A one-rank launch whose managed store keepwrap leaves alone while it
/// keeps the rank files (its vLLM version unread; a release before 0.33.0
/// writes them for one rank too) is counted by what became of those: its
/// `managed_store` line is no outcome.
#[test]
fn a_store_left_alone_beside_kept_rank_files_is_counted_by_their_outcome() {
    let home = common::home();
    let file = home.path().join("keepwrap.prom");
    let kw = ["--metrics-file", file.to_str().unwrap()];
    let old = [("FAKE_VLLM_VERSION", "0.31.0")];
    let cold = serve_with(home.path(), &kw, &[], &old);
    assert!(cold.has_event("managed_store"), "{}", cold.stderr);
    assert!(cold.has_event("signed"), "{}", cold.stderr);
    let m = crate::metrics::samples(&file);
    assert_eq!(crate::metrics::boots(&m), [0.0, 1.0, 0.0, 0.0], "{m:?}");
    let warm = serve_with(home.path(), &kw, &[], &old);
    assert!(warm.has_event("reused"), "{}", warm.stderr);
    let m = crate::metrics::samples(&file);
    assert_eq!(crate::metrics::boots(&m), [1.0, 1.0, 0.0, 0.0], "{m:?}");
}

/// One boot of a two-node launch (`-tp 2` across two nodes, one rank each):
/// node 0 serves, node 1 is headless; each node has its own home (cache
/// root) and both the share. Waits for both outcome lines, then stops both.
fn two_nodes(homes: &[PathBuf; 2], share: &Path, extra: &[&str]) -> [Finished; 2] {
    let port = common::free_port().to_string();
    let master = common::free_port().to_string();
    let share_arg = format!("--share={}", share.display());
    common::vllm::two_nodes(homes, &[&share_arg], |rank| {
        let mut args: Vec<String> = [
            "-tp",
            "2",
            "-ep",
            "--nnodes",
            "2",
            "--node-rank",
            &rank.to_string(),
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            &master,
            "--port",
            &port,
        ]
        .map(String::from)
        .into();
        if rank == 1 {
            args.push("--headless".into());
        }
        args.extend(extra.iter().map(|a| a.to_string()));
        args
    })
}

#[test]
fn two_nodes_with_a_headless_node_keep_reuse_and_restore_through_the_share() {
    let tmp = common::home();
    let homes = [tmp.path().join("node0"), tmp.path().join("node1")];
    let share = tmp.path().join("share");
    for d in homes.iter().chain([&share]) {
        std::fs::create_dir_all(d).unwrap();
    }
    let [head, headless] = two_nodes(&homes, &share, &[]);
    assert!(
        headless.event("launch")["done"]
            .as_str()
            .unwrap()
            .contains("(the head's API server; this node is headless)"),
        "{}",
        headless.stderr
    );
    for (n, f) in [&head, &headless].iter().enumerate() {
        assert_eq!(f.code, 0, "node {n}: {}", f.stderr);
        assert!(
            f.logged_with("signed", json!({"files": 1})),
            "node {n}: {}",
            f.stderr
        );
        assert!(
            f.logged_with("share_published", json!({"files": 1})),
            "node {n}: {}",
            f.stderr
        );
    }
    let tuned = head.tuned() + headless.tuned();
    assert!(tuned > 0);

    // the same launch again: each node reuses its own rank's file
    let [head, headless] = two_nodes(&homes, &share, &[]);
    for (n, f) in [&head, &headless].iter().enumerate() {
        assert!(
            f.logged_with("reused", json!({"files": 1})),
            "node {n}: {}",
            f.stderr
        );
    }
    assert_eq!(head.tuned() + headless.tuned(), 0);

    // node 1 comes back with an empty cache (a new pod): it restores its
    // own rank's file from the share, and nothing is tuned
    std::fs::remove_dir_all(&homes[1]).unwrap();
    std::fs::create_dir_all(&homes[1]).unwrap();
    let [head, headless] = two_nodes(&homes, &share, &[]);
    assert!(
        headless.logged_with("share_restored_own", json!({"files": 1})),
        "{}",
        headless.stderr
    );
    assert!(
        headless.logged_with("reused", json!({"files": 1})),
        "{}",
        headless.stderr
    );
    assert_eq!(head.tuned() + headless.tuned(), 0, "{:#?}", headless.stdout);

    // without node 0's publication the set is not complete: nothing is
    // taken, and the world re-tunes
    std::fs::remove_dir_all(&homes[1]).unwrap();
    std::fs::create_dir_all(&homes[1]).unwrap();
    let published: Vec<PathBuf> = std::fs::read_dir(share.join("keepwrap"))
        .unwrap()
        .map(|e| e.unwrap().path().join("node0"))
        .collect();
    for p in &published {
        std::fs::remove_dir_all(p).unwrap();
    }
    let [_head, headless] = two_nodes(&homes, &share, &[]);
    assert!(
        headless.logged_with("share_incomplete", json!({"missing": "0", "nodes": 2})),
        "{}",
        headless.stderr
    );
    assert!(headless.tuned() > 0, "{:#?}", headless.stdout);
}

#[test]
fn a_headless_node_without_the_heads_address_signs_once_its_rank_files_are_quiet() {
    let tmp = common::home();
    let homes = [tmp.path().join("node0"), tmp.path().join("node1")];
    let port = common::free_port().to_string();
    let rpc = common::free_port().to_string();
    let share = tmp.path().join("share");
    std::fs::create_dir_all(&share).unwrap();
    let share_arg = format!("--share={}", share.display());
    let boot = || {
        let kw = [share_arg.as_str(), "--headless-quiet", "300ms"];
        common::vllm::two_nodes(&homes, &kw, |rank| {
            let mut args: Vec<String> = [
                "-dp", "2", "-dpl", "1", "-ep", "-dpp", &rpc, "--port", &port,
            ]
            .map(String::from)
            .into();
            if rank == 1 {
                args.extend(["-dpr", "1", "--headless"].map(String::from));
            }
            args
        })
    };
    let [head, headless] = boot();
    assert!(
        headless.event("launch")["done"]
            .as_str()
            .unwrap()
            .starts_with(
            "when this headless node's 1 rank file (autotune_configs_dp1_rank1.json) have landed"
        ),
        "{}",
        headless.stderr
    );
    assert!(
        head.logged_with("signed", json!({"files": 1})),
        "{}",
        head.stderr
    );
    assert!(
        headless.logged_with("signed", json!({"files": 1})),
        "{}",
        headless.stderr
    );
    // data parallelism across nodes: node = start rank / local size
    assert!(
        headless.logged_with(
            "share_published",
            json!({"files": 1, "node": 1, "nodes": 2})
        ),
        "{}",
        headless.stderr
    );
    assert!(
        head.logged_with(
            "share_published",
            json!({"files": 1, "node": 0, "nodes": 2})
        ),
        "{}",
        head.stderr
    );
    let [head, headless] = boot();
    assert!(
        headless.logged_with("reused", json!({"files": 1})),
        "{}",
        headless.stderr
    );
    assert_eq!(head.tuned() + headless.tuned(), 0);
}

#[test]
fn a_headless_nodes_exit_0_is_never_tuning_done() {
    let home = common::home();
    // node 1 of a two-node launch whose head never comes: it exits 0 on
    // TERM while waiting, and nothing it wrote is signed
    let port = common::free_port().to_string();
    let master = common::free_port().to_string();
    let args = [
        "-tp",
        "2",
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        &master,
        "--port",
        &port,
        "--headless",
    ];
    let mut r = Running::spawn(&mut kw_vllm(home.path(), &[], &args, &[]));
    r.wait_stdout("the fake's start event", DEADLINE, |l| {
        l.contains("\"event\": \"start\"")
    });
    r.guard.signal(Signal::SIGTERM);
    let f = r.finish(DEADLINE);
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert!(
        f.log_events()
            .iter()
            .any(|e| e["code"].as_str().unwrap().starts_with("not_signing")),
        "{}",
        f.stderr
    );
    assert!(common::sidecars(&root(home.path())).is_empty());
}

#[test]
fn status_and_explain_read_a_vllm_launch() {
    let home = common::home();
    tp2_ep_signed(home.path());
    let launch = |sub: &str, tp: &str| {
        let mut cmd = kw_vllm(
            home.path(),
            &[sub],
            &["--port", "9999", "-tp", tp, "-ep"],
            &[],
        );
        common::output(&mut cmd)
    };
    let st = launch("status", "2");
    assert_eq!(st.code, 0, "{}", st.stderr);
    let out = st.stdout.join("\n");
    assert!(
        out.contains(&format!("cache root {}", root(home.path()).display())),
        "{out}"
    );
    assert_eq!(
        st.stdout
            .iter()
            .filter(
                |l| l.contains("signed for this launch") && l.contains("autotune_configs_dp0_rank")
            )
            .count(),
        2,
        "{out}"
    );
    assert!(
        out.contains("this launch would keep 2, restore 0, store 0 and remove 0 cache files"),
        "{out}"
    );
    // without a command, --profile vllm selects vLLM's root
    let mut cmd = hermetic(home.path());
    cmd.args(["status", "--profile", "vllm"]);
    let st = common::output(&mut cmd);
    assert_shows_the_signed_vllm_root(&st, home.path());
    let ex = launch("explain", "4");
    assert_eq!(ex.code, 0, "{}", ex.stderr);
    let out = ex.stdout.join("\n");
    assert!(out.contains("(vllm profile): never signed"), "{out}");
    assert!(out.contains("arg --tensor-parallel-size 2 -> 4"), "{out}");
}

#[test]
fn one_changed_rank_file_prunes_the_whole_set() {
    let home = common::home();
    let args = ["-tp", "2", "-ep"];
    let cold = serve(home.path(), &args, &[]);
    assert!(
        cold.logged_with("signed", json!({"files": 2})),
        "{}",
        cold.stderr
    );
    // rank 1's file replaced after signing (another writer, a peer's copy)
    let files = common::cache_files(&root(home.path()));
    let rank1 = root(home.path()).join(&files[1]);
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&rank1).unwrap()).unwrap();
    v.as_object_mut()
        .unwrap()
        .insert("planted".into(), serde_json::json!([0, 1]));
    std::fs::write(&rank1, serde_json::to_vec(&v).unwrap()).unwrap();
    let next = serve_debug(home.path(), &args, &[]);
    let reasons: Vec<String> = next
        .events_named("removed")
        .iter()
        .map(|e| e["reason"].as_str().unwrap().to_string())
        .collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("changed after signing")),
        "{}",
        next.stderr
    );
    assert!(
        reasons.iter().any(|r| r.starts_with("set incomplete")),
        "{}",
        next.stderr
    );
    assert!(
        next.logged_with("pruned", json!({"kept": 0})),
        "{}",
        next.stderr
    );
    // the whole group re-tunes from scratch: no rank loads part of a set
    assert_retuned_and_signed_whole(&next);
}

#[test]
fn the_override_directory_holds_the_folders_and_the_managed_store_is_left_alone() {
    let home = common::home();
    let dir = home.path().join("autotune");
    let env = [("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR", dir.to_str().unwrap())];
    let cold = serve(home.path(), &["-tp", "2"], &env);
    assert!(
        cold.event("launch")["root"] == dir.to_str().unwrap(),
        "{}",
        cold.stderr
    );
    assert!(
        cold.logged_with("signed", json!({"files": 2})),
        "{}",
        cold.stderr
    );
    // the folders sit right in the root: <sha256>/autotune_configs_dp0_rank*.json
    let files = common::cache_files(&dir);
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(
        files.iter().all(|f| f.components().count() == 2),
        "{files:?}"
    );
    // a one-rank launch on the same root writes FlashInfer's store in v2/
    let one = serve(home.path(), &[], &env);
    assert!(one.has_event("managed_store"), "{}", one.stderr);
    assert!(dir.join("v2").is_dir());
    let warm = serve(home.path(), &["-tp", "2"], &env);
    assert!(
        warm.logged_with("reused", json!({"files": 2})),
        "{}",
        warm.stderr
    );
    assert_eq!(warm.tuned(), 0);
    // v2/ is the engine's: neither judged nor reported as something else
    assert!(!warm.has_event("untouched"), "{}", warm.stderr);
    assert!(common::sidecars(&dir.join("v2")).is_empty());
    let one = serve(home.path(), &[], &env);
    assert_eq!(one.tuned(), 0, "{:#?}", one.stdout);
}

#[test]
fn the_config_file_gives_the_port_and_the_sizes() {
    let home = common::home();
    let port = common::free_port();
    std::fs::write(
        home.path().join("serve.yaml"),
        format!("port: {port}\ntensor-parallel-size: 2\n"),
    )
    .unwrap();
    let cfg = home.path().join("serve.yaml");
    let mut cmd = kw_vllm(home.path(), &[], &["--config", cfg.to_str().unwrap()], &[]);
    let f = until_outcome(Running::spawn(&mut cmd));
    assert!(
        f.event("launch")["done"]
            .as_str()
            .unwrap()
            .contains(&format!("GET http://127.0.0.1:{port}/health")),
        "{}",
        f.stderr
    );
    assert!(f.logged_with("signed", json!({"files": 2})), "{}", f.stderr);
}

/// After a crash mid-tune, the next boot removes the unsigned rank files.
fn assert_removed_unsigned(next: &Finished) {
    assert!(
        next.events_named("removed")
            .iter()
            .any(|e| e["reason"] == "no sidecar (unsigned)"),
        "{}",
        next.stderr
    );
}

/// Every rank tuned again and the two rank files signed as one set.
fn assert_retuned_and_signed_whole(next: &Finished) {
    assert!(
        next.tuned_by_rank().values().all(|&t| t > 0),
        "{:#?}",
        next.stdout
    );
    assert!(
        next.logged_with("signed", json!({"files": 2})),
        "{}",
        next.stderr
    );
}

/// Every file below `dir` with its bytes (the `.keepwrap` state left out).
fn tree(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    fn walk(dir: &Path, out: &mut std::collections::BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if e.file_name() == ".keepwrap" {
                continue;
            }
            if e.file_type().unwrap().is_dir() {
                walk(&p, out);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(dir, &mut out);
    out
}

/// A boot that keepwrap only supervises ([`common::vllm::until_ready`]).
fn serve_supervised(cmd: &mut Command) -> Finished {
    common::vllm::until_ready(Running::spawn(cmd))
}

#[test]
fn a_ray_launch_is_supervised_and_its_cache_left_as_vllm_leaves_it() {
    // Under `--distributed-executor-backend ray` the workers are Ray actors
    // writing rank files on the nodes Ray picks, with their node's Ray
    // environment: keepwrap cannot vouch for what lands here, so it signs
    // nothing, and removes nothing either (vLLM's own gate decides).
    let home = common::home();
    let root = root(home.path());
    let tp = ["-tp", "2", "-ep"];
    let cold = serve(home.path(), &tp, &[]);
    assert!(
        cold.logged_with("signed", json!({"files": 2})),
        "{}",
        cold.stderr
    );
    // A file keepwrap would remove before any other launch (unsigned).
    let folder = common::cache_files(&root)[0]
        .parent()
        .unwrap()
        .to_path_buf();
    std::fs::write(
        root.join(&folder).join("autotune_configs_dp0_rank7.json"),
        br#"{"_metadata": {}}"#,
    )
    .unwrap();
    let before = tree(&root);

    // `status -- CMD` says the same before the launch: every file left.
    let ray = [&tp[..], &["--distributed-executor-backend", "ray"]].concat();
    let st = common::output(&mut kw_vllm(home.path(), &["status"], &ray, &[]));
    assert_eq!(st.code, 0, "{}", st.stderr);
    let out = st.stdout.join("\n");
    assert!(
        out.contains("this launch would keep 0, restore 0, store 0 and remove 0 cache files\na Ray launch (--distributed-executor-backend ray): keepwrap only supervises it"),
        "{out}"
    );
    let st = common::output(&mut kw_vllm(home.path(), &["status", "--json"], &ray, &[]));
    let report: serde_json::Value = serde_json::from_str(&st.stdout.join("\n")).unwrap();
    let actions: Vec<&str> = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["leave"; 3], "{report}");

    let port = common::free_port().to_string();
    let mut args = vec!["--port", port.as_str()];
    args.extend_from_slice(&ray);
    let f = serve_supervised(&mut kw_vllm(home.path(), &[], &args, &[]));
    assert_supervised_under_ray(&f, "--distributed-executor-backend ray");
    // vLLM's own gate kept the files of the first boot (this fake's folder
    // does not depend on the backend): nothing tuned, nothing changed.
    assert_eq!(f.tuned(), 0, "{:#?}", f.stdout);
    assert_eq!(tree(&root), before, "the cache as the engine left it");

    // The same from the --config file, and for data parallelism.
    let cfg = home.path().join("ray.yaml");
    std::fs::write(&cfg, "data-parallel-backend: ray\n").unwrap();
    let port = common::free_port().to_string();
    let f = serve_supervised(&mut kw_vllm(
        home.path(),
        &[],
        &[
            "--port",
            &port,
            "-tp",
            "2",
            "--config",
            cfg.to_str().unwrap(),
        ],
        &[],
    ));
    assert_supervised_under_ray(&f, "--data-parallel-backend ray");

    // A command keepwrap does not read as vLLM's, forced to the vllm
    // profile: read whole.
    let fake = common::repo().join("tests/fixtures/engines/fake_vllm.py");
    let port = common::free_port().to_string();
    let f = serve_supervised(&mut kw_cmd(
        home.path(),
        &["--profile", "vllm"],
        &[
            "python3",
            fake.to_str().unwrap(),
            "serve",
            "/models/fake-moe",
            "--port",
            &port,
            "--distributed-executor-backend=ray",
        ],
        &[],
    ));
    assert_supervised_under_ray(&f, "--distributed-executor-backend ray");
}

/// The engine's own exit status, the one `ray_launch` line naming `arg`,
/// and no other decision about the cache.
fn assert_supervised_under_ray(f: &Finished, arg: &str) {
    assert_eq!(f.code, 0, "the engine's own status: {}", f.stderr);
    let line = f.event("ray_launch");
    assert_eq!(line["arg"], arg, "{}", f.stderr);
    assert!(
        line["message"]
            .as_str()
            .unwrap()
            .contains("nothing kept, signed or removed"),
        "{line}"
    );
    for e in [
        "launch",
        "pruned",
        "removed",
        "signed",
        "reused",
        "nothing_to_keep",
    ] {
        assert!(!f.has_event(e), "{e}: {}", f.stderr);
    }
}

#[test]
fn a_vllm_server_behind_launcher_prefixes_is_the_plain_vllm_launch() {
    let home = common::home();
    let port = common::free_port().to_string();
    let mut command = vec!["nice", "-n", "1", "stdbuf", "-oL", "env", "-u", "UNSET_X"];
    command.extend(["vllm", "serve", "/models/fake-moe", "--tune-ms", "2"]);
    command.extend(["-tp", "2", "-ep", "--port", &port]);
    let prefixed = until_outcome(Running::spawn(&mut kw_cmd(home.path(), &[], &command, &[])));
    assert_eq!(
        prefixed.event("launch")["profile"],
        "vllm",
        "{}",
        prefixed.stderr
    );
    assert!(
        prefixed.logged_with("signed", json!({"files": 2})),
        "{}",
        prefixed.stderr
    );
    let plain = serve(home.path(), &["-tp", "2", "-ep"], &[]);
    assert!(
        plain.logged_with("reused", json!({"files": 2})),
        "{}",
        plain.stderr
    );
    assert_eq!(plain.tuned(), 0, "{:#?}", plain.stdout);
}

/// Three boots of one launch under three values of a vLLM variable, then a
/// fourth: the store holds the first three's sets. Their fingerprints.
fn three_stored_vllm_sets(home: &Path, env: &[(&str, &str)]) -> Vec<String> {
    let mut fps = Vec::new();
    for backend in ["latency", "throughput", "masked_gemm", "cutlass"] {
        let mut env = env.to_vec();
        env.push(("VLLM_FLASHINFER_MOE_BACKEND", backend));
        let b = serve(home, &["-tp", "2", "-ep"], &env);
        assert!(b.logged_with("signed", json!({"files": 2})), "{}", b.stderr);
        fps.push(
            b.event("launch")["fingerprint"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    fps.truncate(3);
    fps
}

/// `keepwrap ARGS --cache-dir ROOT` (no profile, no command; no
/// `--cache-dir` when ROOT is None), `env` added.
fn maintenance(home: &Path, root: Option<&Path>, args: &[&str], env: &[(&str, &str)]) -> Finished {
    let mut cmd = hermetic(home);
    cmd.args(args).envs(env.iter().copied());
    if let Some(root) = root {
        cmd.arg("--cache-dir").arg(root);
    }
    common::output(&mut cmd)
}

/// The fingerprints of the sets in the store of vLLM's root, as status says.
fn stored_vllm(home: &Path, env: &[(&str, &str)]) -> Vec<String> {
    let mut cmd = hermetic(home);
    cmd.args(["status", "--profile", "vllm", "--json"])
        .envs(env.iter().copied());
    let f = common::output(&mut cmd);
    assert_eq!(f.code, 0, "{}", f.stderr);
    let v: serde_json::Value = serde_json::from_str(&f.stdout.join("\n")).unwrap();
    let mut fps: Vec<String> = v["store"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["fingerprint"].as_str().unwrap().to_string())
        .collect();
    fps.sort();
    fps
}

/// `evict` and `clean` on a vLLM root (`--cache-dir` when `named`, else
/// the default roots; no profile): its stored sets are listed, counted,
/// evicted when asked and kept when not, and the root's own cache files
/// stay.
fn evict_and_clean_on_a_vllm_root(root: &Path, home: &Path, env: &[(&str, &str)], named: bool) {
    let named = named.then_some(root);
    let fps = three_stored_vllm_sets(home, env);
    let mut want = fps.clone();
    want.sort();
    assert_eq!(stored_vllm(home, env), want);
    let files_before = common::cache_files(root);
    assert_eq!(files_before.len(), 2, "{files_before:?}");

    let f = maintenance(home, named, &["evict", "--older-than", "1h"], env);
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert!(
        f.stdout[0].starts_with("evicted 0 stored sets (0 files, 0 B); 3 left in the store ("),
        "{:?}",
        f.stdout
    );

    let f = maintenance(home, named, &["evict", "--dry-run", "--all"], env);
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert_eq!(f.stdout.len(), 4, "{:?}", f.stdout);
    for fp in &fps {
        assert!(
            f.stdout.iter().any(|l| l.starts_with(&format!(
                "would evict the stored set of launch {}... (2 files, ",
                &fp[..8]
            ))),
            "{:?}",
            f.stdout
        );
    }
    assert!(
        f.stdout[3].starts_with("would evict 3 stored sets (6 files, ")
            && f.stdout[3].contains(" of 3 in the store ("),
        "{:?}",
        f.stdout
    );
    assert_eq!(stored_vllm(home, env), want, "a dry run evicts nothing");

    let f = maintenance(home, named, &["evict", &fps[0][..8]], env);
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert!(
        f.stdout[0].starts_with("evicted 1 stored set (2 files, ")
            && f.stdout[0].contains("); 2 left in the store ("),
        "{:?}",
        f.stdout
    );
    want.retain(|fp| *fp != fps[0]);
    assert_eq!(stored_vllm(home, env), want);

    let f = maintenance(home, named, &["clean"], env);
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert!(
        f.stdout[0].starts_with("evicted 2 stored sets (4 files, ")
            && f.stdout[0].ends_with("); 0 left in the store (0 B)"),
        "{:?}",
        f.stdout
    );
    assert_eq!(stored_vllm(home, env), Vec::<String>::new());
    let f = maintenance(home, named, &["evict", "--all"], env);
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert_eq!(
        f.stdout,
        ["evicted 0 stored sets (0 files, 0 B); 0 left in the store (0 B)"]
    );
    assert_eq!(common::cache_files(root), files_before);
    // The fourth launch's files are still its own: a warm boot reuses them.
    let mut env = env.to_vec();
    env.push(("VLLM_FLASHINFER_MOE_BACKEND", "cutlass"));
    let warm = serve(home, &["-tp", "2", "-ep"], &env);
    assert!(
        warm.logged_with("reused", json!({"files": 2})),
        "{}",
        warm.stderr
    );
    assert_eq!(warm.tuned(), 0, "{:#?}", warm.stdout);
}

#[test]
fn evict_and_clean_act_on_the_stored_sets_of_a_vllm_tree_root() {
    let home = common::home();
    evict_and_clean_on_a_vllm_root(&root(home.path()), home.path(), &[], true);
    for sub in ["evict", "clean"] {
        let help = common::output(hermetic(home.path()).args([sub, "--help"]));
        assert!(
            help.stdout.join(" ").contains(
                "Each stored set is judged by the cache tree its files name (SGLang's, vLLM's tree or flat root, TensorRT-LLM's): --cache-dir may be any engine's root."
            ),
            "{sub}: {:?}",
            help.stdout
        );
    }
}

#[test]
fn evict_and_clean_act_on_the_stored_sets_of_a_flat_vllm_root() {
    let home = common::home();
    let flat = home.path().join("flat");
    let dir = flat.to_str().unwrap();
    evict_and_clean_on_a_vllm_root(
        &flat,
        home.path(),
        &[("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR", dir)],
        true,
    );
}

/// Without `--cache-dir`, `evict` and `clean` find vLLM's own root (as
/// vLLM does, from its variables and `HOME`) when only it has a store; when
/// SGLang's default root has one too, each root has its line, naming it.
#[test]
fn evict_and_clean_without_a_cache_dir_act_on_vllms_default_root() {
    let home = common::home();
    let tree = root(home.path());
    evict_and_clean_on_a_vllm_root(&tree, home.path(), &[], false);
    let sglang = home.path().join(".cache/sglang/flashinfer/autotune");
    for d in ["store", "launches"] {
        std::fs::create_dir_all(sglang.join(".keepwrap").join(d)).unwrap();
    }
    let f = maintenance(home.path(), None, &["evict", "--all"], &[]);
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert_eq!(
        f.stdout,
        [
            format!(
                "evicted 0 stored sets (0 files, 0 B); 0 left in the store of {} (0 B)",
                sglang.display()
            ),
            format!(
                "evicted 0 stored sets (0 files, 0 B); 0 left in the store of {} (0 B)",
                tree.display()
            ),
        ]
    );
    let flat = home.path().join("flat");
    let dir = flat.to_str().unwrap();
    let env = [("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR", dir)];
    std::fs::remove_dir_all(home.path().join(".cache/sglang")).unwrap();
    evict_and_clean_on_a_vllm_root(&flat, home.path(), &env, false);
}

/// In a vLLM container (`docker exec POD keepwrap status`: no command, no
/// `--profile`), status shows the root that holds the engine's cache, not
/// SGLang's that does not exist; with SGLang's root there too, each root in
/// turn, and `--json` names the others.
#[test]
fn status_without_a_command_shows_every_default_root_that_exists() {
    let home = common::home();
    tp2_ep_signed(home.path());
    let status = |json_out: bool| {
        let mut cmd = hermetic(home.path());
        cmd.arg("status");
        if json_out {
            cmd.arg("--json");
        }
        common::output(&mut cmd)
    };
    let st = status(false);
    assert_shows_the_signed_vllm_root(&st, home.path());
    let js = status(true);
    assert_eq!(js.code, 0, "{}", js.stderr);
    let report: serde_json::Value = serde_json::from_str(&js.stdout.join("\n")).unwrap();
    assert_eq!(report["root"], json!(root(home.path())), "{report}");
    assert_eq!(report.get("other_roots"), None, "{report}");

    // SGLang's default root exists too: both, SGLang's first
    let sglang = home.path().join(".cache/sglang/flashinfer/autotune");
    std::fs::create_dir_all(&sglang).unwrap();
    let st = status(false);
    assert_eq!(st.code, 0, "{}", st.stderr);
    let roots: Vec<&String> = st
        .stdout
        .iter()
        .filter(|l| l.starts_with("cache root "))
        .collect();
    assert_eq!(roots.len(), 2, "{:?}", st.stdout);
    assert!(
        roots[0].contains(&sglang.display().to_string()),
        "{roots:?}"
    );
    assert!(
        roots[1].contains(&root(home.path()).display().to_string()),
        "{roots:?}"
    );
    let report: serde_json::Value = serde_json::from_str(&status(true).stdout.join("\n")).unwrap();
    assert_eq!(report["root"], json!(sglang), "{report}");
    assert_eq!(
        report["other_roots"],
        json!([root(home.path())]),
        "{report}"
    );
}
