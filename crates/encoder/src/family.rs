//! Model families: defaults for pooling, normalisation and query/passage prefixes when a
//! folder does not declare them.
use serde::Serialize;

use crate::config::Pooling;

/// A known family of retrieval encoders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// sentence-transformers all-MiniLM-L6-v2 / L12-v2: mean pooling, normalised, no prefixes.
    MiniLm,
    /// BAAI bge-small/base/large-en-v1.5: CLS pooling, normalised, query instruction.
    Bge,
    /// intfloat e5: mean pooling, normalised, `query: ` / `passage: `.
    E5,
    /// thenlper gte: mean pooling, normalised, no prefixes.
    Gte,
    /// Anything else: mean pooling, normalised, no prefixes.
    Other,
}

/// BGE's query instruction for retrieval.
pub const BGE_QUERY_INSTRUCTION: &str = "Represent this sentence for searching relevant passages: ";

impl Family {
    /// Guesses the family from a model id or folder name.
    pub fn detect(name: &str) -> Family {
        let n = name.to_lowercase();
        if n.contains("bge") {
            Family::Bge
        } else if n.contains("e5") && (n.contains("intfloat") || n.contains("e5-") || n.starts_with("e5")) {
            Family::E5
        } else if n.contains("gte") {
            Family::Gte
        } else if n.contains("minilm") {
            Family::MiniLm
        } else {
            Family::Other
        }
    }

    /// Pooling when the folder has no `modules.json`.
    pub fn default_pooling(self) -> Pooling {
        match self {
            Family::Bge => Pooling::Cls,
            _ => Pooling::Mean,
        }
    }

    /// Query prefix.
    pub fn query_prefix(self) -> &'static str {
        match self {
            Family::Bge => BGE_QUERY_INSTRUCTION,
            Family::E5 => "query: ",
            _ => "",
        }
    }

    /// Passage prefix.
    pub fn passage_prefix(self) -> &'static str {
        match self {
            Family::E5 => "passage: ",
            _ => "",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_families_from_ids() {
        assert_eq!(Family::detect("sentence-transformers/all-MiniLM-L6-v2"), Family::MiniLm);
        assert_eq!(Family::detect("BAAI/bge-small-en-v1.5"), Family::Bge);
        assert_eq!(Family::detect("intfloat/e5-base-v2"), Family::E5);
        assert_eq!(Family::detect("thenlper/gte-small"), Family::Gte);
        assert_eq!(Family::E5.query_prefix(), "query: ");
        assert_eq!(Family::Bge.default_pooling(), Pooling::Cls);
    }
}
