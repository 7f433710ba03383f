//! keepwrap::unify against FlashInfer's own recipe run by python3
//! (tests/py/flashinfer_files.py): rank files written as `save_configs`
//! writes them, unified in Rust, compared byte for byte with the union the
//! same recipe writes; plus every reason to leave files alone.

use std::path::{Path, PathBuf};
use std::process::Command;

use keepwrap::unify::{
    generation, render, unify, Conflict, LeaveReason, Outcome, RankFile, RankId, Unified,
};
use serde_json::{json, Map, Value};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/flashinfer_files.py")
}

fn python(args: &[&std::ffi::OsStr]) -> Vec<u8> {
    let out = Command::new("python3")
        .arg(script())
        .args(args)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "python3 {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Rank files written by the Python recipe from `spec`, in `dir`.
fn gen(dir: &Path, spec: Value) -> Vec<RankFile> {
    std::fs::create_dir_all(dir).unwrap();
    let spec_path = dir.join("spec.json");
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    let files_dir = dir.join("files");
    python(&["gen".as_ref(), files_dir.as_os_str(), spec_path.as_os_str()]);
    read_dir(&files_dir)
}

fn read_dir(dir: &Path) -> Vec<RankFile> {
    let mut files: Vec<RankFile> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            RankFile {
                name: e.file_name().into_string().unwrap(),
                bytes: std::fs::read(e.path()).unwrap(),
            }
        })
        .collect();
    // Not rank order: unify must not depend on the order it is given.
    files.sort_by(|a, b| b.name.cmp(&a.name));
    files
}

/// The union the Python recipe writes for `files`.
fn python_union(dir: &Path, files: &[RankFile]) -> Vec<u8> {
    let in_dir = dir.join("union-in");
    std::fs::create_dir_all(&in_dir).unwrap();
    let mut args: Vec<std::ffi::OsString> = vec!["union".into(), dir.join("union.json").into()];
    for f in files {
        let p = in_dir.join(&f.name);
        std::fs::write(&p, &f.bytes).unwrap();
        args.push(p.into());
    }
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    python(&args);
    std::fs::read(dir.join("union.json")).unwrap()
}

/// Python's verdict on a file: `_generation` recomputed by `json.load` +
/// the recipe, key order, and `json.dumps(indent=2)` of the loaded object.
fn python_check(dir: &Path, bytes: &[u8]) {
    let p = dir.join("check.json");
    std::fs::write(&p, bytes).unwrap();
    let out = python(&["check".as_ref(), p.as_os_str()]);
    let verdict: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        verdict,
        json!([{"generation": true, "order": true, "bytes": true}])
    );
}

fn unified(files: &[RankFile]) -> Unified {
    match unify(files, keepwrap::engine::SGLANG) {
        Outcome::Unified(u) => u,
        Outcome::Leave(reason) => panic!("expected a union, got: {reason}"),
    }
}

fn left(files: &[RankFile]) -> LeaveReason {
    match unify(files, keepwrap::engine::SGLANG) {
        Outcome::Leave(reason) => reason,
        Outcome::Unified(u) => panic!(
            "expected files left alone, got a union of {} entries",
            u.entries
        ),
    }
}

fn count_entries(bytes: &[u8]) -> usize {
    let v: Map<String, Value> = serde_json::from_slice(bytes).unwrap();
    v.keys()
        .filter(|k| !matches!(k.as_str(), "_metadata" | "_generation"))
        .count()
}

fn file(name: &str, text: &str) -> RankFile {
    RankFile {
        name: name.into(),
        bytes: text.as_bytes().to_vec(),
    }
}

#[test]
fn union_of_python_files_is_byte_identical_to_python() {
    let dir = tempfile::tempdir().unwrap();
    let files = gen(
        dir.path(),
        json!({"seed": 7, "per_rank": 60, "shared": 25, "conflicts": 4, "fi07": true,
               "ranks": [[0,0,0],[1,0,0],[2,0,0],[3,0,0],[0,1,0],[1,1,0],[2,1,0],[3,1,0]]}),
    );
    let u = unified(&files);
    let expected = python_union(dir.path(), &files);
    assert_eq!(
        String::from_utf8(u.bytes.clone()).unwrap(),
        String::from_utf8(expected).unwrap()
    );
    python_check(dir.path(), &u.bytes);
    assert_eq!(u.entries, 8 * 60 + 25 + 4);
    assert_eq!(u.entries, count_entries(&u.bytes));
    assert!(!u.already_identical);
    assert_eq!(u.conflicts.len(), 4);
    for c in &u.conflicts {
        assert_eq!(c.kept, "rank_tp0_pp0_dp0.json");
        assert_eq!(
            c.differing,
            [
                "rank_tp0_pp1_dp0.json",
                "rank_tp1_pp0_dp0.json",
                "rank_tp1_pp1_dp0.json",
                "rank_tp2_pp0_dp0.json",
                "rank_tp2_pp1_dp0.json",
                "rank_tp3_pp0_dp0.json",
                "rank_tp3_pp1_dp0.json"
            ]
        );
    }
    // The union of unified files is itself, already identical.
    let again: Vec<RankFile> = files
        .iter()
        .map(|f| RankFile {
            name: f.name.clone(),
            bytes: u.bytes.clone(),
        })
        .collect();
    let v = unified(&again);
    assert!(v.already_identical);
    assert_eq!(v.bytes, u.bytes);
    assert!(v.conflicts.is_empty());
}

