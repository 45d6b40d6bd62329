//! The golden set's provenance in an evaluation: which configs use a model of the family that
//! wrote or judged the questions (query likelihood, query rewriting and HyDE, RAPTOR
//! summaries, a retriever trained on that family's questions, the answer generators and the
//! judge), so the report marks those rows and says why. Such a row may be favoured by the
//! question set rather than better: a question a language model wrote from a passage tends to
//! be likely under a language model given that passage.
use std::path::Path;

use gauge_core::golden::Provenance;
use serde_json::Value;

use crate::pipeline::{Pipeline, Variant};

/// The models a config runs, each with the role it plays: `(role, model)`.
pub fn models_of(v: &Variant, pipeline_dir: &Path) -> Vec<(String, String)> {
    let (retrieval, embed) = (&v.stages.retrieval, &v.stages.embed);
    let mut out = Vec::new();
    if let Some(r) = &retrieval.rerank {
        if r.kind == gauge_rank::RerankKind::QueryLikelihood {
            out.push(("query likelihood".to_string(), r.model.clone()));
        } else {
            out.extend(trained_on(&r.model, pipeline_dir).into_iter().map(|m| ("reranker trained on its questions".to_string(), m)));
        }
    }
    if let Some(r) = &retrieval.rewrite {
        let kind = serde_json::to_value(r.kind).ok().and_then(|k| k.as_str().map(str::to_string)).unwrap_or_default();
        out.push((format!("query rewriting ({kind})"), r.model.model_name().to_string()));
    }
    if let Some(r) = &v.stages.raptor {
        out.push(("RAPTOR summaries".to_string(), r.model.model_name().to_string()));
    }
    for path in embed.adapter.iter().chain(std::iter::once(&embed.model)) {
        out.extend(trained_on(path, pipeline_dir).into_iter().map(|m| ("embedder trained on its questions".to_string(), m)));
    }
    out
}

/// The models that wrote the questions a trained model learned from: the `questions_by` list
/// of the `training_pages.json` beside its weights (written by `train-lora`), when there is one.
fn trained_on(path: &str, pipeline_dir: &Path) -> Vec<String> {
    let p = Path::new(path);
    let candidates = [p.join("training_pages.json"), pipeline_dir.join(p).join("training_pages.json"), p.parent().map(|d| d.join("training_pages.json")).unwrap_or_default()];
    for file in candidates.iter().filter(|f| f.is_file()) {
        let Ok(text) = std::fs::read_to_string(file) else { continue };
        let Ok(v) = serde_json::from_str::<Value>(&text) else { continue };
        if let Some(list) = v["questions_by"].as_array() {
            return list.iter().filter_map(|m| m.as_str().map(str::to_string)).collect();
        }
    }
    Vec::new()
}

/// Per config whose models share a family with the questions' writer or judge: the config's
/// name and why (`query likelihood uses SmolLM2-…; a smollm model judged the questions`).
/// The answer generators and the judge are listed under the names `answers` and `judge`.
pub fn same_family(pipeline: &Pipeline, provenance: &Provenance) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut check = |name: &str, models: Vec<(String, String)>| {
        let reasons: Vec<String> = models.iter().filter_map(|(role, model)| provenance.same_family(model).map(|why| format!("{role} uses `{model}`: {why}"))).collect();
        if !reasons.is_empty() {
            out.push((name.to_string(), reasons.join("; ")));
        }
    };
    for v in &pipeline.variants {
        check(&v.name, models_of(v, &pipeline.dir));
    }
    if let Some(section) = &pipeline.answer {
        let listed: Vec<&gauge_generator::GeneratorConfig> = section.generators.iter().filter_map(|g| g.generator.as_ref()).collect();
        let models = if listed.is_empty() { vec![&section.generator] } else { listed };
        check("answers", models.into_iter().map(|g| ("the answer generator".to_string(), g.model_name().to_string())).collect());
    }
    if let Some(judge) = &pipeline.judge {
        check("judge", vec![("the judge".to_string(), judge.model.model_name().to_string())]);
    }
    out
}
