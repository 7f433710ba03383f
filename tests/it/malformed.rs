//! Malformed inputs: rank files and sidecars that are truncated, garbage,
//! huge, deeply nested, of the wrong types, empty, not regular files, of a
//! future format, unreadable. Each is planted under a fresh root (with a
//! sidecar forged for this very launch when the rank file itself is the
//! input, so the bytes are what is judged), or written by the "engine"
//! during the launch. Every one gets one log line naming the file and why,
//! none is trusted, the launch goes on with its own exit status, and
//! keepwrap never panics.

use crate::common;
use crate::harden;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::*;
use harden::*;
use serde_json::{json, Value};

const DIR: &str = "0.7.2/sm121/0123456789abcdef";
const RANK0: &str = "0.7.2/sm121/0123456789abcdef/rank_tp0_pp0_dp0.json";
const GOOD: &[u8] = b"{\n  \"_metadata\": {\"v\": \"1\"},\n  \"k\": [\"R\", 1]\n}";

/// The launch every case runs: `sh -c 'exit 0'`.
const ARGV: [&str; 3] = ["sh", "-c", "exit 0"];

/// RANK0 holding `bytes`, with a sidecar signing exactly those bytes for
/// this launch.
fn forged(root: &Path, fp: &str, bytes: &[u8]) {
    put(root, RANK0, bytes);
    let sc = forged_sidecar(fp, RANK0, bytes);
    put(
        root,
        &sidecar_rel(RANK0),
        &serde_json::to_vec_pretty(&sc).unwrap(),
    );
    put_manifest(root, &forged_manifest(fp, RANK0, bytes));
}

/// RANK0 holding good bytes, beside a sidecar `mutate` made from a valid
/// one.
fn sidecar_json(root: &Path, fp: &str, mutate: impl Fn(&mut Value)) {
    put(root, RANK0, GOOD);
    let mut sc = forged_sidecar(fp, RANK0, GOOD);
    mutate(&mut sc);
    put(
        root,
        &sidecar_rel(RANK0),
        &serde_json::to_vec_pretty(&sc).unwrap(),
    );
    put_manifest(root, &forged_manifest(fp, RANK0, GOOD));
}

/// RANK0 holding good bytes and a valid sidecar, its set's manifest
/// `mutate` made from a valid one.
fn manifest_json(root: &Path, fp: &str, mutate: impl Fn(&mut Value)) {
    sidecar_json(root, fp, |_| {});
    let mut m = forged_manifest(fp, RANK0, GOOD);
    mutate(&mut m);
    m["fingerprint"] = json!(fp);
    put_manifest(root, &m);
}

/// RANK0 holding good bytes, beside a sidecar of these bytes.
fn sidecar_bytes(root: &Path, bytes: &[u8]) {
    put(root, RANK0, GOOD);
    put(root, &sidecar_rel(RANK0), bytes);
}

fn garbage(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.next() as u8).collect()
}

fn sparse(root: &Path, rel: &str, len: u64) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::File::create(&p).unwrap().set_len(len).unwrap();
}

type Plant = Box<dyn Fn(&Path, &str)>;

/// A planted input: what to plant, which file the log line names, what it
/// says, and whether the file stays (a directory is never removed).
struct Case {
    name: &'static str,
    plant: Plant,
    names: String,
    says: &'static str,
    stays: bool,
}

fn case(name: &'static str, says: &'static str, plant: impl Fn(&Path, &str) + 'static) -> Case {
    Case {
        name,
        plant: Box::new(plant),
        names: RANK0.to_string(),
        says,
        stays: false,
    }
}

fn bytes_case(name: &'static str, says: &'static str, bytes: Vec<u8>) -> Case {
    case(name, says, move |root, fp| forged(root, fp, &bytes))
}

fn sidecar_case(name: &'static str, says: &'static str, mutate: fn(&mut Value)) -> Case {
    case(name, says, move |root, fp| sidecar_json(root, fp, mutate))
}

fn manifest_case(name: &'static str, says: &'static str, mutate: fn(&mut Value)) -> Case {
    case(name, says, move |root, fp| manifest_json(root, fp, mutate))
}

