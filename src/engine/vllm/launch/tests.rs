use super::*;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStringExt;
use std::path::Path;

fn os(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}

fn env(v: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
    v.iter().map(|(k, v)| (k.into(), v.into())).collect()
}

#[test]
fn recognises_the_launch_shapes() {
    let serve = os(&["/usr/local/bin/vllm", "serve", "/models/m", "-tp", "2"]);
    let l = recognise(&serve).unwrap();
    assert_eq!(l.entrypoint, Entrypoint::Serve);
    assert_eq!(l.args(&serve), &os(&["/models/m", "-tp", "2"])[..]);
    assert_eq!(l.model(&serve), Some(OsStr::new("/models/m")));

    let api = os(&[
        "python3",
        "-u",
        "-X",
        "faulthandler",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model=/m",
        "--port",
        "9000",
    ]);
    let l = recognise(&api).unwrap();
    assert_eq!(l.entrypoint, Entrypoint::ApiServer);
    assert_eq!(l.args_start, 6);
    assert_eq!(l.model(&api), Some(OsStr::new("/m")));

    for argv in [
        os(&["python", "-m", "vllm.entrypoints.cli.main", "serve", "M"]),
        os(&[
            "/opt/venv/bin/python3.12",
            "-mvllm.entrypoints.cli.main",
            "serve",
            "M",
        ]),
        os(&["vllm", "serve", "--model", "M", "-tp", "2"]),
    ] {
        let l = recognise(&argv).unwrap_or_else(|| panic!("{argv:?}"));
        assert_eq!(l.entrypoint, Entrypoint::Serve);
        assert_eq!(l.model(&argv), Some(OsStr::new("M")), "{argv:?}");
    }
    let cfg = os(&["vllm", "serve", "--config", "/etc/v.yaml"]);
    let l = recognise(&cfg).unwrap();
    assert_eq!(l.model(&cfg), None);
    assert_eq!(l.config_file(&cfg), Some(OsStr::new("/etc/v.yaml")));

    for argv in [
        os(&["vllm", "bench", "serve"]),
        os(&["vllm"]),
        os(&["python3", "-m", "sglang.launch_server", "--model-path", "M"]),
        os(&[
            "python3",
            "script.py",
            "-m",
            "vllm.entrypoints.openai.api_server",
        ]),
        os(&[
            "python3",
            "-c",
            "import vllm",
            "-m",
            "vllm.entrypoints.openai.api_server",
        ]),
        os(&["python3", "-m", "vllm.entrypoints.cli.main", "bench"]),
        os(&["pythonic", "-m", "vllm.entrypoints.openai.api_server"]),
        os(&["bash", "-c", "vllm serve M"]),
        os(&[]),
    ] {
        assert_eq!(recognise(&argv), None, "{argv:?}");
    }
}

