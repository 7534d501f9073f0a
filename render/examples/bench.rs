//! PNG render time and size of a run and of a five-run comparison, on the calling thread
//! (pin it to one core: `taskset -c 0 cargo run -p render --release --example bench`).
//! Prints one JSON object: medians of 30 renders each (SVG writing included).
#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Instant;

use render::{compare_svg, png, run_svg, ImageOptions};

fn median_ms(mut f: impl FnMut() -> usize) -> (f64, usize) {
    let mut times = vec![];
    let mut bytes = 0;
    for _ in 0..30 {
        let t = Instant::now();
        bytes = f();
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], bytes)
}

fn main() {
    let runs: Vec<_> = (0..5)
        .map(|i| common::run("no_grad", 8 << i, 9.0 + i as f64, 24.5 * (i + 1) as f64, i))
        .collect();
    let refs: Vec<&protocol::Report> = runs.iter().collect();
    let o = ImageOptions::default();
    let hi = ImageOptions { scale: 2, ..o };
    // Warm the font database once, as a server does on its first picture.
    png(&run_svg(&runs[0], &o), 1).unwrap();
    let (svg_ms, svg_bytes) = median_ms(|| run_svg(&runs[0], &o).len());
    let (run_ms, run_bytes) = median_ms(|| png(&run_svg(&runs[0], &o), 1).unwrap().len());
    let (run2_ms, run2_bytes) = median_ms(|| png(&run_svg(&runs[0], &hi), 2).unwrap().len());
    let (cmp_ms, cmp_bytes) = median_ms(|| png(&compare_svg(&refs, &o), 1).unwrap().len());
    println!(
        "{}",
        serde_json::json!({
            "run_svg": {"ms": svg_ms, "bytes": svg_bytes},
            "run_png_1200x630": {"ms": run_ms, "bytes": run_bytes},
            "run_png_2400x1260": {"ms": run2_ms, "bytes": run2_bytes},
            "compare5_png_1200x630": {"ms": cmp_ms, "bytes": cmp_bytes},
        })
    );
}
