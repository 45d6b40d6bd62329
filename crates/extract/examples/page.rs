//! Prints one PDF page as gauge lays it out: `cargo run --example page -- FILE PAGE`.
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bytes = std::fs::read(&args[1]).expect("readable file");
    let doc = gauge_extract::pdf::PdfDocument::load(&bytes).expect("loadable PDF");
    println!("{}", doc.page_text(args[2].parse().expect("page number")).expect("page text"));
}
