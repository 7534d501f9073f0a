//! The lab's settings as they live in the URL: every setting is a query parameter, so a
//! link restores exactly what its sender saw (and `&run=1` starts the run on arrival).
//! Pure functions, shared by the server render and the browser.

use protocol::{Autocast, DeviceChoice, GradMode, Limits, ModelId, RunSpec};

/// A RunSpec from query parameters; anything missing or unreadable keeps its default.
pub fn spec_from_query(get: impl Fn(&str) -> Option<String>) -> RunSpec {
    let d = RunSpec::default();
    RunSpec {
        model: get("model")
            .and_then(|v| v.parse::<ModelId>().ok())
            .unwrap_or(d.model),
        device: get("device")
            .and_then(|v| v.parse::<DeviceChoice>().ok())
            .unwrap_or(d.device),
        batch: get("batch")
            .and_then(|v| v.parse().ok())
            .filter(|b| *b > 0)
            .unwrap_or(d.batch),
        input_size: get("input_size").and_then(|v| v.parse().ok()),
        eval: get("eval")
            .map(|v| v != "0" && v != "false")
            .unwrap_or(d.eval),
        grad: get("grad")
            .and_then(|v| v.parse::<GradMode>().ok())
            .unwrap_or(d.grad),
        autocast: get("autocast")
            .and_then(|v| v.parse::<Autocast>().ok())
            .unwrap_or(d.autocast),
        warmup: get("warmup")
            .and_then(|v| v.parse().ok())
            .unwrap_or(d.warmup),
        iters: get("iters")
            .and_then(|v| v.parse().ok())
            .filter(|i| *i > 0)
            .unwrap_or(d.iters),
        threads: get("threads").and_then(|v| v.parse().ok()),
    }
}

/// The query string (without `?`) that restores `spec`.
pub fn query_from_spec(spec: &RunSpec) -> String {
    let device = match spec.device {
        DeviceChoice::Auto => "auto",
        DeviceChoice::Cpu => "cpu",
        DeviceChoice::Cuda => "cuda",
    };
    let mut q = format!(
        "model={}&device={device}&eval={}&grad={}&autocast={}&batch={}&warmup={}&iters={}",
        spec.model.as_str(),
        u8::from(spec.eval),
        spec.grad.as_str(),
        spec.autocast.as_str(),
        spec.batch,
        spec.warmup,
        spec.iters
    );
    if let Some(s) = spec.input_size {
        q.push_str(&format!("&input_size={s}"));
    }
    if let Some(t) = spec.threads {
        q.push_str(&format!("&threads={t}"));
    }
    q
}

/// Checks a batch typed by a person; the message says what is allowed.
pub fn parse_batch(text: &str, limits: &Limits) -> Result<u32, String> {
    let text = text.trim();
    let n: u64 = text.parse().map_err(|_| {
        format!(
            "“{text}” is not a whole number; enter a batch size from 1 to {}",
            limits.max_batch
        )
    })?;
    if n == 0 {
        return Err("batch must be at least 1".into());
    }
    if n > limits.max_batch as u64 {
        return Err(format!(
            "batch {n} is above this server's limit of {}",
            limits.max_batch
        ));
    }
    Ok(n as u32)
}

/// The power-of-two stops of the batch slider, up to the server's limit.
pub fn batch_stops(limits: &Limits) -> Vec<u32> {
    let mut stops = vec![];
    let mut b = 1u32;
    while b <= limits.max_batch {
        stops.push(b);
        match b.checked_mul(2) {
            Some(n) => b = n,
            None => break,
        }
    }
    stops
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_round_trips_every_setting() {
        let spec = RunSpec {
            model: ModelId::Resnet50,
            device: DeviceChoice::Cpu,
            batch: 7,
            input_size: Some(96),
            eval: false,
            grad: GradMode::InferenceMode,
            autocast: Autocast::Bf16,
            warmup: 1,
            iters: 9,
            threads: Some(2),
        };
        let q = query_from_spec(&spec);
        let pairs: Vec<(String, String)> = q
            .split('&')
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap();
                (k.to_string(), v.to_string())
            })
            .collect();
        let back = spec_from_query(|k| {
            pairs
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        });
        assert_eq!(back, spec);
    }

    #[test]
    fn garbage_in_the_url_falls_back_to_defaults() {
        let spec = spec_from_query(|k| {
            Some(if k == "batch" {
                "0".into()
            } else {
                "nonsense".into()
            })
        });
        let d = RunSpec::default();
        assert_eq!(
            (spec.model, spec.batch, spec.grad),
            (d.model, d.batch, d.grad)
        );
    }

    #[test]
    fn typed_batches_get_clear_messages() {
        let limits = Limits::default();
        assert_eq!(parse_batch(" 64 ", &limits), Ok(64));
        assert!(parse_batch("abc", &limits)
            .unwrap_err()
            .contains("not a whole number"));
        assert!(parse_batch("0", &limits)
            .unwrap_err()
            .contains("at least 1"));
        assert!(parse_batch("999999", &limits)
            .unwrap_err()
            .contains("limit"));
        let stops = batch_stops(&limits);
        assert_eq!(stops.first(), Some(&1));
        assert!(stops.windows(2).all(|w| w[1] == 2 * w[0]));
        assert!(*stops.last().unwrap() <= limits.max_batch);
    }
}
