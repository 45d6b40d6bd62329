//! `train-lora --target embedder | reranker`: the retrievers trained on the corpus itself.
//!
//! **Data.** A `synth-data` artifact (`train.jsonl` / `dev.jsonl`: the inverse-cloze set, or a
//! teacher's questions, split by page groups) and the index artifact the questions are about.
//! Each question's positive is the chunk it was written from (for inverse-cloze rows the
//! question sentence is cut from it, as in ICT, with probability 0.9); its hard negatives are
//! the best BM25 and dense hits of the index (interleaved) that are **not relevant by page**
//! (a chunk overlapping a gold page is never a negative, whichever chunk of the page it is).
//!
//! **Embedder.** InfoNCE over the step's questions: each query against every positive and hard
//! negative of the step, `softmax(q·p / temperature)`, target its own positive; in-batch
//! passages relevant to the query by page are masked out rather than counted as negatives.
//! Queries and passages get the model family's prefixes. Output: a PEFT adapter folder
//! (`FEATURE_EXTRACTION`, BERT module names), or with `tuning = "full"` a whole model folder.
//!
//! **Reranker.** A `BertForSequenceClassification` from the base's encoder (its pooler; a new
//! one-logit classifier): per question the positive pair and its hard-negative pairs, scored
//! with listwise softmax (target: the positive) or binary cross-entropy. Output: a Hugging
//! Face folder with full (merged) weights that gauge's cross-encoder loads.
//!
//! Every page whose text was a positive goes into the manifest (`trained_pages`) and into
//! `training_pages.json` beside the weights, so `evaluate` can keep to questions whose gold
//! pages the model never saw as relevant.
pub mod bert;
mod bert_host;
mod bert_types;

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use burn::tensor::activation::log_softmax;
use burn::tensor::TensorData;
use gauge_core::artifact::StageRun;
use gauge_core::golden::GoldenQuestion;
use gauge_core::schema::ChunkRecord;
use gauge_tensor::device::Tensor;
use tokenizers::{EncodeInput, Tokenizer, TruncationParams, TruncationStrategy};

use crate::retriever::bert::{module_targets, Arch, EncoderParams, EncoderTask, Encoded, TrainableBert, Tuning};
use crate::curve;
use crate::steps::{optimise, StepOut, Trainee};
use crate::run::{peak_rss_mib, sample, write_safetensors, TrainConfig, TrainInputs, TrainOptions, TrainSummary};
pub use crate::run::{RerankLoss, RetrieverConfig, Target, TrainingPages, TuningKind, TRAINING_PAGES};
use crate::TrainError;

/// One training question with its positive and mined negatives.
#[derive(Debug, Clone)]
pub struct RetrievalExample {
    /// The question.
    pub question: String,
    /// Positive passage text.
    pub positive: String,
    /// Hard negative passage texts.
    pub negatives: Vec<String>,
    /// `(source, page)` of the gold pages and the positive chunk.
    pub pages: Vec<(String, i32)>,
    /// The teacher's scores of the positive, then of each negative (empty without a teacher).
    pub teacher: Vec<f32>,
}

/// What [`build_examples`] mined.
pub struct Mined {
    /// The examples.
    pub examples: Vec<RetrievalExample>,
    /// Questions without a positive chunk.
    pub missing: usize,
    /// Negatives the teacher scored at or above their positive (dropped with `denoise`, among
    /// those examined until `hard_negatives` were kept).
    pub denoised: usize,
    /// Questions left out, with a teacher, for want of any negative or of a finite score.
    pub without_negatives: usize,
}

/// The gold pages of a question, expanded.
pub fn gold_pages(q: &GoldenQuestion) -> Vec<(String, i32)> {
    q.gold.iter().filter_map(|g| g.pages().map(|(a, b)| (g.source().to_string(), a, b))).flat_map(|(s, a, b)| (a..=b).map(move |p| (s.clone(), p))).collect()
}

/// Whether a chunk is relevant to a question by page (evaluate's page rule: same source, page
/// ranges overlap; spans without pages by character overlap).
pub fn relevant_by_page(q: &GoldenQuestion, c: &ChunkRecord) -> bool {
    q.gold.iter().any(|g| g.covered_by_pages(&c.source, (c.page_start, c.page_end), (c.char_start, c.char_end)))
}

/// A golden-set row with the chunk it was made from (synth-data rows carry `chunk_id`).
#[derive(Debug, Clone)]
pub struct SourcedQuestion {
    /// The question.
    pub question: GoldenQuestion,
    /// The chunk it came from.
    pub chunk_id: Option<String>,
    /// `ict` rows had their question cut from the chunk.
    pub ict: bool,
    /// The model that wrote the question (the row's `teacher_model`), when recorded.
    pub teacher: Option<String>,
}

