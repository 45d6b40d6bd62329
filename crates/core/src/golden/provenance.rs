//! Who wrote a golden set's questions and who judged them (kept them, or marked their gold):
//! people, named models, or both. A finding measured on questions a model wrote may favour
//! that model's family (a question a language model wrote from a passage tends to be likely
//! under a language model given that passage), so the record travels into every evaluation and
//! a config that uses a model of the writing or judging family is marked.
//!
//! Where the record comes from, first found wins:
//! 1. the pipeline's `golden_provenance` (for a set in a folder that cannot be written to);
//! 2. a sidecar beside the set: `<set>.provenance.json` (`fra-heldout.jsonl` →
//!    `fra-heldout.provenance.json`), or `provenance.json` inside a benchmark folder;
//! 3. a benchmark folder (BEIR, TREC, MS MARCO) without one: written and judged by people;
//! 4. the rows' `teacher_model` values (what `synth-data` writes on each row): written by
//!    those models, the judge not recorded;
//! 5. otherwise unknown.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::GoldenError;

/// The writer or judge that stands for people.
pub const HUMAN: &str = "human";

/// Who wrote and who judged a golden set's questions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Provenance {
    /// Who wrote the questions: `human`, or models by name (a file or hub id); more than one
    /// makes a mixed set. Empty: not known.
    pub written_by: Vec<String>,
    /// Who judged them (kept or rejected each, or marked its gold): `human`, models by name.
    /// Empty: nobody recorded.
    pub judged_by: Vec<String>,
    /// The prompt the writing model was given (a file or its SHA-256), when a model wrote them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Anything else a reader should know (how the set was drawn, who checked it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Where this record was found (set by the loader: `pipeline`, a sidecar's path,
    /// `benchmark folder`, `rows`, or `unknown`; a value in a file is replaced).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub source: String,
}

/// A model's family: what same-family questions would favour. The lower-cased file or folder
/// name with a leading organisation (`meta-`, `hf-`) dropped, up to its first character that
/// is not a letter: `qwen2.5-coder-1.5b-instruct-q4_k_m.gguf` → `qwen`,
/// `SmolLM2-135M-Instruct.Q4_1.gguf` → `smollm`, `meta-llama/Llama-3.2-1B` → `llama`,
/// `gpt-4o-mini` → `gpt`. `human` and names with no leading letters have none.
pub fn model_family(name: &str) -> Option<String> {
    let base = name.trim_end_matches('/').rsplit('/').next().unwrap_or(name).to_lowercase();
    if base == HUMAN {
        return None;
    }
    let base = ["meta-", "hf-", "models--"].iter().fold(base.as_str(), |b, p| b.strip_prefix(p).unwrap_or(b)).to_string();
    let family: String = base.chars().take_while(|c| c.is_ascii_alphabetic()).collect();
    (family.len() >= 2).then_some(family)
}

impl Provenance {
    /// Written and judged by people (a benchmark's qrels).
    pub fn human(source: &str) -> Provenance {
        Provenance { written_by: vec![HUMAN.into()], judged_by: vec![HUMAN.into()], source: source.into(), ..Provenance::default() }
    }

    /// The families of the models that wrote or judged the questions.
    pub fn families(&self) -> BTreeSet<String> {
        self.written_by.iter().chain(&self.judged_by).filter_map(|m| model_family(m)).collect()
    }

    /// Whether a model of `model`'s family wrote or judged the questions; says which role.
    pub fn same_family(&self, model: &str) -> Option<String> {
        let family = model_family(model)?;
        let role = |list: &[String]| list.iter().any(|m| model_family(m).as_deref() == Some(family.as_str()));
        match (role(&self.written_by), role(&self.judged_by)) {
            (true, true) => Some(format!("a {family} model wrote and judged the questions")),
            (true, false) => Some(format!("a {family} model wrote the questions")),
            (false, true) => Some(format!("a {family} model judged the questions")),
            (false, false) => None,
        }
    }

    /// One line for a report: `written by people, judged by people`, `written by
    /// qwen2.5-coder-….gguf, judged by the same`, `written by (not recorded), judged by (not
    /// recorded)`.
    pub fn summary(&self) -> String {
        let list = |l: &[String]| match l {
            [] => "(not recorded)".to_string(),
            [one] if one == HUMAN => "people".to_string(),
            _ => l.iter().map(|m| if m == HUMAN { "people".to_string() } else { format!("`{m}`") }).collect::<Vec<_>>().join(" and "),
        };
        let judged = if !self.judged_by.is_empty() && self.judged_by == self.written_by && self.written_by != [HUMAN] { "the same".to_string() } else { list(&self.judged_by) };
        let mut s = format!("written by {}, judged by {judged}", list(&self.written_by));
        if let Some(p) = &self.prompt {
            s.push_str(&format!(" (prompt `{p}`)"));
        }
        if let Some(n) = &self.note {
            s.push_str(&format!("; {n}"));
        }
        s
    }
}

/// The sidecar a set's record lives in: `provenance.json` inside a folder, else the set's path
/// with the extension `provenance.json`.
pub fn provenance_path(set: &Path) -> PathBuf {
    if set.is_dir() {
        set.join("provenance.json")
    } else {
        set.with_extension("provenance.json")
    }
}

/// Reads a provenance record file (at most 1 MiB; unknown fields refused).
pub fn read_provenance(path: &Path) -> Result<Provenance, GoldenError> {
    let err = |message: String| GoldenError::Read { path: path.display().to_string(), message };
    let meta = std::fs::metadata(path).map_err(|e| err(e.to_string()))?;
    if !meta.is_file() || meta.len() > 1 << 20 {
        return Err(err("a provenance record is a JSON file of at most 1 MiB".into()));
    }
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let mut p: Provenance = serde_json::from_str(&text).map_err(|e| err(format!("not a provenance record ({e}); expected {{\"written_by\": [\"human\" or a model], \"judged_by\": [...]}}")))?;
    p.source = path.display().to_string();
    Ok(p)
}

