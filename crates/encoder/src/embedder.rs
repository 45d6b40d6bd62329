//! Sentence embeddings: tokenize, batch by a token budget, encode, pool, normalise.
use std::path::Path;

use burn::tensor::Bool;

use crate::device::{Device, Tensor};
use serde::Serialize;
use tokenizers::Tokenizer;

use crate::architecture::{Encoder, EncoderConfig};
use crate::config::{Pooling, SentenceConfig};
use crate::family::Family;
use gauge_core::models::ModelSource;
use crate::weights::Weights;
use crate::EncoderError;

/// Overrides of what the model folder declares.
#[derive(Debug, Clone, Default)]
pub struct EmbedderOptions {
    /// Pooling (default: the folder's `modules.json`, else the family's).
    pub pooling: Option<Pooling>,
    /// L2 normalisation (default: the folder's `Normalize` module, else on).
    pub normalize: Option<bool>,
    /// Maximum tokens per text (default: `max_seq_length`, else the position limit).
    pub max_length: Option<usize>,
    /// Query prefix (default: the family's).
    pub query_prefix: Option<String>,
    /// Passage prefix (default: the family's).
    pub passage_prefix: Option<String>,
    /// Padded tokens per batch (default 2048).
    pub token_budget: Option<usize>,
    /// Batches encoded at once (default: available cores).
    pub workers: Option<usize>,
    /// A LoRA adapter folder (PEFT, `FEATURE_EXTRACTION`) merged into the weights at load.
    pub adapter: Option<std::path::PathBuf>,
}

/// What an embedder is, for manifests.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EmbedderInfo {
    /// Model id as given.
    pub model: String,
    /// Family used for defaults.
    pub family: Family,
    /// BLAKE3 of `model.safetensors`.
    pub weights_hash: String,
    /// BLAKE3 of `tokenizer.json`.
    pub tokenizer_hash: String,
    /// Output dimension.
    pub dimension: usize,
    /// Pooling.
    pub pooling: Pooling,
    /// L2 normalisation.
    pub normalize: bool,
    /// Maximum tokens per text.
    pub max_length: usize,
    /// Prefix added to queries.
    pub query_prefix: String,
    /// Prefix added to passages.
    pub passage_prefix: String,
    /// The merged LoRA adapter folder, as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<String>,
    /// BLAKE3 of the merged adapter's `adapter_model.safetensors` and `adapter_config.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter_hash: Option<String>,
}

/// A loaded sentence embedder (weights loaded once; reuse it for every batch).
pub struct Embedder {
    encoder: Encoder,
    tokenizer: Tokenizer,
    device: Device,
    token_budget: usize,
    workers: usize,
    /// Settings in effect.
    pub info: EmbedderInfo,
}

/// Token ids of one text after truncation.
pub type TokenIds = Vec<u32>;

/// How a set of texts was batched.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BatchStats {
    /// Texts embedded.
    pub texts: usize,
    /// Real tokens.
    pub tokens: usize,
    /// Tokens including padding.
    pub padded_tokens: usize,
    /// Batches run.
    pub batches: usize,
}

impl BatchStats {
    /// Share of computed positions that were padding.
    pub fn padding_share(&self) -> f64 {
        if self.padded_tokens == 0 { 0.0 } else { 1.0 - self.tokens as f64 / self.padded_tokens as f64 }
    }
}

fn need(dir: &Path, file: &str, what: &str) -> Result<std::path::PathBuf, EncoderError> {
    let p = dir.join(file);
    if p.is_file() {
        Ok(p)
    } else {
        Err(EncoderError::file(&p, format!("missing ({what}); a model folder needs config.json, tokenizer.json and model.safetensors")))
    }
}

