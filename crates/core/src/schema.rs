//! Every Parquet column of every gauge artifact, in one place.
//!
//! Each table has a `*_COLUMNS` list of [`ColumnDoc`] (name, Arrow type, meaning), from which
//! its Arrow schema is built; the README's schema section lists the same columns (a test
//! keeps the two in step). Character offsets count Unicode scalar values (Python `str`
//! indices), not bytes.
use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Int32Array, Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Schema};

mod tables;
pub use tables::*;

use crate::table::{read_parquet, write_parquet, Columns};
use crate::CoreError;

/// One documented column.
#[derive(Debug, Clone, Copy)]
pub struct ColumnDoc {
    /// Column name.
    pub name: &'static str,
    /// Arrow type.
    pub dtype: ColumnType,
    /// Whether nulls occur.
    pub nullable: bool,
    /// What the column means.
    pub doc: &'static str,
}

/// The Arrow types gauge tables use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ColumnType {
    /// UTF-8 string.
    Utf8,
    /// 32-bit signed integer.
    Int32,
    /// 64-bit signed integer.
    Int64,
    /// Boolean.
    Bool,
    /// 64-bit float.
    Float64,
    /// Fixed-size list of float32 (a vector; its length is in the manifest).
    F32Vector,
}

impl ColumnType {
    fn arrow(self) -> DataType {
        match self {
            ColumnType::Utf8 => DataType::Utf8,
            ColumnType::Int32 => DataType::Int32,
            ColumnType::Int64 => DataType::Int64,
            ColumnType::Bool => DataType::Boolean,
            ColumnType::Float64 => DataType::Float64,
            ColumnType::F32Vector => panic!("vector columns need a dimension; use vector_field"),
        }
    }
}

const fn col(name: &'static str, dtype: ColumnType, doc: &'static str) -> ColumnDoc {
    ColumnDoc { name, dtype, nullable: false, doc }
}

const fn nullable(name: &'static str, dtype: ColumnType, doc: &'static str) -> ColumnDoc {
    ColumnDoc { name, dtype, nullable: true, doc }
}

use ColumnType::*;

/// `extract/…/pages.parquet`: one row per PDF page, or per Markdown/text file or JSONL record.
pub const PAGE_COLUMNS: &[ColumnDoc] = &[
    col("doc_id", Utf8, "stable document id: first 16 hex of the BLAKE3 hash of the file bytes (JSONL: of the record line)"),
    col("source", Utf8, "path relative to the input root (JSONL: `<path>#<id>`)"),
    col("doc_type", Utf8, "first folder under the input root, empty if the file sits in the root"),
    col("title", Utf8, "PDF Title metadata, first Markdown `#` heading, JSONL title field, else the file stem"),
    col("page", Int32, "1-based page number as in the PDF file (1 for Markdown, text and JSONL)"),
    col("text", Utf8, "cleaned page text; paragraphs separated by a blank line, one table row per line"),
    col("n_chars", Int32, "characters (Unicode scalar values) in `text`"),
    col("empty", Bool, "true when the page has no text layer or is blank after cleaning"),
    col("metadata", Utf8, "JSON object: PDF info fields, or the JSONL record's other fields"),
];

/// `extract/…/errors.parquet`: one row per input that could not be extracted.
pub const ERROR_COLUMNS: &[ColumnDoc] = &[
    col("source", Utf8, "path relative to the input root"),
    col("reason", Utf8, "why it failed (corrupt, encrypted, unsupported, …)"),
];

