//! `[search]` in a pipeline file: a space over any config field, searched by grid, seeded
//! random sampling or successive halving on a **search split** of the golden set, the best
//! configs then confirmed on a **confirmation split** the search never saw (page-grouped,
//! seeded) beside the baseline, with intervals and corrected paired tests.
//!
//! The space is written as dotted config paths (the same paths as `--set`): see
//! [`crate::search_space`].
//!
//! Every (config, question) result is journaled in the evaluation's checkpoint folder, so a
//! killed search resumes where it stopped; upstream artifacts are built through the stage DAG
//! (a chunking change embeds once; a retrieval change reuses its index).
use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, Float64Array, Int32Array, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use gauge_core::golden::GoldenQuestion;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::variant::StageConfigs;

pub use crate::search_space::{plan, show, Candidate, Param, SearchPlan, SearchSection, Strategy};

/// The question counts of the rungs: halving starts on few questions and ends on all of
/// the search split; grid and random have one rung.
pub fn rungs(strategy: Strategy, configs: usize, questions: usize, eta: usize, keep: usize) -> Vec<usize> {
    if strategy != Strategy::Halving || questions == 0 {
        return vec![questions];
    }
    // Rungs until the survivors are no more than `keep` (at least one rung).
    let mut n = 1;
    let mut survivors = configs;
    while survivors > keep.max(1) * eta && n < 6 {
        survivors = survivors.div_ceil(eta);
        n += 1;
    }
    let mut counts: Vec<usize> = (0..n).map(|r| ((questions as f64) / (eta as f64).powi(n - 1 - r)).ceil().max(5.0_f64.min(questions as f64)) as usize).collect();
    // Rungs floored at the same count would only prune again on the same questions.
    counts.dedup();
    counts
}

/// One evaluation of a config on a rung.
#[derive(Debug, Clone)]
pub struct SearchRow {
    /// The config (its candidate id).
    pub id: usize,
    /// Config name.
    pub config: String,
    /// Rung (0 first).
    pub rung: usize,
    /// Questions of the search split it was scored on.
    pub questions: usize,
    /// The searched metric's mean over them.
    pub value: f64,
    /// Wall seconds of its upstream artifacts (their manifests) plus its searches so far.
    pub cost_seconds: f64,
    /// Whether it survived the rung (the last rung: its rank among the finalists).
    pub rank: Option<usize>,
    /// The fields it sets.
    pub fields: Vec<(String, Value)>,
}

/// What a search found.
#[derive(Debug, Clone)]
pub struct SearchOutcome {
    /// Every evaluation, rung by rung.
    pub rows: Vec<SearchRow>,
    /// The finalists, the best first (candidate positions).
    pub ranking: Vec<usize>,
    /// (configs, questions) per rung.
    pub rungs: Vec<(usize, usize)>,
    /// Configs never tried because the seconds budget ran out.
    pub not_tried: usize,
    /// Wall seconds of the search (this run; a resumed run counts its own time).
    pub seconds: f64,
}

/// A (config, question) result in the journal.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct JournalLine {
    key: String,
    qid: String,
    value: f64,
    seconds: f64,
}

/// The journal of a search: one line per (config, question) scored, appended and fsynced per
/// group of configs; a torn last line (a kill mid-write) is ignored.
pub struct Journal {
    file: std::fs::File,
    done: HashMap<(String, String), (f64, f64)>,
}

impl Journal {
    /// Opens (or starts) the journal at `path`.
    pub fn open(path: &Path) -> anyhow::Result<Journal> {
        let mut done = HashMap::new();
        if let Ok(text) = std::fs::read_to_string(path) {
            for line in text.lines() {
                if let Ok(l) = serde_json::from_str::<JournalLine>(line) {
                    done.insert((l.key, l.qid), (l.value, l.seconds));
                }
            }
        }
        // A torn last line would glue onto the next append: start appends on a fresh line.
        let torn = std::fs::read(path).map(|b| !b.is_empty() && b.last() != Some(&b'\n')).unwrap_or(false);
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(|e| anyhow::anyhow!("{}: cannot open the search journal ({e})", path.display()))?;
        if torn {
            file.write_all(b"\n")?;
        }
        Ok(Journal { file, done })
    }

    fn get(&self, key: &str, qid: &str) -> Option<(f64, f64)> {
        self.done.get(&(key.to_string(), qid.to_string())).copied()
    }