impl Embedder {
    /// Loads a model folder onto a device.
    pub fn load(source: &ModelSource, options: &EmbedderOptions, device: &Device) -> Result<Embedder, EncoderError> {
        let dir = &source.dir;
        if !dir.is_dir() {
            return Err(EncoderError::file(dir, "model folder does not exist; run `just models` or pass a model folder".into()));
        }
        let config_path = need(dir, "config.json", "the model configuration")?;
        let tokenizer_path = need(dir, "tokenizer.json", "the Hugging Face tokenizer")?;
        let weights_path = need(dir, "model.safetensors", "the weights")?;
        let config = EncoderConfig::from_file(&config_path)?;
        let sentence = SentenceConfig::from_dir(dir)?;
        let family = Family::detect(&format!("{} {}", source.id, dir.display()));
        let pooling = options.pooling.or(sentence.pooling).unwrap_or(family.default_pooling());
        let normalize = options.normalize.unwrap_or(if sentence.declared { sentence.normalize } else { true });
        let max_length = options
            .max_length
            .or(sentence.max_seq_length)
            .unwrap_or(config.max_tokens())
            .min(config.max_tokens());
        let mut tokenizer = Tokenizer::from_file(&tokenizer_path)
            .map_err(|e| EncoderError::file(&tokenizer_path, format!("cannot load tokenizer ({e})")))?;
        tokenizer
            .with_truncation(Some(tokenizers::TruncationParams { max_length, ..Default::default() }))
            .map_err(|e| EncoderError::file(&tokenizer_path, format!("cannot set truncation ({e})")))?;
        tokenizer.with_padding(None);
        let mut weights = Weights::open(&weights_path, &["", "bert.", "roberta.", "mpnet."])?;
        let adapter_hash = match &options.adapter {
            Some(dir) => {
                let adapter = crate::adapter::LoraAdapter::load(dir)?;
                weights.merge_adapter(&adapter, dir)?;
                Some(crate::adapter::folder_hash(dir)?)
            }
            None => None,
        };
        let encoder = Encoder::load(&config, &weights, device)?;
        let info = EmbedderInfo {
            model: source.id.clone(),
            family,
            weights_hash: weights.hash(),
            tokenizer_hash: file_hash(&tokenizer_path)?,
            dimension: config.hidden_size(),
            pooling,
            normalize,
            max_length,
            query_prefix: options.query_prefix.clone().unwrap_or_else(|| family.query_prefix().to_string()),
            passage_prefix: options.passage_prefix.clone().unwrap_or_else(|| family.passage_prefix().to_string()),
            adapter: options.adapter.as_ref().map(|d| d.display().to_string()),
            adapter_hash,
        };
        Ok(Embedder { encoder, tokenizer, device: device.clone(), token_budget: options.token_budget.unwrap_or(2048).max(1), workers: options.workers.unwrap_or_else(default_workers), info })
    }

    /// The encoder (for token-level uses such as late interaction).
    pub fn encoder(&self) -> &Encoder {
        &self.encoder
    }

