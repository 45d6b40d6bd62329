//! `gauge-gpu-check`: the one binary `scripts/gpu-check.sh` runs on a GPU machine. The four
//! measurements are the workspace's examples, compiled here behind subcommands so the bundle
//! carries Burn's CUDA backend (and faiss) once instead of three times:
//!
//! ```text
//! gauge-gpu-check embed MODEL_DIR TEXTS_JSONL DEVICE OUT_F32 [MAX_LENGTH]   (crates/engine/examples/gpu_check.rs)
//! gauge-gpu-check faiss N DIM QUERIES DEVICES OUT_JSON                      (the same example)
//! gauge-gpu-check train MODEL SEQ BATCH STEPS OUT_JSON [--device …] …       (crates/train/examples/bench_train.rs)
//! gauge-gpu-check generate MODEL REFERENCE_JSONL DECODE_TOKENS OUT_JSON …    (crates/decoder/examples/bench_generate.rs)
//! ```
//! Each example stays runnable on its own (`cargo run --example …`); this binary only picks one.
#![deny(missing_docs)]

#[allow(dead_code)]
#[path = "../../engine/examples/gpu_check.rs"]
mod embed_and_faiss;

#[allow(dead_code)]
#[path = "../../train/examples/bench_train.rs"]
mod train;

#[allow(dead_code)]
#[path = "../../decoder/examples/bench_generate.rs"]
mod generate;

/// What `--help` prints.
pub const USAGE: &str = "The GPU check bundle's one binary (scripts/gpu-check.sh runs it).

Usage:
  gauge-gpu-check embed MODEL_DIR TEXTS_JSONL DEVICE OUT_F32 [MAX_LENGTH]
      text in, vectors out on DEVICE (cpu, cuda[:N]), timed with tokenisation; one JSON line
  gauge-gpu-check faiss N DIM QUERIES DEVICES OUT_JSON
      Flat and IVF-PQ on N seeded clustered vectors, built and searched on each of DEVICES
  gauge-gpu-check train MODEL SEQ BATCH STEPS OUT_JSON [--device cpu|cuda] [--check-dir DIR]
      train-lora's step (LoRA r 16 on all seven projections, NF4 base) on MODEL
  gauge-gpu-check generate MODEL REFERENCE_JSONL DECODE_TOKENS OUT_JSON [--device cpu|cuda]
      prefill and greedy decoding on the reference prompts, end to end";

/// Runs the subcommand `args[1]` names (`args`: the whole command line, program first).
pub fn run(args: Vec<String>) -> anyhow::Result<()> {
    // The examples read their arguments after a program name: drop the subcommand for those
    // that do not expect it.
    let without_subcommand = || std::iter::once(args[0].clone()).chain(args.iter().skip(2).cloned()).collect::<Vec<_>>();
    match args.get(1).map(String::as_str) {
        Some("embed" | "faiss") => embed_and_faiss::main_with(args.clone()),
        Some("train") => train::main_with(without_subcommand()),
        Some("generate") => generate::main_with(without_subcommand()),
        Some("--help" | "-h") => {
            println!("{USAGE}");
            Ok(())
        }
        _ => anyhow::bail!("{USAGE}"),
    }
}
