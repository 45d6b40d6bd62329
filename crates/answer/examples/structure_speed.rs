//! Where a structured answer's seconds go (#81 item 3): replays replies of the model-call cache
//! through the local decoder and prints, per reply, the schema's compile time, the prefill, the
//! constrained decode, the token masks alone (the same tokens replayed through a fresh
//! constraint), and the same number of tokens decoded unconstrained at the same context — beside
//! the bench-rate estimate (prompt ÷ prefill rate + new ÷ decode rate of `bench/generate.json`).
//!
//! ```text
//! just structure-speed      # both forms, three cached replies each, after `just ablate-structured`
//! structure_speed qwen2.5-coder-1.5b-instruct-q4_k_m.gguf (artifacts/llm-cache | CACHE_JSON…) \
//!     [--structure '{"kind":"four_phase"}'] [--replies 3] [--max-new-tokens 384] [--prefill-rate R --decode-rate R]
//! ```
//! Each cache file must hold a four-phase reply's chat (`messages`); its passages' tags are read
//! back from the prompt (the lines that are a bracketed tag alone), so the schema is the one the
//! answer stage built for it. Given the cache folder, the first replies of the form (by file
//! name) are taken; the estimate's rates are `bench/generate.json`'s unless given.
use anyhow::{bail, Context};
use gauge_answer::structure::{self, StructureConfig, StructureKind, VerdictPlace};
use gauge_decoder::{Message, TokenConstraint};
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut positional = Vec::new();
    let mut structure = StructureConfig { kind: StructureKind::FourPhase, ..Default::default() };
    let (mut max_new_tokens, mut prefill_rate, mut decode_rate, mut rates_given, mut replies) = (384usize, 96.0f64, 18.6f64, false, 3usize);
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--structure" => structure = serde_json::from_str(&value()?).context("--structure: a StructureConfig as JSON")?,
            "--max-new-tokens" => max_new_tokens = value()?.parse()?,
            "--prefill-rate" => (prefill_rate, rates_given) = (value()?.parse()?, true),
            "--decode-rate" => (decode_rate, rates_given) = (value()?.parse()?, true),
            "--replies" => replies = value()?.parse()?,
            _ if a.starts_with("--") => bail!("unknown flag {a}"),
            _ => positional.push(a),
        }
    }
    let Some((model, given)) = positional.split_first() else { bail!("usage: structure_speed MODEL (CACHE_JSON… | LLM_CACHE_DIR) [--structure JSON] [--replies N] [--max-new-tokens N] [--prefill-rate R] [--decode-rate R]") };
    // A cache folder: the first `replies` four-phase replies of this form, by file name.
    let files: Vec<String> = match given {
        [dir] if std::path::Path::new(dir).is_dir() => of_form(std::path::Path::new(dir), &structure, replies)?,
        _ => given.to_vec(),
    };
    anyhow::ensure!(!files.is_empty(), "no cached four-phase reply of this form in {given:?}; run `just ablate-structured` first");
    if let Some((p, d)) = bench_rates(std::path::Path::new("bench/generate.json")).filter(|_| !rates_given) {
        (prefill_rate, decode_rate) = (p, d);
    }
    println!("Rates of the estimate: prefill {prefill_rate:.1} tokens/s, decode {decode_rate:.1} tokens/s{}.\n", if rates_given { " (given)" } else { " (bench/generate.json's Qwen2.5-1.5B Q4_K_M rows, else the defaults)" });
    let budgets = structure.budgets(max_new_tokens).map_err(anyhow::Error::msg)?;
    let generator = gauge_generator::Generator::open(&gauge_generator::GeneratorConfig::Local { model: model.clone(), adapter: None }, "cpu", Default::default())?;
    let lm = generator.local_model().context("a local model")?;
    let chat = lm.chat.as_ref().context("the model has no chat template")?;
    let compiler = gauge_decoder::SchemaCompiler::new(&lm.tokenizer, &lm.eos_ids)?;
    let opts = gauge_decoder::GenerateOptions { max_new_tokens, ..Default::default() };
    println!("| reply | prompt | new | compile s | prefill s (tok/s) | decode s constrained | masks alone s | decode s free, same count | estimate s | measured s | ÷ estimate |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut sums = [0f64; 7];
    for file in &files {
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

/// The first `n` cached replies (by file name) that are four-phase documents of `structure`'s
/// form: the reply opens a JSON object holding the phases, and the prompt ends with the format
/// paragraph exactly when the form describes itself.
fn of_form(dir: &std::path::Path, structure: &StructureConfig, n: usize) -> anyhow::Result<Vec<String>> {
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)?.flatten().filter(|e| e.path().is_dir()).flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "json")).collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let Ok(entry) = serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(&f).unwrap_or_default()) else { continue };
        let text = entry["text"].as_str().unwrap_or_default();
        let user = entry["messages"].as_array().and_then(|m| m.last()).and_then(|m| m["content"].as_str()).unwrap_or_default();
        let told = user.contains("Reply with one JSON object");
        let refused = text.contains("\"verdict\":\"refuse\"");
        let opens_with_verdict = text.starts_with("{\"verdict\"");
        let verdict_where = match (structure.refusal, structure.verdict) {
            (false, _) => !text.contains("\"verdict\""),
            (true, VerdictPlace::First) => opens_with_verdict,
            (true, VerdictPlace::AfterAudit) => !opens_with_verdict && text.contains("\"verdict\""),
        };
        if text.starts_with("{\"") && text.contains("\"contextual_audit\"") && !refused && told == structure.describe_format && verdict_where {
            out.push(f.display().to_string());
            if out.len() == n {
                break;
            }
        }
    }
    Ok(out)
}

/// The Qwen2.5-1.5B Q4_K_M prefill and decode rates (medians) of a bench file.
fn bench_rates(path: &std::path::Path) -> Option<(f64, f64)> {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    let rate = |name: &str, figure: &str| v["comparisons"].as_array()?.iter().find(|c| c["name"] == name)?["gauge"]["figures"][figure]["median"].as_f64();
    Some((rate("Qwen2.5-1.5B Q4_K_M prefill", "prefill_tokens_per_s")?, rate("Qwen2.5-1.5B Q4_K_M decode", "decode_tokens_per_s")?))
}
