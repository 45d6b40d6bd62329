//! BM25 with chosen `k1` and `b`: a tantivy term query scored like tantivy's own
//! (`idf · (k1 + 1) · tf / (tf + k1 · (1 − b + b · dl / avgdl))`, Lucene's idf, the field
//! length read from the one-byte field norm) but with the two parameters as settings, not
//! constants. tantivy fixes them at 1.2 and 0.75; Anserini's BEIR runs use 0.9 and 0.4.
//!
//! [`Bm25Params::term_query`] gives tantivy's own `TermQuery` at tantivy's constants (so the
//! default keeps tantivy's block-max pruning) and a [`ParamTermQuery`] otherwise; the test
//! holds the two to the same scores at the default.
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tantivy::fieldnorm::FieldNormReader;
use tantivy::postings::{Postings, SegmentPostings};
use tantivy::query::{Bm25StatisticsProvider, EmptyScorer, EnableScoring, Explanation, Query, Scorer, TermQuery, Weight};
use tantivy::schema::IndexRecordOption;
use tantivy::{DocId, DocSet, Score, SegmentReader, Term, TERMINATED};

/// BM25's two parameters.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Bm25Params {
    /// Term-frequency saturation (tantivy and Lucene 1.2; Anserini's BEIR runs 0.9).
    pub k1: f32,
    /// Length normalisation, 0 (none) to 1 (full) (tantivy and Lucene 0.75; Anserini 0.4).
    pub b: f32,
}

impl Default for Bm25Params {
    fn default() -> Self {
        Bm25Params { k1: 1.2, b: 0.75 }
    }
}

impl Bm25Params {
    /// Whether these are tantivy's constants.
    pub fn is_default(&self) -> bool {
        *self == Bm25Params::default()
    }

    /// Checks the ranges BM25 is defined on: `k1 ≥ 0`, `0 ≤ b ≤ 1`, both finite.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.k1.is_finite() && self.k1 >= 0.0) {
            return Err(format!("bm25.k1 = {} is out of range; use a finite value ≥ 0 (1.2 is the default, 0.9 Anserini's)", self.k1));
        }
        if !(self.b.is_finite() && (0.0..=1.0).contains(&self.b)) {
            return Err(format!("bm25.b = {} is out of range; use a value in [0, 1] (0.75 is the default, 0.4 Anserini's)", self.b));
        }
        Ok(())
    }

    /// A scored query for one term with these parameters.
    pub fn term_query(&self, term: Term) -> Box<dyn Query> {
        if self.is_default() {
            Box::new(TermQuery::new(term, IndexRecordOption::WithFreqs))
        } else {
            Box::new(ParamTermQuery { term, params: *self })
        }
    }
}

/// One term scored by BM25 with [`Bm25Params`].
#[derive(Debug, Clone)]
pub struct ParamTermQuery {
    term: Term,
    params: Bm25Params,
}

impl ParamTermQuery {
    /// The query for `term`.
    pub fn new(term: Term, params: Bm25Params) -> ParamTermQuery {
        ParamTermQuery { term, params }
    }
}

impl Query for ParamTermQuery {
    fn weight(&self, enable_scoring: EnableScoring<'_>) -> tantivy::Result<Box<dyn Weight>> {
        let (weight, cache) = match enable_scoring.searcher().filter(|_| enable_scoring.is_scoring_enabled()) {
            Some(searcher) => {
                let n = Bm25StatisticsProvider::total_num_docs(searcher)?;
                let tokens = searcher.total_num_tokens(self.term.field())?;
                let df = Bm25StatisticsProvider::doc_freq(searcher, &self.term)?;
                let avgdl = if n == 0 { 1.0 } else { tokens as Score / n as Score };
                let idf = idf(df, n);
                let Bm25Params { k1, b } = self.params;
                let mut cache = [0.0 as Score; 256];
                for (id, c) in cache.iter_mut().enumerate() {
                    let dl = FieldNormReader::id_to_fieldnorm(id as u8) as Score;
                    *c = k1 * (1.0 - b + b * dl / avgdl);
                }
                (idf * (1.0 + k1), Arc::new(cache))
            }
            None => (0.0, Arc::new([0.0; 256])),
        };
        Ok(Box::new(ParamTermWeight { term: self.term.clone(), weight, cache }))
    }

    fn query_terms<'a>(&'a self, visitor: &mut dyn FnMut(&'a Term, bool)) {
        visitor(&self.term, false);
    }
}

/// Lucene's (and tantivy's) BM25 idf.
fn idf(doc_freq: u64, doc_count: u64) -> Score {
    let x = (doc_count.saturating_sub(doc_freq) as Score + 0.5) / (doc_freq as Score + 0.5);
    (1.0 + x).ln()
}

struct ParamTermWeight {
    term: Term,
    weight: Score,
    cache: Arc<[Score; 256]>,
}

impl ParamTermWeight {
    fn term_scorer(&self, reader: &SegmentReader, boost: Score) -> tantivy::Result<Option<ParamTermScorer>> {
        let field = self.term.field();
        let Some(postings) = reader.inverted_index(field)?.read_postings(&self.term, IndexRecordOption::WithFreqs)? else {
            return Ok(None);
        };
        let fieldnorms = reader.get_fieldnorms_reader(field)?;
        Ok(Some(ParamTermScorer { postings, fieldnorms, weight: self.weight * boost, cache: self.cache.clone() }))
    }
}

impl Weight for ParamTermWeight {
    fn scorer(&self, reader: &SegmentReader, boost: Score) -> tantivy::Result<Box<dyn Scorer>> {
        Ok(match self.term_scorer(reader, boost)? {
            Some(s) => Box::new(s),
            None => Box::new(EmptyScorer),
        })
    }

