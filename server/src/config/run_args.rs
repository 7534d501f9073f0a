//! A run's settings on the command line: one flag for each row of the settings table that
//! applies to the command's kind of run.

use protocol::settings::{Kind, RunKind, Setting, SettingId, SETTINGS};
use protocol::RunSpec;

/// A command's run settings: a flag for each setting of the table
/// ([`protocol::settings::SETTINGS`]) that applies to the command's kind of run, over the
/// command's defaults. Nothing here names a setting: a row added to the table is a flag of
/// every command whose runs it applies to.
pub trait RunCommand {
    const RUN: RunKind;
    /// Settings the command sets itself (compare varies the mode, grad and autocast).
    const SKIP: &'static [SettingId];
    fn defaults() -> RunSpec;
    /// The settings table (a test's may have a row more).
    fn table() -> &'static [Setting] {
        SETTINGS
    }
}

/// `gradless measure`'s settings.
#[derive(Debug, Clone)]
pub struct MeasureRun;
impl RunCommand for MeasureRun {
    const RUN: RunKind = RunKind::Forward;
    const SKIP: &'static [SettingId] = &[];
    fn defaults() -> RunSpec {
        RunSpec::default()
    }
}

/// `gradless compare`'s: measure's, but the modes it compares.
#[derive(Debug, Clone)]
pub struct CompareRun;
impl RunCommand for CompareRun {
    const RUN: RunKind = RunKind::Forward;
    const SKIP: &'static [SettingId] = &[SettingId::Eval, SettingId::Grad, SettingId::Autocast];
    fn defaults() -> RunSpec {
        RunSpec::default()
    }
}

/// `gradless generate`'s: one greedy generation on a decoder.
#[derive(Debug, Clone)]
pub struct GenerateRun;
impl RunCommand for GenerateRun {
    const RUN: RunKind = RunKind::Generate;
    const SKIP: &'static [SettingId] = &[];
    fn defaults() -> RunSpec {
        RunSpec {
            model: protocol::decoder::CPU_PRESET.parse().unwrap_or(protocol::ModelId::TinyMlp),
            batch: 1,
            input_size: Some(32),
            generate: Some(protocol::GenerateSpec::default()),
            ..RunSpec::default()
        }
    }
}

/// The settings a command line gave, over the command's defaults. The model stays a name
/// until the models directory is loaded (`cli::model`).
#[derive(Debug, Clone)]
pub struct RunArgs<C> {
    pub spec: RunSpec,
    pub model: String,
    command: std::marker::PhantomData<C>,
}

impl<C: RunCommand> RunArgs<C> {
    /// The rows of the table this command takes, in the table's order.
    pub fn rows() -> impl Iterator<Item = &'static Setting> {
        C::table().iter().filter(|s| s.applies_to(C::RUN) && !C::SKIP.contains(&s.id))
    }
}

/// The old flag of two settings (`--weights`): a value is read as the setting whose word
/// it is.
fn legacy_flags<C: RunCommand>() -> Vec<&'static str> {
    let mut flags: Vec<&str> = RunArgs::<C>::rows().filter_map(|s| s.legacy).collect();
    flags.dedup();
    flags
}

/// A setting's argument id: its key, apart from the ids of the command's other arguments
/// (`EngineArgs` has a `threads` of its own).
fn id(key: &str) -> &'static str {
    Box::leak(format!("setting:{key}").into_boxed_str())
}