/// Reads golden rows (JSONL) with their `chunk_id` and `teacher_model`.
pub fn read_questions(path: &Path) -> Result<Vec<SourcedQuestion>, TrainError> {
    let text = std::fs::read_to_string(path).map_err(|e| TrainError::Data { path: path.to_path_buf(), message: format!("cannot read ({e})") })?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let bad = |m: String| TrainError::Data { path: path.to_path_buf(), message: format!("line {}: {m} (pass a synth-data artifact: golden rows with `question` and `gold`)", i + 1) };
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| bad(format!("not JSON ({e})")))?;
        let question: GoldenQuestion = serde_json::from_value(v.clone()).map_err(|e| bad(format!("not a golden row ({e})")))?;
        if question.gold.is_empty() {
            return Err(bad("no `gold` pages".into()));
        }
        out.push(SourcedQuestion { question, chunk_id: v["chunk_id"].as_str().map(str::to_string), ict: v["teacher_model"].as_str() == Some("ict"), teacher: v["teacher_model"].as_str().filter(|t| !t.is_empty()).map(str::to_string) });
    }
    Ok(out)
}

/// The training and held-out files of a synth-data artifact (or one JSONL file).
pub fn input_files(input: &Path) -> Result<(PathBuf, Option<PathBuf>), TrainError> {
    if input.is_file() {
        return Ok((input.to_path_buf(), None));
    }
    let train = input.join("train.jsonl");
    if train.is_file() {
        let dev = input.join("dev.jsonl");
        return Ok((train, dev.is_file().then_some(dev)));
    }
    Err(TrainError::Data { path: input.to_path_buf(), message: "holds no train.jsonl (run `synth-data --split …` and pass the directory it prints, or pass a golden JSONL file)".into() })
}

