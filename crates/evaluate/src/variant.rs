//! One row of an ablation: every stage's config, with the row's name and comparisons. Its own
//! module so that the pipeline parser and the config search both use it without using each
//! other.
use gauge_chunk::ChunkConfig;
use gauge_embed::EmbedConfig;
use gauge_engine::RetrievalConfig;
use gauge_extract::ExtractConfig;
use gauge_index::IndexConfig;
use serde::{Deserialize, Serialize};

/// The configuration of every stage for one row of the ablation.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct StageConfigs {
    /// `extract` settings.
    pub extract: ExtractConfig,
    /// `chunk` settings.
    pub chunk: ChunkConfig,
    /// `embed` settings (model, prefixes, pooling…).
    pub embed: EmbedConfig,
    /// `raptor` settings: when present, summary nodes are added to the chunks before they are
    /// embedded and indexed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raptor: Option<gauge_raptor::RaptorConfig>,
    /// Embed in this many shards (`embed --shard i/n`, one artifact each, the index built over
    /// all of them: the same index as one embed run); a cluster runs the shards in parallel.
    #[serde(skip_serializing_if = "is_one")]
    pub embed_shards: usize,
    /// `index` settings (faiss type, stemming).
    pub index: IndexConfig,
    /// Retrieval engine settings.
    pub retrieval: RetrievalConfig,
}

/// One evaluated config.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Variant {
    /// Row name in the tables.
    pub name: String,
    /// One line on what the row tests.
    pub description: String,
    /// Restrict retrieval to each question's gold sources (an oracle: it uses the answer key).
    pub oracle_source_filter: bool,
    /// Every stage's settings.
    pub stages: StageConfigs,
    /// Another config this one is also compared with, question by question (e.g. a tuned
    /// model's row against the untuned row it changes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compare_to: Option<String>,
}

fn is_one(n: &usize) -> bool {
    *n <= 1
}