/// `chunk/…/chunks.parquet`: one row per retrievable chunk.
pub const CHUNK_COLUMNS: &[ColumnDoc] = &[
    col("chunk_id", Utf8, "stable id: 16 hex of BLAKE3(doc_id, char_start, char_end, text)"),
    col("doc_id", Utf8, "document id (see pages)"),
    col("source", Utf8, "document source path (see pages)"),
    col("doc_type", Utf8, "document type (see pages)"),
    col("title", Utf8, "document title"),
    col("section", Utf8, "heading path (`CHAPTER 11 › 11.2 … › 11.2.2 …`) for the section strategy, else the nearest heading seen, empty if none"),
    col("page_start", Int32, "first page the chunk's text comes from (1-based)"),
    col("page_end", Int32, "last page the chunk's text comes from"),
    col("char_start", Int64, "start offset in the document text (pages joined by a blank line)"),
    col("char_end", Int64, "end offset (exclusive) in the document text"),
    col("chunk_index", Int32, "0-based position of the chunk in its document, after filtering"),
    nullable("prev_chunk_id", Utf8, "previous chunk of the same document, null for the first"),
    nullable("next_chunk_id", Utf8, "next chunk of the same document, null for the last"),
    col("text", Utf8, "chunk text, exactly `document_text[char_start:char_end]`"),
    col("n_chars", Int32, "characters in `text`"),
];

/// Optional `chunks.parquet` columns of a `raptor` artifact (leaf chunks plus summary nodes),
/// written when any row is a summary; a table without them holds leaves only.
pub const SUMMARY_COLUMNS: &[ColumnDoc] = &[
    col("level", Int32, "0 for a chunk of a document (a leaf); 1 for a summary of leaves; 2 for a summary of level-1 summaries"),
    col("children", Utf8, "JSON array of the chunk ids the summary was written from (`[]` for a leaf)"),
];

/// Optional `chunks.parquet` column written with `--contextual-header`.
pub const EMBED_TEXT_COLUMN: ColumnDoc =
    col("embed_text", Utf8, "`title › section` line, a blank line, then `text`: what later stages embed when present");

/// `embed/…/embeddings.parquet`: one row per chunk.
pub const EMBEDDING_COLUMNS: &[ColumnDoc] = &[
    col("chunk_id", Utf8, "the chunk embedded (see chunks)"),
    col("vector", F32Vector, "the embedding; `dim` and normalisation are in the manifest"),
];

/// `evaluate/…/metrics.parquet`: one row per config, category and metric.
pub const METRIC_COLUMNS: &[ColumnDoc] = &[
    col("config", Utf8, "the pipeline config (variant) name"),
    col("category", Utf8, "`all`, or a golden-set category"),
    col("metric", Utf8, "`hit@1`, `hit@3`, `hit@5`, `hit@k`, `mrr@k`, `ndcg@k`, `recall@k`, `keyword_coverage@k`, `refusal_rate`, `latency_p50_ms`, `latency_p95_ms`, `latency_p50_without_cache_ms` (the p50 without the model-call cache); `answer/<name>` for answer rows (see the answer metrics)"),
    col("n", Int32, "questions averaged"),
    col("value", Float64, "the mean over questions (latency: the percentile)"),
    nullable("ci_low", Float64, "95 % percentile-bootstrap interval of the mean, low end (null for latency)"),
    nullable("ci_high", Float64, "high end of that interval"),
    nullable("delta", Float64, "mean paired difference against the baseline config (null for the baseline and for latency)"),
    nullable("delta_ci_low", Float64, "95 % paired-bootstrap interval of the delta, low end"),
    nullable("delta_ci_high", Float64, "high end of that interval"),
    nullable("p_value", Float64, "two-sided paired sign-flip randomisation p-value of the delta (raw)"),
    nullable("p_adjusted", Float64, "`p_value` adjusted over its family (the pipeline's `stats.correction`: Holm by default, or Benjamini–Hochberg); null outside a family (secondary metrics) or with `correction = \"none\"`"),
    nullable("significant", Bool, "`p_adjusted < 0.05` (`p_value < 0.05` where there is no adjusted p)"),
    nullable("wins", Int32, "questions on which the config scores higher than the baseline (null where there is no delta)"),
    nullable("ties", Int32, "questions on which both score the same"),
    nullable("losses", Int32, "questions on which the config scores lower"),
];