#[test]
fn awkward_keys_and_values_are_byte_identical_to_python() {
    let dir = tempfile::tempdir().unwrap();
    let files = gen(
        dir.path(),
        json!({"seed": 3, "per_rank": 5, "shared": 3, "tricky": true, "fi07": false,
               "ranks": [[0,0,0],[1,0,0],[0,0,1]],
               "metadata": {"gpu": "NVIDIA caf\u{e9} \u{10FFFF}\u{e9} \u{10FFFF}\u{80}",
                            "n": 1.0, "big": 12345678901234567890u64, "list": [1e-05, 0.1],
                            "z": {"b": 1, "a": 2}}}),
    );
    let u = unified(&files);
    let expected = python_union(dir.path(), &files);
    assert_eq!(
        String::from_utf8(u.bytes.clone()).unwrap(),
        String::from_utf8(expected).unwrap()
    );
    python_check(dir.path(), &u.bytes);
    // Half the awkward keys hold a different value on each rank.
    assert_eq!(u.conflicts.len(), 6);
    let text = String::from_utf8(u.bytes.clone()).unwrap();
    for needle in [
        r#""max \udbff\udfff\u00e9 then \udbff\udfff\udbff\udfff\udbff\udfff end""#,
        r#""\udbff\udfff\u0080""#,
        "12345678901234567890",
        "1e-05",
        "0.1",
        "-0.0",
        "1e+16",
        "5e-324",
    ] {
        assert!(text.contains(needle), "{needle} missing");
    }
}

#[test]
fn generation_of_python_files_matches_theirs() {
    let dir = tempfile::tempdir().unwrap();
    let files = gen(
        dir.path(),
        json!({"seed": 5, "per_rank": 4, "shared": 2, "tricky": true,
               "ranks": [[0,0,0],[1,0,0]]}),
    );
    for f in &files {
        let obj: Map<String, Value> = serde_json::from_slice(&f.bytes).unwrap();
        assert_eq!(
            Value::String(generation(&obj)),
            obj["_generation"],
            "{}",
            f.name
        );
        // And render() of the parsed file writes the file back.
        let entries = obj
            .iter()
            .filter(|(k, _)| !k.starts_with("_metadata") && k.as_str() != "_generation");
        let back = render(obj.get("_metadata"), entries.map(|(k, v)| (k.as_str(), v)));
        assert_eq!(back, f.bytes, "{}", f.name);
    }
}

#[test]
fn render_sorts_entries_and_keeps_the_first_of_a_key() {
    let (a, b, c) = (json!(["A", 1]), json!(["B", 2]), json!(["C", 3]));
    let meta = json!({"gpu": "x"});
    let sorted = render(Some(&meta), [("a", &a), ("b", &b), ("\u{e9}", &c)]);
    let shuffled = render(
        Some(&meta),
        [("\u{e9}", &c), ("b", &b), ("a", &a), ("b", &c)],
    );
    assert_eq!(sorted, shuffled);
    let text = String::from_utf8(render(None, [])).unwrap();
    assert_eq!(
        text,
        // sha256 of "{}"
        "{\n  \"_generation\": \"44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a\"\n}"
    );
}