    /// Token ids (with special tokens, truncated), in parallel.
    pub fn tokenize(&self, texts: &[&str]) -> Result<Vec<TokenIds>, EncoderError> {
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| EncoderError::Tokenize(e.to_string()))?;
        Ok(encodings.into_iter().map(|e| e.get_ids().to_vec()).collect())
    }

    /// Last hidden states `[B, L, H]` and the padding mask for a batch of token id lists.
    pub fn hidden_states(&self, batch: &[&TokenIds]) -> (Tensor<3>, Tensor<2, Bool>, usize) {
        self.encoder.forward_batch(batch, &self.device)
    }

    /// Pools hidden states `[B, L, H]` into `[B, H]`.
    pub fn pool(hidden: Tensor<3>, padding: Tensor<2, Bool>, pooling: Pooling) -> Tensor<2> {
        let [b, l, h] = hidden.dims();
        match pooling {
            Pooling::Cls => hidden.narrow(1, 0, 1).reshape([b, h]),
            Pooling::Mean => {
                let keep = padding.bool_not().float().reshape([b, l, 1]);
                let sum = (hidden * keep.clone()).sum_dim(1).reshape([b, h]);
                let count = keep.sum_dim(1).reshape([b, 1]).clamp_min(1e-9);
                sum / count
            }
        }
    }

    /// Embeds one batch of token id lists into vectors (pooled, normalised as configured).
    ///
    /// On a host-memory device pooling and normalisation are plain loops in a fixed order
    /// (tokens in order, then dimensions in order): Burn's CPU reductions pick their SIMD
    /// width at run time, which would change the last bits of a vector between CPUs (see
    /// [`crate::matmul`]). Other devices use Burn's ops.
    pub fn embed_batch(&self, batch: &[&TokenIds]) -> Vec<Vec<f32>> {
        let (hidden, padding, l) = self.hidden_states(batch);
        if crate::device::is_host_cpu(&self.device) {
            let values: Vec<f32> = hidden.into_data().convert::<f32>().into_vec().expect("f32 hidden states");
            let lengths: Vec<usize> = batch.iter().map(|t| t.len()).collect();
            return pool_host(&values, &lengths, l, self.info.dimension, self.info.pooling, self.info.normalize);
        }
        let mut pooled = Self::pool(hidden, padding, self.info.pooling);
        if self.info.normalize {
            let norm = (pooled.clone() * pooled.clone()).sum_dim(1).sqrt().clamp_min(1e-12);
            pooled = pooled / norm;
        }
        let h = self.info.dimension;
        let values: Vec<f32> = pooled.into_data().into_vec().expect("f32 output");
        values.chunks_exact(h).map(<[f32]>::to_vec).collect()
    }

    /// Groups texts (by index) into batches: sorted by length, each batch's padded size
    /// (`rows × longest`) within the token budget.
    pub fn plan_batches(&self, ids: &[TokenIds]) -> Vec<Vec<usize>> {
        plan_batches(&ids.iter().map(Vec::len).collect::<Vec<_>>(), self.token_budget)
    }

    /// Embeds token id lists in the input order, calling `progress(n)` after each batch of
    /// `n` texts. Batches run on `workers` threads at once (default: the number of cores),
    /// longest first, so the non-matmul work of one batch overlaps the other's.
    pub fn embed_ids(&self, ids: &[TokenIds], progress: impl FnMut(usize) + Send) -> (Vec<Vec<f32>>, BatchStats) {
        let batches = self.plan_batches(ids);
        let mut stats = BatchStats { texts: ids.len(), batches: batches.len(), ..Default::default() };
        for batch in &batches {
            let longest = batch.iter().map(|&i| ids[i].len()).max().unwrap_or(0);
            stats.tokens += batch.iter().map(|&i| ids[i].len()).sum::<usize>();
            stats.padded_tokens += longest * batch.len();
        }
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); ids.len()];
        let mut progress = progress;
        for_each_batch(
            &batches,
            self.workers,
            |batch| self.embed_batch(&batch.iter().map(|&i| &ids[i]).collect::<Vec<_>>()),
            |batch, vectors| {
                for (i, v) in batch.iter().zip(vectors) {
                    out[*i] = v;
                }
                progress(batch.len());
            },
        );
        (out, stats)
    }

    /// Last-layer token vectors of each text, L2-normalised per token, without the first and
    /// last special tokens (`[CLS]`, `[SEP]`): per text a flat `[tokens × H]` array and its
    /// token count. What late-interaction (MaxSim) scoring reads.
    pub fn token_vectors(&self, texts: &[&str]) -> Result<Vec<(Vec<f32>, usize)>, EncoderError> {
        let ids = self.tokenize(texts)?;
        let batches = self.plan_batches(&ids);
        let h = self.info.dimension;
        let mut out: Vec<(Vec<f32>, usize)> = vec![(Vec::new(), 0); ids.len()];
        let work = |batch: &[usize]| {
            let rows: Vec<&TokenIds> = batch.iter().map(|&i| &ids[i]).collect();
            let (hidden, _, l) = self.hidden_states(&rows);
            let values: Vec<f32> = hidden.into_data().into_vec().expect("f32 activations");
            batch
                .iter()
                .enumerate()
                .map(|(r, &i)| {
                    let n = ids[i].len();
                    let (first, last) = if n > 2 { (1, n - 1) } else { (0, n) };
                    let mut v = Vec::with_capacity((last - first) * h);
                    for t in first..last {
                        let row = &values[(r * l + t) * h..(r * l + t + 1) * h];
                        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
                        v.extend(row.iter().map(|x| x / norm));
                    }
                    (v, last - first)
                })
                .collect::<Vec<_>>()
        };
        for_each_batch(&batches, self.workers, work, |batch, vectors| {
            for (&i, v) in batch.iter().zip(vectors) {
                out[i] = v;
            }
        });
        Ok(out)
    }

    /// Embeds texts as they are (no prefix), in input order.
    pub fn embed_texts(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EncoderError> {
        let ids = self.tokenize(texts)?;
        Ok(self.embed_ids(&ids, |_| {}).0)
    }

    /// Embeds queries with the query prefix.
    pub fn embed_queries(&self, queries: &[&str]) -> Result<Vec<Vec<f32>>, EncoderError> {
        let texts: Vec<String> = queries.iter().map(|q| format!("{}{q}", self.info.query_prefix)).collect();
        self.embed_texts(&texts.iter().map(String::as_str).collect::<Vec<_>>())
    }

    /// Embeds passages with the passage prefix.
    pub fn embed_passages(&self, passages: &[&str]) -> Result<Vec<Vec<f32>>, EncoderError> {
        let texts: Vec<String> = passages.iter().map(|p| format!("{}{p}", self.info.passage_prefix)).collect();
        self.embed_texts(&texts.iter().map(String::as_str).collect::<Vec<_>>())
    }
}

