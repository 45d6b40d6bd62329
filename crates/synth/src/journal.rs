//! The journals that make long `synth-data` runs resumable: every finished sample (or
//! doc2query passage) is appended, flushed and synced as soon as it is known; a rerun reads
//! them back (a torn last line from a kill is dropped) and asks only for the rest.
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use gauge_chat_client::Usage;
use serde::{Deserialize, Serialize};

use crate::SynthRow;

/// A journal line: one finished sample.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JournalEntry {
    /// Sample index.
    pub sample: usize,
    /// The row, when accepted.
    pub row: Option<SynthRow>,
    /// Why it failed, when it did.
    pub failure: Option<String>,
    /// Tokens spent on it.
    pub usage: Usage,
    /// Passage cuts made to fit the prompt to the teacher's context.
    #[serde(default)]
    pub cuts: usize,
    /// HTTP attempts.
    pub attempts: u32,
    /// The endpoint could not be reached (timeouts, dropped connections, 5xx or 429 after every
    /// retry) and gave no reply: a run that stops asks again when resumed, and three such
    /// samples in a row stop the run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_reply: bool,
}

/// A line of a journal, keyed by the sample (or passage) it finishes.
pub(crate) trait JournalLine: Serialize + serde::de::DeserializeOwned {
    fn key(&self) -> usize;
}

impl JournalLine for JournalEntry {
    fn key(&self) -> usize {
        self.sample
    }
}

/// A doc2query journal line: one passage's reply (or why there is none), kept as soon as the
/// decoder finishes it, so a killed run asks only for the passages not yet answered.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Doc2QueryJournalEntry {
    /// The planned passage's index.
    pub passage: usize,
    /// The reply's text.
    pub text: Option<String>,
    /// Its generated tokens.
    pub completion_tokens: usize,
    /// Why generation failed, when it did.
    pub failure: Option<String>,
}

impl JournalLine for Doc2QueryJournalEntry {
    fn key(&self) -> usize {
        self.passage
    }
}

/// Reads a journal, dropping a torn last line (a crash mid-write) by truncating the file
/// back to its last complete line.
pub(crate) fn read_journal<T: JournalLine>(path: &Path) -> anyhow::Result<BTreeMap<usize, T>> {
    let mut out = BTreeMap::new();
    let Ok(bytes) = std::fs::read(path) else { return Ok(out) };
    let mut good_len = 0usize;
    for line in bytes.split_inclusive(|&b| b == b'\n') {
        if !line.ends_with(b"\n") {
            break;
        }
        match serde_json::from_slice::<T>(line) {
            Ok(e) => {
                out.insert(e.key(), e);
                good_len += line.len();
            }
            Err(_) => break,
        }
    }
    if good_len < bytes.len() {
        tracing::warn!("{}: dropping a torn last line (the previous run was killed mid-write)", path.display());
        let f = std::fs::OpenOptions::new().write(true).open(path)?;
        f.set_len(good_len as u64)?;
    }
    Ok(out)
}

/// Appends journal lines, each flushed and synced before the next sample is counted done.
pub(crate) struct Journal {
    file: Mutex<std::fs::File>,
}

impl Journal {
    pub(crate) fn open(path: &Path) -> anyhow::Result<Self> {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(|e| anyhow::anyhow!("{}: cannot open the journal: {e}", path.display()))?;
        Ok(Journal { file: Mutex::new(file) })
    }

    pub(crate) fn append<T: JournalLine>(&self, e: &T) -> anyhow::Result<()> {
        let mut line = serde_json::to_string(e)?;
        line.push('\n');
        let mut f = self.file.lock().expect("journal lock");
        f.write_all(line.as_bytes())?;
        f.sync_data()?;
        Ok(())
    }
}

