//! The `gradless` binary as a script would use it: `measure --json` gives a report, and
//! `runs list/show/export` read what a server recorded, with readable errors.

use std::process::{Command, Output};

use protocol::{Record, RecordBody, RecordSummary, Report};

fn gradless(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gradless"))
        .args(args)
        .output()
        .expect("run gradless")
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "gradless failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn recorded_runs_are_listed_shown_and_exported() {
    let dir = std::env::temp_dir().join(format!("gradless-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("runs.sqlite3");
    let db = db.to_str().unwrap();

    // No database yet: a sentence, not a panic, and a failing exit status.
    let o = gradless(&["runs", "list", "--db", db]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no run database"),
        "{o:?}"
    );

    // A real run, recorded the way the server records it.
    let out = stdout(&gradless(&[
        "measure",
        "--json",
        "--model",
        "tiny_mlp",
        "--batch",
        "2",
        "--warmup",
        "1",
        "--iters",
        "3",
        "--default-threads",
        "1",
    ]));
    let report: Report = serde_json::from_str(&out).unwrap();
    let id = "00000000000000c1";
    let store = server::store::Store::open(std::path::Path::new(db)).unwrap();
    store
        .save(&Record {
            id: id.into(),
            body: RecordBody::Run(Box::new(report.clone())),
        })
        .unwrap();
    store.close();

    let table = stdout(&gradless(&["runs", "list", "--db", db]));
    assert!(
        table.contains(id) && table.contains("tiny_mlp · eval · enabled · batch 2"),
        "{table}"
    );
    let list: Vec<RecordSummary> =
        serde_json::from_str(&stdout(&gradless(&["runs", "list", "--db", db, "--json"]))).unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].p50_ms, Some(report.latency_ms.p50));

    let shown: Record = serde_json::from_str(&stdout(&gradless(&[
        "runs", "show", id, "--db", db, "--json",
    ])))
    .unwrap();
    assert_eq!(shown.run(), Some(&report));
    assert!(stdout(&gradless(&["runs", "show", id, "--db", db])).contains("p50"));

    let csv_path = dir.join("run.csv");
    stdout(&gradless(&[
        "runs",
        "export",
        id,
        "--db",
        db,
        "--format",
        "csv",
        "-o",
        csv_path.to_str().unwrap(),
    ]));
    let csv = std::fs::read_to_string(&csv_path).unwrap();
    assert_eq!(csv.lines().count(), 1 + 1 + 3);
    let script = stdout(&gradless(&[
        "runs", "export", id, "--db", db, "--format", "py",
    ]));
    // The recorded run's arguments, in the settings table's order: what matters is that
    // each is there.
    let recorded = script.lines().find(|l| l.starts_with("RECORDED_ARGS = [")).unwrap_or_default();
    for arg in ["\"--model=tiny_mlp\"", "\"--batch=2\""] {
        assert!(recorded.contains(arg), "{arg} in {recorded}");
    }

    for (args, says) in [
        (
            vec!["runs", "show", "ffffffffffffffff", "--db", db],
            "no recorded run",
        ),
        (
            vec!["runs", "export", id, "--db", db, "--format", "xml"],
            "unknown export format",
        ),
    ] {
        let o = gradless(&args);
        assert!(!o.status.success(), "{args:?}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(says),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `gradless pitfall all`: every card asked for, in this one process, in the order asked;
/// `--json` one array of outcomes with each card's report, `--jsonl` one line per card;
/// a card that is not in the catalogue, or a per-card option, is refused by name.
#[test]
fn every_card_in_one_process() {
    let o = gradless(&["pitfall", "all", "--device", "cpu", "--only", "kv-cache-size,gqa", "--json"]);
    let outcomes: Vec<serde_json::Value> = serde_json::from_str(&stdout(&o)).unwrap();
    let ids: Vec<&str> = outcomes.iter().map(|o| o["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["kv-cache-size", "gqa"]);
    for o in &outcomes {
        let report: protocol::PitfallReport = serde_json::from_value(o["report"].clone()).unwrap();
        assert_eq!(report.id, o["id"].as_str().unwrap());
        // Both are decided by exact bytes: on any device they confirm.
        assert_eq!(report.verdict, protocol::Verdict::Confirmed, "{}", report.reason);
        assert!(o["seconds"].as_f64().unwrap() > 0.0);
    }
    let o = gradless(&["pitfall", "all", "--device", "cpu", "--only", "gqa", "--jsonl"]);
    let lines: Vec<&str> = std::str::from_utf8(&o.stdout).unwrap().lines().collect();
    assert!(o.status.success() && lines.len() == 1, "{lines:?}");
    for (args, says) in [
        (&["pitfall", "all", "--only", "gqa,nope"][..], "--only: unknown pitfall `nope`"),
        (&["pitfall", "all", "--batch", "4"][..], "--model and --batch apply to one card (`gradless pitfall ID --model ...`) or to the cards --only names"),
    ] {
        let o = gradless(args);
        assert!(!o.status.success(), "{args:?}");
        assert!(String::from_utf8_lossy(&o.stderr).contains(says), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
}

/// `gradless pitfall list --device cuda`: the cards as a GPU server lists them, on this
/// machine whatever it has (docs/questions.md is written from it on a CPU). A CUDA-only
/// card says "not here" in the CPU's view and not in the GPU's; every card's setup names the
/// device it describes; each card carries its answer controls in the page's words.
#[test]
fn the_cards_are_listed_as_a_named_device_shows_them() {
    let list = |device: &str| -> Vec<serde_json::Value> {
        serde_json::from_str(&stdout(&gradless(&["pitfall", "list", "--json", "--device", device]))).unwrap()
    };
    let (cuda, cpu) = (list("cuda"), list("cpu"));
    let ids = |cards: &[serde_json::Value]| cards.iter().map(|c| c["id"].as_str().unwrap().to_string()).collect::<Vec<_>>();
    assert_eq!(ids(&cuda), ids(&cpu));
    let card = |cards: &[serde_json::Value], id: &str| cards.iter().find(|c| c["id"] == id).unwrap().clone();
    // cuda-graphs needs a GPU: the CPU's view says so before the lock-in, the GPU's does not.
    assert!(card(&cpu, "cuda-graphs")["not_here"].as_str().is_some_and(|w| !w.is_empty()));
    assert!(card(&cuda, "cuda-graphs").get("not_here").is_none());
    assert!(cuda.iter().all(|c| c.get("not_here").is_none()));
    let last = |c: &serde_json::Value| c["setup"].as_array().unwrap().last().unwrap().as_str().unwrap().to_string();
    assert!(cuda.iter().all(|c| last(c) == "Device: this server's CUDA GPU"));
    assert!(cpu.iter().all(|c| last(c) == "Device: this server's CPU"));
    // The answer controls: a log-scale slider's ends, or the choices, and when it is right.
    for c in &cuda {
        let q = serde_json::from_value::<protocol::PitfallInfo>(c.clone()).unwrap().question;
        let answer = &c["answer"];
        assert_eq!(answer["counted_right"], q.tolerance(), "{}", c["id"]);
        match q.ask {
            protocol::Ask::LogScale { min, max, .. } | protocol::Ask::Bytes { min, max, .. } => {
                assert_eq!(answer["scale"]["from"], q.format(min), "{}", c["id"]);
                assert_eq!(answer["scale"]["to"], q.format(max), "{}", c["id"]);
                assert!(answer.get("choices").is_none());
            }
            protocol::Ask::YesNo => assert_eq!(answer["choices"], serde_json::json!(["yes", "no"])),
            _ => assert_eq!(answer["choices"], serde_json::json!(["lower", "about the same", "higher"])),
        }
    }
}

/// `serve --device`: a GPU that libtorch does not find stops the start with the reason (on
/// a machine without one, as CI is; on a GPU host the machine's last index plus one would
/// be the case), a bad value is refused by name, and a front refuses a device of its own.
#[test]
fn serve_names_the_device_it_cannot_use() {
    let dir = std::env::temp_dir().join(format!("gradless-cli-device-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("runs.sqlite3");
    let db = db.to_str().unwrap();
    let serve = |extra: &[&str]| {
        let mut args = vec!["serve", "--addr", "127.0.0.1:0", "--db", db];
        args.extend_from_slice(extra);
        gradless(&args)
    };
    let bad = serve(&["--device", "tpu"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("use cuda:N (e.g. cuda:0), cpu or auto"), "{}", String::from_utf8_lossy(&bad.stderr));
    let front = serve(&["--device", "cpu", "--nats", "nats://127.0.0.1:1"]);
    assert!(!front.status.success());
    assert!(String::from_utf8_lossy(&front.stderr).contains("a front (--nats) measures nothing itself"), "{}", String::from_utf8_lossy(&front.stderr));
    // cuda:64 names a GPU no machine here has: libtorch, told CUDA_VISIBLE_DEVICES=64,
    // finds none, and the server stops before it listens.
    let missing = serve(&["--device", "cuda:64"]);
    assert!(!missing.status.success());
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(err.contains("--device cuda:64: libtorch finds no CUDA device here"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
