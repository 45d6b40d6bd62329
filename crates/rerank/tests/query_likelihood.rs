//! The query-likelihood reranker on SmolLM2-135M (`just models`): a question scores higher
//! after the passage it was written for than after unrelated ones, passages are cut to
//! `max_length` tokens, scores are cached, and a model that is not a decoder is refused in one line.
use std::sync::Arc;

use gauge_generator::cache::CallCache;
use gauge_rank::{RerankConfig, RerankKind};
use gauge_rerank::{load_reranker, QueryLikelihoodReranker};

const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

#[test]
fn the_passage_a_question_was_written_for_scores_highest() {
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(CallCache::new(dir.path()));
    let cfg = RerankConfig { kind: RerankKind::QueryLikelihood, model: SMOLLM2.into(), ..Default::default() };
    let reranker = load_reranker(&cfg, "cpu", Some(calls.clone())).expect("SmolLM2 (run `just models`)");
    let passages = [
        "Hazardous materials shipping papers must list the proper shipping name, hazard class and identification number of each material.",
        "At a highway-rail grade crossing, flashing lights and gate arms warn motorists that a train is approaching; the gates must be fully lowered before the train arrives.",
        "Track geometry cars measure gauge, alignment and surface of the rails at speed.",
    ];
    let scores = reranker.score("What warns motorists that a train is approaching a grade crossing?", &passages).unwrap();
    assert_eq!(scores.len(), 3);
    assert!(scores[1] > scores[0] && scores[1] > scores[2], "{scores:?}");
    assert!(scores.iter().all(|s| s.is_finite() && *s < 0.0), "{scores:?}");
    assert_eq!((calls.hits(), calls.misses()), (0, 3));
    assert_eq!(reranker.score("What warns motorists that a train is approaching a grade crossing?", &passages).unwrap(), scores);
    assert_eq!((calls.hits(), calls.misses()), (3, 3));
}

#[test]
fn passages_are_cut_to_max_length_tokens() {
    let r = QueryLikelihoodReranker::load(SMOLLM2, Some(8), "cpu", None).expect("SmolLM2 (run `just models`)");
    let long = "The signal indication governs the movement of the train at every block. ".repeat(20);
    let prompt = &r.scorer().messages(&long)[0].content;
    let kept = prompt.trim_start_matches("Passage: ").split("\n\n").next().unwrap();
    assert!(long.starts_with(kept) && !kept.is_empty() && kept.len() < 60, "{kept:?}");
    // A short passage is kept whole.
    assert!(r.scorer().messages("Gates lower.")[0].content.contains("Passage: Gates lower.\n\n"));
}

#[test]
fn a_model_that_is_not_a_decoder_is_refused_in_one_line() {
    let cfg = RerankConfig { kind: RerankKind::QueryLikelihood, model: "no-such/decoder".into(), ..Default::default() };
    let err = load_reranker(&cfg, "cpu", None).err().expect("refused").to_string();
    assert!(err.contains("no-such/decoder") && err.contains("query likelihood") && !err.contains('\n'), "{err}");
}