    fn append(&mut self, lines: &[(String, String, f64, f64)]) -> anyhow::Result<()> {
        let mut buf = String::new();
        for (key, qid, value, seconds) in lines {
            buf.push_str(&serde_json::to_string(&JournalLine { key: key.clone(), qid: qid.clone(), value: *value, seconds: *seconds })?);
            buf.push('\n');
            self.done.insert((key.clone(), qid.clone()), (*value, *seconds));
        }
        self.file.write_all(buf.as_bytes())?;
        self.file.sync_data()?;
        Ok(())
    }
}

/// The key of a config in the journal: its resolved settings (so a reordered space resumes).
pub fn candidate_key(c: &Candidate) -> String {
    gauge_core::hash::bytes_hash(serde_json::to_string(&c.variant.stages).expect("stage configs serialise").as_bytes())
}

/// Everything a config's retrieval depends on except the retrieval settings (configs with
/// the same key share one index).
pub fn upstream_key(stages: &StageConfigs) -> String {
    let mut v = serde_json::to_value(stages).expect("stage configs serialise");
    if let Some(o) = v.as_object_mut() {
        o.remove("retrieval");
    }
    v.to_string()
}

/// Wall seconds of an artifact and every artifact it was built from (each counted once).
pub fn build_seconds(dirs: &[&Path]) -> f64 {
    let mut seen = BTreeSet::new();
    let mut stack: Vec<std::path::PathBuf> = dirs.iter().map(|d| d.to_path_buf()).collect();
    let mut total = 0.0;
    while let Some(d) = stack.pop() {
        if !seen.insert(d.clone()) {
            continue;
        }
        let Ok(m) = gauge_core::Manifest::read(&d) else { continue };
        total += m.wall_seconds;
        // Inputs name files inside upstream artifacts (`…/embed/<fp>/embeddings.parquet`) or
        // the artifact folders themselves; corpus files lead nowhere.
        for i in &m.inputs {
            let p = std::path::PathBuf::from(&i.path);
            let dir = if p.is_dir() { Some(p) } else { p.parent().map(Path::to_path_buf) };
            if let Some(dir) = dir.filter(|d| d.join("manifest.json").is_file()) {
                stack.push(dir);
            }
        }
    }
    total
}

/// Scores a group of configs sharing an index on some questions: (config position, qid) →
/// (metric value, seconds). Supplied by the orchestration (it owns the engine).
pub type ScoreFn<'a> = dyn FnMut(&[usize], &[&GoldenQuestion]) -> anyhow::Result<Vec<(usize, String, f64, f64)>> + 'a;

