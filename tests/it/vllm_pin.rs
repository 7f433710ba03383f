//! `--pin`: a one-rank vLLM launch's managed store, signed once, stays the
//! set the engine is given at every boot, whatever the engine writes.

use crate::common;
use serde_json::json;

use std::path::Path;

use crate::vllm_store::{entries, installed, serve_kw, store_root};

/// `keepwrap status --json -- vllm serve ...` of the launch [`serve_kw`] runs.
fn status(home: &Path) -> serde_json::Value {
    let path = installed(home);
    let out = common::vllm::hermetic(home)
        .args([
            "status",
            "--json",
            "--",
            "vllm",
            "serve",
            "/models/fake-moe",
            "--tune-ms",
            "2",
        ])
        .env("PYTHONPATH", &path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `f` said its pinned set of `files` stayed as signed, the engine having
/// tuned `missing` shapes it lacks and replaced `changed` of its files.
fn assert_pinned(f: &common::Finished, files: usize, missing: usize, changed: usize) {
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert!(
        f.logged_with(
            "pinned",
            json!({"files": files, "missing": missing, "changed": changed})
        ),
        "{}",
        f.stderr
    );
    assert!(!f.has_event("signed"), "{}", f.stderr);
}

#[test]
fn a_pinned_set_stays_byte_identical_whatever_the_engine_rewrites_or_adds() {
    let home = common::home();
    let root = store_root(home.path());
    // a first boot under --pin: nothing to pin yet, the engine tunes and
    // its set is signed
    let first = serve_kw(home.path(), &["--pin"], &[], &[]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert!(first.tuned() > 0, "{:#?}", first.stdout);
    assert!(first.has_event("pin_first"), "{}", first.stderr);
    let set = entries(&root);
    assert!(
        first.logged_with("signed", json!({"files": set.len()})),
        "{}",
        first.stderr
    );

    // a warm boot whose engine re-tunes one entry it found (FlashInfer's
    // discard, then a publish) and tunes two shapes the set lacks
    let busy = [("FAKE_VLLM_RETUNE", "1"), ("FAKE_VLLM_EXTRA_SHAPES", "2")];
    let second = serve_kw(home.path(), &["--pin"], &[], &busy);
    assert_eq!(second.tuned(), 3, "{:#?}", second.stdout);
    assert_pinned(&second, set.len(), 2, 1);
    assert_eq!(
        entries(&root),
        set,
        "the set as signed, once the boot is done"
    );
    let s = status(home.path());
    assert_eq!(s["pinned"]["files"], json!(set.len()), "{s:#}");
    assert_eq!(s["pinned"]["missing"], json!(2), "{s:#}");

    // the next boot is given the same set: it tunes only what the set lacks
    let third = serve_kw(home.path(), &["--pin"], &[], &busy[1..]);
    assert_eq!(third.tuned(), 2, "{:#?}", third.stdout);
    assert_pinned(&third, set.len(), 2, 0);
    assert!(!third.has_event("removed"), "{}", third.stderr);
    assert_eq!(entries(&root), set);
}

#[test]
fn a_set_the_engine_changed_while_keepwrap_was_killed_is_put_back_at_the_next_start() {
    let home = common::home();
    let root = store_root(home.path());
    let first = serve_kw(home.path(), &["--pin"], &[], &[]);
    assert!(first.has_event("signed"), "{}", first.stderr);
    let set = entries(&root);
    // what an engine left when keepwrap was killed before done: an entry
    // replaced (temp file and rename, as FlashInfer publishes) and one added
    let (path, bytes) = set.iter().next().unwrap();
    let mut entry: serde_json::Value = serde_json::from_slice(bytes).unwrap();
    entry["tactic"] = json!(["retuned", 1]);
    let tmp = path.with_file_name(".autotune_x.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&entry).unwrap()).unwrap();
    std::fs::rename(&tmp, path).unwrap();
    let next = serve_kw(home.path(), &["--pin"], &[], &[]);
    assert!(
        next.logged_with("pin_put_back", json!({"restored": 1})),
        "{}",
        next.stderr
    );
    assert_eq!(next.tuned(), 0, "{:#?}", next.stdout);
    assert_pinned(&next, set.len(), 0, 0);
    assert_eq!(entries(&root), set);
}

#[test]
fn pin_on_a_launch_of_rank_files_says_so_and_keeps_them_as_always() {
    let home = common::home();
    let mut cmd = common::vllm::kw_vllm(
        home.path(),
        &["--pin", "--done", "exit"],
        &["-tp", "2", "--offline"],
        &[],
    );
    let f = common::Running::spawn(&mut cmd).finish(common::vllm::DEADLINE);
    assert_eq!(f.code, 0, "{}", f.stderr);
    let line = f.event("pin_not_applicable");
    assert!(
        line["why"].as_str().unwrap().contains("rank files"),
        "{}",
        f.stderr
    );
    assert!(f.has_event("signed"), "{}", f.stderr);
}

/// Two pods with no file system in common: the set the first one signed
/// under `--pin` is the set the second boots with, and stays as signed
/// there whatever its engine writes.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn a_pinned_set_goes_to_a_second_pod_through_the_fleet_and_stays_as_signed_there() {
    use crate::vllm_store::{fleet_pod, relative};
    let Some(ep) = crate::fleet::moto() else {
        return;
    };
    let bucket = crate::fleet::Bucket::new(&ep);
    let url = bucket.url();
    let (h1, h2) = (common::home(), common::home());
    let first = fleet_pod(
        h1.path(),
        &ep,
        &url,
        &["--pin"],
        &[],
        &["fleet_published", "fleet_publish_failed"],
    );
    assert!(first.has_event("pin_first"), "{}", first.stderr);
    assert!(first.has_event("fleet_published"), "{}", first.stderr);
    let set = relative(store_root(h1.path()));
    let busy = [("FAKE_VLLM_RETUNE", "1"), ("FAKE_VLLM_EXTRA_SHAPES", "1")];
    let second = fleet_pod(h2.path(), &ep, &url, &["--pin"], &busy, &[]);
    assert!(second.has_event("fleet_restored"), "{}", second.stderr);
    assert_eq!(second.tuned(), 2, "{:#?}", second.stdout);
    assert_pinned(&second, set.len(), 1, 1);
    assert_eq!(relative(store_root(h2.path())), set);
}

/// The metrics file says how many shapes the last pinned boot tuned that
/// its set lacks (`keepwrap_pinned_missing_shapes`, what an alert watches
/// to tell a set that keeps missing shapes); a boot that is not pinned
/// leaves the gauge out.
#[test]
fn the_metrics_file_counts_the_shapes_a_pinned_boot_missed() {
    let home = common::home();
    let file = home.path().join("keepwrap.prom");
    let pin = ["--pin", "--metrics-file", file.to_str().unwrap()];
    let first = serve_kw(home.path(), &pin, &[], &[]);
    assert!(first.has_event("pin_first"), "{}", first.stderr);
    let gauge = "keepwrap_pinned_missing_shapes";
    assert!(!crate::metrics::samples(&file).contains_key(gauge));
    let busy = [("FAKE_VLLM_EXTRA_SHAPES", "2")];
    let second = serve_kw(home.path(), &pin, &[], &busy);
    assert!(second.has_event("pinned"), "{}", second.stderr);
    let m = crate::metrics::samples(&file);
    assert_eq!(m[gauge], 2.0, "{m:?}");
    assert_eq!(crate::metrics::boots(&m), [1.0, 1.0, 0.0, 0.0], "{m:?}");
    let unpinned = ["--metrics-file", file.to_str().unwrap()];
    let third = serve_kw(home.path(), &unpinned, &[], &[]);
    assert!(!third.has_event("pinned"), "{}", third.stderr);
    let m = crate::metrics::samples(&file);
    assert!(!m.contains_key(gauge), "{m:?}");
    assert_eq!(crate::metrics::boots(&m)[0], 2.0, "{m:?}");
}
