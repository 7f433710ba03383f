//! Kubernetes, with no cluster: every YAML file of the repository parses and
//! uses only field names of the Kubernetes API (kubernetes-validate's
//! schemas, installed by `.ci/run`, so these tests are ignored by a plain
//! `cargo test` and run with `--ignored`; a LeaderWorkerSet against its documented
//! v1 fields), and the examples run keepwrap as the entrypoint with settings
//! keepwrap accepts.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{output, repo, Finished, BIN};
use serde_json::Value;

fn checker() -> Command {
    let mut cmd = Command::new("python3");
    cmd.arg(common::helper("k8s_check.py"));
    cmd
}

/// Run the checker; a missing validator is a failure that says what to install.
fn check(files: &[PathBuf]) -> Finished {
    let f = output(checker().arg("check").args(files));
    assert_ne!(
        f.code, 3,
        "needs kubernetes-validate (.ci/run installs it: pip install kubernetes-validate): {:?}",
        f.stdout
    );
    f
}

/// Every `*.yaml`/`*.yml` below `dir`, skipping build output and hidden
/// directories.
fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().unwrap().is_dir() {
            if !name.starts_with('.') && name != "target" {
                yaml_files(&path, out);
            }
        } else if name.ends_with(".yaml") || name.ends_with(".yml") {
            out.push(path);
        }
    }
}

#[test]
#[ignore = "needs kubernetes-validate (PyPI; .ci/run installs it and runs the ignored tests)"]
fn every_yaml_file_parses_and_uses_only_kubernetes_api_fields() {
    let mut files = Vec::new();
    yaml_files(&repo(), &mut files);
    files.sort();
    let examples = repo().join("examples/kubernetes");
    for want in ["lws-sglang.yaml", "deployment-sglang.yaml"] {
        assert!(files.contains(&examples.join(want)), "{want}: {files:?}");
    }
    let f = check(&files);
    assert_eq!(f.code, 0, "{}\n{}", f.stdout.join("\n"), f.stderr);
}

#[test]
#[ignore = "needs kubernetes-validate (PyPI; .ci/run installs it and runs the ignored tests)"]
fn the_check_rejects_what_the_api_would_not_take() {
    let dir = tempfile::tempdir().unwrap();
    let lws = std::fs::read_to_string(repo().join("examples/kubernetes/lws-sglang.yaml")).unwrap();
    let deployment =
        std::fs::read_to_string(repo().join("examples/kubernetes/deployment-sglang.yaml")).unwrap();
    let cases = [
        (
            "a misspelt pod field in the LWS worker template",
            lws.replacen(
                "        terminationGracePeriodSeconds: 60\n        containers:",
                "        terminationGracePeriod: 60\n        containers:",
                2,
            ),
            "'terminationGracePeriod' was unexpected",
        ),
        (
            "a field LWS does not have",
            lws.replace(
                "  startupPolicy: LeaderCreated",
                "  startupPolicy: LeaderCreated\n  groupSize: 2",
            ),
            "spec.groupSize: not a LeaderWorkerSet v1 field",
        ),
        (
            "an LWS value outside its enum",
            lws.replace("startupPolicy: LeaderCreated", "startupPolicy: WhenReady"),
            "spec.startupPolicy: 'WhenReady'",
        ),
        (
            "a misspelt container field in a Deployment",
            deployment.replace("          args:", "          arguments:"),
            "'arguments' was unexpected",
        ),
        (
            "YAML that does not parse",
            deployment.replace("  replicas: 1", "  replicas: [1"),
            "does not parse",
        ),
    ];
    for (what, text, needle) in cases {
        let path = dir.path().join("bad.yaml");
        std::fs::write(&path, text).unwrap();
        let f = check(&[path]);
        assert_eq!(f.code, 1, "{what}: {:?}", f.stdout);
        assert!(
            f.stdout.iter().any(|l| l.contains(needle)),
            "{what}: {:?}",
            f.stdout
        );
    }
}

