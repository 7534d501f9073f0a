//! The chart builders, checked natively on their JSON.

use super::*;

fn sample(i: u32, ms: f64, bytes: u64) -> Sample {
    Sample {
        iteration: i,
        latency_ms: ms,
        allocated_bytes: bytes,
        peak_bytes: 2 * bytes,
        reserved_bytes: None,
    }
}

#[test]
fn latency_chart_carries_every_measured_point_and_shades_warmup() {
    let warm = [sample(0, 9.0, 1), sample(1, 5.0, 1)];
    let timed = [sample(0, 1.5, 1), sample(1, 1.25, 1)];
    let json = serde_json::to_value(latency_chart(&warm, &timed, Some(1.375), None)).unwrap();
    let data = &json["series"][0]["data"];
    assert_eq!(data.as_array().unwrap().len(), 4);
    let x_axis = if json["xAxis"].is_array() {
        &json["xAxis"][0]
    } else {
        &json["xAxis"]
    };
    assert_eq!(x_axis["data"][0], "w1");
    assert_eq!(x_axis["data"][2], "1");
    assert_eq!(json["series"][0]["markArea"]["data"][0][1]["xAxis"], "w2");
    assert!(json.to_string().contains("1.375"));
}

#[test]
fn memory_chart_has_reserved_only_where_measured() {
    let timed = [sample(0, 1.0, 3 << 20)];
    let cpu = serde_json::to_value(memory_chart(&[], &timed, Some(1 << 20))).unwrap();
    assert_eq!(cpu["series"].as_array().unwrap().len(), 2);
    assert_eq!(
        cpu["series"][0]["data"][0], 5.0,
        "peak during the pass, in MiB above the 1 MiB baseline"
    );
    let mut gpu_sample = sample(0, 1.0, 3 << 20);
    gpu_sample.reserved_bytes = Some(8 << 20);
    let gpu = serde_json::to_value(memory_chart(&[], &[gpu_sample], None)).unwrap();
    assert_eq!(gpu["series"].as_array().unwrap().len(), 3);
    assert_eq!(gpu["series"][2]["data"][0], 8.0);
}

fn pitfall(series: Vec<protocol::Series>) -> PitfallReport {
    PitfallReport {
        id: "x".into(),
        claim: "c".into(),
        verdict: protocol::Verdict::NotApplicable,
        reason: "r".into(),
        threshold: "t".into(),
        figures: vec![],
        chart: ChartKind::Bar,
        series,
        notes: vec![],
        table: None,
        traces: vec![],
        prediction: None,
        env: protocol::EnvStamp {
            device: protocol::DeviceKind::Cpu,
            device_name: "cpu".into(),
            device_total_memory_bytes: None,
            driver_version: None,
            cuda_version: None,
            cudnn_version: None,
            libtorch_version: "2.11.0".into(),
            cpu_model: "cpu".into(),
            threads: 1,
            measured_at: "2026-11-30T00:00:00Z".into(),
            gradless_version: "0".into(),
            worker: None,
            cpu_cores: Some(2),
        },
        record_id: None,
    }
}

#[test]
fn nothing_measured_draws_no_chart_instead_of_an_axisless_one() {
    // A "not applicable" card measures nothing: no series at all.
    assert!(pitfall_chart(&pitfall(vec![])).is_none());
    // A series whose every point is missing or not finite is nothing to draw either.
    let empty = protocol::Series {
        name: "a".into(),
        unit: "ms".into(),
        x: vec!["1".into(), "2".into()],
        y: vec![None, Some(f64::NAN)],
    };
    assert!(pitfall_chart(&pitfall(vec![empty])).is_none());
}

#[test]
fn every_series_has_a_value_axis_to_stand_on() {
    let s = |name: &str, unit: &str| protocol::Series {
        name: name.into(),
        unit: unit.into(),
        x: vec!["1".into(), "2".into()],
        y: vec![Some(1.0), None],
    };
    let series = vec![s("a", "ms"), s("b", "MiB"), s("c", "x")];
    let json = serde_json::to_value(pitfall_chart(&pitfall(series)).unwrap()).unwrap();
    let axes = json["yAxis"].as_array().map(|a| a.len()).unwrap_or(1);
    assert_eq!(
        axes, 2,
        "two units get an axis each, the third shares the first"
    );
    for s in json["series"].as_array().unwrap() {
        let index = s["yAxisIndex"].as_f64().unwrap_or(0.0) as usize;
        assert!(
            index < axes,
            "series {} points at a missing axis",
            s["name"]
        );
    }
    assert_eq!(
        json["series"][0]["data"][1], "-",
        "a missing point is a gap"
    );
}

fn titles(json: &serde_json::Value) -> Vec<String> {
    match &json["title"] {
        serde_json::Value::Array(a) => a.iter().map(|t| t.to_string()).collect(),
        t => vec![t.to_string()],
    }
}

fn y_axis(json: &serde_json::Value) -> &serde_json::Value {
    if json["yAxis"].is_array() {
        &json["yAxis"][0]
    } else {
        &json["yAxis"]
    }
}

