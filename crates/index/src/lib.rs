//! The `index` stage: a faiss vector index and a tantivy BM25 index over one chunk artifact
//! and its embeddings, plus what query time needs.
//!
//! An index directory holds `dense.faiss` (row `i` is chunk `i` of `chunks.parquet`),
//! `bm25/` (tantivy), `chunks.parquet` (a copy of the chunk table, in faiss row order: source,
//! pages, section, neighbours, text) and `manifest.json` (with the embedder's settings, so a
//! query embedder of another model or dimension is refused).
#![deny(missing_docs)]
pub mod bm25;
pub mod cli;
pub mod dense;
pub mod reader;
pub mod tokenizer;

use std::path::{Path, PathBuf};

use gauge_core::schema::{read_chunks, read_embeddings, ChunkRecord};
use gauge_core::{Plan, Stage, StageRun};
use serde::{Deserialize, Serialize};
use tantivy::schema::{Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, FAST, INDEXED, STORED, STRING};
use tantivy::tokenizer::{Language, Stemmer, StopWordFilter, TextAnalyzer};

pub use bm25::{Bm25Params, ParamTermQuery};
pub use dense::{DenseIndex, FaissDevice};
pub use reader::{BuiltEmbedder, IndexManifest, IndexReader};
pub use tokenizer::{IdentifierTokenizer, IDENTIFIER_TOKENIZER};

/// Stage name.
pub const STAGE: &str = "index";
/// Output format version.
pub const FORMAT_VERSION: u32 = 1;

/// Effective configuration of `index`, echoed into the manifest.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct IndexConfig {
    /// faiss factory string: `Flat` (exact inner product), `HNSW32`, `IVF{n},Flat`, `IVF{n},PQ{m}`.
    pub faiss: String,
    /// English stemming in the BM25 index (Snowball English, on documents and queries alike).
    pub stemming: bool,
    /// English stop words left out of the BM25 index and of queries (Lucene's English set,
    /// the one Anserini's BEIR runs use: [`ENGLISH_STOP_WORDS`]). Left out of the manifest
    /// when off, so older artifacts keep their address.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stopwords: bool,
    /// Where faiss trains and fills the index (`cpu`, `cuda[:N]` with the `faiss-gpu`
    /// feature). The written index is the CPU form either way. Left out of the manifest (and
    /// so of the fingerprint) when `cpu`, so CPU artifacts keep their address.
    #[serde(skip_serializing_if = "FaissDevice::is_cpu")]
    pub device: FaissDevice,
    /// Index only this shard of the chunks (`i/n`, the partition `embed --shard` uses); the
    /// engine searches a set of shard indexes together (`query --index A --index B …`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub shard: Option<gauge_core::shard::Shard>,
}

impl Default for IndexConfig {
    fn default() -> Self {
        IndexConfig { faiss: "Flat".into(), stemming: false, stopwords: false, device: FaissDevice::Cpu, shard: None }
    }
}

/// The fields of the BM25 index.
pub struct Bm25Fields {
    /// Chunk id (stored).
    pub chunk_id: Field,
    /// faiss row / chunk table row (stored, fast).
    pub row: Field,
    /// Chunk text.
    pub text: Field,
    /// Document title.
    pub title: Field,
    /// Section path.
    pub section: Field,
    /// Source path (exact, for filters).
    pub source: Field,
    /// Document type (exact, for filters).
    pub doc_type: Field,
    /// First page.
    pub page_start: Field,
    /// Last page.
    pub page_end: Field,
}

/// The BM25 schema and its fields.
pub fn bm25_schema() -> (Schema, Bm25Fields) {
    let mut b = Schema::builder();
    let text_opts = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default().set_tokenizer(IDENTIFIER_TOKENIZER).set_index_option(IndexRecordOption::WithFreqsAndPositions),
    );
    let fields = Bm25Fields {
        chunk_id: b.add_text_field("chunk_id", STRING | STORED),
        row: b.add_u64_field("row", INDEXED | STORED | FAST),
        text: b.add_text_field("text", text_opts.clone()),
        title: b.add_text_field("title", text_opts.clone()),
        section: b.add_text_field("section", text_opts),
        source: b.add_text_field("source", STRING | STORED),
        doc_type: b.add_text_field("doc_type", STRING),
        page_start: b.add_i64_field("page_start", INDEXED | FAST),
        page_end: b.add_i64_field("page_end", INDEXED | FAST),
    };
    (b.build(), fields)
}