/// `evaluate/…/search.parquet` (a pipeline with `[search]`): one row per config and rung of
/// the search, then one `field:<path>` column per searched field (Float64 when every value
/// of the field is a number, else Utf8; null or `none` where the config does not set it).
pub const SEARCH_COLUMNS: &[ColumnDoc] = &[
    col("config", Utf8, "the config name (`search #<id>`, the id its position in the space's enumeration)"),
    col("id", Int32, "that id"),
    col("rung", Int32, "the rung (0 first; grid and random search have one)"),
    col("questions", Int32, "questions of the search split it was scored on at this rung"),
    col("metric", Utf8, "the searched metric (`[search] metric`, default `mrr@k`)"),
    col("value", Float64, "the metric's mean over those questions (optimistic for the winners: they were chosen on it)"),
    col("cost_seconds", Float64, "wall seconds of its upstream artifacts (their manifests, each counted once) plus its searches so far"),
    nullable("rank", Int32, "its rank on the rung among the configs that went on (null: dropped there); on the last rung, its final rank"),
];

/// `evaluate/…/failures.parquet`: one row per config and missed question (no relevant judged
/// passage in the top k), with the first stage that lost the gold.
pub const FAILURE_COLUMNS: &[ColumnDoc] = &[
    col("config", Utf8, "the config name"),
    col("qid", Utf8, "the question id"),
    col("lost_at", Utf8, "the first stage that lost the gold: `extraction` (gold pages without text), `chunking` (no relevant chunk in the index), `candidates` (no retriever returned one, or the only retriever ranked it below the cut), `fusion` (fusing several retrievers ranked it below k or the reranker's n_initial), `dedup` (removed by the per-document cap), `rerank` (put below k), `cutoff` (refused), `window` (in the top k, but the judged window or summary was not relevant); for answer rows (config `<config> · <generator>`, or `<config> · answer` with one generator), `citation` (the gold was in the context, but the answer cites no gold page) or the retrieval's own label"),
    col("relevant_chunks", Int32, "chunks of the config's index relevant to the question on their own"),
    nullable("dense_rank", Int32, "best rank of a relevant chunk among the dense retriever's candidates (null: none, or no dense retriever)"),
    nullable("bm25_rank", Int32, "the same among BM25's candidates"),
    nullable("fused_rank", Int32, "the same after fusion"),
    nullable("capped_rank", Int32, "the same after the per-document / per-page cap"),
    nullable("reranked_rank", Int32, "the same after reranking (null without a reranker)"),
    col("refused", Bool, "the score cutoff refused the question"),
    nullable("top_rank", Int32, "the same in the final top k"),
];

/// `evaluate/…/per_query.parquet`: one row per config and question.
pub const PER_QUERY_COLUMNS: &[ColumnDoc] = &[
    col("config", Utf8, "the config name"),
    col("qid", Utf8, "the question id"),
    col("category", Utf8, "the question's category (empty when none)"),
    nullable("first_relevant_rank", Int32, "1-based rank of the first relevant passage (null: none retrieved)"),
    col("reciprocal_rank", Float64, "1/rank of the first relevant passage within 10 (keyword mode: mean over keywords)"),
    col("hit_1", Float64, "1 if a relevant passage is ranked 1, else 0"),
    col("hit_3", Float64, "same within the first 3"),
    col("hit_5", Float64, "same within the first 5"),
    col("hit_10", Float64, "same within the first 10"),
    col("ndcg_10", Float64, "graded nDCG@k over gold items (each counted once, at its first covering passage; the ideal ranks every gold item by grade; at most 1); keyword mode: mean over keywords of binary nDCG"),
    col("recall", Float64, "share of gold items (pages/spans) covered by the first k passages (keyword mode: keyword coverage)"),
    nullable("keyword_coverage", Float64, "share of keywords found in the first k passages (questions with keywords)"),
    col("refused", Bool, "the score cutoff refused to answer"),
    col("n_results", Int32, "passages returned"),
    col("latency_ms", Float64, "wall time of the search (embedding the query included)"),
    col("cold_latency_ms", Float64, "what the search costs without the model-call cache: latency_ms plus the recorded time of every query-rewrite reply served from the cache (= latency_ms without rewriting)"),
    col("model_calls", Int32, "query-rewrite calls that went to the model (0 when served from the cache or no rewriting)"),
];