#[test]
fn memory_is_plotted_above_the_baseline_by_default_and_absolute_on_request() {
    // A 40 MiB baseline and passes peaking 2 MiB above it: the lesson is the 2 MiB.
    let base = 40u64 << 20;
    let timed: Vec<Sample> = (0..4)
        .map(|i| Sample {
            iteration: i,
            latency_ms: 1.0,
            allocated_bytes: base,
            peak_bytes: base + (2 << 20),
            reserved_bytes: None,
        })
        .collect();
    let above = serde_json::to_value(memory_chart(&[], &timed, Some(base))).unwrap();
    assert_eq!(above["series"][0]["data"][0], 2.0);
    assert_eq!(above["series"][1]["data"][0], 0.0, "back at the baseline");
    assert!(
        titles(&above)[0].contains("baseline of 40.0 MiB"),
        "the subtitle states the baseline: {:?}",
        titles(&above)
    );
    assert_ne!(y_axis(&above)["scale"], true, "from zero: nothing hidden");
    let absolute = serde_json::to_value(memory_chart_with(
        &[],
        &timed,
        Some(base),
        MemoryScale::Absolute,
        None,
        None,
    ))
    .unwrap();
    assert_eq!(absolute["series"][0]["data"][0], 42.0);
    assert!(absolute.to_string().contains("baseline {c}"));
    // From zero, 40 → 42 MiB would be a flat line: the axis starts near the data.
    assert_eq!(y_axis(&absolute)["scale"], true);
    assert!(titles(&absolute)[0].contains("not from 0"));
    // Above the baseline the axis starts at zero even where the values sit high: zero
    // is the baseline, and zooming would make noise look like an effect.
    let high: Vec<Sample> = timed
        .iter()
        .map(|s| Sample {
            allocated_bytes: base + (70 << 20),
            peak_bytes: base + (71 << 20),
            ..s.clone()
        })
        .collect();
    let above_high = serde_json::to_value(memory_chart(&[], &high, Some(base))).unwrap();
    assert_ne!(y_axis(&above_high)["scale"], true);
}

#[test]
fn the_previous_run_is_drawn_faintly_behind_and_the_reading_is_on_the_chart() {
    let warm = [sample(0, 9.0, 1 << 20)];
    let now = [sample(0, 1.0, 1 << 20), sample(1, 1.0, 1 << 20)];
    let prev_warm = [sample(0, 9.0, 4 << 20), sample(1, 9.0, 4 << 20)];
    let prev = [sample(0, 4.0, 4 << 20), sample(1, 4.0, 4 << 20)];
    let previous = Previous {
        warmup: &prev_warm,
        samples: &prev,
        baseline: Some(1 << 20),
    };
    let reading = "peak 4.0× lower than the previous run";
    let json = serde_json::to_value(memory_chart_with(
        &warm,
        &now,
        Some(1 << 20),
        MemoryScale::AboveBaseline,
        Some(previous),
        Some(reading),
    ))
    .unwrap();
    let series = json["series"].as_array().unwrap();
    let current = &series[0];
    let behind = series.last().unwrap();
    assert!(behind["name"].as_str().unwrap().contains("previous"));
    assert!(behind["z"].as_f64() < current["z"].as_f64(), "drawn behind");
    assert!(behind["lineStyle"]["opacity"].as_f64().unwrap() < 1.0);
    // Timed iteration 1 shares a column although the warm-ups differ (1 against 2).
    assert_eq!(current["data"][1], "-");
    assert_eq!(current["data"][2], 1.0);
    assert_eq!(behind["data"][2], 7.0);
    assert!(titles(&json).iter().any(|t| t.contains(reading)));
    assert!(ChartOption(json.clone())
        .description()
        .unwrap()
        .contains(reading));
}

#[test]
fn every_chart_describes_itself_in_words() {
    let timed: Vec<Sample> = (0..20).map(|i| sample(i, 5.0, 1 << 20)).collect();
    let latency = latency_chart(&[], &timed, Some(5.3), Some(8.8));
    assert_eq!(latency.0["aria"]["enabled"], true);
    assert_eq!(
        latency.description(),
        Some("Latency per iteration: p50 5.3 ms, p95 8.8 ms over 20 iterations.")
    );
    let memory = memory_chart(&[], &timed, Some(1 << 20));
    assert!(memory
        .description()
        .unwrap()
        .contains("peak 1.0 MiB above the baseline of 1.0 MiB"));
    let empty = memory_chart(&[], &[], None);
    assert!(empty.description().unwrap().contains("nothing measured"));
    let s = |name: &str| protocol::Series {
        name: name.into(),
        unit: "ms".into(),
        x: vec!["1".into(), "2".into()],
        y: vec![Some(1.5), None],
    };
    let card = pitfall_chart(&pitfall(vec![s("a"), s("b")])).unwrap();
    let said = card.description().unwrap();
    assert!(said.contains("a: 1 1.50 ms, 2 not measured"), "{said}");
    // Bars carry patterns, not colour alone.
    assert_eq!(card.0["aria"]["decal"]["show"], true);
}

#[test]
fn every_chart_lets_the_page_background_show_in_either_theme() {
    // (The generation charts: generate.rs's own test.)
    let timed: Vec<Sample> = (0..4).map(|i| sample(i, 5.0, 1 << 20)).collect();
    let s = protocol::Series { name: "a".into(), unit: "ms".into(), x: vec!["1".into()], y: vec![Some(1.0)] };
    let charts = [
        ("latency", latency_chart(&[], &timed, Some(5.0), Some(5.0))),
        ("memory", memory_chart(&[], &timed, Some(1 << 20))),
        ("pitfall", pitfall_chart(&pitfall(vec![s])).unwrap()),
    ];
    for (name, chart) in charts {
        assert_eq!(chart.0["backgroundColor"], "transparent", "{name}");
    }
}

#[test]
fn a_long_trace_writes_at_most_sixteen_module_names() {
    for n in 1..400 {
        let skip = trace::label_interval(n);
        let shown = (0..n).step_by(skip + 1).count();
        assert!(shown <= 16, "{n} modules: {shown} names");
        // Every name while they fit; never fewer than half of what fits.
        assert!(if n <= 16 { shown == n } else { shown >= 8 }, "{n} modules: {shown} names");
    }
}
