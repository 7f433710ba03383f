//! The store under SIGKILL and under concurrent launches on one cache root.
//!
//! - SIGKILL of keepwrap at random points of prune / store / restore /
//!   commit, many trials: every file of every signed set is, byte for byte,
//!   in place or in the store (or in a staging / restoring directory that
//!   the next launch's recovery finishes); after that recovery every set is
//!   whole where it belongs, and the next boot of an arm either reuses a
//!   whole set or tunes everything (never a partial hit: the fake engine
//!   exits 86 on one under `--gate fixed --ep 4`).
//! - Eight launches racing on one root: each logs its outcome, no file is
//!   torn, every stored set is intact, and the next boot of each arm reuses
//!   or tunes everything.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use sha2::{Digest, Sha256};

const ARMS: [&str; 3] = ["1024", "2048", "3072"];

/// `w.sh`: the fake engine, or with KW_NOOP=exit a command that exits 0 at
/// once, or with KW_NOOP=edit one that changes a rank file of the tree and
/// exits 0 (so that commit writes sidecars). KW_NOOP is not fingerprinted.
fn wrapper(dir: &Path) -> PathBuf {
    let p = dir.join("w.sh");
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\ncase \"$KW_NOOP\" in\n exit) exit 0;;\n edit) f=$(find \"$SGLANG_CACHE_DIR\" -path '*/.keepwrap' -prune -o -name 'rank_tp0_*.json' -print | head -n1); [ -n \"$f\" ] && sed -i 's/\"_metadata\"/\"_edited\": 1, \"_metadata\"/' \"$f\"; exit 0;;\nesac\nexec python3 {} \"$@\"\n",
            fake_engine().display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// Does a launch's marker in `root` still have its byte 0 held (its
/// keepwrap or engine alive)?
fn engine_alive(root: &Path) -> bool {
    let Ok(dir) = std::fs::read_dir(root.join(".keepwrap/running")) else {
        return false;
    };
    dir.flatten().any(|e| {
        let Ok(f) = std::fs::File::open(e.path()) else {
            return false;
        };
        // SAFETY: flock is plain data; zero is a valid value of every field.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = libc::F_WRLCK as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        fl.l_len = 1;
        nix::fcntl::fcntl(&f, nix::fcntl::FcntlArg::F_OFD_GETLK(&mut fl)).is_ok()
            && fl.l_type != libc::F_UNLCK as libc::c_short
    })
}

fn launch(w: &Path, cache: &Path, prefill: &str, noop: Option<&str>, tp: &str) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("KEEPWRAP_LOG")
        .env_remove("KEEPWRAP_CACHE_DIR")
        .env("SGLANG_CACHE_DIR", cache)
        .env("FAKE_DIST_TIMEOUT_S", "20")
        .args([
            "--keep",
            "always",
            "--volatile-env",
            "SGLANG_CACHE_DIR",
            "--",
        ])
        .arg(w)
        .args(["--model-path", "/models/fake-moe", "--tune-ms", "2"])
        .args(["--tp", tp, "--ep", tp, "--gate", "fixed", "--offline"])
        .args(["--chunked-prefill-size", prefill]);
    match noop {
        Some(m) => cmd.env("KW_NOOP", m),
        None => cmd.env_remove("KW_NOOP"),
    };
    cmd
}

/// The sha256 of a file; of a sidecar, without its `stat` (the identity
/// of the cache file, which a move changes: the next commit records the
/// new one, and the sidecar signs the same bytes in the same set).
fn sha(p: &Path) -> Option<String> {
    let b = std::fs::read(p).ok()?;
    if p.extension().is_some_and(|x| x == "launch") {
        if let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(&b) {
            if let Some(o) = v.as_object_mut() {
                o.remove("stat");
            }
            return Some(hex::encode(Sha256::digest(v.to_string())));
        }
    }
    Some(hex::encode(Sha256::digest(&b)))
}

