//! Writes the test records' pictures to a folder, for looking at them:
//! `cargo run -p render --release --example pictures -- OUT_DIR [RECORD.json ...]`
//! (a record JSON as `GET /api/records/{id}` answers; several runs also make a comparison).
#[path = "../tests/common/mod.rs"]
mod common;

use render::{compare_svg, pitfall_svg, png, run_svg, ImageOptions, Theme};

fn main() {
    let mut args = std::env::args().skip(1);
    let out = std::path::PathBuf::from(args.next().unwrap_or_else(|| "pictures".into()));
    std::fs::create_dir_all(&out).unwrap();
    let mut runs: Vec<protocol::Report> = vec![];
    let mut pitfalls: Vec<protocol::PitfallReport> = vec![];
    for path in args {
        let record: protocol::Record =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        match record.body {
            protocol::RecordBody::Run(r) => runs.push(*r),
            protocol::RecordBody::Pitfall(p) => pitfalls.push(*p),
            protocol::RecordBody::Unfinished(_) => {}
        }
    }
    if runs.is_empty() && pitfalls.is_empty() {
        runs = [
            ("enabled", 11.2, 98.0),
            ("no_grad", 9.1, 24.5),
            ("inference_mode", 8.9, 24.4),
        ]
        .iter()
        .enumerate()
        .map(|(i, (g, ms, mib))| common::run(g, 8, *ms, *mib, 10 + i as u64))
        .collect();
        pitfalls.push(common::pitfall());
    }
    for theme in [Theme::Light, Theme::Dark] {
        let o = ImageOptions {
            theme,
            ..Default::default()
        };
        let t = theme.as_str();
        let write = |name: &str, svg: String| {
            std::fs::write(out.join(format!("{name}-{t}.svg")), &svg).unwrap();
            std::fs::write(out.join(format!("{name}-{t}.png")), png(&svg, 1).unwrap()).unwrap();
        };
        if let Some(r) = runs.first() {
            write("run", run_svg(r, &o));
            // As a phone shows it in a chat or a doc, about 400 px wide.
            write("run-400", run_svg(r, &ImageOptions { width: 400, ..o }));
        }
        if runs.len() > 1 {
            write("compare", compare_svg(&runs.iter().collect::<Vec<_>>(), &o));
        }
        if let Some(p) = pitfalls.first() {
            write("pitfall", pitfall_svg(p, "no_grad saves memory", &o));
        }
    }
    println!("wrote {}", out.display());
}
