//! `scripts/gpu-check.sh --dry-run` on the CPU: the script's own logic, its parts in
//! scripts/gpu-check/ included (arguments, step bookkeeping and order, the budget by
//! construction and its skips, the server client's failure path and its peak rule, the
//! compiled steps' figures from made-up answers, the two files that come back, the exit
//! status, a failing step never stopping the next) is known to work before minutes on a GPU
//! are spent on it. Beside it, what the scripts must agree with in the code: every card whose
//! statements name a GPU step is run by id in that step, and the server client's byte rule is
//! protocol's. (The rehearsal, the real bundle on the CPU from a scratch copy, is a step of
//! scripts/test.sh: it needs the release binaries this test's build is making.)

use std::path::{Path, PathBuf};
use std::process::Command;

fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts")
}

/// Runs the dry run into `dir/out` (the returned folder) with its scratch files in
/// `dir/work`; the exit code, the returned summary and the names of the returned files.
fn dry_run(dir: &Path, fail: &str, clock: &str) -> (i32, serde_json::Value, Vec<String>) {
    let _ = std::fs::remove_dir_all(dir);
    let status = Command::new("bash")
        .arg(scripts().join("gpu-check.sh"))
        .arg("--dry-run")
        .arg(dir.join("out"))
        .env("GPU_CHECK_DRY_FAIL", fail)
        .env("GPU_CHECK_DRY_CLOCK", clock)
        .env("GPU_CHECK_WORK", dir.join("work"))
        .status()
        .expect("bash runs");
    let summary = std::fs::read_to_string(dir.join("out/summary.json")).expect("a summary");
    let mut files: Vec<String> = std::fs::read_dir(dir.join("out")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    files.sort();
    (status.code().unwrap_or(-1), serde_json::from_str(&summary).unwrap(), files)
}

fn steps(summary: &serde_json::Value) -> &Vec<serde_json::Value> {
    summary["steps"].as_array().unwrap()
}

fn column<'a>(summary: &'a serde_json::Value, key: &str) -> Vec<&'a str> {
    steps(summary).iter().map(|s| s[key].as_str().unwrap()).collect()
}

fn step<'a>(summary: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    steps(summary).iter().find(|s| s["name"] == name).unwrap_or_else(|| panic!("no step {name}"))
}