#[test]
fn cache_root_follows_vllms_precedence() {
    let pw = |u: Option<&[u8]>| match u {
        None => Some(std::path::PathBuf::from("/pw/me")),
        Some(b"bob") => Some(std::path::PathBuf::from("/home/bob")),
        Some(_) => None,
    };
    let root = |e: &[(&str, &str)]| autotune_root(&env(e), &pw);
    let no_entry = |e: &[(&str, &str)]| autotune_root(&env(e), &|_| None);
    let home = [("HOME", "/home/u")];
    assert_eq!(
        root(&home),
        Ok(AutotuneRoot::VllmCacheRoot(
            "/home/u/.cache/vllm/flashinfer_autotune_cache".into()
        ))
    );
    assert_eq!(
        root(&[("HOME", "/home/u/"), ("XDG_CACHE_HOME", "/xdg")]),
        Ok(AutotuneRoot::VllmCacheRoot(
            "/xdg/vllm/flashinfer_autotune_cache".into()
        ))
    );
    assert_eq!(
        root(&[
            ("XDG_CACHE_HOME", "/xdg"),
            ("VLLM_CACHE_ROOT", "~/vc"),
            ("HOME", "/h")
        ]),
        Ok(AutotuneRoot::VllmCacheRoot(
            "/h/vc/flashinfer_autotune_cache".into()
        ))
    );
    assert_eq!(
        root(&[
            ("VLLM_CACHE_ROOT", "/vc"),
            ("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR", "/fi"),
        ]),
        Ok(AutotuneRoot::Override("/fi".into()))
    );
    // empty override: not used; empty VLLM_CACHE_ROOT: set (relative, as in vLLM)
    assert_eq!(
        root(&[
            ("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR", ""),
            ("VLLM_CACHE_ROOT", "")
        ]),
        Ok(AutotuneRoot::VllmCacheRoot(
            "flashinfer_autotune_cache".into()
        ))
    );
    // the first occurrence of a name wins
    assert_eq!(
        root(&[("VLLM_CACHE_ROOT", "/a"), ("VLLM_CACHE_ROOT", "/b")])
            .unwrap()
            .path(),
        Path::new("/a/flashinfer_autotune_cache")
    );
    // no HOME: the password database's home, as Python's expanduser
    assert_eq!(
        root(&[]).unwrap().path(),
        Path::new("/pw/me/.cache/vllm/flashinfer_autotune_cache")
    );
    assert_eq!(no_entry(&[]), Err(RootError::NoHome { var: "HOME" }));
    assert_eq!(
        root(&[
            ("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR", "~bob/x"),
            ("HOME", "/h")
        ]),
        Ok(AutotuneRoot::Override("/home/bob/x".into()))
    );
    assert_eq!(
        root(&[
            ("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR", "~eve/x"),
            ("HOME", "/h")
        ]),
        Err(RootError::OtherUser {
            var: "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR"
        })
    );
    assert_eq!(
        no_entry(&[("VLLM_CACHE_ROOT", "~")]).unwrap_err().to_string(),
        "VLLM_CACHE_ROOT needs HOME to expand `~`; HOME is not set and this user has no password-database entry"
    );
    assert_eq!(
        root(&[("VLLM_CACHE_ROOT", "~/x"), ("HOME", "/")])
            .unwrap()
            .path(),
        Path::new("/x/flashinfer_autotune_cache")
    );
}

#[test]
fn managed_store_and_arch() {
    let store = |e: &[(&str, &str)]| managed_store_root(&env(e), &|_| None).unwrap();
    assert_eq!(
        managed_store_root(&[], &|_| Some("/pw".into())),
        Ok("/pw/.cache/flashinfer/autotune".into())
    );
    assert_eq!(
        store(&[("HOME", "/h")]),
        Path::new("/h/.cache/flashinfer/autotune")
    );
    assert_eq!(
        store(&[("HOME", "/h"), ("FLASHINFER_WORKSPACE_BASE", "/ws")]),
        Path::new("/ws/.cache/flashinfer/autotune")
    );
    assert_eq!(
        store(&[
            ("FLASHINFER_AUTOTUNE_CACHE_DIR", "/fa"),
            ("FLASHINFER_WORKSPACE_BASE", "/ws")
        ]),
        Path::new("/fa")
    );
    assert_eq!(
        store(&[
            ("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR", "/v"),
            ("FLASHINFER_AUTOTUNE_CACHE_DIR", "/fa")
        ]),
        Path::new("/v")
    );
    let arch = |v: &str| arch_component(&env(&[("FLASHINFER_CUDA_ARCH_LIST", v)]));
    assert_eq!(arch("10.0a 9.0a").as_deref(), Some("90a_100a"));
    assert_eq!(arch("12.0f,9.0a,10.3a").as_deref(), Some("90a_103a_120f"));
    assert_eq!(arch(" "), None);
    assert_eq!(arch_component(&[]), None);
}

