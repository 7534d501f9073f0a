//! What reads or writes the whole table at once: a page's address (its query, both ways,
//! with what a link asked for that the page could not use), the command line (`gradless
//! measure|generate` and the exported script's flags), a run's label and what differs from
//! a default.

use super::{setting, Kind, Page, RunKind, Said, Setting, SETTINGS};
use crate::RunSpec;

/// The rows of `page`, in `table`.
pub fn on_page(table: &'static [Setting], page: Page) -> impl Iterator<Item = &'static Setting> {
    table.iter().filter(move |s| s.on_page(page))
}

/// The address's query (without `?`) for `spec` on `page`, from `table`.
pub fn query(table: &'static [Setting], page: Page, spec: &RunSpec) -> String {
    on_page(table, page)
        .filter(|s| s.written(spec))
        .filter_map(|s| s.value(spec).map(|v| format!("{}={}", s.key, encode(&v))))
        .collect::<Vec<_>>()
        .join("&")
}

/// What reading an address did beyond its settings: each value it could not use, and
/// each old key it read under today's name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reading {
    /// `(key, value, why)`.
    pub refused: Vec<(String, String, String)>,
    /// `(old key, value, today's key)`.
    pub renamed: Vec<(String, String, String)>,
}

/// Applies the address's values (`get`: the router's reading of a key) to `spec`, page
/// `page`'s rows in table order; a value a row cannot take leaves the spec's.
///
/// The model's name is resolved in `catalog` (the row reads a name without one); a name it
/// does not serve is refused, the spec keeping its model.
pub fn read_query(
    table: &'static [Setting],
    page: Page,
    spec: &mut RunSpec,
    get: &dyn Fn(&str) -> Option<String>,
    catalog: &crate::Catalog,
) -> Reading {
    let mut reading = Reading::default();
    let model = spec.model;
    let run = RunKind::of(spec);
    for s in on_page(table, page).filter(|s| s.applies_to(run)) {
        if let Some(v) = get(s.key) {
            if let (false, Some(only)) = (s.in_use(spec), s.only_with) {
                let (on, word) = (setting(only.on).key, only.word);
                reading.refused.push((s.key.into(), v, format!("it applies with {on}={word} only")));
            } else if let Err(why) = s.set(spec, &v) {
                reading.refused.push((s.key.into(), v, why));
            }
        } else if let Some(old) = s.legacy {
            // The old key's value, when it is one of this setting's words.
            if let Some(v) = get(old).filter(|v| s.parse(v).is_ok()) {
                if s.set(spec, &v).is_ok() {
                    reading.renamed.push((old.into(), v, s.key.into()));
                }
            }
        }
    }
    let mut old_keys: Vec<&str> = on_page(table, page).filter_map(|s| s.legacy).collect();
    old_keys.dedup();
    for old in old_keys {
        if let Some(v) = get(old).filter(|_| !reading.renamed.iter().any(|(k, _, _)| k == old)) {
            let why = format!("`{old}` is the old key of {}, and “{v}” is none of their values", {
                let names: Vec<&str> = on_page(table, page).filter(|s| s.legacy == Some(old)).map(|s| s.key).collect();
                names.join(" and ")
            });
            reading.refused.push((old.into(), v, why));
        }
    }
    spec.model = catalog.resolve(spec.model);
    if let crate::ModelId::Named(name) = spec.model {
        // The model's row is the table's first: its refusal is said first.
        reading.refused.insert(0, ("model".into(), name.to_string(), catalog.unknown_message(&name)));
        spec.model = model;
    }
    reading
}

