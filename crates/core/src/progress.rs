//! Progress bars on stderr (hidden when stderr is not a terminal or `GAUGE_NO_PROGRESS` is set).
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar that draws nothing (work reported elsewhere).
pub fn hidden() -> ProgressBar {
    ProgressBar::hidden()
}

/// A progress bar for `len` units of work named `what` (e.g. "pages").
pub fn bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if std::env::var_os("GAUGE_NO_PROGRESS").is_some() {
        pb.set_draw_target(ProgressDrawTarget::hidden());
    }
    pb.set_style(
        ProgressStyle::with_template(&format!(
            "{{spinner}} [{{elapsed_precise}}] {{bar:40}} {{pos}}/{{len}} {what} ({{per_sec}}, eta {{eta}}) {{msg}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb
}

/// A bar over model replies whose message is the rate of tokens generated so far
/// (`38.2 tok/s`); with the bar's own replies per second and ETA, a long generation says how
/// fast it goes and when it ends.
pub struct ReplyBar {
    /// The bar.
    pub bar: ProgressBar,
    tokens: std::sync::atomic::AtomicU64,
    started: std::time::Instant,
}

impl ReplyBar {
    /// A bar for `len` replies named `what` (e.g. "questions").
    pub fn new(len: u64, what: &str) -> ReplyBar {
        ReplyBar { bar: bar(len, what), tokens: Default::default(), started: std::time::Instant::now() }
    }

    /// One reply finished, `tokens` generated for it (0 when it came from a cache).
    pub fn reply(&self, tokens: usize) {
        let total = self.tokens.fetch_add(tokens as u64, std::sync::atomic::Ordering::Relaxed) + tokens as u64;
        self.bar.inc(1);
        self.bar.set_message(rate_message(total, self.started.elapsed().as_secs_f64()));
    }
}

/// `12.3 tok/s` (empty before any token).
pub fn rate_message(tokens: u64, seconds: f64) -> String {
    if tokens == 0 || seconds <= 0.0 {
        String::new()
    } else {
        format!("{:.1} tok/s", tokens as f64 / seconds)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_rate_counts_generated_tokens_only() {
        assert_eq!(super::rate_message(0, 3.0), "");
        assert_eq!(super::rate_message(120, 0.0), "");
        assert_eq!(super::rate_message(120, 8.0), "15.0 tok/s");
        let b = super::ReplyBar::new(3, "replies");
        b.reply(0);
        b.reply(40);
        assert_eq!(b.bar.position(), 2);
        assert!(b.bar.message().ends_with("tok/s"), "{}", b.bar.message());
    }
}
