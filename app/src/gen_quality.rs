//! The Generate page's word on its quality measurement before it runs: what the server
//! says it will score (`GET /api/quality-plan`, asked when the switch is on), held in one
//! string signal, and its time at the prefill rate the run measures first. Its own module
//! for the concept; it compiles into the Generate page's lazily loaded code with the page.

use leptos::prelude::*;
use protocol::{format_bytes, RunSpec};

/// Asks the server for the plan of `now`'s settings when quality is on and not yet asked
/// for them; the answer lands in `plan` (see [`plan_entry`]).
#[cfg(feature = "hydrate")]
pub fn ask(now: &RunSpec, plan: RwSignal<Option<String>>) {
    let key = plan_key(now);
    let wanted = now.generate.as_ref().is_some_and(|g| g.quality) && now.model.decoder().is_some_and(|d| d.takes_text());
    if !wanted || plan.get_untracked().is_some_and(|e| plan_read(&e, &key).is_some()) {
        return;
    }
    leptos::task::spawn_local(async move {
        // Read as a JSON value, which the main module already parses: a derived reader of
        // its own would add ~2 KB to the page's code for four fields.
        let got = crate::client::get_json::<serde_json::Value>(&format!("/api/quality-plan?{key}"))
            .await
            .and_then(|v| plan_of(&v).ok_or_else(|| "unexpected answer from the server".to_string()));
        plan.set(Some(plan_entry(&key, &got)));
    });
}

/// The plan of `spec`'s settings, once the server has said it.
pub fn read(spec: &RunSpec, plan: RwSignal<Option<String>>) -> Option<Result<protocol::QualityPlan, String>> {
    let key = plan_key(spec);
    plan.get().and_then(|e| plan_read(&e, &key))
}

/// The query that asks the server for `spec`'s quality plan (model and device).
fn plan_key(spec: &RunSpec) -> String {
    format!("model={}&device={}", String::from(js_sys_encode(spec.model.as_str())), spec.device.as_str())
}

#[cfg(feature = "hydrate")]
fn js_sys_encode(s: &str) -> String {
    js_sys::encode_uri_component(s).into()
}

#[cfg(not(feature = "hydrate"))]
fn js_sys_encode(s: &str) -> String {
    s.to_string()
}

/// "11 settings × 2950 tokens of notes.txt (12.0 KB, sha256 …)".
pub fn plan_words(p: &protocol::QualityPlan, byte_level: bool) -> String {
    let unit = if byte_level { "bytes" } else { "tokens" };
    format!("{} settings × {} {unit} of {} ({})", p.settings, p.tokens, p.text, format_bytes(p.text_bytes))
}

/// The quality measurement still to come while the generation runs, with its time at the
/// prefill rate this run measured once the prefill has streamed: settings × units at that
/// rate ("Then quality: 11 settings × 2950 tokens of …: about 4.2 s at this run's prefill
/// rate (700 tokens/s).").
pub fn quality_ahead(p: &protocol::QualityPlan, byte_level: bool, steps: &[protocol::GenStep]) -> String {
    let unit = if byte_level { "bytes" } else { "tokens" };
    let what = format!("Then quality: {}", plan_words(p, byte_level));
    let prefill = steps.iter().find(|s| s.phase == protocol::GenPhase::Prefill && s.latency_ms > 0.0);
    match prefill.map(|s| s.tokens_in as f64 / (s.latency_ms / 1000.0)) {
        Some(rate) => match p.estimate_ms(rate) {
            Some(ms) => format!("{what}: about {} at this run's prefill rate ({rate:.0} {unit}/s).", seconds(ms)),
            None => format!("{what}."),
        },
        None => format!("{what}: its time follows from the prefill's rate, measured next."),
    }
}