/// Runs the search over the candidates on the search split: `score` evaluates configs,
/// `cost` gives a config's upstream build seconds (building it first if needed).
pub fn run(plan: &SearchPlan, questions: &[GoldenQuestion], seed: u64, journal: &mut Journal, score: &mut ScoreFn<'_>, cost: &mut dyn FnMut(usize) -> anyhow::Result<f64>, metric_label: &str) -> anyhow::Result<SearchOutcome> {
    let started = Instant::now();
    let section = &plan.section;
    let keys: Vec<String> = plan.candidates.iter().map(candidate_key).collect();
    // Question order: seeded, so each rung's questions are the first n (nested rungs).
    let mut order: Vec<&GoldenQuestion> = questions.iter().collect();
    gauge_core::rng::SplitMix64::new(seed ^ 0x9e3779b97f4a7c15).shuffle(&mut order);
    let counts = rungs(section.strategy, plan.candidates.len(), order.len(), section.eta, section.confirm_top);
    // Cheap first: configs sharing the baseline-most-common index first, then by index, the
    // ones without a reranker before those with one.
    let mut survivors: Vec<usize> = (0..plan.candidates.len()).collect();
    let ukeys: Vec<String> = plan.candidates.iter().map(|c| upstream_key(&c.variant.stages)).collect();
    survivors.sort_by_key(|&i| (ukeys[i].clone(), plan.candidates[i].variant.stages.retrieval.rerank.is_some(), plan.candidates[i].id));
    let mut rows = Vec::new();
    let mut rung_sizes = Vec::new();
    let mut not_tried = 0;
    let mut costs: HashMap<usize, f64> = HashMap::new();
    let mut best: Option<(f64, usize)> = None;
    for (r, &nq) in counts.iter().enumerate() {
        let qs = &order[..nq];
        let bar = gauge_core::progress::bar(survivors.len() as u64, &format!("search: rung {}/{} ({} configs × {nq} questions)", r + 1, counts.len(), survivors.len()));
        let mut tried = Vec::new();
        // Groups of survivors sharing an index, in the cheap-first order.
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for &i in &survivors {
            match groups.last_mut() {
                Some(g) if ukeys[g[0]] == ukeys[i] => g.push(i),
                _ => groups.push(vec![i]),
            }
        }
        for group in groups {
            if r == 0 && section.seconds > 0.0 && started.elapsed().as_secs_f64() > section.seconds && !tried.is_empty() {
                not_tried += group.len();
                bar.inc(group.len() as u64);
                continue;
            }
            let missing: Vec<&GoldenQuestion> = qs.iter().copied().filter(|q| group.iter().any(|&i| journal.get(&keys[i], &q.qid).is_none())).collect();
            if !missing.is_empty() {
                let scored = score(&group, &missing)?;
                let lines: Vec<(String, String, f64, f64)> = scored.into_iter().filter(|(i, qid, _, _)| journal.get(&keys[*i], qid).is_none()).map(|(i, qid, v, s)| (keys[i].clone(), qid, v, s)).collect();
                journal.append(&lines)?;
            }
            for &i in &group {
                let upstream = match costs.get(&i) {
                    Some(c) => *c,
                    None => {
                        let c = cost(i)?;
                        costs.insert(i, c);
                        c
                    }
                };
                let (mut sum, mut secs) = (0.0, 0.0);
                for q in qs {
                    let (v, s) = journal.get(&keys[i], &q.qid).ok_or_else(|| anyhow::anyhow!("search: no score for config `{}`, question `{}`", plan.candidates[i].variant.name, q.qid))?;
                    sum += v;
                    secs += s;
                }
                let value = if qs.is_empty() { 0.0 } else { sum / qs.len() as f64 };
                if best.is_none_or(|(b, _)| value > b) {
                    best = Some((value, i));
                }
                tried.push(i);
                rows.push(SearchRow { id: plan.candidates[i].id, config: plan.candidates[i].variant.name.clone(), rung: r, questions: nq, value, cost_seconds: upstream + secs, rank: None, fields: plan.candidates[i].fields.clone() });
                bar.inc(1);
                if let Some((b, bi)) = best {
                    bar.set_message(format!("best so far: {} {metric_label} {b:.3}", plan.candidates[bi].variant.name));
                }
            }
        }
        bar.finish_and_clear();
        rung_sizes.push((tried.len(), nq));
        // Rank this rung's configs: value, then cheaper, then enumeration order.
        let scored: HashMap<usize, (f64, f64)> = rows.iter().filter(|row| row.rung == r).map(|row| (row.id, (row.value, row.cost_seconds))).collect();
        let value_of = |i: usize| scored.get(&plan.candidates[i].id).map_or(f64::NEG_INFINITY, |v| v.0);
        let cost_of = |i: usize| scored.get(&plan.candidates[i].id).map_or(f64::INFINITY, |v| v.1);
        tried.sort_by(|&a, &b| value_of(b).total_cmp(&value_of(a)).then(cost_of(a).total_cmp(&cost_of(b))).then(plan.candidates[a].id.cmp(&plan.candidates[b].id)));
        let last = r + 1 == counts.len();
        let keep = if last { tried.len() } else { tried.len().div_ceil(section.eta).max(section.confirm_top.min(tried.len())) };
        for (rank, &i) in tried.iter().enumerate() {
            if let Some(row) = rows.iter_mut().rev().find(|row| row.rung == r && row.id == plan.candidates[i].id) {
                row.rank = (rank < keep).then_some(rank + 1);
            }
        }
        tried.truncate(keep);
        survivors = tried;
        eprintln!("search: rung {}/{}: {} configs on {nq} questions; best {} {metric_label} {:.3}", r + 1, counts.len(), rung_sizes[r].0, survivors.first().map_or("-", |&i| plan.candidates[i].variant.name.as_str()), survivors.first().map_or(0.0, |&i| value_of(i)));
    }
    Ok(SearchOutcome { rows, ranking: survivors, rungs: rung_sizes, not_tried, seconds: started.elapsed().as_secs_f64() })
}