/// Builds examples: positives from the index's chunks, hard negatives mined with its BM25 and
/// dense retrievers; with a `teacher`, each positive and negative scored by it (and, with
/// `cfg.denoise`, twice the negatives mined and those scored at or above the positive dropped).
pub fn build_examples(engine: &gauge_engine::Engine, rows: &[SourcedQuestion], cfg: &RetrieverConfig, seed: u64, teacher: Option<&gauge_generator::query_likelihood::QueryLikelihood>) -> anyhow::Result<Mined> {
    let retrieval = gauge_engine::RetrievalConfig { candidates: cfg.mine_depth, k: cfg.mine_depth, ..Default::default() };
    let mut out = Vec::with_capacity(rows.len());
    let mut missing = 0;
    let wanted = if cfg.denoise && teacher.is_some() { 2 * cfg.hard_negatives } else { cfg.hard_negatives };
    let bar = gauge_core::progress::bar(rows.len() as u64, "questions mined");
    for (i, row) in rows.iter().enumerate() {
        bar.inc(1);
        let q = &row.question;
        let positive = row.chunk_id.as_deref().and_then(|id| engine.chunk(id)).filter(|c| relevant_by_page(q, c)).or_else(|| engine.chunks().chunks.iter().find(|c| relevant_by_page(q, c)));
        let Some(positive) = positive else {
            missing += 1;
            continue;
        };
        let mut text = positive.embed_text.clone().unwrap_or_else(|| positive.text.clone());
        if row.ict {
            let mut rng = gauge_core::rng::SplitMix64::new(seed ^ 0x1C7 ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            if ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < cfg.ict_remove_sentence && text.contains(q.question.trim()) {
                text = text.replacen(q.question.trim(), " ", 1);
            }
        }
        let dense = engine.retrieve("dense", &q.question, &retrieval)?;
        let bm25 = engine.retrieve("bm25", &q.question, &retrieval)?;
        let mut seen = HashSet::new();
        let mut negatives = Vec::new();
        let interleaved = bm25.hits.iter().zip(dense.hits.iter()).flat_map(|(a, b)| [a, b]).chain(bm25.hits.iter().skip(dense.hits.len())).chain(dense.hits.iter().skip(bm25.hits.len()));
        for (id, _) in interleaved {
            if negatives.len() >= wanted {
                break;
            }
            if !seen.insert(id.clone()) {
                continue;
            }
            let Some(c) = engine.chunk(id) else { continue };
            if relevant_by_page(q, c) || c.chunk_id == positive.chunk_id {
                continue;
            }
            negatives.push(c.embed_text.clone().unwrap_or_else(|| c.text.clone()));
        }
        let mut pages = gold_pages(q);
        pages.extend((positive.page_start..=positive.page_end).map(|p| (positive.source.clone(), p)));
        pages.sort();
        pages.dedup();
        out.push(RetrievalExample { question: q.question.clone(), positive: text, negatives, pages, teacher: Vec::new() });
    }
    bar.finish_and_clear();
    let Some(t) = teacher else { return Ok(Mined { examples: out, missing, denoised: 0, without_negatives: 0 }) };
    let (examples, denoised, without_negatives) = teach(out, t, cfg)?;
    Ok(Mined { examples, missing, denoised, without_negatives })
}

/// Scores every example's positive and negatives with the teacher — the pairs ordered by
/// passage, so a passage shared by several questions (a chunk's inverse-cloze sentences, a
/// negative mined for many) is prefilled once per call — then, with `cfg.denoise`, drops
/// the negatives scored at or above their positive (keeping `hard_negatives`), and leaves out
/// the examples without a negative or a finite score. Returns them with the two counts.
fn teach(examples: Vec<RetrievalExample>, teacher: &gauge_generator::query_likelihood::QueryLikelihood, cfg: &RetrieverConfig) -> anyhow::Result<(Vec<RetrievalExample>, usize, usize)> {
    let pairs: Vec<(&str, &str)> = examples.iter().flat_map(|e| std::iter::once(e.positive.as_str()).chain(e.negatives.iter().map(String::as_str)).map(|p| (p, e.question.as_str()))).collect();
    let bar = gauge_core::progress::bar(pairs.len() as u64, "teacher scores");
    let mut by_passage: Vec<usize> = (0..pairs.len()).collect();
    by_passage.sort_by(|&a, &b| pairs[a].0.cmp(pairs[b].0).then(a.cmp(&b)));
    let mut scores = vec![0f32; pairs.len()];
    // Calls of 64 pairs: each call's scores are kept in the model-call cache (a killed run
    // resumes), and its pairs are scored in batches that share prefills.
    for part in by_passage.chunks(64) {
        let asked: Vec<(&str, &str)> = part.iter().map(|&i| pairs[i]).collect();
        for (&i, s) in part.iter().zip(teacher.pair_likelihoods(&asked)?) {
            scores[i] = s as f32;
        }
        bar.inc(part.len() as u64);
    }
    bar.finish_and_clear();
    drop(pairs);
    let (mut denoised, mut without_negatives) = (0, 0);
    let mut out = Vec::with_capacity(examples.len());
    let mut at = 0;
    for mut e in examples {
        let mut own = scores[at..at + 1 + e.negatives.len()].to_vec();
        at += own.len();
        if cfg.denoise {
            let (mut kept, mut kept_scores) = (Vec::new(), vec![own[0]]);
            for (n, s) in std::mem::take(&mut e.negatives).into_iter().zip(own[1..].iter().copied()) {
                if kept.len() >= cfg.hard_negatives {
                    break;
                }
                if s >= own[0] {
                    denoised += 1;
                } else {
                    kept.push(n);
                    kept_scores.push(s);
                }
            }
            (e.negatives, own) = (kept, kept_scores);
        }
        if e.negatives.is_empty() || !own.iter().all(|s| s.is_finite()) {
            // Nothing to contrast the positive with (every negative denoised away), or a
            // score the teacher could not give (an empty question).
            without_negatives += 1;
            continue;
        }
        e.teacher = own;
        out.push(e);
    }
    Ok((out, denoised, without_negatives))
}

/// The teacher's margins `t(p⁺) − t(n)` of a group (0 for the positive's own column).
pub fn teacher_margins(scores: &[f32], group: usize) -> Vec<f32> {
    (0..group).map(|j| scores[0] - scores[j]).collect()
}

/// Tokenizers of the encoder targets: single texts and (query, passage) pairs.
pub struct EncoderTokenizer {
    single: Tokenizer,
    pair: Tokenizer,
    query_len: usize,
    one_type: bool,
}

impl EncoderTokenizer {
    /// From a model folder's `tokenizer.json`.
    pub fn load(dir: &Path, query_len: usize, passage_len: usize, one_type: bool) -> Result<EncoderTokenizer, TrainError> {
        let path = dir.join("tokenizer.json");
        let base = Tokenizer::from_file(&path).map_err(|e| TrainError::Data { path: path.clone(), message: format!("cannot load the tokenizer ({e})") })?;
        let with = |strategy, max_length| -> Result<Tokenizer, TrainError> {
            let mut t = base.clone();
            t.with_padding(None);
            t.with_truncation(Some(TruncationParams { max_length, strategy, ..Default::default() })).map_err(|e| TrainError::Data { path: path.clone(), message: format!("cannot set truncation ({e})") })?;
            Ok(t)
        };
        Ok(EncoderTokenizer { single: with(TruncationStrategy::LongestFirst, passage_len)?, pair: with(TruncationStrategy::LongestFirst, passage_len)?, query_len, one_type })
    }

    /// A single text, truncated to `max` tokens (with the special tokens).
    pub fn text(&self, text: &str, max: usize) -> Result<Encoded, TrainError> {
        let enc = self.single.encode(text, true).map_err(|e| TrainError::Model(format!("tokenization failed: {e}")))?;
        let mut ids = enc.get_ids().to_vec();
        if ids.len() > max && max >= 2 {
            let last = *ids.last().expect("non-empty");
            ids.truncate(max - 1);
            ids.push(last);
        }
        let n = ids.len();
        Ok(Encoded { ids, types: vec![0; n] })
    }

    /// A query (its own length limit).
    pub fn query(&self, text: &str) -> Result<Encoded, TrainError> {
        self.text(text, self.query_len)
    }

    /// A `[CLS] query [SEP] passage [SEP]` pair, as the cross-encoder encodes it.
    pub fn pair(&self, query: &str, passage: &str) -> Result<Encoded, TrainError> {
        let enc = self.pair.encode(EncodeInput::Dual(query.into(), passage.into()), true).map_err(|e| TrainError::Model(format!("tokenization failed: {e}")))?;
        let types = if self.one_type { vec![0; enc.get_ids().len()] } else { enc.get_type_ids().to_vec() };
        Ok(Encoded { ids: enc.get_ids().to_vec(), types })
    }
}

/// One step's inputs, tokenized.
#[derive(Debug, Clone)]
pub enum StepBatch {
    /// Queries, then passages (the positives in query order, then every negative), and per
    /// query the passages masked out of its softmax (relevant by page, not its positive).
    Contrastive {
        /// Queries.
        queries: Vec<Encoded>,
        /// Positives (query order), then negatives.
        passages: Vec<Encoded>,
        /// Per query, passage indices left out of its softmax.
        masked: Vec<Vec<usize>>,
    },
    /// Pairs in groups of `group` (positive first).
    Pairs {
        /// `[CLS] q [SEP] p [SEP]` encodings, group by group.
        pairs: Vec<Encoded>,
        /// Pairs per question (1 + negatives).
        group: usize,
        /// The teacher's margins of each pair, group by group ([`teacher_margins`]; empty
        /// without a teacher).
        margins: Vec<f32>,
    },
}

impl StepBatch {
    /// Tokens in the step.
    pub fn tokens(&self) -> usize {
        match self {
            StepBatch::Contrastive { queries, passages, .. } => queries.iter().chain(passages).map(|e| e.ids.len()).sum(),
            StepBatch::Pairs { pairs, .. } => pairs.iter().map(|e| e.ids.len()).sum(),
        }
    }
}

/// Tokenizes a step's examples for the target.
pub fn step_batch(examples: &[&RetrievalExample], task: EncoderTask, tok: &EncoderTokenizer, cfg: &RetrieverConfig, prefixes: (&str, &str)) -> Result<StepBatch, TrainError> {
    match task {
        EncoderTask::Embedder { .. } => {
            let queries = examples.iter().map(|e| tok.query(&format!("{}{}", prefixes.0, e.question))).collect::<Result<Vec<_>, _>>()?;
            // Passage texts with the pages they cover (for in-batch masking).
            let mut passages: Vec<(&str, usize)> = examples.iter().enumerate().map(|(i, e)| (e.positive.as_str(), i)).collect();
            for (i, e) in examples.iter().enumerate() {
                passages.extend(e.negatives.iter().take(cfg.hard_negatives).map(|n| (n.as_str(), usize::MAX - i)));
            }
            // A passage is masked for query i when it is another question's positive sharing a
            // page with question i (the same text is relevant to both).
            let masked = examples
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    let pages: HashSet<&(String, i32)> = e.pages.iter().collect();
                    passages.iter().enumerate().filter(|(_, (_, owner))| *owner != i && *owner < examples.len() && examples[*owner].pages.iter().any(|p| pages.contains(p))).map(|(j, _)| j).collect()
                })
                .collect();
            let passages = passages.iter().map(|(t, _)| tok.text(&format!("{}{}", prefixes.1, t), cfg.max_passage_tokens)).collect::<Result<Vec<_>, _>>()?;
            Ok(StepBatch::Contrastive { queries, passages, masked })
        }
        EncoderTask::CrossEncoder => {
            let group = 1 + examples.iter().map(|e| e.negatives.len().min(cfg.hard_negatives)).min().unwrap_or(0);
            let mut pairs = Vec::with_capacity(examples.len() * group);
            let margins: Vec<f32> = if examples.iter().all(|e| e.teacher.len() >= group) { examples.iter().flat_map(|e| teacher_margins(&e.teacher, group)).collect() } else { Vec::new() };
            for e in examples {
                pairs.push(tok.pair(&format!("{}{}", prefixes.0, e.question), &format!("{}{}", prefixes.1, e.positive))?);
                for n in e.negatives.iter().take(group - 1) {
                    pairs.push(tok.pair(&format!("{}{}", prefixes.0, e.question), &format!("{}{}", prefixes.1, n))?);
                }
            }
            Ok(StepBatch::Pairs { pairs, group, margins })
        }
    }
}