fn cases() -> Vec<Case> {
    let deep_array = [
        b"{\"k\": ".as_slice(),
        &[b'['; 100_000],
        &[b']'; 100_000],
        b"}",
    ]
    .concat();
    let deep_object = {
        let mut v = b"{\"k\": ".to_vec();
        for _ in 0..20_000 {
            v.extend_from_slice(b"{\"a\": ");
        }
        v.push(b'1');
        v.extend(std::iter::repeat_n(b'}', 20_001));
        v
    };
    let half = {
        let mut sc = forged_sidecar("x", RANK0, GOOD);
        sc["x"] = json!(0);
        let b = serde_json::to_vec(&sc).unwrap();
        b[..b.len() / 2].to_vec()
    };
    let deep_sidecar = [
        b"{\"format\": 2, \"x\": ".as_slice(),
        &[b'['; 100_000],
        &[b']'; 100_000],
        b"}",
    ]
    .concat();
    vec![
        // The rank file's bytes, signed for this launch: judged as JSON.
        bytes_case(
            "truncated JSON",
            "not valid JSON (",
            b"{\"k\": [\"R\", 1".to_vec(),
        ),
        bytes_case("binary garbage", "not valid JSON (", garbage(4096, 7)),
        bytes_case("empty file", "not valid JSON (", Vec::new()),
        bytes_case("whitespace only", "not valid JSON (", b" \n\t ".to_vec()),
        bytes_case(
            "an array",
            "not a JSON object (an array)",
            b"[1, 2]".to_vec(),
        ),
        bytes_case(
            "a string",
            "not a JSON object (a string)",
            b"\"{}\"".to_vec(),
        ),
        bytes_case("a number", "not a JSON object (a number)", b"42".to_vec()),
        bytes_case("null", "not a JSON object (null)", b"null".to_vec()),
        bytes_case(
            "a boolean",
            "not a JSON object (a boolean)",
            b"true".to_vec(),
        ),
        bytes_case(
            "deeply nested arrays",
            "not valid JSON (recursion limit",
            deep_array,
        ),
        bytes_case(
            "deeply nested objects",
            "not valid JSON (recursion limit",
            deep_object,
        ),
        bytes_case(
            "two objects",
            "not valid JSON (trailing characters",
            b"{} {}".to_vec(),
        ),
        bytes_case(
            "invalid UTF-8 in a string",
            "not valid JSON (",
            b"{\"k\": \"\xff\xfe\"}".to_vec(),
        ),
        bytes_case(
            "a UTF-8 BOM",
            "not valid JSON (",
            b"\xef\xbb\xbf{}".to_vec(),
        ),
        bytes_case(
            "lowercase nan",
            "not valid JSON (",
            b"{\"k\": nan}".to_vec(),
        ),
        bytes_case(
            "_metadata a number",
            "not a FlashInfer cache file (_metadata is a number, not an object)",
            b"{\"_metadata\": 5, \"k\": [\"R\", 1]}".to_vec(),
        ),
        bytes_case(
            "_metadata an array",
            "not a FlashInfer cache file (_metadata is an array, not an object)",
            b"{\"_metadata\": [\"0.7.2\"], \"k\": [\"R\", 1]}".to_vec(),
        ),
        bytes_case(
            "_records a string",
            "not a FlashInfer cache file (_records is a string, not an object)",
            b"{\"_records\": \"x\", \"k\": [\"R\", 1]}".to_vec(),
        ),
        bytes_case(
            "_generation an object",
            "not a FlashInfer cache file (_generation is an object, not a string)",
            b"{\"k\": [\"R\", 1], \"_generation\": {}}".to_vec(),
        ),
        case(
            "a 100 MB file",
            "changed after signing (size 104857600 != signed",
            |root, fp| {
                forged(root, fp, GOOD);
                sparse(root, RANK0, 100 << 20);
            },
        ),
        case(
            "a 300 MB file",
            "unreadable (314572800 bytes, more than",
            |root, fp| {
                forged(root, fp, GOOD);
                sparse(root, RANK0, 300 << 20);
            },
        ),
        // The sidecar.
        case(
            "a sidecar of garbage",
            "sidecar is not valid (",
            |root, _| sidecar_bytes(root, &garbage(600, 9)),
        ),
        case("an empty sidecar", "sidecar is not valid (", |root, _| {
            sidecar_bytes(root, b"")
        }),
        case(
            "a truncated sidecar",
            "sidecar is not valid (",
            move |root, _| sidecar_bytes(root, &half),
        ),
        case(
            "a deeply nested sidecar",
            "sidecar is not valid (",
            move |root, _| sidecar_bytes(root, &deep_sidecar),
        ),
        case(
            "a 100 MB sidecar",
            "sidecar unreadable (104857600 bytes, more than",
            |root, _| {
                put(root, RANK0, GOOD);
                sparse(root, &sidecar_rel(RANK0), 100 << 20);
            },
        ),
        sidecar_case(
            "a sidecar of a future format",
            "sidecar format 99 is newer than this keepwrap's (3)",
            |sc| sc["format"] = json!(99),
        ),
        sidecar_case("format 0", "sidecar is not valid (format 0)", |sc| {
            sc["format"] = json!(0)
        }),
        sidecar_case(
            "format a string",
            "sidecar is not valid (invalid type",
            |sc| sc["format"] = json!("1"),
        ),
        sidecar_case(
            "format negative",
            "sidecar is not valid (invalid value",
            |sc| sc["format"] = json!(-1),
        ),
        sidecar_case(
            "fingerprint a number",
            "sidecar is not valid (invalid type",
            |sc| sc["fingerprint"] = json!(7),
        ),
        sidecar_case(
            "no fingerprint",
            "sidecar is not valid (no fingerprint)",
            |sc| {
                sc.as_object_mut().unwrap().remove("fingerprint");
            },
        ),
        sidecar_case(
            "size a string",
            "sidecar is not valid (invalid type",
            |sc| sc["size"] = json!("47"),
        ),
        manifest_case(
            "members an object",
            "set incomplete (set manifest not valid (invalid type",
            |m| m["members"] = json!({}),
        ),
        sidecar_case(
            "stat a string",
            "sidecar is not valid (invalid type",
            |sc| sc["stat"] = json!("1"),
        ),
        manifest_case(
            "a member sha256 not hex",
            "set incomplete (set manifest not valid (member",
            |m| m["members"][0]["sha256"] = json!("ZZ"),
        ),
        manifest_case(
            "a member path escaping the root",
            "is not a cache file path",
            |m| {
                m["members"].as_array_mut().unwrap().insert(
                    0,
                    json!({"path": "../../etc/x.json", "sha256": "0".repeat(64), "size": 1}),
                );
            },
        ),
        manifest_case(
            "a wrong set id",
            "set incomplete (set manifest not valid (id does not match its members))",
            |m| m["id"] = json!("0".repeat(64)),
        ),
        manifest_case(
            "a manifest recording other bytes for the file",
            "set incomplete (set manifest records other bytes for this file)",
            |m| {
                let fp = m["fingerprint"].as_str().unwrap_or("").to_string();
                let size = m["members"][0]["size"].as_u64().unwrap_or(0);
                m["members"][0]["sha256"] = json!("0".repeat(64));
                m["id"] = json!(set_id(&fp, &[(RANK0.to_string(), "0".repeat(64), size)]));
            },
        ),
        case(
            "no set manifest",
            "set incomplete (set manifest missing)",
            |root, fp| {
                sidecar_json(root, fp, |_| {});
                std::fs::remove_file(root.join(format!(".keepwrap/sets/{fp}.json"))).unwrap();
            },
        ),
        manifest_case(
            "a manifest of a future format",
            "set incomplete (set manifest not valid (format 3))",
            |m| m["format"] = json!(3),
        ),
        sidecar_case(
            "signed for another file",
            "sidecar is not valid (signed for another file",
            |sc| sc["path"] = json!("0.7.2/sm121/0123456789abcdef/rank_tp1_pp0_dp0.json"),
        ),
        case(
            "a sidecar that is a FIFO",
            "sidecar unreadable (a FIFO)",
            |root, _| {
                put(root, RANK0, GOOD);
                mkfifo(&root.join(sidecar_rel(RANK0)));
            },
        ),
        case(
            "a sidecar that is a directory",
            "sidecar unreadable (a directory)",
            |root, _| {
                put(root, RANK0, GOOD);
                std::fs::create_dir_all(root.join(sidecar_rel(RANK0))).unwrap();
            },
        ),
        // Not regular files.
        case(
            "a FIFO named *.json",
            "not a regular file (FIFO)",
            |root, _| mkfifo(&root.join(RANK0)),
        ),
        case(
            "a symlink named *.json",
            "not a regular file (symlink)",
            |root, _| {
                std::fs::create_dir_all(root.join(DIR)).unwrap();
                std::os::unix::fs::symlink("/dev/zero", root.join(RANK0)).unwrap();
            },
        ),
        Case {
            stays: true,
            ..case(
                "a directory named *.json",
                "a directory named *.json, which keepwrap does not remove",
                |root, _| std::fs::create_dir_all(root.join(RANK0).join("x")).unwrap(),
            )
        },
        case(
            "an unsigned 100 MB file",
            "no sidecar (unsigned)",
            |root, _| sparse(root, RANK0, 100 << 20),
        ),
    ]
}

