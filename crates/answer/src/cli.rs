//! The `answer` binary's own flags (the shared ones come from [`gauge_core::cli`]).
use std::path::PathBuf;

use gauge_core::cli::{Invocation, SharedArgs, StageCli};
use gauge_core::config::Layer;
use serde::Serialize;

use crate::{Answer, AnswerInputs, AnswerOptions};

/// Inputs and flags of `answer`; config flags set one field of [`crate::AnswerConfig`] each.
#[derive(clap::Args, Debug, Serialize)]
pub struct AnswerArgs {
    /// One question (or --golden FILE).
    #[serde(skip)]
    pub question: Option<String>,
    /// The index artifact directory.
    #[arg(long)]
    #[serde(skip)]
    pub index: PathBuf,
    /// Questions from a golden-set file (JSONL or Parquet).
    #[arg(long)]
    #[serde(skip)]
    pub golden: Option<PathBuf>,
    /// Questions the corpus cannot answer (JSON Lines of `qid`, `question`, optional
    /// `reference_answer`; no gold), asked after --golden's: a refusal is right.
    #[arg(long)]
    #[serde(skip)]
    pub out_of_corpus: Option<PathBuf>,
    /// At most this many questions of --golden (0: all).
    #[arg(long, default_value_t = 0)]
    #[serde(skip)]
    pub limit: usize,
    /// Local model: a GGUF file, a Hugging Face folder or a name in the models directory
    /// (`generator.model`, with `generator.kind = "local"`).
    #[arg(long)]
    #[serde(rename = "generator.model")]
    pub model: Option<String>,
    /// LoRA adapter folder (PEFT format, e.g. a train-lora artifact's adapter/) for the local
    /// model: beside its quantised blocks, merged into f32 weights (`generator.adapter`).
    #[arg(long)]
    #[serde(rename = "generator.adapter")]
    pub adapter: Option<String>,
    /// Prompt template: plain or four_phase (`template`).
    #[arg(long)]
    pub template: Option<String>,
    /// The form the reply is held to: free, or four_phase (a JSON document of the four
    /// phases, in order, each within its budget, citing only the given tags; `structure.kind`).
    #[arg(long)]
    #[serde(rename = "structure.kind")]
    pub structure: Option<String>,
    /// Generation settings (`generation.*`).
    #[command(flatten)]
    #[serde(flatten)]
    pub generation: gauge_core::cli::GenerationFlags,
    /// Passages given to the model (`retrieval.k`).
    #[arg(short)]
    #[serde(rename = "retrieval.k")]
    pub k: Option<usize>,
    /// Refuse when the best retrieval score is under this (`retrieval.cutoff`).
    #[arg(long, value_parser = gauge_core::cli::finite_f32)]
    #[serde(rename = "retrieval.cutoff")]
    pub cutoff: Option<f32>,
    /// Device of the embedder, reranker and decoder: cpu, or cuda[:N] in a `--features cuda` build.
    #[arg(long, default_value = "cpu")]
    #[serde(skip)]
    pub device: String,
    /// Prompt templates folder.
    #[arg(long, default_value = "pipelines/prompts")]
    #[serde(skip)]
    pub prompts: PathBuf,
    /// Stream generated text to stderr.
    #[arg(long)]
    #[serde(skip)]
    pub stream: bool,
}

impl StageCli for Answer {
    const ABOUT: &'static str = "Answers questions from an index with cited passages (local Burn decoder or an OpenAI-compatible endpoint) into artifacts/answer/<fingerprint>/answers.parquet, every citation checked against the passages given; prints the artifact directory as the last line of stdout. API generator: --set generator.kind=api --set generator.base_url=… --set generator.model=… --set generator.api_key_env=VAR.";
    type Args = AnswerArgs;

    fn invocation(args: AnswerArgs, _shared: &SharedArgs) -> anyhow::Result<Invocation<Self>> {
        let mut flags = Layer::from_flags("flags", &args);
        if args.model.is_some() || args.adapter.is_some() {
            gauge_core::config::set_path(&mut flags.patch, "generator.kind", "local".into());
        }
        let inputs = AnswerInputs { index: args.index, golden: args.golden, question: args.question, out_of_corpus: args.out_of_corpus, limit: args.limit };
        Ok(Invocation { inputs, options: AnswerOptions { device: args.device, prompts: args.prompts, stream: args.stream }, flags })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn flags_have_distinct_names() {
        use gauge_core::cli::StageCli;
        gauge_core::cli::command::<super::AnswerArgs>(super::Answer::BIN, super::Answer::ABOUT, true).debug_assert();
    }
}
