//! Cross-encoders: a BERT-family encoder reading `[CLS] query [SEP] passage [SEP]` with a
//! sequence-classification head, one relevance logit per pair. Two heads, as the folder's
//! weights declare them: `BertForSequenceClassification` (pooler `tanh(W·h_cls)`, then
//! `classifier`) and `XLMRobertaForSequenceClassification` (no pooler; `classifier.dense`,
//! `tanh`, `classifier.out_proj` on the first token), the latter with XLM-R's position
//! offset and single token type (e.g. BAAI/bge-reranker-base).
use burn::tensor::{Bool, Int, TensorData};

use crate::device::{Device, Tensor};
use serde::Serialize;
use tokenizers::{EncodeInput, Tokenizer, TruncationParams, TruncationStrategy};

use crate::bert::{load_dense as dense, BertEncoder, Dense};
use crate::config::BertConfig;
use crate::embedder::{for_each_batch, plan_batches};
use gauge_core::models::ModelSource;
use crate::weights::Weights;
use crate::EncoderError;

/// Options of a cross-encoder.
#[derive(Debug, Clone, Default)]
pub struct CrossEncoderOptions {
    /// Maximum tokens per pair (default: the position limit, at most 512); only the passage
    /// is truncated.
    pub max_length: Option<usize>,
    /// Padded tokens per batch (default 4096).
    pub token_budget: Option<usize>,
    /// Batches at once (default: available cores).
    pub workers: Option<usize>,
}

/// What a cross-encoder is, for manifests.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CrossEncoderInfo {
    /// Model id as given.
    pub model: String,
    /// BLAKE3 of `model.safetensors`.
    pub weights_hash: String,
    /// Maximum tokens per pair.
    pub max_length: usize,
    /// Head outputs (the first is the relevance logit).
    pub num_labels: usize,
}

/// A pair's token ids and token types.
#[derive(Debug, Clone, PartialEq)]
pub struct PairEncoding {
    /// Token ids.
    pub ids: Vec<u32>,
    /// Token types (0 query, 1 passage).
    pub types: Vec<u32>,
}

/// The classification head on the first token.
enum Head {
    /// BERT: optional pooler (`tanh`), then a linear classifier.
    Bert { pooler: Option<Dense>, classifier: Dense },
    /// RoBERTa: dense, `tanh`, out projection.
    Roberta { dense: Dense, out_proj: Dense },
}

/// A loaded cross-encoder.
pub struct CrossEncoder {
    encoder: BertEncoder,
    head: Head,
    tokenizer: Tokenizer,
    device: Device,
    token_budget: usize,
    workers: usize,
    /// Settings in effect.
    pub info: CrossEncoderInfo,
}

impl CrossEncoder {
    /// Loads a Hugging Face `BertForSequenceClassification` folder (config.json,
    /// tokenizer.json, model.safetensors).
    pub fn load(source: &ModelSource, options: &CrossEncoderOptions, device: &Device) -> Result<CrossEncoder, EncoderError> {
        let dir = &source.dir;
        if !dir.is_dir() {
            return Err(EncoderError::file(dir, "model folder does not exist; pass a cross-encoder folder or a hub id already in the local cache".into()));
        }
        let need = |f: &str| {
            let p = dir.join(f);
            if p.is_file() { Ok(p) } else { Err(EncoderError::file(&p, "missing; a cross-encoder folder needs config.json, tokenizer.json and model.safetensors".into())) }
        };
        let config = BertConfig::from_file(&need("config.json")?)?;
        let tokenizer_path = need("tokenizer.json")?;
        let weights = Weights::open(&need("model.safetensors")?, &["", "bert.", "roberta."])?;
        let h = config.hidden_size;
        let labels = config.num_labels();
        let head = if weights.contains("classifier.out_proj.weight") {
            Head::Roberta { dense: dense(&weights, "classifier.dense", h, h, device)?, out_proj: dense(&weights, "classifier.out_proj", h, labels, device)? }
        } else if weights.contains("classifier.weight") {
            let pooler = if weights.contains("pooler.dense.weight") { Some(dense(&weights, "pooler.dense", h, h, device)?) } else { None };
            Head::Bert { pooler, classifier: dense(&weights, "classifier", h, labels, device)? }
        } else {
            return Err(EncoderError::file(
                &dir.join("model.safetensors"),
                "no `classifier.weight` or `classifier.out_proj.weight`: this is not a sequence-classification (cross-encoder) checkpoint".into(),
            ));
        };
        let encoder = BertEncoder::load(&config, &weights, device)?;
        let max_length = options.max_length.unwrap_or(512).min(config.max_position_embeddings - config.position_offset());
        let mut tokenizer = Tokenizer::from_file(&tokenizer_path).map_err(|e| EncoderError::file(&tokenizer_path, format!("cannot load tokenizer ({e})")))?;
        tokenizer
            .with_truncation(Some(TruncationParams { max_length, strategy: TruncationStrategy::OnlySecond, ..Default::default() }))
            .map_err(|e| EncoderError::file(&tokenizer_path, format!("cannot set truncation ({e})")))?;
        tokenizer.with_padding(None);
        let info = CrossEncoderInfo { model: source.id.clone(), weights_hash: weights.hash(), max_length, num_labels: labels };
        let workers = options.workers.unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
        Ok(CrossEncoder { encoder, head, tokenizer, device: device.clone(), token_budget: options.token_budget.unwrap_or(4096).max(1), workers, info })
    }

