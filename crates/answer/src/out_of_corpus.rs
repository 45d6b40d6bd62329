//! Questions the corpus cannot answer: a JSON Lines file of `qid`, `question` and, optionally,
//! `reference_answer` (the golden-set format with no `gold` and no `keywords`). They are asked
//! like any question, and a refusal is the right answer; `evaluate` scores them only in the
//! answer metrics (`out_of_corpus_refusal`, `refusal_accuracy`), never in retrieval's, so they
//! live in their own file beside the golden set (`out_of_corpus` in a pipeline,
//! `--out-of-corpus` here).
use std::collections::HashSet;
use std::path::Path;

use gauge_core::golden::{GoldenQuestion, MAX_QUESTION_BYTES};

/// Reads and checks an out-of-corpus question file (an empty one holds none; the one loader of
/// `answer`, a pipeline's `out_of_corpus` and `[refusal]`): a row marked `"in_corpus": true` is
/// skipped (a four-phase SFT file holds both kinds); every other row needs a plain, unique id
/// that none of `taken` (the answerable questions' ids) has, a non-empty question of at most
/// [`MAX_QUESTION_BYTES`], and no `gold` or `keywords` (a question with them belongs in the
/// golden set). Each error names the file, the line and the fix.
pub fn load_out_of_corpus<'a>(path: &Path, taken: impl IntoIterator<Item = &'a str>) -> anyhow::Result<Vec<GoldenQuestion>> {
    let p = path.display();
    let text = gauge_core::read::read_bounded_string(path, gauge_core::read::DATA_LIMIT).map_err(|e| anyhow::anyhow!("{p}: cannot read the out-of-corpus questions ({e}); one JSON object per line with `qid` and `question`"))?;
    let taken: HashSet<&str> = taken.into_iter().collect();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let at = format!("{p}:{}", i + 1);
        let bad = |e: serde_json::Error| anyhow::anyhow!("{at}: {e}; each line is a JSON object with `qid` and `question` (and optionally `reference_answer`)");
        let value: serde_json::Value = serde_json::from_str(line).map_err(bad)?;
        if value.get("in_corpus").and_then(serde_json::Value::as_bool) == Some(true) {
            continue;
        }
        let q: GoldenQuestion = serde_json::from_value(value).map_err(bad)?;
        anyhow::ensure!(!q.qid.trim().is_empty() && !q.qid.chars().any(|c| c.is_whitespace() || c.is_control()), "{at}: qid `{}` is empty or holds whitespace; give each question a plain id", q.qid);
        anyhow::ensure!(!q.question.trim().is_empty(), "{at}: question `{}` is empty", q.qid);
        anyhow::ensure!(q.question.len() <= MAX_QUESTION_BYTES, "{at}: question `{}` is {} bytes long; at most {MAX_QUESTION_BYTES} (shorten it)", q.qid, q.question.len());
        anyhow::ensure!(q.gold.is_empty() && q.keywords.is_empty(), "{at}: question `{}` has `gold` or `keywords`: the corpus answers it, so it is not out of corpus — it belongs in the golden set (or mark it `\"in_corpus\": true`)", q.qid);
        anyhow::ensure!(!taken.contains(q.qid.as_str()), "{at}: qid `{}` is also an answerable question's (the golden set's); give it another id", q.qid);
        anyhow::ensure!(seen.insert(q.qid.clone()), "{at}: duplicate qid `{}`; qids must be unique", q.qid);
        out.push(q);
    }
    // An empty file is no out-of-corpus question (a split that left none out of training).
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ooc.jsonl");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn reads_questions_with_their_reference_answers() {
        let (_d, p) = file("{\"qid\":\"o1\",\"question\":\"Who won the 1998 World Cup?\",\"reference_answer\":\"Not in the manuals.\"}\n\n{\"qid\":\"o2\",\"question\":\"What is the boiling point of mercury?\"}\n");
        let qs = load_out_of_corpus(&p, []).unwrap();
        assert_eq!(qs.iter().map(|q| q.qid.as_str()).collect::<Vec<_>>(), ["o1", "o2"]);
        assert_eq!(qs[0].reference_answer.as_deref(), Some("Not in the manuals."));
        assert!(qs.iter().all(|q| q.gold.is_empty() && q.keywords.is_empty()));
        let (_d, p) = file("\n");
        assert!(load_out_of_corpus(&p, []).unwrap().is_empty(), "an empty file holds no question");
    }

    #[test]
    fn bad_rows_name_the_line_and_the_fix() {
        let answerable = ["q1"];
        for (text, needle) in [
            ("{\"qid\":\"o1\",\"question\":\"x\",\"gold\":[{\"source\":\"a.pdf\",\"page\":3}]}", ":1: question `o1` has `gold` or `keywords`"),
            ("{\"qid\":\"o1\",\"question\":\"x\",\"keywords\":[\"rail\"]}", "belongs in the golden set"),
            ("{\"qid\":\"o1\",\"question\":\"x\"}\n{\"qid\":\"o1\",\"question\":\"y\"}", ":2: duplicate qid `o1`"),
            ("{\"qid\":\"q1\",\"question\":\"x\"}", "also an answerable question"),
            ("{\"qid\":\"o 1\",\"question\":\"x\"}", "holds whitespace"),
            ("{\"qid\":\"o1\",\"question\":\"  \"}", "is empty"),
            ("{\"qid\":\"o1\"}", ":1: missing field `question`"),
        ] {
            let (_d, p) = file(text);
            let e = load_out_of_corpus(&p, answerable).unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains("ooc.jsonl"), "{text}: {e}");
        }
        let e = load_out_of_corpus(Path::new("/nonexistent/ooc.jsonl"), []).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/ooc.jsonl: cannot read"), "{e}");
    }
}
