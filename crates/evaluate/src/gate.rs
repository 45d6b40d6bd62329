//! The gate every trained model passes before it is used: its row against its untrained base,
//! question by question, on the primary metric — a trained retriever (a config whose model
//! folder holds `training_pages.json`) against the config it names in `compare_to`, a
//! generator with an adapter against the first generator of its answer rows. With
//! `exclude_trained_pages`, those are questions whose pages the training never touched.
//! A model is **better** when the paired difference is positive at adjusted p < 0.05;
//! otherwise the report marks it not better (or worse) than its base.
//!
//! The gate is its own family: its p-values are adjusted over the gate rows alone (the
//! pipeline's correction), not over the exploratory table above it, whose dozens of
//! comparisons would otherwise raise the bar a trained model must pass (Holm over 50 puts the
//! first step at α 0.001). Each row states the smallest effect it could detect — 80 % power at
//! the family's first step, α 0.05 / rows — so a "not better" on a set too small to see a
//! realistic gain says so.
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
    /// Paired difference, interval and p (adjusted over the gate's family).
    pub comparison: PairedComparison,
    /// Standard deviation of the per-question differences (NaN when unknown).
    pub sd: f64,
    /// The smallest mean difference detected with 80 % power at the family's first step
    /// (set by [`rows`]; NaN when unknown).
    pub mde: f64,
    /// The power to detect [`TARGET_GAIN`] at the family's first step (MRR rows; NaN otherwise
    /// or when unknown).
    pub power: f64,
}

/// A realistic gain of a trained model on its primary metric (+0.04 MRR@10: what published
/// in-domain tuning of small retrievers reports); the gate prints its power to see it.
pub const TARGET_GAIN: f64 = 0.04;

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
    let m = rows.len();
    let mut s = format!("\n## Gate: trained models against their untrained base\n\nEach trained model against the row it changes, question by question: mean paired difference on the primary metric with its 95 % paired-bootstrap interval and a two-sided sign-flip p, raw and adjusted over the gate's own family — these {m} row{} alone, not the exploratory comparisons above. MDE: the smallest mean difference this set detects with 80 % power at the family's first step (α 0.05 / {m}); a Δ below it cannot be told from chance here. Power: the chance this set detects a real MRR@10 gain of +{TARGET_GAIN} at that step. A model that is not **better** (adjusted p < 0.05) than its base should not replace it.\n\n| Trained row | Base | Metric | n | Δ [95 %] | MDE | Power, +{TARGET_GAIN} | p | p adjusted | Verdict |\n|---|---|---|---|---|---|---|---|---|---|\n", if m == 1 { "" } else { "s" });
    for g in rows {
        let c = &g.comparison;
        let v = verdict(c);
        let mark = if v == "better" { "✓ better" } else if v == "worse" { "✗ worse" } else { "✗ not better" };
        let n = if g.n == 0 { "–".to_string() } else { g.n.to_string() };
        let adj = c.p_adjusted.map_or("–".to_string(), |a| format!("{a:.3}"));
        let mde = if g.mde.is_finite() { format!("±{:.3}", g.mde) } else { "–".to_string() };
        let power = if g.power.is_finite() { format!("{:.0} %", g.power * 100.0) } else { "–".to_string() };
        s.push_str(&format!("| {} | {} | {} | {n} | {:+.3} [{:+.2}, {:+.2}] | {mde} | {power} | {:.3} | {adj} | {mark} |\n", g.row.replace('|', "\\|"), g.base.replace('|', "\\|"), g.metric, c.delta, c.ci_low, c.ci_high, c.p_value));
    }
    s
}