/// Lucene's English stop words (`EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`), the set Anserini
/// and Pyserini use for their BEIR BM25 runs.
pub const ENGLISH_STOP_WORDS: [&str; 33] = [
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not", "of", "on", "or", "such",
    "that", "the", "their", "then", "there", "these", "they", "this", "to", "was", "will", "with",
];

/// How BM25 text is analysed. The index stores it (in its manifest's `index` settings) and
/// the query side runs the same analyzer, so a stemmed index is searched with stemmed terms.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Bm25Analysis {
    /// Snowball English stemming after the identifier tokenizer.
    pub stemming: bool,
    /// [`ENGLISH_STOP_WORDS`] removed (before stemming, as Lucene's English analyzer does).
    pub stopwords: bool,
}

impl IndexConfig {
    /// The BM25 analysis these settings ask for.
    pub fn analysis(&self) -> Bm25Analysis {
        Bm25Analysis { stemming: self.stemming, stopwords: self.stopwords }
    }
}

/// gauge's BM25 analyzer: the identifier tokenizer (lower-cased whole tokens and their parts),
/// then the stop-word filter and the English stemmer where asked for.
pub fn analyzer(analysis: Bm25Analysis) -> TextAnalyzer {
    let builder = TextAnalyzer::builder(IdentifierTokenizer).dynamic();
    let builder = if analysis.stopwords { builder.filter_dynamic(StopWordFilter::remove(ENGLISH_STOP_WORDS.iter().map(|w| w.to_string()))) } else { builder };
    let builder = if analysis.stemming { builder.filter_dynamic(Stemmer::new(Language::English)) } else { builder };
    builder.build()
}

/// The terms a query is searched with: the query run through the index's own analyzer, each
/// distinct term once, in order of first appearance.
pub fn query_terms(analyzer: &mut TextAnalyzer, query: &str) -> Vec<String> {
    let mut stream = analyzer.token_stream(query);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    while stream.advance() {
        let t = &stream.token().text;
        if seen.insert(t.clone()) {
            out.push(t.clone());
        }
    }
    out
}

/// Registers gauge's analyzer (see [`analyzer`]) on an index.
pub fn register_tokenizer(index: &tantivy::Index, analysis: Bm25Analysis) {
    index.tokenizers().register(IDENTIFIER_TOKENIZER, analyzer(analysis));
}

/// Builds the dense index on the CPU: factory string, training when the type needs it, then
/// all vectors (see [`dense::build`] for other devices).
pub fn build_faiss(vectors: &[f32], dim: usize, description: &str) -> anyhow::Result<faiss::index::IndexImpl> {
    dense::build(vectors, dim, description, FaissDevice::Cpu)
}

/// The inputs of `index`: a chunk artifact and the embeddings made from it.
#[derive(Debug, Clone, Serialize)]
pub struct IndexInputs {
    /// The chunk artifact directory (or its `chunks.parquet`); `None`: the one the
    /// embeddings' manifest says they were made from.
    pub chunks: Option<PathBuf>,
    /// The embedding artifact directory (or its `embeddings.parquet`).
    pub embeddings: PathBuf,
    /// More embedding artifacts of the same chunks (the other shards of `embed --shard`): the
    /// vectors of all of them are used, in the chunk table's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more_embeddings: Vec<PathBuf>,
}

/// What a build did.
#[derive(Debug, Default)]
pub struct IndexSummary {
    /// Chunks indexed.
    pub chunks: usize,
    /// faiss factory string.
    pub faiss: String,
    /// Where faiss built it.
    pub device: String,
}

/// The `index` stage: chunks + embeddings → `dense.faiss`, `bm25/`, `chunks.parquet`.
pub struct Index;

impl Stage for Index {
    const NAME: &'static str = STAGE;
    const FORMAT_VERSION: u32 = FORMAT_VERSION;
    type Config = IndexConfig;
    type Inputs = IndexInputs;
    type Options = ();
    type State = (PathBuf, Vec<PathBuf>);
    type Summary = IndexSummary;

