//! Under expert parallelism SGLang's stock entry gate deletes every rank's
//! cache on every boot (SGLang issue 40320): each rank tunes its own MoE
//! shapes, so the whole-file digests never agree. keepwrap unifies the rank
//! files of a launch at commit, so the gate agrees and nothing is profiled.
//! Proven end to end with the fake engine.

use crate::common;
use serde_json::json;

use std::path::Path;

use common::*;

const EP4_STOCK: &[&str] = &["--tp", "4", "--ep", "4", "--gate", "stock", "--offline"];

/// Every rank file of the boot holds the same bytes.
fn all_identical(root: &Path) -> bool {
    let files = cache_files(root);
    let first = std::fs::read(root.join(&files[0])).unwrap();
    files
        .iter()
        .all(|f| std::fs::read(root.join(f)).unwrap() == first)
}

#[test]
fn without_keepwrap_the_stock_gate_retunes_every_boot() {
    let h = home();
    let b1 = boot(&mut keepwrap_engine(h.path(), &["--disable"], EP4_STOCK));
    let b2 = boot(&mut keepwrap_engine(h.path(), &["--disable"], EP4_STOCK));
    assert_eq!((b1.code, b2.code), (0, 0));
    assert!(
        b2.events("pass").iter().any(|p| p["gate"] == "dropped"),
        "the bug: the gate drops the files"
    );
    assert_eq!(b2.hit(), 0, "boot 2 loads nothing");
    assert_ne!(b2.tactics(), b1.tactics(), "tactics are drawn anew");
}

#[test]
fn with_keepwrap_the_stock_gate_keeps_the_unified_files_and_tunes_nothing() {
    let h = home();
    let root = cache_root(h.path());
    let b1 = boot(&mut keepwrap_engine(h.path(), &[], EP4_STOCK));
    assert_eq!(b1.code, 0, "{}", b1.stderr);
    assert!(
        b1.logged_with("unified", json!({"files": 4})),
        "{}",
        b1.stderr
    );
    assert!(b1.logged_with("signed", json!({"files": 4})));
    assert!(all_identical(&root));

    let mut tactics = Vec::new();
    for n in [2, 3] {
        let b = boot(&mut keepwrap_engine(h.path(), &[], EP4_STOCK));
        assert_eq!(b.code, 0, "boot {n}: {}", b.stderr);
        assert_eq!(
            b.tuned_by_rank(),
            (0..4).map(|r| (r, 0)).collect(),
            "boot {n} tunes 0 shapes on every rank"
        );
        assert!(b
            .events("pass")
            .iter()
            .all(|p| p["gate"] == "kept" && p["hit"].as_u64().unwrap() > 0));
        assert!(
            b.logged_with("reused", json!({"files": 4})),
            "boot {n}: {}",
            b.stderr
        );
        tactics.push(b.tactics());
    }
    assert_eq!(
        tactics[0], tactics[1],
        "the tactics stay the same across boots 2 and 3"
    );
    assert_eq!(tactics[0], b1.tactics(), "and they are boot 1's");
}

#[test]
fn the_fixed_gate_tunes_nothing_on_boot_2_with_and_without_unify() {
    for unify in ["on", "off"] {
        let h = home();
        let args = ["--tp", "4", "--ep", "4", "--gate", "fixed", "--offline"];
        assert_eq!(
            boot(&mut keepwrap_engine(h.path(), &["--unify", unify], &args)).code,
            0
        );
        assert_eq!(all_identical(&cache_root(h.path())), unify == "on");
        let b = boot(&mut keepwrap_engine(h.path(), &["--unify", unify], &args));
        assert_eq!((b.code, b.tuned()), (0, 0), "--unify {unify}: {}", b.stderr);
    }
}

#[test]
fn files_signed_without_unify_are_unified_at_done_not_before_the_start() {
    let h = home();
    assert_eq!(
        boot(&mut keepwrap_engine(
            h.path(),
            &["--unify", "off"],
            EP4_STOCK
        ))
        .code,
        0
    );
    assert!(!all_identical(&cache_root(h.path())));
    // Same launch, unify back on: nothing is rewritten before the engine
    // starts (that work grows with the set: seconds at 10,000 files), one
    // line says so; the engine loads the files as they are (the stock gate
    // drops them under EP and this boot tunes), and the sign at done
    // unifies what it leaves.
    let b = boot(&mut keepwrap_engine(
        h.path(),
        &["--unify", "on"],
        EP4_STOCK,
    ));
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(
        b.logged_with("kept_not_unified", json!({"dirs": 1})),
        "{}",
        b.stderr
    );
    assert!(b.has_event("unified"), "{}", b.stderr);
    assert!(all_identical(&cache_root(h.path())));
    // The next boot finds one union: it tunes nothing and says nothing of
    // unify before the start.
    let c = boot(&mut keepwrap_engine(
        h.path(),
        &["--unify", "on"],
        EP4_STOCK,
    ));
    assert_eq!((c.code, c.tuned()), (0, 0), "{}", c.stderr);
    assert!(!c.has_event("kept_not_unified"), "{}", c.stderr);
}

#[test]
fn a_unified_file_loads_in_python_with_flashinfers_generation() {
    let h = home();
    let root = cache_root(h.path());
    assert_eq!(boot(&mut keepwrap_engine(h.path(), &[], EP4_STOCK)).code, 0);
    let files: Vec<_> = cache_files(&root).iter().map(|f| root.join(f)).collect();
    let out = std::process::Command::new("python3")
        .arg(repo().join("tests/py/flashinfer_files.py"))
        .arg("check")
        .args(&files)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let checks: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    let ok = serde_json::json!({"generation": true, "order": true, "bytes": true});
    assert_eq!(
        checks,
        serde_json::json!([ok, ok, ok, ok]),
        "each file's _generation and bytes are FlashInfer's recipe"
    );
}

