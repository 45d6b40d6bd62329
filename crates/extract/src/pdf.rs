//! PDF pages to text with pdf-extract, laid out by glyph position.
//!
//! pdf-extract decodes fonts and reports every glyph with its position; [`PageLayout`]
//! groups glyphs into lines by baseline and orders each line left to right, so a table
//! row (`234.219.A1  Gate arm light burned out or missing`) stays on one line whatever
//! order the PDF draws it in, running headers come first and footers last, and a larger
//! vertical gap becomes a paragraph break.
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};

use pdf_extract::{MediaBox, OutputDev, OutputError, Transform};

/// One glyph as drawn.
#[derive(Debug, Clone)]
struct Glyph {
    x: f64,
    y: f64,
    end: f64,
    size: f64,
    text: String,
}

/// Collects a page's glyphs (an [`OutputDev`] for pdf-extract).
#[derive(Default)]
pub struct PageLayout {
    height: f64,
    glyphs: Vec<Glyph>,
}

impl OutputDev for PageLayout {
    fn begin_page(&mut self, _page: u32, media_box: &MediaBox, _art: Option<(f64, f64, f64, f64)>) -> Result<(), OutputError> {
        self.height = media_box.ury - media_box.lly;
        self.glyphs.clear();
        Ok(())
    }
    fn end_page(&mut self) -> Result<(), OutputError> {
        Ok(())
    }
    fn output_character(&mut self, trm: &Transform, width: f64, _spacing: f64, font_size: f64, ch: &str) -> Result<(), OutputError> {
        let x = trm.m31;
        let y = self.height - trm.m32;
        let vx = font_size * trm.m11 + font_size * trm.m21;
        let vy = font_size * trm.m12 + font_size * trm.m22;
        let size = (vx * vy).abs().sqrt().max(0.1);
        if !x.is_finite() || !y.is_finite() {
            return Ok(());
        }
        self.glyphs.push(Glyph { x, y, end: x + width * size, size, text: ch.to_string() });
        Ok(())
    }
    fn begin_word(&mut self) -> Result<(), OutputError> {
        Ok(())
    }
    fn end_word(&mut self) -> Result<(), OutputError> {
        Ok(())
    }
    fn end_line(&mut self) -> Result<(), OutputError> {
        Ok(())
    }
}

impl PageLayout {
    /// The page's text: lines top to bottom, blank line between paragraphs.
    ///
    /// Glyph x positions reported for some PDFs ignore word spacing, so a line is not
    /// sorted by x: it is split into runs of glyphs drawn consecutively, runs are ordered
    /// by where they start, and each run keeps its drawing order.
    pub fn text(&self) -> String {
        let glyphs: Vec<&Glyph> = self.glyphs.iter().filter(|g| !g.text.is_empty()).collect();
        let mut order: Vec<usize> = (0..glyphs.len()).collect();
        order.sort_by(|&a, &b| glyphs[a].y.total_cmp(&glyphs[b].y).then(a.cmp(&b)));
        // Group into lines: a glyph joins the current line when its baseline is within
        // 40% of the font size of the line's first baseline.
        let mut lines: Vec<Vec<usize>> = Vec::new();
        for i in order {
            let g = glyphs[i];
            match lines.last_mut() {
                Some(line) if (g.y - glyphs[line[0]].y).abs() <= 0.4 * glyphs[line[0]].size.max(g.size) => line.push(i),
                _ => lines.push(vec![i]),
            }
        }
        let mut out = String::new();
        let mut prev: Option<(f64, f64)> = None; // (baseline, size)
        for line in &mut lines {
            line.sort_unstable();
            // Runs of consecutively drawn glyphs, ordered by their first glyph's x.
            let mut runs: Vec<Vec<usize>> = Vec::new();
            for &i in line.iter() {
                match runs.last_mut() {
                    Some(run) if *run.last().expect("runs are non-empty") + 1 == i => run.push(i),
                    _ => runs.push(vec![i]),
                }
            }
            runs.sort_by(|a, b| glyphs[a[0]].x.total_cmp(&glyphs[b[0]].x));
            let y = line.iter().map(|&i| glyphs[i].y).fold(f64::MIN, f64::max);
            let size = line.iter().map(|&i| glyphs[i].size).fold(0.0, f64::max);
            let mut text = String::new();
            for run in &runs {
                if !text.is_empty() && !text.ends_with(' ') {
                    text.push(' ');
                }
                let mut last: Option<&Glyph> = None;
                for &i in run {
                    let g = glyphs[i];
                    if let Some(p) = last {
                        // Fake bold: the same glyph drawn twice at the same spot.
                        if p.text == g.text && (p.x - g.x).abs() < 0.5 && (p.y - g.y).abs() < 0.5 {
                            continue;
                        }
                        if g.x > p.end + 0.1 * g.size && !text.ends_with(' ') && !g.text.starts_with(' ') {
                            text.push(' ');
                        }
                    }
                    text.push_str(&g.text);
                    last = Some(g);
                }
            }
            if text.trim().is_empty() {
                continue;
            }
            if let Some((py, psize)) = prev {
                out.push('\n');
                if y - py > 1.6 * psize.max(size) {
                    out.push('\n');
                }
            }
            out.push_str(text.trim_end());
            prev = Some((y, size));
        }
        out
    }
}