#[test]
fn layouts_and_file_names() {
    assert_eq!(layout_for_version("0.23.1"), None);
    assert_eq!(layout_for_version("0.24.0"), Some(Layout::Off));
    assert_eq!(layout_for_version("0.26.0"), Some(Layout::OneRankOnly));
    assert_eq!(layout_for_version("0.27.0"), None);
    assert_eq!(
        layout_for_version("0.27.1"),
        Some(Layout::Shared { env_in_key: true })
    );
    assert_eq!(
        layout_for_version("0.29.0+cu129"),
        Some(Layout::Shared { env_in_key: true })
    );
    assert_eq!(
        layout_for_version("0.30.0"),
        Some(Layout::Shared { env_in_key: false })
    );
    assert_eq!(
        layout_for_version("0.31.0"),
        Some(Layout::Shared { env_in_key: false })
    );
    assert_eq!(
        layout_for_version("0.32.0rc1"),
        Some(Layout::PerRank {
            skips_tuning_when_kept: false,
            managed_store_for_one_rank: false
        })
    );
    assert_eq!(
        layout_for_version("0.33.0"),
        Some(Layout::PerRank {
            skips_tuning_when_kept: true,
            managed_store_for_one_rank: true
        })
    );
    assert_eq!(layout_for_version("1.0"), layout_for_version("0.33.0"));
    assert_eq!(layout_for_version("dev"), None);

    assert_eq!(rank_file_name(1, 2), "autotune_configs_dp1_rank2.json");
    assert_eq!(
        file_kind("autotune_configs_dp1_rank2.json"),
        Some(FileKind::Rank {
            dp_rank: 1,
            rank: 2
        })
    );
    assert_eq!(file_kind("autotune_configs.json"), Some(FileKind::Shared));
    assert_eq!(file_kind("autotune_config.json"), Some(FileKind::LayoutB));
    for temp in [
        ".autotune_configs.json.k2j3h4.tmp",
        ".autotune_configs_dp0_rank0.json.ab.tmp",
        ".autotuner_x8d.tmp",
        ".autotune_q1.tmp",
    ] {
        assert_eq!(file_kind(temp), Some(FileKind::Temp), "{temp}");
    }
    for other in [
        "autotune_configs_dp_rank1.json",
        "autotune_configs_dp01_rank1.json",
        "autotune_configs_dp0_rank1.json.launch",
        "autotune_configs_dp0_rank-1.json",
        "rank_tp0_pp0_dp0.json",
        "manifest.json",
        ".autotune_configs.json",
    ] {
        assert_eq!(file_kind(other), None, "{other}");
    }
}

#[test]
fn front_end_and_per_node_arguments() {
    use ArgRole::{FrontEnd as F, Launch as L, PerNode as N};
    let args = os(&[
        "/m",
        "-tp",
        "4",
        "--port",
        "8001",
        "--host=0.0.0.0",
        "--api-key",
        "k1",
        "k2",
        "-ep",
        "--node_rank",
        "1",
        "--headless",
        "-dpa",
        "10.0.0.1",
        "--master-port=29500",
        "-r1",
        "--no-enable-log-requests",
        "--max-num-seqs",
        "64",
        "--uvicorn-log-level",
        "--enforce-eager",
    ]);
    let want = [
        L, L, L, F, F, F, F, F, F, L, N, N, N, N, N, N, N, F, L, L, F, L,
    ];
    assert_eq!(arg_roles(&args), want);
    // a switch never takes the next token; an attached value is one token
    assert_eq!(arg_roles(&os(&["--headless", "x"])), [N, L]);
    assert_eq!(arg_roles(&os(&["--headless=1"])), [L]);
    assert_eq!(
        arg_roles(&os(&["--served-model-name", "a", "b", "-tp", "2"])),
        [F, F, F, L, L]
    );
    // what the engine tunes stays in
    for a in [
        "--nnodes",
        "-dp",
        "--data-parallel-size",
        "--enable-expert-parallel",
        "--config",
    ] {
        assert_eq!(arg_roles(&os(&[a])), [L], "{a}");
    }
    assert_eq!(
        switch_spellings("--enable-log-requests"),
        [
            "--enable-log-requests",
            "--no-enable-log-requests",
            "--disable-log-requests"
        ]
    );
    for list in [FRONT_END_ARGS, PER_NODE_ARGS] {
        for a in list {
            assert!(a.long.starts_with("--") && !a.long.contains('_'), "{a:?}");
        }
    }
}

#[test]
fn volatile_environment() {
    for v in VOLATILE_ENV {
        assert!(ENV_PREFIXES.iter().any(|p| v.starts_with(p)), "{v}");
    }
    let mut sorted = VOLATILE_ENV.to_vec();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), VOLATILE_ENV.len(), "no duplicates");
    for tuned in [
        "VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS",
        "VLLM_FLASHINFER_MOE_BACKEND",
        "VLLM_ATTENTION_BACKEND",
        "FLASHINFER_CUDA_ARCH_LIST",
    ] {
        assert!(!VOLATILE_ENV.contains(&tuned), "{tuned}");
    }
}

