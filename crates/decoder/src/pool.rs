//! A persistent pool of spinning threads for the decoding step, in the manner of ggml's
//! threadpool and candle's BarrierPool: a step runs ~150 small parallel regions (each matmul
//! of one token is tens of microseconds), and waking a sleeping thread for each costs as much
//! as the region itself. The helpers spin on a generation counter between regions, yield their
//! core between checks after [`SPINS_BEFORE_YIELD`], and park only after [`SPIN`] without work (so a prompt's gemm, run on rayon, does not compete with
//! them for long).
//!
//! [`parallel_for`] runs chunks on this pool while the calling thread is inside [`session`],
//! and on rayon otherwise.
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// How long an idle helper spins before it parks.
const SPIN: Duration = Duration::from_millis(2);

/// Spins (`pause`, ~10–50 ns each) before a waiting thread starts yielding its core between
/// checks. A region's threads finish within microseconds of each other on a quiet machine, so
/// this is rarely reached; on a busy one (a build, another process's threads) a waiter that
/// keeps spinning holds a core the thread it waits for may need, and one step can stall for a
/// whole scheduler slice — yielding hands the core over (ggml's threadpool also backs off from
/// pure spinning).
const SPINS_BEFORE_YIELD: u32 = 256;

type Job = dyn Fn(usize) + Sync;

struct Shared {
    /// Bumped for every job; helpers run a job when they see it change.
    generation: AtomicU64,
    /// The current job (set while a `run` waits for it).
    job: Mutex<Option<&'static Job>>,
    /// Helpers still running the current job.
    pending: AtomicUsize,
    /// Helpers parked on `wake`.
    sleeping: AtomicUsize,
    /// A helper's job panicked (the caller re-raises it).
    panicked: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

/// The pool: `helpers` threads besides the caller.
pub struct SpinPool {
    shared: &'static Shared,
    helpers: usize,
    /// One step at a time.
    busy: Mutex<()>,
}

static POOL: OnceLock<SpinPool> = OnceLock::new();

thread_local! {
    static IN_SESSION: Cell<Option<&'static SpinPool>> = const { Cell::new(None) };
}

impl SpinPool {
    fn new(threads: usize) -> SpinPool {
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            generation: AtomicU64::new(0),
            job: Mutex::new(None),
            pending: AtomicUsize::new(0),
            sleeping: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        }));
        let helpers = threads.saturating_sub(1);
        for index in 1..=helpers {
            std::thread::Builder::new().name(format!("gauge-decode-{index}")).spawn(move || helper(shared, index)).expect("spawn a decoding thread");
        }
        SpinPool { shared, helpers, busy: Mutex::new(()) }
    }

    /// Threads that run a job (the caller included).
    pub fn threads(&self) -> usize {
        self.helpers + 1
    }

    /// Runs `f(thread_index)` on every thread of the pool (the caller is index 0) and returns
    /// when all are done.
    fn run<'a>(&self, f: &'a (dyn Fn(usize) + Sync + 'a)) {
        if self.helpers == 0 {
            f(0);
            return;
        }
        let s = self.shared;
        // SAFETY: the reference is cleared before this function returns, and every helper
        // has finished with it (pending == 0), so it never outlives `f`.
        let job: &'static Job = unsafe { std::mem::transmute::<&'a (dyn Fn(usize) + Sync + 'a), &'static Job>(f) };
        *s.job.lock().expect("job slot") = Some(job);
        s.pending.store(self.helpers, Ordering::SeqCst);
        s.generation.fetch_add(1, Ordering::SeqCst);
        if s.sleeping.load(Ordering::SeqCst) > 0 {
            let _g = s.lock.lock().expect("pool lock");
            s.wake.notify_all();
        }
        // The helpers borrow `f` until they are done: wait for them even if the caller's share panics.
        let mine = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(0)));
        let mut spins = 0u32;
        while s.pending.load(Ordering::Acquire) > 0 {
            spins = spins.saturating_add(1);
            if spins < SPINS_BEFORE_YIELD {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        *s.job.lock().expect("job slot") = None;
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if s.panicked.swap(false, Ordering::SeqCst) {
            panic!("a decoding thread panicked (its message is above)");
        }
    }
}

