//! The `extract` stage: PDF, Markdown, text and JSONL documents to `pages.parquet`.
//!
//! PDFs give one row per page (1-based file page numbers); Markdown and text files one row
//! each (page 1); JSONL files one row per record. Unreadable inputs go to `errors.parquet`
//! and the rest go on.
#![deny(missing_docs)]
pub mod clean;
pub mod cli;
pub mod pdf;
mod walk;

pub use walk::{discover, InputFile, WalkSkips};

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use gauge_core::schema::{write_errors, write_pages, ErrorRecord, PageRecord};
use gauge_core::{hash, FileEntry, Plan, Stage, StageRun};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

pub use clean::CleaningConfig;

/// Stage name, also the artifact subdirectory.
pub const STAGE: &str = "extract";
/// Output format version (bump when the same config yields different output).
pub const FORMAT_VERSION: u32 = 1;

/// Field names of JSONL records.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct JsonlFields {
    /// Field holding the record id.
    pub id: String,
    /// Field holding the title (optional in records).
    pub title: String,
    /// Field holding the text.
    pub text: String,
}

impl Default for JsonlFields {
    fn default() -> Self {
        JsonlFields { id: "id".into(), title: "title".into(), text: "text".into() }
    }
}

/// Effective configuration of `extract`, echoed into the manifest.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ExtractConfig {
    /// Cleaning steps.
    pub cleaning: CleaningConfig,
    /// JSONL field names.
    pub jsonl: JsonlFields,
}

/// Errors that stop the stage.
#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    /// Artifact I/O.
    #[error(transparent)]
    Core(#[from] gauge_core::CoreError),
    /// An input path does not exist.
    #[error("{0}: no such file or directory")]
    MissingInput(PathBuf),
    /// An input path is neither a file nor a folder (a FIFO, a device, a socket).
    #[error("{0}: not a regular file or a folder (a FIFO, a device or a socket); give documents or a folder of them")]
    NotAFile(PathBuf),
    /// An input file's bytes changed between hashing and reading.
    #[error("{0}: changed while extract ran (its bytes no longer match the hash taken at the start, which names the result); rerun once the file is complete")]
    ChangedWhileRead(PathBuf),
    /// No input file could be extracted.
    #[error("nothing could be extracted from {inputs} input file(s): {errors}")]
    NothingExtracted {
        /// Number of inputs seen.
        inputs: usize,
        /// Each failed file with its reason.
        errors: String,
    },
    /// `--strict` and some inputs failed.
    #[error("{failed} input file(s) failed (--strict): {errors}")]
    Strict {
        /// How many failed.
        failed: usize,
        /// Each failed file with its reason.
        errors: String,
    },
}

/// What kind of document a file is, from its extension.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Format {
    Pdf,
    Text,
    Markdown,
    Jsonl,
    /// Records, one per line: `id<TAB>text`, `id<TAB>title<TAB>text` or MS MARCO's documents
    /// `id<TAB>url<TAB>title<TAB>body`.
    Tsv,
    /// TREC SGML: `<DOC> <DOCNO>…</DOCNO> … <TEXT>…</TEXT> </DOC>` records.
    Trec,
}

/// The reason a file's bytes, read for extraction, differ from those hashed for the plan (a file
/// still being written): the run stops (its fingerprint would name bytes it never read).
const CHANGED: &str = "changed while extract ran";

fn format_of(path: &Path) -> Option<Format> {
    match path.extension()?.to_string_lossy().to_lowercase().as_str() {
        "pdf" => Some(Format::Pdf),
        "txt" | "text" => Some(Format::Text),
        "md" | "markdown" => Some(Format::Markdown),
        "jsonl" | "ndjson" => Some(Format::Jsonl),
        "tsv" => Some(Format::Tsv),
        "trec" | "sgml" => Some(Format::Trec),
        _ => None,
    }
}

/// A document's raw pages before document-level cleaning.
struct RawDoc {
    file: InputFile,
    doc_id: String,
    title: String,
    metadata: serde_json::Value,
    pages: Vec<String>,
    /// JSONL records keep their own source/doc_id per row.
    record_sources: Option<Vec<(String, String, String, serde_json::Value)>>,
}

