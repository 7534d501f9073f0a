//! The models a process serves, as a value: [`Catalog`]. The built-in models and decoder
//! presets are in every catalog; the team's models, its decoders and the files of its
//! models directory that were refused are what the server and the CLI found at start-up
//! (the engine's `team::load_dirs`), and what the browser reads from `/api/info`.
//!
//! Nothing here is process-wide: the server keeps its catalog in its app state, the CLI
//! builds one at start, the engine's worker gets one in its config, and the app keeps one in
//! a Leptos context. Parsing a model's name ([`Catalog::parse`]) and the checks that need to
//! know what is served ([`crate::RunSpec::check`]) take it explicitly.
//!
//! A name read without a catalog (serde: a request body, a record) that is not built in
//! reads as [`ModelId::Named`]; [`Catalog::resolve`] turns it into the model it names, and
//! the spec's check refuses one that stays unresolved (not served here), with the same
//! message as an unknown name.

use std::sync::Arc;

use crate::decoder::{presets, DecoderModel};
use crate::team::TeamModel;
use crate::ModelId;

/// The models this process serves. Cheap to clone (its entries are shared).
///
/// A team entry lives as long as the process once a catalog holds it (it is leaked): a
/// [`ModelId`] stays `Copy` and carries what it names, so a resolved id answers for its
/// model (display name, input, facts) without a catalog at hand. Catalogs are built once
/// per process (the server, the CLI, the browser's page), never per request.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    team: Vec<&'static TeamModel>,
    decoders: Vec<&'static DecoderModel>,
    /// Names of files the models directory holds but this process refused, each with why
    /// ("broken.pt: does not load as TorchScript: ..."): a request for one of them is
    /// answered with that reason rather than a bare "unknown model".
    refused: Vec<(String, String)>,
}

impl Catalog {
    /// The built-in models and decoder presets only (no models directory).
    pub fn built_in() -> Catalog {
        Catalog::default()
    }

    /// A catalog serving the built-in models, `team` and the team decoders `decoders` (a
    /// decoder named like a preset is left out), remembering the `refused` files (model
    /// name, reason).
    pub fn new(team: Vec<TeamModel>, decoders: Vec<DecoderModel>, refused: Vec<(String, String)>) -> Catalog {
        let leak = |m| &*Box::leak(Box::new(m));
        Catalog {
            inner: Arc::new(Inner {
                team: team.into_iter().map(leak).collect(),
                decoders: decoders
                    .into_iter()
                    .filter(|m| !presets().iter().any(|p| p.name == m.name))
                    .map(|m| &*Box::leak(Box::new(m)))
                    .collect(),
                refused,
            }),
        }
    }

    /// The team models served, in the order they were loaded.
    pub fn team(&self) -> impl Iterator<Item = &'static TeamModel> + '_ {
        self.inner.team.iter().copied()
    }

