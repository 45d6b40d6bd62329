//! A structured (JSON) reply with one repair round, shared by every stage that asks a model
//! for a document of a schema (`synth-data`'s teacher, `evaluate`'s judge): the reply is
//! parsed and checked; when that fails, the conversation is shown back to the model with what
//! was wrong (the caller's repair message) and the second reply is the last chance.
use gauge_chat_client::Message;

use crate::{Completion, GeneratorError};

/// The outcome of [`complete_with_repair`]: the parsed value or why there is none, and every
/// completion made (for token and attempt accounting).
#[derive(Debug)]
pub struct Structured<T> {
    /// The parsed reply, or the reason it could not be had (a failed call, a repair that could
    /// not be built, or a second invalid reply).
    pub result: Result<T, String>,
    /// The completions made (one or two).
    pub completions: Vec<Completion>,
}

/// Asks `call` for a reply to `messages`, parses it with `parse`; on a parse error, asks once
/// more with the messages `repair(reply, error)` builds (typically the conversation plus the
/// reply and a message naming the error).
pub fn complete_with_repair<T>(
    messages: Vec<Message>,
    mut call: impl FnMut(&[Message]) -> Result<Completion, GeneratorError>,
    parse: impl Fn(&str) -> Result<T, String>,
    repair: impl FnOnce(&str, &str) -> Result<Vec<Message>, String>,
) -> Structured<T> {
    let mut completions = Vec::new();
    let first = match call(&messages) {
        Ok(c) => c,
        Err(e) => return Structured { result: Err(e.to_string()), completions },
    };
    let text = first.text.clone();
    completions.push(first);
    let error = match parse(&text) {
        Ok(v) => return Structured { result: Ok(v), completions },
        Err(e) => e,
    };
    let messages = match repair(&text, &error) {
        Ok(m) => m,
        Err(e) => return Structured { result: Err(format!("repair round: {e}")), completions },
    };
    let second = match call(&messages) {
        Ok(c) => c,
        Err(e) => return Structured { result: Err(e.to_string()), completions },
    };
    let result = parse(&second.text).map_err(|e| format!("invalid reply after one repair: {e}"));
    completions.push(second);
    Structured { result, completions }
}

/// The usual repair conversation: `messages`, the invalid reply as the assistant's turn, then
/// `repair_message` as the user's.
pub fn repair_conversation(messages: &[Message], reply: &str, repair_message: String) -> Vec<Message> {
    let mut m = messages.to_vec();
    m.push(Message::assistant(reply.to_string()));
    m.push(Message::user(repair_message));
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completion(text: &str) -> Completion {
        Completion { text: text.into(), prompt_tokens: 1, completion_tokens: 1, finish_reason: "api".into(), attempts: 1, seconds: 0.0 }
    }

    fn parse(s: &str) -> Result<u32, String> {
        s.parse().map_err(|_| format!("`{s}` is not a number"))
    }

    #[test]
    fn one_repair_round_at_most() {
        let ask = vec![Message::user("a number")];
        let mut replies = vec!["seven", "7"].into_iter();
        let mut seen = Vec::new();
        let out = complete_with_repair(ask.clone(), |m| {
            seen.push(m.to_vec());
            Ok(completion(replies.next().unwrap()))
        }, parse, |reply, e| Ok(repair_conversation(&ask, reply, format!("fix: {e}"))));
        assert_eq!((out.result, out.completions.len()), (Ok(7), 2));
        assert_eq!(seen[1].len(), 3);
        assert_eq!(seen[1][2].content, "fix: `seven` is not a number");

        let mut replies = vec!["x", "y", "3"].into_iter();
        let out = complete_with_repair(ask.clone(), |_| Ok(completion(replies.next().unwrap())), parse, |r, e| Ok(repair_conversation(&ask, r, e.to_string())));
        assert_eq!(out.result, Err("invalid reply after one repair: `y` is not a number".into()));
        let out = complete_with_repair(ask.clone(), |_| Err(GeneratorError::Context("down".into())), parse, |_, _| unreachable!());
        assert_eq!((out.result, out.completions.len()), (Err("down".into()), 0));
        let out = complete_with_repair(ask, |_| Ok(completion("x")), parse, |_, _| Err("too long".into()));
        assert_eq!(out.result, Err("repair round: too long".into()));
    }
}