/// Counts reported in the summary and the manifest.
#[derive(Debug, Default, Clone, Serialize)]
pub struct ExtractStats {
    /// Input files seen.
    pub files: usize,
    /// Input files that failed.
    pub failed_files: usize,
    /// Documents extracted (JSONL records count one each).
    pub documents: usize,
    /// Rows in pages.parquet.
    pub pages: usize,
    /// Pages with no text.
    pub empty_pages: usize,
    /// Header/footer lines removed.
    pub header_footer_lines_removed: usize,
    /// Line-end hyphens joined as word splits.
    pub hyphen_splits_joined: usize,
    /// Line-end hyphens kept as compounds.
    pub hyphen_compounds_kept: usize,
}

/// Summary of a build.
#[derive(Debug, Default)]
pub struct ExtractSummary {
    /// Counts.
    pub stats: ExtractStats,
    /// Inputs that failed, with reasons.
    pub errors: Vec<ErrorRecord>,
}

/// Options of a run that do not affect its output.
#[derive(Debug, Clone, Default)]
pub struct ExtractOptions {
    /// Fail when any input fails.
    pub strict: bool,
    /// Follow symbolic links whose target lies outside the input folder.
    pub follow_symlinks: bool,
    /// Folders never read (the artifact store: a store inside the corpus folder would feed each
    /// run the previous run's outputs).
    pub skip_dirs: Vec<PathBuf>,
}

/// The `extract` stage: input folders or files → `pages.parquet` (+ `errors.parquet`).
pub struct Extract;

impl Stage for Extract {
    const NAME: &'static str = STAGE;
    const FORMAT_VERSION: u32 = FORMAT_VERSION;
    type Config = ExtractConfig;
    type Inputs = Vec<PathBuf>;
    type Options = ExtractOptions;
    type State = (Vec<InputFile>, WalkSkips);
    type Summary = ExtractSummary;

    fn plan(_config: &ExtractConfig, inputs: &Vec<PathBuf>, options: &ExtractOptions) -> anyhow::Result<Plan<(Vec<InputFile>, WalkSkips)>> {
        let (files, skips) = walk::discover_skipping(inputs, options.follow_symlinks, &options.skip_dirs)?;
        let entries: Vec<FileEntry> = files
            .par_iter()
            .map(|f| FileEntry::file(f.source.clone(), &f.path))
            .collect::<Result<_, gauge_core::CoreError>>()?;
        Ok(Plan::new(entries, (files, skips)))
    }

    fn build((files, skips): (Vec<InputFile>, WalkSkips), run: &mut StageRun, config: &ExtractConfig, _inputs: &Vec<PathBuf>, options: &ExtractOptions) -> anyhow::Result<ExtractSummary> {
        if skips.total() > 0 {
            run.set_stat("symlinks_skipped", skips.total());
        }
        Ok(extract_files(&files, run, config, options)?)
    }

    fn summary_line(s: &ExtractSummary) -> String {
        let failed = if s.errors.is_empty() {
            String::new()
        } else {
            let list: Vec<String> = s.errors.iter().map(|e| format!("{} ({})", e.source, e.reason)).collect();
            format!("; {} failed: {}", s.errors.len(), list.join(", "))
        };
        let st = &s.stats;
        format!("{} documents, {} pages ({} empty) from {} files{failed}", st.documents, st.pages, st.empty_pages, st.files)
    }
}