/// A time for people: "0.4 s", "12 s", "3 min 20 s" (whole seconds counted in integers:
/// a float remainder would link libm's fmod into the page).
fn seconds(ms: f64) -> String {
    let s = ms / 1000.0;
    let whole = s.round() as u64;
    if s < 10.0 {
        format!("{s:.1} s")
    } else if s < 120.0 {
        format!("{whole} s")
    } else {
        format!("{} min {} s", whole / 60, whole % 60)
    }
}

/// The answer for the query `key`, as the page holds it: the key, then the plan's four
/// fields, or `!` and the error, separated by U+001F (which neither a query nor a file
/// name carries).
#[cfg_attr(not(any(feature = "hydrate", test)), allow(dead_code))]
fn plan_entry(key: &str, got: &Result<protocol::QualityPlan, String>) -> String {
    match got {
        Ok(p) => format!("{key}\u{1f}{}\u{1f}{}\u{1f}{}\u{1f}{}", p.settings, p.tokens, p.text_bytes, p.text),
        Err(e) => format!("{key}\u{1f}!{e}"),
    }
}

/// The answer `entry` holds if it is the one for `key`.
fn plan_read(entry: &str, key: &str) -> Option<Result<protocol::QualityPlan, String>> {
    let rest = entry.strip_prefix(key)?.strip_prefix('\u{1f}')?;
    if let Some(e) = rest.strip_prefix('!') {
        return Some(Err(e.to_string()));
    }
    let mut f = rest.splitn(4, '\u{1f}');
    let mut num = || f.next().and_then(|n| n.parse::<u64>().ok());
    let (settings, tokens, text_bytes) = (num()? as u32, num()?, num()?);
    Some(Ok(protocol::QualityPlan { settings, tokens, text_bytes, text: f.next()?.to_string() }))
}

/// `GET /api/quality-plan`'s answer, read from its JSON value.
#[cfg(feature = "hydrate")]
fn plan_of(v: &serde_json::Value) -> Option<protocol::QualityPlan> {
    Some(protocol::QualityPlan {
        settings: v["settings"].as_u64()? as u32,
        tokens: v["tokens"].as_u64()?,
        text: v["text"].as_str()?.to_string(),
        text_bytes: v["text_bytes"].as_u64()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// While a generation with quality runs, the status says what quality will score, and
    /// its time once the prefill has measured a rate: settings × units at that rate.
    #[test]
    fn the_quality_ahead_is_timed_by_the_prefill_rate() {
        let plan = protocol::QualityPlan { settings: 10, tokens: 2000, text: "notes.txt".into(), text_bytes: 8000 };
        let before = quality_ahead(&plan, false, &[]);
        assert!(before.contains("10 settings × 2000 tokens of notes.txt") && before.contains("measured next"), "{before}");
        // 100 tokens in 50 ms: 2,000 tokens/s, so 10 × 2,000 tokens take 10 s.
        let step: protocol::GenStep = serde_json::from_value(serde_json::json!({
            "step": 0, "phase": "prefill", "position": 0, "tokens_in": 100, "latency_ms": 50.0,
            "allocated_bytes": 0, "peak_bytes": 0, "kv_cache_bytes": 0, "graph_bytes": 0
        }))
        .unwrap();
        let timed = quality_ahead(&plan, false, &[step]);
        assert!(timed.contains("about 10 s") && timed.contains("2000 tokens/s"), "{timed}");
        assert!(quality_ahead(&plan, true, &[]).contains("2000 bytes"));
        for got in [Ok(plan.clone()), Err("no text".to_string())] {
            let entry = plan_entry("model=torch_bytes&device=cpu", &got);
            assert_eq!(plan_read(&entry, "model=torch_bytes&device=cpu"), Some(got));
            assert_eq!(plan_read(&entry, "model=torch_bytes&device=cuda"), None);
        }
        assert_eq!((seconds(4_210.0), seconds(42_400.0), seconds(200_400.0)), ("4.2 s".into(), "42 s".into(), "3 min 20 s".into()));
    }
}