    fn explain(&self, reader: &SegmentReader, doc: DocId) -> tantivy::Result<Explanation> {
        let mut scorer = self.term_scorer(reader, 1.0)?.ok_or_else(|| tantivy::TantivyError::InvalidArgument(format!("document {doc} does not match")))?;
        if scorer.doc() > doc || scorer.seek(doc) != doc {
            return Err(tantivy::TantivyError::InvalidArgument(format!("document {doc} does not match")));
        }
        Ok(Explanation::new("BM25 (k1, b as set)", scorer.score()))
    }
}

struct ParamTermScorer {
    postings: SegmentPostings,
    fieldnorms: FieldNormReader,
    weight: Score,
    cache: Arc<[Score; 256]>,
}

impl DocSet for ParamTermScorer {
    fn advance(&mut self) -> DocId {
        self.postings.advance()
    }
    fn seek(&mut self, target: DocId) -> DocId {
        self.postings.seek(target)
    }
    fn doc(&self) -> DocId {
        self.postings.doc()
    }
    fn size_hint(&self) -> u32 {
        self.postings.size_hint()
    }
}

impl Scorer for ParamTermScorer {
    fn score(&mut self) -> Score {
        let doc = self.doc();
        if doc == TERMINATED {
            return 0.0;
        }
        let tf = self.postings.term_freq() as Score;
        let norm = self.cache[self.fieldnorms.fieldnorm_id(doc) as usize];
        self.weight * tf / (tf + norm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tantivy::collector::TopDocs;
    use tantivy::query::{BooleanQuery, Occur};
    use tantivy::schema::{Schema, TEXT};

    fn index() -> (tantivy::Index, tantivy::schema::Field) {
        let mut b = Schema::builder();
        let text = b.add_text_field("text", TEXT);
        let index = tantivy::Index::create_in_ram(b.build());
        let mut w: tantivy::IndexWriter = index.writer_with_num_threads(1, 15_000_000).unwrap();
        let docs = [
            "gate gate gate arm",
            "the crossing gate arm is lowered before the train reaches the crossing",
            "flashing lights and a gate",
            "a long text about brakes brakes and air brake pipe pressure with no other word of note at all here",
            "gate",
        ];
        for d in docs {
            w.add_document(tantivy::doc!(text => d)).unwrap();
        }
        w.commit().unwrap();
        (index, text)
    }

    fn scores(index: &tantivy::Index, query: &dyn Query) -> Vec<(u32, f32)> {
        let searcher = index.reader().unwrap().searcher();
        let mut top: Vec<(u32, f32)> = searcher.search(query, &TopDocs::with_limit(10).order_by_score()).unwrap().into_iter().map(|(s, a)| (a.doc_id, s)).collect();
        top.sort_by_key(|(d, _)| *d);
        top
    }

    #[test]
    fn the_default_scores_as_tantivy_does() {
        let (index, text) = index();
        for words in [vec!["gate"], vec!["gate", "crossing"], vec!["brakes", "gate", "arm"]] {
            let mk = |custom: bool| -> BooleanQuery {
                BooleanQuery::new(
                    words
                        .iter()
                        .map(|w| {
                            let t = Term::from_field_text(text, w);
                            let q: Box<dyn Query> = if custom { Box::new(ParamTermQuery::new(t, Bm25Params::default())) } else { Box::new(TermQuery::new(t, IndexRecordOption::WithFreqs)) };
                            (Occur::Should, q)
                        })
                        .collect(),
                )
            };
            let (ours, theirs) = (scores(&index, &mk(true)), scores(&index, &mk(false)));
            assert_eq!(ours.len(), theirs.len(), "{words:?}");
            for ((d1, s1), (d2, s2)) in ours.iter().zip(&theirs) {
                assert_eq!(d1, d2);
                assert!((s1 - s2).abs() < 1e-5, "{words:?} doc {d1}: {s1} vs tantivy {s2}");
            }
        }
    }

    #[test]
    fn k1_and_b_change_the_scores_as_the_formula_says() {
        let (index, text) = index();
        let term = || Term::from_field_text(text, "gate");
        // b = 0: no length normalisation, so every document with tf 1 scores alike.
        let s = scores(&index, &ParamTermQuery::new(term(), Bm25Params { k1: 0.9, b: 0.0 }));
        let tf1: Vec<f32> = s.iter().filter(|(d, _)| *d != 0).map(|(_, s)| *s).collect();
        assert!(tf1.windows(2).all(|w| (w[0] - w[1]).abs() < 1e-6), "{s:?}");
        // By hand for doc 0 (tf 3): idf(4 of 5) · (k1 + 1) · 3 / (3 + k1).
        let idf = (1.0f32 + (5.0 - 4.0 + 0.5) / (4.0 + 0.5)).ln();
        assert!((s[0].1 - idf * 1.9 * 3.0 / 3.9).abs() < 1e-5, "{s:?}");
        // k1 = 0: the score is idf for every matching document, whatever its tf.
        let s = scores(&index, &ParamTermQuery::new(term(), Bm25Params { k1: 0.0, b: 0.4 }));
        assert!(s.iter().all(|(_, v)| (v - idf).abs() < 1e-5), "{s:?}");
        // Ranges are checked.
        assert!(Bm25Params { k1: -1.0, b: 0.4 }.validate().unwrap_err().contains("bm25.k1"));
        assert!(Bm25Params { k1: 0.9, b: 1.5 }.validate().unwrap_err().contains("bm25.b"));
        assert!(Bm25Params { k1: 0.9, b: 0.4 }.validate().is_ok());
    }
}
