//! The BERT encoder (post-norm transformer), as in Hugging Face `BertModel`.
use burn::tensor::activation::gelu;
use burn::tensor::module::{attention, embedding, layer_norm, linear};
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, Device, Int, Tensor, TensorData};

use crate::config::BertConfig;
use crate::weights::{WeightArray, Weights};
use crate::EncoderError;

/// A dense layer with Burn's `[in, out]` weight layout.
#[derive(Debug, Clone)]
pub struct Dense {
    /// `[in, out]`.
    pub weight: Tensor<2>,
    /// `[out]`.
    pub bias: Tensor<1>,
}

impl Dense {
    /// `x · W + b`.
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        linear(x, self.weight.clone(), Some(self.bias.clone()))
    }
}

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
        layer_norm(x, self.gamma.clone(), Some(self.beta.clone()), self.eps)
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

fn tensor1(w: WeightArray, device: &Device) -> Tensor<1> {
    Tensor::from_data(TensorData::new(w.values, [w.shape[0]]), device)
}

fn tensor2(w: WeightArray, device: &Device) -> Tensor<2> {
    Tensor::from_data(TensorData::new(w.values, [w.shape[0], w.shape[1]]), device)
}

impl BertEncoder {
    /// Loads weights (`bert.`-prefixed or not) and checks every shape against the config.
    pub fn load(config: &BertConfig, weights: &Weights, device: &Device) -> Result<BertEncoder, EncoderError> {
        let h = config.hidden_size;
        let i = config.intermediate_size;
        let eps = config.layer_norm_eps;
        let norm = |prefix: &str| -> Result<Norm, EncoderError> {
            Ok(Norm {
                gamma: tensor1(weights.get(&format!("{prefix}.weight"), &[h])?, device),
                beta: tensor1(weights.get(&format!("{prefix}.bias"), &[h])?, device),
                eps,
            })
        };
        let dense = |prefix: &str, d_in: usize, d_out: usize| -> Result<Dense, EncoderError> {
            Ok(Dense {
                weight: tensor2(weights.get(&format!("{prefix}.weight"), &[d_out, d_in])?.transposed(), device),
                bias: tensor1(weights.get(&format!("{prefix}.bias"), &[d_out])?, device),
            })
        };
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for l in 0..config.num_hidden_layers {
            let p = format!("encoder.layer.{l}");
            // Fuse Q, K, V: [H, 3H] weight, [3H] bias.
            let mut wq = Vec::with_capacity(3);
            let mut bq = Vec::with_capacity(3 * h);
            for name in ["query", "key", "value"] {
                wq.push(weights.get(&format!("{p}.attention.self.{name}.weight"), &[h, h])?.transposed());
                bq.extend(weights.get(&format!("{p}.attention.self.{name}.bias"), &[h])?.values);
            }
            let mut fused = vec![0.0f32; h * 3 * h];
            for row in 0..h {
                for (k, w) in wq.iter().enumerate() {
                    fused[row * 3 * h + k * h..row * 3 * h + (k + 1) * h].copy_from_slice(&w.values[row * h..(row + 1) * h]);
                }
            }
            layers.push(EncoderLayer {
                qkv: Dense {
                    weight: Tensor::from_data(TensorData::new(fused, [h, 3 * h]), device),
                    bias: Tensor::from_data(TensorData::new(bq, [3 * h]), device),
                },
                attn_out: dense(&format!("{p}.attention.output.dense"), h, h)?,
                attn_norm: norm(&format!("{p}.attention.output.LayerNorm"))?,
                ff_in: dense(&format!("{p}.intermediate.dense"), h, i)?,
                ff_out: dense(&format!("{p}.output.dense"), i, h)?,
                ff_norm: norm(&format!("{p}.output.LayerNorm"))?,
            });
        }
        Ok(BertEncoder {
            config: config.clone(),
            word: tensor2(weights.get("embeddings.word_embeddings.weight", &[config.vocab_size, h])?, device),
            position: tensor2(weights.get("embeddings.position_embeddings.weight", &[config.max_position_embeddings, h])?, device),
            token_type: tensor2(weights.get("embeddings.token_type_embeddings.weight", &[config.type_vocab_size, h])?, device),
            emb_norm: norm("embeddings.LayerNorm")?,
            layers,
        })
    }

    /// Last hidden states `[B, L, H]` for token ids `[B, L]`, token types `[B, L]` and a
    /// padding mask `[B, L]` (true = padding).
    pub fn forward(&self, ids: Tensor<2, Int>, token_types: Tensor<2, Int>, padding: Tensor<2, Bool>) -> Tensor<3> {
        let [b, l] = ids.dims();
        let h = self.config.hidden_size;
        let heads = self.config.num_attention_heads;
        let hd = h / heads;
        let device = ids.device();
        let positions = Tensor::<1, Int>::arange(0..l as i64, &device).reshape([1, l]);
        let x = embedding(self.word.clone(), ids)
            + embedding(self.position.clone(), positions)
            + embedding(self.token_type.clone(), token_types);
        let mut x = self.emb_norm.forward(x);
        // Padded keys are masked for every head and query position.
        let mask: Tensor<4, Bool> = padding.reshape([b, 1, 1, l]).expand([b, heads, l, l]);
        for layer in &self.layers {
            let qkv = layer.qkv.forward(x.clone()); // [B, L, 3H]
            let split = |k: usize| qkv.clone().narrow(2, k * h, h).reshape([b, l, heads, hd]).swap_dims(1, 2);
            let ctx = attention(split(0), split(1), split(2), Some(mask.clone()), None, AttentionModuleOptions::default());
            let ctx = ctx.swap_dims(1, 2).reshape([b, l, h]);
            x = layer.attn_norm.forward(layer.attn_out.forward(ctx) + x);
            let ff = layer.ff_out.forward(gelu(layer.ff_in.forward(x.clone())));
            x = layer.ff_norm.forward(ff + x);
        }
        x
    }
}
