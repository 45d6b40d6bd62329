//! Training examples: chat-format JSONL (`{"messages": [{"role", "content"}, …]}`, what
//! `synth-data --mode sft` writes, and what most SFT datasets use) rendered with the model's
//! chat template; the tokens learned are those of the last assistant turn (with the
//! template's end-of-turn token), the rest only conditions.
use std::path::{Path, PathBuf};

use gauge_decoder::{ChatTemplate, Message};

use crate::generator::model::Sequence;
use crate::TrainError;

/// One tokenised example.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    /// The row's `id` (or its line number).
    pub id: String,
    /// Ids and targets.
    pub sequence: Sequence,
}

/// What reading a file kept and dropped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReadStats {
    /// Examples kept.
    pub kept: usize,
    /// Longer than `max_seq_len` tokens (dropped whole: cutting would drop the answer).
    pub too_long: usize,
}

/// Reads a chat JSONL file and tokenises every row (`max_seq_len` tokens at most).
pub fn read_chat_jsonl(path: &Path, tokenizer: &tokenizers::Tokenizer, template: &ChatTemplate, max_seq_len: usize) -> Result<(Vec<Example>, ReadStats), TrainError> {
    let err = |message: String| TrainError::Data { path: path.to_path_buf(), message };
    let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read ({e})")))?;
    let mut out = Vec::new();
    let mut stats = ReadStats::default();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let row: serde_json::Value = serde_json::from_str(line).map_err(|e| err(format!("line {}: not JSON ({e})", i + 1)))?;
        let messages: Vec<Message> = serde_json::from_value(row["messages"].clone()).map_err(|_| err(format!("line {}: no `messages` list of {{role, content}} (write chat-format rows, e.g. with `synth-data --mode sft`)", i + 1)))?;
        let id = row["id"].as_str().map(str::to_string).unwrap_or_else(|| format!("line-{}", i + 1));
        let sequence = tokenize(&messages, tokenizer, template).map_err(|m| err(format!("line {}: {m}", i + 1)))?;
        if sequence.ids.len() > max_seq_len {
            stats.too_long += 1;
            continue;
        }
        out.push(Example { id, sequence });
    }
    stats.kept = out.len();
    Ok((out, stats))
}

/// Renders and tokenises one conversation; targets are the last assistant turn's tokens.
pub fn tokenize(messages: &[Message], tokenizer: &tokenizers::Tokenizer, template: &ChatTemplate) -> Result<Sequence, String> {
    let last = messages.iter().rposition(|m| m.role == "assistant").ok_or("no assistant turn to learn")?;
    if last + 1 != messages.len() {
        return Err("the assistant's turn must be the last message".into());
    }
    let prefix = template.render(&messages[..last], true).map_err(|e| e.to_string())?;
    let full = template.render(messages, false).map_err(|e| e.to_string())?;
    let enc = |s: &str| tokenizer.encode(s, false).map(|e| e.get_ids().to_vec()).map_err(|e| format!("tokenize: {e}"));
    let (p, ids) = (enc(&prefix)?, enc(&full)?);
    // The prompt's tokens are normally a prefix of the conversation's; where a merge crosses the
    // boundary, the common part conditions and the rest is learned.
    let shared = p.iter().zip(&ids).take_while(|(a, b)| a == b).count();
    if shared >= ids.len() {
        return Err("the assistant's turn renders to no tokens".into());
    }
    let learned: Vec<bool> = (0..ids.len()).map(|t| t >= shared).collect();
    Ok(Sequence::from_response_mask(ids, &learned))
}

