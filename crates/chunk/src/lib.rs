//! The `chunk` stage: `pages.parquet` to `chunks.parquet`.
//!
//! Pages of a document are joined into one document text (pages separated by a blank
//! line, [`gauge_core::schema::PAGE_SEPARATOR`]); chunks are slices of it, so each carries
//! exact character offsets and the pages it spans, whatever the strategy.
#![deny(missing_docs)]
pub mod cli;
pub mod headings;
pub mod recursive;
pub mod tokens;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use gauge_core::schema::{read_pages, write_chunks, ChunkRecord, PageRecord, PAGE_SEPARATOR};
use gauge_core::{hash, FileEntry, Plan, Stage, StageRun};
use serde::{Deserialize, Serialize};

pub use recursive::RecursiveSplitter;

/// Stage name.
pub const STAGE: &str = "chunk";
/// Output format version.
pub const FORMAT_VERSION: u32 = 4;

/// How a document is cut into chunks.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, clap::ValueEnum, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// LangChain-compatible recursive character splitting (size/overlap in characters).
    Recursive,
    /// Windows of `size` tokens overlapping by `overlap` tokens, from a `tokenizer.json`.
    Tokens,
    /// Split at headings, then recursively inside sections longer than `size`.
    Section,
    /// One chunk per page.
    Page,
}

/// Chunk filters, each switchable.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct FilterConfig {
    /// Drop chunks shorter than this many characters (0 keeps all).
    pub min_chars: usize,
    /// Drop table-of-contents chunks: more than half of the lines are dot leaders, or
    /// more than half of the non-space characters are dots.
    pub toc: bool,
    /// Drop exact duplicates (same text after whitespace normalisation), keeping the first.
    pub duplicates: bool,
}

impl Default for FilterConfig {
    fn default() -> Self {
        FilterConfig { min_chars: 100, toc: true, duplicates: true }
    }
}

/// Effective configuration of `chunk`, echoed into the manifest.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ChunkConfig {
    /// Strategy.
    pub strategy: Strategy,
    /// Chunk size: characters, or tokens for `tokens`.
    pub size: usize,
    /// Overlap: characters, or tokens for `tokens`.
    pub overlap: usize,
    /// Separators for `recursive` and `section`, tried in order.
    pub separators: Vec<String>,
    /// Filters.
    pub filters: FilterConfig,
    /// Add an `embed_text` column: `title › section`, a blank line, then the text.
    pub contextual_header: bool,
    /// The tokenizer `tokens` counts with: a `tokenizer.json`, a model folder holding one, or
    /// a model id found like any model (usually the embedding model's). Only `tokens` reads it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<String>,
}

impl Default for ChunkConfig {
    fn default() -> Self {
        ChunkConfig {
            strategy: Strategy::Recursive,
            size: 1000,
            overlap: 150,
            separators: recursive::DEFAULT_SEPARATORS.iter().map(|s| s.to_string()).collect(),
            filters: FilterConfig::default(),
            contextual_header: false,
            tokenizer: None,
        }
    }
}

/// Errors of the chunk stage.
#[derive(Debug, thiserror::Error)]
pub enum ChunkError {
    /// Artifact I/O.
    #[error(transparent)]
    Core(#[from] gauge_core::CoreError),
    /// Bad settings.
    #[error("invalid chunk config: {0}")]
    Config(String),
    /// The tokenizer file could not be loaded.
    #[error("{path}: cannot load tokenizer ({message}); pass a tokenizer.json or a model folder holding one")]
    Tokenizer {
        /// Tokenizer path.
        path: PathBuf,
        /// Why.
        message: String,
    },
}

impl ChunkConfig {
    /// Checks sizes and strategy requirements.
    pub fn validate(&self) -> Result<(), ChunkError> {
        if self.size == 0 {
            return Err(ChunkError::Config("size must be at least 1".into()));
        }
        if self.overlap >= self.size {
            return Err(ChunkError::Config(format!("overlap ({}) must be smaller than size ({})", self.overlap, self.size)));
        }
        if self.strategy == Strategy::Tokens && self.tokenizer.is_none() {
            return Err(ChunkError::Config("strategy `tokens` needs `tokenizer` (--tokenizer: a tokenizer.json, a model folder or a model id)".into()));
        }
        Ok(())
    }
}

/// One document assembled from its pages.
pub struct Document<'a> {
    /// First page row (ids, title, …).
    pub meta: &'a PageRecord,
    /// Pages joined by [`PAGE_SEPARATOR`].
    pub text: String,
    /// (byte offset where the page's text starts, page number).
    pub page_starts: Vec<(usize, i32)>,
}

