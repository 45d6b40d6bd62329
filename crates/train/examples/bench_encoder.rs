//! Training speed of `train-lora --target embedder` on a BERT model (all-MiniLM-L6-v2 in the
//! `bench-train-encoder` recipe): one contrastive step of 16 queries against their positives
//! and two hard negatives each (48 passages of real chunk text, ≤ 256 tokens), with LoRA r 16
//! on every linear module and with full fine-tuning (AdamW included), against the reference
//! in the same run: gauge's inference encoder (the `embed` stage's kernels) over the same 64
//! texts. FLOPs are counted per token: matrices `2·P` forward, `2·P` more for the input
//! gradients, `2·P` more for the weight gradients (full tuning only); attention `4·L·H` per
//! layer forward, three times that with its backward. Each tuning runs on the host kernels
//! (the CPU default) and on Burn's autodiff (`_burn`: the kernels before them). With
//! `IDS_JSON`, the step's token ids and temperature are written there for the
//! sentence-transformers reference (`scripts/gpu_check.py st-step`).
//! With `VARIANT` (`lora_r16`, `full`, `lora_r16_burn` or `full_burn`) only that one runs, so
//! the process's peak resident memory (`peak_rss_mib`) is that variant's.
//! Usage: `bench_encoder MODEL_DIR CHUNKS_PARQUET OUT_JSON [STEPS] [IDS_JSON|-] [VARIANT]`;
//! `bench_encoder side MODEL_DIR CHUNKS_PARQUET STEPS VARIANT` is one run of the
//! `bench-train-encoder` harness (`gauge-bench`): that variant's figures as `{"figures": …}`
//! (tokens/s, the first step's loss, resident memory after the model's load and its peak).
use std::time::Instant;

use gauge_encoder::{Embedder, EmbedderOptions, ModelSource, Pooling};
use gauge_train::retriever::bert::{EncoderTask, Encoded, TrainableBert, Tuning};
use gauge_train::generator::model::TrainKernels;
use gauge_train::optim::{clip_global_norm, AdamWConfig, AdamWState};
use gauge_train::retriever::{step_loss, RetrieverConfig, StepBatch};

