//! `--mode likelihood`: a generated question set filtered by query likelihood (Doc2Query--,
//! Gospodinov et al. 2023, with UPR's score). Each row's question is scored by a local decoder
//! twice — after the prompt carrying its passage, log P(q | p), and after the same request
//! without a passage, log P(q) — and the gain `log P(q | p) − log P(q)` (per token, a pointwise
//! mutual information) says how much the passage explains the question. A generic question
//! ("What is the purpose of this section?") is about as likely without its passage; one only
//! its passage answers is not. Rows whose passage does not raise the question's likelihood are
//! dropped, then the `drop_share` with the lowest gain; the rest keep their split. Counts by
//! reason and every score are written (`scores.jsonl`); scores go through the model-call cache,
//! so a killed run resumes with what it had scored.
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gauge_core::golden::write_jsonl;
use gauge_core::schema::ChunkRecord;
use gauge_core::StageRun;
use gauge_generator::cache::CallCache;
use gauge_generator::query_likelihood::QueryLikelihood;
use serde::{Deserialize, Serialize};

use crate::doc2query_run::Kept;
use crate::{SynthConfig, SynthOptions, SynthRow, SynthSummary};

/// Settings of `--mode likelihood` (serde, with defaults).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LikelihoodFilterConfig {
    /// The local decoder that scores (a GGUF file, a model folder or a name in the models
    /// directory; default: SmolLM2-135M, ~0.4 s per question on 2 cores).
    pub model: String,
    /// Of the questions whose passage raises their likelihood, the share with the lowest gain
    /// dropped (Doc2Query-- drops a fixed share; 0 keeps them all).
    pub drop_share: f64,
    /// Passage tokens kept in the prompt.
    pub passage_tokens: usize,
}

impl Default for LikelihoodFilterConfig {
    fn default() -> Self {
        LikelihoodFilterConfig { model: gauge_generator::default_model(), drop_share: 0.3, passage_tokens: gauge_generator::query_likelihood::DEFAULT_PASSAGE_TOKENS }
    }
}

impl LikelihoodFilterConfig {
    /// Whether it is the default (left out of other modes' echo, so their fingerprints hold).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// One row's scores (`scores.jsonl`).
#[derive(Debug, Clone, Serialize)]
struct Scored<'a> {
    qid: &'a str,
    chunk_id: &'a str,
    /// Mean log P(question | passage) per token.
    with_passage: f64,
    /// Mean log P(question) per token (the same request, no passage).
    without_passage: f64,
    /// Their difference.
    gain: f64,
}

/// The rows of `--from`: a synth artifact directory (its `golden.jsonl`) or a JSONL file of
/// synth rows.
pub(crate) fn rows_file(from: &Path) -> PathBuf {
    if from.is_dir() {
        from.join("golden.jsonl")
    } else {
        from.to_path_buf()
    }
}

/// Reads synth rows (each line a [`SynthRow`]); the error names the file and line.
pub(crate) fn read_rows(path: &Path) -> anyhow::Result<Vec<SynthRow>> {
    let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: cannot read ({e}); --mode likelihood filters a synth-data artifact or its golden.jsonl", path.display()))?;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        rows.push(serde_json::from_str(line).map_err(|e| anyhow::anyhow!("{}:{}: not a synth-data row ({e})", path.display(), i + 1))?);
    }
    anyhow::ensure!(!rows.is_empty(), "{}: no rows to filter", path.display());
    Ok(rows)
}

/// The rows kept, by the rule of the module docs: indices of `gains` (in row order).
pub(crate) fn keep_by_gain(gains: &[f64], drop_share: f64) -> (Vec<bool>, usize, usize) {
    let raising: Vec<usize> = (0..gains.len()).filter(|&i| gains[i] > 0.0).collect();
    let mut order = raising.clone();
    order.sort_by(|&a, &b| gains[a].total_cmp(&gains[b]).then(a.cmp(&b)));
    let low = ((raising.len() as f64) * drop_share).floor() as usize;
    let mut keep = vec![false; gains.len()];
    for &i in &order[low..] {
        keep[i] = true;
    }
    (keep, gains.len() - raising.len(), low)
}