/// Sequences per forward batch (bounds the padded attention tensors).
const FORWARD_BATCH: usize = 16;

/// Groups encodings into forward batches of similar length (sorted, so padding stays small),
/// returning the batches and, per batch, the original indices.
fn forward_batches(items: &[Encoded]) -> (Vec<Vec<&Encoded>>, Vec<Vec<usize>>) {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| items[i].ids.len());
    let idx: Vec<Vec<usize>> = order.chunks(FORWARD_BATCH).map(<[usize]>::to_vec).collect();
    (idx.iter().map(|b| b.iter().map(|&i| &items[i]).collect()).collect(), idx)
}

/// Reassembles per-batch outputs `[b_k, d]` into one `[n, d]` tensor in original order.
fn gather(outs: Vec<Tensor<2>>, idx: &[Vec<usize>], device: &burn::DispatchDevice) -> Tensor<2> {
    let all = Tensor::cat(outs, 0);
    let order: Vec<usize> = idx.iter().flatten().copied().collect();
    let mut inverse = vec![0i64; order.len()];
    for (pos, &i) in order.iter().enumerate() {
        inverse[i] = pos as i64;
    }
    let n = inverse.len();
    all.select(0, Tensor::<1, burn::tensor::Int>::from_data(TensorData::new(inverse, [n]), device))
}