thread_local! {
    static IN_PDF: Cell<bool> = const { Cell::new(false) };
}

/// Installs a panic hook that keeps pdf-extract's internal panics (caught and recorded as
/// page errors) off the terminal, while other panics print as usual.
pub fn quiet_pdf_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !IN_PDF.with(Cell::get) {
            default(info);
        }
    }));
}

/// Runs `f`, turning a panic inside pdf-extract into an error string.
pub fn guarded<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    IN_PDF.with(|c| c.set(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    IN_PDF.with(|c| c.set(false));
    match result {
        Ok(r) => r,
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(format!("pdf parser failed: {msg}"))
        }
    }
}

/// A loaded PDF.
pub struct PdfDocument {
    doc: pdf_extract::Document,
    /// Page numbers in file order (1-based).
    pub pages: Vec<u32>,
}

impl PdfDocument {
    /// Parses PDF bytes; encrypted files that need a password are an error.
    pub fn load(bytes: &[u8]) -> Result<PdfDocument, String> {
        guarded(|| {
            let mut doc = pdf_extract::Document::load_mem(bytes).map_err(|e| format!("corrupt or unreadable PDF ({e})"))?;
            if doc.is_encrypted() {
                doc.decrypt("").map_err(|_| "encrypted PDF (needs a password)".to_string())?;
            }
            let pages: Vec<u32> = doc.get_pages().keys().copied().collect();
            if pages.is_empty() {
                return Err("PDF has no pages".into());
            }
            Ok(PdfDocument { doc, pages })
        })
    }

    /// Text of one page (1-based), laid out by position.
    pub fn page_text(&self, page: u32) -> Result<String, String> {
        guarded(|| {
            let mut layout = PageLayout::default();
            pdf_extract::output_doc_page(&self.doc, &mut layout, page).map_err(|e| format!("page {page}: {e}"))?;
            Ok(layout.text())
        })
    }

    /// Info dictionary entries (Title, Author, …) as strings.
    pub fn info(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut out = serde_json::Map::new();
        let info = self
            .doc
            .trailer
            .get(b"Info")
            .ok()
            .and_then(|o| match o {
                pdf_extract::Object::Reference(id) => self.doc.get_dictionary(*id).ok(),
                pdf_extract::Object::Dictionary(d) => Some(d),
                _ => None,
            });
        if let Some(info) = info {
            for (k, v) in info.iter() {
                if let pdf_extract::Object::String(bytes, _) = v {
                    let value = decode_pdf_string(bytes);
                    if !value.trim().is_empty() {
                        out.insert(String::from_utf8_lossy(k).to_string(), value.trim().into());
                    }
                }
            }
        }
        out
    }
}

/// Decodes a PDF text string: UTF-16BE with a byte-order mark, else PDFDocEncoding (≈ Latin-1).
fn decode_pdf_string(bytes: &[u8]) -> String {
    if bytes.len() >= 2 && bytes[0] == 0xFE && bytes[1] == 0xFF {
        let units: Vec<u16> = bytes[2..].chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect();
        String::from_utf16_lossy(&units)
    } else if bytes.starts_with(&[0xEF, 0xBB, 0xBF]) {
        String::from_utf8_lossy(&bytes[3..]).to_string()
    } else {
        bytes.iter().map(|&b| b as char).collect()
    }
}