/// The train and (optional) held-out files of an input: a `synth-data` artifact directory
/// (LLM mode: `sft-train.jsonl` and `sft-dev.jsonl`; SFT mode: `train.jsonl` and `dev.jsonl`;
/// unsplit: `sft.jsonl`), or one JSONL file.
pub fn input_files(input: &Path) -> Result<(PathBuf, Option<PathBuf>), TrainError> {
    if input.is_file() {
        return Ok((input.to_path_buf(), None));
    }
    if !input.is_dir() {
        return Err(TrainError::Data { path: input.to_path_buf(), message: "no such file or directory (pass the directory `synth-data --mode sft` printed, or a chat JSONL file)".into() });
    }
    let teacher = input.join("sft-train.jsonl");
    if teacher.is_file() {
        let dev = input.join("sft-dev.jsonl");
        return Ok((teacher, dev.is_file().then_some(dev)));
    }
    let train = input.join("train.jsonl");
    if train.is_file() {
        let dev = input.join("dev.jsonl");
        return Ok((train, dev.is_file().then_some(dev)));
    }
    let all = input.join("sft.jsonl");
    if all.is_file() {
        return Ok((all, None));
    }
    Err(TrainError::Data { path: input.to_path_buf(), message: "holds neither train.jsonl nor sft.jsonl (run `synth-data --mode sft` and pass the directory it prints)".into() })
}

/// The `source#page` of every page the rows of a chat JSONL were made from (`source`,
/// `page_start`, `page_end`, as `synth-data --mode sft` writes them; rows without a source,
/// such as out-of-corpus refusals, add none), sorted.
pub fn example_pages(path: &Path) -> Result<Vec<String>, TrainError> {
    let err = |message: String| TrainError::Data { path: path.to_path_buf(), message };
    let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read ({e})")))?;
    let mut pages = std::collections::BTreeSet::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let row: serde_json::Value = serde_json::from_str(line).map_err(|e| err(format!("line {}: not JSON ({e})", i + 1)))?;
        let (Some(source), Some(a), Some(b)) = (row["source"].as_str().filter(|s| !s.is_empty()), row["page_start"].as_i64(), row["page_end"].as_i64()) else { continue };
        pages.extend((a..=b).map(|p| format!("{source}#{p}")));
    }
    Ok(pages.into_iter().collect())
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_pages_are_the_pages_rows_were_made_from() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("train.jsonl");
        std::fs::write(&f, "{\"source\": \"m.pdf\", \"page_start\": 5, \"page_end\": 6}\n{\"source\": \"\", \"page_start\": 0, \"page_end\": 0}\n{\"source\": \"a.pdf\", \"page_start\": 2, \"page_end\": 2}\n{\"messages\": []}\n").unwrap();
        assert_eq!(example_pages(&f).unwrap(), vec!["a.pdf#2", "m.pdf#5", "m.pdf#6"]);
        std::fs::write(&f, "not json\n").unwrap();
        assert!(example_pages(&f).unwrap_err().to_string().contains("line 1"));
    }

    #[test]
    fn only_the_last_assistant_turn_is_learned() {
        let tok = tokenizers::Tokenizer::from_file(gauge_test_support::shared_path("fixtures/tiny-llama/tokenizer.json")).unwrap();
        let t = ChatTemplate::new("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}", "", "");
        let msgs = vec![Message::new("user", "what is the speed limit"), Message::new("assistant", "ten miles per hour")];
        let s = tokenize(&msgs, &tok, &t).unwrap();
        let learned: Vec<String> = s.target.iter().enumerate().filter(|(_, &x)| x).map(|(i, _)| tok.id_to_token(s.ids[i + 1]).unwrap()).collect();
        assert_eq!(learned, vec!["ten", "miles", "per", "hour"]);
        assert!(tokenize(&msgs[..1], &tok, &t).unwrap_err().contains("no assistant"));
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.jsonl");
        std::fs::write(&bad, "{\"text\": \"no messages\"}\n").unwrap();
        let e = read_chat_jsonl(&bad, &tok, &t, 100).unwrap_err().to_string();
        assert!(e.contains("bad.jsonl") && e.contains("line 1") && e.contains("messages"), "{e}");
        let ok = dir.path().join("ok.jsonl");
        std::fs::write(&ok, format!("{}\n", serde_json::json!({"id": "a", "messages": msgs}))).unwrap();
        let (ex, st) = read_chat_jsonl(&ok, &tok, &t, 5).unwrap();
        assert_eq!((ex.len(), st.too_long), (0, 1));
        assert!(input_files(dir.path()).unwrap_err().to_string().contains("sft.jsonl"));
    }
}
