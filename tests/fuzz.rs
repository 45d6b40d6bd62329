//! Mutation fuzzing of the parsers of user files, on stable Rust: real files (the SmolLM2 GGUF's
//! header, metadata and tokenizer arrays; its chat template; the FRA golden set; the FRA
//! pipeline; a PEFT adapter folder's `adapter_config.json` and safetensors header) are truncated, bit-flipped, spliced and given huge
//! counts and lengths by a seeded generator, and every parser must answer with an error or a
//! valid load — never a panic. (An abort, a stack overflow or an allocation failure kills the
//! test process, which fails the run too.)
//!
//! `just test` runs a short fixed-seed pass (`GAUGE_FUZZ_ITERATIONS`, default 500 per target);
//! `just fuzz SECONDS` runs every target for that long (`GAUGE_FUZZ_SECONDS`) from a fresh seed.
//! A failure prints the target, seed and iteration, and writes the input that broke it under
//! `target/fuzz-failures/` so it becomes a regression test.
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gauge::{repo_root, shared};
use gauge_core::rng::SplitMix64;

/// One mutation of `input`: a truncation, flipped bytes, a run of 0xFF (huge counts and
/// lengths when it lands on a little-endian integer), a spliced copy of another part, or
/// inserted random bytes; sometimes several.
fn mutate(rng: &mut SplitMix64, input: &[u8], focus: usize) -> Vec<u8> {
    let mut b = input.to_vec();
    let span = focus.min(b.len()).max(1);
    for _ in 0..1 + rng.below(3) {
        if b.is_empty() {
            b.push(0);
        }
        let at = rng.below(span.min(b.len()));
        match rng.below(5) {
            0 => b.truncate(at),
            1 => {
                for _ in 0..1 + rng.below(8) {
                    let i = rng.below(span.min(b.len()));
                    b[i] ^= 1 << rng.below(8);
                }
            }
            2 => {
                let n = [1, 2, 4, 8][rng.below(4)].min(b.len() - at);
                b[at..at + n].fill(0xFF);
            }
            3 => {
                let from = rng.below(b.len());
                let n = rng.below(64).min(b.len() - from);
                let chunk = b[from..from + n].to_vec();
                b.splice(at..at, chunk);
            }
            _ => {
                let junk: Vec<u8> = (0..1 + rng.below(16)).map(|_| rng.next_u64() as u8).collect();
                b.splice(at..at, junk);
            }
        }
    }
    b
}

/// How long and from which seed to fuzz: a fixed short pass, or `GAUGE_FUZZ_SECONDS`.
fn budget() -> (u64, Option<Duration>, usize) {
    match std::env::var("GAUGE_FUZZ_SECONDS").ok().and_then(|s| s.parse::<u64>().ok()) {
        Some(s) => (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64, Some(Duration::from_secs(s)), usize::MAX),
        None => (42, None, std::env::var("GAUGE_FUZZ_ITERATIONS").ok().and_then(|s| s.parse().ok()).unwrap_or(500)),
    }
}

/// Runs `parse` on mutations of `input` until the budget is spent; panics (with the seed,
/// the iteration and a saved copy of the input) when `parse` panics.
fn fuzz(target: &str, input: &[u8], focus: usize, parse: &dyn Fn(&[u8])) -> usize {
    let (seed, time, iterations) = budget();
    let mut rng = SplitMix64::new(seed ^ target.bytes().fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64)));
    let started = Instant::now();
    let mut n = 0;
    while n < iterations && time.is_none_or(|t| started.elapsed() < t) {
        let case = mutate(&mut rng, input, focus);
        if catch_unwind(AssertUnwindSafe(|| parse(&case))).is_err() {
            let dir = repo_root().join("target/fuzz-failures");
            std::fs::create_dir_all(&dir).unwrap();
            let saved = dir.join(format!("{target}-{seed}-{n}"));
            std::fs::write(&saved, &case).unwrap();
            panic!("{target}: the parser panicked on iteration {n} of seed {seed}; input saved as {}", saved.display());
        }
        n += 1;
    }
    eprintln!("fuzz {target}: {n} inputs, no panic ({:.1} s)", started.elapsed().as_secs_f64());
    n
}

fn temp_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// The real GGUF's bytes up to the end of its tensor infos (header, metadata, tokenizer
/// arrays), plus one aligned tensor's worth of zeros so a valid prefix still loads.
fn gguf_head() -> Vec<u8> {
    let path = repo_root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}; run `just models`", path.display()));
    // Everything before the tensor data (which takes the file's last bytes).
    let g = gauge_decoder::gguf::Gguf::from_bytes(&path, bytes.clone()).unwrap();
    let data: usize = g.tensors.values().map(|t| t.n_bytes()).sum();
    bytes[..bytes.len().saturating_sub(data)].to_vec()
}