fn extract_files(files: &[InputFile], run: &mut StageRun, config: &ExtractConfig, opts: &ExtractOptions) -> Result<ExtractSummary, ExtractError> {
    let entries = run.manifest().inputs.clone();
    pdf::quiet_pdf_panics();
    let mut errors = Vec::new();
    let mut docs = Vec::new();
    let mut pdfs = Vec::new();
    for (file, entry) in files.iter().zip(&entries) {
        match format_of(&file.path) {
            None => errors.push(ErrorRecord {
                source: file.source.clone(),
                reason: format!(
                    "unsupported file type `{}` (expected .pdf, .md, .txt, .jsonl, .tsv or .trec)",
                    file.path.extension().map(|e| e.to_string_lossy().to_string()).unwrap_or_default()
                ),
            }),
            Some(Format::Pdf) => pdfs.push((file.clone(), entry.hash.clone())),
            Some(fmt) => match read_text_document(file, &entry.hash, fmt, &config.jsonl) {
                Ok(doc) => docs.push(doc),
                Err(reason) if reason == CHANGED => return Err(ExtractError::ChangedWhileRead(file.path.clone())),
                Err(reason) => errors.push(ErrorRecord { source: file.source.clone(), reason }),
            },
        }
    }
    // PDFs: load in parallel, then extract every page in parallel.
    let loaded: Vec<(InputFile, String, Result<pdf::PdfDocument, String>)> = pdfs
        .into_par_iter()
        .map(|(file, h)| {
            let r = std::fs::read(&file.path).map_err(|e| format!("cannot read: {e}")).and_then(|b| {
                if gauge_core::hash::bytes_hash(&b) != h {
                    Err(CHANGED.to_string())
                } else if b.is_empty() {
                    Err("empty file (0 bytes)".to_string())
                } else {
                    pdf::PdfDocument::load(&b)
                }
            });
            (file, h, r)
        })
        .collect();
    if let Some((file, _, _)) = loaded.iter().find(|(_, _, r)| r.as_ref().err().is_some_and(|e| e == CHANGED)) {
        return Err(ExtractError::ChangedWhileRead(file.path.clone()));
    }
    let mut ok_pdfs = Vec::new();
    for (file, h, r) in loaded {
        match r {
            Ok(doc) => ok_pdfs.push((file, h, doc)),
            Err(reason) => errors.push(ErrorRecord { source: file.source.clone(), reason }),
        }
    }
    let total_pages: usize = ok_pdfs.iter().map(|(_, _, d)| d.pages.len()).sum();
    let bar = gauge_core::progress::bar(total_pages as u64, "pages");
    let jobs: Vec<(usize, u32)> =
        ok_pdfs.iter().enumerate().flat_map(|(i, (_, _, d))| d.pages.iter().map(move |&p| (i, p))).collect();
    let page_texts: Vec<(usize, Result<String, String>)> = jobs
        .par_iter()
        .map(|&(i, p)| {
            let t = ok_pdfs[i].2.page_text(p);
            bar.inc(1);
            (i, t)
        })
        .collect();
    bar.finish_and_clear();
    let mut per_doc: Vec<Vec<String>> = ok_pdfs.iter().map(|_| Vec::new()).collect();
    let mut page_failures: Vec<Vec<String>> = ok_pdfs.iter().map(|_| Vec::new()).collect();
    for (i, t) in page_texts {
        match t {
            Ok(t) => per_doc[i].push(t),
            Err(e) => {
                page_failures[i].push(e);
                per_doc[i].push(String::new());
            }
        }
    }
    for ((file, h, doc), (pages, failures)) in ok_pdfs.into_iter().zip(per_doc.into_iter().zip(page_failures)) {
        let info = doc.info();
        let title = info
            .get("Title")
            .and_then(|v| v.as_str())
            .map(clean_pdf_title)
            .filter(|t| !t.trim().is_empty())
            .unwrap_or_else(|| file_stem(&file.path));
        if failures.len() == pages.len() {
            errors.push(ErrorRecord { source: file.source.clone(), reason: failures[0].clone() });
            continue;
        }
        let mut metadata = serde_json::json!({ "pdf_info": info, "n_pages": pages.len() });
        if !failures.is_empty() {
            metadata["page_errors"] = serde_json::json!(failures);
        }
        docs.push(RawDoc { doc_id: h[..16].to_string(), file, title, metadata, pages, record_sources: None });
    }
    docs.sort_by(|a, b| a.file.source.cmp(&b.file.source));

    let (pages, stats) = clean_documents(docs, &config.cleaning, files.len(), errors.len());
    errors.sort_by(|a, b| a.source.cmp(&b.source));

    for entry in &entries {
        let prefix = format!("{}#", entry.name);
        let n = pages.iter().filter(|p| p.source == entry.name || p.source.starts_with(&prefix)).count();
        run.set_input_rows(&entry.name, n as u64);
    }
    let rows = write_pages(&run.path("pages.parquet"), &pages)?;
    run.add_output("pages.parquet", Some(rows))?;
    let n_err = write_errors(&run.path("errors.parquet"), &errors)?;
    run.add_output("errors.parquet", Some(n_err))?;
    if let serde_json::Value::Object(map) = serde_json::to_value(&stats).expect("stats serialise") {
        for (k, v) in map {
            run.set_stat(&k, v);
        }
    }
    if pages.is_empty() {
        return Err(ExtractError::NothingExtracted { inputs: files.len(), errors: summarize_errors(&errors) });
    }
    if opts.strict && !errors.is_empty() {
        return Err(ExtractError::Strict { failed: errors.len(), errors: summarize_errors(&errors) });
    }
    Ok(ExtractSummary { stats, errors })
}