/// Every regular file below `dir`, relative, with its sha256.
fn files(dir: &Path) -> BTreeMap<String, String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                walk(base, &p, out);
            } else if ft.is_file() {
                if let Some(h) = sha(&p) {
                    out.insert(p.strip_prefix(base).unwrap().display().to_string(), h);
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn copy_tree(from: &Path, to: &Path) {
    let st = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(st.success());
}

fn root_of(cache: &Path) -> PathBuf {
    cache.join("flashinfer/autotune")
}

/// A set: its fingerprint and its files (cache files and sidecars) by path.
struct Set {
    fp: String,
    files: BTreeMap<String, String>,
}

/// Where the files of `set` are: each must be, with its bytes, in exactly
/// one of the places a set can be. Returns the places used.
fn locate(root: &Path, set: &Set) -> Result<Vec<String>, String> {
    let ks = root.join(".keepwrap");
    let mut bases: Vec<(String, PathBuf)> = vec![
        ("place".into(), root.to_path_buf()),
        ("store".into(), ks.join("store").join(&set.fp)),
        ("restoring".into(), ks.join(format!("restoring-{}", set.fp))),
    ];
    for e in std::fs::read_dir(ks.join("store"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with(&format!("{}.in-", set.fp)) {
            bases.push(("staging".into(), e.path()));
        }
    }
    let mut used = Vec::new();
    for (rel, want) in &set.files {
        let found: Vec<&String> = bases
            .iter()
            .filter(|(_, b)| sha(&b.join(rel)).as_deref() == Some(want.as_str()))
            .map(|(n, _)| n)
            .collect();
        match found.len() {
            1 => {
                if !used.contains(found[0]) {
                    used.push(found[0].clone());
                }
            }
            0 => return Err(format!("{rel} of {} is lost", &set.fp[..8])),
            _ => return Err(format!("{rel} of {} is in {found:?}", &set.fp[..8])),
        }
    }
    Ok(used)
}

fn fp_of(b: &Finished) -> String {
    let l = b
        .log()
        .into_iter()
        .find(|l| l.contains("launch fingerprint "))
        .unwrap()
        .to_string();
    let i = l.find("launch fingerprint ").unwrap() + "launch fingerprint ".len();
    l[i..i + 8].to_string()
}

/// A small deterministic PRNG (xorshift), seeded from the clock; the seed
/// is printed so that a failure can be replayed with KW_CRASH_SEED.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn sigkill_at_random_points_loses_no_file_and_trusts_nothing_wrongly() {
    let t = tempfile::tempdir().unwrap();
    let w = wrapper(t.path());
    let tpl = t.path().join("tpl");
    // Arms 1, 2, 3 signed: 1 and 2 in the store, 3 in place.
    let mut fps = Vec::new();
    for a in ARMS {
        let b = boot(&mut launch(&w, &tpl, a, None, "4"));
        assert_eq!(b.code, 0, "{}", b.stderr);
        fps.push(fp_of(&b));
    }
    let root = root_of(&tpl);
    let mut sets: Vec<Set> = Vec::new();
    for (i, fp8) in fps.iter().enumerate() {
        let (fp, base) = if i == 2 {
            let sc = files(&root)
                .into_keys()
                .find(|k| k.ends_with(".launch") && !k.starts_with(".keepwrap"))
                .unwrap();
            let v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(root.join(sc)).unwrap()).unwrap();
            (v["fingerprint"].as_str().unwrap().to_string(), root.clone())
        } else {
            let e = std::fs::read_dir(root.join(".keepwrap/store"))
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .find(|n| n.starts_with(fp8.as_str()))
                .unwrap();
            (e.clone(), root.join(".keepwrap/store").join(e))
        };
        let files: BTreeMap<String, String> = files(&base)
            .into_iter()
            .filter(|(k, _)| !k.starts_with(".keepwrap") && !k.starts_with(".set.json"))
            .collect();
        assert_eq!(files.len(), 8, "4 rank files and 4 sidecars");
        sets.push(Set { fp, files });
    }

    let seed = std::env::var("KW_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("KW_CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let trials = 50;
    let mut interrupted = 0;
    let mut real_boots = 0;
    let started = Instant::now();
    for trial in 0..trials {
        let dir = t.path().join(format!("t{trial}"));
        copy_tree(&tpl, &dir);
        let root = root_of(&dir);
        let x = rng.below(3) as usize;
        let edit = rng.below(4) == 0;
        // keepwrap stores, restores and commits within its first ~50 ms:
        // half the trials kill it at real random points of that; the other
        // half slow each move by 2 ms (the test hook
        // KEEPWRAP_TEST_MOVE_DELAY_MS) and kill within ~120 ms.
        let slowed = trial % 2 == 1;
        let delay = if slowed {
            1000 + rng.below(120_000)
        } else {
            1000 + rng.below(40_000)
        };
        let mode = if edit { "edit" } else { "exit" };
        let mut cmd = launch(&w, &dir, ARMS[x], Some(mode), "4");
        if slowed {
            cmd.env("KEEPWRAP_TEST_MOVE_DELAY_MS", "2");
        }
        let mut g = Guard::spawn(cmd.stdout(Stdio::null()).stderr(Stdio::null()));
        std::thread::sleep(Duration::from_micros(delay));
        let _ = nix::sys::signal::kill(g.pid(), nix::sys::signal::Signal::SIGKILL);
        g.wait(Duration::from_secs(10));
        drop(g);
        // Its engine (its own process group) may outlive it for a moment:
        // the recovery below must not start beside it (it would go on
        // hands-off, rightly).
        wait_for(
            "the killed launch's engine to end",
            Duration::from_secs(30),
            || (!engine_alive(&root)).then_some(()),
        );
        // Raw state: every file of every set (but one just edited) is
        // somewhere, with its bytes.
        let mut split = false;
        let mut kinds: Vec<String> = Vec::new();
        for (i, s) in sets.iter().enumerate() {
            if edit && i == x {
                continue;
            }
            match locate(&root, s) {
                Ok(used) => {
                    if used.len() > 1 || used.iter().any(|u| u != "place" && u != "store") {
                        split = true;
                        kinds.push(format!("{}:{}", &s.fp[..8], used.join("+")));
                    }
                }
                Err(e) => panic!("trial {trial} (seed {seed}, arm {x}, +{delay} us): {e}"),
            }
        }
        if split {
            interrupted += 1;
            eprintln!(
                "trial {trial}: killed at +{delay} us{} with {kinds:?}",
                if slowed { " (slowed)" } else { "" }
            );
        }
        // Recovery by the next launch of arm z, to the end.
        let z = rng.below(3) as usize;
        let b = boot(&mut launch(&w, &dir, ARMS[z], Some("exit"), "4"));
        assert_eq!(b.code, 0, "{}", b.stderr);
        for (i, s) in sets.iter().enumerate() {
            if edit && i == x {
                continue;
            }
            let used =
                locate(&root, s).unwrap_or_else(|e| panic!("trial {trial} after recovery: {e}"));
            let want = if i == z { "place" } else { "store" };
            assert_eq!(
                used,
                vec![want.to_string()],
                "trial {trial} (seed {seed}): {}",
                b.stderr
            );
        }
        let leftovers: Vec<String> = std::fs::read_dir(root.join(".keepwrap"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("restoring-") || n.starts_with("trash-"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        // Now and then, a real boot of a random arm: whole or nothing.
        if trial % 20 == 0 || (split && real_boots < 4) {
            real_boots += 1;
            let y = rng.below(3) as usize;
            let b = boot(&mut launch(&w, &dir, ARMS[y], None, "4"));
            assert_eq!(
                b.code, 0,
                "trial {trial}: never a partial hit: {}",
                b.stderr
            );
            assert!(
                b.tuned() == 0 || b.hit() == 0,
                "trial {trial}: reuse whole or tune everything (tuned {}, hit {})",
                b.tuned(),
                b.hit()
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    eprintln!(
        "{trials} trials, {interrupted} left a set mid-move, {real_boots} real boots, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        interrupted > 0,
        "no kill landed inside a move (seed {seed})"
    );
}

#[test]
fn eight_launches_racing_on_one_root_each_log_an_outcome_and_tear_nothing() {
    let t = tempfile::tempdir().unwrap();
    let w = wrapper(t.path());
    let cache = t.path().join("cache");
    let mut runs: Vec<Running> = (0..8)
        .map(|i| Running::spawn(&mut launch(&w, &cache, ARMS[i % 2], None, "2")))
        .collect();
    let mut outcomes = Vec::new();
    for r in runs.drain(..) {
        let b = r.finish(Duration::from_secs(120));
        let outcome = b
            .log()
            .into_iter()
            .find(|l| {
                [
                    "reused ",
                    "tuned and signed ",
                    "nothing to keep",
                    "not signing:",
                    "gave up waiting",
                    "goes on without keeping the cache",
                ]
                .iter()
                .any(|o| l.contains(o))
            })
            .map(str::to_string);
        assert!(outcome.is_some(), "no outcome line: {}", b.stderr);
        outcomes.push((b.code, outcome.unwrap()));
    }
    eprintln!("{outcomes:#?}");
    let root = root_of(&cache);
    // No torn file: every JSON parses, in place and in the store.
    for (rel, _) in files(&root) {
        if rel.ends_with(".json") || rel.ends_with(".launch") {
            let bytes = std::fs::read(root.join(&rel)).unwrap();
            assert!(
                serde_json::from_slice::<serde_json::Value>(&bytes).is_ok(),
                "{rel} is torn"
            );
        }
    }
    // Every stored set is intact: its bytes as its manifest says, each
    // sidecar signed for the entry's launch.
    for e in std::fs::read_dir(root.join(".keepwrap/store"))
        .unwrap()
        .flatten()
    {
        let m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(e.path().join(".set.json")).unwrap()).unwrap();
        let fp = e.file_name().to_string_lossy().into_owned();
        assert_eq!(m["fingerprint"], fp.as_str());
        for mem in m["members"].as_array().unwrap() {
            let p = e.path().join(mem["path"].as_str().unwrap());
            assert_eq!(
                sha(&p).as_deref(),
                mem["sha256"].as_str(),
                "{}",
                p.display()
            );
            let sc = p.with_extension("launch");
            let v: serde_json::Value = serde_json::from_slice(&std::fs::read(sc).unwrap()).unwrap();
            assert_eq!(v["fingerprint"], fp.as_str());
        }
    }
    // And each arm's next boot reuses a whole set or tunes everything.
    for a in &ARMS[..2] {
        let b = boot(&mut launch(&w, &cache, a, None, "2"));
        assert_eq!(b.code, 0, "{}", b.stderr);
        assert!(b.tuned() == 0 || b.hit() == 0, "{}", b.stderr);
    }
}
