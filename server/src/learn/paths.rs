//! Onboarding paths as a lead writes them: TOML, one path a file in the `paths/` folder
//! (beside the team models, or `--paths-dir`), or the same text sent from `/learn/new`.
//! Every error names the file and the field.
//!
//! ```toml
//! id = "serving"
//! title = "Serving our models"
//! note = "Read this before your first on-call."
//!
//! [[step]]
//! title = "eval() is not no_grad()"
//! card = "eval-and-autograd"      # a pitfall card, optionally with model, batch, device
//! model = "resnet18"
//!
//! [[step]]
//! title = "no_grad on our MLP"
//! setting = "grad"              # a change of one setting: from -> to, on model
//! from = "enabled"
//! to = "no_grad"
//! model = "tiny_mlp"
//! figure = "peak"               # or p50
//! generate = false              # true: on the Generate page (a decoder)
//! ```

use std::path::Path;

use protocol::learn::{ChangeFigure, LearnPath, Step, StepKind};
use protocol::{DeviceChoice, ModelId, PitfallInfo};
use serde::Deserialize;

/// The shipped path, "Inference settings in ten minutes".
pub const SHIPPED: &str = include_str!("inference-settings.toml");

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPath {
    id: String,
    title: String,
    #[serde(default)]
    note: String,
    #[serde(default)]
    step: Vec<RawStep>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    title: String,
    #[serde(default)]
    note: String,
    #[serde(default)]
    after: String,
    card: Option<String>,
    model: Option<String>,
    batch: Option<u32>,
    device: Option<String>,
    setting: Option<String>,
    from: Option<toml::Value>,
    to: Option<toml::Value>,
    figure: Option<String>,
    #[serde(default)]
    generate: bool,
}

/// A path's problem: the field it is in, and what is wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct PathError {
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for PathError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}`: {}", self.field, self.message)
    }
}

fn error(field: impl Into<String>, message: impl Into<String>) -> PathError {
    PathError { field: field.into(), message: message.into() }
}

/// Reads one path from its TOML text, checked against the cards this server has.
pub fn parse(text: &str, cards: &[PitfallInfo], source: &str, catalog: &protocol::Catalog) -> Result<LearnPath, PathError> {
    let raw: RawPath = toml::from_str(text).map_err(|e| {
        let message = e.message().to_string();
        // toml names an unknown or missing key in its message; the field is the key.
        let field = message
            .split('`')
            .nth(1)
            .filter(|_| message.contains("field"))
            .unwrap_or("toml")
            .to_string();
        let line = e.span().map(|s| text[..s.start.min(text.len())].lines().count().max(1));
        error(field, match line {
            Some(l) => format!("{message} (line {l})"),
            None => message,
        })
    })?;
    let steps = raw
        .step
        .into_iter()
        .enumerate()
        .map(|(i, s)| step(i + 1, s, catalog))
        .collect::<Result<Vec<_>, _>>()?;
    let path = LearnPath {
        id: raw.id,
        title: raw.title,
        note: raw.note,
        steps,
        source: source.to_string(),
    };
    path.check(cards).map_err(|(field, message)| error(field, message))?;
    Ok(path)
}

fn step(n: usize, s: RawStep, catalog: &protocol::Catalog) -> Result<Step, PathError> {
    let field = |name: &str| format!("step[{n}].{name}");
    let model = |m: &Option<String>| -> Result<Option<ModelId>, PathError> {
        m.as_deref().map(|m| catalog.parse(m).map_err(|e| error(field("model"), e))).transpose()
    };
    let device = match s.device.as_deref() {
        None | Some("auto") => DeviceChoice::Auto,
        Some("cpu") => DeviceChoice::Cpu,
        Some("cuda") => DeviceChoice::Cuda,
        Some(other) => return Err(error(field("device"), format!("`{other}` is not a device: auto, cpu or cuda"))),
    };
    let kind = match (&s.card, &s.setting) {
        (Some(_), Some(_)) => {
            return Err(error(field("setting"), "a step is a card or a change of one setting, not both"));
        }
        (None, None) => return Err(error(field("card"), "a step needs a `card`, or a `setting` with `from` and `to`")),
        (Some(card), None) => {
            for (name, set) in [("from", s.from.is_some()), ("to", s.to.is_some()), ("figure", s.figure.is_some()), ("generate", s.generate)] {
                if set {
                    return Err(error(field(name), "only a change step (with `setting`) takes this"));
                }
            }
            // A path written with a card's old id names today's card.
            let card = engine::pitfalls::renamed::canonical_id(card).to_string();
            StepKind::Card { card, model: model(&s.model)?, batch: s.batch, device }
        }
        (None, Some(setting)) => {
            let value = |name: &str, v: &Option<toml::Value>| -> Result<String, PathError> {
                match v.as_ref().ok_or_else(|| error(field(name), "a change step needs both `from` and `to`"))? {
                    toml::Value::String(s) => Ok(s.clone()),
                    toml::Value::Integer(i) => Ok(i.to_string()),
                    toml::Value::Float(f) => Ok(f.to_string()),
                    toml::Value::Boolean(b) => Ok(b.to_string()),
                    _ => Err(error(field(name), "a setting's value is a string, a number or true / false")),
                }
            };
            let figure = match s.figure.as_deref() {
                Some("peak") => ChangeFigure::Peak,
                Some("p50") => ChangeFigure::P50,
                Some(other) => return Err(error(field("figure"), format!("`{other}` is not a figure a change asks about: peak or p50"))),
                None => return Err(error(field("figure"), "a change step names its figure: peak or p50")),
            };
            if s.batch.is_some() {
                return Err(error(field("batch"), "a change step sets its batch with `setting = \"batch\"`"));
            }
            let model = model(&s.model)?.ok_or_else(|| error(field("model"), "a change step names its model"))?;
            let kind = StepKind::Change {
                generate: s.generate,
                model,
                device,
                setting: setting.clone(),
                from: value("from", &s.from)?,
                to: value("to", &s.to)?,
                figure,
            };
            change_specs(&kind, catalog).map_err(|(name, message)| error(field(&name), message))?;
            kind
        }
    };
    Ok(Step { title: s.title, note: s.note, after: s.after, kind })
}