fn summarize_errors(errors: &[ErrorRecord]) -> String {
    errors.iter().map(|e| format!("{} ({})", e.source, e.reason)).collect::<Vec<_>>().join("; ")
}

/// Strips what word processors add to PDF titles (`Microsoft Word - x.docx` → `x`).
fn clean_pdf_title(title: &str) -> String {
    let t = title.trim();
    let t = t.strip_prefix("Microsoft Word - ").or_else(|| t.strip_prefix("Microsoft PowerPoint - ")).unwrap_or(t);
    let lower = t.to_lowercase();
    let t = [".docx", ".doc", ".pptx", ".pdf"].iter().find(|ext| lower.ends_with(*ext)).map_or(t, |ext| &t[..t.len() - ext.len()]);
    t.trim().to_string()
}

fn file_stem(path: &Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_default()
}

/// Decodes text bytes: UTF-8 (with or without BOM), else Windows-1252; binary data is an error.
fn decode_text(bytes: &[u8]) -> Result<(String, &'static str), String> {
    if bytes.contains(&0) {
        return Err("binary data in a text file (NUL bytes)".into());
    }
    let bytes = bytes.strip_prefix(&[0xEF, 0xBB, 0xBF]).unwrap_or(bytes);
    match std::str::from_utf8(bytes) {
        Ok(s) => Ok((s.to_string(), "utf-8")),
        Err(_) => Ok((bytes.iter().map(|&b| windows_1252(b)).collect(), "windows-1252")),
    }
}

fn windows_1252(b: u8) -> char {
    const HIGH: [char; 32] = [
        '€', '\u{81}', '‚', 'ƒ', '„', '…', '†', '‡', 'ˆ', '‰', 'Š', '‹', 'Œ', '\u{8D}', 'Ž', '\u{8F}', '\u{90}', '‘', '’', '“', '”',
        '•', '–', '—', '˜', '™', 'š', '›', 'œ', '\u{9D}', 'ž', 'Ÿ',
    ];
    match b {
        0x80..=0x9F => HIGH[(b - 0x80) as usize],
        _ => b as char,
    }
}

