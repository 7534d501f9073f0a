//! Every setting of a run, declared once: [`SETTINGS`] ([`table`]), one typed row a
//! setting, the way ripgrep defines its flags. A row names the setting ([`SettingId`], which
//! is also what a refusal names), reads and writes its field of the [`RunSpec`] through the
//! struct ([`Access`]: plain functions over the fields, no JSON), says which other setting it
//! depends on as a predicate over the spec ([`OnlyWith`]), and gives its key in a page's
//! address (`kv_dtype`, unique per page), its command-line flag (`--kv-dtype`), its label
//! and help, its values (an enum's words come from the enum: [`crate::words`]) with the
//! words a control shows for them, the pages and the kinds of run it applies to, and how a
//! run's label says it.
//!
//! Everything that spells settings reads this table ([`codec`]): both pages' address codecs
//! (the app's `settings.rs` and `gen_settings.rs`), what a link asked for that a page could
//! not use, the Generate page's controls, the CLI's flags (`gradless
//! measure|compare|generate`), the exported script's arguments (`server/src/export.rs`), the
//! Python snippets' command line and [`RunSpec::label`]: see "Adding a setting" in
//! docs/ARCHITECTURE.md.

mod codec;
mod id;
mod table;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod saved;

pub use codec::*;
pub use id::SettingId;
pub use table::{ROW, SETTINGS};

use crate::{GenerateSpec, RunSpec};

/// A page with settings in its address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Page {
    /// The Lab (`/`): forward passes.
    Lab,
    /// `/generate`: generations on a decoder.
    Generate,
}

/// A kind of run: a spec without `generate` is a forward run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunKind {
    Forward,
    Generate,
}

impl RunKind {
    pub fn of(spec: &RunSpec) -> RunKind {
        match spec.generate {
            Some(_) => RunKind::Generate,
            None => RunKind::Forward,
        }
    }
}

/// What values a setting takes.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// One word of an enum, its words in declaration order (the default first).
    Choice(fn() -> &'static [&'static str]),
    /// A whole number from `min` to `max`; `offer`: the values a control offers (empty: a
    /// number field); `unset`: what the spec means when the number is left out.
    Count { min: u32, max: u32, offer: &'static [u32], unset: Option<u32> },
    /// On or off: `1` in an address, a bare `--flag`; off is left out of both.
    Switch,
    /// True or false, both said: `1` / `0` in an address, `--on` / `--off` on the command
    /// line (`model.eval()` / `model.train()`).
    Pair { on: &'static str, off: &'static str },
    /// A name `check` takes (a model's).
    Name(fn(&str) -> Result<(), String>),
    /// Free text, as given (the spec's check says what it takes).
    Text,
}