/// A change step's two runs, before and after: the run's settings with `setting` at `from`,
/// then at `to` (a dotted setting reaches inside: `generate.cache`). An error names the step's
/// field it comes from.
pub fn change_specs(step: &StepKind, catalog: &protocol::Catalog) -> Result<(protocol::RunSpec, protocol::RunSpec), (String, String)> {
    let StepKind::Change { generate, model, device, setting, from, to, .. } = step else {
        return Err(("kind".into(), "not a change step".into()));
    };
    let mut base = serde_json::json!({ "model": model, "device": device });
    if *generate {
        base["generate"] = serde_json::to_value(protocol::GenerateSpec::default()).unwrap_or_default();
    }
    let with = |text: &String, name: &str| -> Result<protocol::RunSpec, (String, String)> {
        // A number or true / false as itself, anything else a string.
        let value = match serde_json::from_str::<serde_json::Value>(text) {
            Ok(v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => v,
            _ => serde_json::Value::String(text.clone()),
        };
        let value = &value;
        let mut spec = base.clone();
        let mut at = &mut spec;
        let keys: Vec<&str> = setting.split('.').collect();
        for key in &keys[..keys.len() - 1] {
            at = at
                .get_mut(*key)
                .filter(|v| v.is_object())
                .ok_or_else(|| ("setting".to_string(), format!("`{setting}`: there is no `{key}` to set inside")))?;
        }
        at[keys[keys.len() - 1]] = value.clone();
        let spec: protocol::RunSpec = serde_json::from_value(spec).map_err(|e| {
            let e = e.to_string();
            if e.contains("unknown field") {
                ("setting".to_string(), format!("`{setting}` is not a run setting: {e}"))
            } else {
                (name.to_string(), format!("{text} is not a value of `{setting}`: {e}"))
            }
        })?;
        // Read back from JSON, a team model is a name again: resolved before the check.
        let spec = protocol::RunSpec { model: catalog.resolve(spec.model), ..spec };
        spec.check(catalog, &Default::default()).map_err(|e| (name.to_string(), format!("`{}`: {}", e.field, e.message)))?;
        Ok(spec)
    };
    Ok((with(from, "from")?, with(to, "to")?))
}

/// Every `*.toml` in `dir`, sorted by name; an error names the file and the field.
pub fn load_dir(dir: &Path, cards: &[PitfallInfo], catalog: &protocol::Catalog) -> anyhow::Result<Vec<LearnPath>> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("the paths folder {} cannot be read: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    let mut paths = Vec::new();
    for file in files {
        let name = format!("paths/{}", file.file_name().map(|n| n.to_string_lossy()).unwrap_or_default());
        let text = std::fs::read_to_string(&file)
            .map_err(|e| anyhow::anyhow!("{}: cannot be read: {e}", file.display()))?;
        let path = parse(&text, cards, &name, catalog).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
        paths.push(path);
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cards() -> Vec<PitfallInfo> {
        engine::pitfalls::catalogue(protocol::DeviceKind::Cpu)
    }

    #[test]
    fn the_shipped_path_reads_and_walks_the_seed_claims() {
        let path = parse(SHIPPED, &cards(), "shipped", &protocol::Catalog::built_in()).unwrap();
        assert_eq!(path.title, "Inference settings in ten minutes");
        let kinds: Vec<String> = path
            .steps
            .iter()
            .map(|s| match &s.kind {
                StepKind::Card { card, .. } => card.clone(),
                StepKind::Change { setting, .. } => format!("change {setting}"),
            })
            .collect();
        assert_eq!(kinds, ["eval-and-autograd", "inference-vs-nograd", "autocast", "change batch", "kv-cache-size", "generate-no-grad"]);
    }

    #[test]
    fn a_path_written_with_an_old_card_id_names_todays_card() {
        let text = "id = \"p\"\ntitle = \"P\"\n[[step]]\ntitle = \"eval\"\ncard = \"eval-not-nograd\"\n";
        let path = parse(text, &cards(), "p.toml", &protocol::Catalog::built_in()).unwrap();
        assert!(matches!(&path.steps[0].kind, StepKind::Card { card, .. } if card == "eval-and-autograd"));
    }

    #[test]
    fn a_step_may_not_give_away_what_its_card_hides() {
        let cards = cards();
        let claim = &cards.iter().find(|c| c.id == "eval-and-autograd").unwrap().claim;
        let text = format!("id = \"p\"\ntitle = \"P\"\n[[step]]\ntitle = \"eval\"\ncard = \"eval-and-autograd\"\nnote = \"{claim}\"\n");
        let e = parse(&text, &cards, "p.toml", &protocol::Catalog::built_in()).unwrap_err();
        assert_eq!(e.field, "step[1].note", "{e}");
        assert!(e.message.contains("after"), "{e}");
        // The same words after the lock-in are fine.
        let text = text.replace("note = ", "after = ");
        assert!(parse(&text, &cards, "p.toml", &protocol::Catalog::built_in()).is_ok());
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            ("title = \"x\"\n", "id"),
            ("id = \"x\"\ntitle = \"x\"\ncolour = 1\n", "colour"),
            ("id = \"x\"\ntitle = \"x\"\n[[step]]\ntitle = \"s\"\ncard = \"nope\"\n", "step[1].card"),
            ("id = \"x\"\ntitle = \"x\"\n[[step]]\ntitle = \"s\"\n", "step[1].card"),
            ("id = \"x\"\ntitle = \"x\"\n[[step]]\ntitle = \"s\"\ncard = \"autocast\"\nmodel = \"gpt9\"\n", "step[1].model"),
            ("id = \"x\"\ntitle = \"x\"\n[[step]]\ntitle = \"s\"\nsetting = \"grad\"\nfrom = \"enabled\"\nto = \"no_grad\"\nmodel = \"tiny_mlp\"\nfigure = \"speed\"\n", "step[1].figure"),
            ("id = \"x\"\ntitle = \"x\"\n[[step]]\ntitle = \"s\"\nsetting = \"grad\"\nfrom = \"enabled\"\nmodel = \"tiny_mlp\"\nfigure = \"peak\"\n", "step[1].to"),
            ("id = \"X Y\"\ntitle = \"x\"\n[[step]]\ntitle = \"s\"\ncard = \"autocast\"\n", "id"),
            ("id = \"x\"\ntitle = \"x\"\n", "step"),
            ("id = \"x\"\ntitle = \"x\"\n[[step]]\ntitle = \"s\"\nsetting = \"colour\"\nfrom = 1\nto = 2\nmodel = \"tiny_mlp\"\nfigure = \"peak\"\n", "step[1].setting"),
            ("id = \"x\"\ntitle = \"x\"\n[[step]]\ntitle = \"s\"\nsetting = \"grad\"\nfrom = \"enabled\"\nto = \"sometimes\"\nmodel = \"tiny_mlp\"\nfigure = \"peak\"\n", "step[1].to"),
            ("id = \"x\"\ntitle = \"x\"\n[[step]]\ntitle = \"s\"\nsetting = \"batch\"\nfrom = 1\nto = 0\nmodel = \"tiny_mlp\"\nfigure = \"peak\"\n", "step[1].to"),
        ];
        for (text, field) in cases {
            let e = parse(text, &cards(), "t", &protocol::Catalog::built_in()).unwrap_err();
            assert_eq!(e.field, field, "{text}: {e}");
        }
    }

    #[test]
    fn a_folder_error_names_its_file() {
        let dir = std::env::temp_dir().join(format!("gradless-paths-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.toml"), SHIPPED.replace("inference-settings", "team-a")).unwrap();
        std::fs::write(dir.join("b.toml"), "id = \"b\"\ntitle = \"B\"\n[[step]]\ntitle = \"s\"\ncard = \"nope\"\n").unwrap();
        let e = load_dir(&dir, &cards(), &protocol::Catalog::built_in()).unwrap_err().to_string();
        assert!(e.contains("b.toml") && e.contains("step[1].card"), "{e}");
        std::fs::remove_file(dir.join("b.toml")).unwrap();
        let paths = load_dir(&dir, &cards(), &protocol::Catalog::built_in()).unwrap();
        assert_eq!(paths.len(), 1);
        assert_eq!(paths[0].source, "paths/a.toml");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