fn read_text_document(file: &InputFile, file_hash: &str, fmt: Format, fields: &JsonlFields) -> Result<RawDoc, String> {
    let bytes = std::fs::read(&file.path).map_err(|e| format!("cannot read: {e}"))?;
    if gauge_core::hash::bytes_hash(&bytes) != file_hash {
        return Err(CHANGED.to_string());
    }
    let (text, encoding) = decode_text(&bytes)?;
    let doc_id = file_hash[..16].to_string();
    // A text file of TREC `<DOC>` records is read as records.
    let fmt = if fmt == Format::Text && text.trim_start().starts_with("<DOC>") { Format::Trec } else { fmt };
    let records_doc = |records: Vec<(String, String, String)>, what: &str| -> Result<RawDoc, String> {
        if records.is_empty() {
            return Err(format!("{what} file holds no records"));
        }
        let mut pages = Vec::new();
        let mut sources = Vec::new();
        for (id, title, body) in records {
            let rec_id = hash::short_id(&[id.as_bytes(), body.as_bytes()]);
            sources.push((format!("{}#{id}", file.source), rec_id, if title.is_empty() { id.clone() } else { title }, serde_json::json!({})));
            pages.push(body);
        }
        Ok(RawDoc { file: file.clone(), doc_id: doc_id.clone(), title: String::new(), metadata: serde_json::Value::Null, pages, record_sources: Some(sources) })
    };
    match fmt {
        Format::Tsv => {
            let mut records = Vec::new();
            for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
                let cols: Vec<&str> = line.split('\t').collect();
                let (id, title, body) = match cols[..] {
                    [id, body] => (id, "", body),
                    [id, title, body] => (id, title, body),
                    [id, _url, title, body] => (id, title, body),
                    _ => return Err(format!("line {}: expected `id<TAB>text`, `id<TAB>title<TAB>text` or `id<TAB>url<TAB>title<TAB>body` ({} columns)", n + 1, cols.len())),
                };
                if id.trim().is_empty() {
                    return Err(format!("line {}: empty record id", n + 1));
                }
                records.push((id.trim().to_string(), title.trim().to_string(), body.trim().to_string()));
            }
            records_doc(records, "TSV")
        }
        Format::Trec => records_doc(trec_records(&text)?, "TREC"),
        Format::Text | Format::Markdown => {
            let title = if fmt == Format::Markdown {
                text.lines().find_map(|l| l.strip_prefix("# ").map(|t| t.trim().to_string()))
            } else {
                None
            }
            .unwrap_or_else(|| file_stem(&file.path));
            Ok(RawDoc {
                file: file.clone(),
                doc_id,
                title,
                metadata: serde_json::json!({ "encoding": encoding }),
                pages: vec![text],
                record_sources: None,
            })
        }
        Format::Jsonl => {
            let mut pages = Vec::new();
            let mut records = Vec::new();
            for (n, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                let value: serde_json::Value =
                    serde_json::from_str(line).map_err(|e| format!("line {}: invalid JSON ({e})", n + 1))?;
                let serde_json::Value::Object(mut obj) = value else {
                    return Err(format!("line {}: expected a JSON object", n + 1));
                };
                let text = match obj.remove(&fields.text) {
                    Some(serde_json::Value::String(s)) => s,
                    _ => return Err(format!("line {}: no string field `{}` (set --jsonl-text-field)", n + 1, fields.text)),
                };
                let id = match obj.remove(&fields.id) {
                    Some(serde_json::Value::String(s)) => s,
                    Some(v @ serde_json::Value::Number(_)) => v.to_string(),
                    _ => return Err(format!("line {}: no field `{}` (set --jsonl-id-field)", n + 1, fields.id)),
                };
                let title = match obj.remove(&fields.title) {
                    Some(serde_json::Value::String(s)) => s,
                    _ => id.clone(),
                };
                let rec_id = hash::short_id(&[line.as_bytes()]);
                records.push((format!("{}#{id}", file.source), rec_id, title, serde_json::Value::Object(obj)));
                pages.push(text);
            }
            if records.is_empty() {
                return Err("JSONL file holds no records".into());
            }
            Ok(RawDoc {
                file: file.clone(),
                doc_id,
                title: String::new(),
                metadata: serde_json::Value::Null,
                pages,
                record_sources: Some(records),
            })
        }
        Format::Pdf => unreachable!("PDFs are read by the pdf module"),
    }
}

