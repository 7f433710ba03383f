//! `examples/demo.sh`: it says it builds before building, shows keepwrap's
//! lines of each boot, and keeps its logs where it says.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use common::{output, output_within, repo, BIN};

/// What one boot of a demo may take on a loaded 2-core machine (a Python
/// fake engine's start, its tuning at TUNE_MS=2, keepwrap's sign): each
/// demo's deadline is its boots times this.
const BOOT: Duration = Duration::from_secs(30);

fn demo() -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(repo().join("examples/demo.sh"))
        .env_remove("KEEPWRAP_BIN")
        .env_remove("DEMO_DIR")
        .env_remove("SGLANG_CACHE_DIR");
    common::without_keepwrap_env(&mut cmd);
    cmd
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn the_demo_keeps_its_logs_and_shows_keepwraps_lines_of_each_boot() {
    let dir = tempfile::tempdir().unwrap();
    // Three boots.
    let f = output_within(
        demo()
            .env("KEEPWRAP_BIN", BIN)
            .env("DEMO_DIR", dir.path())
            .env("TUNE_MS", "2"),
        BOOT * 3,
    );
    assert_eq!(f.code, 0, "{}\n{}", f.stdout.join("\n"), f.stderr);
    let out = f.stdout.join("\n");
    let where_ = dir.path().canonicalize().unwrap();
    assert!(
        f.stderr.contains(&format!(
            "demo: logs and cache in {} (kept)",
            where_.display()
        )),
        "{}",
        f.stderr
    );
    // keepwrap's lines, boot by boot, each naming its log.
    let sections: Vec<&str> = out.split("== boot ").skip(1).collect();
    assert_eq!(sections.len(), 3, "{out}");
    for (i, s) in sections.iter().enumerate() {
        let log = where_.join(format!("boot{}.log", i + 1));
        assert!(
            s.contains(&format!("all of it in {}", log.display())),
            "{s}"
        );
        assert!(s.contains("\nkeepwrap: launch fingerprint "), "{s}");
        assert!(s.contains("\nkeepwrap: prune: "), "{s}");
        // The log is kept, with keepwrap's lines and the engine's output.
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("keepwrap: launch fingerprint "), "{text}");
    }
    assert!(sections[0].contains("\nkeepwrap: tuned and signed 4 cache files"));
    assert!(sections[1].contains("\nkeepwrap: reused 4 cache files signed for this launch"));
    assert!(sections[2].contains("differs in: arg --chunked-prefill-size 2048 -> 4096"));
    // The table, after the boots.
    let rows: Vec<&String> = f
        .stdout
        .iter()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| boot"))
        .collect();
    assert_eq!(rows.len(), 3, "{out}");
    assert!(
        rows[0].starts_with("| 1 (cold) | 2048 | 108 |")
            && rows[0].ends_with("| tuned and signed 4 cache files |"),
        "{}",
        rows[0]
    );
    assert!(
        rows[1].starts_with("| 2 (same launch) | 2048 | 0 |")
            && rows[1].ends_with("| reused 4 cache files signed for this launch |"),
        "{}",
        rows[1]
    );
    assert!(
        rows[2].starts_with("| 3 (changed) | 4096 |")
            && rows[2].ends_with("| tuned and signed 4 cache files |"),
        "{}",
        rows[2]
    );
    assert!(
        out.contains(&format!(
            "demo: logs in {}/boot{{1,2,3}}.log",
            where_.display()
        )),
        "{out}"
    );
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn the_demo_says_it_is_building_before_the_build() {
    // A `cargo` that only says it ran and fails: the demo stops there.
    let bin = tempfile::tempdir().unwrap();
    let cargo = bin.path().join("cargo");
    std::fs::write(&cargo, "#!/bin/sh\necho 'cargo ran' >&2\nexit 1\n").unwrap();
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let f = output(demo().env("PATH", path));
    assert_ne!(f.code, 0, "{}", f.stderr);
    let building = f.stderr.find("demo: building keepwrap").expect(&f.stderr);
    let ran = f.stderr.find("cargo ran").expect(&f.stderr);
    assert!(building < ran, "{}", f.stderr);
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn the_vllm_demo_reuses_restores_and_never_hangs() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new("bash");
    cmd.arg(repo().join("examples/demo-vllm.sh"));
    common::without_keepwrap_env(&mut cmd);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("VLLM_") || k.starts_with("FAKE_") || k.starts_with("FLASHINFER_") {
            cmd.env_remove(k);
        }
    }
    // Seven boots.
    let f = output_within(
        cmd.env("KEEPWRAP_BIN", BIN)
            .env("DEMO_DIR", dir.path())
            .env("TUNE_MS", "2")
            .env("KEEPWRAP_PROBE_INTERVAL", "50ms"),
        BOOT * 7,
    );
    assert_eq!(f.code, 0, "{}\n{}", f.stdout.join("\n"), f.stderr);
    let out = f.stdout.join("\n");
    let sections: Vec<&str> = out.split("== boot ").skip(1).collect();
    assert_eq!(sections.len(), 7, "{out}");
    for s in &sections[..6] {
        assert!(s.contains("\nkeepwrap: launch fingerprint "), "{s}");
        assert!(s.contains("(vllm profile)"), "{s}");
    }
    assert!(
        sections[3].contains("\nkeepwrap: restored 2 cache files of this launch from the store")
    );
    assert!(sections[5].contains("hangs every warm boot of a MoE model"));
    let rows: Vec<&String> = f
        .stdout
        .iter()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| boot"))
        .collect();
    assert_eq!(rows.len(), 7, "{out}");
    let starts = [
        "| 1 (cold) | 0.33.0 | (unset) | 48 |",
        "| 2 (same launch) | 0.33.0 | (unset) | 0 |",
        "| 3 (VLLM_* changed) | 0.33.0 | latency | 48 |",
        "| 4 (back to boot 1) | 0.33.0 | (unset) | 0 |",
        "| 5 (cold) | 0.31.0 | (unset) | 48 |",
        "| 6 (warm) | 0.31.0 | (unset) | 48 |",
        "| 7 (warm, --disable) | 0.31.0 | (unset) | - | exit 89: hung |",
    ];
    for (row, start) in rows.iter().zip(starts) {
        assert!(row.starts_with(start), "{row}");
    }
    assert!(rows[1].ends_with("| reused 2 cache files signed for this launch |"));
    assert!(
        rows[4].ends_with("| this launch keeps nothing |"),
        "{}",
        rows[4]
    );
    assert!(
        rows[5].ends_with("| this launch keeps nothing |"),
        "{}",
        rows[5]
    );
    assert!(rows[3].ends_with("| reused 2 cache files signed for this launch |"));
}