/// How a run's label says a setting; `{}` stands for its value.
#[derive(Clone, Copy, Debug)]
pub enum Said {
    Never,
    Always(&'static str),
    /// Only when the value is not the spec's default.
    NotDefault(&'static str),
}


/// How a row reads and writes its field of the spec: typed functions over the struct's
/// fields. `get` is `None` where the spec has no such field (a generation's setting on a
/// forward spec) or, for a number or a text, where it is left out.
#[derive(Clone, Copy, Debug)]
pub enum Access {
    /// An enum's word (or a model's name): read as the enum says it, written through its
    /// `FromStr`.
    Word { get: fn(&RunSpec) -> Option<&str>, set: fn(&mut RunSpec, &str) -> Result<(), String> },
    /// A whole number; `None` writes "left out" where the field may be, and keeps the spec's
    /// where it may not.
    Count { get: fn(&RunSpec) -> Option<u32>, set: fn(&mut RunSpec, Option<u32>) },
    /// True or false.
    Bool { get: fn(&RunSpec) -> Option<bool>, set: fn(&mut RunSpec, bool) },
    /// Free text, or left out.
    Text { get: fn(&RunSpec) -> Option<&str>, set: fn(&mut RunSpec, Option<String>) },
}

/// A setting that only applies while another is at one value (int4's group size): `holds`
/// says whether it does, over the spec's own fields; `on` and `word` name that value for
/// people and for the tests that set it.
#[derive(Clone, Copy, Debug)]
pub struct OnlyWith {
    pub on: SettingId,
    pub word: &'static str,
    pub holds: fn(&RunSpec) -> bool,
}

/// One setting. See the module's documentation.
#[derive(Clone, Copy, Debug)]
pub struct Setting {
    /// Which setting it is: the field it sets, and the name a refusal gives it.
    pub id: SettingId,
    /// How it reads and writes the spec.
    pub access: Access,
    /// Its key in a page's address.
    pub key: &'static str,
    /// Its command-line flag, without the dashes.
    pub flag: &'static str,
    pub label: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    /// The pages whose address carries it.
    pub pages: &'static [Page],
    /// The pages that draw its control from this row (others draw their own, or none).
    pub controls: &'static [Page],
    /// The kinds of run it applies to (and whose command takes its flag).
    pub runs: &'static [RunKind],
    /// Written in an address and a command line only when not at the spec's default; the
    /// others are always written, so a link restores what its sender saw whatever a later
    /// version's defaults are.
    pub quiet: bool,
    pub said: Said,
    /// Only with another setting at one value: left out otherwise.
    pub only_with: Option<OnlyWith>,
    /// The key (and flag) that older addresses and commands used for it, shared with
    /// another setting whose values are other words: a value is read as the setting whose
    /// word it is.
    pub legacy: Option<&'static str>,
    /// Words the controls show for some values (`dynamic` as "dynamic (grows)").
    pub texts: &'static [(&'static str, &'static str)],
}

pub const BOTH: &[Page] = &[Page::Lab, Page::Generate];
pub const LAB: &[Page] = &[Page::Lab];
pub const GEN: &[Page] = &[Page::Generate];
pub const NONE: &[Page] = &[];
pub const ANY_RUN: &[RunKind] = &[RunKind::Forward, RunKind::Generate];
pub const FORWARD: &[RunKind] = &[RunKind::Forward];
pub const GENERATION: &[RunKind] = &[RunKind::Generate];

/// A value read from text, typed as its row's field takes it.
enum Parsed {
    Word(String),
    Count(u32),
    On(bool),
    Text(String),
}

impl Setting {
    pub fn on_page(&self, page: Page) -> bool {
        self.pages.contains(&page)
    }

    pub fn has_control(&self, page: Page) -> bool {
        self.controls.contains(&page)
    }

    pub fn applies_to(&self, run: RunKind) -> bool {
        self.runs.contains(&run)
    }

    /// The value in `spec` as text (a word, digits, `1`/`0`); `None` for a number or a
    /// text left out, or a setting of another kind of run.
    pub fn value(&self, spec: &RunSpec) -> Option<String> {
        if !self.applies_to(RunKind::of(spec)) {
            return None;
        }
        match self.access {
            Access::Word { get, .. } | Access::Text { get, .. } => get(spec).map(str::to_string),
            Access::Count { get, .. } => get(spec).map(|n| n.to_string()),
            Access::Bool { get, .. } => get(spec).map(|on| if on { "1" } else { "0" }.to_string()),
        }
    }

    /// The value a control shows: [`Setting::value`], or what a number left out means.
    pub fn shown(&self, spec: &RunSpec) -> Option<String> {
        match (self.value(spec), self.kind) {
            (None, Kind::Count { unset: Some(n), .. }) => Some(n.to_string()),
            (v, _) => v,
        }
    }

    /// Whether it is at the default of a spec of the same kind (`RunSpec::default()`).
    pub fn is_default(&self, spec: &RunSpec) -> bool {
        self.value(spec) == self.value(&default_like(spec))
    }

    /// Whether it applies to `spec` given the other settings (`only_with`).
    pub fn in_use(&self, spec: &RunSpec) -> bool {
        self.applies_to(RunKind::of(spec)) && self.only_with.is_none_or(|o| (o.holds)(spec))
    }

    /// Whether an address or a command line writes it for `spec`.
    pub fn written(&self, spec: &RunSpec) -> bool {
        self.in_use(spec) && self.value(spec).is_some() && (!self.quiet || !self.is_default(spec))
    }

    /// The words a choice takes, or the numbers a count offers.
    pub fn choices(&self) -> Vec<String> {
        match self.kind {
            Kind::Choice(words) => words().iter().map(|w| w.to_string()).collect(),
            Kind::Count { offer, .. } => offer.iter().map(|n| n.to_string()).collect(),
            Kind::Switch | Kind::Pair { .. } => vec!["1".into(), "0".into()],
            Kind::Name(_) | Kind::Text => vec![],
        }
    }

    /// What a control shows for `value`.
    pub fn text(&self, value: &str) -> String {
        self.texts
            .iter()
            .find(|(v, _)| *v == value)
            .map(|(_, t)| t.to_string())
            .unwrap_or_else(|| value.to_string())
    }

    /// The value as a run's label says it (`eval`, `bf16`).
    pub fn said_value(&self, value: &str) -> String {
        match self.kind {
            Kind::Pair { on, off } => (if value == "1" { on } else { off }).to_string(),
            _ => value.to_string(),
        }
    }

    /// Sets it in `spec` from `text` (an address's or a command line's value; a switch
    /// takes `1`/`true`/`0`/`false`); the error says what it takes. Settings that only
    /// apply with another value (`only_with`) are cleared when that value changes.
    pub fn set(&self, spec: &mut RunSpec, text: &str) -> Result<(), String> {
        let value = self.parse(text)?;
        if !self.applies_to(RunKind::of(spec)) {
            return Err(format!("{} does not apply to this kind of run", self.key));
        }
        self.put(spec, value).map_err(|e| format!("{} “{text}”: {e}", self.key))?;
        for other in SETTINGS.iter().filter(|s| s.only_with.is_some_and(|o| o.on == self.id)) {
            if !other.in_use(spec) {
                other.clear(spec);
            }
        }
        Ok(())
    }

    /// Puts it back to what a spec of the same kind holds by default (a number's `None`,
    /// an enum's default, off).
    pub fn clear(&self, spec: &mut RunSpec) {
        let default = default_like(spec);
        let value = match self.access {
            Access::Word { get, .. } => get(&default).map(|w| Parsed::Word(w.into())),
            Access::Count { set, get } => {
                set(spec, get(&default));
                return;
            }
            Access::Bool { get, .. } => get(&default).map(Parsed::On),
            Access::Text { set, get } => {
                set(spec, get(&default).map(str::to_string));
                return;
            }
        };
        if let Some(v) = value {
            let _ = self.put(spec, v);
        }
    }

    /// Writes a parsed value through the row's field.
    fn put(&self, spec: &mut RunSpec, value: Parsed) -> Result<(), String> {
        match (self.access, value) {
            (Access::Word { set, .. }, Parsed::Word(w)) => set(spec, &w)?,
            (Access::Count { set, .. }, Parsed::Count(n)) => set(spec, Some(n)),
            (Access::Bool { set, .. }, Parsed::On(on)) => set(spec, on),
            (Access::Text { set, .. }, Parsed::Text(t)) => set(spec, Some(t)),
            _ => return Err(format!("{}: its kind of value and its field disagree", self.id)),
        }
        Ok(())
    }

    /// `text` as this setting's value, checked against what it takes.
    fn parse(&self, text: &str) -> Result<Parsed, String> {
        if let Kind::Text = self.kind {
            return Ok(Parsed::Text(text.into()));
        }
        let t = text.trim();
        match self.kind {
            Kind::Choice(words) => match words().contains(&t) {
                true => Ok(Parsed::Word(t.into())),
                false => Err(format!("unknown value `{t}`; expected one of: {}", words().join(", "))),
            },
            Kind::Count { min, max, .. } => match t.parse::<u32>() {
                Ok(n) if n >= min && n <= max => Ok(Parsed::Count(n)),
                _ if max == u32::MAX => Err(format!("{} must be a whole number of at least {min}, not “{t}”", self.key)),
                _ => Err(format!("{} must be a whole number from {min} to {max}, not “{t}”", self.key)),
            },
            Kind::Switch | Kind::Pair { .. } => match t {
                "1" | "true" => Ok(Parsed::On(true)),
                "0" | "false" => Ok(Parsed::On(false)),
                _ => Err(format!("{} is 1 or 0, not “{t}”", self.key)),
            },
            Kind::Name(check) => check(t).map(|_| Parsed::Word(t.into())),
            Kind::Text => unreachable!("read above"),
        }
    }

    /// Whether `text` is a value it takes.
    pub fn takes(&self, text: &str) -> bool {
        self.parse(text).is_ok()
    }
}

/// The row of setting `id` (the first, where two pages key one field apart).
pub fn setting(id: SettingId) -> &'static Setting {
    SETTINGS.iter().find(|s| s.id == id).expect("every setting has a row")
}

/// `RunSpec::default()`, a generation's when `spec` is one: what "the default" means for
/// a quiet setting and a label.
fn default_like(spec: &RunSpec) -> RunSpec {
    RunSpec {
        generate: spec.generate.as_ref().map(|_| GenerateSpec::default()),
        ..RunSpec::default()
    }
}
