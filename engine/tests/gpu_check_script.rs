//! `scripts/gpu-check.sh --dry-run` on the CPU: the script's own logic, its parts in
//! scripts/gpu-check/ included (arguments, step bookkeeping and order, the nine-minute
//! budget, the server client's failure path and its peak rule, the compiled step's figures
//! from made-up answers, the one JSON summary, the exit status, a failing step never
//! stopping the next) is known to work before minutes on a GPU are spent on it.
//! (The rehearsal, the real bundle on the CPU from a scratch copy, is a step of
//! scripts/test.sh: it needs the release binaries this test's build is making.)

use std::path::{Path, PathBuf};
use std::process::Command;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/gpu-check.sh")
}

fn dry_run(out: &Path, fail: &str) -> (i32, serde_json::Value) {
    let status = Command::new("bash")
        .arg(script())
        .arg("--dry-run")
        .arg(out)
        .env("GPU_CHECK_DRY_FAIL", fail)
        .status()
        .expect("bash runs");
    let summary = std::fs::read_to_string(out.join("summary.json")).expect("a summary");
    (
        status.code().unwrap_or(-1),
        serde_json::from_str(&summary).unwrap(),
    )
}

#[test]
fn the_dry_run_passes_and_a_failing_step_fails_the_check() {
    let dir = std::env::temp_dir().join(format!("gradless-gpu-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (code, summary) = dry_run(&dir.join("ok"), "");
    assert_eq!(code, 0, "{summary}");
    assert_eq!(summary["pass"], true);
    assert_eq!(summary["dry_run"], true);
    let names: Vec<&str> = summary["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "unpack",
            "host",
            "facts",
            "generate",
            "cuda-tests",
            "pitfalls",
            "server-check",
            "compiled",
            "peer-compare"
        ],
        "what the host is first, then generation, before the tests (issue 54); the compiled model before the peer"
    );
    assert_eq!(summary["complete"], true);
    // Nine minutes by construction: the steps' own limits add up to at most 540 s, inside a
    // 15-minute visit with the machine's start and the transfers.
    let limits: u64 = summary["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["limit_s"].as_u64().unwrap())
        .sum();
    assert!(limits <= 540, "the steps' limits add up to {limits} s");
    // The server client met a stub that refuses every run, and said so instead of crashing;
    // its peak rule (a graph run's replays against its eager traced pass and twin) passed
    // its own cases first.
    let server = &summary["steps"][6];
    assert_eq!(server["status"], "pass", "{server}");
    assert!(server["detail"].as_str().unwrap().contains("refused runs"));
    let selftest = std::fs::read_to_string(dir.join("ok/server-check.selftest.json")).expect("the peak rule's cases ran");
    assert!(selftest.contains("\"wrong\": []"), "{selftest}");
    // The compiled step (at most 180 s on a GPU) read its made-up report and card lines into
    // its figures, and said why the reduce-overhead check (CUDA graphs) did not run.
    let compiled = &summary["steps"][7];
    assert_eq!(compiled["status"], "pass", "{compiled}");
    assert!(compiled["limit_s"].as_u64().unwrap() <= 180, "{compiled}");
    let figures = &compiled["figures"];
    for key in ["export_ms", "compile_ms", "subprocess_ms", "load_ms", "compiled_p50_ms", "eager_p50_ms", "max_abs_diff", "bitwise_equal", "package_bytes"] {
        assert!(!figures[key].is_null(), "no {key} in {figures}");
    }
    assert_eq!(figures["cards"], 5, "{figures}");
    assert!(figures["reduce_overhead"]["skipped"].as_str().unwrap().contains("GPU"), "{figures}");
    assert!(compiled["detail"].as_str().unwrap().contains("CUDA graphs need a GPU"), "{compiled}");

    // A failing step fails the check and stops no other step.
    let (code, summary) = dry_run(&dir.join("fail"), "facts,pitfalls");
    assert_ne!(code, 0);
    assert_eq!(summary["pass"], false);
    let status: Vec<&str> = summary["steps"].as_array().unwrap().iter().map(|s| s["status"].as_str().unwrap()).collect();
    assert_eq!(status, ["pass", "pass", "fail", "pass", "pass", "fail", "pass", "pass", "pass"], "{summary}");

    // Without OUT_DIR: usage, exit 2.
    let usage = Command::new("bash").arg(script()).output().unwrap();
    assert_eq!(usage.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&usage.stderr).contains("Usage"));
    let _ = std::fs::remove_dir_all(&dir);
}