/// The gate's rows of an evaluation: each trained retriever config (not skipped) against its
/// `compare_to` config on MRR (or its first compared metric), and each answer row whose
/// generator has an adapter against its base (its `compare_to` generator, else the first) —
/// on every metric of the pipeline's `[answer] gate` family when declared, else on token F1
/// against the reference answers (or verified citations); then the family's adjustment and
/// detectable effects.
pub fn rows(pipeline: &crate::pipeline::Pipeline, tables: &crate::tables::RetrievalTables, query_rows: &[crate::rows::QueryRow], answers: &[crate::answers::AnswerRun], deltas: &[crate::answers::AnswerDelta], questions: usize) -> anyhow::Result<Vec<GateRow>> {
    let (evaluated, named) = (&tables.names, &tables.named);
    let mut out = Vec::new();
    for v in pipeline.variants.iter().filter(|v| evaluated.contains(&v.name)) {
        let Some(other) = &v.compare_to else { continue };
        if !is_trained(&serde_json::to_value(&v.stages)?) {
            continue;
        }
        let mine: Vec<_> = named.iter().filter(|(c, o, _, _)| c == &v.name && o == other).collect();
        if let Some((c, o, m, d)) = mine.iter().find(|(_, _, m, _)| m.starts_with("MRR")).or(mine.first()) {
            let metric = tables.registry.iter().find(|r| &r.label == m);
            let diffs = metric.and_then(|metric| crate::tables::paired_differences(query_rows, c, o, metric));
            let sd = diffs.as_deref().map_or(f64::NAN, crate::stats::std_dev);
            out.push(GateRow { row: c.clone(), base: o.clone(), metric: m.clone(), n: diffs.map_or(questions, |d| d.len()), comparison: *d, sd, mde: f64::NAN, power: f64::NAN });
        }
    }
    let Some(section) = &pipeline.answer else { return Ok(family(out, pipeline.stats.correction)) };
    for a in answers {
        if !section.is_gated(a) {
            continue;
        }
        let mine: Vec<&crate::answers::AnswerDelta> = deltas.iter().filter(|d| d.run == a.name()).collect();
        let row = |d: &crate::answers::AnswerDelta| GateRow { row: d.run.clone(), base: d.baseline.clone(), metric: d.label.to_string(), n: d.n, comparison: d.comparison, sd: d.sd, mde: f64::NAN, power: f64::NAN };
        match &section.gate {
            // The declared family: one row per metric (a metric no question applies to is
            // reported missing rather than dropped silently).
            Some(gate) => {
                for m in &gate.family {
                    let d = mine.iter().find(|d| d.metric == m.as_str()).ok_or_else(|| anyhow::anyhow!("pipeline `{}`, answer.gate: row `{}` has no paired `{m}` against its base: no evaluated question the metric applies to (reference_token_f1 needs reference answers, answer_keyword_recall keywords, out_of_corpus_refusal the pipeline's `out_of_corpus` questions)", pipeline.name, a.name()))?;
                    out.push(row(d));
                }
            }
            None => {
                if let Some(d) = mine.iter().find(|d| d.metric == "reference_token_f1").or_else(|| mine.iter().find(|d| d.metric == "answer_verified_citation")) {
                    out.push(row(d));
                }
            }
        }
    }
    Ok(family(out, pipeline.stats.correction))
}

/// A secondary metric of an adapted row against its base with its declared margin.
#[derive(Debug, Clone)]
pub struct NonInferiorityRow {
    /// The trained row.
    pub row: String,
    /// Its base.
    pub base: String,
    /// The metric (label).
    pub metric: String,
    /// The declared margin.
    pub margin: f64,
    /// Questions compared.
    pub n: usize,
    /// Paired difference and its interval.
    pub comparison: PairedComparison,
}

impl NonInferiorityRow {
    /// Non-inferior when the lower end of the paired 95 % interval is above −margin.
    pub fn non_inferior(&self) -> bool {
        self.comparison.ci_low > -self.margin
    }
}

/// The non-inferiority rows of an evaluation's adapted answer rows (empty without
/// `answer.gate.non_inferiority`); a declared metric no evaluated question applies to is an
/// error, as in the family.
pub fn non_inferiority_rows(pipeline: &crate::pipeline::Pipeline, answers: &[crate::answers::AnswerRun], deltas: &[crate::answers::AnswerDelta]) -> anyhow::Result<Vec<NonInferiorityRow>> {
    let Some(section) = &pipeline.answer else { return Ok(Vec::new()) };
    let Some(gate) = &section.gate else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for a in answers.iter().filter(|a| section.is_gated(a)) {
        let name = a.name();
        for (metric, margin) in &gate.non_inferiority {
            let d = deltas.iter().find(|d| d.run == name && d.metric == metric.as_str()).ok_or_else(|| anyhow::anyhow!("pipeline `{}`, answer.gate.non_inferiority: row `{name}` has no paired `{metric}` against its base: no evaluated question the metric applies to", pipeline.name))?;
            out.push(NonInferiorityRow { row: d.run.clone(), base: d.baseline.clone(), metric: d.label.to_string(), margin: *margin, n: d.n, comparison: d.comparison });
        }
    }
    Ok(out)
}

