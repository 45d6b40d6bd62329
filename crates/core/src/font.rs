//! The TrueType font gauge's charts are drawn with (DejaVu Sans from `fonts-dejavu-core`, or
//! `$GAUGE_FONT`), read once per process.
use std::path::Path;

/// Where Debian, Arch and Fedora put DejaVu Sans.
pub const FONT_PATHS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

/// The font's bytes (kept for the life of the process, as chart libraries want), or a one-line
/// error naming the fix.
pub fn chart_font() -> Result<&'static [u8], String> {
    static FONT: std::sync::OnceLock<Result<&'static [u8], String>> = std::sync::OnceLock::new();
    FONT.get_or_init(|| {
        let font = std::env::var("GAUGE_FONT").ok().into_iter().chain(FONT_PATHS.iter().map(|s| s.to_string())).find(|p| Path::new(p).is_file());
        let Some(font) = font else {
            return Err(format!("no TrueType font for the chart (looked at {}); install fonts-dejavu-core (`just setup`) or set GAUGE_FONT", FONT_PATHS.join(", ")));
        };
        Ok(Box::leak(std::fs::read(&font).map_err(|e| format!("{font}: {e}"))?.into_boxed_slice()))
    })
    .clone()
}
