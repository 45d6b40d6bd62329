//! The `synth-data` binary's own flags (the shared ones come from [`gauge_core::cli`]).
use std::path::PathBuf;
use std::time::Duration;

use gauge_core::cli::{Invocation, StageCli};
use gauge_core::config::{parse_as, set_path, Layer};
use gauge_core::stage::Built;
use serde::Serialize;

use crate::{Mode, Synth, SynthOptions, SynthSummary};

/// Inputs and flags of `synth-data`; config flags set one field of [`crate::SynthConfig`].
#[derive(clap::Args, Debug, Serialize)]
pub struct SynthArgs {
    /// The chunk artifact directory.
    #[serde(skip)]
    pub chunks: PathBuf,
    /// `--mode sft`: a teacher-written set (JSONL: qid, question, thinking, answer, gold,
    /// in_corpus) to turn into SFT examples (needs --index); `--mode doc2query`: example
    /// questions (any JSONL with `question`) whose style the prompts show.
    #[arg(long)]
    #[serde(skip)]
    pub from: Option<PathBuf>,
    /// The index each teacher question's context is retrieved from, or doc2query's round trip
    /// runs on (built from the chunks).
    #[arg(long)]
    #[serde(skip)]
    pub index: Option<PathBuf>,
    /// `llm` (a teacher), `ict` (inverse cloze, offline), `sft` (chat-format training examples) or
    /// `doc2query` (questions per passage, round-trip filtered; needs --index) (`mode`).
    #[arg(long, value_parser = parse_as::<Mode>)]
    pub mode: Option<Mode>,
    /// Samples to draw (`n`).
    #[arg(long)]
    pub n: Option<usize>,
    /// LLM question styles, comma-separated: factual, scenario, multi_hop (`styles`).
    #[arg(long)]
    #[serde(skip)]
    pub styles: Option<String>,
    /// Split weights train:dev:test (e.g. 70:15:15) or train:test, grouped by source page (`split`).
    #[arg(long)]
    #[serde(skip)]
    pub split: Option<String>,
    /// Seed of sampling and splits (`seed`).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Skip chunks shorter than this (`min_chars`).
    #[arg(long)]
    pub min_chars: Option<usize>,
    /// Teacher kind: `api` (an OpenAI-compatible endpoint) or `local` (the Burn decoder) (`teacher.kind`).
    #[arg(long, value_parser = ["api", "local"])]
    #[serde(rename = "teacher.kind")]
    pub teacher: Option<String>,
    /// Teacher base URL up to /v1, e.g. http://localhost:11434/v1 (`teacher.base_url`).
    #[arg(long)]
    #[serde(rename = "teacher.base_url")]
    pub base_url: Option<String>,
    /// Teacher model: the endpoint's model name, or a local GGUF file / model folder / name (`teacher.model`).
    #[arg(long)]
    #[serde(rename = "teacher.model")]
    pub model: Option<String>,
    /// Name of the environment variable holding the API key, never the key (`teacher.api_key_env`).
    #[arg(long)]
    #[serde(rename = "teacher.api_key_env")]
    pub api_key_env: Option<String>,
    /// Teacher reply length in tokens (`generation.max_new_tokens`).
    #[arg(long)]
    #[serde(rename = "generation.max_new_tokens")]
    pub max_new_tokens: Option<usize>,
    /// Device of a local teacher: cpu, cuda, cuda:N.
    #[arg(long, default_value = "cpu")]
    #[serde(skip)]
    pub device: String,
    /// Prompt templates folder.
    #[arg(long, default_value = "pipelines/prompts")]
    #[serde(skip)]
    pub prompts: PathBuf,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 4)]
    #[serde(skip)]
    pub concurrency: usize,
    /// Requests per minute (0: unlimited).
    #[arg(long, default_value_t = 60)]
    #[serde(skip)]
    pub rpm: u32,
    /// Seconds before a request counts as timed out.
    #[arg(long, default_value_t = 120.0)]
    #[serde(skip)]
    pub timeout_s: f64,
    /// Retries on 429/5xx/timeouts.
    #[arg(long, default_value_t = 6)]
    #[serde(skip)]
    pub max_retries: u32,
    /// First backoff in milliseconds (doubles per retry, ±50 % jitter).
    #[arg(long, default_value_t = 2000)]
    #[serde(skip)]
    pub backoff_ms: u64,
    /// Also copy golden.jsonl here (e.g. data/golden/fra-ict.jsonl) for pipelines to read.
    #[arg(long)]
    #[serde(skip)]
    pub copy_to: Option<PathBuf>,
}

impl StageCli for Synth {
    const BIN: &'static str = "synth-data";
    const ABOUT: &'static str = "Writes artifacts/synth/<fingerprint>/golden.jsonl (the golden-set format `evaluate` reads) plus train/dev/test.jsonl when split, failures.jsonl and the journal; a killed LLM run resumes from its journal when rerun with the same settings. Prints the artifact directory as the last line of stdout.";
    type Args = SynthArgs;

    fn invocation(args: SynthArgs, _shared: &gauge_core::cli::SharedArgs) -> anyhow::Result<Invocation<Self>> {
        let mut flags = Layer::from_flags("flags", &args);
        if let Some(s) = &args.styles {
            let styles: Vec<serde_json::Value> = s
                .split(',')
                .map(|x| crate::Style::parse(x).map(|st| serde_json::to_value(st).expect("styles serialise")).ok_or_else(|| anyhow::anyhow!("unknown style `{x}` (factual, scenario, multi_hop)")))
                .collect::<anyhow::Result<_>>()?;
            set_path(&mut flags.patch, "styles", serde_json::Value::Array(styles));
        }
        if let Some(s) = &args.split {
            let weights: Vec<u32> = s.split(':').map(|w| w.trim().parse::<u32>().map_err(|_| anyhow::anyhow!("--split takes weights like 70:15:15, got `{s}`"))).collect::<anyhow::Result<_>>()?;
            set_path(&mut flags.patch, "split", serde_json::json!(weights));
        }
        let options = SynthOptions {
            concurrency: args.concurrency,
            retry: gauge_chat_client::RetryPolicy {
                timeout: Duration::from_secs_f64(args.timeout_s),
                max_retries: args.max_retries,
                backoff_base: Duration::from_millis(args.backoff_ms),
                backoff_max: Duration::from_secs(120),
                requests_per_minute: args.rpm,
            },
            prompts: args.prompts,
            copy_to: args.copy_to,
            device: args.device,
        };
        Ok(Invocation { inputs: crate::SynthInputs { chunks: args.chunks, from: args.from, index: args.index }, options, flags })
    }

    /// `--copy-to`: the golden set copied (through a temporary file) where pipelines read it.
    fn after(built: &Built<SynthSummary>, options: &SynthOptions) -> anyhow::Result<()> {
        let Some(dest) = &options.copy_to else { return Ok(()) };
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let tmp = dest.with_extension("jsonl.partial");
        std::fs::copy(built.dir.join("golden.jsonl"), &tmp).map_err(|e| anyhow::anyhow!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, dest)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn flags_have_distinct_names() {
        use gauge_core::cli::StageCli;
        gauge_core::cli::command::<super::SynthArgs>(super::Synth::BIN, super::Synth::ABOUT, true).debug_assert();
    }
}