/// The records of a TREC SGML file: (DOCNO, headline or title, text): the `<TEXT>` sections
/// joined (the whole record without its DOCNO when it has none), inner tags removed.
fn trec_records(text: &str) -> Result<Vec<(String, String, String)>, String> {
    let strip = |s: &str| -> String {
        let mut out = String::with_capacity(s.len());
        let mut in_tag = false;
        for ch in s.chars() {
            match ch {
                '<' => in_tag = true,
                '>' if in_tag => {
                    in_tag = false;
                    out.push(' ');
                }
                c if !in_tag => out.push(c),
                _ => {}
            }
        }
        out.split_whitespace().collect::<Vec<_>>().join(" ")
    };
    let between = |s: &str, open: &str, close: &str| -> Vec<String> {
        let mut v = Vec::new();
        let mut rest = s;
        while let Some(a) = rest.find(open) {
            let after = &rest[a + open.len()..];
            let Some(b) = after.find(close) else { break };
            v.push(after[..b].to_string());
            rest = &after[b + close.len()..];
        }
        v
    };
    let mut out = Vec::new();
    for (n, doc) in between(text, "<DOC>", "</DOC>").into_iter().enumerate() {
        let id = between(&doc, "<DOCNO>", "</DOCNO>").first().map(|d| d.trim().to_string()).filter(|d| !d.is_empty()).ok_or_else(|| format!("record {}: no <DOCNO>", n + 1))?;
        let title = between(&doc, "<HEADLINE>", "</HEADLINE>").into_iter().chain(between(&doc, "<TITLE>", "</TITLE>")).next().map(|t| strip(&t)).unwrap_or_default();
        let texts = between(&doc, "<TEXT>", "</TEXT>");
        let body = if texts.is_empty() { strip(&doc.replacen(&format!("<DOCNO>{}</DOCNO>", between(&doc, "<DOCNO>", "</DOCNO>")[0]), "", 1)) } else { strip(&texts.join("\n")) };
        out.push((id, title, body));
    }
    if out.is_empty() && text.contains("<DOC>") {
        return Err("a <DOC> without its </DOC>".into());
    }
    Ok(out)
}