/// Writes `search.parquet`: one row per (config, rung) evaluated, with its fields as columns
/// (`field:<path>`; numbers as Float64, other values as their text; null where unset or
/// not applicable).
pub fn write_parquet(path: &Path, plan: &SearchPlan, rows: &[SearchRow], metric: &str) -> anyhow::Result<u64> {
    let mut fields: Vec<Field> = gauge_core::schema::arrow_schema(gauge_core::schema::SEARCH_COLUMNS).fields().iter().map(|f| f.as_ref().clone()).collect();
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.config.as_str()))),
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.id as i32))),
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.rung as i32))),
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.questions as i32))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|_| metric))),
        Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.value))),
        Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.cost_seconds))),
        Arc::new(Int32Array::from_iter(rows.iter().map(|r| r.rank.map(|x| x as i32)))),
    ];
    for p in &plan.params {
        let value = |r: &SearchRow| r.fields.iter().find(|(f, _)| f == &p.path).map(|(_, v)| v.clone()).filter(|v| !v.is_null());
        let numeric = p.values.iter().all(|v| v.is_number() || v.is_null());
        if numeric {
            fields.push(Field::new(format!("field:{}", p.path), DataType::Float64, true));
            cols.push(Arc::new(Float64Array::from_iter(rows.iter().map(|r| value(r).and_then(|v| v.as_f64())))));
        } else {
            fields.push(Field::new(format!("field:{}", p.path), DataType::Utf8, true));
            cols.push(Arc::new(StringArray::from_iter(rows.iter().map(|r| Some(value(r).map_or_else(|| "none".to_string(), |v| show(&v)))))));
        }
    }
    Ok(gauge_core::table::write_parquet(path, Arc::new(Schema::new(fields)), cols)?)
}

