//! Team models through the binary and the API: `--models-dir` on `models` and `measure`
//! (with the refused files named on stderr), a failing forward as a failed run with its
//! reason, the API's info, runs and errors, the exported script, and CPU peak memory equal
//! to Python PyTorch's (python/gradless/peer.py) for the same TorchScript file and settings.
//! The models are made during the test by the venv's PyTorch
//! (engine/tests/fixtures/make_team_models.py).

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;

use axum::http::StatusCode;
use protocol::{Event, Report, RunCreated, ServerInfo};

/// The few router helpers this file needs (the API tests' own live in tests/api/).
mod api {
    use axum::body::Body;
    use axum::http::{header, Request, StatusCode};
    use axum::Router;
    use http_body_util::BodyExt;
    use protocol::Event;
    use tower::ServiceExt;

    pub fn engine_args() -> server::config::EngineArgs {
        server::config::EngineArgs {
            threads: Some(1),
            max_batch: 256,
            memory_limit_mib: None,
            models_dir: None,
            hf_cache: false,
            quality_text: None,
            python: None,
        }
    }

    pub async fn send(app: Router, req: Request<Body>) -> (StatusCode, Vec<u8>) {
        let res = app.oneshot(req).await.unwrap();
        let status = res.status();
        (
            status,
            res.into_body().collect().await.unwrap().to_bytes().to_vec(),
        )
    }

    pub fn get(uri: &str) -> Request<Body> {
        Request::get(uri).body(Body::empty()).unwrap()
    }

    pub fn post_run(body: &str) -> Request<Body> {
        Request::post("/api/runs")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap()
    }

    pub fn error_of(body: &[u8]) -> protocol::ApiError {
        serde_json::from_slice::<protocol::ApiErrorBody>(body)
            .unwrap()
            .error
    }

    /// A run's events, read to the terminal one.
    pub async fn follow(app: Router, url: &str) -> Vec<Event> {
        let mut body = app.oneshot(get(url)).await.unwrap().into_body();
        let (mut reader, mut events) = (crate::common::SseReader::default(), vec![]);
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.unwrap().into_data() {
                events.extend(reader.push(&data));
            }
            if events.last().is_some_and(Event::is_terminal) {
                break;
            }
        }
        events
    }
}

fn python() -> String {
    std::env::var("GRADLESS_PYTHON").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_default();
        format!("{home}/.cache/gradless/venv/bin/python")
    })
}

fn repo(path: &str) -> String {
    format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"))
}

/// The models directory, made once per test binary.
fn models_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("gradless-team-server-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = Command::new(python())
            .arg(repo("engine/tests/fixtures/make_team_models.py"))
            .arg(&dir)
            .output()
            .expect("the venv's Python runs (set GRADLESS_PYTHON)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        dir
    })
}