/// Applies character- and document-level cleaning and flattens documents into page rows.
fn clean_documents(docs: Vec<RawDoc>, cfg: &CleaningConfig, n_files: usize, n_failed: usize) -> (Vec<PageRecord>, ExtractStats) {
    let mut stats = ExtractStats { files: n_files, failed_files: n_failed, ..Default::default() };
    let mut cleaned: Vec<(RawDoc, Vec<String>)> = docs
        .into_par_iter()
        .map(|doc| {
            let pages: Vec<String> = doc.pages.iter().map(|p| clean::clean_chars(p, cfg)).collect();
            (doc, pages)
        })
        .collect();
    for (doc, pages) in cleaned.iter_mut() {
        if cfg.headers_footers && doc.record_sources.is_none() {
            stats.header_footer_lines_removed += clean::remove_headers_footers(pages, cfg);
        }
    }
    if cfg.hyphen_join {
        let vocabulary: HashSet<String> = cleaned.iter().flat_map(|(_, p)| p.iter().flat_map(|t| clean::words(t))).collect();
        for (_, pages) in cleaned.iter_mut() {
            for page in pages.iter_mut() {
                let (t, s, c) = clean::join_hyphens(page, &vocabulary);
                *page = t;
                stats.hyphen_splits_joined += s;
                stats.hyphen_compounds_kept += c;
            }
        }
    }
    let mut rows = Vec::new();
    for (doc, pages) in cleaned {
        match &doc.record_sources {
            Some(records) => {
                for ((source, doc_id, title, meta), text) in records.iter().zip(pages) {
                    stats.documents += 1;
                    let empty = text.trim().is_empty();
                    rows.push(PageRecord {
                        doc_id: doc_id.clone(),
                        source: source.clone(),
                        doc_type: doc.file.doc_type.clone(),
                        title: title.clone(),
                        page: 1,
                        text: if empty { String::new() } else { text },
                        empty,
                        metadata: meta.to_string(),
                    });
                }
            }
            None => {
                stats.documents += 1;
                let metadata = doc.metadata.to_string();
                for (i, text) in pages.into_iter().enumerate() {
                    let empty = text.trim().is_empty();
                    rows.push(PageRecord {
                        doc_id: doc.doc_id.clone(),
                        source: doc.file.source.clone(),
                        doc_type: doc.file.doc_type.clone(),
                        title: doc.title.clone(),
                        page: i as i32 + 1,
                        text: if empty { String::new() } else { text },
                        empty,
                        metadata: metadata.clone(),
                    });
                }
            }
        }
    }
    stats.pages = rows.len();
    stats.empty_pages = rows.iter().filter(|r| r.empty).count();
    (rows, stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_file_that_changes_between_hashing_and_reading_stops_the_run() {
        use gauge_core::artifact::{ArtifactStore, StageOutcome, StageSpec};
        let tmp = tempfile::tempdir().unwrap();
        let corpus = tmp.path().join("corpus");
        std::fs::create_dir_all(&corpus).unwrap();
        std::fs::write(corpus.join("a.md"), "# A\nfirst lines").unwrap();
        let opts = ExtractOptions::default();
        let config = ExtractConfig::default();
        let plan = Extract::plan(&config, &vec![corpus.clone()], &opts).unwrap();
        let spec = StageSpec { stage: STAGE, format_version: FORMAT_VERSION, config: &config, inputs: plan.inputs, seed: None };
        let StageOutcome::Run(mut run) = ArtifactStore::new(tmp.path().join("artifacts")).begin(spec, false).unwrap() else { unreachable!("a fresh store") };
        // The file grows after the plan hashed it (before: pages held lines the hash never saw).
        std::fs::write(corpus.join("a.md"), "# A\nfirst lines\nand more written since").unwrap();
        let e = extract_files(&plan.state.0, &mut run, &config, &opts).expect_err("refused").to_string();
        assert!(e.contains("a.md") && e.contains("changed while extract ran"), "{e}");
    }

    #[test]
    fn the_artifact_store_inside_the_corpus_is_not_read_and_a_fifo_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let corpus = tmp.path().join("corpus");
        std::fs::create_dir_all(corpus.join("artifacts/synth/f")).unwrap();
        std::fs::write(corpus.join("a.md"), "# A\ntext").unwrap();
        std::fs::write(corpus.join("artifacts/synth/f/golden.jsonl"), "{}").unwrap();
        let (files, _) = walk::discover_skipping(std::slice::from_ref(&corpus), false, &[corpus.join("artifacts")]).unwrap();
        let names: Vec<&str> = files.iter().map(|f| f.source.as_str()).collect();
        assert_eq!(names, ["a.md"], "before: every run read the previous run's outputs");
        let fifo = tmp.path().join("pipe.md");
        if std::process::Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success()) {
            let e = discover(&[fifo], false).unwrap_err().to_string();
            assert!(e.contains("not a regular file or a folder"), "before: \"no such file\": {e}");
        }
    }

    #[test]
    fn links_are_followed_once_and_only_inside_the_input_folder() {
        use std::os::unix::fs::symlink;
        let tmp = tempfile::tempdir().unwrap();
        let corpus = tmp.path().join("corpus");
        std::fs::create_dir_all(corpus.join("manuals")).unwrap();
        std::fs::write(corpus.join("a.md"), "# A\ntext").unwrap();
        std::fs::write(corpus.join("manuals/b.md"), "# B\ntext").unwrap();
        let outside = tmp.path().join("elsewhere");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.md"), "# S\ntext").unwrap();
        symlink(".", corpus.join("loop")).unwrap();
        symlink("..", corpus.join("manuals/up")).unwrap();
        symlink(&outside, corpus.join("out")).unwrap();
        symlink(corpus.join("nowhere"), corpus.join("broken")).unwrap();
        symlink("manuals", corpus.join("alias")).unwrap();
        let (files, skips) = discover(std::slice::from_ref(&corpus), false).unwrap();
        let sources: Vec<&str> = files.iter().map(|f| f.source.as_str()).collect();
        // `alias -> manuals` is the same folder as manuals: read once, under its own name.
        assert_eq!(sources, ["a.md", "manuals/b.md"]);
        assert_eq!(skips, WalkSkips { loops: 3, outside: 1, broken: 1 });
        let (files, skips) = discover(&[corpus], true).unwrap();
        assert!(files.iter().any(|f| f.source == "out/secret.md"), "asked to follow links outside");
        assert_eq!(skips.outside, 0);
    }
}
