//! The `artifact-store` command line.
use std::path::PathBuf;

use crate::RemoteRoot;

/// What `artifact-store` does.
pub const ABOUT: &str = "Artifacts on an object store (s3://bucket/prefix, gs://bucket/prefix, file:///path): `push DIR URL` uploads a local artifact (manifest last), `pull URL STAGE/FINGERPRINT --into ROOT` downloads a complete one into a local artifact root (prints its directory), `ls URL` lists the complete ones.";

/// Arguments of `artifact-store`.
#[derive(clap::Args, Debug)]
pub struct StoreArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Uploads a local artifact directory (every file, then its manifest); prints STAGE/FINGERPRINT.
    Push {
        /// The local artifact directory (the one a stage printed).
        dir: PathBuf,
        /// The remote root.
        url: String,
    },
    /// Downloads complete artifacts into a local artifact root; prints each local directory.
    Pull {
        /// The remote root.
        url: String,
        /// Artifacts, as STAGE/FINGERPRINT.
        #[arg(required = true)]
        names: Vec<String>,
        /// The local artifact root.
        #[arg(long, default_value = "artifacts")]
        into: PathBuf,
    },
    /// Lists the complete artifacts (those with a manifest).
    Ls {
        /// The remote root.
        url: String,
    },
}

/// Runs a subcommand.
pub fn run(args: &StoreArgs) -> anyhow::Result<()> {
    match &args.command {
        Command::Push { dir, url } => gauge_core::outln!("{}", RemoteRoot::open_for_push(url)?.push(dir)?),
        Command::Pull { url, names, into } => {
            let root = RemoteRoot::open(url)?;
            for n in names {
                gauge_core::outln!("{}", root.pull(n, into)?.display());
            }
        }
        Command::Ls { url } => {
            for n in RemoteRoot::open(url)?.list()? {
                gauge_core::outln!("{n}");
            }
        }
    }
    Ok(())
}
