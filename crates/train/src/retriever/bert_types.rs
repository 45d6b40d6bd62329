//! The encoder trainer's parameter and batch types, shared by the Burn model ([`crate::retriever::bert`])
//! and the host kernels (`bert_host`): what is trained (task, tuning), the named parameters,
//! and a tokenized sequence.
use std::collections::HashMap;

use gauge_encoder::Pooling;

/// The six linear modules of a BERT layer, by their path inside `encoder.layer.N.`.
pub const BERT_MODULES: [&str; 6] = ["attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense", "intermediate.dense", "output.dense"];

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
        /// Adapted modules (indices into [`BERT_MODULES`]).
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

