//! Benchmark folders as golden sets: BEIR (`queries.jsonl` + `qrels/*.tsv`) and TREC / MS MARCO
//! (topics + qrels), read into [`GoldenQuestion`]s with graded chunk-free gold.
use std::path::Path;

use super::{GoldItem, GoldenError, GoldenQuestion};

/// The qrels file of a BEIR folder: `qrels/test.tsv`, else the only `.tsv` under `qrels/`.
fn beir_qrels(dir: &Path) -> Result<std::path::PathBuf, GoldenError> {
    let qrels = dir.join("qrels");
    let test = qrels.join("test.tsv");
    if test.is_file() {
        return Ok(test);
    }
    let mut tsv: Vec<std::path::PathBuf> = std::fs::read_dir(&qrels).map(|r| r.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "tsv")).collect()).unwrap_or_default();
    tsv.sort();
    match tsv.len() {
        1 => Ok(tsv.remove(0)),
        n => Err(GoldenError::Read { path: dir.display().to_string(), message: format!("a BEIR folder needs queries.jsonl and qrels/test.tsv (or one qrels/*.tsv); found {n} qrels files") }),
    }
}

/// The standard benchmark folders read as golden sets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum FolderKind {
    /// `queries.jsonl` + `qrels/*.tsv` (`query-id corpus-id score`).
    Beir,
    /// One `topics*` file (SGML `<top>` or `<topic number=…>`) + one `qrels*` file (`qid iter docno rel`).
    Trec,
    /// One `queries*.tsv` (`qid<TAB>query`) + one `qrels*` file (`qid iter pid rel`).
    MsMarco,
}

/// What a golden-set folder holds: its kind, its queries (or topics) file and its qrels file.
pub(super) fn folder_files(dir: &Path) -> Result<(FolderKind, std::path::PathBuf, std::path::PathBuf), GoldenError> {
    if dir.join("queries.jsonl").is_file() {
        return Ok((FolderKind::Beir, dir.join("queries.jsonl"), beir_qrels(dir)?));
    }
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir).map(|r| r.flatten().map(|e| e.path()).filter(|p| p.is_file()).collect()).unwrap_or_default();
    files.sort();
    let named = |prefix: &str, ext: Option<&str>| -> Vec<std::path::PathBuf> {
        files.iter().filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().to_lowercase().starts_with(prefix)) && ext.is_none_or(|e| p.extension().is_some_and(|x| x == e))).cloned().collect()
    };
    let (topics, queries, qrels) = (named("topics", None), named("queries", Some("tsv")), named("qrels", None));
    match (topics.len(), queries.len(), qrels.len()) {
        (1, 0, 1) => Ok((FolderKind::Trec, topics[0].clone(), qrels[0].clone())),
        (0, 1, 1) => Ok((FolderKind::MsMarco, queries[0].clone(), qrels[0].clone())),
        _ => Err(GoldenError::Read {
            path: dir.display().to_string(),
            message: "not a golden-set folder: expected a BEIR folder (queries.jsonl + qrels/test.tsv), a TREC folder (one topics* file + one qrels* file) or an MS MARCO folder (one queries*.tsv + one qrels* file)".into(),
        }),
    }
}

/// Positive judgements of a qrels file: `query-id corpus-id score` (BEIR TSV, a header line
/// allowed) or `qid iter docno rel` (TREC, MS MARCO), whitespace-separated. Grades ≤ 0 are
/// judged not relevant and left out.
fn read_qrels(path: &Path, kind: FolderKind) -> Result<Vec<(String, String, f64)>, GoldenError> {
    let text = crate::read::read_bounded_string(path, crate::read::DATA_LIMIT).map_err(|e| GoldenError::Read { path: path.display().to_string(), message: e.to_string() })?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let cols: Vec<&str> = if kind == FolderKind::Beir { line.split('\t').map(str::trim).collect() } else { line.split_whitespace().collect() };
        if line.trim().is_empty() || (i == 0 && cols.first().is_some_and(|c| c.eq_ignore_ascii_case("query-id"))) {
            continue;
        }
        let row = |message: String| GoldenError::Row { path: path.display().to_string(), line: i + 1, message };
        let (q, doc, grade) = match (kind, &cols[..]) {
            (FolderKind::Beir, [q, d, g]) => (*q, *d, *g),
            (FolderKind::Beir, _) => return Err(row("expected `query-id<TAB>corpus-id<TAB>score`".into())),
            (_, [q, _, d, g]) => (*q, *d, *g),
            _ => return Err(row("expected `qid iter docno relevance` (TREC qrels)".into())),
        };
        let grade: f64 = grade.parse().map_err(|_| row(format!("relevance `{grade}` is not a number")))?;
        if grade > 0.0 {
            out.push((q.to_string(), doc.to_string(), grade));
        }
    }
    Ok(out)
}