/// `evaluate/…/runs.parquet`: every ranked passage of every config and question.
pub const RUN_COLUMNS: &[ColumnDoc] = &[
    col("config", Utf8, "the config name"),
    col("qid", Utf8, "the question id"),
    col("rank", Int32, "1-based rank"),
    col("chunk_id", Utf8, "the hit chunk (the centre of its small-to-big window, when on)"),
    col("score", Float64, "final score"),
    col("source", Utf8, "source file"),
    col("page_start", Int32, "first page of the passage (its window, when on)"),
    col("page_end", Int32, "last page of the passage"),
    col("relevant", Bool, "judged relevant for the question"),
];

/// `answer/…/answers.parquet`: one answered question a row.
pub const ANSWER_COLUMNS: &[ColumnDoc] = &[
    col("qid", Utf8, "the question id (`q1` for a question given on the command line)"),
    col("question", Utf8, "the question"),
    col("answer", Utf8, "the generated answer (the refusal sentence when refused)"),
    col("refused", Bool, "the score cutoff left no passage: the model was not called"),
    col("passages", Utf8, "JSON list of the passages given, in prompt order: `chunk_id`, `source`, `page_start`, `page_end`"),
    col("citations", Utf8, "JSON list of the citations in the answer: `source`, `page_start`, `page_end`, `verified` (a given passage holds that source and every cited page)"),
    col("n_citations", Int32, "citations found"),
    col("n_verified", Int32, "citations pointing to a passage that was in the context"),
    col("n_invented", Int32, "citations pointing elsewhere"),
    col("prompt_tokens", Int32, "prompt tokens"),
    col("completion_tokens", Int32, "generated tokens"),
    col("generation_seconds", Float64, "wall time of the generation (prompt and decoding)"),
    col("finish_reason", Utf8, "`eos`, `stop`, `loop` (the loop stop ended it), `length`, `refused` or `api`"),
];

/// `evaluate/…/answers.parquet`: one row per answer row and question of a pipeline's
/// `[answer]` section, with the `[judge]`'s grades when it has one.
pub const JUDGED_ANSWER_COLUMNS: &[ColumnDoc] = &[
    col("config", Utf8, "the answer row: retrieval config, and `· generator` when the section names several"),
    col("qid", Utf8, "the question id"),
    col("question", Utf8, "the question"),
    col("answer", Utf8, "the generated answer"),
    col("refused", Bool, "the score cutoff left no passage (not graded)"),
    col("n_citations", Int32, "citations found in the answer"),
    col("n_verified", Int32, "citations pointing to a passage that was in the context"),
    col("n_invented", Int32, "citations pointing elsewhere"),
    nullable("judge_faithfulness", Int32, "judge grade 1–5: every statement supported by the passages (null: no judge, not graded, or missing)"),
    nullable("judge_accuracy", Int32, "judge grade 1–5: correct, with the passages' rules, numbers and terms"),
    nullable("judge_completeness", Int32, "judge grade 1–5: covers what the question asks that the passages hold"),
    nullable("judge_relevance", Int32, "judge grade 1–5: addresses the question asked"),
    nullable("judge_citation_quality", Int32, "judge grade 1–5: citations present and pointing to supporting passages"),
    nullable("judge_reason", Utf8, "the judge's one-line reason"),
    nullable("judge_error", Utf8, "why the grade is missing: the call failed after its retries, or the reply was invalid after one repair"),
];