/// A step's loss and, when training, the gradient of every trainable parameter.
pub type StepLoss = (f64, Option<Vec<Vec<f32>>>);

/// The step's loss (and, with `train`, gradients of every trainable parameter).
pub fn step_loss(model: &TrainableBert, params: &EncoderParams, batch: &StepBatch, cfg: &RetrieverConfig, train: bool) -> Result<StepLoss, TrainError> {
    let device = model.device(train).clone();
    match batch {
        StepBatch::Contrastive { queries, passages, masked } => {
            let (qb, qi) = forward_batches(queries);
            let (pb, pi) = forward_batches(passages);
            let nq = qb.len();
            let (n, m) = (queries.len(), passages.len());
            let mut mask = vec![0f32; n * m];
            let mut target = vec![0f32; n * m];
            for i in 0..n {
                target[i * m + i] = 1.0;
                for &j in &masked[i] {
                    mask[i * m + j] = -1e9;
                }
            }
            let temperature = cfg.temperature;
            let loss_fn = |outs: Vec<Tensor<2>>| -> Tensor<1> {
                let mut outs = outs;
                let ps = outs.split_off(nq);
                let q = gather(outs, &qi, &device);
                let p = gather(ps, &pi, &device);
                let sims = q.matmul(p.transpose()).div_scalar(temperature) + Tensor::<2>::from_data(TensorData::new(mask.clone(), [n, m]), &device);
                let lp = log_softmax(sims, 1) * Tensor::<2>::from_data(TensorData::new(target.clone(), [n, m]), &device);
                lp.sum().neg().div_scalar(n as f64)
            };
            let batches: Vec<Vec<&Encoded>> = qb.into_iter().chain(pb).collect();
            run(model, params, &batches, loss_fn, train)
        }
        StepBatch::Pairs { pairs, group, margins } => {
            let (b, idx) = forward_batches(pairs);
            let (g, n) = (*group, pairs.len() / *group);
            let loss = cfg.loss;
            if loss == RerankLoss::MarginMse && (margins.len() != n * g || g < 2) {
                return Err(TrainError::Model(format!("margin_mse needs the teacher's scores of each question's positive and at least one negative (retriever.teacher); this step has {} of {} and groups of {g}", margins.len(), n * g)));
            }
            let loss_fn = |outs: Vec<Tensor<2>>| -> Tensor<1> {
                let logits = gather(outs, &idx, &device).reshape([n, g]);
                match loss {
                    RerankLoss::Listwise => log_softmax(logits, 1).narrow(1, 0, 1).sum().neg().div_scalar(n as f64),
                    RerankLoss::Bce => {
                        // softplus(−y·x) with y = +1 for the positive column, −1 for the rest.
                        let sign: Vec<f32> = (0..n * g).map(|k| if k % g == 0 { -1.0 } else { 1.0 }).collect();
                        let z = logits * Tensor::<2>::from_data(TensorData::new(sign, [n, g]), &device);
                        let softplus = z.clone().clamp_min(0.0) + z.abs().neg().exp().add_scalar(1.0).log();
                        softplus.sum().div_scalar((n * g) as f64)
                    }
                    RerankLoss::MarginMse => {
                        // (s₀ − s_j) − (t₀ − t_j) over the negatives (the positive's column is 0 − 0).
                        let own = logits.clone().narrow(1, 0, 1).repeat_dim(1, g) - logits;
                        let d = own - Tensor::<2>::from_data(TensorData::new(margins.clone(), [n, g]), &device);
                        (d.clone() * d).sum().div_scalar((n * (g - 1)) as f64)
                    }
                }
            };
            run(model, params, &b, loss_fn, train)
        }
    }
}

fn run(model: &TrainableBert, params: &EncoderParams, batches: &[Vec<&Encoded>], loss_fn: impl FnOnce(Vec<Tensor<2>>) -> Tensor<1>, train: bool) -> Result<StepLoss, TrainError> {
    if train {
        let (loss, grads) = model.loss_and_gradients(params, batches, loss_fn)?;
        Ok((loss, Some(grads)))
    } else {
        Ok((model.loss(params, batches, loss_fn)?, None))
    }
}