#[test]
fn mixed_metadata_and_records_files_are_left_as_they_are() {
    let h = home();
    let mut cmd = keepwrap_engine(h.path(), &[], EP4_STOCK);
    cmd.env("FAKE_METADATA_RANK1_CUDA_VERSION", "12.9");
    let b = boot(&mut cmd);
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(
        b.logged_with(
            "unify_left",
            json!({"reason": "left as they are: their _metadata differ (rank_tp0_pp0_dp0.json vs rank_tp1_pp0_dp0.json)"})
        ),
        "{}",
        b.stderr
    );
    assert!(!all_identical(&cache_root(h.path())));

    let h = home();
    let b = boot(&mut keepwrap_engine(
        h.path(),
        &[],
        &[EP4_STOCK, &["--megamoe"]].concat(),
    ));
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(
        b.events_named("unify_left").iter().any(|e| e["reason"]
            .as_str()
            .unwrap()
            .ends_with("has _records (a single-writer file)")),
        "{}",
        b.stderr
    );
}

#[test]
fn a_directory_with_one_rank_file_is_left_with_a_reason() {
    let h = home();
    let b = boot(&mut keepwrap_engine(
        h.path(),
        &[],
        &["--tp", "1", "--offline"],
    ));
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(
        b.logged_with(
            "unify_left",
            json!({"reason": "left as they are: only one rank file (rank_tp0_pp0_dp0.json)"})
        ),
        "{}",
        b.stderr
    );
}

#[test]
fn conflicting_entries_keep_the_lowest_ranks_value_and_are_logged() {
    let h = home();
    let root = h.path().join("cache");
    let dir = root.join("0.7.2/sm121/0123456789abcdef");
    let spec = h.path().join("spec.json");
    std::fs::write(&spec, r#"{"seed": 7, "ranks": [[1,0,0],[0,0,0],[0,1,0]], "per_rank": 3, "shared": 2, "conflicts": 2}"#).unwrap();
    // The "engine" writes three rank files that disagree on two entries.
    let gen = repo().join("tests/py/flashinfer_files.py");
    let mut cmd = std::process::Command::new(BIN);
    cmd.env("KEEPWRAP_CACHE_DIR", &root)
        .env("KEEPWRAP_LOG_FORMAT", "json")
        .env_remove("KEEPWRAP_LOG");
    cmd.arg("--")
        .arg("python3")
        .arg(&gen)
        .arg("gen")
        .arg(&dir)
        .arg(&spec);
    let b = boot(&mut cmd);
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(
        b.logged_with("unified", json!({"files": 3})),
        "{}",
        b.stderr
    );
    let conflicts: Vec<_> = b
        .events_named("unify_conflict")
        .into_iter()
        .filter(|e| {
            e["conflict"].as_str().unwrap().ends_with(
                "differs between rank files: kept rank_tp0_pp0_dp0.json's value over rank_tp0_pp1_dp0.json, rank_tp1_pp0_dp0.json",
            )
        })
        .collect();
    assert_eq!(conflicts.len(), 2, "{}", b.stderr);
    let tp0: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("rank_tp1_pp0_dp0.json")).unwrap()).unwrap();
    let kept: Vec<_> = tp0
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.contains("CutlassFp4GemmRunner"))
        .map(|(_, v)| v[1].clone())
        .collect();
    assert_eq!(
        kept,
        vec![serde_json::json!([0, 0, 0]); 2],
        "rank tp0's values everywhere"
    );
}

#[test]
fn unified_rank_files_share_one_inode_and_a_save_of_one_rank_leaves_the_others_alone() {
    use std::os::unix::fs::MetadataExt;
    let h = home();
    let root = cache_root(h.path());
    let b1 = boot(&mut keepwrap_engine(h.path(), &[], EP4_STOCK));
    assert_eq!(b1.code, 0, "{}", b1.stderr);
    assert!(
        b1.logged_with("signed", json!({"files": 4})),
        "{}",
        b1.stderr
    );
    let files = cache_files(&root);
    assert_eq!(files.len(), 4);
    let meta: Vec<_> = files
        .iter()
        .map(|f| std::fs::metadata(root.join(f)).unwrap())
        .collect();
    // The union written once: one inode, four links.
    assert!(meta.iter().all(|m| m.ino() == meta[0].ino()), "one inode");
    assert_eq!(meta[0].nlink(), 4);
    let before: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(root.join(f)).unwrap())
        .collect();
    // The fake engine's own save (FlashInfer's: a temp file, os.replace)
    // of rank 0, with one more entry.
    let script = format!(
        "import sys, json; sys.path.insert(0, {:?}); import fake_engine as fe\n\
         p = {:?}\n\
         d = json.load(open(p)); env = d['_metadata']\n\
         e = {{k: v for k, v in d.items() if not k.startswith('_')}}\n\
         e['(\"new\", \"shape\")'] = ['R', 1]\n\
         print(fe.save_configs(p, e, env))\n",
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/engines"),
        root.join(&files[0]),
    );
    let out = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "merged");
    let after0 = std::fs::read(root.join(&files[0])).unwrap();
    assert_ne!(after0, before[0], "rank 0 saved");
    assert_ne!(
        std::fs::metadata(root.join(&files[0])).unwrap().ino(),
        meta[0].ino(),
        "rank 0 is a new inode"
    );
    for (f, b) in files.iter().zip(&before).skip(1) {
        assert_eq!(
            &std::fs::read(root.join(f)).unwrap(),
            b,
            "{}: untouched by rank 0's save",
            f.display()
        );
    }
    assert_eq!(
        std::fs::metadata(root.join(&files[1])).unwrap().nlink(),
        3,
        "the other three still share the union"
    );
}
