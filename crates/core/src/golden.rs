//! The golden-set format: one question a row, in JSONL or Parquet. `synth-data` writes it
//! (plus provenance fields), `evaluate` reads it; this module is the one definition.
use std::collections::HashSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

mod folder;
pub mod provenance;
use folder::{folder_files, read_folder};
pub use provenance::{model_family, resolve_provenance, Provenance};

/// Errors reading a golden set.
#[derive(Debug, thiserror::Error)]
pub enum GoldenError {
    /// The file cannot be read.
    #[error("{path}: cannot read golden set ({message})")]
    Read {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// A row is malformed.
    #[error("{path}:{line}: {message}")]
    Row {
        /// The file.
        path: String,
        /// 1-based line (JSONL) or row (Parquet).
        line: usize,
        /// What is wrong and how to fix it.
        message: String,
    },
}

/// A gold passage: a page of a source, or a character span of a source's extracted text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum GoldItem {
    /// Characters `[char_start, char_end)` of the document text `extract` produced.
    Span {
        /// Source file (as `extract` names it: the path under the corpus root).
        source: String,
        /// Start offset (characters).
        char_start: i64,
        /// End offset (characters, exclusive).
        char_end: i64,
        /// First page of the span, when known (page mode then judges by pages, which
        /// survives a change of extraction settings).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        page_start: Option<i32>,
        /// Last page of the span, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        page_end: Option<i32>,
        /// Graded relevance (nDCG's gain; default 1).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        grade: Option<f64>,
    },
    /// A 1-based page.
    Page {
        /// Source file.
        source: String,
        /// 1-based page number.
        page: i32,
        /// Graded relevance (nDCG's gain; default 1).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        grade: Option<f64>,
    },
}

impl GoldItem {
    /// The grade as written, when one was.
    pub fn grade_given(&self) -> Option<f64> {
        match self {
            GoldItem::Span { grade, .. } | GoldItem::Page { grade, .. } => *grade,
        }
    }

    /// The pages it covers, when known.
    pub fn pages(&self) -> Option<(i32, i32)> {
        match self {
            GoldItem::Page { page, .. } => Some((*page, *page)),
            GoldItem::Span { page_start: Some(a), page_end: Some(b), .. } => Some((*a, *b)),
            GoldItem::Span { .. } => None,
        }
    }

    /// Page relevance (the one definition `evaluate` and the retriever training share): a
    /// passage of `source` spanning pages `pages` and characters `chars` covers a page item
    /// whose page lies in its range, a span item with pages whose range overlaps, or a span
    /// item without pages whose characters overlap.
    pub fn covered_by_pages(&self, source: &str, pages: (i32, i32), chars: (i64, i64)) -> bool {
        match self {
            GoldItem::Page { page, .. } => self.matches_source(source) && pages.0 <= *page && *page <= pages.1,
            GoldItem::Span { page_start: Some(a), page_end: Some(b), .. } => self.matches_source(source) && pages.0 <= *b && *a <= pages.1,
            GoldItem::Span { .. } => self.covered_by_chars(source, chars),
        }
    }

    /// Span relevance: a span item whose characters overlap the passage's (page items never).
    pub fn covered_by_chars(&self, source: &str, chars: (i64, i64)) -> bool {
        match self {
            GoldItem::Span { char_start, char_end, .. } => self.matches_source(source) && chars.0 < *char_end && *char_start < chars.1,
            GoldItem::Page { .. } => false,
        }
    }

    /// Its graded relevance: the golden set's `grade` (a qrels file's level), 1 when not given.
    pub fn grade(&self) -> f64 {
        match self {
            GoldItem::Span { grade, .. } | GoldItem::Page { grade, .. } => grade.unwrap_or(1.0),
        }
    }

    /// Whether a passage's source is this item's: the same name, or — for an item naming a
    /// record as `#<id>` (TREC and MS MARCO qrels, which know document ids, not files) — a
    /// record `<file>#<id>` of any file.
    pub fn matches_source(&self, source: &str) -> bool {
        let s = self.source();
        s == source || (s.starts_with('#') && source.find('#').is_some_and(|i| &source[i..] == s))
    }

