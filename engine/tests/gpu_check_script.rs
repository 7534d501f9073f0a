//! `scripts/gpu-check.sh --dry-run` on the CPU: the script's own logic (arguments, step
//! bookkeeping, the five-minute budget, the server client's failure path, the one JSON
//! summary, the exit status) is known to work before minutes on a GPU are spent on it.
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
            "cuda-tests",
            "pitfalls",
            "server-check",
            "generate",
            "peer-compare"
        ]
    );
    // Five minutes by construction: the steps' own limits add up to at most 300 s.
    let limits: u64 = summary["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["limit_s"].as_u64().unwrap())
        .sum();
    assert!(limits <= 300, "the steps' limits add up to {limits} s");
    // The server client met a stub that refuses every run, and said so instead of crashing.
    let server = &summary["steps"][4];
    assert_eq!(server["status"], "pass", "{server}");
    assert!(server["detail"].as_str().unwrap().contains("refused runs"));

    let (code, summary) = dry_run(&dir.join("fail"), "pitfalls");
    assert_ne!(code, 0);
    assert_eq!(summary["pass"], false);
    assert_eq!(summary["steps"][3]["status"], "fail");
    assert_eq!(summary["steps"][2]["status"], "pass");

    // Without OUT_DIR: usage, exit 2.
    let usage = Command::new("bash").arg(script()).output().unwrap();
    assert_eq!(usage.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&usage.stderr).contains("Usage"));
    let _ = std::fs::remove_dir_all(&dir);
}