/// Columns of `sft.parquet` (`synth-data --mode sft`), one row per training example.
pub const SFT_COLUMNS: &[ColumnDoc] = &[
    col("id", Utf8, "`sft-<sample index>`"),
    col("kind", Utf8, "`grounded` (the context holds the answer) or `refusal` (it does not; the reply is the refusal sentence)"),
    col("question", Utf8, "the question"),
    col("messages", Utf8, "JSON list of the chat: `system` (answer_system.md), `user` (the answer template with the context), `assistant` (the reply), each `{role, content}`"),
    col("chunk_id", Utf8, "the sampled chunk"),
    col("source", Utf8, "its source file"),
    col("page_start", Int32, "its first page"),
    col("page_end", Int32, "its last page"),
    col("context_chunk_ids", Utf8, "JSON list of the context's chunk ids, in prompt order"),
    col("split", Utf8, "`train`, `dev` or `test` (page-grouped; empty when not split)"),
];

/// Columns of `loss_curve.parquet` (`train-lora`): one row per optimiser step (`train`) and
/// per held-out evaluation (`dev`).
pub const LOSS_CURVE_COLUMNS: &[ColumnDoc] = &[
    col("step", Int64, "optimiser steps taken when measured (0: before training)"),
    col("epoch", Float64, "epochs done"),
    col("split", Utf8, "`train` (the step's window of sequences) or `dev` (the held-out sample)"),
    col("loss", Float64, "mean NLL per target (assistant) token, token-weighted over the window"),
    col("learning_rate", Float64, "learning rate of the step (`train` rows)"),
    col("grad_norm", Float64, "global gradient norm before clipping (`train` rows; 0 on `dev`)"),
    col("target_tokens", Int64, "target tokens in the window or the held-out sample"),
    col("tokens_per_second", Float64, "all tokens of the step run per second, forward and backward (`train` rows)"),
];

/// Builds the Arrow schema for a column list.
pub fn arrow_schema(columns: &[ColumnDoc]) -> Arc<Schema> {
    Arc::new(Schema::new(
        columns.iter().map(|c| Field::new(c.name, c.dtype.arrow(), c.nullable)).collect::<Vec<_>>(),
    ))
}

/// The separator placed between consecutive pages when a document's text is assembled.
pub const PAGE_SEPARATOR: &str = "\n\n";

/// A row of `pages.parquet`.
#[derive(Debug, Clone, PartialEq)]
pub struct PageRecord {
    /// Stable document id.
    pub doc_id: String,
    /// Path relative to the input root.
    pub source: String,
    /// First folder under the root.
    pub doc_type: String,
    /// Document title.
    pub title: String,
    /// 1-based page number.
    pub page: i32,
    /// Cleaned text.
    pub text: String,
    /// Whether the page has no text.
    pub empty: bool,
    /// JSON object of metadata.
    pub metadata: String,
}

/// A row of `errors.parquet`.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorRecord {
    /// Path relative to the input root.
    pub source: String,
    /// Why it failed.
    pub reason: String,
}

/// A row of `chunks.parquet`.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkRecord {
    /// Stable chunk id.
    pub chunk_id: String,
    /// Document id.
    pub doc_id: String,
    /// Document source.
    pub source: String,
    /// Document type.
    pub doc_type: String,
    /// Document title.
    pub title: String,
    /// Heading path.
    pub section: String,
    /// First page.
    pub page_start: i32,
    /// Last page.
    pub page_end: i32,
    /// Start offset in the document text (characters).
    pub char_start: i64,
    /// End offset in the document text (characters, exclusive).
    pub char_end: i64,
    /// Position in the document.
    pub chunk_index: i32,
    /// Previous chunk.
    pub prev_chunk_id: Option<String>,
    /// Next chunk.
    pub next_chunk_id: Option<String>,
    /// Chunk text.
    pub text: String,
    /// Contextual text to embed, when enabled.
    pub embed_text: Option<String>,
    /// 0 for a leaf; 1 or 2 for a RAPTOR summary node.
    pub level: i32,
    /// The chunk ids a summary node summarises (empty for a leaf).
    pub children: Vec<String>,
}

