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