/// Prune's lines of one file at debug level.
const PRUNE_LINES: [&str; 4] = ["kept", "stored", "removed", "removed_leftover"];

fn run(root: &Path) -> Finished {
    boot_debug(keepwrap(root).args(["--done", "exit", "--"]).args(ARGV))
}

#[test]
fn every_planted_malformed_input_gets_one_line_and_is_not_trusted() {
    let fp = fingerprint_of(&ARGV);
    let cases = cases();
    assert!(cases.len() >= 30);
    for c in cases {
        let t = scratch();
        let root = t.path().join("root");
        std::fs::create_dir(&root).unwrap();
        (c.plant)(&root, &fp);
        let t0 = std::time::Instant::now();
        let b = run(&root);
        eprintln!("{}: {:?}", c.name, t0.elapsed());
        let what = c.name;
        assert_eq!(b.code, 0, "{what}: the launch goes on: {}", b.stderr);
        assert_no_panic(&b.stderr, what);
        // The line: a warning at the default level, or prune's line of
        // the file (at debug level, the summary counting it at info).
        let naming: Vec<serde_json::Value> = b
            .log_events()
            .into_iter()
            .filter(|e| e["path"] == c.names.as_str())
            .filter(|e| e["level"] != "DEBUG" || PRUNE_LINES.contains(&e["code"].as_str().unwrap()))
            .collect();
        assert_eq!(
            naming.len(),
            1,
            "{what}: one event names the file: {}",
            b.stderr
        );
        assert!(
            naming[0]["reason"]
                .as_str()
                .is_some_and(|r| r.contains(c.says)),
            "{what}: {}",
            naming[0]
        );
        assert!(
            b.logged_with("pruned", json!({"kept": 0})),
            "{what}: {}",
            b.stderr
        );
        let left = std::fs::symlink_metadata(root.join(&c.names)).is_ok();
        assert_eq!(left, c.stays, "{what}: removed unless a directory");
        assert!(whole_sets(&root).is_empty(), "{what}: nothing trusted");
    }
}