#[test]
fn lowest_rank_wins_tp_then_pp_then_dp() {
    let dir = tempfile::tempdir().unwrap();
    let all = gen(
        dir.path(),
        json!({"seed": 11, "per_rank": 3, "conflicts": 2,
               "ranks": [[10,0,0],[2,0,0],[1,0,0],[0,1,0],[0,0,1],[0,1,1]]}),
    );
    let pick = |names: &[&str]| -> Vec<RankFile> {
        all.iter()
            .filter(|f| names.contains(&f.name.as_str()))
            .cloned()
            .collect()
    };
    for (names, winner) in [
        (
            &[
                "rank_tp10_pp0_dp0.json",
                "rank_tp2_pp0_dp0.json",
                "rank_tp1_pp0_dp0.json",
                "rank_tp0_pp1_dp0.json",
                "rank_tp0_pp0_dp1.json",
                "rank_tp0_pp1_dp1.json",
            ][..],
            "rank_tp0_pp0_dp1.json",
        ),
        (
            &[
                "rank_tp1_pp0_dp0.json",
                "rank_tp0_pp1_dp1.json",
                "rank_tp0_pp1_dp0.json",
            ][..],
            "rank_tp0_pp1_dp0.json",
        ),
        (
            &["rank_tp1_pp0_dp0.json", "rank_tp0_pp1_dp1.json"][..],
            "rank_tp0_pp1_dp1.json",
        ),
        (
            &["rank_tp10_pp0_dp0.json", "rank_tp2_pp0_dp0.json"][..],
            "rank_tp2_pp0_dp0.json",
        ),
    ] {
        let files = pick(names);
        assert_eq!(files.len(), names.len());
        let u = unified(&files);
        let sub = dir.path().join(winner);
        std::fs::create_dir_all(&sub).unwrap();
        assert_eq!(u.bytes, python_union(&sub, &files), "{names:?}");
        assert_eq!(u.conflicts.len(), 2, "{names:?}");
        for c in &u.conflicts {
            assert_eq!(c.kept, winner);
            assert_eq!(c.differing.len(), names.len() - 1);
            assert!(!c.differing.contains(&winner.to_string()));
        }
        // The kept value is the winner's: ["CutlassFp4GemmRunner", [tp, pp, dp], n].
        let out: Map<String, Value> = serde_json::from_slice(&u.bytes).unwrap();
        let rank = keepwrap::engine::SGLANG.rank_of(winner).unwrap();
        assert_eq!(
            out[&u.conflicts[0].key][1],
            json!([rank.tp, rank.pp, rank.dp])
        );
        assert_eq!(u.entries, 3 * names.len() + 2);
    }
}

#[test]
fn conflict_display() {
    let c = Conflict {
        key: "('op', 'R', ((8, 7168),), ())".into(),
        kept: "rank_tp0_pp0_dp0.json".into(),
        differing: vec![
            "rank_tp1_pp0_dp0.json".into(),
            "rank_tp2_pp0_dp0.json".into(),
        ],
    };
    assert_eq!(
        c.to_string(),
        "entry ('op', 'R', ((8, 7168),), ()) differs between rank files: kept \
         rank_tp0_pp0_dp0.json's value over rank_tp1_pp0_dp0.json, rank_tp2_pp0_dp0.json"
    );
}

#[test]
fn identical_inputs_are_already_identical() {
    let dir = tempfile::tempdir().unwrap();
    // No per-rank entries: every rank file is the same file.
    let files = gen(
        dir.path(),
        json!({"seed": 2, "shared": 40, "tricky": false,
               "ranks": [[0,0,0],[1,0,0],[2,0,0],[3,0,0]]}),
    );
    assert!(files.windows(2).all(|w| w[0].bytes == w[1].bytes));
    let u = unified(&files);
    assert!(u.already_identical);
    assert_eq!(u.bytes, files[0].bytes);
    assert_eq!(u.entries, 40);
    assert!(u.conflicts.is_empty());
}

#[test]
fn input_generation_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let files = gen(
        dir.path(),
        json!({"seed": 4, "shared": 5, "ranks": [[0,0,0],[1,0,0]]}),
    );
    // Same bytes everywhere but a stale _generation: not identical, and the
    // union is the recipe's file.
    let stale: Vec<RankFile> = files
        .iter()
        .map(|f| {
            let mut obj: Map<String, Value> = serde_json::from_slice(&f.bytes).unwrap();
            obj.insert("_generation".into(), json!("0".repeat(64)));
            RankFile {
                name: f.name.clone(),
                bytes: serde_json::to_vec_pretty(&obj).unwrap(),
            }
        })
        .collect();
    let u = unified(&stale);
    assert!(!u.already_identical);
    assert_eq!(u.bytes, files[0].bytes);
    // Without any _generation at all: the same.
    let none: Vec<RankFile> = files
        .iter()
        .map(|f| {
            let mut obj: Map<String, Value> = serde_json::from_slice(&f.bytes).unwrap();
            obj.shift_remove("_generation");
            RankFile {
                name: f.name.clone(),
                bytes: serde_json::to_vec(&obj).unwrap(),
            }
        })
        .collect();
    assert_eq!(unified(&none).bytes, files[0].bytes);
}