    fn plan(config: &IndexConfig, inputs: &IndexInputs, _: &()) -> anyhow::Result<Plan<Self::State>> {
        let found = gauge_core::artifact::embedded_chunks(&inputs.embeddings, inputs.chunks.as_deref())?;
        let (chunks_path, chunks_entry, emb_path, emb_entry, emb_manifest) = (found.chunks_path, found.chunks_entry, found.embeddings_path, found.embeddings_entry, found.embeddings_manifest);
        let embedder = emb_manifest.config.get("embedder").cloned().unwrap_or_default();
        let mut entries = vec![chunks_entry, emb_entry];
        let mut paths = vec![emb_path];
        for more in &inputs.more_embeddings {
            // Every shard: the same chunks, the same embedder.
            let other = gauge_core::artifact::embedded_chunks(more, Some(&chunks_path))?;
            anyhow::ensure!(
                other.embeddings_manifest.config.get("embedder").cloned().unwrap_or_default() == embedder,
                "{}: made with another embedder than {}; every embedding artifact of an index must come from the same model and settings",
                more.display(),
                inputs.embeddings.display()
            );
            entries.push(other.embeddings_entry.named(format!("embeddings.parquet:{}", entries.len() - 1)));
            paths.push(other.embeddings_path);
        }
        let echo = serde_json::json!({ "index": config, "embedder": embedder });
        Ok(Plan::new(entries, (chunks_path, paths)).echo(echo))
    }

    fn build((chunks_path, emb_paths): Self::State, run: &mut StageRun, config: &IndexConfig, _: &IndexInputs, _: &()) -> anyhow::Result<IndexSummary> {
        let all = read_chunks(&chunks_path)?;
        let chunks: Vec<ChunkRecord> = match config.shard {
            Some(shard) => all.iter().filter(|c| shard.owns(&c.chunk_id)).cloned().collect(),
            None => all.clone(),
        };
        let emb = vectors_in_order(&chunks, &emb_paths, &chunks_path)?;
        run.set_input_rows("chunks.parquet", chunks.len() as u64);
        run.set_input_rows("embeddings.parquet", emb.ids.len() as u64);
        if let Some(shard) = config.shard {
            run.set_stat("shard", shard.to_string());
        }

        let t = std::time::Instant::now();
        let dense = dense::build(&emb.vectors, emb.dim, &config.faiss, config.device)?;
        let faiss_path = run.path("dense.faiss");
        let utf8 = faiss_path.to_str().ok_or_else(|| anyhow::anyhow!("{}: faiss writes only UTF-8 paths; use an --artifacts folder whose name is UTF-8", faiss_path.display()))?;
        faiss::write_index(&dense, utf8).map_err(dense::faiss_err)?;
        run.set_stat("faiss_build_seconds", t.elapsed().as_secs_f64());
        run.add_output("dense.faiss", Some(chunks.len() as u64))?;

        let t = std::time::Instant::now();
        write_bm25(&run.path("bm25"), &chunks, config.analysis())?;
        run.set_stat("bm25_build_seconds", t.elapsed().as_secs_f64());

        if config.shard.is_some() {
            gauge_core::schema::write_chunks(&run.path("chunks.parquet"), &chunks)?;
        } else {
            std::fs::copy(&chunks_path, run.path("chunks.parquet"))?;
        }
        run.add_output("chunks.parquet", Some(chunks.len() as u64))?;
        run.set_stat("chunks", chunks.len());
        run.set_stat("dimension", emb.dim);
        Ok(IndexSummary { chunks: chunks.len(), faiss: config.faiss.clone(), device: config.device.to_string() })
    }

    fn summary_line(s: &IndexSummary) -> String {
        format!("{} chunks indexed ({} on {} + BM25)", s.chunks, s.faiss, s.device)
    }
}

/// The vectors of `chunks`, in their order, from one or more embedding artifacts (shards):
/// every chunk must have exactly one vector among them.
fn vectors_in_order(chunks: &[ChunkRecord], paths: &[PathBuf], chunks_path: &Path) -> anyhow::Result<gauge_core::schema::Embeddings> {
    if let [one] = paths {
        let emb = read_embeddings(one)?;
        if emb.ids.len() == chunks.len() && emb.ids.iter().zip(chunks).all(|(a, c)| *a == c.chunk_id) {
            return Ok(emb);
        }
    }
    let mut by_id: std::collections::HashMap<String, (usize, usize)> = std::collections::HashMap::new();
    let mut tables = Vec::new();
    for (t, p) in paths.iter().enumerate() {
        let emb = read_embeddings(p)?;
        if let Some(first) = tables.first().map(|e: &gauge_core::schema::Embeddings| e.dim) {
            anyhow::ensure!(emb.dim == first, "{}: dimension {} differs from {first}", p.display(), emb.dim);
        }
        for (i, id) in emb.ids.iter().enumerate() {
            anyhow::ensure!(by_id.insert(id.clone(), (t, i)).is_none(), "{}: chunk `{id}` has a vector in two embedding artifacts; pass each shard once", p.display());
        }
        tables.push(emb);
    }
    let dim = tables[0].dim;
    let missing = chunks.iter().filter(|c| !by_id.contains_key(&c.chunk_id)).count();
    anyhow::ensure!(
        missing == 0,
        "{}: {missing} of {} chunks have no vector in the {} embedding artifact(s) given; pass every shard (`--embeddings` once per `embed --shard i/n`)",
        chunks_path.display(),
        chunks.len(),
        paths.len()
    );
    let mut vectors = Vec::with_capacity(chunks.len() * dim);
    for c in chunks {
        let (t, i) = by_id[&c.chunk_id];
        vectors.extend_from_slice(&tables[t].vectors[i * dim..(i + 1) * dim]);
    }
    Ok(gauge_core::schema::Embeddings { ids: chunks.iter().map(|c| c.chunk_id.clone()).collect(), vectors, dim })
}