    /// The team model served under `name`.
    pub fn team_model(&self, name: &str) -> Option<&'static TeamModel> {
        self.team().find(|m| m.name == name)
    }

    /// The team decoders served (what `/api/info` lists beside the presets).
    pub fn team_decoders(&self) -> impl Iterator<Item = &'static DecoderModel> + '_ {
        self.inner.decoders.iter().copied()
    }

    /// Every decoder served: the presets, then the team's.
    pub fn decoders(&self) -> impl Iterator<Item = &'static DecoderModel> + '_ {
        presets().iter().chain(self.team_decoders())
    }

    /// The served decoder called `name`: a preset or a team decoder.
    pub fn decoder(&self, name: &str) -> Option<&'static DecoderModel> {
        self.decoders().find(|m| m.name == name)
    }

    /// Why the models directory's `name` is not served, when it holds such a file that was
    /// refused: "FILE: reason".
    pub fn refusal(&self, name: &str) -> Option<&str> {
        self.inner.refused.iter().find(|(n, _)| n == name).map(|(_, why)| why.as_str())
    }

    /// The refused files, by model name, with why.
    pub fn refused(&self) -> &[(String, String)] {
        &self.inner.refused
    }

    /// Every model served: the built-in ones, the decoders, then the team's.
    pub fn models(&self) -> Vec<ModelId> {
        ModelId::ALL
            .into_iter()
            .chain(self.decoders().map(ModelId::Decoder))
            .chain(self.team().map(ModelId::Team))
            .collect()
    }

    /// The served model called `name`, or why not (see [`Catalog::unknown_message`]): only
    /// served models parse, so the command line and URLs name what can run.
    pub fn parse(&self, name: &str) -> Result<ModelId, String> {
        self.models()
            .into_iter()
            .find(|m| m.as_str() == name)
            .ok_or_else(|| self.unknown_message(name))
    }

    /// `id` as this catalog serves it: a [`ModelId::Named`] that names a served model
    /// becomes that model; any other id is returned as it is.
    pub fn resolve(&self, id: ModelId) -> ModelId {
        match id {
            ModelId::Named(name) => self.parse(&name).unwrap_or(id),
            _ => id,
        }
    }

    /// `spec`'s model as this catalog serves it (see [`Catalog::resolve`]).
    pub fn resolve_spec(&self, spec: &mut crate::RunSpec) {
        spec.model = self.resolve(spec.model);
    }

    /// A served decoder's id.
    pub fn decoder_id(&self, name: &str) -> Option<ModelId> {
        self.decoder(name).map(ModelId::Decoder)
    }

    /// "unknown model `x`; known models: ..." (the served ones, team models included), or,
    /// for a file of the models directory that was refused at start-up, why: "team model
    /// `x` is not served: x.pt: does not load as TorchScript: ...".
    pub fn unknown_message(&self, name: &str) -> String {
        if let Some(why) = self.refusal(name) {
            return format!("team model `{name}` is not served: {why}");
        }
        let known: Vec<_> = self.models().iter().map(|m| m.as_str().to_string()).collect();
        format!("unknown model `{name}` (not served here); known models: {}", known.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::team::{Sidecar, TrainingEffect};

    fn team_model(name: &str) -> TeamModel {
        let sidecar: Sidecar = serde_json::from_str(
            r#"{"display_name": "Detector", "inputs": [{"shape": ["batch", 3, "size", "size"]}],
                "size": {"meaning": "image side", "default": 64, "max": 256}}"#,
        )
        .unwrap();
        let training = TrainingEffect { random_in_train: true, train_differs_from_eval: true };
        TeamModel::new(name.into(), sidecar, 1000, training)
    }

    /// Two catalogs in one process are independent: what one serves, the other does not
    /// know (no process-wide state), and a name read without either resolves in the one
    /// that serves it only.
    #[test]
    fn catalogs_are_values_that_do_not_share_what_they_serve() {
        let ours = Catalog::new(vec![team_model("detector")], vec![], vec![("broken".into(), "broken.pt: does not load".into())]);
        let other = Catalog::built_in();
        let id = ours.parse("detector").unwrap();
        assert_eq!(id.display_name(), "Detector");
        assert!(id.has_dropout() && !id.has_batchnorm(), "measured at load: random in train mode");
        assert_eq!(id.input().default, 64);
        assert!(other.parse("detector").unwrap_err().starts_with("unknown model `detector` (not served here); known models: tiny_mlp,"));
        assert_eq!(ours.models().len(), other.models().len() + 1);

        let read: ModelId = serde_json::from_str("\"detector\"").unwrap();
        assert!(matches!(read, ModelId::Named(_)), "{read:?}");
        assert_eq!(read, id, "ids are equal by name");
        assert!(matches!(ours.resolve(read), ModelId::Team(m) if m.sidecar.display_name == "Detector"));
        assert!(matches!(other.resolve(read), ModelId::Named(_)));
        // Built-in models and presets need no catalog.
        assert_eq!(serde_json::from_str::<ModelId>("\"resnet18\"").unwrap(), ModelId::Resnet18);
        assert!(serde_json::from_str::<ModelId>("\"llama_tiny\"").unwrap().is_decoder());

        // The spec's check resolves nothing itself: a name is refused with the catalog's
        // reason, a refused file's included.
        let spec = |model| crate::RunSpec { model, ..crate::RunSpec::default() };
        let limits = crate::Limits::default();
        assert!(spec(id).check(&ours, &limits).is_ok());
        let e = spec(read).check(&other, &limits).unwrap_err();
        assert_eq!(e.field, "model");
        assert!(e.message.starts_with("unknown model `detector`"), "{}", e.message);
        let broken: ModelId = "broken".parse().unwrap();
        let e = spec(broken).check(&ours, &limits).unwrap_err();
        assert_eq!(e.message, "team model `broken` is not served: broken.pt: does not load");
    }

    /// A team decoder named like a preset is left out: the preset keeps its name.
    #[test]
    fn a_preset_name_stays_the_preset() {
        let mut fake = crate::decoder::preset(crate::decoder::CPU_PRESET).unwrap().clone();
        fake.display_name = "an impostor".into();
        let c = Catalog::new(vec![], vec![fake], vec![]);
        assert_eq!(c.team_decoders().count(), 0);
        assert_ne!(c.decoder(crate::decoder::CPU_PRESET).unwrap().display_name, "an impostor");
        assert_eq!(c.decoders().count(), crate::decoder::presets().len());
    }
}