/// Runs `--mode likelihood` (see the module docs).
pub(crate) fn write_filtered(chunks: &[ChunkRecord], rows: Vec<SynthRow>, run: &mut StageRun, cfg: &SynthConfig, rt: &SynthOptions) -> anyhow::Result<SynthSummary> {
    let f = &cfg.likelihood;
    anyhow::ensure!((0.0..1.0).contains(&f.drop_share), "likelihood.drop_share is a share in [0, 1), got {}", f.drop_share);
    let text: HashMap<&str, &str> = chunks.iter().map(|c| (c.chunk_id.as_str(), c.text.as_str())).collect();
    let mut kept = Kept::default();
    let mut scorable = Vec::new();
    for row in rows {
        match text.get(row.chunk_id.as_str()) {
            Some(_) => scorable.push(row),
            None => kept.drop_row(&row, "chunk_not_in_chunks"),
        }
    }
    // Beside the artifacts' other model calls: `<root>/llm-cache`.
    let root = run.final_dir().parent().and_then(Path::parent).unwrap_or(Path::new("artifacts"));
    let calls = Arc::new(CallCache::new(root.join("llm-cache")));
    let scorer = QueryLikelihood::load(&f.model, Some(f.passage_tokens), &rt.device, Some(calls))?;
    let bar = gauge_core::progress::bar(scorable.len() as u64, "questions");
    let started = std::time::Instant::now();
    let (mut with, mut without) = (Vec::with_capacity(scorable.len()), Vec::with_capacity(scorable.len()));
    for part in scorable.chunks(32) {
        let pairs: Vec<(&str, &str)> = part.iter().map(|r| (text[r.chunk_id.as_str()], r.golden.question.as_str())).collect();
        with.extend(scorer.pair_likelihoods(&pairs)?);
        without.extend(scorer.pair_likelihoods(&pairs.iter().map(|(_, q)| ("", *q)).collect::<Vec<_>>())?);
        bar.inc(part.len() as u64);
    }
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    let gains: Vec<f64> = with.iter().zip(&without).map(|(a, b)| a - b).collect();
    let (keep, lowering, low) = keep_by_gain(&gains, f.drop_share);
    let scores: Vec<Scored> = scorable.iter().enumerate().map(|(i, r)| Scored { qid: &r.golden.qid, chunk_id: &r.chunk_id, with_passage: with[i], without_passage: without[i], gain: gains[i] }).collect();
    write_jsonl(&run.path("scores.jsonl"), scores.iter())?;
    run.add_output("scores.jsonl", Some(scores.len() as u64))?;
    let written = kept.dropped.len() + scorable.len();
    let mut rows = Vec::new();
    for (i, row) in scorable.into_iter().enumerate() {
        match keep[i] {
            true => rows.push(row),
            // A NaN gain (an empty question) counts as not raised, as in keep_by_gain.
            false if gains[i].is_nan() || gains[i] <= 0.0 => kept.drop_row(&row, "passage_does_not_raise_likelihood"),
            false => kept.drop_row(&row, "low_likelihood_gain"),
        }
    }
    debug_assert_eq!(kept.reasons.get("passage_does_not_raise_likelihood").copied().unwrap_or(0), lowering);
    debug_assert_eq!(kept.reasons.get("low_likelihood_gain").copied().unwrap_or(0), low);
    let mut split_counts: BTreeMap<String, usize> = BTreeMap::new();
    for r in &rows {
        if let Some(s) = &r.split {
            *split_counts.entry(s.clone()).or_default() += 1;
        }
    }
    crate::write_golden_rows(&rows, &split_counts, vec![f.model.clone()], Some("kept by the query-likelihood gain of the judging model".into()), run)?;
    write_jsonl(&run.path("dropped.jsonl"), kept.dropped.iter())?;
    run.add_output("dropped.jsonl", Some(kept.dropped.len() as u64))?;
    run.set_stat("label", "likelihood");
    run.set_stat("questions_read", written);
    run.set_stat("questions_kept", rows.len());
    run.set_stat("dropped", serde_json::to_value(&kept.reasons)?);
    run.set_stat("scoring_seconds", seconds);
    run.set_stat("splits", serde_json::to_value(&split_counts)?);
    let mut sorted = gains.clone();
    sorted.sort_by(f64::total_cmp);
    run.set_stat("gain_median", sorted.get(sorted.len() / 2).copied().unwrap_or(0.0));
    eprintln!("synth-data: likelihood: {} of {written} questions kept ({} whose passage does not raise their likelihood, {low} with the lowest gain dropped)", rows.len(), lowering);
    Ok(SynthSummary { accepted: rows.len(), failed: written - rows.len(), resumed: 0, sft: false })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_the_passage_does_not_explain_go_first_then_the_lowest_share() {
        // Two gains ≤ 0 dropped; of the four positive, floor(4 · 0.5) = 2 lowest dropped.
        let gains = [0.5, -0.1, 0.2, 0.0, 0.9, 0.1];
        let (keep, lowering, low) = keep_by_gain(&gains, 0.5);
        assert_eq!((lowering, low), (2, 2));
        assert_eq!(keep, [true, false, false, false, true, false]);
        // Share 0 keeps every row the passage explains.
        assert_eq!(keep_by_gain(&gains, 0.0).0, [true, false, true, false, true, true]);
        assert_eq!(keep_by_gain(&[], 0.3), (vec![], 0, 0));
    }
}
