//! `gradless models`: what the server can run, and `--load`, which builds a decoder from its
//! folder and times it.

use std::io::Write;

use anyhow::Result;
use engine::Worker;
use protocol::format_bytes;

use super::{model_infos, print_json};

/// `gradless models`.
pub fn models(worker: &Worker, json: bool) -> Result<()> {
    let infos = model_infos(worker)?;
    if json {
        return print_json(&infos);
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{:<14} {:>12}  {:<42} input_size",
        "model", "parameters", "architecture"
    )?;
    for m in infos {
        writeln!(
            out,
            "{:<14} {:>12}  {:<42} {} (default {})",
            m.id.as_str(),
            group_thousands(m.parameters),
            m.name,
            m.input_meaning,
            m.default_input_size
        )?;
        // Where a decoder's weights come from: its files, or random seeded weights.
        if let Some(d) = m.id.decoder() {
            writeln!(out, "{:<14} weights: {}", "", d.provenance())?;
        }
    }
    Ok(())
}

/// `gradless models --load MODEL`: builds a decoder on the CPU with its weights read from its
/// folder, timed, and prints how long it took and what the model holds.
pub fn load_weights(catalog: &protocol::Catalog, args: &crate::config::ModelsArgs) -> Result<()> {
    let name = args.load.as_deref().unwrap_or_default();
    let id = catalog.parse(name).map_err(|e| anyhow::anyhow!(e))?;
    let decoder = id.decoder().ok_or_else(|| anyhow::anyhow!("`{name}` is not a decoder: --load reads a decoder's weights"))?;
    let weights: protocol::WeightsDtype = args
        .load_dtype
        .parse()
        .map_err(|_| anyhow::anyhow!("--load-dtype `{}`: use fp32, bf16 or fp16", args.load_dtype))?;
    let start = std::time::Instant::now();
    let device = engine::torch_call::tch_device(protocol::DeviceKind::Cpu);
    let built = engine::torch_call::catch_torch(|| engine::models::Model::build_in(id, device, 0, weights));
    let load_ms = start.elapsed().as_secs_f64() * 1000.0;
    let model = built.map_err(|e| anyhow::anyhow!("{}", e.message))?;
    let report = serde_json::json!({
        "model": name,
        "weights_dtype": weights.as_str(),
        "load_ms": load_ms,
        "held_bytes": model.held_bytes,
        "weights_source": decoder.provenance(),
        "stored_bytes": match &decoder.source {
            protocol::decoder::DecoderSource::Team { stored: Some(s), .. } => Some(s.bytes()),
            _ => None,
        },
    });
    if args.json {
        return print_json(&report);
    }
    println!(
        "{name}: built in {load_ms:.0} ms on the CPU, {} of {} weights held\n  weights: {}",
        format_bytes(model.held_bytes),
        weights.as_str(),
        decoder.provenance()
    );
    Ok(())
}

fn group_thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn thousands_are_grouped() {
        assert_eq!(super::group_thousands(11_689_512), "11,689,512");
        assert_eq!(super::group_thousands(999), "999");
    }
}
