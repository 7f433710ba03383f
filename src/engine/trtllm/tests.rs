use super::*;

fn launch(argv: &[&str], env: &[(&str, &str)]) -> Launch {
    Launch::auto(argv, env)
}

#[test]
fn the_engine_is_told_keepwraps_file_over_its_own() {
    let l = launch(&["trtllm-serve", "m"], &[("HOME", "/h")]);
    let want = PathBuf::from("/h/.cache/keepwrap/trtllm/autotune/autotuner_cache.json");
    assert_eq!(
        Trtllm.engine_env(&l, None),
        vec![(OsString::from(CACHE_VAR), want.clone().into_os_string())]
    );
    let l = launch(
        &["trtllm-serve", "m"],
        &[("HOME", "/h"), (CACHE_VAR, "/mine/x.json")],
    );
    assert_eq!(theirs(&l, &want), Some(PathBuf::from("/mine/x.json")));
    assert_eq!(Trtllm.engine_env(&l, None).len(), 1);
    // already keepwrap's: nothing to set
    let w = want.to_str().unwrap();
    let l = launch(&["trtllm-serve", "m"], &[("HOME", "/h"), (CACHE_VAR, w)]);
    assert!(Trtllm.engine_env(&l, None).is_empty());
    // --cache-dir
    let l = launch(&["trtllm-serve", "m"], &[]);
    assert_eq!(
        Trtllm.engine_env(&l, Some(Path::new("/c")))[0].1,
        OsString::from("/c/autotune/autotuner_cache.json")
    );
}

#[test]
fn done_is_the_first_200_of_health_on_the_launchs_port() {
    let done = |argv: &[&str]| Trtllm.server_done(&launch(argv, &[]));
    let health = |host: &str, port: u16| {
        Some(Ok(Done::Health(Endpoint {
            host: host.into(),
            port,
            path: "/health".into(),
            tls: false,
        })))
    };
    assert_eq!(done(&["trtllm-serve", "m"]), health("127.0.0.1", 8000));
    assert_eq!(
        done(&[
            "trtllm-serve",
            "serve",
            "m",
            "--host",
            "localhost",
            "--port=9000"
        ]),
        health("127.0.0.1", 9000)
    );
    assert_eq!(
        done(&["trtllm-serve", "m", "--host", "0.0.0.0", "--port", "8001"]),
        health("127.0.0.1", 8001)
    );
    assert_eq!(done(&["python3", "bench.py"]), None);
}