fn helper(s: &'static Shared, index: usize) {
    // The generation the pool was created with (a job may be posted before this thread runs).
    let mut seen = 0;
    loop {
        let mut idle_since = None::<Instant>;
        let mut spins = 0u32;
        loop {
            let g = s.generation.load(Ordering::SeqCst);
            if g != seen {
                seen = g;
                break;
            }
            spins = spins.wrapping_add(1);
            if spins < SPINS_BEFORE_YIELD {
                std::hint::spin_loop();
                continue;
            }
            std::thread::yield_now();
            if spins.is_multiple_of(64) {
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() > SPIN {
                    let mut guard = s.lock.lock().expect("pool lock");
                    s.sleeping.fetch_add(1, Ordering::SeqCst);
                    while s.generation.load(Ordering::SeqCst) == seen {
                        guard = s.wake.wait(guard).expect("pool lock");
                    }
                    s.sleeping.fetch_sub(1, Ordering::SeqCst);
                    drop(guard);
                    idle_since = None;
                    spins = 0;
                    continue;
                }
            }
        }
        let job = *s.job.lock().expect("job slot");
        if let Some(job) = job {
            // A panicking job must still count as done, or the caller would wait forever.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(index))).is_err() {
                s.panicked.store(true, Ordering::SeqCst);
            }
        }
        s.pending.fetch_sub(1, Ordering::Release);
    }
}

/// The process's pool (as many threads as rayon's pool, so `RAYON_NUM_THREADS` applies).
fn pool() -> &'static SpinPool {
    POOL.get_or_init(|| SpinPool::new(rayon::current_num_threads().max(1)))
}

/// While held, [`parallel_for`] on this thread runs on the spinning pool.
pub struct Session {
    _busy: MutexGuard<'static, ()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        IN_SESSION.with(|c| c.set(None));
    }
}

/// Enters a decoding session on this thread (one at a time per process; a second caller
/// waits for the first step to end).
pub fn session() -> Session {
    let p = pool();
    let busy = p.busy.lock().unwrap_or_else(|e| e.into_inner());
    IN_SESSION.with(|c| c.set(Some(p)));
    Session { _busy: busy }
}

/// Runs `f(chunk)` for every chunk in `0..n`, each exactly once, spread over the threads:
/// the spinning pool inside a [`session`], rayon otherwise.
pub fn parallel_for(n: usize, f: impl Fn(usize) + Sync) {
    if n <= 1 {
        (0..n).for_each(f);
        return;
    }
    match IN_SESSION.with(Cell::get) {
        Some(p) => {
            let next = AtomicUsize::new(0);
            p.run(&|_| loop {
                let c = next.fetch_add(1, Ordering::Relaxed);
                if c >= n {
                    break;
                }
                f(c);
            });
        }
        None => {
            use rayon::prelude::*;
            (0..n).into_par_iter().for_each(&f);
        }
    }
}

/// Threads a [`parallel_for`] spreads over on this thread.
pub fn threads() -> usize {
    match IN_SESSION.with(Cell::get) {
        Some(p) => p.threads(),
        None => rayon::current_num_threads().max(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_chunk_runs_once_in_and_out_of_a_session() {
        for in_session in [false, true] {
            let _s = in_session.then(session);
            for n in [0, 1, 2, 7, 100] {
                let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                for _ in 0..50 {
                    parallel_for(n, |c| {
                        hits[c].fetch_add(1, Ordering::Relaxed);
                    });
                }
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 50), "session {in_session}, n {n}");
            }
        }
        // Helpers park when idle and wake for the next job.
        std::thread::sleep(SPIN * 3);
        let _s = session();
        let sum = AtomicUsize::new(0);
        parallel_for(10, |c| {
            sum.fetch_add(c, Ordering::Relaxed);
        });
        assert_eq!(sum.load(Ordering::Relaxed), 45);
    }
}
