//! `artifact-store`: push, pull and list artifacts on an object-store root.
fn main() {
    let args = gauge_core::cli::parse_args::<gauge_store::cli::StoreArgs>("artifact-store", gauge_store::cli::ABOUT);
    gauge_core::run_main("artifact-store", || gauge_store::cli::run(&args));
}