    /// Its document id in gauge's item-level TREC files (`trec/items.qrels`): a record's own
    /// id for a TREC / MS MARCO / BEIR item (`#<id>`, page 1), else `<source>#p<page>` or
    /// `<source>#c<start>-<end>`; whitespace becomes `_` (TREC ids hold none).
    pub fn trec_docno(&self) -> String {
        let id = match self {
            GoldItem::Page { source, page: 1, .. } if source.starts_with('#') => source[1..].to_string(),
            GoldItem::Page { source, page, .. } => format!("{source}#p{page}"),
            GoldItem::Span { source, char_start, char_end, .. } => format!("{source}#c{char_start}-{char_end}"),
        };
        id.split_whitespace().collect::<Vec<_>>().join("_")
    }

    /// The source file.
    pub fn source(&self) -> &str {
        match self {
            GoldItem::Span { source, .. } | GoldItem::Page { source, .. } => source,
        }
    }
}

/// One golden question. Fields beyond these (`section`, `verified`, `thinking`, …) are kept
/// by the file but ignored here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoldenQuestion {
    /// Unique id.
    pub qid: String,
    /// The question.
    pub question: String,
    /// Gold passages (page or span).
    #[serde(default)]
    pub gold: Vec<GoldItem>,
    /// Keywords a relevant passage contains.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keywords: Vec<String>,
    /// Reference answer.
    #[serde(default)]
    pub reference_answer: Option<String>,
    /// Category (question style, topic…); metrics are also reported per category.
    #[serde(default)]
    pub category: Option<String>,
}

impl GoldenQuestion {
    /// A question with its gold items (no keywords, reference answer or category).
    pub fn new(qid: String, question: String, gold: Vec<GoldItem>) -> GoldenQuestion {
        GoldenQuestion { qid, question, gold, keywords: Vec::new(), reference_answer: None, category: None }
    }

    /// The same question in `category`.
    pub fn in_category(self, category: impl Into<String>) -> GoldenQuestion {
        GoldenQuestion { category: Some(category.into()), ..self }
    }
}

/// Splits questions into two halves by page group, so that no gold page (nor a page next to
/// one, which often continues it) is judged in both: questions whose gold pages are equal or
/// adjacent in the same source form one group; the groups are shuffled with `seed` and each
/// joins the half holding fewer questions so far. Returns, per question, whether it is in the
/// second half (the held-out one). Questions without gold pages are groups of their own.
pub fn page_halves(questions: &[GoldenQuestion], seed: u64) -> Vec<bool> {
    page_split(questions, 0.5, seed)
}

/// [`page_halves`] with the second part holding `share` of the questions (0 < share < 1):
/// each shuffled page group joins the second part while it holds less than `share` of the
/// questions placed so far. `share = 0.5` is [`page_halves`].
pub fn page_split(questions: &[GoldenQuestion], share: f64, seed: u64) -> Vec<bool> {
    let pages: Vec<Vec<(&str, i32)>> = questions.iter().map(|q| q.gold.iter().filter_map(|g| g.pages().map(|(a, b)| (a..=b).map(move |p| (g.source(), p)))).flatten().collect()).collect();
    let mut group: Vec<usize> = (0..questions.len()).collect();
    fn root(group: &mut [usize], mut i: usize) -> usize {
        while group[i] != i {
            group[i] = group[group[i]];
            i = group[i];
        }
        i
    }
    for i in 0..questions.len() {
        for j in 0..i {
            let near = pages[i].iter().any(|(s, p)| pages[j].iter().any(|(t, q)| s == t && (p - q).abs() <= 1));
            if near {
                let (a, b) = (root(&mut group, i), root(&mut group, j));
                group[a] = b;
            }
        }
    }
    let mut groups: std::collections::BTreeMap<usize, Vec<usize>> = std::collections::BTreeMap::new();
    for i in 0..questions.len() {
        let r = root(&mut group, i);
        groups.entry(r).or_default().push(i);
    }
    let mut groups: Vec<Vec<usize>> = groups.into_values().collect();
    crate::rng::SplitMix64::new(seed).shuffle(&mut groups);
    let mut second = vec![false; questions.len()];
    let (mut first_n, mut second_n) = (0, 0);
    for g in groups {
        if (second_n as f64) * (1.0 - share) < (first_n as f64) * share {
            second_n += g.len();
            g.iter().for_each(|&i| second[i] = true);
        } else {
            first_n += g.len();
        }
    }
    second
}

