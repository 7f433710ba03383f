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

/// The example manifests (`examples/kubernetes/`).
const EXAMPLES: [&str; 6] = [
    "lws-sglang.yaml",
    "deployment-sglang.yaml",
    "lws-vllm.yaml",
    "deployment-vllm.yaml",
    "deployment-vllm-init-container.yaml",
    "fleet-vllm.yaml",
];

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
    for want in EXAMPLES {
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
        Some("Deployment") | Some("Job") => {
            vec![("template".into(), doc["spec"]["template"].clone())]
        }
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

/// The containers of a pod that run the engine: its containers, or for a
/// pod whose engine runs as a native sidecar (an init container with
/// `restartPolicy: Always`, as a tuner Job's), that sidecar.
fn engine_containers(spec: &Value) -> Vec<&Value> {
    let sidecars: Vec<&Value> = spec["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["restartPolicy"] == "Always")
        .collect();
    if sidecars.is_empty() {
        spec["containers"].as_array().unwrap().iter().collect()
    } else {
        sidecars
    }
}

/// The fingerprint `keepwrap fingerprint` gives the launch of `container`
/// under its plain `env:` values.
fn fingerprint_of(container: &Value) -> String {
    let launch = launch_of(container, Vec::new()).unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(BIN);
    common::without_keepwrap_env(&mut cmd).env("HOME", home.path());
    for e in container["env"].as_array().into_iter().flatten() {
        if let Some(v) = e["value"].as_str() {
            cmd.env(e["name"].as_str().unwrap(), v);
        }
    }
    let f = output(cmd.args(["fingerprint", "--"]).args(&launch[2..]));
    assert_eq!(f.code, 0, "{}", f.stderr);
    f.stdout.join("\n")
}

#[test]
#[ignore = "needs kubernetes-validate (PyPI; .ci/run installs it and runs the ignored tests)"]
fn the_tuner_job_publishes_the_launch_the_fleet_deployment_restores_read_only() {
    let docs = documents("fleet-vllm.yaml");
    let of = |kind: &str| {
        let doc = docs.iter().find(|d| d["kind"] == kind).unwrap();
        let spec = &pod_templates(doc)[0].1["spec"];
        let c = engine_containers(spec)[0].clone();
        (c, spec["serviceAccountName"].clone())
    };
    let (tuner, tuner_account) = of("Job");
    let (fleet, fleet_account) = of("Deployment");
    let mode = |c: &Value| env_value(c, "KEEPWRAP_FLEET_MODE").unwrap()["value"].clone();
    assert_eq!(mode(&tuner), "read-write");
    assert_eq!(mode(&fleet), "read-only");
    assert_eq!(
        env_value(&tuner, "KEEPWRAP_FLEET"),
        env_value(&fleet, "KEEPWRAP_FLEET")
    );
    assert_ne!(tuner_account, fleet_account, "two roles");
    let fp = fingerprint_of(&tuner);
    assert_eq!(fp.len(), 64, "{fp}");
    assert_eq!(fp, fingerprint_of(&fleet), "one launch");
}

fn env_value<'a>(container: &'a Value, name: &str) -> Option<&'a Value> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
}

/// The container's KEEPWRAP_* settings, as keepwrap reads them: returns
/// `keepwrap config --json -- LAUNCH` under them (a value keepwrap rejects
/// fails), LAUNCH being what follows `keepwrap --` in `argv`.
fn keepwrap_config(container: &Value, what: &str, argv: &[String]) -> Value {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(BIN);
    cmd.env("HOME", home.path())
        .env_remove("SGLANG_CACHE_DIR")
        .env_remove("VLLM_CACHE_ROOT")
        .env_remove("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR");
    common::without_keepwrap_env(&mut cmd);
    for e in container["env"].as_array().into_iter().flatten() {
        let name = e["name"].as_str().unwrap();
        if let (true, Some(v)) = (name.starts_with("KEEPWRAP_"), e["value"].as_str()) {
            cmd.env(name, v);
        }
    }
    let f = output(cmd.args(["config", "--json", "--"]).args(&argv[2..]));
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
    cfg[name]["text"]
        .as_str()
        .map(|v| keepwrap::cli::parse_duration(v).unwrap())
        .unwrap_or_default()
}