fn main() -> anyhow::Result<()> {
    let mut args: Vec<String> = std::env::args().collect();
    // `side MODEL_DIR CHUNKS_PARQUET STEPS VARIANT`: one harness run of one variant.
    let side = args.get(1).map(String::as_str) == Some("side");
    if side {
        let a = |i: usize| args.get(i).cloned().unwrap_or_default();
        args = vec![a(0), a(2), a(3), "-".into(), a(4), "-".into(), a(5)];
    }
    let usage = "usage: bench_encoder MODEL_DIR CHUNKS_PARQUET OUT_JSON [STEPS] [IDS_JSON|-] [VARIANT] | side MODEL_DIR CHUNKS_PARQUET STEPS VARIANT";
    let dir = std::path::PathBuf::from(args.get(1).expect(usage));
    let chunks = gauge_core::schema::read_chunks(std::path::Path::new(args.get(2).expect(usage)))?;
    let out = args.get(3).expect(usage);
    let steps: usize = args.get(4).map(|s| s.parse()).transpose()?.unwrap_or(3);
    let ids_out = args.get(5).filter(|p| p.as_str() != "-");
    let only = args.get(6);
    let device = gauge_tensor::device::cpu();
    let embedder = Embedder::load(&ModelSource { id: dir.display().to_string(), dir: dir.clone() }, &EmbedderOptions::default(), &device)?;
    // 16 queries (a chunk's first sentence) and 48 passages (distinct chunks), spread over the corpus.
    let stride = (chunks.len() / 64).max(1);
    let picked: Vec<&str> = (0..64).map(|i| chunks[(i * stride) % chunks.len()].text.as_str()).collect();
    let queries: Vec<String> = picked[..16].iter().map(|t| t.split(['.', '?', '!']).next().unwrap_or(t).chars().take(300).collect()).collect();
    // The trainer's own tokenization (truncation keeps the final [SEP]).
    let tokenizer = gauge_train::retriever::EncoderTokenizer::load(&dir, 64, 256, false)?;
    let tok = |texts: &[&str], max: usize| -> anyhow::Result<Vec<Encoded>> { Ok(texts.iter().map(|t| tokenizer.text(t, max)).collect::<Result<_, _>>()?) };
    let q = tok(&queries.iter().map(String::as_str).collect::<Vec<_>>(), 64)?;
    let p = tok(&picked[16..], 256)?;
    let p: Vec<Encoded> = p.into_iter().chain(tok(&picked[..16], 256)?).collect::<Vec<_>>()[..48].to_vec();
    let tokens: usize = q.iter().chain(&p).map(|e| e.ids.len()).sum();
    let mean_len = |v: &[Encoded]| v.iter().map(|e| e.ids.len() as f64).sum::<f64>() / v.len() as f64;
    let (lq, lp) = (mean_len(&q), mean_len(&p));

    // Reference: inference over the same 64 texts (ids as tokenized above), best of 3.
    let ids: Vec<Vec<u32>> = q.iter().chain(&p).map(|e| e.ids.clone()).collect();
    let mut inference_secs = f64::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        embedder.embed_ids(&ids, |_| {});
        inference_secs = inference_secs.min(t.elapsed().as_secs_f64());
    }
    let cfg = RetrieverConfig::default();
    if let Some(path) = ids_out {
        let list = |v: &[Encoded]| v.iter().map(|e| e.ids.clone()).collect::<Vec<_>>();
        std::fs::write(path, serde_json::to_string(&serde_json::json!({"queries": list(&q), "passages": list(&p), "temperature": cfg.temperature}))?)?;
    }
    let batch = StepBatch::Contrastive { queries: q, passages: p, masked: vec![Vec::new(); 16] };
    let task = EncoderTask::Embedder { pooling: Pooling::Mean, normalize: true };
    let (peak, basis) = gauge_core::machine::peak_f32_flops();
    let mut report = serde_json::json!({
        "model": dir.file_name().map(|n| n.to_string_lossy().to_string()),
        "step": {"queries": 16, "passages": 48, "tokens": tokens, "mean_query_tokens": lq, "mean_passage_tokens": lp},
        "machine": {"peak_f32_flops": peak, "basis": basis, "threads": rayon::current_num_threads()},
    });
    let config = gauge_encoder::BertConfig::from_file(&dir.join("config.json"))?;
    let (h, layers) = (config.hidden_size, config.num_hidden_layers);
    let matrix_params = layers * (4 * h * h + 2 * h * config.intermediate_size);
    // Attention multiply-adds per token (QKᵀ and AV over the sequence's own length).
    let attn_fwd = |len: f64| 4.0 * len * h as f64 * layers as f64;
    let attn_tokens = 16.0 * lq * attn_fwd(lq) + 48.0 * lp * attn_fwd(lp);
    let fwd_flops = 2.0 * matrix_params as f64 * tokens as f64 + attn_tokens;
    report["reference_inference"] = serde_json::json!({"seconds": inference_secs, "tokens_per_s": tokens as f64 / inference_secs, "flops_per_s": fwd_flops / inference_secs, "share_of_peak": fwd_flops / inference_secs / peak});
    let lora = Tuning::Lora { r: 16, alpha: 16.0, rslora: false, targets: (0..6).collect() };
    for (name, tuning, kernels) in [("lora_r16", lora.clone(), TrainKernels::Host), ("full", Tuning::Full, TrainKernels::Host), ("lora_r16_burn", lora, TrainKernels::Burn), ("full_burn", Tuning::Full, TrainKernels::Burn)] {
        if only.is_some_and(|o| o != name) {
            continue;
        }
        let (mut model, mut params) = TrainableBert::load(&dir, task, tuning, 0, &device)?;
        model.set_kernels(kernels)?;
        let lens: Vec<usize> = params.trainable_values().iter().map(|t| t.len()).collect();
        let mut adam = AdamWState::new(&lens);
        let baseline_rss_mib = gauge_bench::machine::current_rss_mib();
        let mut times = Vec::new();
        let mut first_loss = f64::NAN;
        for step in 0..=steps {
            let t = Instant::now();
            let (loss, grads) = step_loss(&model, &params, &batch, &cfg, true)?;
            if step == 0 {
                first_loss = loss;
            }
            let mut grads = grads.expect("gradients");
            clip_global_norm(&mut grads, 1.0);
            adam.step(&AdamWConfig::default(), 1e-4, &mut params.trainable_mut(), &grads);
            if step > 0 {
                times.push(t.elapsed().as_secs_f64());
            }
            eprintln!("{name} step {step}: {:.2} s", t.elapsed().as_secs_f64());
        }
        let secs = times.iter().sum::<f64>() / times.len() as f64;
        let full = name.starts_with("full");
        let flops = (if full { 6.0 } else { 4.0 }) * matrix_params as f64 * tokens as f64 + 3.0 * attn_tokens;
        report[name] = serde_json::json!({
            "kernels": format!("{kernels:?}").to_lowercase(),
            "first_step_loss": first_loss,
            "baseline_rss_mib": baseline_rss_mib,
            "peak_rss_mib": gauge_train::run::peak_rss_mib(),
            "trainable_parameters": params.trainable_count(),
            "seconds_per_step": secs,
            "tokens_per_s": tokens as f64 / secs,
            "useful_flops_per_s": flops / secs,
            "share_of_peak": flops / secs / peak,
            "ratio_tokens_vs_inference": (tokens as f64 / secs) / (tokens as f64 / inference_secs),
            "ratio_flops_vs_inference": (flops / secs) / (fwd_flops / inference_secs),
        });
    }
    if side {
        let name = only.expect("a variant");
        let r = &report[name.as_str()];
        let num = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
        let figures: std::collections::BTreeMap<String, f64> = [
            ("tokens_per_s", num("tokens_per_s")),
            ("seconds_per_step", num("seconds_per_step")),
            ("first_step_loss", num("first_step_loss")),
            ("baseline_rss_mib", num("baseline_rss_mib")),
            ("peak_rss_mib", num("peak_rss_mib")),
            ("above_baseline_mib", num("peak_rss_mib") - num("baseline_rss_mib")),
            ("tokens", tokens as f64),
            ("share_of_peak", num("share_of_peak")),
            ("inference_tokens_per_s", report["reference_inference"]["tokens_per_s"].as_f64().unwrap_or(f64::NAN)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        gauge_bench::side::emit(&figures, serde_json::json!({ "kernels": r["kernels"], "trainable_parameters": r["trainable_parameters"], "threads": rayon::current_num_threads() }));
        return Ok(());
    }
    std::fs::write(out, serde_json::to_string_pretty(&report)?)?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