#[test]
fn the_dry_run_passes_and_a_failing_step_fails_the_check() {
    let dir = std::env::temp_dir().join(format!("gradless-gpu-check-{}", std::process::id()));
    let (code, summary, files) = dry_run(&dir.join("ok"), "", "");
    assert_eq!(code, 0, "{summary}");
    assert_eq!(summary["pass"], true);
    assert_eq!(summary["dry_run"], true);
    assert_eq!(
        column(&summary, "name"),
        ["unpack", "host", "facts", "generate", "cuda-tests", "cards", "compiled", "server-check", "more-cards", "tour", "compiled-cards", "peer-compare"],
        "what the host is, then generation, the tests by name and the cards by id, the compiled model; then what may be skipped"
    );
    assert_eq!(summary["complete"], true);
    // Six minutes by construction: the required steps' limits add up to at most 300 s, and
    // no optional step may end past the 360 s budget.
    let required: u64 = steps(&summary).iter().filter(|s| s["required"] == true).map(|s| s["limit_s"].as_u64().unwrap()).sum();
    assert!(required <= 300, "the required steps' limits add up to {required} s");
    assert_eq!(summary["budget_s"], 360);
    let names = column(&summary, "name");
    let first_optional = steps(&summary).iter().position(|s| s["required"] == false).unwrap();
    assert!(steps(&summary)[first_optional..].iter().all(|s| s["required"] == false), "required steps come first: {names:?}");
    // What comes back: two files, within the device machine's limits.
    assert_eq!(files, ["gpu-check-files.tar.gz", "summary.json"]);
    assert_eq!(summary["files"]["would_come_back_whole"], true, "{}", summary["files"]);
    let listed = Command::new("tar").arg("tzf").arg(dir.join("ok/out/gpu-check-files.tar.gz")).output().unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    for f in ["server-check.selftest.json", "cards.jsonl", "steps.jsonl", "summary.json"] {
        assert!(listed.lines().any(|l| l.trim_start_matches("./") == f), "{f} not in the tarball: {listed}");
    }
    // The server client met a stub that refuses every run, and said so instead of crashing;
    // its peak rule passed its own cases first.
    let server = step(&summary, "server-check");
    assert_eq!(server["status"], "pass", "{server}");
    assert!(server["detail"].as_str().unwrap().contains("refused runs"));
    let selftest = std::fs::read_to_string(dir.join("ok/work/server-check.selftest.json")).expect("the peak rule's cases ran");
    assert!(selftest.contains("\"wrong\": []"), "{selftest}");
    // The compiled step read its made-up report into its figures; the compiled-cards step
    // its card lines, and said why the reduce-overhead check (CUDA graphs) did not run.
    let compiled = step(&summary, "compiled");
    assert_eq!(compiled["status"], "pass", "{compiled}");
    for key in ["export_ms", "compile_ms", "subprocess_ms", "load_ms", "compiled_p50_ms", "eager_p50_ms", "max_abs_diff", "bitwise_equal", "package_bytes"] {
        assert!(!compiled["figures"][key].is_null(), "no {key} in {}", compiled["figures"]);
    }
    let cards = step(&summary, "compiled-cards");
    assert_eq!(cards["status"], "pass", "{cards}");
    assert_eq!(cards["figures"]["cards"], 5, "{cards}");
    assert!(cards["figures"]["reduce_overhead"]["skipped"].as_str().unwrap().contains("GPU"), "{cards}");
    assert!(cards["detail"].as_str().unwrap().contains("CUDA graphs need a GPU"), "{cards}");

    // A failing step fails the check and stops no other step; and with the clock advanced
    // by each step's limit, the optional steps that could end past the budget are skipped
    // and said so, which fails nothing (`failed` names the failed steps alone).
    let (code, summary, _) = dry_run(&dir.join("fail"), "facts,cards,peer-compare", "limits");
    assert_ne!(code, 0);
    assert_eq!(summary["pass"], false);
    assert_eq!(
        column(&summary, "status"),
        ["pass", "pass", "fail", "pass", "pass", "fail", "pass", "pass", "skipped", "skipped", "skipped", "fail"],
        "{summary}"
    );
    assert_eq!(summary["failed"], serde_json::json!(["facts", "cards", "peer-compare"]));
    for skipped in ["more-cards", "tour", "compiled-cards"] {
        assert!(step(&summary, skipped)["detail"].as_str().unwrap().contains("360s budget"), "{summary}");
    }
    assert_eq!(summary["skipped"].as_array().unwrap().len(), 3);

    // Without OUT_DIR: usage, exit 2.
    let usage = Command::new("bash").arg(scripts().join("gpu-check.sh")).output().unwrap();
    assert_eq!(usage.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&usage.stderr).contains("Usage"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The cards a step of the GPU check runs by id: `CARDS_STEP_<step>="a,b,..."` (a `-` of
/// the step's name as `_`) in one of scripts/gpu-check/*.sh.
fn cards_of_step(step: &str) -> Option<Vec<String>> {
    let var = format!("CARDS_STEP_{}=\"", step.replace('-', "_"));
    for entry in std::fs::read_dir(scripts().join("gpu-check")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default();
        if let Some(at) = text.find(&var) {
            let rest = &text[at + var.len()..];
            return Some(rest[..rest.find('"').unwrap()].split(',').map(str::to_string).collect());
        }
    }
    None
}

#[test]
fn every_card_whose_statement_names_a_gpu_step_runs_by_id_in_that_step() {
    let script = std::fs::read_to_string(scripts().join("gpu-check.sh")).unwrap();
    let mut named = 0;
    for card in engine::pitfalls::CARDS {
        for said in card.statements {
            if let engine::pitfalls::How::Source { gpu_step, .. } = said.known {
                assert!(script.contains(&format!("\"{gpu_step} ")), "{}: its statement names the GPU step `{gpu_step}`, which scripts/gpu-check.sh has not", card.id);
                let cards = cards_of_step(gpu_step).unwrap_or_else(|| panic!("{}: the step `{gpu_step}` runs no cards by id (no CARDS_STEP_ list)", card.id));
                assert!(cards.iter().any(|c| c == card.id), "{}: its statement `{}` says the `{gpu_step}` step measures it, which does not run it ({cards:?})", card.id, said.text);
                named += 1;
            }
        }
    }
    assert!(named > 0);
    // Every card a step lists is a card.
    for step in ["cards", "more-cards", "compiled-cards"] {
        for id in cards_of_step(step).expect("a list") {
            assert!(engine::pitfalls::card(&id).is_some(), "the `{step}` step runs `{id}`, which is no card");
        }
    }
}

#[test]
fn the_server_clients_byte_rule_is_protocols() {
    // scripts/gpu-check/server_client.py keeps a copy of protocol::bytes_rule's constants
    // (Python cannot import them): they are the same numbers.
    let client = std::fs::read_to_string(scripts().join("gpu-check/server_client.py")).unwrap();
    let constant = |name: &str| -> String {
        let line = client.lines().find(|l| l.starts_with(&format!("{name} = "))).unwrap_or_else(|| panic!("no {name} in server_client.py"));
        line.split_once(" = ").unwrap().1.trim().to_string()
    };
    assert_eq!(constant("SAME_BYTES_WITHIN").parse::<f64>().unwrap(), protocol::SAME_BYTES_WITHIN);
    assert_eq!(constant("CUDA_PEAK_FLOOR"), "2 * (1 << 20)");
    assert_eq!(protocol::bytes_rule::CUDA_PEAK_FLOOR, 2 * (1 << 20));
}