impl<'a> Document<'a> {
    /// Assembles a document from its pages (in page order).
    pub fn assemble(pages: &[&'a PageRecord]) -> Document<'a> {
        let mut text = String::new();
        let mut page_starts = Vec::with_capacity(pages.len());
        for (i, p) in pages.iter().enumerate() {
            if i > 0 {
                text.push_str(PAGE_SEPARATOR);
            }
            page_starts.push((text.len(), p.page));
            text.push_str(&p.text);
        }
        Document { meta: pages[0], text, page_starts }
    }

    /// The page holding byte `offset`.
    pub fn page_at(&self, offset: usize) -> i32 {
        let i = self.page_starts.partition_point(|&(start, _)| start <= offset);
        self.page_starts[i.saturating_sub(1)].1
    }
}

/// A chunk before filtering: a byte range of the document text and its section path.
#[derive(Debug, Clone)]
pub struct Span {
    /// Byte start.
    pub start: usize,
    /// Byte end.
    pub end: usize,
    /// Heading path.
    pub section: String,
}

/// Cuts one document into spans with the configured strategy.
pub fn split_document(doc: &Document<'_>, config: &ChunkConfig, tokenizer: Option<&tokens::TokenWindows>) -> Vec<Span> {
    let text = doc.text.as_str();
    let headings = headings::find_headings(text);
    let paths = headings::heading_paths(&headings);
    let section_at = |offset: usize| -> String {
        let i = headings.partition_point(|h| h.offset <= offset);
        if i == 0 { String::new() } else { paths[i - 1].clone() }
    };
    let splitter = RecursiveSplitter { size: config.size, overlap: config.overlap, separators: config.separators.clone() };
    let ranges: Vec<(usize, usize)> = match config.strategy {
        Strategy::Recursive => splitter.split_range(text, 0, text.len()),
        Strategy::Tokens => tokenizer.expect("validated: tokens strategy has a tokenizer").windows(text, config.size, config.overlap),
        Strategy::Page => {
            let mut out = Vec::new();
            for (i, &(start, _)) in doc.page_starts.iter().enumerate() {
                let end = doc.page_starts.get(i + 1).map_or(text.len(), |&(s, _)| s - PAGE_SEPARATOR.len());
                let slice = &text[start..end];
                let lead = slice.len() - slice.trim_start().len();
                let trimmed = slice.trim();
                if !trimmed.is_empty() {
                    out.push((start + lead, start + lead + trimmed.len()));
                }
            }
            out
        }
        Strategy::Section => {
            let mut bounds: Vec<usize> = vec![0];
            bounds.extend(headings.iter().map(|h| h.offset).filter(|&o| o > 0));
            bounds.push(text.len());
            let mut out = Vec::new();
            for w in bounds.windows(2) {
                out.extend(splitter.split_range(text, w[0], w[1]));
            }
            out
        }
    };
    ranges.into_iter().map(|(start, end)| Span { start, end, section: section_at(start) }).collect()
}

pub use gauge_core::text::is_toc;

/// Counts of what each step produced or removed (for the manifest).
#[derive(Debug, Default, Clone, Serialize)]
pub struct ChunkStats {
    /// Documents chunked.
    pub documents: usize,
    /// Chunks before filters.
    pub chunks_before_filters: usize,
    /// Removed for being shorter than `min_chars`.
    pub removed_min_chars: usize,
    /// Removed as table of contents.
    pub removed_toc: usize,
    /// Removed as exact duplicates.
    pub removed_duplicates: usize,
    /// Chunks written.
    pub chunks: usize,
}

/// Chunks all documents of a pages table (grouped by `doc_id`, in table order).
pub fn chunk_pages(pages: &[PageRecord], config: &ChunkConfig, tokenizer: Option<&tokens::TokenWindows>) -> (Vec<ChunkRecord>, ChunkStats) {
    let mut stats = ChunkStats::default();
    // Group pages by document, keeping the order of first appearance.
    let mut order: Vec<&str> = Vec::new();
    let mut groups: std::collections::HashMap<&str, Vec<&PageRecord>> = std::collections::HashMap::new();
    for p in pages {
        groups.entry(p.doc_id.as_str()).or_insert_with(|| {
            order.push(p.doc_id.as_str());
            Vec::new()
        });
        groups.get_mut(p.doc_id.as_str()).expect("inserted").push(p);
    }
    let mut seen: HashSet<String> = HashSet::new();
    let mut out = Vec::new();
    for doc_id in order {
        let mut doc_pages = groups.remove(doc_id).expect("grouped");
        doc_pages.sort_by_key(|p| p.page);
        let doc = Document::assemble(&doc_pages);
        stats.documents += 1;
        let spans = split_document(&doc, config, tokenizer);
        stats.chunks_before_filters += spans.len();
        // Byte → character offsets, walking forward once.
        let mut char_pos = 0usize;
        let mut byte_pos = 0usize;
        let mut to_char = |b: usize| -> usize {
            if b < byte_pos {
                char_pos = doc.text[..b].chars().count();
            } else {
                char_pos += doc.text[byte_pos..b].chars().count();
            }
            byte_pos = b;
            char_pos
        };
        let mut kept: Vec<ChunkRecord> = Vec::new();
        for span in spans {
            let text = &doc.text[span.start..span.end];
            let n_chars = text.chars().count();
            if n_chars < config.filters.min_chars {
                stats.removed_min_chars += 1;
                continue;
            }
            if config.filters.toc && is_toc(text) {
                stats.removed_toc += 1;
                continue;
            }
            if config.filters.duplicates {
                let key = text.split_whitespace().collect::<Vec<_>>().join(" ");
                if !seen.insert(key) {
                    stats.removed_duplicates += 1;
                    continue;
                }
            }
            let char_start = to_char(span.start) as i64;
            let char_end = char_start + n_chars as i64;
            let chunk_id = hash::short_id(&[
                doc.meta.doc_id.as_bytes(),
                &char_start.to_le_bytes(),
                &char_end.to_le_bytes(),
                text.as_bytes(),
            ]);
            let embed_text = config.contextual_header.then(|| {
                let header = if span.section.is_empty() {
                    doc.meta.title.clone()
                } else {
                    format!("{} › {}", doc.meta.title, span.section)
                };
                format!("{header}\n\n{text}")
            });
            kept.push(ChunkRecord {
                chunk_id,
                doc_id: doc.meta.doc_id.clone(),
                source: doc.meta.source.clone(),
                doc_type: doc.meta.doc_type.clone(),
                title: doc.meta.title.clone(),
                section: span.section,
                page_start: doc.page_at(span.start),
                page_end: doc.page_at(span.end.saturating_sub(1).max(span.start)),
                char_start,
                char_end,
                chunk_index: 0,
                prev_chunk_id: None,
                next_chunk_id: None,
                text: text.to_string(),
                embed_text,
                level: 0,
                children: Vec::new(),
            });
        }
        let ids: Vec<String> = kept.iter().map(|c| c.chunk_id.clone()).collect();
        for (i, c) in kept.iter_mut().enumerate() {
            c.chunk_index = i as i32;
            c.prev_chunk_id = i.checked_sub(1).map(|j| ids[j].clone());
            c.next_chunk_id = ids.get(i + 1).cloned();
        }
        out.extend(kept);
    }
    stats.chunks = out.len();
    (out, stats)
}

/// The tokenizer file a config names: a `tokenizer.json`, a folder holding one, or a model
/// id resolved like any model.
pub fn tokenizer_file(spec: &str) -> Result<PathBuf, ChunkError> {
    let path = Path::new(spec);
    let dir = if path.is_file() {
        return Ok(path.to_path_buf());
    } else if path.is_dir() {
        path.to_path_buf()
    } else {
        gauge_core::models::resolve_model(spec).map_err(|e| ChunkError::Tokenizer { path: path.to_path_buf(), message: e.to_string() })?.dir
    };
    Ok(dir.join("tokenizer.json"))
}

/// The `chunk` stage: an extract artifact (`pages.parquet`) → `chunks.parquet`.
pub struct Chunk;

impl Stage for Chunk {
    const NAME: &'static str = STAGE;
    const FORMAT_VERSION: u32 = FORMAT_VERSION;
    type Config = ChunkConfig;
    /// The extract artifact directory (or its `pages.parquet`).
    type Inputs = PathBuf;
    type Options = ();
    type State = (PathBuf, Option<tokens::TokenWindows>);
    type Summary = ChunkStats;

    fn plan(config: &ChunkConfig, pages: &PathBuf, _: &()) -> anyhow::Result<Plan<Self::State>> {
        config.validate()?;
        let (pages_path, entry) = gauge_core::artifact::input_file(pages, "pages.parquet", "extract")?;
        let mut inputs = vec![entry];
        let token_windows = match (config.strategy, &config.tokenizer) {
            (Strategy::Tokens, Some(spec)) => {
                let file = tokenizer_file(spec)?;
                let tw = tokens::TokenWindows::from_file(&file)?;
                inputs.push(FileEntry::file("tokenizer.json", &file)?);
                Some(tw)
            }
            _ => None,
        };
        Ok(Plan::new(inputs, (pages_path, token_windows)))
    }

    fn build((pages_path, token_windows): Self::State, run: &mut StageRun, config: &ChunkConfig, _: &PathBuf, _: &()) -> anyhow::Result<ChunkStats> {
        let pages = read_pages(&pages_path)?;
        run.set_input_rows("pages.parquet", pages.len() as u64);
        let (chunks, stats) = chunk_pages(&pages, config, token_windows.as_ref());
        let rows = write_chunks(&run.path("chunks.parquet"), &chunks)?;
        run.add_output("chunks.parquet", Some(rows))?;
        run.set_stats(&stats);
        Ok(stats)
    }

    fn summary_line(s: &ChunkStats) -> String {
        format!(
            "{} chunks from {} documents ({} before filters; removed {} short, {} table-of-contents, {} duplicates)",
            s.chunks, s.documents, s.chunks_before_filters, s.removed_min_chars, s.removed_toc, s.removed_duplicates
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(doc: &str, n: i32, text: &str) -> PageRecord {
        PageRecord {
            doc_id: doc.into(),
            source: format!("{doc}.pdf"),
            doc_type: String::new(),
            title: format!("Title {doc}"),
            page: n,
            text: text.into(),
            empty: text.is_empty(),
            metadata: "{}".into(),
        }
    }

    fn para(words: &str, n: usize) -> String {
        vec![words; n].join(" ")
    }

    #[test]
    fn page_strategy_one_chunk_per_nonempty_page_with_offsets() {
        let pages = vec![page("a", 1, &para("alpha", 30)), page("a", 2, ""), page("a", 3, &para("gamma", 30))];
        let cfg = ChunkConfig { strategy: Strategy::Page, ..ChunkConfig::default() };
        let (chunks, stats) = chunk_pages(&pages, &cfg, None);
        assert_eq!(stats.chunks, 2);
        assert_eq!((chunks[1].page_start, chunks[1].page_end), (3, 3));
        let doc_text = format!("{}\n\n\n\n{}", pages[0].text, pages[2].text);
        for c in &chunks {
            let slice: String = doc_text.chars().skip(c.char_start as usize).take((c.char_end - c.char_start) as usize).collect();
            assert_eq!(slice, c.text);
        }
        assert_eq!(chunks[0].next_chunk_id.as_deref(), Some(chunks[1].chunk_id.as_str()));
        assert_eq!(chunks[1].prev_chunk_id.as_deref(), Some(chunks[0].chunk_id.as_str()));
        assert_eq!((chunks[0].prev_chunk_id.as_ref(), chunks[1].next_chunk_id.as_ref()), (None, None));
    }

    #[test]
    fn chunks_spanning_pages_record_both() {
        let pages = vec![page("a", 1, &para("alpha", 20)), page("a", 2, &para("beta", 20))];
        let cfg = ChunkConfig { size: 1000, overlap: 0, ..ChunkConfig::default() };
        let (chunks, _) = chunk_pages(&pages, &cfg, None);
        assert_eq!(chunks.len(), 1);
        assert_eq!((chunks[0].page_start, chunks[0].page_end), (1, 2));
    }

    #[test]
    fn section_strategy_splits_at_headings_and_records_paths() {
        let text = format!(
            "CHAPTER 11 – NOTIFICATIONS\n\n11.1 Notifications\n\n{}\n\n11.2 Approvals\n\n11.2.2 COFC/TOFC Approval\n\n{}",
            para("notify the administration", 10),
            para("a carrier may not transport", 10)
        );
        let pages = vec![page("h", 1, &text)];
        let cfg = ChunkConfig { strategy: Strategy::Section, filters: FilterConfig { min_chars: 50, ..FilterConfig::default() }, ..ChunkConfig::default() };
        let (chunks, stats) = chunk_pages(&pages, &cfg, None);
        assert_eq!(chunks.len(), 2, "{chunks:#?}");
        assert!(stats.removed_min_chars >= 2); // the bare chapter and 11.2 headings
        assert_eq!(chunks[0].section, "CHAPTER 11 – NOTIFICATIONS › 11.1 Notifications");
        assert!(chunks[0].text.starts_with("11.1 Notifications"));
        assert_eq!(chunks[1].section, "CHAPTER 11 – NOTIFICATIONS › 11.2 Approvals › 11.2.2 COFC/TOFC Approval");
        assert!(chunks[1].text.starts_with("11.2.2 COFC/TOFC Approval"));
    }

    #[test]
    fn filters_remove_short_toc_and_duplicate_chunks_and_can_be_switched_off() {
        let toc = "Contents\n1.1 Scope ........................ 3\n1.2 Terms ........................ 4\n1.3 Rules ........................ 9";
        let body = para("the inspector shall verify the crossing warning time", 3);
        let pages = vec![page("a", 1, toc), page("a", 2, &body), page("a", 3, "short"), page("b", 1, &body)];
        let cfg = ChunkConfig { strategy: Strategy::Page, filters: FilterConfig { min_chars: 20, ..FilterConfig::default() }, ..ChunkConfig::default() };
        let (chunks, stats) = chunk_pages(&pages, &cfg, None);
        assert_eq!((stats.removed_toc, stats.removed_min_chars, stats.removed_duplicates, stats.chunks), (1, 1, 1, 1));
        assert_eq!(chunks[0].page_start, 2);
        let off = ChunkConfig { filters: FilterConfig { min_chars: 0, toc: false, duplicates: false }, ..cfg };
        assert_eq!(chunk_pages(&pages, &off, None).1.chunks, 4);
    }

    #[test]
    fn contextual_header_goes_to_embed_text_only() {
        let pages = vec![page("a", 1, &format!("11.1 Scope\n\n{}", para("rules apply", 20)))];
        let cfg = ChunkConfig { contextual_header: true, ..ChunkConfig::default() };
        let (chunks, _) = chunk_pages(&pages, &cfg, None);
        let c = &chunks[0];
        assert!(c.text.starts_with("11.1 Scope"));
        assert_eq!(c.embed_text.as_deref().unwrap(), format!("Title a › 11.1 Scope\n\n{}", c.text));
    }

    #[test]
    fn chunk_ids_are_stable_and_distinct() {
        let pages = vec![page("a", 1, &para("one two three four five six", 40))];
        let cfg = ChunkConfig { size: 100, overlap: 20, filters: FilterConfig { min_chars: 0, ..FilterConfig::default() }, ..ChunkConfig::default() };
        let (a, _) = chunk_pages(&pages, &cfg, None);
        let (b, _) = chunk_pages(&pages, &cfg, None);
        assert_eq!(a, b);
        let ids: HashSet<&str> = a.iter().map(|c| c.chunk_id.as_str()).collect();
        assert_eq!(ids.len(), a.len());
    }

    #[test]
    fn token_windows_follow_the_tokenizer() {
        let path = gauge_test_support::shared_path("fixtures/tiny-bert-cross-encoder/tokenizer.json");
        let tw = tokens::TokenWindows::from_file(&path).expect("fixture tokenizer");
        let text = para("Gate arm lights shall be maintained in accordance with design specifications.", 10);
        let windows = tw.windows(&text, 32, 8);
        assert!(windows.len() > 3);
        for (i, &(s, e)) in windows.iter().enumerate() {
            let n = tw.count(&text[s..e]);
            assert!((30..=32).contains(&n) || i == windows.len() - 1, "window {i} has {n} tokens");
        }
        // Consecutive windows overlap.
        assert!(windows[1].0 < windows[0].1);
        let cfg = ChunkConfig { strategy: Strategy::Tokens, size: 32, overlap: 8, ..ChunkConfig::default() };
        assert!(cfg.validate().is_err());
        let missing = tokens::TokenWindows::from_file(Path::new("/nonexistent/tokenizer.json"));
        assert!(missing.err().unwrap().to_string().contains("/nonexistent/tokenizer.json"));
    }

    #[test]
    fn invalid_sizes_are_rejected() {
        let cfg = ChunkConfig { size: 100, overlap: 100, ..ChunkConfig::default() };
        assert!(cfg.validate().unwrap_err().to_string().contains("overlap (100) must be smaller than size (100)"));
    }
}
