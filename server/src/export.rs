//! A recorded result in the formats people take away: the report as JSON, its samples (or
//! an experiment's series) as CSV, and a standalone PyTorch script that measures the same
//! run again on the reader's machine, and the traced pass as a Chrome trace or its own CSV
//! (see `trace_export`). The API (`/api/records/{id}/export/{json,csv,py,trace,trace-csv}`)
//! and `gradless runs export` both call [`export`], so the files are the same either way.

use protocol::{Record, RecordBody, Report};


#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Csv,
    Python,
    /// The traced pass as a Chrome trace (trace-event JSON).
    Trace,
    /// The traced pass as CSV, one row per module.
    TraceCsv,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "json" => Ok(Format::Json),
            "csv" => Ok(Format::Csv),
            "py" | "python" => Ok(Format::Python),
            "trace" => Ok(Format::Trace),
            "trace-csv" | "trace.csv" => Ok(Format::TraceCsv),
            other => Err(format!(
                "unknown export format `{other}`; use json, csv, py, trace or trace-csv"
            )),
        }
    }
}

/// One exported file.
#[derive(Clone, Debug)]
pub struct Export {
    pub content_type: &'static str,
    pub filename: String,
    pub body: String,
}

/// Renders `record` as `format`; the error says why a format does not apply.
pub fn export(record: &Record, format: Format) -> Result<Export, String> {
    let stem = format!("gradless-{}-{}", record.kind().as_str(), record.id);
    match format {
        Format::Json => {
            let mut value = serde_json::to_value(record).map_err(|e| e.to_string())?;
            // The caveat travels with the figures (it is derived, so not stored in the record).
            if let (Some(caveat), Some(object)) =
                (record.run().and_then(Report::caveat), value.as_object_mut())
            {
                object.insert("caveat".into(), caveat.into());
            }
            Ok(Export {
                content_type: "application/json",
                filename: format!("{stem}.json"),
                body: serde_json::to_string_pretty(&value).map_err(|e| e.to_string())?,
            })
        }
        Format::Csv => Ok(Export {
            content_type: "text/csv; charset=utf-8",
            filename: format!("{stem}.csv"),
            body: match &record.body {
                RecordBody::Run(r) => samples_csv(r),
                RecordBody::Pitfall(p) => {
                    let mut rows = vec![];
                    for s in &p.series {
                        for (x, y) in s.x.iter().zip(&s.y) {
                            let y = y.map(|v| v.to_string()).unwrap_or_default();
                            rows.push([s.name.clone(), s.unit.clone(), x.clone(), y]);
                        }
                    }
                    // The prediction locked before the run, beside what it measured.
                    if let Some(pr) = &p.prediction {
                        let measured = pr.measured.map(|m| m.to_string()).unwrap_or_default();
                        rows.push(["prediction".into(), pr.question.unit.to_string(), pr.sentence(), measured]);
                    }
                    write_csv(["series", "unit", "x", "y"], rows)
                }
                RecordBody::Unfinished(u) => return Err(unfinished_export(u)),
            },
        }),
        Format::Trace | Format::TraceCsv => {
            let r = match &record.body {
                RecordBody::Run(r) => r,
                RecordBody::Unfinished(u) => return Err(unfinished_export(u)),
                RecordBody::Pitfall(_) => {
                    return Err("a pitfall experiment has no traced pass; export one of its runs from the Lab".into())
                }
            };
            if r.trace.is_empty() {
                return Err("this run was recorded before Gradless traced forward passes; measure it again".into());
            }
            Ok(match format {
                Format::Trace => Export {
                    content_type: "application/json",
                    filename: format!("{stem}.trace.json"),
                    body: serde_json::to_string(&crate::trace_export::chrome_trace(r))
                        .map_err(|e| e.to_string())?,
                },
                _ => Export {
                    content_type: "text/csv; charset=utf-8",
                    filename: format!("{stem}.trace.csv"),
                    body: crate::trace_export::trace_csv(&r.trace),
                },
            })
        }
        Format::Python => match &record.body {
            RecordBody::Run(r) => Ok(Export {
                content_type: "text/x-python; charset=utf-8",
                filename: format!("{stem}.py"),
                body: python_script(&record.id, r),
            }),
            RecordBody::Pitfall(_) => Err(
                "a pitfall experiment has no single script; export one of its runs from the Lab, or its JSON".into(),
            ),
            // The settings are known, so the script that measures them is too.
            RecordBody::Unfinished(u) => match &u.spec {
                Some(spec) => Ok(Export {
                    content_type: "text/x-python; charset=utf-8",
                    filename: format!("{stem}.py"),
                    body: format!("# Gradless run {}: {}\n{}", record.id, u.message, protocol::python_snippet(spec)),
                }),
                None => Err(unfinished_export(u)),
            },
        },
    }
}