#[test]
fn differing_metadata_is_left() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = gen(
        dir.path(),
        json!({"seed": 1, "per_rank": 2, "ranks": [[0,0,0],[1,0,0],[3,0,0]]}),
    );
    let other = gen(
        &dir.path().join("other"),
        json!({"seed": 1, "per_rank": 2, "ranks": [[2,0,0]],
               "metadata": {"flashinfer_version": "0.7.1"}}),
    );
    files.extend(other);
    let reason = left(&files);
    assert_eq!(
        reason,
        LeaveReason::MetadataDiffer {
            first: "rank_tp0_pp0_dp0.json".into(),
            other: "rank_tp2_pp0_dp0.json".into()
        }
    );
    assert_eq!(
        reason.to_string(),
        "left as they are: their _metadata differ (rank_tp0_pp0_dp0.json vs rank_tp2_pp0_dp0.json)"
    );
}

#[test]
fn metadata_absent_in_one_file_is_left_absent_in_all_is_fine() {
    let with = r#"{"_metadata": {"gpu": "x"}, "a": [1]}"#;
    let without = r#"{"b": [2]}"#;
    let reason = left(&[
        file("rank_tp1_pp0_dp0.json", without),
        file("rank_tp0_pp0_dp0.json", with),
    ]);
    assert_eq!(
        reason.to_string(),
        "left as they are: their _metadata differ (rank_tp0_pp0_dp0.json vs rank_tp1_pp0_dp0.json)"
    );
    let reason = left(&[
        file("rank_tp0_pp0_dp0.json", without),
        file("rank_tp1_pp0_dp0.json", r#"{"_metadata": null, "b": [2]}"#),
    ]);
    assert!(matches!(reason, LeaveReason::MetadataDiffer { .. }));

    let dir = tempfile::tempdir().unwrap();
    let files = gen(
        dir.path(),
        json!({"seed": 9, "per_rank": 3, "shared": 1, "metadata": null,
               "ranks": [[0,0,0],[1,0,0]]}),
    );
    let u = unified(&files);
    assert_eq!(u.bytes, python_union(dir.path(), &files));
    assert!(!String::from_utf8_lossy(&u.bytes).contains("_metadata"));
    python_check(dir.path(), &u.bytes);
}

#[test]
fn metadata_equal_as_values_in_another_key_order_unifies() {
    let u = unified(&[
        file(
            "rank_tp0_pp0_dp0.json",
            r#"{"_metadata": {"gpu": "x", "cuda_version": "13.0"}, "a": [1]}"#,
        ),
        file(
            "rank_tp1_pp0_dp0.json",
            r#"{"_metadata": {"cuda_version": "13.0", "gpu": "x"}, "b": [2]}"#,
        ),
    ]);
    // The lowest rank's _metadata, in its order.
    assert!(String::from_utf8(u.bytes)
        .unwrap()
        .starts_with("{\n  \"_metadata\": {\n    \"gpu\": \"x\",\n    \"cuda_version\": \"13.0\"\n  },\n  \"a\": [\n    1\n  ],\n  \"b\": ["));
}

#[test]
fn records_file_is_left() {
    let plain = r#"{"_metadata": {"gpu": "x"}, "a": [1]}"#;
    let records = r#"{"_metadata": {"gpu": "x"}, "_records": {"writer_rank": 1}, "b": [2]}"#;
    let reason = left(&[
        file("rank_tp0_pp0_dp0.json", plain),
        file("rank_tp1_pp0_dp0_gpuGPU-1234.json", records),
    ]);
    assert_eq!(
        reason,
        LeaveReason::HasRecords {
            name: "rank_tp1_pp0_dp0_gpuGPU-1234.json".into()
        }
    );
    assert_eq!(
        reason.to_string(),
        "left as they are: rank_tp1_pp0_dp0_gpuGPU-1234.json has _records (a single-writer file)"
    );
}

#[test]
fn fewer_than_two_rank_files_are_left() {
    let plain = r#"{"_metadata": {"gpu": "x"}, "a": [1]}"#;
    let reason = left(&[file("rank_tp0_pp0_dp0.json", plain)]);
    assert_eq!(
        reason.to_string(),
        "left as they are: only one rank file (rank_tp0_pp0_dp0.json)"
    );
    assert_eq!(left(&[]).to_string(), "left as they are: no rank file");
}

#[test]
fn unreadable_files_are_left() {
    let plain = r#"{"_metadata": {"gpu": "x"}, "a": [1]}"#;
    let reason = left(&[
        file("rank_tp0_pp0_dp0.json", plain),
        file(
            "rank_tp1_pp0_dp0.json",
            r#"{"_metadata": {"gpu": "x"}, "a": ["#,
        ),
    ]);
    let LeaveReason::NotJson { name, .. } = &reason else {
        panic!("{reason:?}")
    };
    assert_eq!(name, "rank_tp1_pp0_dp0.json");
    assert!(reason
        .to_string()
        .starts_with("left as they are: rank_tp1_pp0_dp0.json is not valid JSON ("));

    // Python writes NaN/Infinity (allow_nan), which JSON (and serde_json)
    // does not have: such a file is left alone.
    let reason = left(&[
        file("rank_tp0_pp0_dp0.json", plain),
        file(
            "rank_tp1_pp0_dp0.json",
            r#"{"_metadata": {"gpu": "x"}, "a": [NaN]}"#,
        ),
    ]);
    assert!(
        matches!(reason, LeaveReason::NotJson { ref name, .. } if name == "rank_tp1_pp0_dp0.json")
    );

    let reason = left(&[
        file("rank_tp0_pp0_dp0.json", "[1, 2]"),
        file("rank_tp1_pp0_dp0.json", plain),
    ]);
    assert_eq!(
        reason.to_string(),
        "left as they are: rank_tp0_pp0_dp0.json is not a JSON object"
    );
}

#[test]
fn non_rank_file_names_are_left() {
    let plain = r#"{"a": [1]}"#;
    let reason = left(&[
        file("rank_tp0_pp0_dp0.json", plain),
        file("rank_tp1_pp0_dp0.launch", plain),
    ]);
    assert_eq!(
        reason.to_string(),
        "left as they are: rank_tp1_pp0_dp0.launch is not a rank file name (rank_tp<T>_pp<P>_dp<D>.json)"
    );
}

#[test]
fn rank_id_from_file_name() {
    let ok = |name: &str, tp, pp, dp| {
        assert_eq!(
            keepwrap::engine::SGLANG.rank_of(name),
            Some(RankId { tp, pp, dp }),
            "{name}"
        )
    };
    ok("rank_tp0_pp0_dp0.json", 0, 0, 0);
    ok("rank_tp12_pp3_dp7.json", 12, 3, 7);
    ok("rank_tp1_pp0_dp0_gpuGPU-5e1c2d3a-0000.json", 1, 0, 0);
    for bad in [
        "rank_tp0_pp0_dp0.json.tmp",
        ".autotuner_abc.tmp",
        "rank_tp0_pp0_dp0.launch",
        "rank_tp01_pp0_dp0.json",
        "rank_tp-1_pp0_dp0.json",
        "rank_tp_pp0_dp0.json",
        "rank_tp0_pp0.json",
        "rank_tp0_pp0_dp0_gpu.json",
        "rank_tp0_pp0_dp0_x.json",
        "rank_tp99999999999_pp0_dp0.json",
        "Rank_tp0_pp0_dp0.json",
    ] {
        assert_eq!(keepwrap::engine::SGLANG.rank_of(bad), None, "{bad}");
    }
    assert!(
        RankId {
            tp: 0,
            pp: 0,
            dp: 1
        } < RankId {
            tp: 0,
            pp: 1,
            dp: 0
        }
    );
    assert!(
        RankId {
            tp: 0,
            pp: 9,
            dp: 9
        } < RankId {
            tp: 1,
            pp: 0,
            dp: 0
        }
    );
}

#[test]
fn files_with_the_same_bytes_are_counted_in_conflicts() {
    let a = r#"{"_metadata": {"gpu": "x"}, "k": [1], "only_a": [0]}"#;
    let b = r#"{"_metadata": {"gpu": "x"}, "k": [2]}"#;
    let u = unified(&[
        file("rank_tp3_pp0_dp0.json", a),
        file("rank_tp2_pp0_dp0.json", b),
        file("rank_tp0_pp0_dp0.json", a),
        file("rank_tp1_pp0_dp0.json", b),
    ]);
    assert_eq!(
        u.conflicts,
        [Conflict {
            key: "k".into(),
            kept: "rank_tp0_pp0_dp0.json".into(),
            differing: vec![
                "rank_tp1_pp0_dp0.json".into(),
                "rank_tp2_pp0_dp0.json".into()
            ],
        }]
    );
    assert_eq!(u.entries, 2);
    assert!(!u.already_identical);
}
