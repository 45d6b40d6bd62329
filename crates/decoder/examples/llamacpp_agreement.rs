//! gauge's side of the llama.cpp agreement check (`just check-llamacpp`,
//! `scripts/llamacpp_agreement.py`): the same GGUF file, read by gauge, answers what
//! `llama-server` answers on `/tokenize`, `/apply-template` and `/completion`.
//!
//! - `llamacpp_agreement tokenize MODEL IN.jsonl OUT.jsonl`: each `{"id", "text"}` → `{"id", "ids"}`
//!   (no BOS/EOS added; special tokens in the text matched whole, as llama.cpp's
//!   `parse_special`);
//! - `llamacpp_agreement template MODEL IN.jsonl OUT.jsonl`: each `{"id", "messages"}` →
//!   `{"id", "prompt"}` (the GGUF's `tokenizer.chat_template`, generation prompt added);
//! - `llamacpp_agreement greedy MODEL IN.jsonl N OUT.jsonl`: each `{"id", "ids"}` → `{"id",
//!   "tokens", "margins"}`: N greedy tokens (stopping after an end-of-generation token) and, at
//!   every step, the top-1 minus top-2 logit.
use std::io::Write;

use gauge_decoder::generate::argmax;
use gauge_decoder::{LanguageModel, Message};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: llamacpp_agreement tokenize|template MODEL IN.jsonl OUT.jsonl | greedy MODEL IN.jsonl N OUT.jsonl";
    anyhow::ensure!(args.len() >= 5, "{usage}");
    let (mode, model, input) = (args[1].as_str(), &args[2], &args[3]);
    let lm = LanguageModel::load(model, &gauge_tensor::device::parse("cpu").map_err(|e| anyhow::anyhow!("{e}"))?)?;
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(input)?.lines().filter(|l| !l.trim().is_empty()).map(serde_json::from_str).collect::<Result<_, _>>()?;
    let (out_path, n) = match mode {
        "greedy" => (args.get(5).ok_or_else(|| anyhow::anyhow!("{usage}"))?, args[4].parse::<usize>()?),
        _ => (&args[4], 0),
    };
    let mut out = std::io::BufWriter::new(std::fs::File::create(out_path)?);
    let bar = gauge_core::progress::bar(lines.len() as u64, mode);
    for line in &lines {
        let id = &line["id"];
        let row = match mode {
            "tokenize" => {
                let text = line["text"].as_str().ok_or_else(|| anyhow::anyhow!("{input}: a line without `text`"))?;
                let enc = lm.tokenizer.encode(text, false).map_err(|e| anyhow::anyhow!("{e}"))?;
                serde_json::json!({"id": id, "ids": enc.get_ids()})
            }
            "template" => {
                let messages: Vec<Message> = serde_json::from_value(line["messages"].clone())?;
                let chat = lm.chat.as_ref().ok_or_else(|| anyhow::anyhow!("{model} has no chat template"))?;
                serde_json::json!({"id": id, "prompt": chat.render(&messages, true)?})
            }
            "greedy" => {
                let ids: Vec<u32> = serde_json::from_value(line["ids"].clone())?;
                let mut cache = lm.model.new_cache();
                let mut logits = lm.model.forward(&ids, &mut cache)?;
                let (mut tokens, mut margins) = (Vec::new(), Vec::new());
                for _ in 0..n {
                    let next = argmax(&logits);
                    let top = logits[next as usize];
                    let second = logits.iter().enumerate().filter(|(i, _)| *i != next as usize).fold(f32::NEG_INFINITY, |m, (_, &v)| m.max(v));
                    tokens.push(next);
                    margins.push(top - second);
                    if lm.eos_ids.contains(&next) {
                        break;
                    }
                    logits = lm.model.forward(&[next], &mut cache)?;
                }
                serde_json::json!({"id": id, "tokens": tokens, "margins": margins})
            }
            _ => anyhow::bail!("{usage}"),
        };
        writeln!(out, "{row}")?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    out.flush()?;
    Ok(())
}