/// The search section of ablation.md.
pub fn markdown(plan: &SearchPlan, outcome: &SearchOutcome, metric_label: &str, split: (usize, usize), seed: u64) -> String {
    let s = &plan.section;
    let strategy = match s.strategy {
        Strategy::Grid => "grid".to_string(),
        Strategy::Random => format!("seeded random (seed {seed})"),
        Strategy::Halving => format!("successive halving (η = {}, seed {seed})", s.eta),
    };
    let mut out = format!(
        "\n## Config search\n\n{strategy} over {} of the {} configs of a {}-field space, on {metric_label}. The golden set was split by page groups (seed {seed}): **{} questions searched, {} kept for confirmation**; the table above is the confirmation split only (the baseline and the {} best configs of the search, with the pipeline's correction over the family). A config's search-split figure below is optimistic — it was chosen on those questions — and is not the figure to quote.\n\n",
        plan.candidates.len(),
        plan.space_size,
        plan.params.len(),
        split.0,
        split.1,
        outcome.ranking.len().min(s.confirm_top),
    );
    let rungs: Vec<String> = outcome.rungs.iter().map(|(c, q)| format!("{c} configs × {q} questions")).collect();
    out.push_str(&format!("Rungs: {}. ", rungs.join(" → ")));
    if outcome.not_tried > 0 {
        out.push_str(&format!("{} configs were not tried (the {} s budget ran out). ", outcome.not_tried, s.seconds));
    }
    out.push_str("Cost: the wall seconds of each config's upstream artifacts (their manifests) plus its searches; `search.parquet` has every config and rung.\n\n");
    let last = outcome.rungs.len().saturating_sub(1);
    let mut finals: Vec<&SearchRow> = outcome.rows.iter().filter(|r| r.rung == last && r.rank.is_some()).collect();
    finals.sort_by_key(|r| r.rank);
    out.push_str(&format!("| rank | config | {} | {metric_label} (search split) | cost (s) |\n|---:|---|{}---:|---:|\n", plan.params.iter().map(|p| format!("`{}`", p.path)).collect::<Vec<_>>().join(" | "), "---|".repeat(plan.params.len())));
    for r in finals.iter().take(10) {
        let cells: Vec<String> = plan.params.iter().map(|p| r.fields.iter().find(|(f, _)| f == &p.path).map_or("–".to_string(), |(_, v)| show(v))).collect();
        out.push_str(&format!("| {} | {} | {} | {:.3} | {:.1} |\n", r.rank.unwrap_or(0), r.config, cells.join(" | "), r.value, r.cost_seconds));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(space: &str, extra: &str) -> SearchSection {
        toml::from_str::<SearchSection>(&format!("{extra}\n[space]\n{space}")).unwrap()
    }

    fn resolve_ok(_: &str, v: Value) -> Result<StageConfigs, String> {
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    #[test]
    fn ranges_conditions_and_none_expand_to_distinct_configs() {
        let s = section(
            "\"chunk.size\" = { range = [500, 1500], step = 500 }\n\"retrieval.fusion.k\" = { log_range = [10, 1000], steps = 3 }\n\"retrieval.rerank\" = [\"none\", { kind = \"max_sim\", model = \"m\", n_initial = 25, top_n = 10 }]\n\"retrieval.rerank.n_initial\" = { values = [25, 50], when = { \"retrieval.rerank\" = \"on\" } }\n",
            "strategy = \"grid\"\nbudget = 100",
        );
        let base = serde_json::json!({"retrieval": {"fusion": {"kind": "rrf", "k": 60.0}}});
        let p = plan(s, &base, 1, &resolve_ok).unwrap();
        assert_eq!(p.params[0].values, vec![Value::from(500), Value::from(1000), Value::from(1500)]);
        assert_eq!(p.params[1].values, vec![Value::from(10), Value::from(100), Value::from(1000)]);
        // 3 sizes × 3 fusion k × (no reranker + reranker with 2 n_initial) = 27 distinct configs.
        assert_eq!(p.space_size, 27);
        let reranked = p.candidates.iter().filter(|c| c.variant.stages.retrieval.rerank.is_some()).count();
        assert_eq!(reranked, 18);
        assert!(p.candidates.iter().any(|c| c.variant.stages.retrieval.rerank.as_ref().is_some_and(|r| r.n_initial == 50)));
        assert!(p.candidates.iter().all(|c| c.variant.stages.retrieval.rerank.is_some() || !c.fields.iter().any(|(f, _)| f == "retrieval.rerank.n_initial")));
    }

    #[test]
    fn sampling_is_seeded_and_within_budget() {
        let s = section("\"chunk.size\" = [400, 600, 800, 1000, 1200]\n\"chunk.overlap\" = [0, 50, 100, 150]\n", "strategy = \"random\"\nbudget = 7");
        let a = plan(s.clone(), &serde_json::json!({}), 3, &resolve_ok).unwrap();
        let b = plan(s.clone(), &serde_json::json!({}), 3, &resolve_ok).unwrap();
        let c = plan(s, &serde_json::json!({}), 4, &resolve_ok).unwrap();
        let ids = |p: &SearchPlan| p.candidates.iter().map(|c| c.id).collect::<Vec<_>>();
        assert_eq!((a.space_size, a.candidates.len()), (20, 7));
        assert_eq!(ids(&a), ids(&b));
        assert_ne!(ids(&a), ids(&c));
    }

    #[test]
    fn mistakes_are_named() {
        let cases = [
            ("\"chunk.size\" = []\n", "", "no values"),
            ("\"chunk.size\" = { range = [5, 1] , step = 1 }\n", "", "low < high"),
            ("\"chunk.size\" = { range = [1, 5] }\n", "", "positive `step`"),
            ("\"chunk.size\" = { log_range = [0, 5], steps = 3 }\n", "", "positive"),
            ("\"chunk.size\" = { values = [1], when = { \"x.y\" = 1 } }\n", "", "not another field"),
            ("\"chunk.size\" = { valus = [1] }\n", "", "unknown key `valus`"),
            ("\"chunk.size\" = [1, 2, 3]\n", "strategy = \"grid\"\nbudget = 2", "more than budget"),
            ("\"retrieval.k\" = [3, 5]\n", "", "cannot vary"),
            ("", "", "no `space`"),
        ];
        for (space, extra, want) in cases {
            let e = plan(section(space, extra), &serde_json::json!({}), 1, &resolve_ok).unwrap_err();
            assert!(e.contains(want), "{want}: {e}");
        }
        // A field the configs do not have is refused by the pipeline's own resolution.
        let e = plan(section("\"chunk.sise\" = [1]\n", ""), &serde_json::json!({}), 1, &resolve_ok).unwrap_err();
        assert!(e.contains("sise"), "{e}");
    }

    #[test]
    fn halving_rungs_end_on_the_whole_split() {
        assert_eq!(rungs(Strategy::Halving, 54, 25, 3, 3), vec![5, 9, 25]);
        assert_eq!(rungs(Strategy::Halving, 4, 25, 3, 3), vec![25]);
        assert_eq!(rungs(Strategy::Halving, 144, 25, 3, 3), vec![5, 9, 25]);
        assert_eq!(rungs(Strategy::Grid, 54, 25, 3, 3), vec![25]);
    }

    fn q(id: &str) -> GoldenQuestion {
        GoldenQuestion { qid: id.into(), question: id.into(), gold: vec![], keywords: vec![], reference_answer: None, category: None }
    }

    #[test]
    fn halving_keeps_the_best_and_a_rerun_asks_nothing() {
        let s = section("\"chunk.size\" = { range = [100, 2800], step = 100 }\n", "budget = 100");
        let p = plan(s, &serde_json::json!({}), 1, &resolve_ok).unwrap();
        assert_eq!(p.candidates.len(), 28);
        let qs: Vec<GoldenQuestion> = (0..30).map(|i| q(&format!("q{i:02}"))).collect();
        // The true score of a config is its chunk size / 2800: the largest must win.
        let truth = |i: usize| p.candidates[i].variant.stages.chunk.size as f64 / 2800.0;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        let mut calls = 0usize;
        let first = {
            let mut journal = Journal::open(&path).unwrap();
            let mut score = |group: &[usize], qs: &[&GoldenQuestion]| {
                calls += group.len() * qs.len();
                Ok(group.iter().flat_map(|&i| qs.iter().map(move |q| (i, q.qid.clone(), truth(i), 0.01))).collect())
            };
            run(&p, &qs, 1, &mut journal, &mut score, &mut |_| Ok(1.0), "MRR").unwrap()
        };
        assert_eq!(first.rungs.len(), 3);
        assert_eq!(first.rungs[0], (28, 5));
        assert_eq!(p.candidates[first.ranking[0]].variant.stages.chunk.size, 2800);
        // Fewer (config, question) scores than the full grid on the whole split.
        assert!(calls < 28 * 30, "{calls}");
        // A rerun (a resumed search) scores nothing again and finds the same ranking.
        let mut journal = Journal::open(&path).unwrap();
        let mut again = 0usize;
        let mut score = |group: &[usize], qs: &[&GoldenQuestion]| {
            again += group.len() * qs.len();
            Ok(Vec::new())
        };
        let second = run(&p, &qs, 1, &mut journal, &mut score, &mut |_| Ok(1.0), "MRR").unwrap();
        assert_eq!(again, 0);
        assert_eq!(second.ranking, first.ranking);
    }

    #[test]
    fn build_seconds_walk_the_upstream_artifacts_once() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = |name: &str, seconds: f64, inputs: &[String]| {
            let d = dir.path().join(name);
            std::fs::create_dir_all(&d).unwrap();
            let inputs: Vec<serde_json::Value> = inputs.iter().map(|p| serde_json::json!({"path": p, "name": "x", "hash": "h", "rows": null})).collect();
            let m = serde_json::json!({"stage": name, "format_version": 1, "fingerprint": name, "gauge_version": "0", "git_commit": "", "config": {}, "inputs": inputs, "outputs": [], "seed": null, "started_at": "", "finished_at": "", "wall_seconds": seconds, "stats": {}});
            std::fs::write(d.join("manifest.json"), m.to_string()).unwrap();
            std::fs::write(d.join("out.parquet"), "").unwrap();
            d
        };
        let corpus = dir.path().join("corpus.pdf");
        std::fs::write(&corpus, "").unwrap();
        let pages = manifest("extract", 10.0, &[corpus.display().to_string()]);
        let chunks = manifest("chunk", 2.0, &[pages.join("out.parquet").display().to_string()]);
        let emb = manifest("embed", 300.0, &[chunks.join("out.parquet").display().to_string()]);
        // The index reads the chunks twice over (directly and through the embeddings): once.
        let index = manifest("index", 1.0, &[chunks.join("out.parquet").display().to_string(), emb.join("out.parquet").display().to_string()]);
        assert_eq!(build_seconds(&[index.as_path()]), 313.0);
        assert_eq!(build_seconds(&[emb.as_path(), chunks.as_path()]), 312.0);
    }

    #[test]
    fn a_torn_journal_line_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        std::fs::write(&path, "{\"key\":\"a\",\"qid\":\"q\",\"value\":1.0,\"seconds\":0.1}\n{\"key\":\"b\",\"qi").unwrap();
        let mut j = Journal::open(&path).unwrap();
        assert_eq!(j.get("a", "q"), Some((1.0, 0.1)));
        assert_eq!(j.get("b", "q"), None);
        j.append(&[("b".into(), "q".into(), 0.5, 0.2)]).unwrap();
        let j = Journal::open(&path).unwrap();
        assert_eq!(j.get("b", "q"), Some((0.5, 0.2)));
    }
}
