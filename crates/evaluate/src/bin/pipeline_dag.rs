//! `pipeline-dag`: a pipeline's stage DAG as JSON, for cluster launchers (`just ablate-ray`).
fn main() {
    let args = gauge_core::cli::parse_args::<gauge_evaluate::dag::DagArgs>("pipeline-dag", gauge_evaluate::dag::ABOUT);
    gauge_core::run_main("pipeline-dag", || gauge_evaluate::dag::print_dag(&args));
}
