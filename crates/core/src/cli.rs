//! The command line of a stage binary: [`stage_main`] gives every stage the same shared flags
//! (`--artifacts`, `--force`, `--config`, `--set`) plus the stage's own typed flags, merged
//! over its config by [`crate::config`] (defaults → config file → `--set` → flags), and the
//! same output contract: the summary (or the cache hit) on stderr, the artifact directory as
//! the last line of stdout, one-line errors with exit status 1.
use std::path::PathBuf;

use clap::{Args, Command, FromArgMatches};

use crate::config::{ConfigArgs, Layer};
use crate::stage::{Built, Stage};
use crate::ArtifactStore;

/// Flags every stage binary takes.
#[derive(Args, Debug, Clone)]
pub struct SharedArgs {
    /// Artifact root.
    #[arg(long, default_value = "artifacts")]
    pub artifacts: PathBuf,
    /// Recompute even when the output exists.
    #[arg(long)]
    pub force: bool,
    /// Config file and --set overrides.
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// What a stage's flags mean: its inputs, its run options and a layer over its config.
pub struct Invocation<S: Stage + ?Sized> {
    /// The stage's inputs.
    pub inputs: S::Inputs,
    /// Run options.
    pub options: S::Options,
    /// The stage's own flags as a config layer (see [`Layer::from_flags`]).
    pub flags: Layer,
}

/// A stage with a command line.
pub trait StageCli: Stage {
    /// The binary's name (e.g. `synth-data`).
    const BIN: &'static str = Self::NAME;
    /// One paragraph for `--help`.
    const ABOUT: &'static str;
    /// The stage's own arguments (inputs and flags).
    type Args: Args;
    /// Splits the parsed arguments (the shared ones are there for stages that orchestrate
    /// others in the same artifact root).
    fn invocation(args: Self::Args, shared: &SharedArgs) -> anyhow::Result<Invocation<Self>>;
    /// Work after the artifact exists, built or cached (e.g. a copy elsewhere).
    fn after(_built: &Built<Self::Summary>, _options: &Self::Options) -> anyhow::Result<()> {
        Ok(())
    }
    /// Another mode of the binary that runs instead of the stage (e.g. `evaluate --verify`):
    /// `Some(result)` when the arguments ask for it.
    fn instead(_args: &Self::Args, _shared: &SharedArgs) -> Option<anyhow::Result<()>> {
        None
    }
}

/// The command line of a binary taking `A` (and the shared stage flags when `shared`);
/// `Command::debug_assert` on it catches two flags with one name.
pub fn command<A: Args>(name: &'static str, about: &'static str, shared: bool) -> Command {
    let base = Command::new(name).version(crate::GAUGE_VERSION);
    // After the args: a derived `Args` sets the command's about from its struct's rustdoc,
    // which would replace the binary's own paragraph.
    A::augment_args(if shared { SharedArgs::augment_args(base) } else { base }).about(about)
}

/// Parses `A` for a binary named `name` (a command that is not a stage, e.g. `query`).
pub fn parse_args<A: Args>(name: &'static str, about: &'static str) -> A {
    A::from_arg_matches(&command::<A>(name, about, false).get_matches()).unwrap_or_else(|e| e.exit())
}

/// Parses the shared flags and `A` for a binary named `name`.
pub fn parse<A: Args>(name: &'static str, about: &'static str) -> (SharedArgs, A) {
    let matches = command::<A>(name, about, true).get_matches();
    let shared = SharedArgs::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let own = A::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    (shared, own)
}

/// The `main` of a stage binary.
pub fn stage_main<S: StageCli>() {
    let (shared, args) = parse::<S::Args>(S::BIN, S::ABOUT);
    crate::run_main(S::BIN, || {
        if let Some(done) = S::instead(&args, &shared) {
            return done;
        }
        let invocation = S::invocation(args, &shared)?;
        let config: S::Config = shared.config.resolve(invocation.flags)?;
        let store = ArtifactStore::new(&shared.artifacts);
        let built = crate::stage::run::<S>(&store, &config, &invocation.inputs, &invocation.options, shared.force)?;
        S::after(&built, &invocation.options)?;
        crate::report_outcome(S::BIN, &built.dir, built.cache_hit, || S::summary_line(&built.summary));
        Ok(())
    });
}

/// The generation flags of a stage whose config has a `generation` table (gauge-chat's
/// `GenerateOptions`): each sets one `generation.*` field; the rest go through
/// `--set generation.…`. Flattened into a stage's flags (`answer`, `synth-data`).
#[derive(clap::Args, Debug, Clone, Default, serde::Serialize)]
pub struct GenerationFlags {
    /// New tokens at most (`generation.max_new_tokens`).
    #[arg(long)]
    #[serde(rename = "generation.max_new_tokens", skip_serializing_if = "Option::is_none")]
    pub max_new_tokens: Option<usize>,
    /// Sampling temperature, 0: greedy (`generation.temperature`).
    #[arg(long, value_parser = finite_f32)]
    #[serde(rename = "generation.temperature", skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Repetition penalty over the last `generation.repeat_last_n` tokens, 1: off
    /// (`generation.repetition_penalty`).
    #[arg(long, value_parser = finite_f32)]
    #[serde(rename = "generation.repetition_penalty", skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f32>,
    /// OpenAI frequency penalty (`generation.frequency_penalty`).
    #[arg(long, value_parser = finite_f32)]
    #[serde(rename = "generation.frequency_penalty", skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f32>,
    /// OpenAI presence penalty (`generation.presence_penalty`).
    #[arg(long, value_parser = finite_f32)]
    #[serde(rename = "generation.presence_penalty", skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f32>,
    /// No n-gram of this size twice, 0: off (`generation.no_repeat_ngram_size`).
    #[arg(long)]
    #[serde(rename = "generation.no_repeat_ngram_size", skip_serializing_if = "Option::is_none")]
    pub no_repeat_ngram_size: Option<usize>,
    /// min-p sampling, 0: off (`generation.min_p`).
    #[arg(long, value_parser = finite_f32)]
    #[serde(rename = "generation.min_p", skip_serializing_if = "Option::is_none")]
    pub min_p: Option<f32>,
    /// DRY penalty multiplier, 0: off (`generation.dry_multiplier`; base, allowed length,
    /// window and breakers via --set generation.dry_*).
    #[arg(long, value_parser = finite_f32)]
    #[serde(rename = "generation.dry_multiplier", skip_serializing_if = "Option::is_none")]
    pub dry_multiplier: Option<f32>,
}

/// A flag's number, refusing NaN and infinities: a config layer would drop them silently and
/// leave the default in place (`--alpha nan` meaning 0.5).
pub fn finite_f32(s: &str) -> Result<f32, String> {
    finite_f64(s).map(|v| v as f32).and_then(|v| if v.is_finite() { Ok(v) } else { Err(format!("`{s}` is out of range for a 32-bit float")) })
}

/// [`finite_f32`] for 64-bit flags.
pub fn finite_f64(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        Ok(_) => Err(format!("`{s}` is not a finite number")),
        Err(e) => Err(format!("`{s}`: {e}")),
    }
}