/// Sources named by the gold passages that the corpus does not hold, each with up to three
/// closest existing sources (by edit distance), so a typo is refused instead of scoring 0.
pub fn unknown_sources<'a>(questions: &[GoldenQuestion], corpus_sources: impl IntoIterator<Item = &'a str>) -> Vec<(String, Vec<String>)> {
    let known: std::collections::BTreeSet<&str> = corpus_sources.into_iter().collect();
    // Record ids (`#<id>`) of records named `<file>#<id>`.
    let records: std::collections::HashSet<&str> = known.iter().filter_map(|s| s.find('#').map(|i| &s[i..])).collect();
    let wanted: std::collections::BTreeSet<&str> = questions.iter().flat_map(|q| &q.gold).map(GoldItem::source).collect();
    wanted
        .into_iter()
        .filter(|s| !(known.contains(s) || (s.starts_with('#') && records.contains(s))))
        .map(|s| (s.to_string(), crate::text::closest(s, known.iter().copied(), 3)))
        .collect()
}

/// Gold pages past the end of their document: `(qid, source, page, last page)` for every gold
/// item whose pages reach beyond the last page `extract` found for its source (`last_pages`:
/// source → last page). Sources the corpus does not hold are [`unknown_sources`]' business.
pub fn pages_out_of_range(questions: &[GoldenQuestion], last_pages: &std::collections::BTreeMap<String, i32>) -> Vec<(String, String, i32, i32)> {
    let mut out = Vec::new();
    for q in questions {
        for g in &q.gold {
            let Some((_, end)) = g.pages() else { continue };
            let last = last_pages.iter().filter(|(s, _)| g.matches_source(s)).map(|(_, p)| *p).max();
            if let Some(last) = last.filter(|last| end > *last) {
                out.push((q.qid.clone(), g.source().to_string(), end, last));
            }
        }
    }
    out
}

/// Writes golden rows (or any serialisable rows) as JSONL.
pub fn write_jsonl<T: Serialize>(path: &Path, rows: impl IntoIterator<Item = T>) -> Result<(), crate::CoreError> {
    use std::io::Write;
    let file = std::fs::File::create(path).map_err(|e| crate::CoreError::io(path, e))?;
    let mut w = std::io::BufWriter::new(file);
    for row in rows {
        let line = serde_json::to_string(&row).expect("rows serialise");
        writeln!(w, "{line}").map_err(|e| crate::CoreError::io(path, e))?;
    }
    w.flush().map_err(|e| crate::CoreError::io(path, e))
}

/// The longest question gauge searches (bytes): a scenario question runs to a few thousand
/// characters; anything longer is a pasted document, and its cost grows with its length.
pub const MAX_QUESTION_BYTES: usize = 16 * 1024;

