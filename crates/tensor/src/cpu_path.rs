//! Run-time kernel-path selection, shared by every hot loop with more than one body (the
//! deterministic matmul, the decoder's integer dot products): a path per CPU feature level, the
//! fastest the machine runs unless an environment variable names another it runs — to check
//! that the bodies agree, or to measure them. Each path type implements [`CpuPath`] and keeps
//! its choice in its own `OnceLock`, calling [`from_env`] once.

/// A set of bodies of one hot loop, one per CPU feature level.
pub trait CpuPath: Copy + Eq + std::fmt::Debug + Send + Sync + 'static {
    /// Every path, slowest first; the first (the portable reference) always runs.
    const ALL: &'static [Self];
    /// The environment variable that names a path (`GAUGE_MATMUL`, `GAUGE_KERNEL`).
    const ENV: &'static str;
    /// The name the variable takes.
    fn name(self) -> &'static str;
    /// Whether this machine runs it.
    fn supported(self) -> bool;
}

/// A path by name.
pub fn parse<P: CpuPath>(name: &str) -> Option<P> {
    P::ALL.iter().copied().find(|p| p.name() == name)
}

/// The paths this machine runs, slowest first.
pub fn available<P: CpuPath>() -> Vec<P> {
    P::ALL.iter().copied().filter(|p| p.supported()).collect()
}

/// The fastest path this machine runs.
pub fn fastest<P: CpuPath>() -> P {
    *available::<P>().last().expect("the first path always runs")
}

/// The path `P::ENV` names when it is set, non-empty and runs here; otherwise the fastest (a
/// name that is unknown or does not run here is ignored with a warning that lists the paths).
pub fn from_env<P: CpuPath>() -> P {
    choose(std::env::var(P::ENV).ok().as_deref())
}

fn choose<P: CpuPath>(asked: Option<&str>) -> P {
    let fastest = fastest::<P>();
    match asked {
        Some(name) if !name.is_empty() => match parse::<P>(name) {
            Some(p) if p.supported() => p,
            _ => {
                tracing::warn!("{}={name}: not a path this machine runs ({}); using {}", P::ENV, available::<P>().iter().map(|p| p.name()).collect::<Vec<_>>().join(", "), fastest.name());
                fastest
            }
        },
        _ => fastest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Toy {
        Slow,
        Fast,
        Missing,
    }

    impl CpuPath for Toy {
        const ALL: &'static [Toy] = &[Toy::Slow, Toy::Fast, Toy::Missing];
        const ENV: &'static str = "GAUGE_TOY_PATH";
        fn name(self) -> &'static str {
            match self {
                Toy::Slow => "slow",
                Toy::Fast => "fast",
                Toy::Missing => "missing",
            }
        }
        fn supported(self) -> bool {
            self != Toy::Missing
        }
    }

    #[test]
    fn the_fastest_that_runs_unless_a_running_one_is_named() {
        assert_eq!(available::<Toy>(), vec![Toy::Slow, Toy::Fast]);
        assert_eq!(fastest::<Toy>(), Toy::Fast);
        assert_eq!(choose::<Toy>(None), Toy::Fast);
        assert_eq!(choose::<Toy>(Some("")), Toy::Fast, "empty is unset");
        assert_eq!(choose::<Toy>(Some("slow")), Toy::Slow);
        assert_eq!(choose::<Toy>(Some("missing")), Toy::Fast, "a path this machine lacks is ignored");
        assert_eq!(choose::<Toy>(Some("nonsense")), Toy::Fast);
        assert_eq!(parse::<Toy>("missing"), Some(Toy::Missing));
    }
}