fn gradless(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gradless"))
        .args(args)
        .arg("--models-dir")
        .arg(models_dir())
        .output()
        .expect("run gradless")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn the_cli_lists_team_models_and_names_each_refused_file() {
    let o = gradless(&["models", "--default-threads", "1"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    for name in ["drop_batch", "traced_resnet18", "picky", "token_mask", "resnet18"] {
        assert!(out.contains(name), "{name} missing from:\n{out}");
    }
    assert!(out.contains("11,689,512"), "{out}");
    // Every decoder says where its weights come from: the presets' are random and seeded,
    // the trained model's are its own files.
    assert!(out.contains("weights: ") && out.contains("random seeded weights") && out.contains("trained by this project"), "{out}");
    assert!(
        !out.contains("broken") && !out.contains("mismatched"),
        "{out}"
    );
    for (file, why) in [
        ("broken.pt", "does not load as TorchScript"),
        ("mismatched.pt", "does not fit the module"),
        ("mismatched_ids.pt", "input 0 (`ids`), given as ids [batch, size] float32"),
        ("mismatched_count.pt", "the module's forward takes 2"),
        ("orphan.json", "without its module"),
        ("mobilenet_v2.pt", "is the name of a built-in model"),
    ] {
        assert!(err.contains(file) && err.contains(why), "{file}: {err}");
    }
}

#[test]
fn measure_runs_a_team_model_and_a_raising_forward_fails_with_its_reason() {
    let o = gradless(&[
        "measure",
        "--model",
        "drop_batch",
        "--batch",
        "4",
        "--warmup",
        "1",
        "--iters",
        "3",
        "--threads",
        "1",
        "--device",
        "cpu",
        "--grad",
        "no_grad",
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let r: Report = serde_json::from_slice(&o.stdout).expect("a JSON report");
    assert_eq!(r.spec.model.as_str(), "drop_batch");
    assert_eq!(r.output.shape, [4, 10]);
    assert_eq!(r.memory.leaked_bytes, 0);

    let o = gradless(&[
        "measure", "--model", "picky", "--batch", "8", "--device", "cpu",
    ]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("Picky takes at most 4 samples"),
        "{}",
        text(&o.stderr)
    );
    // A file that was refused: its reason, not "unknown model".
    let o = gradless(&["measure", "--model", "broken", "--device", "cpu"]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(
        err.contains("error: team model `broken` is not served: broken.pt: does not load as TorchScript"),
        "{err}"
    );
    assert!(!err.contains("unknown model"), "{err}");
}

/// A file of `--models-dir` refused under a built-in model's name: `measure` and
/// `pitfall` answer with its reason and measure nothing, never the built-in model in its
/// place; without `--models-dir` the name is the built-in model's again.
#[test]
fn a_refused_file_under_a_built_in_name_is_never_measured_as_the_built_in() {
    for args in [
        &["measure", "--model", "mobilenet_v2", "--device", "cpu", "--batch", "1", "--warmup", "0", "--iters", "1", "--json"][..],
        &["pitfall", "eval-and-autograd", "--model", "mobilenet_v2", "--device", "cpu", "--json"][..],
    ] {
        let o = gradless(args);
        let err = text(&o.stderr);
        assert!(!o.status.success(), "{args:?} measured something:\n{}", text(&o.stdout));
        assert!(o.stdout.is_empty(), "{args:?}: {}", text(&o.stdout));
        assert!(
            err.contains("team model `mobilenet_v2` is not served: mobilenet_v2.pt: `mobilenet_v2` is the name of a built-in model")
                && err.contains("without --models-dir, `mobilenet_v2` is the built-in model"),
            "{args:?}: {err}"
        );
    }
    let o = Command::new(env!("CARGO_BIN_EXE_gradless"))
        .args(["measure", "--model", "mobilenet_v2", "--device", "cpu", "--batch", "1", "--warmup", "0", "--iters", "1", "--threads", "1", "--json"])
        .output()
        .expect("run gradless");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let r: Report = serde_json::from_slice(&o.stdout).expect("a JSON report");
    assert_eq!(r.spec.model, protocol::ModelId::MobilenetV2);
}

/// `bench/export_model.py` never writes a built-in model's name: a torchvision model is
/// written as `team_<name>` by default, and a built-in name asked for is refused before
/// anything is written. Its list of built-in names is the protocol's.
#[test]
fn the_exporter_never_writes_a_built_in_models_name() {
    let script = repo("bench/export_model.py");
    let source = std::fs::read_to_string(&script).unwrap();
    let start = source
        .find("\nBUILT_IN_MODELS = [")
        .expect("BUILT_IN_MODELS in export_model.py");
    let list = &source[start..start + source[start..].find(']').unwrap()];
    let listed: Vec<&str> = list.split('"').skip(1).step_by(2).collect();
    assert_eq!(
        listed,
        protocol::team::built_in_names(),
        "export_model.py's BUILT_IN_MODELS and protocol::team::built_in_names differ"
    );

    let dir = std::env::temp_dir().join(format!("gradless-export-names-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let export = |args: &[&str]| {
        Command::new(python())
            .arg(&script)
            .args(args)
            .arg("--out")
            .arg(&dir)
            .output()
            .expect("the venv's Python runs (set GRADLESS_PYTHON)")
    };
    let o = export(&["mobilenet_v2", "--size", "image side in pixels (3×N×N):64:32:256"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let mut written: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    assert_eq!(written, ["team_mobilenet_v2.json", "team_mobilenet_v2.pt"]);
    for name in ["resnet18", "transformer"] {
        let o = export(&["resnet18", "--name", name]);
        assert!(!o.status.success(), "--name {name} was accepted");
        let err = text(&o.stderr);
        assert!(
            err.contains(&format!("`{name}` is the name of a built-in Gradless model"))
                && err.contains(&format!("--name team_{name}")),
            "{err}"
        );
    }
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2, "a refused name wrote files");
    // What it wrote is served, under its own name, beside the built-in model.
    let o = Command::new(env!("CARGO_BIN_EXE_gradless"))
        .args(["models", "--default-threads", "1", "--models-dir"])
        .arg(&dir)
        .output()
        .expect("run gradless");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("team_mobilenet_v2") && out.contains("mobilenet_v2"), "{out}");
    assert!(!text(&o.stderr).contains("not served"), "{}", text(&o.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Peak memory above the baseline on the CPU: ours and PyTorch's for the same file.
#[test]
fn cpu_peak_memory_equals_pytorchs_for_the_same_torchscript_file() {
    let dir = models_dir().to_str().unwrap().to_string();
    for (model, batch, mode, grad, size) in [
        ("drop_batch", "16", "--eval", "no_grad", None),
        ("drop_batch", "16", "--train", "enabled", None),
        ("traced_resnet18", "2", "--eval", "no_grad", Some("64")),
        ("traced_resnet18", "2", "--eval", "enabled", Some("64")),
        // Two inputs (int64 ids in 0..1000, an int64 mask of ones): both made alike.
        ("token_mask", "8", "--eval", "no_grad", Some("32")),
        ("token_mask", "8", "--train", "enabled", Some("32")),
    ] {
        let mut args = vec![
            "--model",
            model,
            "--batch",
            batch,
            mode,
            "--grad",
            grad,
            "--device",
            "cpu",
            "--warmup",
            "1",
            "--iters",
            "3",
            "--threads",
            "1",
            "--json",
        ];
        if let Some(s) = size {
            args.extend(["--input-size", s]);
        }
        let ours = gradless(&[&["measure"], args.as_slice()].concat());
        assert!(ours.status.success(), "{}", text(&ours.stderr));
        let ours: serde_json::Value = serde_json::from_slice(&ours.stdout).unwrap();
        let peer = Command::new(python())
            .arg(repo("python/gradless/peer.py"))
            .args(&args)
            .args(["--models-dir", &dir])
            .output()
            .unwrap();
        assert!(peer.status.success(), "{}", text(&peer.stderr));
        let peer: serde_json::Value = serde_json::from_slice(&peer.stdout).unwrap();
        let peak =
            |r: &serde_json::Value| r["memory"]["peak_above_baseline_bytes"].as_u64().unwrap();
        let base = |r: &serde_json::Value| r["memory"]["baseline_bytes"].as_u64().unwrap();
        assert_eq!(
            peak(&ours),
            peak(&peer),
            "{model} {mode} {grad}: ours vs PyTorch's peak"
        );
        // The baselines differ by design: ours is what the meter counts with the module
        // loaded (everything libtorch allocated for it), the peer's the storages of its
        // parameters, buffers and input. Ours cannot be below those.
        assert!(
            base(&ours) >= base(&peer),
            "{model} {mode} {grad}: baselines"
        );
        println!(
            "{model} {mode} {grad}: peak above baseline {} (both); baseline ours {} vs PyTorch's storages {}",
            peak(&ours),
            base(&ours),
            base(&peer)
        );
    }
}

#[tokio::test]
async fn the_api_serves_team_models_like_built_in_ones() {
    let mut engine = api::engine_args();
    engine.models_dir = Some(models_dir().clone());
    let catalog = server::team::load(&engine).unwrap();
    let worker = server::start_worker(engine::WorkerConfig { catalog, ..server::worker_config(&engine, 4, None) }).unwrap();
    let state = server::build_state(
        worker,
        std::path::Path::new("target/site"),
        "127.0.0.1:0".parse().unwrap(),
        server::state::Services::ephemeral().unwrap(),
    )
    .unwrap();
    let app = server::router(state);

    let (status, body) = api::send(app.clone(), api::get("/api/info")).await;
    assert_eq!(status, StatusCode::OK);
    let info: ServerInfo = serde_json::from_slice(&body).unwrap();
    let team: Vec<_> = info.models.iter().filter(|m| m.team.is_some()).collect();
    let names: Vec<&str> = team.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(names, ["drop_batch", "picky", "token_mask", "traced_resnet18"]);
    let drop_batch = team[0];
    assert_eq!(drop_batch.name, "Drop + Batch (test)");
    assert!(drop_batch.has_dropout);
    assert_eq!(
        drop_batch.parameters,
        32 * 256 + 256 + 2 * 256 + 256 * 10 + 10
    );

    let (status, body) = api::send(
        app.clone(),
        api::post_run(r#"{"model": "drop_batch", "batch": 4, "device": "cpu", "warmup": 1, "iters": 2, "eval": false}"#),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{}", text(&body));
    let created: RunCreated = serde_json::from_slice(&body).unwrap();
    let events = api::follow(app.clone(), &created.events_url).await;
    let report = match events.last() {
        Some(Event::Done { report }) => report.as_ref().clone(),
        other => panic!("expected a report, got {other:?}"),
    };
    assert_eq!(report.spec.model.as_str(), "drop_batch");
    let script = server::export::python_script("abc", &report);
    assert!(
        script.contains("--models-dir=.") && script.contains("drop_batch.pt"),
        "{script}"
    );

    for (body, says) in [
        (
            r#"{"model": "broken"}"#,
            "team model `broken` is not served: broken.pt: does not load as TorchScript",
        ),
        (
            r#"{"model": "picky", "input_size": 8}"#,
            "fixed input shape",
        ),
    ] {
        let (status, resp) = api::send(app.clone(), api::post_run(body)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        let e = api::error_of(&resp);
        assert_eq!(
            e.field.as_deref(),
            Some(if body.contains("picky") {
                "input_size"
            } else {
                "model"
            })
        );
        assert!(e.message.contains(says), "{body}: {}", e.message);
    }
}

/// A team decoder folder refused at load answers `gradless generate --model NAME` (and
/// `measure`) with its reason, as a refused TorchScript file does, never "unknown model".
#[test]
fn a_refused_decoder_folder_is_answered_with_its_reason() {
    let dir = std::env::temp_dir().join(format!("gradless-bad-decoder-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("badllama")).unwrap();
    std::fs::write(
        dir.join("badllama/config.json"),
        r#"{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 0, "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 10000.0}"#,
    )
    .unwrap();
    for args in [
        &["generate", "--model", "badllama", "--prompt", "4", "--new-tokens", "2", "--device", "cpu"][..],
        &["measure", "--model", "badllama", "--device", "cpu"][..],
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_gradless")).args(args).arg("--models-dir").arg(&dir).output().unwrap();
        let err = text(&o.stderr);
        assert!(!o.status.success(), "{args:?}: {}", text(&o.stdout));
        assert!(err.contains("team model `badllama` is not served") && err.contains("vocab_size"), "{args:?}: {err}");
        assert!(!err.contains("unknown model"), "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
