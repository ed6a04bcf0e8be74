//! Keeps the library's own background threads out of `fork()`'s way. A forked child has only
//! the thread that forked; a lock that another thread held at that instant stays locked in the
//! child for good. The background work (flushing metrics, registering names) runs its
//! lock-holding sections inside [`section`]; an `atfork` handler makes a fork wait for the
//! sections in progress and holds new ones back until the fork is done, so the child never
//! inherits one of their locks held. The sections are short and do no I/O.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static FORKING: AtomicBool = AtomicBool::new(false);
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Sections this thread is inside: a nested one runs at once (a thread already counted must
    /// not wait for a fork that waits for it).
    static DEPTH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Runs `f` as a section a fork waits for (see the module documentation).
pub(crate) fn section<T>(f: impl FnOnce() -> T) -> T {
    if DEPTH.with(|d| d.get()) > 0 {
        return f();
    }
    register();
    loop {
        ACTIVE.fetch_add(1, Ordering::SeqCst);
        if !FORKING.load(Ordering::SeqCst) {
            break;
        }
        ACTIVE.fetch_sub(1, Ordering::SeqCst);
        while FORKING.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
    }
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            DEPTH.with(|d| d.set(d.get() - 1));
            ACTIVE.fetch_sub(1, Ordering::SeqCst);
        }
    }
    DEPTH.with(|d| d.set(d.get() + 1));
    let _leave = Leave;
    f()
}

fn register() {
    #[cfg(unix)]
    {
        static HANDLERS: std::sync::Once = std::sync::Once::new();
        extern "C" fn prepare() {
            FORKING.store(true, Ordering::SeqCst);
            while ACTIVE.load(Ordering::SeqCst) > 0 {
                std::thread::yield_now();
            }
        }
        extern "C" fn done() {
            FORKING.store(false, Ordering::SeqCst);
        }
        // SAFETY: the handlers only touch atomics and yield.
        HANDLERS.call_once(|| unsafe {
            libc::pthread_atfork(Some(prepare), Some(done), Some(done));
        });
    }
}
