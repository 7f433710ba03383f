use super::*;
use crate::engine::fingerprint::{Launch, ProfileName};

fn os(words: &[&str]) -> Vec<OsString> {
    words.iter().map(OsString::from).collect()
}

fn launch(argv: &[&str], env: &[(&str, &str)]) -> Launch {
    Launch::auto(argv, env)
}

#[test]
fn both_spellings_of_the_server_are_recognised() {
    assert_eq!(
        recognise(&os(&["trtllm-serve", "m"])),
        Some(Recognised {
            serve_at: 0,
            args_start: 1
        })
    );
    assert_eq!(
        recognise(&os(&["/usr/local/bin/trtllm-serve", "serve", "m"])),
        Some(Recognised {
            serve_at: 0,
            args_start: 2
        })
    );
    assert_eq!(
        recognise(&os(&["trtllm-serve", "disaggregated", "-c", "x"])),
        None
    );
    assert_eq!(recognise(&os(&["trtllm-bench", "m"])), None);
    // behind the launchers of a multi-node launch
    let mpi = [
        "mpirun",
        "-n",
        "2",
        "trtllm-llmapi-launch",
        "trtllm-serve",
        "serve",
        "m",
    ];
    assert_eq!(
        recognise(&os(&mpi)),
        Some(Recognised {
            serve_at: 4,
            args_start: 6
        })
    );
    assert_eq!(
        recognise(&os(&["srun", "trtllm-llmapi-launch", "trtllm-serve", "m"])).map(|r| r.serve_at),
        Some(2)
    );
    for not in [
        &["mpirun", "-n", "2", "trtllm-serve", "m"][..],
        &["mpirun", "trtllm-llmapi-launch", "python3", "x.py"],
        &["trtllm-llmapi-launch"],
        &["srun"],
        &[
            "mpirun",
            "trtllm-llmapi-launch",
            "trtllm-serve",
            "rerank",
            "m",
        ],
    ] {
        assert_eq!(recognise(&os(not)), None, "{not:?}");
    }
    assert_eq!(recognise(&os(&["vllm", "serve", "m"])), None);
    let l = launch(&["trtllm-serve", "serve", "m", "--tp_size", "2"], &[]);
    assert_eq!(l.profile(), ProfileName::Trtllm);
    assert!(l.trtllm().is_some());
    // behind env and a shell string
    let l = launch(&["sh", "-c", "exec trtllm-serve m --tp_size 2"], &[]);
    assert_eq!(l.profile(), ProfileName::Trtllm);
}

#[test]
fn the_fingerprint_holds_what_shapes_tuning_and_not_the_front_end() {
    let fp = |argv: &[&str], env: &[(&str, &str)]| launch(argv, env).fingerprint().clone();
    let base = fp(&["trtllm-serve", "m", "--tp_size", "2"], &[]);
    // the two spellings of the command, and of an option, are one launch
    assert_eq!(
        base,
        fp(&["trtllm-serve", "serve", "m", "--tp_size=2"], &[])
    );
    // the front end is not
    assert_eq!(
        base,
        fp(
            &[
                "trtllm-serve",
                "m",
                "--tp_size",
                "2",
                "--host",
                "0.0.0.0",
                "--port=9000",
                "--served_model_name",
                "x",
                "--log_level",
                "debug"
            ],
            &[
                ("TLLM_LOG_LEVEL", "DEBUG"),
                ("TLLM_AUTOTUNER_CACHE_PATH", "/x.json")
            ]
        )
    );
    // what shapes tuning is
    for other in [
        &["trtllm-serve", "m2", "--tp_size", "2"][..],
        &["trtllm-serve", "m", "--tp_size", "4"],
        &[
            "trtllm-serve",
            "m",
            "--tp_size",
            "2",
            "--max_batch_size",
            "64",
        ],
        &[
            "trtllm-serve",
            "m",
            "--tp_size",
            "2",
            "--max_num_tokens",
            "4096",
        ],
        &[
            "trtllm-serve",
            "m",
            "--tp_size",
            "2",
            "--max_seq_len",
            "4096",
        ],
        &[
            "trtllm-serve",
            "m",
            "--tp_size",
            "2",
            "--backend",
            "pytorch",
        ],
        &["trtllm-serve", "m", "--tp_size", "2", "--ep_size", "2"],
    ] {
        assert_ne!(base, fp(other, &[]), "{other:?}");
    }
    assert_ne!(
        base,
        fp(
            &["trtllm-serve", "m", "--tp_size", "2"],
            &[("TRTLLM_DSV4_MEM_OPTS", "1")]
        )
    );
    assert_ne!(
        base,
        fp(
            &["trtllm-serve", "m", "--tp_size", "2"],
            &[("TLLM_AUTOTUNER_DISABLE_SHORT_PROFILE", "1")]
        )
    );
}