#[test]
fn gguf_metadata_tokenizer_and_config_never_panic() {
    let head = gguf_head();
    let path = PathBuf::from("fuzz.gguf");
    let n = fuzz("gguf", &head, head.len(), &|b| {
        if let Ok(g) = gauge_decoder::gguf::Gguf::from_bytes(&path, b.to_vec()) {
            let _ = gauge_decoder::tokenizer::from_gguf(&g);
            let _ = gauge_decoder::config::LlamaConfig::from_gguf(&g);
        }
    });
    assert!(n > 0);
}

#[test]
fn chat_templates_never_panic() {
    let g = gauge_decoder::gguf::Gguf::open(&repo_root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    let template = g.get("tokenizer.chat_template").and_then(|v| v.as_str()).unwrap().to_string();
    let messages = [gauge_decoder::chat::Message::new("system", "Answer from the passages."), gauge_decoder::chat::Message::new("user", "What is a Class I brake test?")];
    fuzz("chat-template", template.as_bytes(), template.len(), &|b| {
        let t = gauge_decoder::chat::ChatTemplate::new(&String::from_utf8_lossy(b), "<|im_start|>", "<|im_end|>");
        let _ = t.render(&messages, true);
    });
}

#[test]
fn golden_sets_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let jsonl = std::fs::read(shared().join("golden/fra-dev.jsonl")).unwrap();
    // The first three questions: every field kind, small enough to mutate fast.
    let head: Vec<u8> = jsonl.split_inclusive(|&c| c == b'\n').take(3).flatten().copied().collect();
    fuzz("golden-jsonl", &head, head.len(), &|b| {
        let _ = gauge_core::golden::load_golden(&temp_file(dir.path(), "g.jsonl", b));
    });
}

#[test]
fn pipeline_files_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let toml = std::fs::read(repo_root().join("pipelines/fra-search.toml")).unwrap();
    fuzz("pipeline-toml", &toml, toml.len(), &|b| {
        let _ = gauge_evaluate::Pipeline::load(&temp_file(dir.path(), "p.toml", b));
    });
}

#[test]
fn peft_adapter_folders_never_panic() {
    use gauge_encoder::adapter::{AdapterConfig, LoraAdapter, LoraPair};
    // A real PEFT folder as gauge writes it: its adapter_config.json and the safetensors header
    // (the part a loader parses) are the inputs.
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good");
    let pair = LoraPair { a: vec![0.1; 2 * 4], b: vec![0.2; 4 * 2], d_in: 4, d_out: 4 };
    let adapter = LoraAdapter { config: AdapterConfig::new(2, 2.0, 0.0, &["q_proj".to_string()], false, None), modules: [("model.layers.0.self_attn.q_proj".to_string(), pair)].into_iter().collect() };
    adapter.save(&good).unwrap();
    assert_eq!(LoraAdapter::load(&good).unwrap(), adapter);
    let config = std::fs::read(good.join("adapter_config.json")).unwrap();
    let weights = std::fs::read(good.join("adapter_model.safetensors")).unwrap();
    let header = 8 + u64::from_le_bytes(weights[..8].try_into().unwrap()) as usize;
    let case = dir.path().join("case");
    std::fs::create_dir_all(&case).unwrap();
    std::fs::write(case.join("adapter_model.safetensors"), &weights).unwrap();
    fuzz("adapter-config", &config, config.len(), &|b| {
        std::fs::write(case.join("adapter_config.json"), b).unwrap();
        let _ = LoraAdapter::load(&case);
    });
    std::fs::write(case.join("adapter_config.json"), &config).unwrap();
    fuzz("adapter-safetensors", &weights, header, &|b| {
        std::fs::write(case.join("adapter_model.safetensors"), b).unwrap();
        let _ = LoraAdapter::load(&case);
    });
}

#[test]
fn the_mutator_changes_inputs_and_is_seeded() {
    let input = b"GGUF\x03\x00\x00\x00 some header bytes".to_vec();
    let run = |seed| {
        let mut rng = SplitMix64::new(seed);
        (0..20).map(|_| mutate(&mut rng, &input, input.len())).collect::<Vec<_>>()
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
    assert!(run(7).iter().filter(|m| **m != input).count() >= 15);
}
