//! `[search]`: the pipeline's config search run on the search split (journaled in the run's
//! checkpoint folder), its best configs added to the plan so the tables confirm them on the
//! confirmation split.
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;

use anyhow::Context;
use gauge_core::golden::GoldenQuestion;
use gauge_core::stage::Dag;
use gauge_core::{ArtifactStore, StageRun};

use crate::chain::{upstream, Upstream};
use crate::metric::registry;
use crate::planning::{EvaluateOptions, EvaluatePlan};
use crate::retrieve::{evaluate_variants, SearchRun};

/// Runs the pipeline's config search on the search split (journaled in the run's checkpoint
/// folder), writes `search.parquet`, and adds the best configs to the plan (their upstream
/// built) so the tables confirm them on the confirmation split. Returns the report section.
pub fn run_search(plan: &mut EvaluatePlan, questions: Vec<GoldenQuestion>, run: &mut StageRun, options: &EvaluateOptions) -> anyhow::Result<String> {
    let sp = plan.pipeline.search.clone().expect("a search plan");
    let seed = sp.section.seed.unwrap_or(plan.pipeline.seed);
    let has_keywords = questions.iter().any(|q| !q.keywords.is_empty());
    let metrics = registry(plan.pipeline.judge_depth, has_keywords);
    let metric = match &sp.section.metric {
        Some(name) => metrics.iter().find(|m| &m.name == name).ok_or_else(|| anyhow::anyhow!("[search] metric = `{name}` is not one of {}", metrics.iter().map(|m| m.name.as_str()).collect::<Vec<_>>().join(", ")))?,
        None => metrics.iter().find(|m| m.name.starts_with("mrr@")).expect("the registry has MRR"),
    };
    let store = ArtifactStore::new(&options.artifacts);
    let cache = std::sync::Arc::new(gauge_generator::cache::CallCache::new(options.artifacts.join("llm-cache")));
    let mut journal = crate::search::Journal::open(&run.checkpoint_dir()?.join("search-journal.jsonl"))?;
    let state = std::cell::RefCell::new(SearchUpstream { dag: Dag::new(&store), ups: HashMap::new(), corpus: plan.pipeline.corpus.clone(), plan: &sp });
    let outcome = {
        let base = &plan.pipeline;
        let mode = plan.mode;
        let mut score = |group: &[usize], qs: &[&GoldenQuestion]| -> anyhow::Result<Vec<(usize, String, f64, f64)>> {
            let mut mini = base.clone();
            mini.variants = group.iter().map(|&i| sp.candidates[i].variant.clone()).collect();
            mini.answer = None;
            mini.judge = None;
            mini.search = None;
            let group_ups = group.iter().map(|&i| state.borrow_mut().get(i)).collect::<anyhow::Result<Vec<_>>>()?;
            let golden: Vec<GoldenQuestion> = qs.iter().map(|q| (*q).clone()).collect();
            let rows = evaluate_variants(&mini, &group_ups, &golden, mode, &BTreeSet::new(), &SearchRun { device: &options.device, cache: &cache, trace_and_show: false })?.query_rows;
            Ok(rows.iter().map(|r| (group[mini.variants.iter().position(|v| v.name == r.config).expect("a group config")], r.qid.clone(), metric.value(r), r.latency_ms / 1000.0)).collect())
        };
        let mut cost = |i: usize| -> anyhow::Result<f64> {
            let u = state.borrow_mut().get(i)?;
            Ok(crate::search::build_seconds(&[u.index.as_path()]))
        };
        crate::search::run(&sp, &questions, seed, &mut journal, &mut score, &mut cost, &metric.label)?
    };
    let mut state = state.into_inner();
    let n = crate::search::write_parquet(&run.path("search.parquet"), &sp, &outcome.rows, &metric.name)?;
    run.add_output("search.parquet", Some(n))?;
    run.set_stat("search_configs", outcome.rows.iter().filter(|r| r.rung == 0).count());
    run.set_stat("search_seconds", outcome.seconds);
    // The best configs join the tables (confirmation split), the best first.
    for &i in outcome.ranking.iter().take(sp.section.confirm_top) {
        let u = state.get(i)?;
        plan.pipeline.variants.push(sp.candidates[i].variant.clone());
        plan.upstream.push(u);
    }
    plan.built.extend(state.dag.built.iter().cloned());
    Ok(crate::search::markdown(&sp, &outcome, &metric.label, (questions.len(), plan.golden.len()), seed))
}

/// The searched configs' upstream artifacts, built through the DAG on first use.
struct SearchUpstream<'s, 'a> {
    dag: Dag<'a>,
    ups: HashMap<usize, Upstream>,
    corpus: PathBuf,
    plan: &'s crate::search::SearchPlan,
}

impl SearchUpstream<'_, '_> {
    fn get(&mut self, i: usize) -> anyhow::Result<Upstream> {
        if let Some(u) = self.ups.get(&i) {
            return Ok(u.clone());
        }
        let v = &self.plan.candidates[i].variant;
        let u = upstream(&mut self.dag, &self.corpus, v).with_context(|| format!("[search] config `{}`", v.name))?;
        self.ups.insert(i, u.clone());
        Ok(u)
    }
}