fn documents(file: &str) -> Vec<Value> {
    let f = output(
        checker()
            .arg("dump")
            .arg(repo().join("examples/kubernetes").join(file)),
    );
    assert_eq!(f.code, 0, "{}", f.stderr);
    f.stdout
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The pod templates of a workload: (where, template).
fn pod_templates(doc: &Value) -> Vec<(String, Value)> {
    match doc["kind"].as_str() {
        Some("Deployment") => vec![("template".into(), doc["spec"]["template"].clone())],
        Some("LeaderWorkerSet") => ["leaderTemplate", "workerTemplate"]
            .iter()
            .map(|t| {
                (
                    t.to_string(),
                    doc["spec"]["leaderWorkerTemplate"][*t].clone(),
                )
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn env_value<'a>(container: &'a Value, name: &str) -> Option<&'a Value> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
}

/// The container's KEEPWRAP_* settings, as keepwrap reads them: returns
/// `keepwrap config --json` under them (a value keepwrap rejects fails).
fn keepwrap_config(container: &Value, what: &str) -> Value {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(BIN);
    cmd.env("HOME", home.path()).env_remove("SGLANG_CACHE_DIR");
    common::without_keepwrap_env(&mut cmd);
    for e in container["env"].as_array().into_iter().flatten() {
        let name = e["name"].as_str().unwrap();
        if let (true, Some(v)) = (name.starts_with("KEEPWRAP_"), e["value"].as_str()) {
            cmd.env(name, v);
        }
    }
    let f = output(cmd.args(["config", "--json"]));
    assert_eq!(
        f.code, 0,
        "{what}: keepwrap rejects its settings: {}",
        f.stderr
    );
    let cfg: Value = serde_json::from_str(&f.stdout.join("\n")).unwrap();
    // Every KEEPWRAP_* variable set is one keepwrap reads.
    for e in container["env"].as_array().into_iter().flatten() {
        let name = e["name"].as_str().unwrap();
        if name.starts_with("KEEPWRAP_") && name != "KEEPWRAP_LOG" {
            assert!(
                cfg.as_object().unwrap().values().any(|s| s["from"] == name),
                "{what}: {name} is not a keepwrap variable"
            );
        }
    }
    cfg
}

fn duration(cfg: &Value, name: &str) -> Duration {
    cfg[name]["value"]
        .as_str()
        .map(|v| keepwrap::cli::parse_duration(v).unwrap())
        .unwrap_or_default()
}

#[test]
#[ignore = "needs kubernetes-validate (PyPI; .ci/run installs it and runs the ignored tests)"]
fn the_examples_run_keepwrap_with_settings_it_accepts() {
    for file in ["lws-sglang.yaml", "deployment-sglang.yaml"] {
        let docs = documents(file);
        let templates: Vec<_> = docs.iter().flat_map(pod_templates).collect();
        assert!(!templates.is_empty(), "{file}");
        for (where_, t) in templates {
            let what = format!("{file} {where_}");
            let spec = &t["spec"];
            let grace =
                Duration::from_secs(spec["terminationGracePeriodSeconds"].as_u64().unwrap_or(30));
            for c in spec["containers"].as_array().unwrap() {
                // keepwrap is the image's ENTRYPOINT: `command:` would replace it.
                assert!(
                    c.get("command").is_none(),
                    "{what}: uses command:, which replaces keepwrap"
                );
                let args: Vec<&str> = c["args"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a.as_str().unwrap())
                    .collect();
                assert!(args.contains(&"sglang.launch_server"), "{what}: {args:?}");
                let cfg = keepwrap_config(c, &what);
                let stop = duration(&cfg, "kill-after") + duration(&cfg, "grace");
                assert!(
                    stop < grace,
                    "{what}: kill-after + grace ({stop:?}) must stay under terminationGracePeriodSeconds ({grace:?})"
                );
            }
        }
    }
}

#[test]
#[ignore = "needs kubernetes-validate (PyPI; .ci/run installs it and runs the ignored tests)"]
fn the_leader_worker_set_keeps_a_cache_root_per_pod_and_shares() {
    let docs = documents("lws-sglang.yaml");
    let lws = docs
        .iter()
        .find(|d| d["kind"] == "LeaderWorkerSet")
        .unwrap();
    let claim_modes = |claim: &str| {
        docs.iter()
            .find(|d| d["kind"] == "PersistentVolumeClaim" && d["metadata"]["name"] == claim)
            .map(|d| d["spec"]["accessModes"].clone())
    };
    for (where_, t) in pod_templates(lws) {
        let c = &t["spec"]["containers"][0];
        let env: Vec<&str> = c["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        // POD_NAME from the downward API, before the variable that uses it.
        let pod = env_value(c, "POD_NAME").unwrap_or_else(|| panic!("{where_}: POD_NAME"));
        assert_eq!(
            pod["valueFrom"]["fieldRef"]["fieldPath"], "metadata.name",
            "{where_}"
        );
        let cache = env_value(c, "SGLANG_CACHE_DIR").unwrap()["value"]
            .as_str()
            .unwrap();
        assert!(cache.ends_with("/$(POD_NAME)"), "{where_}: {cache}");
        let pos = |n: &str| env.iter().position(|e| *e == n).unwrap();
        assert!(
            pos("POD_NAME") < pos("SGLANG_CACHE_DIR"),
            "{where_}: $(POD_NAME) expands only after POD_NAME"
        );
        // The share and the cache roots on one ReadWriteMany claim.
        let share = env_value(c, "KEEPWRAP_SHARE").unwrap()["value"]
            .as_str()
            .unwrap();
        let mount_of = |dir: &str| {
            c["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| dir.starts_with(m["mountPath"].as_str().unwrap()))
                .max_by_key(|m| m["mountPath"].as_str().unwrap().len())
                .unwrap_or_else(|| panic!("{where_}: nothing mounted at {dir}"))
                .clone()
        };
        let volume_claim = |m: &Value| {
            let v = t["spec"]["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == m["name"])
                .unwrap();
            v["persistentVolumeClaim"]["claimName"]
                .as_str()
                .unwrap()
                .to_string()
        };
        let (share_mount, cache_mount) = (mount_of(share), mount_of(cache));
        for m in [&share_mount, &cache_mount] {
            let claim = volume_claim(m);
            assert_eq!(
                claim_modes(&claim),
                Some(serde_json::json!(["ReadWriteMany"])),
                "{where_}: {claim}"
            );
        }
        // The launch: one per node, its rank from LWS.
        let args: Vec<&str> = c["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        for (flag, value) in [
            ("--nnodes", "$(LWS_GROUP_SIZE)"),
            ("--node-rank", "$(LWS_WORKER_INDEX)"),
        ] {
            let at = args
                .iter()
                .position(|a| *a == flag)
                .unwrap_or_else(|| panic!("{where_}: {flag}"));
            assert_eq!(args[at + 1], value, "{where_}");
        }
    }
}

#[test]
#[ignore = "needs kubernetes-validate (PyPI; .ci/run installs it and runs the ignored tests)"]
fn the_deployment_keeps_a_root_that_outlives_its_pods() {
    // A Deployment's pod names change at every rollout: a root named after
    // the pod would start cold every time.
    let docs = documents("deployment-sglang.yaml");
    let d = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    let cache = env_value(c, "SGLANG_CACHE_DIR").unwrap()["value"]
        .as_str()
        .unwrap();
    assert!(!cache.contains("$("), "{cache}");
    // A ReadWriteOnce claim: the old pod must go before the new one mounts it.
    assert_eq!(d["spec"]["strategy"]["type"], "Recreate");
}