/// Files the "engine" writes while it runs, beside a good rank file: each
/// is logged as it lands, is not signed, and keeps its good sibling from
/// being signed alone (a partial hit next boot).
#[test]
fn malformed_files_the_engine_writes_are_not_signed_nor_their_siblings() {
    let cases: [(&str, &str, &str); 6] = [
        (
            "garbage",
            // A first byte no JSON text starts with: random bytes that
            // happen to open with a digit read as a number first.
            "{ printf '\\001'; head -c 2999 /dev/urandom; } > \"$f\"",
            "not valid JSON (",
        ),
        (
            "truncated",
            "printf '{\"k\": [1' > \"$f\"",
            "not valid JSON (",
        ),
        (
            "an array",
            "printf '[]' > \"$f\"",
            "not a JSON object (an array)",
        ),
        (
            "_metadata a string",
            "printf '{\"_metadata\": \"0.7\"}' > \"$f\"",
            "not a FlashInfer cache file (_metadata is a string, not an object)",
        ),
        ("a FIFO", "mkfifo \"$f\"", "not a regular file (FIFO)"),
        (
            "a 300 MB file",
            "truncate -s 300M \"$f\"",
            "cannot read it (314572800 bytes, more than",
        ),
    ];
    for (what, write, says) in cases {
        let t = scratch();
        let root = t.path().join("root");
        let script = format!(
            "d=root/{DIR}; mkdir -p $d; printf '{{\"k\": [\"R\", 0]}}' > $d/rank_tp0_pp0_dp0.json; f=$d/rank_tp1_pp0_dp0.json; {write}"
        );
        let b = boot(
            keepwrap(&root)
                .current_dir(t.path())
                .args(["--done", "exit", "--", "sh", "-c", &script]),
        );
        assert_eq!(b.code, 0, "{what}: {}", b.stderr);
        assert_no_panic(&b.stderr, what);
        assert!(
            ["not_signed", "not_signed_unsafe"]
                .iter()
                .any(|n| b.events_named(n).iter().any(|e| e["path"]
                    == format!("{DIR}/rank_tp1_pp0_dp0.json").as_str()
                    && e["reason"].as_str().unwrap().starts_with(says))),
            "{what}: {}",
            b.stderr
        );
        assert!(
            b.logged_with(
                "dir_not_signed",
                json!({"files": 1, "dir": format!("{DIR}/")})
            ),
            "{what}: {}",
            b.stderr
        );
        assert!(sidecar_paths(&root).is_empty(), "{what}: nothing signed");
    }
}