#[test]
fn parallel_sizes_and_local_files() {
    let p = |v: &[&str]| ParallelSizes::from_args(&os(v));
    let one = p(&["/m"]);
    assert_eq!(one.world(), Some(1));
    assert_eq!(
        one.local_rank_files().unwrap(),
        ["autotune_configs_dp0_rank0.json"]
    );

    let tp_nodes = p(&[
        "/m",
        "-tp",
        "4",
        "--nnodes",
        "2",
        "--node-rank=1",
        "--headless",
    ]);
    assert!(tp_nodes.headless);
    assert_eq!(tp_nodes.local_ranks(), Some(2..4));
    assert_eq!(
        tp_nodes.local_rank_files().unwrap(),
        [
            "autotune_configs_dp0_rank2.json",
            "autotune_configs_dp0_rank3.json"
        ]
    );

    let dp_head = p(&["/m", "-tp", "2", "-dp", "2", "-dpl", "1", "-ep"]);
    assert!(dp_head.expert_parallel);
    assert_eq!(dp_head.world(), Some(4));
    assert_eq!(dp_head.local_ranks(), Some(0..2));
    let dp_other = p(&[
        "/m",
        "-tp",
        "2",
        "-dp",
        "2",
        "-dpl",
        "1",
        "-dpr",
        "1",
        "--headless",
    ]);
    assert_eq!(
        dp_other.local_rank_files().unwrap(),
        [
            "autotune_configs_dp1_rank2.json",
            "autotune_configs_dp1_rank3.json"
        ]
    );
    let external = p(&[
        "/m",
        "--tensor_parallel_size",
        "2",
        "-dp",
        "4",
        "--data-parallel-rank",
        "3",
    ]);
    assert_eq!(external.local_ranks(), Some(6..8));
    let dp_all = p(&["/m", "-tp", "2", "-dp", "2"]);
    assert_eq!(dp_all.local_ranks(), Some(0..4));
}

#[test]
fn parallel_sizes_take_the_last_spelling_and_refuse_to_guess() {
    let p = |v: &[&str]| ParallelSizes::from_args(&os(v));
    // the last occurrence wins; a disabling spelling after -ep turns it off
    assert_eq!(p(&["-tp", "2", "-tp", "8"]).tp, Some(8));
    assert!(!p(&["-ep", "--no-enable-expert-parallel"]).expert_parallel);
    assert!(!p(&["-ep", "--disable-expert-parallel"]).expert_parallel);
    // unknown or inconsistent: no answer rather than a wrong one
    assert_eq!(p(&["-tp", "four"]).world(), None);
    assert_eq!(p(&["-tp", "3", "--nnodes", "2"]).local_ranks(), None);
    assert_eq!(
        p(&["-tp", "2", "--nnodes", "2", "-r", "2"]).local_ranks(),
        None
    );
    assert_eq!(p(&["-dp", "2", "-dpr", "1"]).local_ranks(), None);
    assert_eq!(
        p(&["-dp", "2", "-dpl", "2", "-dpr", "1"]).local_ranks(),
        None
    );
    assert_eq!(p(&["-tp", &u64::MAX.to_string(), "-pp", "2"]).world(), None);
}