    /// Pair encodings (`[CLS] q [SEP] p [SEP]`, passage truncated first; when the query alone
    /// is too long both sides are cut).
    pub fn encode_pairs(&self, query: &str, passages: &[&str]) -> Result<Vec<PairEncoding>, EncoderError> {
        let mut out = Vec::with_capacity(passages.len());
        for p in passages {
            let enc = match self.tokenizer.encode(EncodeInput::Dual(query.into(), (*p).into()), true) {
                Ok(e) => e,
                Err(_) => {
                    let mut t = self.tokenizer.clone();
                    t.with_truncation(Some(TruncationParams { max_length: self.info.max_length, strategy: TruncationStrategy::LongestFirst, ..Default::default() }))
                        .map_err(|e| EncoderError::Tokenize(e.to_string()))?;
                    t.encode(EncodeInput::Dual(query.into(), (*p).into()), true).map_err(|e| EncoderError::Tokenize(e.to_string()))?
                }
            };
            // One-type models (RoBERTa) read every token as type 0, whatever the post-processor says.
            let types = if self.encoder.config.type_vocab_size <= 1 { vec![0; enc.get_ids().len()] } else { enc.get_type_ids().to_vec() };
            out.push(PairEncoding { ids: enc.get_ids().to_vec(), types });
        }
        Ok(out)
    }

    fn logits_batch(&self, batch: &[&PairEncoding]) -> Vec<f32> {
        let b = batch.len();
        let l = batch.iter().map(|p| p.ids.len()).max().unwrap_or(1).max(1);
        let mut ids = vec![self.encoder.config.pad_token_id as i64; b * l];
        let mut types = vec![0i64; b * l];
        let mut pad = vec![true; b * l];
        for (r, p) in batch.iter().enumerate() {
            for c in 0..p.ids.len() {
                ids[r * l + c] = p.ids[c] as i64;
                types[r * l + c] = p.types[c] as i64;
                pad[r * l + c] = false;
            }
        }
        let lengths: Vec<usize> = batch.iter().map(|p| p.ids.len()).collect();
        let hidden = self.encoder.forward(
            Tensor::<2, Int>::from_data(TensorData::new(ids, [b, l]), &self.device),
            Tensor::<2, Int>::from_data(TensorData::new(types, [b, l]), &self.device),
            Tensor::<2, Bool>::from_data(TensorData::new(pad, [b, l]), &self.device),
            &lengths,
        );
        let h = self.encoder.config.hidden_size;
        let cls = hidden.narrow(1, 0, 1).reshape([b, h]);
        let out = match &self.head {
            Head::Bert { pooler: Some(p), classifier } => classifier.forward(p.forward(cls).tanh()),
            Head::Bert { pooler: None, classifier } => classifier.forward(cls),
            Head::Roberta { dense, out_proj } => out_proj.forward(dense.forward(cls).tanh()),
        };
        let logits: Vec<f32> = out.into_data().into_vec().expect("f32 logits");
        logits.chunks_exact(self.info.num_labels).map(|row| row[0]).collect()
    }

    /// One logit per encoded pair, in order; batched by token budget on `workers` threads.
    pub fn logits(&self, pairs: &[PairEncoding]) -> Vec<f32> {
        let batches = plan_batches(&pairs.iter().map(|p| p.ids.len()).collect::<Vec<_>>(), self.token_budget);
        let mut out = vec![0.0f32; pairs.len()];
        for_each_batch(
            &batches,
            self.workers,
            |batch| self.logits_batch(&batch.iter().map(|&i| &pairs[i]).collect::<Vec<_>>()),
            |batch, logits| {
                for (&i, v) in batch.iter().zip(logits) {
                    out[i] = v;
                }
            },
        );
        out
    }

    /// Relevance logits of passages for a query.
    pub fn score(&self, query: &str, passages: &[&str]) -> Result<Vec<f32>, EncoderError> {
        Ok(self.logits(&self.encode_pairs(query, passages)?))
    }
}

/// The logistic function (for scores in (0, 1)).
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}
