//! What a TorchScript module's forward pass declares, and the words for a sidecar that does
//! not fit it: which file, which input, and why.
//!
//! tch exposes no schema, but the interpreter states the declaration whenever arguments do
//! not bind (`forward() is missing value for argument 'ids'. Declaration: forward(... self,
//! Tensor ids, Tensor mask) -> Tensor`), before any of the module's code runs. Calling
//! forward with no arguments therefore reads it safely. A declaration that cannot be read
//! (another libtorch's wording) only makes the messages less precise: the probe still runs
//! the module on the sidecar's inputs, and its failure is reported with every input listed.

use protocol::team::Sidecar;
use tch::{CModule, IValue};

use crate::models::scripted::script_error;

/// The forward pass's arguments after `self`, as the module declares them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Declaration {
    /// `forward(Tensor ids, Tensor mask)`: the declaration as the interpreter prints it,
    /// without the module's own type.
    pub text: String,
    /// Argument names, in order.
    pub names: Vec<String>,
    /// How many arguments have no default (the sidecar must list at least these).
    pub required: usize,
}

impl Declaration {
    /// The module's forward declaration, read from the interpreter's binding error (see the
    /// module docs). `None` when it cannot be read.
    pub fn read(module: &CModule) -> Option<Declaration> {
        let none: [IValue; 0] = [];
        let e = tch::no_grad(|| module.forward_is(&none)).err()?;
        Declaration::parse(&e.to_string())
    }

    fn parse(error: &str) -> Option<Declaration> {
        let rest = &error[error.find("Declaration: forward(")? + "Declaration: forward(".len()..];
        // The arguments end at the parenthesis that closes `forward(`; types may nest
        // brackets and commas (`Tuple[Tensor, Tensor] pair`).
        let mut depth = 0usize;
        let mut end = None;
        for (i, c) in rest.char_indices() {
            match c {
                '(' | '[' => depth += 1,
                ']' => depth = depth.saturating_sub(1),
                ')' if depth == 0 => {
                    end = Some(i);
                    break;
                }
                ')' => depth -= 1,
                _ => {}
            }
        }
        let args = split_top_level(&rest[..end?]);
        // The first argument is the module itself (`__torch__.pkg.Net self`).
        let args: Vec<&str> = args.into_iter().skip(1).collect();
        let mut names = vec![];
        let mut required = 0;
        for a in &args {
            let (decl, default) = match a.split_once('=') {
                Some((d, _)) => (d.trim(), true),
                None => (a.trim(), false),
            };
            names.push(decl.rsplit(' ').next()?.to_string());
            if !default {
                required += 1;
            }
        }
        Some(Declaration {
            text: format!("forward({})", args.join(", ")),
            names,
            required,
        })
    }

    /// The sidecar must list between the required and all of the forward's arguments.
    pub fn check_count(&self, sidecar: &Sidecar) -> Result<(), String> {
        let n = sidecar.inputs.len();
        let total = self.names.len();
        if n >= self.required && n <= total {
            return Ok(());
        }
        let takes = if self.required == total {
            format!("{total}")
        } else {
            format!("{} to {total}", self.required)
        };
        Err(format!(
            "the sidecar lists {n} input{} ({}) but the module's forward takes {takes}: {}",
            if n == 1 { "" } else { "s" },
            sidecar.describe_inputs(),
            self.text
        ))
    }
}

/// Splits at the commas outside brackets.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = vec![];
    let (mut depth, mut start) = (0usize, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if !text[start..].trim().is_empty() {
        parts.push(text[start..].trim());
    }
    parts
}

/// Why the probe's pass on the sidecar's inputs failed, in words: the exception, the input
/// at fault when the module's own code names it at the failing line (`e = (embed).forward
/// (ids, )` uses `ids`, the forward's argument 0), and otherwise every input listed.
pub fn mismatch(sidecar: &Sidecar, declaration: Option<&Declaration>, error: &str) -> String {
    let exception = script_error(error);
    let at_fault = declaration
        .zip(failing_line(error))
        .map(|(d, line)| {
            d.names
                .iter()
                .enumerate()
                .filter(|(i, name)| *i < sidecar.inputs.len() && mentions(&line, name))
                .map(|(i, _)| i)
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    match at_fault.as_slice() {
        [i] => {
            let input = &sidecar.inputs[*i];
            let argument = declaration
                .and_then(|d| d.names.get(*i))
                .filter(|n| input.name.as_ref() != Some(*n))
                .map(|n| format!(", the forward's `{n}`"))
                .unwrap_or_default();
            format!(
                "{}{argument}, given as {}, fails in the module: {exception}",
                input.label(*i),
                input.describe()
            )
        }
        _ => format!(
            "on the sidecar's inputs ({}) the module fails: {exception}",
            sidecar.describe_inputs()
        ),
    }
}

/// The line of the module's own forward marked `<--- HERE` in the interpreter's traceback
/// (the first frame of its serialized code).
fn failing_line(error: &str) -> Option<String> {
    let error = error.replace("\\n", "\n");
    let lines: Vec<&str> = error.lines().collect();
    let here = lines.iter().position(|l| l.contains("<--- HERE"))?;
    let line = lines.get(here.checked_sub(1)?)?;
    Some(line.trim().to_string())
}

/// Whether `line` uses the identifier `name` (not as part of a longer one).
fn mentions(line: &str, name: &str) -> bool {
    line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|word| word == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_declaration_is_read_from_a_binding_error() {
        let d = Declaration::parse("forward() is missing value for argument 'ids'. Declaration: forward(__torch__.nets.TokenMask self, Tensor ids, Tuple[Tensor, Tensor] pair, Tensor? mask=None) -> Tensor").unwrap();
        assert_eq!(d.names, ["ids", "pair", "mask"]);
        assert_eq!(d.required, 2);
        assert_eq!(
            d.text,
            "forward(Tensor ids, Tuple[Tensor, Tensor] pair, Tensor? mask=None)"
        );
        assert_eq!(Declaration::parse("RuntimeError: something else"), None);
    }

    #[test]
    fn the_input_at_fault_is_named_when_the_failing_line_uses_it() {
        let sidecar: Sidecar = serde_json::from_str(
            r#"{"display_name": "t", "inputs": [
                {"shape": ["batch", 8], "dtype": "float32"},
                {"name": "mask", "shape": ["batch", 8], "dtype": "float32"}]}"#,
        )
        .unwrap();
        let d = Declaration::parse("Declaration: forward(__torch__.M self, Tensor ids, Tensor mask) -> Tensor").unwrap();
        let error = "The following operation failed in the TorchScript interpreter.\nTraceback of TorchScript, serialized code (most recent call last):\n  File \"code/__torch__/m.py\", line 13, in forward\n    e = (embed).forward(ids, )\n         ~~~~~~~~~~~~~~ <--- HERE\nRuntimeError: Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; but got torch.FloatTensor instead";
        let m = mismatch(&sidecar, Some(&d), error);
        assert!(
            m.starts_with("input 0, the forward's `ids`, given as [batch, 8] float32, fails in the module: RuntimeError: Expected tensor"),
            "{m}"
        );
        // Without a declaration every input is listed.
        let m = mismatch(&sidecar, None, error);
        assert!(m.contains("[batch, 8] float32 + mask [batch, 8] float32"), "{m}");
        let e = d.check_count(&Sidecar {
            inputs: sidecar.inputs[..1].to_vec(),
            ..sidecar.clone()
        });
        assert!(
            e.unwrap_err().contains("lists 1 input ([batch, 8] float32) but the module's forward takes 2: forward(Tensor ids, Tensor mask)")
        );
    }
}