/// The provenance of the set at `set` (see the module doc for the order), `declared` being the
/// pipeline's own record; the rows are read (for their `teacher_model`s) only when nothing
/// before them answers.
pub fn resolve_provenance(set: &Path, declared: Option<&Provenance>) -> Result<Provenance, GoldenError> {
    if let Some(p) = declared {
        return Ok(Provenance { source: "pipeline".into(), ..p.clone() });
    }
    let sidecar = provenance_path(set);
    if sidecar.is_file() {
        return read_provenance(&sidecar);
    }
    if set.is_dir() {
        return Ok(Provenance::human("benchmark folder"));
    }
    let writers = teacher_models(set);
    if !writers.is_empty() {
        return Ok(Provenance { written_by: writers, source: "rows".into(), ..Provenance::default() });
    }
    Ok(Provenance { source: "unknown".into(), ..Provenance::default() })
}

/// The distinct `teacher_model` values of a JSON Lines set's rows, in first-seen order (empty
/// for other formats or when no row has one).
pub fn teacher_models(set: &Path) -> Vec<String> {
    if set.is_dir() || set.extension().is_some_and(|e| e == "parquet") {
        return Vec::new();
    }
    let Ok(text) = crate::read::read_bounded_string(set, crate::read::DATA_LIMIT) else { return Vec::new() };
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if let Some(m) = v.get("teacher_model").and_then(|m| m.as_str()).filter(|m| !m.is_empty()) {
            if !out.iter().any(|o| o == m) {
                out.push(m.to_string());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_named_from_the_model_name() {
        assert_eq!(model_family("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf").as_deref(), Some("qwen"));
        assert_eq!(model_family("models/Qwen2.5-1.5B-Instruct/").as_deref(), Some("qwen"));
        assert_eq!(model_family("SmolLM2-135M-Instruct.Q4_1.gguf").as_deref(), Some("smollm"));
        assert_eq!(model_family("meta-llama/Llama-3.2-1B").as_deref(), Some("llama"));
        assert_eq!(model_family("gpt-4o-mini").as_deref(), Some("gpt"));
        assert_eq!(model_family("human"), None);
        assert_eq!(model_family("42"), None);
    }

    #[test]
    fn same_family_names_the_role() {
        let p = Provenance { written_by: vec!["qwen2.5-coder-1.5b-instruct-q4_k_m.gguf".into()], judged_by: vec!["qwen2.5-coder-1.5b-instruct-q4_k_m.gguf".into()], ..Default::default() };
        assert_eq!(p.same_family("Qwen2.5-7B-Instruct.gguf").as_deref(), Some("a qwen model wrote and judged the questions"));
        assert_eq!(p.same_family("SmolLM2-135M-Instruct.Q4_1.gguf"), None);
        let mixed = Provenance { written_by: vec!["human".into()], judged_by: vec!["SmolLM2-135M-Instruct.Q4_1.gguf".into()], ..Default::default() };
        assert_eq!(mixed.same_family("smollm2").as_deref(), Some("a smollm model judged the questions"));
        assert!(Provenance::human("x").same_family("qwen2.5").is_none());
        assert_eq!(Provenance::human("x").summary(), "written by people, judged by people");
        assert!(p.summary().contains("judged by the same"), "{}", p.summary());
    }

    #[test]
    fn the_record_is_found_in_order() {
        let tmp = tempfile::tempdir().unwrap();
        let set = tmp.path().join("set.jsonl");
        std::fs::write(&set, "{\"qid\":\"1\",\"question\":\"q\",\"teacher_model\":\"qwen2.5-x.gguf\"}\n{\"qid\":\"2\",\"question\":\"q\",\"teacher_model\":\"qwen2.5-x.gguf\"}\n").unwrap();
        let rows = teacher_models(&set);
        assert_eq!(rows, ["qwen2.5-x.gguf"]);
        let p = resolve_provenance(&set, None).unwrap();
        assert_eq!((p.written_by.as_slice(), p.judged_by.is_empty(), p.source.as_str()), (&["qwen2.5-x.gguf".to_string()][..], true, "rows"));
        // A sidecar wins over the rows; the pipeline wins over both.
        std::fs::write(tmp.path().join("set.provenance.json"), r#"{"written_by": ["qwen2.5-x.gguf"], "judged_by": ["qwen2.5-x.gguf"], "prompt": "heldout-question.txt"}"#).unwrap();
        let p = resolve_provenance(&set, None).unwrap();
        assert_eq!(p.judged_by, ["qwen2.5-x.gguf"]);
        assert!(p.source.ends_with("set.provenance.json"));
        let declared = Provenance::human("");
        assert_eq!(resolve_provenance(&set, Some(&declared)).unwrap().source, "pipeline");
        // A benchmark folder defaults to people; nothing at all is unknown.
        let folder = tmp.path().join("beir");
        std::fs::create_dir(&folder).unwrap();
        assert_eq!(resolve_provenance(&folder, None).unwrap(), Provenance::human("benchmark folder"));
        assert_eq!(resolve_provenance(&tmp.path().join("other.jsonl"), None).unwrap().source, "unknown");
        // A malformed sidecar is refused naming the file and the expected shape.
        std::fs::write(tmp.path().join("set.provenance.json"), r#"{"writers": ["me"]}"#).unwrap();
        let e = resolve_provenance(&set, None).unwrap_err().to_string();
        assert!(e.contains("set.provenance.json") && e.contains("written_by"), "{e}");
    }
}