/// The non-inferiority section of `ablation.md` (empty without rows).
pub fn non_inferiority_markdown(rows: &[NonInferiorityRow]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut s = String::from("\n### Secondary metrics: non-inferiority\n\nDeclared before the run with their margins: a trained row is **non-inferior** on a metric when the lower end of the paired 95 % interval of its difference from the base lies above −margin; otherwise this set cannot rule out a loss larger than the margin.\n\n| Trained row | Base | Metric | n | Δ [95 %] | Margin | Verdict |\n|---|---|---|---|---|---|---|\n");
    for r in rows {
        let c = &r.comparison;
        let verdict = if r.non_inferior() { "✓ non-inferior" } else { "✗ not shown non-inferior" };
        s.push_str(&format!("| {} | {} | {} | {} | {:+.3} [{:+.2}, {:+.2}] | −{:.2} | {verdict} |\n", r.row.replace('|', "\\|"), r.base.replace('|', "\\|"), r.metric, r.n, c.delta, c.ci_low, c.ci_high, r.margin));
    }
    s
}

/// The non-inferiority rows as the manifest's `non_inferiority` stat.
pub fn non_inferiority_stat(rows: &[NonInferiorityRow]) -> serde_json::Value {
    rows.iter().map(|r| serde_json::json!({"row": r.row, "base": r.base, "metric": r.metric, "margin": r.margin, "n": r.n, "delta": r.comparison.delta, "ci_low": r.comparison.ci_low, "ci_high": r.comparison.ci_high, "verdict": if r.non_inferior() { "non-inferior" } else { "not shown non-inferior" }})).collect()
}

/// The gate rows as one family: p adjusted over them alone, and each row's detectable effect at
/// the family's first step (α 0.05 / rows).
pub fn family(mut rows: Vec<GateRow>, correction: crate::stats::Correction) -> Vec<GateRow> {
    let p: Vec<f64> = rows.iter().map(|g| g.comparison.p_value).collect();
    let adjusted = crate::stats::adjust(&p, correction);
    let alpha = 0.05 / rows.len().max(1) as f64;
    for (g, a) in rows.iter_mut().zip(adjusted) {
        g.comparison.p_adjusted = (correction != crate::stats::Correction::None).then_some(a);
        g.mde = if g.sd.is_finite() { crate::stats::minimum_detectable_effect_at(g.sd, g.n, alpha) } else { f64::NAN };
        // The target is a retrieval gain (MRR@10); answer rows' metrics have other scales.
        g.power = if g.metric.starts_with("MRR") { crate::stats::power_at(TARGET_GAIN, g.sd, g.n, alpha) } else { f64::NAN };
    }
    rows
}

