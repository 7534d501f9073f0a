//! The pictures as their users see them: the PNG decodes at the size asked for, the SVG's
//! text carries the figures exactly as the page prints them, the themes differ, the same
//! record gives the same bytes, and odd records (no samples, long names) still draw.

mod common;

use protocol::format_bytes;
use render::{compare_svg, pitfall_svg, png, run_chart_svg, run_svg, ImageOptions, Part, Theme};

fn decode(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
    let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a frame");
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

#[test]
fn a_run_png_decodes_at_the_size_asked_for() {
    let r = common::run("no_grad", 8, 11.234, 24.5, 1);
    let (w, h, _) = decode(&png(&run_svg(&r, &ImageOptions::default()), 1).unwrap());
    assert_eq!((w, h), (1200, 630), "the og:image size");
    let o = ImageOptions {
        width: 600,
        scale: 2,
        ..Default::default()
    };
    let (w, h, _) = decode(&png(&run_svg(&r, &o), o.scale).unwrap());
    assert_eq!((w, h), (1200, 630), "600 px at scale 2");
    let o = ImageOptions {
        width: 2400,
        ..Default::default()
    };
    let (w, h, _) = decode(&png(&run_svg(&r, &o), 1).unwrap());
    assert_eq!((w, h), (2400, 1260));
}

#[test]
fn the_svg_prints_the_figures_as_the_page_does() {
    let r = common::run("enabled", 8, 11.234, 98.0, 2);
    let svg = run_svg(&r, &ImageOptions::default());
    // The permalink page's table: `{:.3}` ms and format_bytes.
    let p50 = format!("{:.3} ms", r.latency_ms.p50);
    let peak = format_bytes(r.memory.peak_above_baseline_bytes);
    assert!(svg.contains(&format!(">{p50}</text>")), "p50 {p50}");
    assert!(svg.contains(&format!(">{peak}</text>")), "peak {peak}");
    assert!(svg.contains("measured by Gradless 0.1.0"));
    assert!(svg.contains("2026-11-30 14:02 UTC"));
    assert!(svg.contains(&r.env.device_name));
    assert!(svg.contains(&r.spec.model.display_name()));
}

#[test]
fn dark_and_light_differ_and_the_same_record_gives_the_same_bytes() {
    let r = common::run("no_grad", 8, 11.234, 24.5, 3);
    let light = ImageOptions::default();
    let dark = ImageOptions {
        theme: Theme::Dark,
        ..Default::default()
    };
    let (a, b) = (run_svg(&r, &light), run_svg(&r, &dark));
    assert_ne!(a, b);
    let (pa, pb) = (png(&a, 1).unwrap(), png(&b, 1).unwrap());
    assert_ne!(pa, pb);
    // The background pixel is the theme's.
    let (_, _, light_px) = decode(&pa);
    let (_, _, dark_px) = decode(&pb);
    let at =
        |px: &[u8], x: usize, y: usize| px[(y * 1200 + x) * 4..(y * 1200 + x) * 4 + 3].to_vec();
    assert_eq!(at(&light_px, 600, 20), [255, 255, 255]);
    assert_eq!(at(&dark_px, 600, 20), [0x1c, 0x1f, 0x24]);
    // Same record, same options: same bytes, SVG and PNG.
    assert_eq!(run_svg(&r, &light), a);
    assert_eq!(png(&run_svg(&r, &light), 1).unwrap(), pa);
}

#[test]
fn comparisons_print_each_run_with_its_ratio_against_the_first() {
    let runs: Vec<_> = [
        ("enabled", 11.2, 98.0),
        ("no_grad", 9.1, 24.5),
        ("inference_mode", 8.9, 24.4),
    ]
    .iter()
    .enumerate()
    .map(|(i, (g, ms, mib))| common::run(g, 8, *ms, *mib, 10 + i as u64))
    .collect();
    let refs: Vec<&protocol::Report> = runs.iter().collect();
    let svg = compare_svg(&refs, &ImageOptions::default());
    for r in &runs {
        let ratio = r.latency_ms.p50 / runs[0].latency_ms.p50;
        assert!(
            svg.contains(&format!("{:.3} ms ({ratio:.2}×)", r.latency_ms.p50)),
            "{svg}"
        );
        assert!(svg.contains(&format_bytes(r.memory.peak_above_baseline_bytes)));
    }
    let (w, h, _) = decode(&png(&svg, 1).unwrap());
    assert_eq!((w, h), (1200, 630));
}

#[test]
fn a_pitfall_result_shows_its_verdict_chart_and_figures() {
    let p = common::pitfall();
    let svg = pitfall_svg(&p, "no_grad saves memory", &ImageOptions::default());
    assert!(svg.contains(">Confirmed</text>"));
    assert!(svg.contains("98.0 MiB"), "the reason, with its numbers");
    assert!(
        svg.contains(">24.5 MiB</text>"),
        "a figure as the card prints it: {svg}"
    );
    assert!(svg.contains("measured by Gradless"));
    decode(&png(&svg, 1).unwrap());
}

#[test]
fn odd_records_still_draw() {
    let mut r = protocol::testing::report("enabled", 1, vec![]);
    r.env.device_name = "<script>&\"".repeat(40);
    let svg = run_svg(&r, &ImageOptions::default());
    assert!(!svg.contains("<script>"));
    decode(&png(&svg, 1).unwrap());
    // Figures at the ends of their types draw too (no panic, no endless axis).
    let mut huge = common::run("enabled", 8, 1e300, 1.0, 5);
    huge.samples[3].peak_bytes = u64::MAX;
    huge.samples[4].latency_ms = f64::MAX;
    decode(&png(&run_svg(&huge, &ImageOptions::default()), 1).unwrap());
    let mut p = common::pitfall();
    p.series.clear();
    p.verdict = protocol::Verdict::NotApplicable;
    p.reason = "word ".repeat(200);
    decode(
        &png(
            &pitfall_svg(&p, &"long title ".repeat(20), &ImageOptions::default()),
            2,
        )
        .unwrap(),
    );
    decode(&png(&compare_svg(&[], &ImageOptions::default()), 1).unwrap());
    let runs: Vec<_> = (0..8)
        .map(|i| common::run("no_grad", 1 << i, 1.0 + i as f64, 2.0 * i as f64, i))
        .collect();
    let refs: Vec<&protocol::Report> = runs.iter().collect();
    decode(&png(&compare_svg(&refs, &ImageOptions::default()), 1).unwrap());
}

#[test]
fn one_chart_alone_is_drawn_at_the_size_asked_for_on_the_pages_background() {
    let r = common::run("no_grad", 8, 11.234, 24.5, 4);
    for (part, title) in [(Part::Latency, "Latency per iteration"), (Part::Memory, "Memory above the")] {
        let o = ImageOptions {
            width: 640,
            chart: Some(part),
            chart_height: Some(320),
            ..Default::default()
        };
        let svg = run_chart_svg(&r, part, &o).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("width=\"640\" height=\"320\""), "{part:?}");
        assert!(svg.contains(title), "{part:?}");
        // The page's panel shows through, as under ECharts.
        assert!(svg.contains("fill=\"none\""), "{part:?}");
        // Only the chart: not the whole picture's headline figures or provenance.
        assert!(!svg.contains("measured by Gradless"), "{part:?}");
        let (w, h, _) = decode(&png(&svg, 1).unwrap());
        assert_eq!((w, h), (640, 320));
    }
    // The latency chart marks the run's own p50, as the page prints it.
    let o = ImageOptions { chart: Some(Part::Latency), ..Default::default() };
    let latency = run_chart_svg(&r, Part::Latency, &o).unwrap();
    assert!(latency.contains(&format!("p50 {:.3} ms", r.latency_ms.p50)));
    // Themes differ; the same record gives the same bytes.
    let dark = ImageOptions { theme: Theme::Dark, ..o };
    assert_ne!(run_chart_svg(&r, Part::Latency, &dark).unwrap(), latency);
    assert_eq!(run_chart_svg(&r, Part::Latency, &o).unwrap(), latency);
}

#[test]
fn a_forward_run_has_no_generation_chart_and_says_so() {
    let r = common::run("no_grad", 8, 11.234, 24.5, 5);
    for part in [Part::StepLatency, Part::StepMemory, Part::PrefillDecode] {
        let o = ImageOptions { chart: Some(part), ..Default::default() };
        let e = run_chart_svg(&r, part, &o).unwrap_err();
        assert!(e.contains(part.as_str()) && e.contains("not a generation"), "{e}");
    }
}
