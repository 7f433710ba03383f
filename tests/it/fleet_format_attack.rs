//! Hostile inputs to the fleet's format 2: a publication that takes each
//! file's sha256 from the local signed set (`cache::read_signed`), and
//! envelopes and HEADs that lie. Each drives the built binary against
//! moto's S3 server (`KEEPWRAP_TEST_S3`), as `fleet.rs`.
#![cfg_attr(not(feature = "failpoints"), allow(dead_code, unused_imports))]

use crate::common;
use crate::fleet::{moto, pod, sha256, Bucket};

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use common::*;
use serde_json::json;

/// Every blob of the bucket is stored under the sha256 of its bytes: the
/// keys whose bytes are not.
fn misaddressed_blobs(b: &Bucket) -> Vec<String> {
    b.keys()
        .into_iter()
        .filter(|k| k.contains("/blobs/"))
        .filter(|k| {
            let (s, bytes) = b.get(k);
            assert_eq!(s, 200, "{k}");
            !k.ends_with(&format!("/blobs/{}", sha256(&bytes)))
        })
        .collect()
}

/// The sidecar (`*.launch`) below `root` that signs the cache file `rel`.
fn sidecar_of(root: &Path, rel: &Path) -> (PathBuf, serde_json::Value) {
    sidecars(root)
        .into_iter()
        .map(|p| {
            let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
            (p, v)
        })
        .find(|(_, v)| v["path"] == rel.to_str().unwrap())
        .unwrap_or_else(|| panic!("no sidecar signs {}", rel.display()))
}

/// Change the time measured for the file's first entry (its size, its
/// `_generation` and its being a file of its build stay: the file is one
/// FlashInfer would write), as a write of the engine does.
fn change_bytes(root: &Path, rel: &Path) {
    let file = root.join(rel);
    let before = std::fs::read(&file).unwrap();
    let obj: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&before).unwrap();
    let mut entries: Vec<(String, serde_json::Value)> = obj
        .iter()
        .filter(|(k, _)| !k.starts_with('_'))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    // [runner, tactic, "median", {"time_ms": T}]: T's last digit another
    // (never 0, which its shortest form would drop)
    let time = &mut entries[0].1[3]["time_ms"];
    let mut t = time.to_string();
    let last = if t.ends_with('1') { "2" } else { "1" };
    t.replace_range(t.len() - 1.., last);
    *time = serde_json::from_str(&t).unwrap();
    let changed = keepwrap::unify::render(
        obj.get("_metadata"),
        entries.iter().map(|(k, v)| (k.as_str(), v)),
    );
    assert_eq!(changed.len(), before.len());
    assert_ne!(changed, before);
    std::fs::write(&file, &changed).unwrap();
}

/// [`change_bytes`], then plant a sidecar that records the bytes signed
/// before with the stamp the file has now: what the stamp compares (inode,
/// modification and change time) says "still the file hashed at signing".
fn change_bytes_keep_stamp(root: &Path, rel: &Path) {
    change_bytes(root, rel);
    let (sidecar, mut sc) = sidecar_of(root, rel);
    let st = std::fs::metadata(root.join(rel)).unwrap();
    sc["stat"] = json!({
        "ino": st.ino(),
        "mtime_ns": st.mtime() * 1_000_000_000 + st.mtime_nsec(),
        "ctime_ns": st.ctime() * 1_000_000_000 + st.ctime_nsec(),
    });
    std::fs::write(&sidecar, serde_json::to_vec(&sc).unwrap()).unwrap();
}