/// The gate's verdicts as the manifest's `gate` stat.
pub fn stat(rows: &[GateRow]) -> serde_json::Value {
    rows.iter().map(|g| serde_json::json!({"row": g.row, "base": g.base, "metric": g.metric, "delta": g.comparison.delta, "p": g.comparison.p_value, "p_adjusted": g.comparison.p_adjusted, "family": rows.len(), "mde": g.mde.is_finite().then_some(g.mde), "power_at_target_gain": g.power.is_finite().then_some(g.power), "target_gain": TARGET_GAIN, "verdict": verdict(&g.comparison)})).collect()
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
        let md = markdown(&[GateRow { row: "tuned".into(), base: "base".into(), metric: "MRR".into(), n: 20, comparison: c(0.01, 0.7), sd: 0.3, mde: 0.188, power: 0.1234 }]);
        assert!(md.contains("| tuned | base | MRR | 20 | +0.010 [-0.09, +0.11] | ±0.188 | 12 % |") && md.contains("✗ not better") && md.contains("these 1 row alone"), "{md}");
        assert!(markdown(&[]).is_empty());
    }

    #[test]
    fn the_gate_is_its_own_family() {
        let row = |name: &str, p: f64, sd: f64| GateRow { row: name.into(), base: "base".into(), metric: "MRR@10".into(), n: 41, comparison: c(0.1, p), sd, mde: f64::NAN, power: f64::NAN };
        // Holm over the three gate rows only: 0.01·3, max(0.03, 0.02·2), max(0.04, 0.04).
        let g = family(vec![row("a", 0.02, 0.3), row("b", 0.01, 0.3), row("c", 0.04, f64::NAN)], crate::stats::Correction::Holm);
        let adj: Vec<f64> = g.iter().map(|r| r.comparison.p_adjusted.unwrap()).collect();
        assert!((adj[0] - 0.04).abs() < 1e-12 && (adj[1] - 0.03).abs() < 1e-12 && (adj[2] - 0.04).abs() < 1e-12, "{adj:?}");
        assert!(g.iter().all(|r| verdict(&r.comparison) == "better"));
        // MDE at α 0.05/3: (z_0.99167 + z_0.8) · 0.3 / √41 = (2.394 + 0.842) · 0.0469.
        assert!((g[0].mde - 0.1516).abs() < 1e-3, "{}", g[0].mde);
        assert!(g[2].mde.is_nan(), "no per-question differences, no MDE");
        // Power to see +0.04 there: Φ(0.04 · √41 / 0.3 − 2.394) = Φ(−1.540) ≈ 6 %.
        assert!((g[0].power - 0.0618).abs() < 2e-3 && g[2].power.is_nan(), "{}", g[0].power);
        let alone = family(vec![row("a", 0.02, 0.3)], crate::stats::Correction::Holm);
        assert!(alone[0].mde < g[0].mde, "a smaller family detects smaller effects");
        assert_eq!(family(vec![row("a", 0.02, 0.3)], crate::stats::Correction::None)[0].comparison.p_adjusted, None);
    }

    #[test]
    fn an_answer_gate_is_checked_and_its_secondary_metrics_judged_by_their_margins() {
        use crate::answers::AnswerGate;
        let gate = |family: &[&str], ni: &[(&str, f64)]| AnswerGate { family: family.iter().map(|s| s.to_string()).collect(), non_inferiority: ni.iter().map(|(k, v)| (k.to_string(), *v)).collect() };
        assert_eq!(gate(&["grounded_answer", "out_of_corpus_refusal"], &[("reference_token_f1", 0.05), ("format_compliance", 0.1)]).validate(), Ok(()));
        for (bad, why) in [
            (gate(&[], &[]), "is empty"),
            (gate(&["tokens_generated"], &[]), "not a higher-is-better"),
            (gate(&["grounded_answer"], &[("invented_citation_rate", 0.1)]), "not a higher-is-better"),
            (gate(&["grounded_answer"], &[("reference_token_f1", -0.1)]), "≥ 0"),
            (gate(&["grounded_answer"], &[("reference_token_f1", f64::NAN)]), "≥ 0"),
            (gate(&["grounded_answer"], &[("grounded_answer", 0.1)]), "both"),
        ] {
            let e = bad.validate().unwrap_err();
            assert!(e.contains(why), "{e}");
        }
        // Non-inferior when the interval's lower end is above −margin, not when it reaches it.
        let row = |low: f64, margin: f64| NonInferiorityRow { row: "c · + adapter".into(), base: "c · base".into(), metric: "Token F1 vs reference".into(), margin, n: 20, comparison: PairedComparison { delta: low + 0.05, ci_low: low, ci_high: low + 0.1, p_value: 0.5, p_adjusted: None } };
        assert!(row(-0.04, 0.05).non_inferior());
        assert!(!row(-0.06, 0.05).non_inferior());
        assert!(!row(-0.05, 0.05).non_inferior());
        let md = non_inferiority_markdown(&[row(-0.04, 0.05), row(-0.08, 0.05)]);
        assert!(md.contains("| c · + adapter | c · base | Token F1 vs reference | 20 | +0.010 [-0.04, +0.06] | −0.05 | ✓ non-inferior |"), "{md}");
        assert!(md.contains("✗ not shown non-inferior"), "{md}");
        assert!(non_inferiority_markdown(&[]).is_empty());
        assert_eq!(non_inferiority_stat(&[row(-0.06, 0.05)])[0]["verdict"], "not shown non-inferior");
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
