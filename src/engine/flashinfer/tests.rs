//! The hashes and bytes against values Python's own `json` and `hashlib`
//! give for FlashInfer's recipes (docs/managed-store.md), and the check of
//! stores laid out by hand.

use super::*;
use std::fs;
use std::path::Path;

const H100: &str = r#"{"flashinfer_version":"0.7.4","cuda_version":"13.0","cublas_version":"13.1.0","cudnn_version":"91200","cudnn_frontend_version":"1.16.0","cutlass_dsl_version":"4.3.1","gpu":"NVIDIA H100 80GB HBM3","cache_schema":"v2"}"#;
const H100_ENV: &str = "902cc7a86c33e1b7";
const KEY: &str = "('flashinfer::caf\u{e9}', 'R\u{fc}nner', ((8, 7168),), ())";
const KEY_STEM: &str = "6b783c50263ab0c12481fc07";

#[test]
fn env16_is_pythons_hash_of_the_manifest() {
    assert_eq!(env16(H100.as_bytes()), Ok(H100_ENV.to_string()));
    // written as FlashInfer writes it, in another order: the same hash
    let v: Value = serde_json::from_str(H100).unwrap();
    assert_eq!(env16(&file_bytes(&v)), Ok(H100_ENV.to_string()));
    // non-ASCII escaped, a character beyond the BMP as its surrogate pair
    let other = H100
        .replace("NVIDIA H100 80GB HBM3", "NVIDIA GB200 \u{e9}\u{10FFFF}")
        .replace(
            "\"cache_schema\"",
            "\"measure_cold_l2\":\"True\",\"cache_schema\"",
        );
    assert_eq!(env16(other.as_bytes()), Ok("90d2b2db5089056b".to_string()));
}