/// Refuses a base the target cannot train: the reranker (a cross-encoder) needs BERT.
pub fn check_base(arch: Arch, target: Target, spec: &str) -> anyhow::Result<()> {
    anyhow::ensure!(arch == Arch::Bert || target != Target::Reranker, "--base {spec}: an {} base trains as --target embedder; the reranker (a cross-encoder) needs a BERT base (e.g. sentence-transformers/all-MiniLM-L6-v2)", arch.label());
    Ok(())
}

/// The base model folder of an encoder target and its architecture (BERT or MPNet).
pub fn resolve_base(spec: &str) -> anyhow::Result<(PathBuf, Arch)> {
    let source = gauge_encoder::resolve_model(spec)?;
    for f in ["config.json", "tokenizer.json", "model.safetensors"] {
        anyhow::ensure!(source.dir.join(f).is_file(), "{}: missing {f}; an encoder target's base is a BERT or MPNet model folder (e.g. --base sentence-transformers/all-MiniLM-L6-v2)", source.dir.display());
    }
    let (arch, _) = Arch::from_dir(&source.dir).map_err(|e| anyhow::anyhow!("{e}; an encoder target's base is a BERT or MPNet model folder (e.g. --base sentence-transformers/all-MiniLM-L6-v2)"))?;
    Ok((source.dir, arch))
}

/// Copies a model folder's files except its weights (config, tokenizer, sentence-transformers
/// modules and pooling).
fn copy_model_files(from: &Path, to: &Path) -> anyhow::Result<()> {
    gauge_core::artifact::copy_tree(from, to, &|n| n.ends_with(".safetensors") || n.ends_with(".bin") || n.ends_with(".onnx") || n.starts_with('.') || n == "onnx" || n == "openvino" || n == "README.md")?;
    Ok(())
}

/// Writes a whole model folder: the base folder's files (config, tokenizer, and for an
/// embedder its sentence-transformers modules) with `model.safetensors` holding the trained
/// weights (LoRA merged in). A cross-encoder becomes a `BertForSequenceClassification` folder
/// (`bert.`-prefixed encoder, one-label config, no sentence-transformers modules).
pub fn save_model(model: &TrainableBert, params: &EncoderParams, base: &Path, dir: &Path) -> anyhow::Result<()> {
    let cross = model.task == EncoderTask::CrossEncoder;
    copy_model_files(base, dir)?;
    write_safetensors(&dir.join("model.safetensors"), &model.merged_tensors(params, if cross { "bert." } else { "" }))?;
    if cross {
        let path = dir.join("config.json");
        let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
        config["architectures"] = serde_json::json!(["BertForSequenceClassification"]);
        config["id2label"] = serde_json::json!({"0": "LABEL_0"});
        config["label2id"] = serde_json::json!({"LABEL_0": 0});
        std::fs::write(&path, serde_json::to_string_pretty(&config)?)?;
        // A cross-encoder is not a sentence-transformers embedder: drop its modules.
        for f in ["modules.json", "sentence_bert_config.json", "config_sentence_transformers.json"] {
            let _ = std::fs::remove_file(dir.join(f));
        }
        let _ = std::fs::remove_dir_all(dir.join("1_Pooling"));
        let _ = std::fs::remove_dir_all(dir.join("2_Normalize"));
    }
    Ok(())
}

/// Mean held-out loss over the dev examples in steps of `window`.
fn eval_loss(model: &TrainableBert, params: &EncoderParams, dev: &[StepBatch], cfg: &RetrieverConfig) -> Result<Option<f64>, TrainError> {
    if dev.is_empty() {
        return Ok(None);
    }
    let mut total = 0.0;
    for b in dev {
        total += step_loss(model, params, b, cfg, false)?.0;
    }
    Ok(Some(total / dev.len() as f64))
}

/// An encoder with its trainable tensors, as the shared loop trains it.
struct EncoderTrainee<'a> {
    model: &'a TrainableBert,
    params: EncoderParams,
    train: &'a [RetrievalExample],
    dev_batches: &'a [StepBatch],
    dev_examples: u64,
    task: EncoderTask,
    tok: &'a EncoderTokenizer,
    cfg: &'a RetrieverConfig,
    prefixes: (&'a str, &'a str),
}

