//! The `train-lora` binary's own flags (the shared ones come from [`gauge_core::cli`]).
use std::path::PathBuf;

use gauge_core::cli::{Invocation, StageCli};
use gauge_core::config::Layer;
use serde::Serialize;

use gauge_core::stage::Built;

use crate::stage::{TrainLora, TrainOptions, TrainSummary};

/// Inputs and flags of `train-lora`; config flags set one field of [`crate::TrainConfig`].
#[derive(clap::Args, Debug, Serialize)]
pub struct TrainArgs {
    /// The `synth-data --mode sft` artifact directory (train.jsonl, dev.jsonl), or a chat JSONL file.
    #[serde(skip)]
    pub data: PathBuf,
    /// What to train: generator (decoder adapter), embedder or reranker (`target`).
    #[arg(long, value_enum)]
    pub target: Option<crate::retriever::Target>,
    /// Index artifact of the chunks the questions came from (embedder / reranker: positives and hard negatives).
    #[arg(long)]
    #[serde(skip)]
    pub index: Option<PathBuf>,
    /// A golden set whose gold pages are never trained on (embedder / reranker; repeatable), so it stays fully evaluable.
    #[arg(long)]
    #[serde(skip)]
    pub hold_out: Vec<PathBuf>,
    /// Another synth-data artifact (or golden JSONL) whose questions join the training (embedder / reranker; repeatable): a mix, e.g. doc2query + inverse-cloze.
    #[arg(long)]
    #[serde(skip)]
    pub also: Vec<PathBuf>,
    /// Base model: GGUF file, Hugging Face folder or name in the models directory (`base`).
    #[arg(long)]
    pub base: Option<String>,
    /// LoRA rank (`r`).
    #[arg(long)]
    pub r: Option<usize>,
    /// LoRA alpha (`lora_alpha`).
    #[arg(long, value_parser = gauge_core::cli::finite_f64)]
    pub lora_alpha: Option<f64>,
    /// Dropout on the adapters' input (`lora_dropout`).
    #[arg(long, value_parser = gauge_core::cli::finite_f64)]
    pub lora_dropout: Option<f64>,
    /// Peak learning rate (`learning_rate`).
    #[arg(long, value_parser = gauge_core::cli::finite_f64)]
    pub learning_rate: Option<f64>,
    /// Passes over the data (`epochs`).
    #[arg(long)]
    pub epochs: Option<u32>,
    /// Stop after this many optimiser steps (`max_steps`).
    #[arg(long)]
    pub max_steps: Option<u64>,
    /// Sequences per optimiser step = batch_size × grad_accum (`grad_accum`).
    #[arg(long)]
    pub grad_accum: Option<usize>,
    /// Longest example in tokens (`max_seq_len`).
    #[arg(long)]
    pub max_seq_len: Option<usize>,
    /// Train on a seeded sample of this many examples (`max_train_examples`).
    #[arg(long)]
    pub max_train_examples: Option<usize>,
    /// Seed (`seed`).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Also write merged safetensors under merged/ (`merge`).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub merge: Option<bool>,
    /// Device: cpu, cuda, cuda:N.
    #[arg(long, default_value = "cpu")]
    #[serde(skip)]
    pub device: String,
    /// Also copy the adapter folder here (e.g. data/adapters/fra-sft) for pipelines to name.
    #[arg(long)]
    #[serde(skip)]
    pub copy_to: Option<PathBuf>,
    /// Stop after this many steps of this invocation, leaving the checkpoint (resumption tests).
    #[arg(long, hide = true)]
    #[serde(skip)]
    pub stop_after: Option<u64>,
}

impl StageCli for TrainLora {
    /// `--copy-to`: the adapter folder copied where pipelines read it (the old one stays until
    /// the new one is complete).
    fn after(built: &Built<TrainSummary>, options: &TrainOptions) -> anyhow::Result<()> {
        let Some(dest) = &options.copy_to else { return Ok(()) };
        // The run's deliverable: adapter/ (generator, embedder with LoRA) or model/ (reranker, full tuning).
        let from = ["adapter", "model"].iter().map(|d| built.dir.join(d)).find(|d| d.is_dir()).ok_or_else(|| anyhow::anyhow!("{}: no adapter/ or model/ to copy", built.dir.display()))?;
        // Only a previous adapter (or fully tuned model) folder is replaced: never a folder of
        // other things (the shelf every adapter sits on) or a file.
        let kind = gauge_core::artifact::ResultKind {
            what: "a previous adapter or model folder (adapter_config.json, or config.json with *.safetensors)",
            holds: &|d: &std::path::Path| {
                d.join("adapter_config.json").is_file()
                    || (d.join("config.json").is_file() && std::fs::read_dir(d).is_ok_and(|r| r.flatten().any(|e| e.file_name().to_string_lossy().ends_with(".safetensors"))))
            },
            derived: &[],
        };
        gauge_core::artifact::replace_dir_with_copy(&from, dest, &kind).map_err(|e| anyhow::anyhow!("--copy-to {e}"))?;
        Ok(())
    }

    const BIN: &'static str = "train-lora";
    const ABOUT: &'static str = "Trains a LoRA adapter (QLoRA-style: the base stays 4-bit) on chat-format SFT examples and writes artifacts/train-lora/<fingerprint>/adapter/ (a PEFT folder: adapter_config.json, adapter_model.safetensors), loss_curve.parquet and loss_curve.png (and merged/ with --merge). A killed run resumes from its last checkpoint when rerun with the same settings. Prints the artifact directory as the last line of stdout.";
    type Args = TrainArgs;

    fn invocation(args: TrainArgs, _shared: &gauge_core::cli::SharedArgs) -> anyhow::Result<Invocation<Self>> {
        let flags = Layer::from_flags("flags", &args);
        Ok(Invocation { inputs: crate::stage::TrainInputs { data: args.data, index: args.index, hold_out: args.hold_out, also: args.also }, options: TrainOptions { device: args.device, stop_after: args.stop_after, copy_to: args.copy_to }, flags })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn flags_have_distinct_names() {
        use gauge_core::cli::StageCli;
        gauge_core::cli::command::<super::TrainArgs>(super::TrainLora::BIN, super::TrainLora::ABOUT, true).debug_assert();
    }
}