#[test]
fn the_yaml_counts_by_its_bytes_not_its_path() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = (t.path().join("a.yaml"), t.path().join("b.yaml"));
    std::fs::write(&a, "enable_autotuner: true\n").unwrap();
    std::fs::write(&b, "enable_autotuner: true\n").unwrap();
    let fp = |p: &Path| {
        let p = p.to_str().unwrap();
        launch(&["trtllm-serve", "m", "--extra_llm_api_options", p], &[])
            .fingerprint()
            .clone()
    };
    let first = fp(&a);
    assert_eq!(first, fp(&b));
    std::fs::write(&b, "cuda_graph_config:\n  max_batch_size: 16\n").unwrap();
    assert_ne!(first, fp(&b));
    // unreadable: recorded as such, never panics
    let l = launch(
        &[
            "trtllm-serve",
            "m",
            "--extra_llm_api_options=/nonexistent.yaml",
        ],
        &[],
    );
    assert!(l.explain().contains("unreadable"), "{}", l.explain());
}

#[test]
fn sizes_and_world() {
    let s = sizes(&os(&[
        "m",
        "--tp_size",
        "4",
        "--pp_size=2",
        "--ep_size",
        "4",
    ]));
    assert_eq!(
        (s.tp, s.pp, s.ep, s.world),
        (Some(4), Some(2), Some(4), Some(8))
    );
    assert_eq!(sizes(&os(&["m"])).world, Some(1));
    assert_eq!(sizes(&os(&["m", "--tp_size", "x"])).world, None);
    assert_eq!(sizes(&os(&["m", "--tp_size", "0"])).world, None);
    assert_eq!(
        sizes(&os(&["m", "--extra_llm_api_options", "f.yaml"])).world,
        None
    );
}

#[test]
fn attention_dp_from_the_yaml() {
    assert!(attention_dp("enable_attention_dp: true\n"));
    assert!(attention_dp("x: 1\nenable_attention_dp: True  # on\n"));
    assert!(!attention_dp("enable_attention_dp: false\n"));
    assert!(!attention_dp("  enable_attention_dp: true\n"));
    assert!(!attention_dp(""));
}

#[test]
fn attention_dp_from_the_switch() {
    assert!(attention_dp_flag(&os(&["m", "--enable_attention_dp"])));
    assert!(attention_dp_flag(&os(&["m", "--enable_attention_dp=True"])));
    assert!(!attention_dp_flag(&os(&[
        "m",
        "--enable_attention_dp=false"
    ])));
    assert!(!attention_dp_flag(&os(&["m", "--enable_attention_dpx"])));
    assert!(!attention_dp_flag(&os(&["m"])));
}

#[test]
fn config_is_the_yamls_other_name() {
    assert_eq!(sizes(&os(&["m", "--config", "f.yaml"])).world, None);
    let both = os(&["m", "--config", "a.yaml", "--extra_llm_api_options=b.yaml"]);
    assert_eq!(extra_options(&both), Some(std::ffi::OsStr::new("b.yaml")));
}

#[test]
fn layouts_by_release() {
    assert_eq!(layout_for_version("1.0.0rc4"), Some(Layout::None));
    assert_eq!(layout_for_version("1.1.0"), Some(Layout::PerRank));
    assert_eq!(layout_for_version("1.2.0rc2"), Some(Layout::PerRank));
    assert_eq!(layout_for_version("1.2.0"), Some(Layout::File));
    assert_eq!(layout_for_version("1.2.1"), Some(Layout::File));
    assert_eq!(layout_for_version("1.3.0rc19"), Some(Layout::FileAtomic));
    assert_eq!(layout_for_version("1.4.0"), Some(Layout::FileAtomic));
    assert_eq!(layout_for_version("x"), None);
    assert_eq!(layout_for_version(""), None);
}

#[test]
fn gpu_models_as_the_driver_shows_them() {
    let t = tempfile::tempdir().unwrap();
    assert!(models_shown(&t.path().join("none")).is_err());
    for (bus, model) in [
        ("0000:18:00.0", "NVIDIA  H100 80GB HBM3"),
        ("0000:2a:00.0", "NVIDIA H100 80GB HBM3"),
    ] {
        std::fs::create_dir_all(t.path().join(bus)).unwrap();
        std::fs::write(
            t.path().join(bus).join("information"),
            format!("Model: \t {model}\nIRQ: 17\n"),
        )
        .unwrap();
    }
    assert_eq!(models_shown(t.path()).unwrap(), "NVIDIA H100 80GB HBM3");
    std::fs::create_dir_all(t.path().join("0000:3b:00.0")).unwrap();
    std::fs::write(
        t.path().join("0000:3b:00.0/information"),
        "Model: NVIDIA L40S\n",
    )
    .unwrap();
    assert_eq!(
        models_shown(t.path()).unwrap(),
        "NVIDIA H100 80GB HBM3, NVIDIA L40S"
    );
}
