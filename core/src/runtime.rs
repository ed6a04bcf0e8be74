//! The one process-wide async runtime, and a `block_on` that is safe from any thread.
//!
//! Fork-safe: a child process (gunicorn `--preload`, celery prefork) inherits the parent's
//! runtime object but none of its threads, so [`runtime()`] notices the new pid and builds a
//! fresh runtime for the child. The inherited one is leaked, never dropped: dropping it would
//! wait for worker threads that do not exist in the child.

use std::any::Any;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

use parking_lot::Mutex;
use tokio::runtime::Runtime;

/// The runtime of the process whose pid is in [`RUNTIME_PID`] (null before first use).
static RUNTIME: AtomicPtr<Runtime> = AtomicPtr::new(std::ptr::null_mut());
static RUNTIME_PID: AtomicU32 = AtomicU32::new(0);
static BUILDING: Mutex<()> = Mutex::new(());

/// The process-wide tokio runtime every backend connection and binding runs on; a forked child
/// gets its own on first use.
pub fn runtime() -> &'static Runtime {
    let pid = current_pid();
    if RUNTIME_PID.load(Ordering::Acquire) == pid {
        // SAFETY: the pointer was stored (after the runtime was built) before the pid, and a
        // runtime is never freed, so it is valid for 'static.
        return unsafe { &*RUNTIME.load(Ordering::Acquire) };
    }
    let _building = BUILDING.lock();
    if RUNTIME_PID.load(Ordering::Acquire) != pid {
        let fresh = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 4)))
            .thread_name("ratekeeper")
            .enable_all()
            .build()
            .expect("failed to start the ratekeeper runtime");
        // Leaked on purpose: see the module documentation (a parent's runtime lives as long as
        // the process anyway).
        RUNTIME.store(Box::into_raw(Box::new(fresh)), Ordering::Release);
        RUNTIME_PID.store(pid, Ordering::Release);
    }
    // SAFETY: as above.
    unsafe { &*RUNTIME.load(Ordering::Acquire) }
}

/// The pid of the current process, and whether it differs from `known` (a fork happened since
/// `known` was recorded); used by state that must not cross a fork, like connections.
pub(crate) fn forked_since(known: u32) -> (u32, bool) {
    let pid = current_pid();
    (pid, pid != known)
}

/// The pid of the current process, without a system call per use (glibc no longer caches
/// `getpid`, and every Redis call checks it): cached, and forgotten in a forked child by an
/// `atfork` handler, which runs before `fork()` returns there.
fn current_pid() -> u32 {
    static PID: AtomicU32 = AtomicU32::new(0);
    let cached = PID.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    #[cfg(unix)]
    {
        static HANDLER: std::sync::Once = std::sync::Once::new();
        extern "C" fn forget_pid() {
            PID.store(0, Ordering::Relaxed);
        }
        // Registered before the first pid is cached, so no fork can leave a stale one behind.
        HANDLER.call_once(|| unsafe {
            libc::pthread_atfork(None, None, Some(forget_pid));
        });
        let pid = std::process::id();
        PID.store(pid, Ordering::Relaxed);
        pid
    }
    #[cfg(not(unix))]
    std::process::id()
}

struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `future` to completion on the calling thread, with timers and I/O driven by
/// [`runtime()`]. Unlike `Runtime::block_on` it does not panic when the caller is itself inside
/// a runtime (a Python or C thread may be), because it parks the thread instead of entering the
/// scheduler; it should still not be called from the ratekeeper runtime's own worker threads.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let _context = runtime().enter();
    let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        match future.as_mut().poll(&mut context) {
            Poll::Ready(output) => return output,
            Poll::Pending => thread::park(),
        }
    }
}

/// A future whose panic becomes an `Err` carrying the payload: for a binding that runs a call on
/// [`runtime()`] and must still report its end (a Node promise to resolve or reject, a C callback to call)
/// rather than let the panic end the task silently.
pub struct CatchPanic<F>(pub Pin<Box<F>>);

impl<F: Future> Future for CatchPanic<F> {
    type Output = std::result::Result<F::Output, Box<dyn Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.0.as_mut();
        match catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Err(payload) => Poll::Ready(Err(payload)),
        }
    }
}