/// Batches for texts of the given token lengths: indices sorted by length (longest first),
/// cut so that `rows × longest row` stays within `token_budget` (a single longer text gets
/// a batch of its own).
pub fn plan_batches(lengths: &[usize], token_budget: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by(|&a, &b| lengths[b].cmp(&lengths[a]).then(a.cmp(&b)));
    let mut batches = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    for i in order {
        let longest = current.first().map_or(lengths[i], |&f| lengths[f]).max(1);
        if !current.is_empty() && (current.len() + 1) * longest > token_budget {
            batches.push(std::mem::take(&mut current));
        }
        current.push(i);
    }
    if !current.is_empty() {
        batches.push(current);
    }
    batches
}

/// Runs `work` over `batches` on up to `workers` threads, each taking the next batch (longest
/// first when the batches come from [`plan_batches`]); `done` receives each batch's result, one
/// at a time.
pub fn for_each_batch<T: Send>(batches: &[Vec<usize>], workers: usize, work: impl Fn(&[usize]) -> T + Sync, done: impl FnMut(&[usize], T) + Send) {
    let done = std::sync::Mutex::new(done);
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..workers.min(batches.len()).max(1) {
            scope.spawn(|| loop {
                let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(batch) = batches.get(k) else { break };
                let result = work(batch);
                (done.lock().expect("no panics while holding the lock"))(batch, result);
            });
        }
    });
}

fn default_workers() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

fn file_hash(path: &Path) -> Result<String, EncoderError> {
    gauge_core::hash::file_hash(path).map_err(|e| EncoderError::file(path, format!("cannot read ({e})")))
}

/// [`Embedder::pool`] and the L2 normalisation as loops with one summation order: `hidden` is
/// `[B, L, H]` row-major, row `b`'s real tokens are the first `lengths[b]` (at least one
/// counted, as Burn's `clamp_min(1e-9)` on the count).
fn pool_host(hidden: &[f32], lengths: &[usize], l: usize, h: usize, pooling: Pooling, normalize: bool) -> Vec<Vec<f32>> {
    lengths
        .iter()
        .enumerate()
        .map(|(b, &n)| {
            let seq = &hidden[b * l * h..(b + 1) * l * h];
            let mut v: Vec<f32> = match pooling {
                Pooling::Cls => seq[..h].to_vec(),
                Pooling::Mean => {
                    let mut sum = vec![0.0f32; h];
                    for token in seq.chunks_exact(h).take(n.min(l)) {
                        for (s, x) in sum.iter_mut().zip(token) {
                            *s += x;
                        }
                    }
                    let count = (n.min(l) as f32).max(1e-9);
                    sum.iter().map(|s| s / count).collect()
                }
            };
            if normalize {
                let mut squares = 0.0f32;
                for x in &v {
                    squares += x * x;
                }
                let norm = squares.sqrt().max(1e-12);
                for x in &mut v {
                    *x /= norm;
                }
            }
            v
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_respect_the_budget_and_cover_everything() {
        let lengths = vec![5, 100, 7, 256, 3, 100, 50];
        let batches = plan_batches(&lengths, 300);
        let mut seen: Vec<usize> = batches.iter().flatten().copied().collect();
        seen.sort();
        assert_eq!(seen, (0..lengths.len()).collect::<Vec<_>>());
        for b in &batches {
            let longest = b.iter().map(|&i| lengths[i]).max().unwrap();
            assert!(b.len() == 1 || b.len() * longest <= 300, "{b:?}");
        }
        assert_eq!(batches[0], vec![3]); // 256 alone
    }
}