impl ChunkRecord {
    /// A leaf chunk `chunk_id` of `source` (its document id and title too) on `page`, holding
    /// `text` from offset 0: what a record built outside `chunk` starts as (tests, synthetic
    /// corpora); set the other fields on the result.
    pub fn leaf(chunk_id: impl Into<String>, source: &str, page: i32, text: &str) -> ChunkRecord {
        ChunkRecord {
            chunk_id: chunk_id.into(),
            doc_id: source.into(),
            source: source.into(),
            doc_type: String::new(),
            title: source.into(),
            section: String::new(),
            page_start: page,
            page_end: page,
            char_start: 0,
            char_end: text.chars().count() as i64,
            chunk_index: 0,
            prev_chunk_id: None,
            next_chunk_id: None,
            text: text.into(),
            embed_text: None,
            level: 0,
            children: Vec::new(),
        }
    }

    /// Whether this row is a summary node (level above 0).
    pub fn is_summary(&self) -> bool {
        self.level > 0
    }
}

/// The leaf chunks under a set of chunk ids, depth first in `children` order, each once (a
/// leaf is its own leaf; unknown ids are skipped).
pub fn leaves_of<'a>(ids: impl IntoIterator<Item = &'a str>, lookup: &dyn Fn(&str) -> Option<&'a ChunkRecord>) -> Vec<&'a ChunkRecord> {
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut stack: Vec<&str> = ids.into_iter().collect();
    stack.reverse();
    while let Some(id) = stack.pop() {
        let Some(c) = lookup(id) else { continue };
        if c.is_summary() {
            stack.extend(c.children.iter().rev().map(String::as_str));
        } else if seen.insert(c.chunk_id.as_str()) {
            out.push(c);
        }
    }
    out
}

/// A Markdown table of columns (name, type, meaning), as the README shows them.
pub fn markdown_table(columns: &[ColumnDoc]) -> String {
    let mut out = String::from("| column | type | meaning |\n|---|---|---|\n");
    for c in columns {
        let ty = match c.dtype {
            ColumnType::Utf8 => "string",
            ColumnType::Int32 => "int32",
            ColumnType::Int64 => "int64",
            ColumnType::Bool => "bool",
            ColumnType::Float64 => "float64",
            ColumnType::F32Vector => "fixed_size_list<float32, dim>",
        };
        let ty = if c.nullable { format!("{ty} (nullable)") } else { ty.to_string() };
        out.push_str(&format!("| `{}` | {} | {} |\n", c.name, ty, c.doc.replace('|', "\\|")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embeddings_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("embeddings.parquet");
        let ids = vec!["a".to_string(), "b".to_string()];
        write_embeddings(&path, &ids, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 3).unwrap();
        let e = read_embeddings(&path).unwrap();
        assert_eq!((e.ids, e.vectors, e.dim), (ids, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 3));
    }

    #[test]
    fn pages_round_trip_and_wrong_schema_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let pages = vec![PageRecord {
            doc_id: "d".into(),
            source: "a/b.pdf".into(),
            doc_type: "a".into(),
            title: "T".into(),
            page: 1,
            text: "héllo".into(),
            empty: false,
            metadata: "{}".into(),
        }];
        let path = dir.path().join("pages.parquet");
        assert_eq!(write_pages(&path, &pages).unwrap(), 1);
        assert_eq!(read_pages(&path).unwrap(), pages);
        // A pages file is not a chunks file: the error names the file and the missing column.
        let err = read_chunks(&path).unwrap_err().to_string();
        assert!(err.contains("pages.parquet") && err.contains("missing column `chunk_id`"), "{err}");
    }

    #[test]
    fn non_parquet_file_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chunks.parquet");
        std::fs::write(&path, b"not parquet").unwrap();
        let err = read_chunks(&path).unwrap_err().to_string();
        assert!(err.contains("chunks.parquet") && err.contains("not a readable Parquet file"), "{err}");
    }
}