/// As another user (root drops to `nobody`): a rank file and a sidecar it
/// cannot read, and a directory it cannot list.
#[test]
fn permission_denied_is_logged_and_not_trusted() {
    let uid = 65534;
    if !common::has_need(is_root(), "root to run keepwrap as another user") {
        return;
    }
    let t = scratch();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let argv = ["sh", "-c", "exit 0"];
    // The fingerprint as `nobody` sees its environment: the same.
    let fp = fingerprint_of(&argv);
    let r1 = format!("{DIR}/rank_tp1_pp0_dp0.json");
    forged(&root, &fp, GOOD);
    put(&root, &r1, GOOD);
    put(
        &root,
        &sidecar_rel(&r1),
        &serde_json::to_vec(&forged_sidecar(&fp, &r1, GOOD)).unwrap(),
    );
    // A <key16> directory it cannot list.
    let locked = "0.7.2/sm90/fedcba9876543210";
    std::fs::create_dir_all(root.join(locked)).unwrap();
    put(&root, &format!("{locked}/rank_tp0_pp0_dp0.json"), GOOD);
    Command::new("chown")
        .args(["-R", &format!("{uid}:{uid}")])
        .arg(&root)
        .status()
        .unwrap();
    let mode = |rel: &str, m: u32| {
        std::fs::set_permissions(root.join(rel), std::fs::Permissions::from_mode(m)).unwrap()
    };
    mode(RANK0, 0o000);
    mode(&sidecar_rel(&r1), 0o000);
    mode(locked, 0o000);
    let mut cmd = keepwrap(&root);
    {
        use std::os::unix::process::CommandExt;
        cmd.uid(uid).gid(uid);
    }
    let b = boot_debug(cmd.args(["--done", "exit", "--"]).args(argv));
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert_no_panic(&b.stderr, "permission denied");
    assert!(
        b.events_named("removed").iter().any(|e| e["path"] == RANK0
            && e["reason"]
                .as_str()
                .unwrap()
                .starts_with("unreadable (Permission denied")),
        "{}",
        b.stderr
    );
    assert!(
        b.events_named("removed")
            .iter()
            .any(|e| e["path"] == r1.as_str()
                && e["reason"]
                    .as_str()
                    .unwrap()
                    .starts_with("sidecar unreadable (Permission denied")),
        "{}",
        b.stderr
    );
    assert!(
        b.events_named("cannot_open_dir")
            .iter()
            .any(|e| e["dir"] == locked
                && e["error"]
                    .as_str()
                    .unwrap()
                    .starts_with("Permission denied")),
        "{}",
        b.stderr
    );
    assert!(b.logged_with("pruned", json!({"kept": 0})), "{}", b.stderr);
    // The unreadable directory does not stop keeping the rest.
    assert!(
        !b.has_event("cannot_prune") && !b.has_event("watch_failed"),
        "{}",
        b.stderr
    );
}
