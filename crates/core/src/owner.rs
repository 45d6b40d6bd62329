//! Who made a temporary folder, so that cleanup only ever removes its own host's dead work.
//!
//! A temporary's name ends in `-<owner>-<pid>`, where the owner token is three short hashes
//! joined by dots: of the host (`/etc/machine-id` and the host name), of the boot
//! (`/proc/sys/kernel/random/boot_id`) and of the PID namespace (`/proc/self/ns/pid`). On an
//! artifact root shared between hosts or containers (NFS, a shared volume), a process id means
//! something only in the namespace that issued it, so:
//!
//! - same host, boot and PID namespace: the temporary is dead when `/proc/<pid>` is gone;
//! - same host, another boot: every process of that boot is gone, so it is dead;
//! - anything else (another host, another container's namespace): never touched here.
//!
//! Names without an owner token (written by gauge before it had one) are judged by the local
//! `/proc`, as they always were.
use std::path::Path;
use std::sync::OnceLock;

/// Whether this host has a machine id: without one the host hash is its name alone, too weak to
/// declare another boot's temporaries dead (two machines may share a name).
static HAS_MACHINE_ID: OnceLock<bool> = OnceLock::new();

/// The owner token of this process: `<host>.<boot>.<pid namespace>`, 8 hex characters each.
pub fn token() -> &'static str {
    static TOKEN: OnceLock<String> = OnceLock::new();
    TOKEN.get_or_init(|| {
        let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default();
        let machine_id = read("/etc/machine-id");
        let _ = HAS_MACHINE_ID.set(!machine_id.is_empty());
        let host = format!("{machine_id}|{}", read("/proc/sys/kernel/hostname"));
        let boot = read("/proc/sys/kernel/random/boot_id");
        let pidns = std::fs::read_link("/proc/self/ns/pid").map(|p| p.display().to_string()).unwrap_or_default();
        let short = |s: &str| crate::hash::bytes_hash(s.as_bytes())[..8].to_string();
        format!("{}.{}.{}", short(&host), short(&boot), short(&pidns))
    })
}

/// The suffix this process gives its temporaries: `<owner>-<pid>`.
pub fn suffix() -> String {
    format!("{}-{}", token(), std::process::id())
}

/// A temporary's name split into what it is for and who made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owned<'a> {
    /// What the temporary is for (a fingerprint, a destination's name).
    pub base: &'a str,
    /// The owner token, `None` for a name from before owner tokens.
    pub owner: Option<&'a str>,
    /// The process id in the owner's namespace.
    pub pid: u32,
}

/// Splits `<base>-<owner>-<pid>` (or the older `<base>-<pid>`); `None` when the name ends in
/// no process id.
pub fn parse(rest: &str) -> Option<Owned<'_>> {
    let (head, pid) = rest.rsplit_once('-')?;
    let pid = pid.parse::<u32>().ok()?;
    if let Some((base, owner)) = head.rsplit_once('-') {
        if is_token(owner) {
            return Some(Owned { base, owner: Some(owner), pid });
        }
    }
    Some(Owned { base: head, owner: None, pid })
}

fn is_token(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    parts.len() == 3 && parts.iter().all(|p| p.len() == 8 && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Whether a temporary with this owner and pid is certainly abandoned, judged from this
/// process: only temporaries of this host are ever judged dead (see the module docs).
pub fn is_dead(owner: Option<&str>, pid: u32) -> bool {
    match owner {
        None => !local_process_alive(pid),
        Some(o) if o == token() => !local_process_alive(pid),
        Some(o) => {
            let mine: Vec<&str> = token().split('.').collect();
            let theirs: Vec<&str> = o.split('.').collect();
            // Same host, another boot: nothing of that boot runs any more (only where the host
            // has a machine id to be told apart by).
            HAS_MACHINE_ID.get().copied().unwrap_or(false) && theirs.len() == 3 && theirs[0] == mine[0] && theirs[1] != mine[1]
        }
    }
}

/// Whether `pid` names a running process in this PID namespace (this one, or a live
/// `/proc/<pid>`; without `/proc` every other process counts as gone).
fn local_process_alive(pid: u32) -> bool {
    pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_foreign_owners_are_never_dead() {
        let name = format!("0123456789abcdef-{}", suffix());
        let owned = parse(&name).unwrap();
        assert_eq!(owned, Owned { base: "0123456789abcdef", owner: Some(token()), pid: std::process::id() });
        assert!(!is_dead(owned.owner, owned.pid), "this process is alive");
        assert!(is_dead(Some(token()), 4_000_000_000), "no such local process");
        // Older names: the local /proc decides.
        assert_eq!(parse("fp-12").unwrap(), Owned { base: "fp", owner: None, pid: 12 });
        assert!(is_dead(None, 4_000_000_000));
        // A destination name holding dashes keeps them.
        assert_eq!(parse(&format!("my-adapter-{}", suffix())).unwrap().base, "my-adapter");
        // Another host's (or namespace's) temporary is never judged dead, whatever its pid.
        let mine: Vec<&str> = token().split('.').collect();
        let other_ns = format!("{}.{}.{}", mine[0], mine[1], if mine[2] == "00000000" { "11111111" } else { "00000000" });
        assert!(!is_dead(Some(&other_ns), 4_000_000_000));
        let other_host = format!("{}.{}.{}", if mine[0] == "00000000" { "11111111" } else { "00000000" }, mine[1], mine[2]);
        assert!(!is_dead(Some(&other_host), 4_000_000_000));
        // This host after a reboot: dead, where the host has a machine id to be known by.
        let old_boot = format!("{}.{}.{}", mine[0], if mine[1] == "00000000" { "11111111" } else { "00000000" }, mine[2]);
        assert_eq!(is_dead(Some(&old_boot), 1), !std::fs::read_to_string("/etc/machine-id").unwrap_or_default().trim().is_empty());
        assert!(parse("no-pid-here").is_none());
    }
}