#[test]
fn a_manifest_flashinfer_cannot_have_written_has_no_hash() {
    assert!(matches!(env16(b"{"), Err(Why::NotJson(_))));
    assert_eq!(env16(b"[]"), Err(Why::NotObject));
    assert_eq!(env16(br#"{"gpu":"x"}"#), Err(Why::NotSchema));
    assert_eq!(env16(br#"{"cache_schema":"v3"}"#), Err(Why::NotSchema));
    for n in ["1.50", "-0", "1e5", "1e400", "007"] {
        let m = format!(r#"{{"cache_schema":"v2","n":{n}}}"#);
        assert!(
            matches!(
                env16(m.as_bytes()),
                Err(Why::Number(_)) | Err(Why::NotJson(_))
            ),
            "{n}"
        );
    }
    // numbers Python writes back as they are keep their hash
    for n in ["1.5", "0", "-3", "100000.0", "1e+16", "true", "null"] {
        let m = format!(r#"{{"cache_schema":"v2","n":{n}}}"#);
        assert!(env16(m.as_bytes()).is_ok(), "{n}");
    }
}

#[test]
fn entry_stem_is_pythons_hash_of_the_key() {
    assert_eq!(entry_stem(KEY), KEY_STEM);
    let moe = "('flashinfer::trtllm_fp8_block_scale_moe', 'TrtllmFp8BlockScaleMoERunner', ((8, 7168), (8, 256)), (('torch.float8_e4m3fn',), True))";
    assert_eq!(entry_stem(moe), "cbd36b40057dca3825b232c6");
}

#[test]
fn file_bytes_are_json_dump_indent_2_sorted() {
    let entry = serde_json::json!({
        "tactic": [3, [1, 2]], "runner": "R\u{fc}nner", "key": KEY,
        "profiling_policy": ["median", 1],
    });
    let want = "{\n  \"key\": \"('flashinfer::caf\\u00e9', 'R\\u00fcnner', ((8, 7168),), ())\",\n  \"profiling_policy\": [\n    \"median\",\n    1\n  ],\n  \"runner\": \"R\\u00fcnner\",\n  \"tactic\": [\n    3,\n    [\n      1,\n      2\n    ]\n  ]\n}";
    assert_eq!(String::from_utf8(file_bytes(&entry)).unwrap(), want);
    assert_eq!(entry_key(want.as_bytes()), Ok(KEY.to_string()));
}

#[test]
fn an_entry_needs_what_flashinfers_lookup_reads() {
    assert_eq!(entry_key(b"[1]"), Err(Why::NotObject));
    assert_eq!(
        entry_key(br#"{"runner":"R","tactic":1}"#),
        Err(Why::Lacks("key"))
    );
    assert_eq!(
        entry_key(br#"{"key":"k","tactic":1}"#),
        Err(Why::Lacks("runner"))
    );
    assert_eq!(
        entry_key(br#"{"key":"k","runner":"R"}"#),
        Err(Why::Lacks("tactic"))
    );
    assert_eq!(
        entry_key(br#"{"key":["k"],"runner":"R","tactic":1}"#),
        Err(Why::KeyNotString)
    );
    assert!(matches!(entry_key(b"\xff"), Err(Why::NotJson(_))));
}

fn entry(key: &str) -> Vec<u8> {
    file_bytes(&serde_json::json!({"key": key, "runner": "R", "tactic": 7}))
}

/// A store of one environment with two entries, as FlashInfer lays it out.
fn store(root: &Path) -> std::path::PathBuf {
    let env = root.join("v2").join(H100_ENV);
    fs::create_dir_all(env.join("entries")).unwrap();
    let v: Value = serde_json::from_str(H100).unwrap();
    fs::write(env.join("manifest.json"), file_bytes(&v)).unwrap();
    for key in [KEY, "('op', 'R', ((1,),), ())"] {
        let name = format!("{}.json", entry_stem(key));
        fs::write(env.join("entries").join(name), entry(key)).unwrap();
    }
    env
}

fn lines(root: &Path) -> Vec<String> {
    check(root)
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn a_store_as_flashinfer_writes_it_is_clean() {
    let t = tempfile::tempdir().unwrap();
    assert_eq!(lines(t.path()), Vec::<String>::new(), "no v2/ at all");
    let env = store(t.path());
    // keepwrap's own files are the cache's to judge
    fs::write(env.join(format!("entries/{KEY_STEM}.launch")), "x").unwrap();
    fs::write(env.join("entries/.keepwrap-1.tmp"), "x").unwrap();
    assert_eq!(lines(t.path()), Vec::<String>::new());
}

#[test]
fn each_file_that_cannot_be_trusted_is_named_with_why() {
    let t = tempfile::tempdir().unwrap();
    let env = store(t.path());
    let e = |s: &str| env.join("entries").join(s);
    let p = format!("v2/{H100_ENV}");
    // an entry whose key was edited
    fs::write(
        e(&format!("{KEY_STEM}.json")),
        entry("('op2', 'R', (), ())"),
    )
    .unwrap();
    // an entry planted under another name, a list, one without a key
    let other = "0123456789abcdef01234567";
    fs::write(e(&format!("{other}.json")), entry(KEY)).unwrap();
    fs::write(e("aaaaaaaaaaaaaaaaaaaaaaaa.json"), "[]").unwrap();
    fs::write(
        e("bbbbbbbbbbbbbbbbbbbbbbbb.json"),
        r#"{"runner":1,"tactic":2}"#,
    )
    .unwrap();
    // a symlink to a good entry, a stray file, a directory, a temp file
    std::os::unix::fs::symlink(
        e(&format!("{}.json", entry_stem("('op', 'R', ((1,),), ())"))),
        e("cccccccccccccccccccccccc.json"),
    )
    .unwrap();
    fs::write(e("notes.txt"), "x").unwrap();
    fs::create_dir(e("dddddddddddddddddddddddd.json")).unwrap();
    fs::write(e(".autotune_k2j_9x0a.tmp"), "{").unwrap();
    // an environment whose manifest was edited, one with none, a stray
    let bad = t.path().join("v2/0000000000000000");
    fs::create_dir_all(&bad).unwrap();
    fs::write(bad.join("manifest.json"), H100).unwrap();
    fs::create_dir_all(t.path().join("v2/1111111111111111/entries")).unwrap();
    fs::create_dir_all(t.path().join("v2/other")).unwrap();
    fs::write(t.path().join("v2/README"), "x").unwrap();
    fs::write(env.join(".autotune_m.tmp"), "x").unwrap();
    assert_eq!(
        lines(t.path()),
        [
            format!("v2/0000000000000000/: named 0000000000000000, not the hash of its manifest.json ({H100_ENV})"),
            "v2/1111111111111111/: has no manifest.json: the environment it is for cannot be told".to_string(),
            format!("{p}/.autotune_m.tmp: a temp file FlashInfer left, never read by it"),
            format!("{p}/entries/.autotune_k2j_9x0a.tmp: a temp file FlashInfer left, never read by it"),
            format!("{p}/entries/0123456789abcdef01234567.json: named 0123456789abcdef01234567, not the hash of its key ({KEY_STEM})"),
            format!("{p}/entries/{KEY_STEM}.json: named {KEY_STEM}, not the hash of its key ({})", entry_stem("('op2', 'R', (), ())")),
            format!("{p}/entries/aaaaaaaaaaaaaaaaaaaaaaaa.json: not a JSON object"),
            format!("{p}/entries/bbbbbbbbbbbbbbbbbbbbbbbb.json: has no \"key\""),
            format!("{p}/entries/cccccccccccccccccccccccc.json: a symlink, not a regular file"),
            format!("{p}/entries/dddddddddddddddddddddddd.json: not a file of FlashInfer's managed store"),
            format!("{p}/entries/notes.txt: not a file of FlashInfer's managed store"),
            "v2/README: not a file of FlashInfer's managed store".to_string(),
            "v2/other/: not a file of FlashInfer's managed store".to_string(),
        ]
    );
}

#[test]
fn symlinks_in_place_of_the_trees_directories_are_not_followed() {
    let t = tempfile::tempdir().unwrap();
    let env = store(t.path());
    let real = t.path().join("real");
    fs::rename(env.join("entries"), &real).unwrap();
    std::os::unix::fs::symlink(&real, env.join("entries")).unwrap();
    let p = format!("v2/{H100_ENV}");
    assert_eq!(
        lines(t.path()),
        [format!("{p}/entries: a symlink, not a directory")]
    );
    fs::remove_file(env.join("entries")).unwrap();
    fs::rename(&real, env.join("entries")).unwrap();
    fs::rename(env.join("manifest.json"), t.path().join("m")).unwrap();
    std::os::unix::fs::symlink(t.path().join("m"), env.join("manifest.json")).unwrap();
    assert_eq!(
        lines(t.path()),
        [format!("{p}/manifest.json: a symlink, not a regular file")]
    );
    let u = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(t.path().join("v2"), u.path().join("v2")).unwrap();
    assert_eq!(lines(u.path()), ["v2: a symlink, not a directory"]);
}
