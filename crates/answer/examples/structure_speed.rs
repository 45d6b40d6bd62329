//! Where a structured answer's seconds go (#81 item 3): replays replies of the model-call cache
//! through the local decoder and prints, per reply, the schema's compile time, the prefill, the
//! constrained decode, the token masks alone (the same tokens replayed through a fresh
//! constraint), and the same number of tokens decoded unconstrained at the same context — beside
//! the bench-rate estimate (prompt ÷ prefill rate + new ÷ decode rate of `bench/generate.json`).
//!
//! ```text
//! cargo run --release -p gauge-answer --example structure_speed -- \
//!     qwen2.5-coder-1.5b-instruct-q4_k_m.gguf artifacts/llm-cache/ab/ab….json … \
//!     [--structure '{"kind":"four_phase"}'] [--max-new-tokens 384] [--prefill-rate 96] [--decode-rate 18.6]
//! ```
//! Each cache file must hold a four-phase reply's chat (`messages`); its passages' tags are read
//! back from the prompt (the lines that are a bracketed tag alone), so the schema is the one the
//! answer stage built for it.
use anyhow::{bail, Context};
use gauge_answer::structure::{self, StructureConfig, StructureKind};
use gauge_decoder::{Message, TokenConstraint};
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut positional = Vec::new();
    let mut structure = StructureConfig { kind: StructureKind::FourPhase, ..Default::default() };
    let (mut max_new_tokens, mut prefill_rate, mut decode_rate) = (384usize, 96.0f64, 18.6f64);
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--structure" => structure = serde_json::from_str(&value()?).context("--structure: a StructureConfig as JSON")?,
            "--max-new-tokens" => max_new_tokens = value()?.parse()?,
            "--prefill-rate" => prefill_rate = value()?.parse()?,
            "--decode-rate" => decode_rate = value()?.parse()?,
            _ if a.starts_with("--") => bail!("unknown flag {a}"),
            _ => positional.push(a),
        }
    }
    let Some((model, files)) = positional.split_first() else { bail!("usage: structure_speed MODEL CACHE_JSON… [--structure JSON] [--max-new-tokens N] [--prefill-rate R] [--decode-rate R]") };
    let budgets = structure.budgets(max_new_tokens).map_err(anyhow::Error::msg)?;
    let generator = gauge_generator::Generator::open(&gauge_generator::GeneratorConfig::Local { model: model.clone(), adapter: None }, "cpu", Default::default())?;
    let lm = generator.local_model().context("a local model")?;
    let chat = lm.chat.as_ref().context("the model has no chat template")?;
    let compiler = gauge_decoder::SchemaCompiler::new(&lm.tokenizer, &lm.eos_ids)?;
    let opts = gauge_decoder::GenerateOptions { max_new_tokens, ..Default::default() };
    println!("| reply | prompt | new | compile s | prefill s (tok/s) | decode s constrained | masks alone s | decode s free, same count | estimate s | measured s | ÷ estimate |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut sums = [0f64; 7];
    for file in files {
        let entry: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(file).with_context(|| format!("{file}: cannot read"))?).with_context(|| format!("{file}: not JSON"))?;
        let messages: Vec<Message> = entry["messages"].as_array().with_context(|| format!("{file}: no messages"))?.iter().map(|m| Message::new(m["role"].as_str().unwrap_or_default(), m["content"].as_str().unwrap_or_default().trim())).collect();
        let user = messages.last().map(|m| m.content.clone()).unwrap_or_default();
        let tags: Vec<String> = user.split("\nQuestion:").next().unwrap_or_default().lines().map(str::trim).filter(|l| l.starts_with('[') && l.ends_with(']') && l.matches(']').count() == 1).map(str::to_string).collect();
        let schema = structure::four_phase_schema(&tags, budgets, &structure);
        let prompt = chat.render(&messages, true)?;
        let ids = lm.tokenizer.encode(prompt.as_str(), false).map_err(anyhow::Error::msg)?.get_ids().to_vec();

        let t = Instant::now();
        let mut constraint = compiler.constraint(&schema)?;
        let compile = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let held = lm.generate_with(&ids, &opts, Some(&mut constraint as &mut dyn TokenConstraint))?;
        let measured = compile + t.elapsed().as_secs_f64();

        // The masks alone: the same tokens through a fresh constraint.
        let mut replay = compiler.constraint(&schema)?;
        let mut logits = vec![0f32; lm.tokenizer.get_vocab_size(true).max(lm.model.config.vocab_size)];
        let t = Instant::now();
        for &id in &held.ids {
            if replay.is_complete() {
                break;
            }
            replay.mask(&mut logits)?;
            replay.advance(id)?;
        }
        let masks = t.elapsed().as_secs_f64();

        // The same count decoded unconstrained after the same prompt (end of sequence ignored by
        // asking for no more than were held; a reply that stops early is scaled to the count).
        let free = lm.generate(&ids, &gauge_decoder::GenerateOptions { max_new_tokens: held.ids.len().max(1), ..opts.clone() })?;
        let free_decode = free.decode_seconds * held.ids.len() as f64 / free.ids.len().max(1) as f64;

        let estimate = ids.len() as f64 / prefill_rate + held.ids.len() as f64 / decode_rate;
        let name = std::path::Path::new(file).file_stem().and_then(|s| s.to_str()).unwrap_or("?");
        println!(
            "| {} | {} | {} | {:.2} | {:.1} ({:.0}) | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2}× |",
            &name[..name.len().min(8)],
            ids.len(),
            held.ids.len(),
            compile,
            held.prefill_seconds,
            ids.len() as f64 / held.prefill_seconds.max(1e-9),
            held.decode_seconds,
            masks,
            free_decode,
            estimate,
            measured,
            measured / estimate
        );
        for (s, v) in sums.iter_mut().zip([compile, held.prefill_seconds, held.decode_seconds, masks, free_decode, estimate, measured]) {
            *s += v;
        }
    }
    let n = files.len().max(1) as f64;
    println!(
        "| mean | | | {:.2} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2}× |",
        sums[0] / n,
        sums[1] / n,
        sums[2] / n,
        sums[3] / n,
        sums[4] / n,
        sums[5] / n,
        sums[6] / n,
        sums[6] / sums[5].max(1e-9)
    );
    Ok(())
}