/// Reads a golden set (`.jsonl`/`.json` lines, or `.parquet`) and checks it: at least one
/// question, unique ids, a non-empty question of at most [`MAX_QUESTION_BYTES`], gold or
/// keywords on every row, 1-based page ranges in order, finite grades.
pub fn load_golden(path: &Path) -> Result<Vec<GoldenQuestion>, GoldenError> {
    let p = path.display().to_string();
    let questions = match path.extension().and_then(|e| e.to_str()) {
        _ if path.is_dir() => read_folder(path)?,
        Some("parquet") => read_parquet(path)?,
        _ => read_jsonl(path)?,
    };
    if questions.is_empty() {
        return Err(GoldenError::Read { path: p, message: "no questions; one JSON object per line with `qid` and `question`".into() });
    }
    let mut seen = HashSet::new();
    for (i, q) in questions.iter().enumerate() {
        let row = |message: String| GoldenError::Row { path: p.clone(), line: i + 1, message };
        if q.qid.is_empty() || q.qid.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(row(format!("qid {:?} is empty or holds whitespace or a control character; TREC run and qrels files separate their fields by whitespace, so write it without (e.g. {:?})", q.qid, q.qid.split(|c: char| c.is_whitespace() || c.is_control()).filter(|p| !p.is_empty()).collect::<Vec<_>>().join("_"))));
        }
        if !seen.insert(q.qid.as_str()) {
            return Err(row(format!("duplicate qid `{}`; qids must be unique", q.qid)));
        }
        if q.question.trim().is_empty() {
            return Err(row(format!("question `{}` is empty", q.qid)));
        }
        if q.question.len() > MAX_QUESTION_BYTES {
            return Err(row(format!("question `{}` is {} bytes long; at most {MAX_QUESTION_BYTES} (shorten it)", q.qid, q.question.len())));
        }
        if let Some((a, b)) = q.gold.iter().filter_map(GoldItem::pages).find(|(a, b)| *a < 1 || b < a) {
            return Err(row(format!("question `{}` has gold pages {a}..{b}; pages are 1-based and the first comes before the last", q.qid)));
        }
        if let Some(g) = q.gold.iter().filter_map(GoldItem::grade_given).find(|g| !g.is_finite() || *g < 0.0) {
            return Err(row(format!("question `{}` has a gold grade of {g}; grades are finite and ≥ 0", q.qid)));
        }
        if q.gold.is_empty() && q.keywords.is_empty() {
            return Err(row(format!("question `{}` has neither `gold` nor `keywords`; add one so it can be judged", q.qid)));
        }
        if let Some(GoldItem::Span { char_start, char_end, .. }) = q.gold.iter().find(|g| matches!(g, GoldItem::Span { char_start, char_end, .. } if char_end <= char_start)) {
            return Err(row(format!("question `{}` has an empty span [{char_start}, {char_end})", q.qid)));
        }
    }
    Ok(questions)
}

/// The content hash of a golden set: its file's, or for a benchmark folder its queries' (or
/// topics') and its qrels' together.
pub fn golden_hash(path: &Path) -> Result<String, crate::CoreError> {
    if !path.is_dir() {
        return crate::hash::file_hash(path);
    }
    let (_, queries, qrels) = folder_files(path).map_err(|e| crate::CoreError::io(path, std::io::Error::other(e.to_string())))?;
    let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let mut parts = vec![crate::hash::file_hash(&queries)?, crate::hash::file_hash(&qrels)?, name(&qrels)];
    // A BEIR folder's hash as before (its queries file is always queries.jsonl).
    if name(&queries) != "queries.jsonl" {
        parts.push(name(&queries));
    }
    Ok(crate::hash::bytes_hash(parts.join("\n").as_bytes()))
}

fn read_jsonl(path: &Path) -> Result<Vec<GoldenQuestion>, GoldenError> {
    let p = path.display().to_string();
    let text = crate::read::read_bounded_string(path, crate::read::DATA_LIMIT).map_err(|e| GoldenError::Read { path: p.clone(), message: e.to_string() })?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let q: GoldenQuestion = serde_json::from_str(line).map_err(|e| GoldenError::Row {
            path: p.clone(),
            line: i + 1,
            message: format!("{e}; expected {{\"qid\", \"question\", \"gold\": [{{\"source\", \"page\"}}] or \"keywords\": [...]}}"),
        })?;
        out.push(q);
    }
    Ok(out)
}