#[test]
fn moe_decisions_are_conservative() {
    let m = |s: &str| moe_from_config(Some(s.as_bytes()));
    assert_eq!(
        m(r#"{"architectures": ["DeepseekV3ForCausalLM"], "n_routed_experts": 256}"#),
        Moe::Yes {
            key: "n_routed_experts".into(),
            experts: 256
        }
    );
    assert_eq!(
        m(r#"{"model_type": "llama4", "text_config": {"num_local_experts": 16}}"#),
        Moe::Yes {
            key: "text_config.num_local_experts".into(),
            experts: 16
        }
    );
    assert_eq!(
        m(r#"{"ffn_config": {"moe_num_experts": 16}}"#),
        Moe::Yes {
            key: "ffn_config.moe_num_experts".into(),
            experts: 16
        }
    );
    assert_eq!(
        m(r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 4096}"#),
        Moe::Dense
    );
    assert_eq!(
        m(r#"{"architectures": ["Qwen2ForCausalLM"], "num_experts": 0}"#),
        Moe::Dense
    );
    assert_eq!(
        m(r#"{"num_experts": null, "moe_intermediate_size": 0}"#),
        Moe::Dense
    );
    for unsure in [
        r#"{"num_experts": 1}"#,
        r#"{"moe_num_experts": [64, 64]}"#,
        r#"{"num_experts": "8"}"#,
        r#"{"num_experts_per_tok": 2}"#,
        r#"{"architectures": ["MixtralForCausalLM"]}"#,
        r#"{"model_type": "qwen3_moe"}"#,
        r#"[1, 2]"#,
        "not json",
        "",
    ] {
        let v = m(unsure);
        assert!(matches!(v, Moe::Unsure(_)), "{unsure}: {v:?}");
        assert!(v.treat_as_moe());
    }
    assert!(moe_from_config(None).treat_as_moe());
    assert!(!Moe::Dense.treat_as_moe());
    // nesting deeper than the scan looks is unsure, not dense
    let deep = [
        "{\"a\":".repeat(100),
        "{\"num_experts\": 8}".into(),
        "}".repeat(100),
    ]
    .concat();
    assert!(matches!(m(&deep), Moe::Unsure(_)), "{:?}", m(&deep));

    let dense = br#"{"architectures": ["LlamaForCausalLM"]}"#;
    assert_eq!(
        launch_moe(&os(&["/m", "-tp", "2"]), Some(dense)),
        Moe::Dense
    );
    assert!(launch_moe(&os(&["/m", "-tp", "2", "-ep"]), Some(dense)).treat_as_moe());
    assert!(launch_moe(
        &os(&["/m", "--hf-overrides", r#"{"num_experts": 8}"#]),
        Some(dense)
    )
    .treat_as_moe());
    assert!(launch_moe(&os(&["/m"]), None).treat_as_moe());
}

/// Arguments and values from vLLM's vocabulary and arbitrary bytes:
/// no function panics, and each answers within its own promises.
#[test]
fn no_panic_on_any_input() {
    use proptest::prelude::*;
    use proptest::test_runner::TestRunner;

    let word = prop_oneof![
        Just(b"vllm".to_vec()),
        Just(b"serve".to_vec()),
        Just(b"python3".to_vec()),
        Just(b"-m".to_vec()),
        Just(b"vllm.entrypoints.openai.api_server".to_vec()),
        Just(b"--port".to_vec()),
        Just(b"--api-key".to_vec()),
        Just(b"-r1".to_vec()),
        Just(b"--node_rank=".to_vec()),
        Just(b"-tp".to_vec()),
        Just(b"-dpl".to_vec()),
        Just(b"--nnodes".to_vec()),
        Just(b"~".to_vec()),
        Just(b"HOME".to_vec()),
        Just(b"VLLM_CACHE_ROOT".to_vec()),
        Just(b"VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR".to_vec()),
        Just(b"FLASHINFER_CUDA_ARCH_LIST".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..12),
    ];
    let argv = proptest::collection::vec(word, 0..10);
    let mut runner = TestRunner::default();
    runner
        .run(
            &(argv, proptest::collection::vec(any::<u8>(), 0..64)),
            |(argv, bytes)| {
                let argv: Vec<OsString> = argv.into_iter().map(OsString::from_vec).collect();
                if let Some(l) = recognise(&argv) {
                    prop_assert!(l.args_start <= argv.len());
                    let _ = (l.model(&argv), l.config_file(&argv));
                }
                prop_assert_eq!(arg_roles(&argv).len(), argv.len());
                let sizes = ParallelSizes::from_args(&argv);
                if let (Some(r), Some(w)) = (sizes.local_ranks(), sizes.world()) {
                    prop_assert!(r.start < r.end && r.end <= w);
                }
                let env: Vec<(OsString, OsString)> = argv
                    .chunks(2)
                    .map(|c| (c[0].clone(), c.get(1).cloned().unwrap_or_default()))
                    .collect();
                let _ = (
                    autotune_root(&env, &|_| None),
                    managed_store_root(&env, &|_| None),
                    arch_component(&env),
                );
                let text = String::from_utf8_lossy(&bytes);
                let _ = (file_kind(&text), layout_for_version(&text));
                let _ = launch_moe(&argv, Some(&bytes));
                Ok(())
            },
        )
        .unwrap();
}
