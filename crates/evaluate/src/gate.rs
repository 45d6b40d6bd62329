//! The gate every trained model passes before it is used: its row against its untrained base,
//! question by question, on the primary metric — a trained retriever (a config whose model
//! folder holds `training_pages.json`) against the config it names in `compare_to`, a
//! generator with an adapter against the first generator of its answer rows. With
//! `exclude_trained_pages`, those are questions whose pages the training never touched.
//! A model is **better** when the paired difference is positive at p < 0.05; otherwise the
//! report marks it not better (or worse) than its base.
use crate::stats::PairedComparison;

/// One trained row against its base.
#[derive(Debug, Clone)]
pub struct GateRow {
    /// The trained row.
    pub row: String,
    /// Its untrained base.
    pub base: String,
    /// The metric judged (label).
    pub metric: String,
    /// Questions compared (0 when unknown).
    pub n: usize,
    /// Paired difference, interval and p.
    pub comparison: PairedComparison,
}

/// `better`, `worse` or `not better` at the 5 % level.
pub fn verdict(c: &PairedComparison) -> &'static str {
    match (c.significant(), c.delta > 0.0) {
        (true, true) => "better",
        (true, false) => "worse",
        (false, _) => "not better",
    }
}

/// Whether any string in `config` names a folder (or file's folder) holding
/// `training_pages.json`: a model gauge trained.
pub fn is_trained(config: &serde_json::Value) -> bool {
    match config {
        serde_json::Value::String(s) if !s.is_empty() => {
            let p = std::path::Path::new(s);
            p.join("training_pages.json").is_file() || p.parent().is_some_and(|d| !d.as_os_str().is_empty() && d.join("training_pages.json").is_file())
        }
        serde_json::Value::Array(a) => a.iter().any(is_trained),
        serde_json::Value::Object(o) => o.values().any(is_trained),
        _ => false,
    }
}

/// The gate's section of `ablation.md` (empty without trained rows).
pub fn markdown(rows: &[GateRow]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut s = String::from("\n## Gate: trained models against their untrained base\n\nEach trained model against the row it changes, question by question: mean paired difference on the primary metric with its 95 % paired-bootstrap interval and a two-sided sign-flip p, raw and adjusted over its family (see above). A model that is not **better** (adjusted p < 0.05) than its base should not replace it.\n\n| Trained row | Base | Metric | n | Δ [95 %] | p | p adjusted | Verdict |\n|---|---|---|---|---|---|---|---|\n");
    for g in rows {
        let c = &g.comparison;
        let v = verdict(c);
        let mark = if v == "better" { "✓ better" } else if v == "worse" { "✗ worse" } else { "✗ not better" };
        let n = if g.n == 0 { "–".to_string() } else { g.n.to_string() };
        let adj = c.p_adjusted.map_or("–".to_string(), |a| format!("{a:.3}"));
        s.push_str(&format!("| {} | {} | {} | {n} | {:+.3} [{:+.2}, {:+.2}] | {:.3} | {adj} | {mark} |\n", g.row.replace('|', "\\|"), g.base.replace('|', "\\|"), g.metric, c.delta, c.ci_low, c.ci_high, c.p_value));
    }
    s
}

/// The gate's rows of an evaluation: each trained retriever config (not skipped) against its
/// `compare_to` config on MRR (or its first compared metric), and each answer row whose
/// generator has an adapter against the first generator's row on token F1 against the
/// reference answers (or verified citations).
pub fn rows(pipeline: &crate::pipeline::Pipeline, evaluated: &[String], named: &[crate::tables::NamedComparison], answers: &[crate::answers::AnswerRun], deltas: &[crate::answers::AnswerDelta], questions: usize) -> anyhow::Result<Vec<GateRow>> {
    let mut out = Vec::new();
    for v in pipeline.variants.iter().filter(|v| evaluated.contains(&v.name)) {
        let Some(other) = &v.compare_to else { continue };
        if !is_trained(&serde_json::to_value(&v.stages)?) {
            continue;
        }
        let mine: Vec<_> = named.iter().filter(|(c, o, _, _)| c == &v.name && o == other).collect();
        if let Some((c, o, m, d)) = mine.iter().find(|(_, _, m, _)| m.starts_with("MRR")).or(mine.first()) {
            out.push(GateRow { row: c.clone(), base: o.clone(), metric: m.clone(), n: questions, comparison: *d });
        }
    }
    let Some(section) = &pipeline.answer else { return Ok(out) };
    for a in answers {
        let adapted = section.generators.iter().any(|g| Some(&g.name) == a.generator.as_ref() && matches!(g.generator, Some(gauge_answer::GeneratorConfig::Local { adapter: Some(_), .. })));
        if !adapted {
            continue;
        }
        let mine: Vec<&crate::answers::AnswerDelta> = deltas.iter().filter(|d| d.run == a.name()).collect();
        if let Some(d) = mine.iter().find(|d| d.metric == "reference_token_f1").or_else(|| mine.iter().find(|d| d.metric == "answer_verified_citation")) {
            out.push(GateRow { row: d.run.clone(), base: d.baseline.clone(), metric: d.label.to_string(), n: d.n, comparison: d.comparison });
        }
    }
    Ok(out)
}

/// The gate's verdicts as the manifest's `gate` stat.
pub fn stat(rows: &[GateRow]) -> serde_json::Value {
    rows.iter().map(|g| serde_json::json!({"row": g.row, "base": g.base, "metric": g.metric, "delta": g.comparison.delta, "p": g.comparison.p_value, "p_adjusted": g.comparison.p_adjusted, "verdict": verdict(&g.comparison)})).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(delta: f64, p: f64) -> PairedComparison {
        PairedComparison { delta, ci_low: delta - 0.1, ci_high: delta + 0.1, p_value: p, p_adjusted: None }
    }

    #[test]
    fn a_model_no_better_than_its_base_is_flagged() {
        assert_eq!(verdict(&c(0.2, 0.01)), "better");
        assert_eq!(verdict(&c(0.2, 0.2)), "not better");
        assert_eq!(verdict(&c(-0.2, 0.01)), "worse");
        assert_eq!(verdict(&c(0.0, 1.0)), "not better");
        let md = markdown(&[GateRow { row: "tuned".into(), base: "base".into(), metric: "MRR".into(), n: 20, comparison: c(0.01, 0.7) }]);
        assert!(md.contains("| tuned | base | MRR | 20 | +0.010") && md.contains("✗ not better"), "{md}");
        assert!(markdown(&[]).is_empty());
    }

    #[test]
    fn trained_models_are_recognised_by_their_training_pages() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("adapter");
        std::fs::create_dir_all(&model).unwrap();
        let cfg = serde_json::json!({"embed": {"model": model.to_str().unwrap()}, "k": 5});
        assert!(!is_trained(&cfg), "no training_pages.json yet");
        std::fs::write(model.join("training_pages.json"), "{}").unwrap();
        assert!(is_trained(&cfg));
        assert!(is_trained(&serde_json::json!([{"a": model.join("adapter_model.safetensors").to_str().unwrap()}])));
        assert!(!is_trained(&serde_json::json!({"model": "sentence-transformers/all-MiniLM-L6-v2"})));
    }
}
