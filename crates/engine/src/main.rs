//! `query`: ranked passages for a question from an index artifact, every layer a flag.
fn main() {
    gauge_engine::cli::query_main();
}