/// A TREC topics file's (number, title): SGML `<top> <num> Number: 301 <title> …` topics, or
/// XML `<topic number="1"> <query>…</query>` ones.
fn read_topics(path: &Path) -> Result<Vec<(String, String)>, GoldenError> {
    let text = crate::read::read_bounded_string(path, crate::read::DATA_LIMIT).map_err(|e| GoldenError::Read { path: path.display().to_string(), message: e.to_string() })?;
    // The text after `tag` up to the next tag, whitespace collapsed.
    let field = |block: &str, tag: &str| -> Option<String> {
        let at = block.find(tag)? + tag.len();
        let rest = &block[at..];
        let end = rest.find('<').unwrap_or(rest.len());
        let v = rest[..end].split_whitespace().collect::<Vec<_>>().join(" ");
        (!v.is_empty()).then_some(v)
    };
    let mut out = Vec::new();
    for block in text.split("<top>").skip(1) {
        let num = field(block, "<num>").map(|n| n.trim_start_matches("Number:").trim().to_string());
        let title = field(block, "<title>").map(|t| t.trim_start_matches("Topic:").trim().to_string());
        match (num, title) {
            (Some(n), Some(t)) if !n.is_empty() && !t.is_empty() => out.push((n, t)),
            _ => return Err(GoldenError::Read { path: path.display().to_string(), message: format!("topic {} has no `<num>` or `<title>`", out.len() + 1) }),
        }
    }
    for block in text.split("<topic ").skip(1) {
        let head = &block[..block.find('>').unwrap_or(block.len())];
        let num = head.split("number=\"").nth(1).and_then(|r| r.split('"').next()).map(str::to_string);
        let query = field(block, "<query>").or_else(|| field(block, "<title>"));
        match (num, query) {
            (Some(n), Some(q)) => out.push((n, q)),
            _ => return Err(GoldenError::Read { path: path.display().to_string(), message: format!("topic {} has no `number` or `<query>`", out.len() + 1) }),
        }
    }
    if out.is_empty() {
        return Err(GoldenError::Read { path: path.display().to_string(), message: "no topics: expected `<top>` blocks with `<num>` and `<title>`, or `<topic number=\"…\">` with `<query>`".into() });
    }
    Ok(out)
}

/// A BEIR, TREC or MS MARCO folder as a golden set. Each query with a positive judgement
/// becomes a question (in the queries file's order; the others are left out) whose gold items
/// are its judged documents as page 1 of a record, with the qrels' grade (nDCG's gain): BEIR's
/// `corpus.jsonl#<corpus-id>` (the source `extract` gives a record of the folder's
/// `corpus.jsonl`, with `jsonl.id = "_id"`), TREC's and MS MARCO's `#<docno>` (any record with
/// that id: `extract` names a TREC `<DOC>` record `<file>#<DOCNO>` and a TSV record
/// `<file>#<id>`). A TREC topic's question is its title.
pub(super) fn read_folder(dir: &Path) -> Result<Vec<GoldenQuestion>, GoldenError> {
    let (kind, queries_path, qrels_path) = folder_files(dir)?;
    let mut gold: std::collections::BTreeMap<String, Vec<GoldItem>> = std::collections::BTreeMap::new();
    for (q, doc, grade) in read_qrels(&qrels_path, kind)? {
        let source = if kind == FolderKind::Beir { format!("corpus.jsonl#{doc}") } else { format!("#{doc}") };
        gold.entry(q).or_default().push(GoldItem::Page { source, page: 1, grade: (grade != 1.0).then_some(grade) });
    }
    let read = |p: &Path| crate::read::read_bounded_string(p, crate::read::DATA_LIMIT).map_err(|e| GoldenError::Read { path: p.display().to_string(), message: e.to_string() });
    let queries: Vec<(String, String)> = match kind {
        FolderKind::Trec => read_topics(&queries_path)?,
        FolderKind::MsMarco => {
            let mut v = Vec::new();
            for (i, line) in read(&queries_path)?.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
                let (id, text) = line.split_once('\t').ok_or_else(|| GoldenError::Row { path: queries_path.display().to_string(), line: i + 1, message: "expected `qid<TAB>query`".into() })?;
                v.push((id.trim().to_string(), text.trim().to_string()));
            }
            v
        }
        FolderKind::Beir => {
            let mut v = Vec::new();
            for (i, line) in read(&queries_path)?.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
                let row = |message: String| GoldenError::Row { path: queries_path.display().to_string(), line: i + 1, message };
                let value: serde_json::Value = serde_json::from_str(line).map_err(|e| row(format!("not JSON ({e})")))?;
                let id = match &value["_id"] {
                    serde_json::Value::String(s) => s.clone(),
                    serde_json::Value::Number(n) => n.to_string(),
                    _ => return Err(row("no `_id`".into())),
                };
                let text = value["text"].as_str().ok_or_else(|| row("no string `text`".into()))?;
                v.push((id, text.to_string()));
            }
            v
        }
    };
    let mut out = Vec::new();
    for (id, text) in queries {
        if let Some(items) = gold.remove(&id) {
            out.push(GoldenQuestion::new(id, text, items));
        }
    }
    if let Some(q) = gold.keys().next() {
        return Err(GoldenError::Read { path: qrels_path.display().to_string(), message: format!("query `{q}` has judgements but is not in {}", queries_path.display()) });
    }
    Ok(out)
}