impl Trainee for EncoderTrainee<'_> {
    fn step(&mut self, examples: &[usize], _step: u64) -> anyhow::Result<StepOut> {
        let examples: Vec<&RetrievalExample> = examples.iter().map(|&i| &self.train[i]).collect();
        let batch = step_batch(&examples, self.task, self.tok, self.cfg, self.prefixes)?;
        let (loss, grads) = step_loss(self.model, &self.params, &batch, self.cfg, true)?;
        Ok(StepOut { loss, grads: grads.expect("training step returns gradients"), tokens: batch.tokens(), targets: examples.len() as u64 })
    }

    fn eval(&self) -> anyhow::Result<Option<(f64, u64)>> {
        Ok(eval_loss(self.model, &self.params, self.dev_batches, self.cfg)?.map(|l| (l, self.dev_examples)))
    }

    fn params(&self) -> Vec<&[f32]> {
        self.params.trainable_values()
    }

    fn params_mut(&mut self) -> Vec<&mut Vec<f32>> {
        self.params.trainable_mut()
    }
}

/// Trains an encoder target (called by the stage's build).
pub fn train_encoder(inputs: &TrainInputs, index: &Path, run: &mut StageRun, cfg: &TrainConfig, opts: &TrainOptions) -> anyhow::Result<TrainSummary> {
    let hold_out = &inputs.hold_out;
    let rc = &cfg.retriever;
    anyhow::ensure!(rc.temperature > 0.0, "retriever.temperature must be positive, got {}", rc.temperature);
    let device = gauge_tensor::device::parse(&opts.device)?;
    let (base, arch) = resolve_base(&cfg.base)?;
    let family = gauge_encoder::Family::detect(&format!("{} {}", cfg.base, base.display()));
    let prefixes = (rc.query_prefix.clone().unwrap_or_else(|| family.query_prefix().to_string()), rc.passage_prefix.clone().unwrap_or_else(|| family.passage_prefix().to_string()));
    let task = match cfg.target {
        Target::Reranker => EncoderTask::CrossEncoder,
        _ => {
            let sentence = gauge_encoder::config::SentenceConfig::from_dir(&base)?;
            EncoderTask::Embedder { pooling: sentence.pooling.unwrap_or(family.default_pooling()), normalize: if sentence.declared { sentence.normalize } else { true } }
        }
    };
    let tuning = match rc.tuning {
        TuningKind::Full => Tuning::Full,
        TuningKind::Lora => Tuning::Lora { r: cfg.r, alpha: cfg.lora_alpha, rslora: cfg.use_rslora, targets: module_targets(&cfg.target_modules, arch)? },
    };
    let (train_file, dev_file) = input_files(&inputs.data)?;
    let (mut all_rows, mut dev_all) = (read_questions(&train_file)?, match &dev_file {
        Some(d) => read_questions(d)?,
        None => Vec::new(),
    });
    let mut per_set = vec![all_rows.len()];
    for a in &inputs.also {
        let (t, d) = input_files(a)?;
        let rows = read_questions(&t)?;
        per_set.push(rows.len());
        all_rows.extend(rows);
        if let Some(d) = d {
            dev_all.extend(read_questions(&d)?);
        }
    }
    // Pages of the held-out golden sets: no training question may touch them.
    let mut held: HashSet<(String, i32)> = HashSet::new();
    for h in hold_out {
        for q in gauge_core::golden::load_golden(h)? {
            held.extend(gold_pages(&q));
        }
    }
    let before = all_rows.len();
    let kept: Vec<SourcedQuestion> = all_rows.into_iter().filter(|r| !gold_pages(&r.question).iter().any(|p| held.contains(p))).collect();
    let dropped_for_hold_out = before - kept.len();
    if dropped_for_hold_out > 0 {
        tracing::info!("{dropped_for_hold_out} of {before} training questions dropped: they share a page with a held-out golden set");
    }
    let train_rows = sample(kept, cfg.max_train_examples, cfg.seed);
    let dev_rows = sample(dev_all, Some(cfg.eval_examples), cfg.seed);
    let engine = gauge_engine::Engine::open(index, &gauge_engine::EngineOptions { device: opts.device.clone(), ..Default::default() })?;
    // The teacher's scores go through the model-call cache beside the index.
    let teacher = rc.teacher.as_deref().map(|m| gauge_generator::query_likelihood::QueryLikelihood::load(m, None, &opts.device, Some(gauge_engine::call_cache_beside(index)))).transpose()?;
    let Mined { examples: mut train, missing, denoised, without_negatives } = build_examples(&engine, &train_rows, rc, cfg.seed, teacher.as_ref())?;
    // A positive chunk may reach onto a held-out page (chunks span pages): drop those too.
    let before_pages = train.len();
    train.retain(|e| !e.pages.iter().any(|p| held.contains(p)));
    let dropped_for_hold_out = dropped_for_hold_out + before_pages - train.len();
    let Mined { examples: dev, missing: dev_missing, .. } = build_examples(&engine, &dev_rows, rc, cfg.seed ^ 1, teacher.as_ref())?;
    drop((engine, teacher));
    anyhow::ensure!(without_negatives == 0 || !train.is_empty(), "{}: the teacher left no training question with a negative ({without_negatives} left out); raise retriever.hard_negatives or drop retriever.denoise", train_file.display());
    anyhow::ensure!(!train.is_empty(), "{}: no training question has a positive chunk in {} (is it the index of the chunks synth-data read?)", train_file.display(), index.display());
    let (model, params) = TrainableBert::load(&base, task, tuning, cfg.seed, &device)?;
    let tok = EncoderTokenizer::load(&base, rc.max_query_tokens, rc.max_passage_tokens, model.config.type_vocab_size <= 1)?;
    let window = cfg.batch_size * cfg.grad_accum;
    anyhow::ensure!(task == EncoderTask::CrossEncoder || window >= 2, "the embedder's contrastive step needs at least 2 questions (batch_size × grad_accum)");
    let pre = (prefixes.0.as_str(), prefixes.1.as_str());
    let dev_batches: Vec<StepBatch> = dev.chunks(window).map(|c| step_batch(&c.iter().collect::<Vec<_>>(), task, &tok, rc, pre)).collect::<Result<_, _>>()?;

    let ckpt_dir = run.checkpoint_dir()?.to_path_buf();
    let mut trainee = EncoderTrainee { model: &model, params, train: &train, dev_batches: &dev_batches, dev_examples: dev.len() as u64, task, tok: &tok, cfg: rc, prefixes: pre };
    let trained = optimise(&mut trainee, train.len(), cfg, opts, &ckpt_dir)?;
    let (params, progress, total) = (trainee.params, &trained.progress, trained.steps);

    // Outputs.
    let pages: BTreeSet<String> = train.iter().flat_map(|e| e.pages.iter().map(|(s, p)| format!("{s}#{p}"))).collect();
    let target_name = if task == EncoderTask::CrossEncoder { "reranker" } else { "embedder" };
    let questions_by: BTreeSet<String> = train_rows.iter().filter_map(|q| q.teacher.clone()).collect();
    let record = TrainingPages { target: target_name.into(), base: cfg.base.clone(), questions: train.len(), pages: pages.iter().cloned().collect(), questions_by: questions_by.into_iter().collect() };
    let record_json = serde_json::to_string_pretty(&record)?;
    let deliverable = match (task, model.adapter(&params, Some(cfg.base.clone()))) {
        (EncoderTask::Embedder { .. }, Some(adapter)) => {
            adapter.save(&run.path("adapter"))?;
            "adapter"
        }
        _ => {
            save_model(&model, &params, &base, &run.path("model"))?;
            "model"
        }
    };
    std::fs::write(run.path(deliverable).join(TRAINING_PAGES), &record_json)?;
    for entry in std::fs::read_dir(run.path(deliverable))? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            run.add_output(&format!("{deliverable}/{}", entry.file_name().to_string_lossy()), None)?;
        }
    }
    let title = format!("train-lora --target {target_name}: {} on {} questions, {} steps", if matches!(model.tuning, Tuning::Full) { "full".to_string() } else { format!("LoRA r {}", cfg.r) }, train.len(), total);
    curve::write_outputs(run, &progress.curve, &title)?;
    let summary = trained.summary(train.len());
    run.set_stats(&summary);
    run.set_stat("target", target_name);
    run.set_stat("deliverable", deliverable);
    run.set_stat("trainable_parameters", params.trainable_count() as u64);
    run.set_stat("questions_without_positive", (missing + dev_missing) as u64);
    run.set_stat("dev_examples", dev.len() as u64);
    if rc.teacher.is_some() {
        run.set_stat("denoised_negatives", denoised as u64);
        run.set_stat("questions_without_negatives", without_negatives as u64);
    }
    run.set_stat("dropped_for_hold_out", dropped_for_hold_out as u64);
    run.set_stat("questions_per_set", serde_json::to_value(&per_set)?);
    run.set_stat("held_out_pages", held.len() as u64);
    run.set_stat("trained_pages_count", pages.len() as u64);
    run.set_stat("trained_pages", pages.into_iter().collect::<Vec<_>>());
    run.set_stat("training_seconds", progress.seconds);
    run.set_stat("training_tokens", progress.tokens);
    // Forward + backward of the matrices ≈ 6 FLOPs per weight per token for full tuning
    // (weight and input gradients), 4 for LoRA (input gradients only; the adapters are small).
    let flops_per_token = (if matches!(model.tuning, Tuning::Full) { 6 } else { 4 }) as f64 * model.matrix_parameters() as f64;
    let achieved = flops_per_token * summary.tokens_per_second;
    run.set_stat("matrix_flops_per_token", flops_per_token);
    run.set_stat("achieved_gflops", achieved / 1e9);
    let (peak, peak_basis) = gauge_core::machine::peak_f32_flops();
    if peak > 0.0 {
        run.set_stat("share_of_peak_f32", achieved / peak);
        run.set_stat("peak_f32_basis", peak_basis);
    }
    if let Some(p) = peak_rss_mib() {
        run.set_stat("peak_rss_mib", p);
    }
    Ok(summary)
}