#[test]
#[ignore = "needs kubernetes-validate (PyPI; .ci/run installs it and runs the ignored tests)"]
fn the_examples_run_keepwrap_with_settings_it_accepts() {
    for file in EXAMPLES {
        let docs = documents(file);
        let templates: Vec<_> = docs.iter().flat_map(pod_templates).collect();
        assert!(!templates.is_empty(), "{file}");
        for (where_, t) in templates {
            let what = format!("{file} {where_}");
            let spec = &t["spec"];
            let grace =
                Duration::from_secs(spec["terminationGracePeriodSeconds"].as_u64().unwrap_or(30));
            for c in engine_containers(spec) {
                // keepwrap is PID 1: `command:`, when set, starts with it.
                let launch =
                    launch_of(c, lws_env(&where_)).unwrap_or_else(|e| panic!("{what}: {e}"));
                let engine = if file.contains("vllm") {
                    "vllm"
                } else {
                    "sglang"
                };
                let cfg = keepwrap_config(c, &what, &launch);
                assert_eq!(
                    cfg["profile-for-command"]["value"], engine,
                    "{what}: {launch:?}"
                );
                let done = cfg["done-for-command"]["value"].as_str().unwrap();
                assert!(done.contains("/health"), "{what}: {done} ({launch:?})");
                let stop = duration(&cfg, "kill-after") + duration(&cfg, "grace");
                assert!(
                    stop < grace,
                    "{what}: kill-after + grace ({stop:?}) must stay under terminationGracePeriodSeconds ({grace:?})"
                );
            }
        }
    }
}

/// The variables LeaderWorkerSet gives a pod of group 0 (`leaderTemplate`:
/// index 0, `workerTemplate`: index 1), as the kubelet expands `$(VAR)` in
/// `command:` and `args:`; none for other workloads.
fn lws_env(template: &str) -> Vec<(&'static str, &'static str)> {
    match template {
        "leaderTemplate" => vec![
            ("LWS_GROUP_SIZE", "2"),
            ("LWS_WORKER_INDEX", "0"),
            ("LWS_LEADER_ADDRESS", "leader-0.lws"),
        ],
        "workerTemplate" => vec![
            ("LWS_GROUP_SIZE", "2"),
            ("LWS_WORKER_INDEX", "1"),
            ("LWS_LEADER_ADDRESS", "leader-0.lws"),
        ],
        _ => Vec::new(),
    }
}

/// The ENTRYPOINT (exec form) of the snippet an example's image is built
/// from: `*vllm-keepwrap*` from `Dockerfile.vllm.snippet`, `*sglang-keepwrap*`
/// from `Dockerfile.snippet`.
fn image_entrypoint(image: &str) -> Result<Vec<String>, String> {
    let file = if image.contains("vllm-keepwrap") {
        "Dockerfile.vllm.snippet"
    } else if image.contains("sglang-keepwrap") {
        "Dockerfile.snippet"
    } else {
        return Err(format!("{image}: not an image of keepwrap's snippets"));
    };
    let text = std::fs::read_to_string(repo().join(file)).unwrap();
    let line = text
        .lines()
        .filter_map(|l| l.strip_prefix("ENTRYPOINT "))
        .next_back()
        .ok_or(format!("{file}: no ENTRYPOINT"))?;
    serde_json::from_str(line).map_err(|e| format!("{file}: {e}"))
}

/// The command a container runs, as the kubelet builds it: `command:`
/// (which replaces the image's ENTRYPOINT) or the image's ENTRYPOINT, then
/// `args:`, with `$(VAR)` expanded from `vars`. Err when keepwrap would not
/// be PID 1 in front of the launch: `command:` must be `keepwrap` (any path)
/// then `--`.
fn launch_of(container: &Value, vars: Vec<(&str, &str)>) -> Result<Vec<String>, String> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|a| a.as_str().unwrap_or_default().to_string())
            .collect()
    };
    let mut argv = match container.get("command") {
        Some(command) => {
            let command = strings(command);
            let keepwrap = command
                .first()
                .is_some_and(|p| Path::new(p).file_name().is_some_and(|n| n == "keepwrap"));
            if !keepwrap || command.get(1).map(String::as_str) != Some("--") {
                return Err(format!(
                    "command: {command:?} replaces the image's ENTRYPOINT without keepwrap in front: start it with [\"keepwrap\", \"--\"]"
                ));
            }
            command
        }
        None => image_entrypoint(container["image"].as_str().unwrap_or_default())?,
    };
    argv.extend(strings(&container["args"]));
    Ok(argv
        .into_iter()
        .map(|a| {
            vars.iter()
                .fold(a, |a, (k, v)| a.replace(&format!("$({k})"), v))
        })
        .collect())
}

