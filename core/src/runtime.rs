//! The one process-wide async runtime, and a `block_on` that is safe from any thread.

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

use tokio::runtime::Runtime;

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// The process-wide tokio runtime every backend connection and binding runs on.
pub fn runtime() -> &'static Runtime {
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 4)))
            .thread_name("ratekeeper")
            .enable_all()
            .build()
            .expect("failed to start the ratekeeper runtime")
    })
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
