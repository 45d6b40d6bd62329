//! The BERT encoder (post-norm transformer), as in Hugging Face `BertModel`.
use burn::tensor::activation::gelu;
use burn::tensor::module::{attention, embedding};
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, Int, TensorData};

use crate::device::{is_host_cpu, Device, Tensor};

use crate::config::BertConfig;
use crate::matmul::{matmul, Init, Mat};
use crate::weights::{WeightArray, Weights};
use crate::EncoderError;

/// Exact (erf) GELU. On the CPU it runs as one fused, parallel pass with a rational erf
/// approximation (|error| < 2e-6, see the tests) instead of a scalar libm call per element,
/// which took an eighth of the encoder's time; other devices use Burn's `gelu`.
pub fn gelu_erf<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    let device = x.device();
    if !is_host_cpu(&device) {
        return gelu(x);
    }
    let mut data = x.into_data();
    match data.as_mut_slice::<f32>() {
        Ok(values) => {
            use rayon::prelude::*;
            values.par_chunks_mut(1 << 14).for_each(|chunk| {
                for v in chunk {
                    *v = gelu_scalar(*v);
                }
            });
            Tensor::from_data(data, &device)
        }
        Err(_) => gelu(Tensor::from_data(data, &device)),
    }
}

/// `0.5·x·(1 + erf(x/√2))` with [`erf_f32`].
#[inline(always)]
pub fn gelu_scalar(x: f32) -> f32 {
    0.5 * x * (1.0 + erf_f32(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// erf for f32 as a clamped odd/even rational polynomial (the approximation Eigen and XLA
/// use for float erf); branch-free, so it vectorises.
#[inline(always)]
pub fn erf_f32(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = x2 * -2.726_142_3e-10 + 2.770_681_4e-8;
    p = x2 * p + -2.101_024e-6;
    p = x2 * p + -5.692_506_4e-5;
    p = x2 * p + -7.349_906_3e-4;
    p = x2 * p + -2.954_6e-3;
    p = x2 * p + -1.609_603_3e-2;
    p *= x;
    let mut q = x2 * -1.456_607_2e-5 + -2.133_740_6e-4;
    q = x2 * q + -1.682_827e-3;
    q = x2 * q + -7.373_329_3e-3;
    q = x2 * q + -1.426_474e-2;
    p / q
}

/// LayerNorm over the last dimension, `(x - mean) / sqrt(var + eps) · gamma + beta` with the
/// biased variance (as PyTorch). On the CPU it is one parallel pass per row (two-pass mean and
/// variance in f32); other devices compose Burn's tensor ops.
pub fn layer_norm<const D: usize>(x: Tensor<D>, gamma: Tensor<1>, beta: Tensor<1>, eps: f64) -> Tensor<D> {
    let device = x.device();
    if is_host_cpu(&device) {
        let dims = x.dims();
        let h = dims[D - 1];
        let mut data = x.into_data();
        let g = gamma.into_data();
        let b = beta.into_data();
        if let (Ok(values), Ok(g), Ok(b)) = (data.as_mut_slice::<f32>(), g.as_slice::<f32>(), b.as_slice::<f32>()) {
            use rayon::prelude::*;
            let eps = eps as f32;
            let rows_per_task = (1 << 14) / h.max(1) + 1;
            values.par_chunks_mut(h * rows_per_task).for_each(|rows| {
                for row in rows.chunks_exact_mut(h) {
                    let mean = row.iter().sum::<f32>() / h as f32;
                    let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / h as f32;
                    let inv = 1.0 / (var + eps).sqrt();
                    for ((v, g), b) in row.iter_mut().zip(g).zip(b) {
                        *v = (*v - mean) * inv * g + b;
                    }
                }
            });
            return Tensor::from_data(data, &device);
        }
        return layer_norm_composed(Tensor::from_data(data, &device), Tensor::from_data(g, &device), Tensor::from_data(b, &device), eps);
    }
    layer_norm_composed(x, gamma, beta, eps)
}

fn layer_norm_composed<const D: usize>(x: Tensor<D>, gamma: Tensor<1>, beta: Tensor<1>, eps: f64) -> Tensor<D> {
    let (var, mean) = x.clone().var_mean_bias(D - 1);
    let normed = (x - mean) / (var + eps).sqrt();
    normed * gamma.unsqueeze::<D>() + beta.unsqueeze::<D>()
}

pub use gauge_tensor::dense::Dense;

/// LayerNorm weights.
#[derive(Debug, Clone)]
pub struct Norm {
    /// Scale.
    pub gamma: Tensor<1>,
    /// Shift.
    pub beta: Tensor<1>,
    /// Epsilon.
    pub eps: f64,
}

impl Norm {
    /// Normalises over the last dimension.
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        layer_norm(x, self.gamma.clone(), self.beta.clone(), self.eps)
    }
}

/// One encoder layer.
#[derive(Debug, Clone)]
pub struct EncoderLayer {
    /// Query, key and value projections fused into one `[H, 3H]` dense layer.
    pub qkv: Dense,
    /// Attention output projection.
    pub attn_out: Dense,
    /// LayerNorm after attention.
    pub attn_norm: Norm,
    /// Feed-forward up projection.
    pub ff_in: Dense,
    /// Feed-forward down projection.
    pub ff_out: Dense,
    /// LayerNorm after the feed-forward block.
    pub ff_norm: Norm,
}

/// The BERT encoder: embeddings and layers.
#[derive(Debug, Clone)]
pub struct BertEncoder {
    /// Configuration.
    pub config: BertConfig,
    word: Tensor<2>,
    position: Tensor<2>,
    token_type: Tensor<2>,
    emb_norm: Norm,
    /// Layers.
    pub layers: Vec<EncoderLayer>,
}

pub(crate) fn tensor1(w: WeightArray, device: &Device) -> Tensor<1> {
    Tensor::from_data(TensorData::new(w.values, [w.shape[0]]), device)
}

pub(crate) fn tensor2(w: WeightArray, device: &Device) -> Tensor<2> {
    Tensor::from_data(TensorData::new(w.values, [w.shape[0], w.shape[1]]), device)
}

/// The LayerNorm `{prefix}.weight` / `{prefix}.bias` of width `h`.
pub(crate) fn load_norm(weights: &Weights, prefix: &str, h: usize, eps: f64, device: &Device) -> Result<Norm, EncoderError> {
    Ok(Norm {
        gamma: tensor1(weights.get(&format!("{prefix}.weight"), &[h])?, device),
        beta: tensor1(weights.get(&format!("{prefix}.bias"), &[h])?, device),
        eps,
    })
}

/// The linear layer `{prefix}.weight` (`[d_out, d_in]`, as PyTorch stores it) and `{prefix}.bias`.
pub(crate) fn load_dense(weights: &Weights, prefix: &str, d_in: usize, d_out: usize, device: &Device) -> Result<Dense, EncoderError> {
    Ok(Dense::new(
        weights.get(&format!("{prefix}.weight"), &[d_out, d_in])?.transposed().values,
        weights.get(&format!("{prefix}.bias"), &[d_out])?.values,
        d_in,
        d_out,
        device,
    ))
}

/// Checkpoint names of a layer's attention block, under `encoder.layer.{l}.` (the
/// feed-forward block is `intermediate.dense`, `output.dense` and `output.LayerNorm` in every
/// family).
pub(crate) struct AttentionNames {
    /// Query, key and value projections.
    pub qkv: [&'static str; 3],
    /// Output projection.
    pub out: &'static str,
    /// LayerNorm after the residual.
    pub norm: &'static str,
}

/// BERT's (and RoBERTa's) names.
pub(crate) const BERT_ATTENTION: AttentionNames = AttentionNames {
    qkv: ["attention.self.query", "attention.self.key", "attention.self.value"],
    out: "attention.output.dense",
    norm: "attention.output.LayerNorm",
};

impl EncoderLayer {
    /// Loads layer `prefix` (e.g. `encoder.layer.3`) of hidden size `h` and feed-forward size
    /// `i`, fusing Q, K and V into one `[H, 3H]` layer.
    pub(crate) fn load(weights: &Weights, prefix: &str, names: &AttentionNames, (h, i, eps): (usize, usize, f64), device: &Device) -> Result<EncoderLayer, EncoderError> {
        let mut wq = Vec::with_capacity(3);
        let mut bq = Vec::with_capacity(3 * h);
        for name in names.qkv {
            wq.push(weights.get(&format!("{prefix}.{name}.weight"), &[h, h])?.transposed());
            bq.extend(weights.get(&format!("{prefix}.{name}.bias"), &[h])?.values);
        }
        let mut fused = vec![0.0f32; h * 3 * h];
        for row in 0..h {
            for (k, w) in wq.iter().enumerate() {
                fused[row * 3 * h + k * h..row * 3 * h + (k + 1) * h].copy_from_slice(&w.values[row * h..(row + 1) * h]);
            }
        }
        Ok(EncoderLayer {
            qkv: Dense::new(fused, bq, h, 3 * h, device),
            attn_out: load_dense(weights, &format!("{prefix}.{}", names.out), h, h, device)?,
            attn_norm: load_norm(weights, &format!("{prefix}.{}", names.norm), h, eps, device)?,
            ff_in: load_dense(weights, &format!("{prefix}.intermediate.dense"), h, i, device)?,
            ff_out: load_dense(weights, &format!("{prefix}.output.dense"), i, h, device)?,
            ff_norm: load_norm(weights, &format!("{prefix}.output.LayerNorm"), h, eps, device)?,
        })
    }
}

/// An additive attention bias that depends only on `key − query` and the head (MPNet's and
/// T5's relative positions), tabulated for every offset up to `max_len − 1` either way.
#[derive(Debug, Clone)]
pub struct RelativeBias {
    heads: usize,
    max_len: usize,
    /// `[heads, 2·max_len − 1]`: head `h`, offset `key − query = r` at `h·(2m−1) + r + m − 1`.
    values: Vec<f32>,
}

impl RelativeBias {
    /// Tabulates `bias(key − query, head)` for sequences of up to `max_len` tokens.
    pub fn new(heads: usize, max_len: usize, bias: impl Fn(i64, usize) -> f32) -> RelativeBias {
        let span = 2 * max_len - 1;
        let mut values = Vec::with_capacity(heads * span);
        for head in 0..heads {
            values.extend((0..span).map(|k| bias(k as i64 - (max_len as i64 - 1), head)));
        }
        RelativeBias { heads, max_len, values }
    }

    /// The biases of query `t` against keys `0..n` for `head` (`n`, `t` < [`Self::max_len`]).
    pub fn row(&self, head: usize, t: usize, n: usize) -> &[f32] {
        let span = 2 * self.max_len - 1;
        let start = head * span + self.max_len - 1 - t;
        &self.values[start..start + n]
    }

    /// The longest sequence tabulated.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// `[B, heads, L, L]` for Burn's attention on other devices.
    fn dense(&self, b: usize, l: usize, device: &Device) -> Tensor<4> {
        let mut out = Vec::with_capacity(self.heads * l * l);
        for head in 0..self.heads {
            for t in 0..l {
                out.extend_from_slice(self.row(head, t, l));
            }
        }
        Tensor::<4>::from_data(TensorData::new(out, [1, self.heads, l, l]), device).expand([b, self.heads, l, l])
    }
}

/// The post-norm layers over embedded input `x` `[B, L, H]`, with `heads` attention heads and
/// an optional relative-position bias; `padding` `[B, L]` (true = padding, at the end of each
/// row) and the real `lengths` mask the keys.
pub(crate) fn encode_layers(layers: &[EncoderLayer], mut x: Tensor<3>, padding: Tensor<2, Bool>, lengths: &[usize], heads: usize, bias: Option<&RelativeBias>) -> Tensor<3> {
    let [b, l, h] = x.dims();
    let hd = h / heads;
    let device = x.device();
    // Other devices: Burn's attention with padded keys masked for every head and query.
    let mask: Option<Tensor<4, Bool>> = (!is_host_cpu(&device)).then(|| padding.reshape([b, 1, 1, l]).expand([b, heads, l, l]));
    let dense_bias = mask.as_ref().and(bias).map(|bias| bias.dense(b, l, &device));
    for layer in layers {
        let qkv = layer.qkv.forward(x.clone()); // [B, L, 3H]
        let ctx = match &mask {
            None => cpu_attention(qkv, lengths, heads, bias),
            Some(mask) => {
                let split = |k: usize| qkv.clone().narrow(2, k * h, h).reshape([b, l, heads, hd]).swap_dims(1, 2);
                let ctx = attention(split(0), split(1), split(2), Some(mask.clone()), dense_bias.clone(), AttentionModuleOptions::default());
                ctx.swap_dims(1, 2).reshape([b, l, h])
            }
        };
        x = layer.attn_norm.forward(layer.attn_out.forward(ctx) + x);
        let ff = layer.ff_out.forward(gelu_erf(layer.ff_in.forward(x.clone())));
        x = layer.ff_norm.forward(ff + x);
    }
    x
}

impl BertEncoder {
    /// Loads weights (`bert.`/`roberta.`-prefixed or not) and checks every shape against the
    /// config.
    pub fn load(config: &BertConfig, weights: &Weights, device: &Device) -> Result<BertEncoder, EncoderError> {
        let h = config.hidden_size;
        let sizes = (h, config.intermediate_size, config.layer_norm_eps);
        let layers = (0..config.num_hidden_layers)
            .map(|l| EncoderLayer::load(weights, &format!("encoder.layer.{l}"), &BERT_ATTENTION, sizes, device))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(BertEncoder {
            config: config.clone(),
            word: tensor2(weights.get("embeddings.word_embeddings.weight", &[config.vocab_size, h])?, device),
            position: tensor2(weights.get("embeddings.position_embeddings.weight", &[config.max_position_embeddings, h])?, device),
            token_type: tensor2(weights.get("embeddings.token_type_embeddings.weight", &[config.type_vocab_size, h])?, device),
            emb_norm: load_norm(weights, "embeddings.LayerNorm", h, config.layer_norm_eps, device)?,
            layers,
        })
    }

    /// Last hidden states `[B, L, H]` for token ids `[B, L]`, token types `[B, L]` and a
    /// padding mask `[B, L]` (true = padding). `lengths` are the real lengths (padding only
    /// at the end of each row), used by the CPU attention kernel.
    pub fn forward(&self, ids: Tensor<2, Int>, token_types: Tensor<2, Int>, padding: Tensor<2, Bool>, lengths: &[usize]) -> Tensor<3> {
        let [_, l] = ids.dims();
        let device = ids.device();
        // RoBERTa numbers real tokens from pad + 1 (padded positions get other ids, but they
        // are masked out of every attention and pooling).
        let offset = self.config.position_offset() as i64;
        let positions = Tensor::<1, Int>::arange(offset..offset + l as i64, &device).reshape([1, l]);
        let x = embedding(self.word.clone(), ids)
            + embedding(self.position.clone(), positions)
            + embedding(self.token_type.clone(), token_types);
        encode_layers(&self.layers, self.emb_norm.forward(x), padding, lengths, self.config.num_attention_heads, None)
    }
}

/// Multi-head self-attention on the CPU straight from the fused `[B, L, 3H]` projections:
/// per sequence and head, `softmax(QKᵀ/√d)·V` over the real tokens only (padding sits at the
/// end of a row, so masking is a shorter range), written into `[B, L, H]` (padded rows zero).
/// No head transposes, no mask tensor, no work on padding; sequences run in parallel. With a
/// relative bias, each score is scaled and then the bias added (`QKᵀ/√d + bias`, PyTorch's
/// order) before the softmax.
fn cpu_attention(qkv: Tensor<3>, lengths: &[usize], heads: usize, bias: Option<&RelativeBias>) -> Tensor<3> {
    use rayon::prelude::*;
    let device = qkv.device();
    let [b, l, h3] = qkv.dims();
    let h = h3 / 3;
    let hd = h / heads;
    let scale = 1.0 / (hd as f32).sqrt();
    let data = qkv.into_data();
    let src: &[f32] = data.as_slice::<f32>().expect("f32 activations");
    let mut out = vec![0.0f32; b * l * h];
    out.par_chunks_mut(l * h).enumerate().for_each(|(bi, out_seq)| {
        let n = lengths[bi].min(l);
        if n == 0 {
            return;
        }
        let seq = &src[bi * l * h3..(bi + 1) * l * h3];
        // Scores rows padded to a multiple of 8 columns (zero keys) so the products have no
        // scalar tail; the padding is never read back.
        let np = n.div_ceil(8) * 8;
        let mut scores = vec![0.0f32; n * np];
        let mut keys_t = vec![0.0f32; hd * np];
        for head in 0..heads {
            let q = &seq[head * hd..];
            let k = &seq[h + head * hd..];
            let v = &seq[2 * h + head * hd..];
            // Kᵀ (hd × n), so that scores = Q Kᵀ is a product over rows of contiguous columns.
            for t in 0..n {
                for d in 0..hd {
                    keys_t[d * np + t] = k[t * h3 + d];
                }
            }
            matmul(Mat::new(q, n, hd, h3), Mat::new(&keys_t, hd, np, np), Init::Zero, &mut scores, np);
            for (t, row) in scores.chunks_exact_mut(np).enumerate() {
                let row = &mut row[..n];
                match bias {
                    None => softmax_scaled(row, scale),
                    Some(bias) => {
                        for (s, b) in row.iter_mut().zip(bias.row(head, t, n)) {
                            *s = *s * scale + b;
                        }
                        softmax_scaled(row, 1.0);
                    }
                }
            }
            // out[:, head] = P V   (n × n) · (n × hd)
            matmul(Mat::new(&scores, n, n, np), Mat::new(v, n, hd, h3), Init::Zero, &mut out_seq[head * hd..], h);
        }
    });
    Tensor::from_data(TensorData::new(out, [b, l, h]), &device)
}

/// `row ← softmax(row · scale)` in place (max subtracted first).
fn softmax_scaled(row: &mut [f32], scale: f32) {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s * scale));
    let mut sum = 0.0f32;
    for s in row.iter_mut() {
        *s = (*s * scale - max).exp();
        sum += *s;
    }
    let inv = 1.0 / sum;
    for s in row.iter_mut() {
        *s *= inv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::module::linear;

    #[test]
    fn fast_gelu_matches_burns_exact_gelu() {
        let device = crate::device::cpu();
        let xs: Vec<f32> = (-8000..=8000).map(|i| i as f32 / 1000.0).collect();
        let n = xs.len();
        let exact: Vec<f32> = gelu(Tensor::<1>::from_data(TensorData::new(xs.clone(), [n]), &device)).into_data().into_vec().unwrap();
        let fast: Vec<f32> = gelu_erf(Tensor::<1>::from_data(TensorData::new(xs.clone(), [n]), &device)).into_data().into_vec().unwrap();
        let worst = exact.iter().zip(&fast).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(worst < 2e-6, "max |fast - exact| = {worst}");
        assert!((erf_f32(0.5) - 0.520_499_9).abs() < 1e-6);
        assert!((erf_f32(-1.0) + 0.842_700_8).abs() < 1e-6);
    }

    #[test]
    fn fused_layer_norm_and_dense_match_burns_ops() {
        let device = crate::device::cpu();
        let (b, l, h, o) = (2, 5, 12, 7);
        let x: Vec<f32> = (0..b * l * h).map(|i| ((i * 53 % 97) as f32 / 30.0) - 1.5).collect();
        let gamma: Vec<f32> = (0..h).map(|i| 0.5 + i as f32 / 10.0).collect();
        let beta: Vec<f32> = (0..h).map(|i| i as f32 / 20.0 - 0.3).collect();
        let t = |v: &[f32], shape: [usize; 3]| Tensor::<3>::from_data(TensorData::new(v.to_vec(), shape), &device);
        let g = Tensor::<1>::from_data(TensorData::new(gamma, [h]), &device);
        let bt = Tensor::<1>::from_data(TensorData::new(beta, [h]), &device);
        let fused: Vec<f32> = layer_norm(t(&x, [b, l, h]), g.clone(), bt.clone(), 1e-12).into_data().into_vec().unwrap();
        let composed: Vec<f32> = layer_norm_composed(t(&x, [b, l, h]), g, bt, 1e-12).into_data().into_vec().unwrap();
        let worst = fused.iter().zip(&composed).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(worst < 1e-5, "layer norm: max |fused - composed| = {worst}");

        let w: Vec<f32> = (0..h * o).map(|i| ((i * 29 % 41) as f32 / 20.0) - 1.0).collect();
        let bias: Vec<f32> = (0..o).map(|i| i as f32 * 0.1).collect();
        let ours: Vec<f32> = Dense::new(w.clone(), bias.clone(), h, o, &device).forward(t(&x, [b, l, h])).into_data().into_vec().unwrap();
        let reference: Vec<f32> = linear(
            t(&x, [b, l, h]),
            Tensor::<2>::from_data(TensorData::new(w, [h, o]), &device),
            Some(Tensor::<1>::from_data(TensorData::new(bias, [o]), &device)),
        )
        .into_data()
        .into_vec()
        .unwrap();
        assert_eq!(ours.len(), b * l * o);
        let worst = ours.iter().zip(&reference).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(worst < 1e-5, "dense: max |matmul - burn linear| = {worst}");
    }

    #[test]
    fn cpu_attention_matches_burns_masked_attention() {
        for with_bias in [false, true] {
            attention_against_burn(with_bias);
        }
    }

    fn attention_against_burn(with_bias: bool) {
        let device = crate::device::cpu();
        let (b, l, heads, hd) = (3, 7, 2, 4);
        let h = heads * hd;
        let values: Vec<f32> = (0..b * l * 3 * h).map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0).collect();
        let qkv = Tensor::<3>::from_data(TensorData::new(values, [b, l, 3 * h]), &device);
        let lengths = [7usize, 3, 5];
        let pad: Vec<bool> = (0..b * l).map(|i| i % l >= lengths[i / l]).collect();
        let mask = Tensor::<2, Bool>::from_data(TensorData::new(pad, [b, l]), &device).reshape([b, 1, 1, l]).expand([b, heads, l, l]);
        let split = |k: usize| qkv.clone().narrow(2, k * h, h).reshape([b, l, heads, hd]).swap_dims(1, 2);
        // An asymmetric bias, different per head, on a table longer than the sequences.
        let bias = with_bias.then(|| RelativeBias::new(heads, 9, |r, head| 0.3 * r as f32 - 0.7 * head as f32 + 0.05 * (r * r) as f32));
        let dense = bias.as_ref().map(|bias| bias.dense(b, l, &device));
        let reference: Vec<f32> = attention(split(0), split(1), split(2), Some(mask), dense, AttentionModuleOptions::default())
            .swap_dims(1, 2)
            .reshape([b, l, h])
            .into_data()
            .into_vec()
            .unwrap();
        let ours: Vec<f32> = cpu_attention(qkv, &lengths, heads, bias.as_ref()).into_data().into_vec().unwrap();
        for (bi, &len) in lengths.iter().enumerate().take(b) {
            for t in 0..len {
                for c in 0..h {
                    let i = (bi * l + t) * h + c;
                    assert!((reference[i] - ours[i]).abs() < 1e-5, "bias {with_bias}, seq {bi} token {t} dim {c}: {} vs {}", reference[i], ours[i]);
                }
            }
        }
    }
}