#[test]
fn a_command_that_replaces_keepwrap_is_refused() {
    let c = |command: Value| {
        serde_json::json!({
            "image": "registry.example/vllm-keepwrap:latest",
            "command": command,
            "args": ["/models/m", "-tp", "$(TP)"],
        })
    };
    let tp = || vec![("TP", "2")];
    for bad in [
        serde_json::json!(["vllm", "serve"]),
        serde_json::json!(["keepwrap", "vllm", "serve"]),
        serde_json::json!(["sh", "-c", "keepwrap -- vllm serve"]),
        serde_json::json!(["/opt/keepwrap-tools/notkeepwrap", "--", "vllm", "serve"]),
        serde_json::json!([]),
    ] {
        assert!(launch_of(&c(bad.clone()), tp()).is_err(), "{bad}");
    }
    assert_eq!(
        launch_of(
            &c(serde_json::json!([
                "/usr/local/bin/keepwrap",
                "--",
                "vllm",
                "serve"
            ])),
            tp()
        )
        .unwrap(),
        [
            "/usr/local/bin/keepwrap",
            "--",
            "vllm",
            "serve",
            "/models/m",
            "-tp",
            "2"
        ]
    );
    // No command: the snippet's ENTRYPOINT, then args.
    let plain = serde_json::json!({
        "image": "registry.example/sglang-keepwrap:latest",
        "args": ["python3", "-m", "sglang.launch_server"],
    });
    assert_eq!(
        launch_of(&plain, Vec::new()).unwrap(),
        ["keepwrap", "--", "python3", "-m", "sglang.launch_server"]
    );
    let other = serde_json::json!({"image": "vllm/vllm-openai:latest", "args": ["m"]});
    assert!(launch_of(&other, Vec::new()).is_err());
}

#[test]
#[ignore = "needs kubernetes-validate (PyPI; .ci/run installs it and runs the ignored tests)"]
fn the_leader_worker_set_keeps_a_cache_root_per_pod_and_shares() {
    lws_keeps_a_cache_root_per_pod_and_shares("lws-sglang.yaml", "SGLANG_CACHE_DIR");
    lws_keeps_a_cache_root_per_pod_and_shares("lws-vllm.yaml", "VLLM_CACHE_ROOT");
    // vLLM without Ray: node 0 serves and names itself the head, the other
    // nodes are headless.
    let docs = documents("lws-vllm.yaml");
    let lws = docs
        .iter()
        .find(|d| d["kind"] == "LeaderWorkerSet")
        .unwrap();
    for (where_, t) in pod_templates(lws) {
        let c = &t["spec"]["containers"][0];
        let launch = launch_of(c, Vec::new()).unwrap();
        let at = launch.iter().position(|a| a == "--master-addr").unwrap();
        assert_eq!(launch[at + 1], "$(LWS_LEADER_ADDRESS)", "{where_}");
        assert_eq!(
            launch.iter().any(|a| a == "--headless"),
            where_ == "workerTemplate",
            "{where_}: {launch:?}"
        );
        assert!(
            !launch
                .iter()
                .any(|a| a.contains("distributed-executor-backend")),
            "{where_}: under Ray keepwrap only supervises"
        );
    }
}

/// Each pod of the LeaderWorkerSet in `file` has its own cache root
/// (`cache_var`, from its pod name) and the share, on one ReadWriteMany
/// claim, and runs its own node of the launch.
fn lws_keeps_a_cache_root_per_pod_and_shares(file: &str, cache_var: &str) {
    let docs = documents(file);
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
        let cache = env_value(c, cache_var).unwrap()["value"].as_str().unwrap();
        assert!(cache.ends_with("/$(POD_NAME)"), "{where_}: {cache}");
        let pos = |n: &str| env.iter().position(|e| *e == n).unwrap();
        assert!(
            pos("POD_NAME") < pos(cache_var),
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
    deployment_keeps_a_root_that_outlives_its_pods("deployment-sglang.yaml", "SGLANG_CACHE_DIR");
    deployment_keeps_a_root_that_outlives_its_pods("deployment-vllm.yaml", "VLLM_CACHE_ROOT");
}

fn deployment_keeps_a_root_that_outlives_its_pods(file: &str, cache_var: &str) {
    // A Deployment's pod names change at every rollout: a root named after
    // the pod would start cold every time.
    let docs = documents(file);
    let d = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    let cache = env_value(c, cache_var).unwrap()["value"].as_str().unwrap();
    assert!(!cache.contains("$("), "{file}: {cache}");
    // A ReadWriteOnce claim: the old pod must go before the new one mounts it.
    assert_eq!(d["spec"]["strategy"]["type"], "Recreate");
}