/// Why a run with no figures has no figures to export (its JSON export says the same).
fn unfinished_export(u: &protocol::Unfinished) -> String {
    match u.measured {
        Some(_) => format!(
            "{}: it has no report to export as a table (what it measured before it failed is in its JSON export, `measured`; its Python script works too)",
            u.message
        ),
        None => format!("{}: there are no figures to export (its JSON export and its Python script still work)", u.message),
    }
}

/// Every sample of a run, warm-up first: one row per forward pass. Iterations are numbered
/// from 1 within their phase, as the charts label them (w1, w2, … then 1, 2, …). A run with a
/// caveat (fp16/bf16 on a CPU) carries it in every row, so no copy of the figures loses it.
pub fn samples_csv(r: &Report) -> String {
    let caveat = r.caveat().unwrap_or_default();
    let mut rows = vec![];
    for (phase, samples) in [("warmup", &r.warmup), ("timed", &r.samples)] {
        for s in samples {
            rows.push([
                phase.to_string(),
                (s.iteration + 1).to_string(),
                s.latency_ms.to_string(),
                s.allocated_bytes.to_string(),
                s.peak_bytes.to_string(),
                s.reserved_bytes.map(|b| b.to_string()).unwrap_or_default(),
                caveat.clone(),
            ]);
        }
    }
    write_csv(
        [
            "phase",
            "iteration",
            "latency_ms",
            "allocated_bytes",
            "peak_bytes",
            "reserved_bytes",
            "caveat",
        ],
        rows,
    )
}

/// A header and rows as CSV text (RFC 4180 quoting by the `csv` crate).
fn write_csv<const N: usize>(header: [&str; N], rows: Vec<[String; N]>) -> String {
    let mut w = csv::WriterBuilder::new()
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(Vec::new());
    // Writing to a Vec cannot fail; a failed row would only drop that row.
    let _ = w.write_record(header);
    for row in rows {
        let _ = w.write_record(&row);
    }
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}

/// The command-line arguments of gradless.peer (python/gradless/peer.py) that repeat `r`'s run: the settings table's
/// flags for a forward run (peer.py takes `gradless measure`'s), with the threads the run
/// used.
pub fn peer_args(r: &Report) -> Vec<String> {
    let forward = protocol::RunSpec { generate: None, ..r.spec.clone() };
    let mut args: Vec<String> = protocol::settings::command_args(protocol::settings::SETTINGS, &forward, &["threads"])
        .into_iter()
        // A fixed-shape team model has no size (0): peer.py takes the sidecar's shape.
        .filter(|a| a != "--input-size=0")
        .collect();
    args.push(format!("--threads={}", r.env.threads));
    if let protocol::ModelId::Team(_) | protocol::ModelId::Named(_) = r.spec.model {
        // The same TorchScript file, loaded with torch.jit.load: beside the script by
        // default, or wherever --models-dir points.
        args.push("--models-dir=.".into());
    }
    args
}

fn py_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// What the exported script prints beside its own figures: the recorded run's, under the
/// field names gradless.peer's report uses (its table reads both the same way).
fn recorded_figures(id: &str, r: &Report) -> serde_json::Value {
    serde_json::json!({
        "run_id": id,
        "measured_at": r.env.measured_at,
        "settings": r.spec.label(),
        "device": format!("{}: {}, threads: {}", r.env.device.as_str(), r.env.device_name, r.env.threads),
        "torch": format!("libtorch {} (Gradless {})", r.env.libtorch_version, r.env.gradless_version),
        "latency_ms": r.latency_ms,
        "throughput_per_s": r.throughput_per_s,
        "memory": r.memory,
        "caveat": r.caveat(),
    })
}

