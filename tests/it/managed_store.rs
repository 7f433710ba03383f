//! keepwrap's reading of FlashInfer's managed store (`engine::flashinfer`)
//! against FlashInfer's own code: `flashinfer/autotune_cache.py` of the
//! flashinfer-python 0.7.4 wheel, run on CPU by tests/py/flashinfer_store.py,
//! writes a store; keepwrap recomputes its hashes and bytes, finds it clean,
//! and names each file once a byte of it is edited. The wheel, unpacked, is
//! named by `KEEPWRAP_TEST_FLASHINFER` (.ci/run fetches it).

use crate::common::has_need;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use keepwrap::engine::flashinfer::{check, entry_stem, env16, file_bytes};
use serde_json::Value;

/// The unpacked wheel, if the test has one.
fn wheel() -> Option<PathBuf> {
    let dir = std::env::var_os("KEEPWRAP_TEST_FLASHINFER").map(PathBuf::from);
    let ok = dir
        .as_ref()
        .is_some_and(|d| d.join("flashinfer/autotune_cache.py").is_file());
    has_need(
        ok,
        "flashinfer-python 0.7.4 unpacked (KEEPWRAP_TEST_FLASHINFER=DIR holding flashinfer/autotune_cache.py)",
    )
    .then(|| dir.unwrap_or_default())
}

/// FlashInfer writes a store into `root`, then tries it read-only.
fn flashinfer_writes(wheel: &Path, root: &Path) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/flashinfer_store.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(wheel)
        .arg(root)
        .arg("ro")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn findings(root: &Path) -> Vec<String> {
    check(root)
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// Flip one byte of `path` at the first `at` (a byte of the file's text).
fn edit(path: &Path, at: &str, to: &str) {
    let text = fs::read_to_string(path).unwrap();
    assert!(text.contains(at), "{at} in {}", path.display());
    fs::write(path, text.replacen(at, to, 1)).unwrap();
}

#[test]
#[ignore = "needs flashinfer-python 0.7.4 unpacked (KEEPWRAP_TEST_FLASHINFER)"]
fn flashinfers_own_store_is_read_as_flashinfer_reads_it() {
    let Some(wheel) = wheel() else { return };
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let got = flashinfer_writes(&wheel, root);
    assert_eq!(got["warnings"], serde_json::json!([]), "{got}");

    // its hashes and bytes are keepwrap's
    let env = got["env"].as_str().unwrap();
    let manifest_path = root.join("v2").join(env).join("manifest.json");
    let manifest = fs::read(&manifest_path).unwrap();
    assert_eq!(env16(&manifest).as_deref(), Ok(env));
    let parsed: Value = serde_json::from_slice(&manifest).unwrap();
    assert_eq!(file_bytes(&parsed), manifest);
    let entries = got["entries"].as_object().unwrap();
    assert_eq!(entries.len(), 4);
    for (key, rel) in entries {
        let rel = rel.as_str().unwrap();
        assert_eq!(
            rel,
            format!("v2/{env}/entries/{}.json", entry_stem(key)),
            "{key}"
        );
        let bytes = fs::read(root.join(rel)).unwrap();
        let parsed: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(parsed["key"].as_str(), Some(key.as_str()));
        assert_eq!(file_bytes(&parsed), bytes, "{rel}");
    }
    assert_eq!(findings(root), Vec::<String>::new());

    // read-only, FlashInfer's publish and discard warn and fail; what is
    // on disk still hits, but a key discarded is a miss for the process
    let ro = &got["ro"];
    assert_eq!(ro["hit"], true, "{ro}");
    assert_eq!(ro["hit_after"], true, "{ro}");
    let warned = |field: &str, line: &str| {
        let w = ro[field].as_array().unwrap();
        assert!(
            w.len() == 1 && w[0].as_str().unwrap().contains(line),
            "{field}: {ro}"
        );
    };
    warned("publish_warning", "Failed to persist managed cache entry");
    warned("discard_warning", "Failed to remove managed cache entry");
    assert_eq!(ro["discarded_file_kept"], true, "{ro}");
    assert_eq!(ro["discarded_key_hits"], false, "{ro}");
    assert_eq!(ro["new_key_hits"], false, "{ro}");
    assert_eq!(
        findings(root),
        Vec::<String>::new(),
        "the read-only tries wrote nothing"
    );

    // a byte of a tactic edited: no hash covers it (the signature's to catch)
    let (moe_key, moe) = entries.iter().next().unwrap();
    let moe = root.join(moe.as_str().unwrap());
    edit(&moe, "\"tactic\": [\n    16,", "\"tactic\": [\n    17,");
    assert_eq!(findings(root), Vec::<String>::new());

    // a byte of a key edited: that file is named
    edit(&moe, "7168", "7169");
    let stem = entry_stem(moe_key);
    let want = entry_stem(&moe_key.replacen("7168", "7169", 1));
    assert_eq!(
        findings(root),
        [format!(
            "v2/{env}/entries/{stem}.json: named {stem}, not the hash of its key ({want})"
        )]
    );

    // a byte of the manifest edited: its directory is named
    edit(&manifest_path, "H100", "H200");
    let found = findings(root);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found[0].starts_with(&format!(
            "v2/{env}/: named {env}, not the hash of its manifest.json ("
        )),
        "{found:?}"
    );
}