impl<C: RunCommand> clap::Args for RunArgs<C> {
    fn augment_args(mut cmd: clap::Command) -> clap::Command {
        use clap::{Arg, ArgAction};
        let defaults = C::defaults();
        for row in Self::rows() {
            let shown = row.value(&defaults).filter(|_| !row.quiet);
            let help = match (&shown, row.kind) {
                (Some(v), Kind::Count { .. } | Kind::Choice(_) | Kind::Name(_)) => format!("{} [default: {v}]", row.help),
                _ => row.help.to_string(),
            };
            cmd = match row.kind {
                Kind::Switch => cmd.arg(Arg::new(id(row.key)).long(row.flag).action(ArgAction::SetTrue).help(help)),
                Kind::Pair { on, off } => {
                    let default = |word| if (shown.as_deref() == Some("1")) == (word == on) { " (the default)" } else { "" };
                    cmd.arg(Arg::new(id(on)).long(on).action(ArgAction::SetTrue).conflicts_with(id(off)).help(format!("{}{}", row.help, default(on))))
                        .arg(Arg::new(id(off)).long(off).action(ArgAction::SetTrue).help(format!("The other side of --{on}{}", default(off))))
                }
                Kind::Choice(words) => cmd.arg(
                    Arg::new(id(row.key))
                        .long(row.flag)
                        .value_parser(clap::builder::PossibleValuesParser::new(words()))
                        .help(help),
                ),
                Kind::Count { .. } => cmd.arg(Arg::new(id(row.key)).long(row.flag).value_name("N").help(help)),
                Kind::Name(_) => cmd.arg(Arg::new(id(row.key)).long(row.flag).value_name("NAME").help(help)),
                Kind::Text => cmd.arg(Arg::new(id(row.key)).long(row.flag).value_name("TEXT").help(help)),
            };
        }
        for old in legacy_flags::<C>() {
            cmd = cmd.arg(Arg::new(id(old)).long(old).hide(true));
        }
        cmd
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl<C: RunCommand> clap::FromArgMatches for RunArgs<C> {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut spec = C::defaults();
        let mut model = spec.model.as_str().to_string();
        let invalid = |flag: &str, e: String| clap::Error::raw(clap::error::ErrorKind::InvalidValue, format!("--{flag}: {e}\n"));
        let text = |key: &str| m.try_get_one::<String>(&format!("setting:{key}")).ok().flatten().cloned();
        let flag = |key: &str| m.try_get_one::<bool>(&format!("setting:{key}")).ok().flatten().copied().unwrap_or(false);
        for old in legacy_flags::<C>() {
            if let Some(v) = text(old) {
                let row = Self::rows()
                    .filter(|s| s.legacy == Some(old) && text(s.key).is_none())
                    .find(|s| s.set(&mut spec.clone(), &v).is_ok())
                    .ok_or_else(|| invalid(old, format!("unknown value `{v}` (--{old} is the old flag of the weights' dtype and the quantization: use --dtype or --quant)")))?;
                row.set(&mut spec, &v).map_err(|e| invalid(row.flag, e))?;
            }
        }
        for row in Self::rows() {
            let given = match row.kind {
                Kind::Switch => flag(row.key).then(|| "1".to_string()),
                Kind::Pair { on, off } => match (flag(on), flag(off)) {
                    (true, _) => Some("1".into()),
                    (_, true) => Some("0".into()),
                    _ => None,
                },
                _ => text(row.key),
            };
            match (given, row.kind) {
                (Some(v), Kind::Name(_)) => model = v,
                (Some(v), _) => row.set(&mut spec, &v).map_err(|e| invalid(row.flag, e))?,
                (None, _) => {}
            }
        }
        // A text prompt sets the prompt's length: the command's default length gives way,
        // an explicit --prompt is left for the spec's check to compare.
        let text_prompt = spec.generate.as_ref().is_some_and(|g| g.prompt_text.is_some());
        if text_prompt && text("prompt").is_none() {
            spec.input_size = None;
        }
        Ok(RunArgs { spec, model, command: std::marker::PhantomData })
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Line<C: RunCommand + Clone + Send + Sync + 'static> {
        #[command(flatten)]
        run: RunArgs<C>,
    }

    fn parse<C: RunCommand + Clone + Send + Sync + 'static>(args: &[&str]) -> Result<RunArgs<C>, clap::Error> {
        Line::<C>::try_parse_from(std::iter::once("gradless").chain(args.iter().copied())).map(|l| l.run)
    }

    #[test]
    fn the_flags_are_the_tables_and_int4_on_bf16_is_one_command() {
        let run = parse::<GenerateRun>(&["--model", "llama_tiny", "--dtype", "bf16", "--quant", "int4", "--group-size", "32", "--kv-dtype", "bf16", "--train"]).unwrap();
        let g = run.spec.generate.clone().unwrap();
        assert_eq!((run.spec.advanced.weights, g.weights, g.group_size, g.kv_dtype), (protocol::WeightsDtype::Bf16, protocol::WeightQuant::Int4, Some(32), protocol::KvDtype::Bf16));
        assert!(!run.spec.eval);
        assert_eq!(run.model, "llama_tiny");
        // The old flag reads as the setting whose word its value is.
        let old = parse::<GenerateRun>(&["--weights", "int8"]).unwrap();
        assert_eq!(old.spec.generate.unwrap().weights, protocol::WeightQuant::Int8);
        let old = parse::<MeasureRun>(&["--weights", "bf16"]).unwrap();
        assert_eq!(old.spec.advanced.weights, protocol::WeightsDtype::Bf16);
        let e = parse::<MeasureRun>(&["--weights", "int4"]).unwrap_err().to_string();
        assert!(e.contains("--dtype"), "{e}");
        // A word the setting does not take is refused with the ones it does.
        let e = parse::<GenerateRun>(&["--kv-dtype", "fp4"]).unwrap_err().to_string();
        assert!(e.contains("fp8_e4m3"), "{e}");
        // compare sets the modes itself.
        assert!(parse::<CompareRun>(&["--grad", "no_grad"]).is_err());
    }

    #[derive(Debug, Clone)]
    struct WithANewRow;
    impl RunCommand for WithANewRow {
        const RUN: RunKind = RunKind::Generate;
        const SKIP: &'static [SettingId] = &[];
        fn defaults() -> RunSpec {
            GenerateRun::defaults()
        }
        fn table() -> &'static [Setting] {
            protocol::testing::settings_with_a_new_row()
        }
    }

    #[test]
    fn a_row_added_to_the_table_is_a_flag() {
        let run = parse::<WithANewRow>(&["--logits"]).unwrap();
        assert!(run.spec.generate.unwrap().prefill_logits);
        assert!(parse::<GenerateRun>(&["--logits"]).is_err());
    }
}