/// `--flag=value` for every setting of `spec`'s kind of run that a command line writes
/// (a switch as a bare `--flag`, a pair as `--eval` / `--train`); `skip`: keys left out.
pub fn command_args(table: &'static [Setting], spec: &RunSpec, skip: &[&str]) -> Vec<String> {
    table
        .iter()
        .filter(|s| !skip.contains(&s.key) && s.written(spec))
        .filter_map(|s| {
            let v = s.value(spec)?;
            Some(match s.kind {
                Kind::Switch if v == "1" => format!("--{}", s.flag),
                Kind::Switch => return None,
                Kind::Pair { on, off } => format!("--{}", if v == "1" { on } else { off }),
                Kind::Text => format!("--{}={}", s.flag, shell_quoted(&v)),
                _ => format!("--{}={v}", s.flag),
            })
        })
        .collect()
}

/// The `gradless` command that makes the same run (`measure` or `generate`), every flag
/// from `table`: the first line of the Python snippets, as a comment.
pub fn command_line(table: &'static [Setting], spec: &RunSpec) -> String {
    let command = match RunKind::of(spec) {
        RunKind::Forward => "measure",
        RunKind::Generate => "generate",
    };
    format!("gradless {command} {}", command_args(table, spec, &[]).join(" "))
}

/// The run's label from `table`: each setting as its row says it.
pub fn label(table: &'static [Setting], spec: &RunSpec) -> String {
    table
        .iter()
        .filter(|s| s.in_use(spec))
        .filter_map(|s| {
            let (template, always) = match s.said {
                Said::Never => return None,
                Said::Always(t) => (t, true),
                Said::NotDefault(t) => (t, false),
            };
            let v = s.value(spec)?;
            (always || !s.is_default(spec)).then(|| template.replace("{}", &s.said_value(&v)))
        })
        .collect::<Vec<_>>()
        .join(" · ")
}

/// The settings of `spec` that differ from `default`, as `label: value` in the controls'
/// words, table order (what a page says it ran).
pub fn differences(table: &'static [Setting], page: Page, spec: &RunSpec, default: &RunSpec) -> Vec<String> {
    on_page(table, page)
        .filter(|s| s.in_use(spec) && s.key != "device" && s.key != "threads")
        .filter_map(|s| {
            let v = s.shown(spec)?;
            (s.in_use(default).then(|| s.shown(default)).flatten().as_deref() != Some(v.as_str()))
                .then(|| format!("{}: {}", s.label, s.text(&v)))
        })
        .collect()
}

/// `text` as one shell word: as is when every character is plain, in single quotes
/// otherwise, and in bash's `$'…'` with escapes when it holds a control character (a new
/// line would end the snippets' comment line that carries the command). Not `shlex::try_quote`:
/// it keeps a new line as a new line inside its quotes, which would end that comment.
pub fn shell_quoted(text: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_./:=,+-@%".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        return text.to_string();
    }
    if !text.chars().any(char::is_control) {
        return format!("'{}'", text.replace('\'', "'\\''"));
    }
    let mut out = String::from("$'");
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// What an address's value keeps as is: RFC 3986's unreserved characters. Everything else
/// goes out as `%XX` of its UTF-8 bytes (a space as `%20`, never `+`, which a query reader
/// may leave a plus).
const QUERY_VALUE: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

/// An address's value, percent-encoded.
fn encode(v: &str) -> String {
    percent_encoding::utf8_percent_encode(v, QUERY_VALUE).to_string()
}

impl RunSpec {
    /// A short human label of the settings, e.g. `eval · no_grad · fp16 · batch 32`, from
    /// the settings table.
    pub fn label(&self) -> String {
        label(SETTINGS, self)
    }
}

#[cfg(test)]
mod tests {
    /// The encoding links were written with: unreserved characters as is, every other
    /// byte of the UTF-8 as `%XX` in capitals (a space `%20`, a plus `%2B`).
    #[test]
    fn a_value_is_percent_encoded_as_links_always_were() {
        assert_eq!(super::encode("a b/ü~-_.+&="), "a%20b%2F%C3%BC~-_.%2B%26%3D");
        assert_eq!(super::encode("resnet18"), "resnet18");
    }
}
