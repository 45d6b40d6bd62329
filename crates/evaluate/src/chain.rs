//! The build chain of one config: extract → chunk → embed → index (with `raptor`: extract →
//! chunk → embed → raptor → embed → index), as data for
//! [`gauge_core::stage::Dag`] (each distinct artifact built once, cached across runs).
use std::path::{Path, PathBuf};

use anyhow::Context;
use gauge_chunk::Chunk;
use gauge_core::stage::Dag;
use gauge_embed::Embed;
use gauge_extract::Extract;
use gauge_index::{Index, IndexInputs};

use crate::pipeline::Variant;

/// Where a config's upstream artifacts live.
#[derive(Debug, Clone)]
pub struct Upstream {
    /// The extract artifact.
    pub pages: PathBuf,
    /// The index artifact.
    pub index: PathBuf,
    /// The index's fingerprint (an input of the evaluation).
    pub fingerprint: String,
}

/// Builds (or finds) the artifacts a config evaluates on.
pub fn upstream(dag: &mut Dag<'_>, corpus: &Path, v: &Variant) -> anyhow::Result<Upstream> {
    let s = &v.stages;
    let name = &v.name;
    let pages = dag.ensure::<Extract>(&s.extract, &vec![corpus.to_path_buf()]).with_context(|| format!("config `{name}`: extract"))?;
    let chunks = dag.ensure::<Chunk>(&s.chunk, &pages).with_context(|| format!("config `{name}`: chunk"))?;
    let embeddings = dag.ensure::<Embed>(&s.embed, &chunks).with_context(|| {
        if s.retrieval.dense {
            format!("config `{name}`: embed")
        } else {
            format!("config `{name}`: embed (a BM25-only config still needs the embedding model: its index holds the dense vectors too)")
        }
    })?;
    let (chunks, embeddings) = match &s.raptor {
        None => (chunks, embeddings),
        Some(r) => {
            let with_summaries = dag
                .ensure::<gauge_raptor::Raptor>(r, &gauge_raptor::RaptorInputs { embeddings, chunks: Some(chunks) })
                .with_context(|| format!("config `{name}`: raptor"))?;
            let embeddings = dag.ensure::<Embed>(&s.embed, &with_summaries).with_context(|| format!("config `{name}`: embed (chunks + summaries)"))?;
            (with_summaries, embeddings)
        }
    };
    let index = dag.ensure::<Index>(&s.index, &IndexInputs { chunks: Some(chunks), embeddings, more_embeddings: Vec::new() }).with_context(|| format!("config `{name}`: index"))?;
    let fingerprint = gauge_core::Manifest::read(&index)?.fingerprint;
    Ok(Upstream { pages, index, fingerprint })
}