/// Parquet golden sets: `qid`, `question` (strings) and any of `gold` (a JSON string holding
/// the list), `keywords` (list of strings or a JSON string), `reference_answer`, `category`.
fn read_parquet(path: &Path) -> Result<Vec<GoldenQuestion>, GoldenError> {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::DataType;
    let p = path.display().to_string();
    let batch = crate::table::read_parquet_any(path).map_err(|e| GoldenError::Read { path: p.clone(), message: e.to_string() })?;
    let col = |name: &str| batch.column_by_name(name).cloned();
    let strings = |name: &str| -> Result<Option<Vec<Option<String>>>, GoldenError> {
        let Some(c) = col(name) else { return Ok(None) };
        let c = arrow::compute::cast(&c, &DataType::Utf8).map_err(|_| GoldenError::Read { path: p.clone(), message: format!("column `{name}` must be a string") })?;
        let s = c.as_string::<i32>();
        Ok(Some((0..s.len()).map(|i| if s.is_null(i) { None } else { Some(s.value(i).to_string()) }).collect()))
    };
    let need = |name: &str| -> Result<Vec<Option<String>>, GoldenError> {
        strings(name)?.ok_or_else(|| GoldenError::Read { path: p.clone(), message: format!("no `{name}` column; a golden set needs `qid` and `question`") })
    };
    let qids = need("qid")?;
    let questions = need("question")?;
    let gold = strings("gold")?;
    let answers = strings("reference_answer")?;
    let categories = strings("category")?;
    let keywords: Option<Vec<Vec<String>>> = match col("keywords") {
        None => None,
        Some(c) if matches!(c.data_type(), DataType::List(_) | DataType::LargeList(_)) => {
            let c = arrow::compute::cast(&c, &DataType::List(std::sync::Arc::new(arrow::datatypes::Field::new("item", DataType::Utf8, true))))
                .map_err(|_| GoldenError::Read { path: p.clone(), message: "column `keywords` must be a list of strings".into() })?;
            let l = c.as_list::<i32>();
            Some((0..l.len()).map(|i| if l.is_null(i) { Vec::new() } else { l.value(i).as_string::<i32>().iter().flatten().map(str::to_string).collect() }).collect())
        }
        Some(_) => {
            let raw = strings("keywords")?.unwrap_or_default();
            let mut v = Vec::new();
            for (i, r) in raw.iter().enumerate() {
                v.push(match r {
                    None => Vec::new(),
                    Some(s) => serde_json::from_str(s).map_err(|e| GoldenError::Row { path: p.clone(), line: i + 1, message: format!("`keywords` is not a JSON list of strings: {e}") })?,
                });
            }
            Some(v)
        }
    };
    let mut out = Vec::with_capacity(qids.len());
    for i in 0..qids.len() {
        let g = match gold.as_ref().and_then(|g| g[i].as_deref()) {
            None => Vec::new(),
            Some(s) => serde_json::from_str(s).map_err(|e| GoldenError::Row {
                path: p.clone(),
                line: i + 1,
                message: format!("`gold` is not a JSON list of {{source, page}} or {{source, char_start, char_end}}: {e}"),
            })?,
        };
        let required = |v: &Option<String>, what: &str| {
            v.clone().filter(|s| !s.trim().is_empty()).ok_or_else(|| GoldenError::Row { path: p.clone(), line: i + 1, message: format!("`{what}` is null or empty") })
        };
        out.push(GoldenQuestion {
            qid: required(&qids[i], "qid")?,
            question: required(&questions[i], "question")?,
            gold: g,
            keywords: keywords.as_ref().map(|k| k[i].clone()).unwrap_or_default(),
            reference_answer: answers.as_ref().and_then(|a| a[i].clone()),
            category: categories.as_ref().and_then(|c| c[i].clone()),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {

    #[test]
    fn page_halves_never_share_a_page_or_its_neighbour() {
        let q = |id: &str, src: &str, pages: &[i32]| GoldenQuestion::new(id.into(), id.into(), pages.iter().map(|&p| GoldItem::Page { source: src.into(), page: p, grade: None }).collect());
        let qs = vec![q("a", "m.pdf", &[10]), q("b", "m.pdf", &[11]), q("c", "m.pdf", &[30]), q("d", "n.pdf", &[10]), q("e", "m.pdf", &[10, 50]), q("f", "m.pdf", &[51]), q("g", "n.pdf", &[90]), q("h", "m.pdf", &[70])];
        for seed in 0..20 {
            let h = page_halves(&qs, seed);
            // a, b (adjacent), e (same page 10), f (next to e's 50) travel together.
            assert!(h[0] == h[1] && h[0] == h[4] && h[4] == h[5], "seed {seed}: {h:?}");
            let n = h.iter().filter(|&&x| x).count();
            assert!((1..qs.len()).contains(&n), "both halves hold questions: {h:?}");
            assert_eq!(h, page_halves(&qs, seed), "a seed fixes the split");
        }
        assert_ne!((0..20).map(|s| page_halves(&qs, s)).collect::<std::collections::BTreeSet<_>>().len(), 1, "seeds differ");
    }

    #[test]
    fn page_split_gives_the_second_part_its_share() {
        let q = |i: i32| GoldenQuestion::new(format!("q{i}"), "?".into(), vec![GoldItem::Page { source: "m.pdf".into(), page: i * 10, grade: None }]);
        let qs: Vec<GoldenQuestion> = (0..40).map(q).collect();
        for (share, want) in [(0.25, 10), (0.4, 16), (0.5, 20)] {
            for seed in 0..5 {
                let second = page_split(&qs, share, seed).iter().filter(|&&x| x).count();
                assert_eq!(second, want, "share {share}, seed {seed}");
            }
        }
        assert_eq!(page_split(&qs, 0.5, 7), page_halves(&qs, 7));
    }

    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn reads_pages_spans_and_keywords() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "g.jsonl",
            r#"{"qid":"a","question":"q1","gold":[{"source":"x.pdf","page":3},{"source":"x.pdf","char_start":10,"char_end":20}],"section":"ignored"}

{"qid":"b","question":"q2","keywords":["gate arm"],"category":"factual"}
"#,
        );
        let g = load_golden(&p).unwrap();
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].gold[0], GoldItem::Page { source: "x.pdf".into(), page: 3, grade: None });
        assert_eq!(g[0].gold[1], GoldItem::Span { source: "x.pdf".into(), char_start: 10, char_end: 20, page_start: None, page_end: None, grade: None });
        assert_eq!(g[1].keywords, vec!["gate arm".to_string()]);
        assert_eq!(g[1].category.as_deref(), Some("factual"));
    }

    #[test]
    fn reads_parquet_golden_sets() {
        use arrow::array::{ArrayRef, ListBuilder, StringArray, StringBuilder};
        use arrow::datatypes::{DataType, Field, Schema};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.parquet");
        let mut kw = ListBuilder::new(StringBuilder::new());
        kw.values().append_value("gate arm");
        kw.append(true);
        kw.append(true);
        let cols: Vec<ArrayRef> = vec![
            std::sync::Arc::new(StringArray::from(vec!["a", "b"])),
            std::sync::Arc::new(StringArray::from(vec!["q one", "q two"])),
            std::sync::Arc::new(StringArray::from(vec![None, Some(r#"[{"source":"x.pdf","page":4}]"#)])),
            std::sync::Arc::new(kw.finish()),
            std::sync::Arc::new(StringArray::from(vec![Some("factual"), None])),
        ];
        let schema = Schema::new(vec![
            Field::new("qid", DataType::Utf8, false),
            Field::new("question", DataType::Utf8, false),
            Field::new("gold", DataType::Utf8, true),
            Field::new("keywords", DataType::List(std::sync::Arc::new(Field::new("item", DataType::Utf8, true))), true),
            Field::new("category", DataType::Utf8, true),
        ]);
        crate::table::write_parquet(&path, std::sync::Arc::new(schema), cols).unwrap();
        let g = load_golden(&path).unwrap();
        assert_eq!(g[0].keywords, vec!["gate arm".to_string()]);
        assert_eq!(g[0].category.as_deref(), Some("factual"));
        assert_eq!(g[1].gold, vec![GoldItem::Page { source: "x.pdf".into(), page: 4, grade: None }]);
        assert!(g[1].keywords.is_empty() && g[1].category.is_none());
        // A Parquet file without `question` names the column.
        let bad = dir.path().join("bad.parquet");
        let schema = Schema::new(vec![Field::new("qid", DataType::Utf8, false)]);
        crate::table::write_parquet(&bad, std::sync::Arc::new(schema), vec![std::sync::Arc::new(StringArray::from(vec!["a"])) as ArrayRef]).unwrap();
        let e = load_golden(&bad).unwrap_err().to_string();
        assert!(e.contains("bad.parquet") && e.contains("`question`"), "{e}");
        // A null qid is an error naming its row, not a question with id "".
        let nulls = dir.path().join("nulls.parquet");
        let schema = Schema::new(vec![Field::new("qid", DataType::Utf8, true), Field::new("question", DataType::Utf8, true), Field::new("gold", DataType::Utf8, true)]);
        let cols: Vec<ArrayRef> = vec![
            std::sync::Arc::new(StringArray::from(vec![Some("a"), None])),
            std::sync::Arc::new(StringArray::from(vec!["q one", "q two"])),
            std::sync::Arc::new(StringArray::from(vec![r#"[{"source":"x.pdf","page":4}]"#, r#"[{"source":"x.pdf","page":5}]"#])),
        ];
        crate::table::write_parquet(&nulls, std::sync::Arc::new(schema), cols).unwrap();
        let e = load_golden(&nulls).unwrap_err().to_string();
        assert!(e.contains("nulls.parquet") && e.contains("qid"), "{e}");
    }

    #[test]
    fn bad_rows_name_the_line_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            ("{\"qid\":\"a\",\"question\":\"q\",\"gold\":[{\"source\":\"x\",\"page\":1}]}\n{not json\n", ":2:"),
            ("{\"qid\":\"a\",\"question\":\"q\"}\n", "neither `gold` nor `keywords`"),
            ("{\"qid\":\"a\",\"question\":\"q\",\"keywords\":[\"k\"]}\n{\"qid\":\"a\",\"question\":\"r\",\"keywords\":[\"k\"]}\n", "duplicate qid"),
            ("\n", "no questions"),
            ("{\"qid\":\"a b\",\"question\":\"q\",\"keywords\":[\"k\"]}\n", "qid \"a b\" is empty or holds whitespace"),
            ("{\"qid\":\"a\\tb\",\"question\":\"q\",\"keywords\":[\"k\"]}\n", "(e.g. \"a_b\")"),
            ("{\"qid\":\"\",\"question\":\"q\",\"keywords\":[\"k\"]}\n", "qid \"\" is empty"),
        ];
        for (i, (text, want)) in cases.iter().enumerate() {
            let p = write(dir.path(), &format!("g{i}.jsonl"), text);
            let e = load_golden(&p).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
        assert!(load_golden(&dir.path().join("missing.jsonl")).unwrap_err().to_string().contains("missing.jsonl"));
    }

    #[test]
    fn gold_pages_past_the_document_end_are_found() {
        let q = |qid: &str, src: &str, page: i32| GoldenQuestion::new(qid.into(), "q".into(), vec![GoldItem::Page { source: src.into(), page, grade: None }]);
        let last: std::collections::BTreeMap<String, i32> = [("one.md".to_string(), 1), ("book.pdf".to_string(), 40)].into();
        let golden = [q("ok", "book.pdf", 40), q("past", "one.md", 99), q("far", "book.pdf", 41), q("elsewhere", "missing.pdf", 3)];
        let bad = pages_out_of_range(&golden, &last);
        assert_eq!(bad, vec![("past".to_string(), "one.md".to_string(), 99, 1), ("far".to_string(), "book.pdf".to_string(), 41, 40)]);
    }

    #[test]
    fn pages_below_one_grades_and_long_questions_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (r#"{"qid":"q0","question":"x","gold":[{"source":"a.md","page":0}]}"#, "gold pages 0..0"),
            (r#"{"qid":"q1","question":"x","gold":[{"source":"a.md","char_start":0,"char_end":5,"page_start":4,"page_end":2}]}"#, "gold pages 4..2"),
            (r#"{"qid":"q2","question":"x","gold":[{"source":"a.md","page":1,"grade":-1.0}]}"#, "grade of -1"),
        ];
        for (line, want) in cases {
            let p = dir.path().join("g.jsonl");
            std::fs::write(&p, format!("{line}\n")).unwrap();
            let e = load_golden(&p).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("g.jsonl:1"), "{want}: {e}");
        }
        let p = dir.path().join("long.jsonl");
        std::fs::write(&p, format!("{}\n", serde_json::json!({"qid": "huge", "question": "word ".repeat(10_000), "gold": [{"source": "a.md", "page": 1}]}))).unwrap();
        assert!(load_golden(&p).unwrap_err().to_string().contains("question `huge` is 50000 bytes long"));
    }

    #[test]
    fn unknown_sources_come_with_the_closest_known_ones() {
        let q = |src: &str| GoldenQuestion::new(src.into(), "q".into(), vec![GoldItem::Page { source: src.into(), page: 1, grade: None }]);
        let golden = [q("manual-a.pdf"), q("manul-b.pdf")];
        let unknown = unknown_sources(&golden, ["manual-a.pdf", "manual-b.pdf", "other.pdf"]);
        assert_eq!(unknown.len(), 1);
        assert_eq!(unknown[0].0, "manul-b.pdf");
        assert_eq!(unknown[0].1[0], "manual-b.pdf");
    }
}