/// Writes the BM25 index of the chunks into `dir` (one segment, single-threaded, so the
/// result does not depend on thread timing).
pub fn write_bm25(dir: &Path, chunks: &[ChunkRecord], analysis: Bm25Analysis) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let (schema, f) = bm25_schema();
    let index = tantivy::Index::create_in_dir(dir, schema)?;
    register_tokenizer(&index, analysis);
    let mut writer: tantivy::IndexWriter = index.writer_with_num_threads(1, 64 * 1024 * 1024)?;
    for (row, c) in chunks.iter().enumerate() {
        let mut doc = tantivy::TantivyDocument::default();
        doc.add_text(f.chunk_id, &c.chunk_id);
        doc.add_u64(f.row, row as u64);
        doc.add_text(f.text, &c.text);
        doc.add_text(f.title, &c.title);
        doc.add_text(f.section, &c.section);
        doc.add_text(f.source, &c.source);
        doc.add_text(f.doc_type, &c.doc_type);
        doc.add_i64(f.page_start, c.page_start as i64);
        doc.add_i64(f.page_end, c.page_end as i64);
        writer.add_document(doc)?;
    }
    writer.commit()?;
    writer.wait_merging_threads()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use faiss::Index;

    /// Deterministic pseudo-random unit vectors.
    fn vectors(n: usize, dim: usize) -> Vec<f32> {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut out = Vec::with_capacity(n * dim);
        for _ in 0..n {
            let row: Vec<f32> = (0..dim)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
                })
                .collect();
            let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
            out.extend(row.iter().map(|x| x / norm));
        }
        out
    }

    #[test]
    fn every_factory_type_builds_and_finds_itself() {
        let (n, dim) = (2000, 16);
        let v = vectors(n, dim);
        // Self-retrieval: the share of 200 rows found among their own 5 nearest. Exact search
        // and IVF (a stored row's query falls in its own cell, the one probed) find every row;
        // HNSW may lose one to the graph; PQ ranks by distances to 4- or 8-byte codes. Measured
        // 1.000 for every type (the test prints them); the floors leave room for faiss builds
        // that train their quantisers differently.
        for (desc, floor) in [("Flat", 1.0), ("HNSW32", 0.98), ("IVF16,Flat", 1.0), ("IVF16,PQ4", 0.95), ("IVF16,PQ8", 0.95)] {
            let mut index = build_faiss(&v, dim, desc).unwrap_or_else(|e| panic!("{desc}: {e}"));
            assert_eq!(index.ntotal(), n as u64, "{desc}");
            let rows: Vec<usize> = (0..200).map(|i| i * 7 + 3).collect();
            let queries: Vec<f32> = rows.iter().flat_map(|&r| v[dim * r..dim * (r + 1)].iter().copied()).collect();
            let res = index.search(&queries, 5).unwrap();
            let found = rows.iter().enumerate().filter(|(q, &r)| res.labels[q * 5..q * 5 + 5].iter().any(|l| l.get() == Some(r as u64))).count();
            let recall = found as f64 / rows.len() as f64;
            eprintln!("{desc}: self-recall@5 {recall:.3}");
            assert!(recall >= floor, "{desc}: self-recall@5 {recall:.3} below {floor}");
        }
        let err = build_faiss(&v, dim, "Bogus42").err().unwrap().to_string();
        assert!(err.contains("Bogus42") && err.contains("try Flat"), "{err}");
    }
}
