//! `gauge-bench`'s command line.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// The benchmark harness.
#[derive(Debug, Parser)]
#[command(name = "gauge-bench", about = "Runs bench plans in interleaved A/B pairs; lists stale bench files; regenerates the README's speed table")]
pub struct Cli {
    /// The repository root.
    #[arg(long, default_value = ".")]
    pub root: PathBuf,
    /// What to do.
    #[command(subcommand)]
    pub command: Cmd,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Runs a plan (JSON) and writes its bench file.
    Run {
        /// The plan.
        plan: PathBuf,
        /// The bench file to write.
        out: PathBuf,
    },
    /// Lists bench files whose measured sources changed since their run (exit 1 when any).
    Stale,
    /// Rewrites a bench file's stamp with the current rule, when its measured sources are
    /// unchanged since its run; its machine paths made portable, as a run writes them.
    Restamp {
        /// The bench file, relative to the root.
        file: String,
    },
    /// Stamps a JSON file another tool wrote (a one-run curve, a check's report) with the
    /// sources it measured, now, so `stale` can tell when they change; run it right after the tool.
    Stamp {
        /// The file, relative to the root.
        file: String,
        /// A workspace crate it measures (with its dependencies); repeat for more.
        #[arg(long = "crate", required = true)]
        crates: Vec<String>,
        /// Another path it measures (its example, its script); repeat for more.
        #[arg(long = "path")]
        paths: Vec<String>,
    },
    /// Rewrites the README's speed table and the book's bench-file tables (docs/src/performance) from the bench files (`--check`: only compare).
    Readme {
        /// Compare instead of writing; exit 1 when the table differs or cites a stale file.
        #[arg(long)]
        check: bool,
    },
}

/// Parses the arguments and runs the subcommand.
pub fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Run { plan, out } => {
            let p = crate::plan::Plan::load(&plan)?;
            crate::plan::run_to(&p, &cli.root, &out)?;
            eprintln!("gauge-bench: wrote {}", out.display());
        }
        Cmd::Stale => {
            let stale = crate::sources::stale(&cli.root)?;
            for s in &stale {
                println!("{}: {}", s.file, s.why);
            }
            if !stale.is_empty() {
                std::process::exit(1);
            }
        }
        Cmd::Restamp { file } => crate::sources::restamp(&cli.root, &file)?,
        Cmd::Stamp { file, crates, paths } => crate::sources::stamp(&cli.root, &file, &crates, &paths)?,
        Cmd::Readme { check } => {
            if check {
                crate::table::check(&cli.root)?;
            } else {
                let path = cli.root.join("README.md");
                let text = std::fs::read_to_string(&path)?;
                let new = crate::table::splice(&text, &crate::table::generate(&cli.root)?)?;
                std::fs::write(&path, new)?;
                for page in crate::table::pages_with_files(&cli.root)? {
                    let text = std::fs::read_to_string(&page)?;
                    std::fs::write(&page, crate::table::splice_files(&cli.root, &text)?)?;
                }
            }
        }
    }
    Ok(())
}