/// The set manifests under `root` (`.keepwrap/sets/*.json`) that list
/// `n` files.
fn set_manifest_of(root: &Path, n: usize) -> bool {
    std::fs::read_dir(root.join(".keepwrap/sets"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .any(|m| m["members"].as_array().is_some_and(|a| a.len() == n))
}

/// A cold boot of a pod on `home` whose every durable step of its sign is
/// slowed: the set manifest written at done stays 1.5 s before the
/// publication reads the files. Running, once that manifest is there.
fn signed_at_done(home: &Path, ep: &str, b: &Bucket) -> Running {
    let running =
        Running::spawn(pod(home, ep, &b.url(), &[]).env("KEEPWRAP_FAILPOINT_DELAY_MS", "1500"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !set_manifest_of(&cache_root(home), 2) {
        assert!(std::time::Instant::now() < deadline, "never signed at done");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    running
}

/// A file whose bytes change between the sign at done and the publication,
/// under a sidecar that still vouches for the bytes signed (planted): the
/// publication must never upload the new bytes under the old sha256. A
/// blob key holding bytes that are not of its hash is refused by every
/// restore and never replaced (every later upload of the real bytes is a
/// create that finds the key taken): the launch would boot cold on every
/// pod for good.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn a_file_changed_under_a_sidecar_that_still_vouches_for_it_is_never_uploaded_under_the_old_sha256()
{
    let Some(ep) = moto() else { return };
    let b = Bucket::new(&ep);
    let h = home();
    let root = cache_root(h.path());
    let running = signed_at_done(h.path(), &ep, &b);
    let files = cache_files(&root);
    assert_eq!(files.len(), 2);
    // Every rank file alike (they stay one union).
    for rel in &files {
        change_bytes_keep_stamp(&root, rel);
    }
    let rel = &files[0];
    let p = running.finish(std::time::Duration::from_secs(120));
    assert_eq!(p.code, 0, "{}", p.stderr);
    assert_eq!(
        misaddressed_blobs(&b),
        Vec::<String>::new(),
        "a blob under a sha256 its bytes do not have: {}",
        p.stderr
    );
    // It says why it published nothing, naming the file.
    assert!(!p.has_event("fleet_published"), "{}", p.stderr);
    let failed = p.event("fleet_publish_failed");
    let error = failed["error"].as_str().unwrap();
    assert!(error.contains(rel.to_str().unwrap()), "{error}");
    assert!(
        !b.keys().iter().any(|k| k.ends_with("/HEAD")),
        "{:?}",
        b.keys()
    );
}

/// Pod 1 publishes; `rewrite` puts other bytes in the bucket (the same set
/// and HEAD in another form, as a hand or another tool writes them); pod 2
/// boots warm from them. Every warm boot in read-write mode must write
/// HEAD again (what keeps `fleet gc` from removing a launch in use): pod 2's
/// publication names its set in HEAD, in HEAD's own form, and says so.
fn warm_boot_rewrites_head(rewrite: impl FnOnce(&Bucket, &str, &str)) {
    let Some(ep) = moto() else { return };
    let b = Bucket::new(&ep);
    let h1 = home();
    let p1 = boot(&mut pod(h1.path(), &ep, &b.url(), &[]));
    assert!(p1.has_event("fleet_published"), "{}", p1.stderr);
    let dir = b.launch_dir();
    let set = crate::fleet::head_set(&b, &dir);
    rewrite(&b, &dir, &set);
    let h2 = home();
    let p2 = boot(&mut pod(h2.path(), &ep, &b.url(), &[]));
    assert_eq!(p2.code, 0, "{}", p2.stderr);
    assert!(p2.has_event("fleet_restored"), "{}", p2.stderr);
    assert_eq!(p2.tuned(), 0, "{}", p2.stderr);
    // HEAD names the set pod 2 published, in HEAD's own form.
    assert!(
        p2.logged_with("fleet_published", json!({"set": set})),
        "HEAD is not written again by a warm boot: {}",
        p2.stderr
    );
    let (_, head) = b.get(&format!("{dir}HEAD"));
    assert_eq!(
        String::from_utf8_lossy(&head),
        format!(r#"{{"format":2,"set":"{set}"}}"#)
    );
}

/// A HEAD written by hand (`echo '{"format":2,"set":"..."}'`: a trailing
/// newline) names the set as well as keepwrap's own; a warm boot restores
/// it and writes HEAD again.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn a_head_written_by_hand_is_written_again_by_every_warm_boot() {
    warm_boot_rewrites_head(|b, dir, set| {
        b.put(
            &format!("{dir}HEAD"),
            format!("{{\"format\": 2, \"set\": \"{set}\"}}\n").as_bytes(),
        );
    });
}

/// A set object that is the set in another form (pretty-printed, the inner
/// set with `keepwrap` and `signed_at` as a local set manifest has them),
/// stored under the sha256 of those bytes and named by HEAD: a warm boot
/// restores it, and its publication (the set in its one form, another id)
/// must move HEAD to it.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn a_set_object_in_another_form_is_replaced_in_head_by_the_warm_boots_set() {
    warm_boot_rewrites_head(|b, dir, set| {
        let (_, bytes) = b.get(&format!("{dir}sets/{set}.json"));
        let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        v["set"]["keepwrap"] = json!("0.1.0");
        v["set"]["signed_at"] = json!(1_796_000_000u64);
        let other = serde_json::to_vec_pretty(&v).unwrap();
        let other_id = sha256(&other);
        b.put(&format!("{dir}sets/{other_id}.json"), &other);
        b.put(
            &format!("{dir}HEAD"),
            format!(r#"{{"format":2,"set":"{other_id}"}}"#).as_bytes(),
        );
    });
}

/// The envelope `v` as a set object under the sha256 of its bytes (its
/// inner set's id made its own again unless `keep_id`), named by HEAD: its
/// key.
fn plant_set(b: &Bucket, dir: &str, mut v: serde_json::Value, keep_id: bool) -> String {
    if !keep_id {
        let members: Vec<keepwrap::cache::Member> =
            serde_json::from_value(v["set"]["members"].clone()).unwrap();
        let fp = v["set"]["fingerprint"].as_str().unwrap().to_string();
        v["set"]["id"] = json!(keepwrap::cache::set_id(&fp, &members));
    }
    let bytes = serde_json::to_vec(&v).unwrap();
    let id = sha256(&bytes);
    let key = format!("{dir}sets/{id}.json");
    b.put(&key, &bytes);
    b.put(
        &format!("{dir}HEAD"),
        format!(r#"{{"format":2,"set":"{id}"}}"#).as_bytes(),
    );
    key
}

/// Envelopes that lie, each whole by its id (the object's bytes hash to
/// it, its inner set's id is its own unless the lie is that id): every one
/// costs a cold boot whose one line names the set object, and nothing of
/// it is placed.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn an_envelope_that_lies_is_never_restored() {
    let Some(ep) = moto() else { return };
    let b = Bucket::new(&ep);
    let h1 = home();
    let p1 = boot(&mut pod(h1.path(), &ep, &b.url(), &[]));
    assert!(p1.has_event("fleet_published"), "{}", p1.stderr);
    let dir = b.launch_dir();
    let set = crate::fleet::head_set(&b, &dir);
    let good: serde_json::Value =
        serde_json::from_slice(&b.get(&format!("{dir}sets/{set}.json")).1).unwrap();
    let escaping = {
        let mut m = good["set"]["members"][0].clone();
        m["path"] = json!("0.7.2/sm121/../../../escaped/rank_tp0_pp0_dp0.json");
        m
    };
    type Lie = Box<dyn Fn(&mut serde_json::Value)>;
    let lies: Vec<(&str, bool, Lie)> = vec![
        (
            "a node for each file of a single-node set",
            false,
            Box::new(|v| v["nodes"] = json!([0, 0])),
        ),
        (
            "two nodes for a single-node launch",
            false,
            Box::new(|v| {
                v["nnodes"] = json!(2);
                v["nodes"] = json!([0, 1]);
            }),
        ),
        (
            "members out of order",
            false,
            Box::new(|v| v["set"]["members"].as_array_mut().unwrap().reverse()),
        ),
        (
            "a member twice",
            false,
            Box::new(|v| {
                let m = v["set"]["members"][0].clone();
                v["set"]["members"] = json!([m.clone(), m]);
            }),
        ),
        (
            "a member escaping the root",
            false,
            Box::new(move |v| v["set"]["members"][0] = escaping.clone()),
        ),
        (
            "an inner set whose id is not its hash",
            true,
            Box::new(|v| v["set"]["id"] = json!("0".repeat(64))),
        ),
        (
            "the fingerprint of another launch",
            false,
            Box::new(|v| v["set"]["fingerprint"] = json!("e".repeat(64))),
        ),
        (
            "a field of no format",
            false,
            Box::new(|v| v["restore_anyway"] = json!(true)),
        ),
        (
            "another profile",
            false,
            Box::new(|v| v["profile"] = json!("vllm")),
        ),
        (
            "another format",
            false,
            Box::new(|v| v["format"] = json!(3)),
        ),
        (
            "more bytes than a set object may hold",
            false,
            Box::new(|v| v["stamps"] = json!({"x": "y".repeat(5 << 20)})),
        ),
    ];
    for (what, keep_id, lie) in lies {
        let mut v = good.clone();
        lie(&mut v);
        let key = plant_set(&b, &dir, v, keep_id);
        let h = home();
        let p = boot(&mut pod(h.path(), &ep, &b.url(), &[]));
        assert_eq!(p.code, 0, "{what}: {}", p.stderr);
        assert!(!p.has_event("fleet_restored"), "{what}: {}", p.stderr);
        assert!(
            p.logged_starting("fleet_restore_failed", "reason", &key),
            "{what}: the line names {key}: {}",
            p.stderr
        );
        assert!(p.tuned() > 0, "{what}: a cold boot");
        assert!(
            !h.path().join("sglang/escaped").exists() && !h.path().join("escaped").exists(),
            "{what}"
        );
    }
}

/// A signed file swapped for a symlink or a FIFO between the sign at done
/// and the publication: nothing is published (the file is never followed
/// nor waited on), and the one line says why, naming the file.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn a_signed_file_swapped_for_a_symlink_or_a_fifo_publishes_nothing_and_says_so() {
    let Some(ep) = moto() else { return };
    for kind in ["symlink", "fifo"] {
        let b = Bucket::new(&ep);
        let h = home();
        let root = cache_root(h.path());
        let running = signed_at_done(h.path(), &ep, &b);
        let rel = cache_files(&root).into_iter().next().unwrap();
        let file = root.join(&rel);
        std::fs::remove_file(&file).unwrap();
        if kind == "symlink" {
            std::os::unix::fs::symlink("/etc/hostname", &file).unwrap();
        } else {
            let made = std::process::Command::new("mkfifo").arg(&file).status();
            assert!(made.unwrap().success(), "mkfifo");
        }
        let p = running.finish(std::time::Duration::from_secs(120));
        assert_eq!(p.code, 0, "{kind}: {}", p.stderr);
        assert!(!p.has_event("fleet_published"), "{kind}: {}", p.stderr);
        assert!(
            p.logged_starting("fleet_publish_failed", "error", rel.to_str().unwrap()),
            "{kind}: no line says why nothing is published: {}",
            p.stderr
        );
        assert!(!b.keys().iter().any(|k| k.ends_with("/HEAD")), "{kind}");
    }
}

/// A multi-node launch whose nodes share no boot id (LeaderWorkerSet)
/// publishes nothing, but restores: each of its warm boots must still
/// write HEAD again, or `fleet gc` removes the launch while it is in use.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn a_warm_multi_node_launch_with_no_boot_id_keeps_its_launch_from_gc() {
    let Some(ep) = moto() else { return };
    let b = Bucket::new(&ep);
    let first = crate::fleet::boot_nodes(&ep, &b.url(), &[("KEEPWRAP_BOOT_ID", "lws-group-0")]);
    assert!(
        first.iter().any(|n| n.has_event("fleet_published")),
        "{}",
        first[1].stderr
    );
    // Every object of the first launch older than 2 s.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let warm = crate::fleet::boot_nodes(&ep, &b.url(), &[]);
    for (r, n) in warm.iter().enumerate() {
        assert_eq!(n.code, 0, "node {r}: {}", n.stderr);
        assert!(n.has_event("fleet_no_boot_id"), "node {r}: {}", n.stderr);
        assert!(n.has_event("fleet_restored"), "node {r}: {}", n.stderr);
        assert_eq!(n.tuned(), 0, "node {r}: {}", n.stderr);
        assert!(
            n.logged_with("fleet_head_rewritten", json!({"written": true})),
            "node {r}: {}",
            n.stderr
        );
    }
    let h = home();
    let gc = output(&mut crate::fleet::fleet_command(
        h.path(),
        &ep,
        &b.url(),
        &["gc", "--older-than", "2s"],
    ));
    assert_eq!(gc.code, 0, "{}", gc.stderr);
    assert!(
        gc.stdout
            .iter()
            .any(|l| l.starts_with("removed 0 launches")),
        "a launch in use is removed: {:?}",
        gc.stdout
    );
    assert!(
        b.keys().iter().any(|k| k.ends_with("/HEAD")),
        "{:?}",
        b.keys()
    );
}

/// The parts of one boot that disagree (node 1's slot holds a part whose
/// file has another tactic for a shape node 0's file holds too, as a part
/// of another boot under the same boot id would): no node names their
/// union, each says why, and HEAD keeps the set it named.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn parts_of_one_boot_that_disagree_are_never_named_as_a_set() {
    let Some(ep) = moto() else { return };
    let b = Bucket::new(&ep);
    let first = crate::fleet::boot_nodes(&ep, &b.url(), &[("KEEPWRAP_BOOT_ID", "boot-1")]);
    assert!(
        first.iter().any(|n| n.has_event("fleet_published")),
        "{}",
        first[1].stderr
    );
    let dir = b.launch_dir();
    let named = crate::fleet::head_set(&b, &dir);
    let boot = |id: &str| sha256(format!("explicit:{id}").as_bytes())[..32].to_string();
    // Node 1's part of boot 1, its file's first shape given another tactic,
    // in node 1's slot of boot 2.
    let (_, part) = b.get(&format!("{dir}parts/{}/1.json", boot("boot-1")));
    let mut part: serde_json::Value = serde_json::from_slice(&part).unwrap();
    let member = &mut part["set"]["members"][0];
    let (_, blob) = b.get(&format!(
        "{dir}blobs/{}",
        member["sha256"].as_str().unwrap()
    ));
    let mut file: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&blob).unwrap();
    let shape = file
        .keys()
        .find(|k| !k.starts_with('_'))
        .unwrap()
        .to_string();
    let tactic = file[&shape][1].as_u64().unwrap();
    file[&shape][1] = json!(tactic + 1);
    let other = serde_json::to_vec(&file).unwrap();
    let other_sha = sha256(&other);
    b.put(&format!("{dir}blobs/{other_sha}"), &other);
    member["sha256"] = json!(other_sha);
    member["size"] = json!(other.len());
    let planted = plant_part(&b, &format!("{dir}parts/{}/1.json", boot("boot-2")), part);
    let second = crate::fleet::boot_nodes(&ep, &b.url(), &[("KEEPWRAP_BOOT_ID", "boot-2")]);
    for (r, n) in second.iter().enumerate() {
        assert_eq!(n.code, 0, "node {r}: {}", n.stderr);
        assert!(n.has_event("fleet_restored"), "node {r}: {}", n.stderr);
        assert!(!n.has_event("fleet_published"), "node {r}: {}", n.stderr);
        assert!(
            n.has_event("fleet_publish_failed"),
            "node {r} says why: {}",
            n.stderr
        );
    }
    let e = second[0].event("fleet_publish_failed");
    assert!(
        e["error"].as_str().unwrap().contains("different tactics"),
        "{e}"
    );
    // Node 1's slot is taken: its own part is not written over it.
    let e = second[1].event("fleet_publish_failed");
    assert!(e["error"].as_str().unwrap().contains(&planted), "{e}");
    assert_eq!(crate::fleet::head_set(&b, &dir), named);
}

/// The part `v` (its inner set's id made its own again) at `key`.
fn plant_part(b: &Bucket, key: &str, mut v: serde_json::Value) -> String {
    let members: Vec<keepwrap::cache::Member> =
        serde_json::from_value(v["set"]["members"].clone()).unwrap();
    let fp = v["set"]["fingerprint"].as_str().unwrap().to_string();
    v["set"]["id"] = json!(keepwrap::cache::set_id(&fp, &members));
    b.put(key, &serde_json::to_vec(&v).unwrap());
    key.to_string()
}

/// The two nodes of a TP2 launch across `--nnodes 2` with no boot id,
/// each a pod on its own fresh root, every durable step slowed by 1.5 s
/// (a restore's sign included): running, with their homes.
fn slow_nodes(ep: &str, url: &str) -> Vec<(tempfile::TempDir, Running)> {
    let addr = format!("127.0.0.1:{}", free_port());
    (0..2)
        .map(|rank| {
            let h = home();
            let rank = rank.to_string();
            let engine = [
                "--tp",
                "2",
                "--nnodes",
                "2",
                "--node-rank",
                &rank,
                "--dist-init-addr",
                &addr,
                "--offline",
            ];
            let mut cmd = crate::fleet::pod_of(h.path(), ep, url, &[], &engine);
            cmd.env_remove("SLURM_JOB_ID")
                .env_remove("SLURM_RESTART_COUNT")
                .env("KEEPWRAP_FAILPOINT_DELAY_MS", "1500");
            let running = Running::spawn(&mut cmd);
            (h, running)
        })
        .collect()
}

/// `fleet gc` deletes HEAD while a warm multi-node boot with no boot id
/// runs (after its restore): the boot creates HEAD anew after done, as a
/// publishing pod does, so that gc keeps the launch.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn a_head_gc_deleted_during_a_warm_multi_node_boot_with_no_boot_id_is_created_anew() {
    let Some(ep) = moto() else { return };
    let b = Bucket::new(&ep);
    let first = crate::fleet::boot_nodes(&ep, &b.url(), &[("KEEPWRAP_BOOT_ID", "boot-1")]);
    assert!(
        first.iter().any(|n| n.has_event("fleet_published")),
        "{}",
        first[1].stderr
    );
    let dir = b.launch_dir();
    let named = crate::fleet::head_set(&b, &dir);
    let nodes = slow_nodes(&ep, &b.url());
    // Both nodes restored (their roots signed the set): HEAD goes, as gc's
    // first phase removes it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !nodes
        .iter()
        .all(|(h, _)| set_manifest_of(&cache_root(h.path()), 1))
    {
        assert!(std::time::Instant::now() < deadline, "never restored");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    b.delete(&format!("{dir}HEAD"));
    for (r, (_, running)) in nodes.into_iter().enumerate() {
        let n = running.finish(std::time::Duration::from_secs(120));
        assert_eq!(n.code, 0, "node {r}: {}", n.stderr);
        assert!(n.has_event("fleet_restored"), "node {r}: {}", n.stderr);
        assert!(
            n.logged_with("fleet_head_rewritten", json!({"written": true})),
            "node {r}: {}",
            n.stderr
        );
    }
    assert_eq!(crate::fleet::head_set(&b, &dir), named);
}

/// A file written between the sign at done and the publication (no
/// sidecar vouches for it any more: its stamp changed) is read and hashed:
/// its blob is stored under the sha256 of the bytes uploaded, and the set
/// HEAD names lists that sha256.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn a_file_written_between_the_sign_and_the_publication_is_uploaded_under_its_own_sha256() {
    let Some(ep) = moto() else { return };
    let b = Bucket::new(&ep);
    let h = home();
    let root = cache_root(h.path());
    let running = signed_at_done(h.path(), &ep, &b);
    let files = cache_files(&root);
    for rel in &files {
        change_bytes(&root, rel);
    }
    let p = running.finish(std::time::Duration::from_secs(120));
    assert_eq!(p.code, 0, "{}", p.stderr);
    assert_eq!(misaddressed_blobs(&b), Vec::<String>::new(), "{}", p.stderr);
    assert!(p.has_event("fleet_published"), "{}", p.stderr);
    let dir = b.launch_dir();
    let set = crate::fleet::head_set(&b, &dir);
    let set: serde_json::Value =
        serde_json::from_slice(&b.get(&format!("{dir}sets/{set}.json")).1).unwrap();
    let now = sha256(&std::fs::read(root.join(&files[0])).unwrap());
    assert!(
        set["set"]["members"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["sha256"] == now.as_str()),
        "{set}"
    );
}
