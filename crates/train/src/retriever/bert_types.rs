//! The encoder trainer's parameter and batch types, shared by the Burn model ([`crate::retriever::bert`])
//! and the host kernels (`bert_host`): what is trained (task, tuning), the named parameters,
//! and a tokenized sequence.
use std::collections::HashMap;

use gauge_encoder::{BertConfig, Pooling};

/// The six linear modules of a BERT layer, by their path inside `encoder.layer.N.`.
pub const BERT_MODULES: [&str; 6] = ["attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense", "intermediate.dense", "output.dense"];

/// The same six modules of an MPNet layer (`MPNetLayer`: `attention.attn.{q,k,v,o}`).
pub const MPNET_MODULES: [&str; 6] = ["attention.attn.q", "attention.attn.k", "attention.attn.v", "attention.attn.o", "intermediate.dense", "output.dense"];

/// The encoder architectures the trainer reads: both are post-norm layers of six linear
/// modules; they differ in names, positions and the attention bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// BERT (`model_type` `bert`): absolute positions from 0, token types.
    Bert,
    /// MPNet (`model_type` `mpnet`): positions from `pad_token_id + 1`, no token types, a
    /// relative-position bias on the attention scores (a frozen table, shared by the layers).
    Mpnet,
}

impl Arch {
    /// The six linear modules' paths inside `encoder.layer.N.`, in [`BERT_MODULES`]' order.
    pub fn modules(self) -> &'static [&'static str; 6] {
        match self {
            Arch::Bert => &BERT_MODULES,
            Arch::Mpnet => &MPNET_MODULES,
        }
    }

    /// The attention block's LayerNorm inside `encoder.layer.N.`.
    pub fn attention_norm(self) -> &'static str {
        match self {
            Arch::Bert => "attention.output.LayerNorm",
            Arch::Mpnet => "attention.LayerNorm",
        }
    }

    /// The PEFT `target_modules` name of each module (a suffix of its path: `dense` is shared
    /// by several, as in PEFT).
    pub fn peft_names(self) -> [&'static str; 6] {
        match self {
            Arch::Bert => ["query", "key", "value", "dense", "dense", "dense"],
            Arch::Mpnet => ["q", "k", "v", "o", "dense", "dense"],
        }
    }

    /// `BERT` or `MPNet`.
    pub fn label(self) -> &'static str {
        match self {
            Arch::Bert => "BERT",
            Arch::Mpnet => "MPNet",
        }
    }

    /// Checkpoint prefixes tried before each weight name.
    pub fn weight_prefixes(self) -> [&'static str; 2] {
        match self {
            Arch::Bert => ["", "bert."],
            Arch::Mpnet => ["", "mpnet."],
        }
    }
}

/// The longest sequence (special tokens included) a model of `arch` and `config` reads.
pub(crate) fn max_tokens(arch: Arch, config: &BertConfig) -> usize {
    match arch {
        Arch::Bert => config.max_position_embeddings,
        Arch::Mpnet => config.max_position_embeddings - config.pad_token_id - 1,
    }
}

/// Position ids of one sequence's tokens (padding excluded): BERT's `0..n`, MPNet's as
/// `create_position_ids_from_input_ids` numbers them.
pub(crate) fn positions(arch: Arch, config: &BertConfig, ids: &[u32]) -> Vec<usize> {
    match arch {
        Arch::Bert => (0..ids.len()).collect(),
        Arch::Mpnet => {
            let ids: Vec<i64> = ids.iter().map(|&i| i as i64).collect();
            gauge_encoder::mpnet::position_ids(&ids, config.pad_token_id as i64).into_iter().map(|p| p as usize).collect()
        }
    }
}

/// `encoder.layer.{l}.` + module `m`'s path.
pub(crate) fn linear_name(arch: Arch, l: usize, m: usize) -> String {
    format!("encoder.layer.{l}.{}", arch.modules()[m])
}

/// What the encoder is trained as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncoderTask {
    /// Sentence vectors: pooled last hidden states, optionally L2-normalised.
    Embedder {
        /// Pooling.
        pooling: Pooling,
        /// L2 normalisation.
        normalize: bool,
    },
    /// One relevance logit per (query, passage) pair: pooler `tanh(W h_cls)` then `classifier`.
    CrossEncoder,
}

/// How the encoder is tuned.
#[derive(Debug, Clone, PartialEq)]
pub enum Tuning {
    /// LoRA adapters (and, for a cross-encoder, the pooler and classifier).
    Lora {
        /// Rank.
        r: usize,
        /// Scale numerator.
        alpha: f64,
        /// rsLoRA (`alpha / √r`).
        rslora: bool,
        /// Adapted modules (indices into [`Arch::modules`]).
        targets: Vec<usize>,
    },
    /// Every weight trainable.
    Full,
}

/// Named parameters: the checkpoint's tensors, the LoRA matrices and the head, with which of
/// them train.
#[derive(Debug, Clone, PartialEq)]
pub struct EncoderParams {
    /// Names (checkpoint names without a `bert.` prefix; LoRA as `<module>.lora_A.weight`).
    pub names: Vec<String>,
    /// Shapes.
    pub shapes: Vec<Vec<usize>>,
    /// Row-major values.
    pub values: Vec<Vec<f32>>,
    /// Whether each trains.
    pub trainable: Vec<bool>,
    pub(crate) by_name: HashMap<String, usize>,
}

impl EncoderParams {
    pub(crate) fn push(&mut self, name: String, shape: Vec<usize>, values: Vec<f32>, trainable: bool) {
        debug_assert_eq!(shape.iter().product::<usize>(), values.len(), "{name}");
        self.by_name.insert(name.clone(), self.names.len());
        self.names.push(name);
        self.shapes.push(shape);
        self.values.push(values);
        self.trainable.push(trainable);
    }

    /// Index of a parameter.
    pub fn index(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// Values of a parameter.
    pub fn get(&self, name: &str) -> Option<&[f32]> {
        self.index(name).map(|i| self.values[i].as_slice())
    }

    /// Indices of the trainable parameters, in order.
    pub fn trainable_indices(&self) -> Vec<usize> {
        (0..self.names.len()).filter(|&i| self.trainable[i]).collect()
    }

    /// The trainable tensors, mutable, in [`Self::trainable_indices`] order.
    pub fn trainable_mut(&mut self) -> Vec<&mut Vec<f32>> {
        let flags = self.trainable.clone();
        self.values.iter_mut().zip(flags).filter(|(_, t)| *t).map(|(v, _)| v).collect()
    }

    /// The trainable tensors, in [`Self::trainable_indices`] order.
    pub fn trainable_values(&self) -> Vec<&[f32]> {
        self.trainable_indices().into_iter().map(|i| self.values[i].as_slice()).collect()
    }

    /// Number of trainable values.
    pub fn trainable_count(&self) -> usize {
        self.trainable_indices().iter().map(|&i| self.values[i].len()).sum()
    }
}

/// A batch of encoded texts (or pairs), unpadded.
#[derive(Debug, Clone, PartialEq)]
pub struct Encoded {
    /// Token ids with special tokens.
    pub ids: Vec<u32>,
    /// Token type ids (0 for single texts; 0/1 for pairs).
    pub types: Vec<u32>,
}