/// Gradless's own Python peer, the same method step by step (python/gradless/peer.py, with
/// the architectures it imports inlined: [`engine::python_package::standalone_peer`]), with
/// the recorded run's settings as its default arguments, and the recorded figures printed
/// beside the new ones.
pub fn python_script(id: &str, r: &Report) -> String {
    let l = &r.latency_ms;
    let m = &r.memory;
    let recorded = format!(
        "latency p50 {:.3} ms, p95 {:.3} ms, p99 {:.3} ms; baseline {}; peak above baseline {} ({} bytes, {})",
        l.p50,
        l.p95,
        l.p99,
        protocol::format_bytes(m.baseline_bytes),
        protocol::format_bytes(m.peak_above_baseline_bytes),
        m.peak_above_baseline_bytes,
        m.source.describe()
    );
    let where_ = format!(
        "{} ({}), libtorch {}, threads {}, {}",
        r.env.device_name,
        r.env.device.as_str(),
        r.env.libtorch_version,
        r.env.threads,
        r.env.measured_at
    );
    let args = peer_args(r);
    let mut head = String::from("#!/usr/bin/env python3\n");
    head.push_str(&format!(
        "# Reproduces Gradless run {id}: {} · {}.\n",
        r.spec.model.as_str(),
        r.spec.label()
    ));
    head.push_str(&format!(
        "# Recorded by Gradless {} on {where_}:\n#   {recorded}\n",
        r.env.gradless_version
    ));
    if let Some(caveat) = r.caveat() {
        head.push_str(&format!("# Caveat: {caveat}\n"));
    }
    head.push_str(
        "#\n# Run:  python3 this_file.py          (needs torch; torchvision is optional)\n",
    );
    head.push_str(
        "#       python3 this_file.py --json   (the report as JSON, with Gradless's field names;\n\
         #                                      the recorded figures under `recorded`)\n",
    );
    head.push_str(
        "# Flags given on the command line override the recorded settings (e.g. --device cpu).\n",
    );
    if let protocol::ModelId::Team(_) | protocol::ModelId::Named(_) = r.spec.model {
        let name = r.spec.model;
        head.push_str(&format!(
            "# {name} is a team model: put {name}.pt and {name}.json (from the server's models\n\
             # directory) beside this file, or add --models-dir DIR. It is loaded with torch.jit.load.\n"
        ));
    }
    head.push_str(
        "# Below is Gradless's Python peer (python/gradless/peer.py, with the architectures it\n\
         # imports from python/gradless/models.py inlined): the same warm-up,\n",
    );
    head.push_str(
        "# synchronisation and per-iteration peak reset as the server's measurement.\n\n",
    );

    let peer = engine::python_package::standalone_peer();
    let body = peer.strip_prefix("#!/usr/bin/env python3\n").unwrap_or(&peer);
    let main_call = "if __name__ == \"__main__\":\n    sys.exit(main())\n";
    let body = body.strip_suffix(main_call).unwrap_or(body);
    let mut tail = String::from("\n# ---- the recorded run ----------------------------------------------------------------------\n\n");
    tail.push_str(&format!(
        "RECORDED_ARGS = [{}]\n",
        args.iter()
            .map(|a| py_str(a))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    // JSON text parsed at run time: Python literals differ from JSON's (null, true).
    tail.push_str(&format!(
        "RECORDED = json.loads({})\n",
        py_str(&recorded_figures(id, r).to_string())
    ));
    tail.push_str(
        "\n\nif __name__ == \"__main__\":\n    sys.exit(main(RECORDED_ARGS + sys.argv[1:], recorded=RECORDED))\n",
    );
    format!("{head}{body}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_ends_with_the_main_call_the_export_replaces() {
        // If peer.py changes its ending, the export would call main() twice.
        let peer = engine::python_package::standalone_peer();
        assert!(peer.ends_with("if __name__ == \"__main__\":\n    sys.exit(main())\n"));
        assert!(peer.starts_with("#!/usr/bin/env python3\n"));
    }

    #[test]
    fn csv_fields_are_quoted_when_needed() {
        let text = write_csv(
            ["a", "b"],
            vec![
                ["x,y".into(), "say \"hi\"".into()],
                ["plain".into(), "".into()],
            ],
        );
        assert_eq!(text, "a,b\n\"x,y\",\"say \"\"hi\"\"\"\nplain,\n");
        assert!("json".parse::<Format>().is_ok() && "xml".parse::<Format>().is_err());
    }
}
