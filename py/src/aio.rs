//! The asyncio bridge, built for throughput.
//!
//! An async call creates `loop.create_future()` and spawns the core's future on the core runtime
//! (`ratekeeper::runtime()`). When it completes, the runtime thread pushes `(future, outcome)`
//! into the event loop's completion queue and — only if the queue was empty — writes to an
//! eventfd whose read end the loop watches (`loop.add_reader`). No runtime thread ever takes the
//! GIL. The loop then runs `drain` once per batch: with the GIL, on the loop's thread, it converts
//! every queued outcome to Python and resolves its future (skipping futures already cancelled).
//!
//! Calls on in-process backends (memory, unlimited) are polled once inline: most complete at
//! once and return an already-resolved future without touching the runtime or the bridge (so
//! awaiting it takes no turn of the loop); only a call that has to wait (an `acquire` on a full
//! limiter) is handed to the runtime.
//!
//! One bridge per event loop, kept on the loop object, so several loops in several threads each
//! get their own queue. Loops without an instance `__dict__` keep theirs in a weak dictionary.
//! Loops that cannot watch file descriptors (Windows' proactor) fall back to one
//! `call_soon_threadsafe(drain)` per batch. A forked child never reuses its parent's bridge.

use std::any::Any;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::task::{Context, Poll, Waker};

use pyo3::exceptions::PyNotImplementedError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyWeakrefReference;
use pyo3::{intern, IntoPyObjectExt};

use crate::decision::{Decision, Lease, Metrics};
use crate::errors::{panic_to_py_err, to_py_err};

/// What an async call produces, converted to Python on the loop thread.
pub(crate) enum Payload {
    /// A decision, the call's key, and for concurrent limiters the limiter, so a lease granted
    /// to a call that was cancelled meanwhile is released instead of held until its timeout.
    Decision(ratekeeper::Decision, Option<String>, Option<ratekeeper::Limiter>),
    None,
    Metrics(ratekeeper::Metrics),
    /// A fleet shedder's ticket, and the shedder (to give a cancelled call's slot back).
    Ticket(Option<ratekeeper::Lease>, ratekeeper::FleetShedder),
    /// A pause in effect (`pause`, `observe`), in seconds; `None`: no pause applied.
    Seconds(Option<std::time::Duration>),
    /// A yes or no (`resume`: whether a pause was in effect).
    Flag(bool),
    /// A `check_all` result (its admitted concurrent parts' leases are released if the call
    /// was cancelled meanwhile).
    Combined(ratekeeper::CombinedDecision),
}

impl Payload {
    fn into_py(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        match self {
            Payload::Decision(d, key, _) => Decision::new(d, key.as_deref()).into_bound_py_any(py),
            Payload::None => Ok(py.None().into_bound(py)),
            Payload::Metrics(m) => Metrics { inner: m }.into_bound_py_any(py),
            Payload::Ticket(t, _) => t.map(|inner| Lease { inner, key: None }).into_bound_py_any(py),
            Payload::Seconds(d) => d.map(|d| d.as_secs_f64()).into_bound_py_any(py),
            Payload::Flag(b) => b.into_bound_py_any(py),
            Payload::Combined(inner) => crate::check_all::CombinedDecision { inner }.into_bound_py_any(py),
        }
    }
}

type Panic = Box<dyn Any + Send>;
type CoreResult = Result<Payload, ratekeeper::Error>;
type Outcome = Result<CoreResult, Panic>;

/// Counts forks (incremented in the child), so a child never uses a bridge made before it forked:
/// its eventfd is shared with the parent.
static FORKS: AtomicU64 = AtomicU64::new(0);

extern "C" fn forked_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

fn watch_forks() {
    static ONCE: Once = Once::new();
    #[cfg(unix)]
    ONCE.call_once(|| {
        // SAFETY: registers a handler that only increments an atomic (async-signal-safe).
        unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
    });
    #[cfg(not(unix))]
    ONCE.call_once(|| {});
}

/// How runtime threads wake the loop.
enum Wake {
    /// The write end of the loop's wake-up descriptor (an eventfd, or a pipe off Linux).
    Fd { read: i32, write: i32 },
    /// `loop.call_soon_threadsafe(drain)`, for loops that cannot watch descriptors.
    Threadsafe { event_loop: Py<PyWeakrefReference> },
}

struct Shared {
    queue: Mutex<Vec<(Py<PyAny>, Outcome)>>,
    wake: Wake,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Wake::Fd { read, write } = self.wake {
            // SAFETY: the descriptors belong to this bridge and nothing uses them any more.
            unsafe {
                libc::close(read);
                if write != read {
                    libc::close(write);
                }
            }
        }
    }
}

fn complete(shared: &Arc<Shared>, future: Py<PyAny>, outcome: Outcome) {
    let was_empty = {
        let mut queue = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
        let was_empty = queue.is_empty();
        queue.push((future, outcome));
        was_empty
    };
    if was_empty {
        wake(shared);
    }
}

fn wake(shared: &Arc<Shared>) {
    match &shared.wake {
        Wake::Fd { write, .. } => {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a local to our own non-blocking descriptor. A full pipe
            // (EAGAIN) already holds a pending wake-up, so the result can be ignored.
            unsafe { libc::write(*write, (&one as *const u64).cast(), 8) };
        }
        Wake::Threadsafe { event_loop } => Python::attach(|py| {
            let Some(event_loop) = event_loop.bind(py).upgrade() else { return };
            if let Ok(drain) = Bound::new(py, Drain { shared: shared.clone() }) {
                // A closed loop refuses (RuntimeError): its futures are gone with it.
                let _ = event_loop.call_method1(intern!(py, "call_soon_threadsafe"), (drain,));
            }
        }),
    }
}

/// Resolves every queued future; registered with `loop.add_reader` (or scheduled per batch).
#[pyclass(frozen, module = "ratekeeper._ratekeeper")]
struct Drain {
    shared: Arc<Shared>,
}

#[pymethods]
impl Drain {
    fn __call__(&self, py: Python<'_>) {
        if let Wake::Fd { read, .. } = self.shared.wake {
            // Clear the wake-up before taking the queue: a completion queued after the take
            // writes again, so none is left behind.
            let mut buf = [0u8; 64];
            // SAFETY: reads into a local buffer from our own non-blocking descriptor.
            while unsafe { libc::read(read, buf.as_mut_ptr().cast(), buf.len()) } == buf.len() as isize {}
        }
        let batch = std::mem::take(&mut *self.shared.queue.lock().unwrap_or_else(|p| p.into_inner()));
        for (future, outcome) in batch {
            resolve(py, future.bind(py), outcome);
        }
    }
}

fn resolve(py: Python<'_>, future: &Bound<'_, PyAny>, outcome: Outcome) {
    // A cancelled future (or one whose task was torn down) takes no result; a lease granted to
    // it is given back at once.
    match future.call_method0(intern!(py, "done")).and_then(|d| d.is_truthy()) {
        Ok(false) => {}
        _ => {
            match outcome {
                Ok(Ok(Payload::Decision(d, key, Some(limiter)))) => {
                    if let Some(lease) = d.lease {
                        ratekeeper::runtime().spawn(async move {
                            let _ = limiter.release(key.as_deref(), &lease).await;
                        });
                    }
                }
                Ok(Ok(Payload::Combined(combined))) => {
                    ratekeeper::runtime().spawn(async move {
                        let _ = combined.release().await;
                    });
                }
                Ok(Ok(Payload::Ticket(Some(lease), shedder))) => {
                    ratekeeper::runtime().spawn(async move {
                        let _ = shedder.leave(Some(lease)).await;
                    });
                }
                _ => {}
            }
            return;
        }
    }
    let value = match outcome {
        Ok(Ok(payload)) => payload.into_py(py),
        Ok(Err(e)) => Err(to_py_err(py, e)),
        Err(panic) => Err(panic_to_py_err(py, panic)),
    };
    let _ = match value {
        Ok(v) => future.call_method1(intern!(py, "set_result"), (v,)),
        Err(e) => future.call_method1(intern!(py, "set_exception"), (e.into_value(py),)),
    };
}

/// The bridge of one loop, stored on the loop.
#[pyclass(frozen, module = "ratekeeper._ratekeeper")]
struct Bridge {
    shared: Arc<Shared>,
    forks: u64,
}

static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static WEAK_BRIDGES: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
const ATTR: &str = "_ratekeeper_bridge";

fn running_loop(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let get = GET_RUNNING_LOOP
        .get_or_try_init(py, || -> PyResult<_> { Ok(py.import("asyncio")?.getattr("get_running_loop")?.unbind()) })?;
    // asyncio's own "no running event loop" does not say what to do, and the natural first try,
    // `asyncio.run(limiter.acheck())`, lands here: the message shows the form that works.
    get.bind(py).call0().map_err(|e| {
        if e.is_instance_of::<pyo3::exceptions::PyRuntimeError>(py) {
            pyo3::exceptions::PyRuntimeError::new_err(
                "an `a…` method (acheck, aacquire, …) needs a running event loop: it returns an asyncio \
                 future, so call it in a coroutine, e.g. `async def main(): d = await limiter.acheck(key)` \
                 then `asyncio.run(main())`",
            )
        } else {
            e
        }
    })
}

fn weak_bridges(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    Ok(WEAK_BRIDGES
        .get_or_try_init(py, || -> PyResult<_> {
            Ok(py.import("weakref")?.getattr("WeakKeyDictionary")?.call0()?.unbind())
        })?
        .bind(py))
}

/// The bridge of `event_loop` (made on first use).
fn bridge(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> PyResult<Arc<Shared>> {
    let forks = FORKS.load(Ordering::Relaxed);
    let found = match event_loop.getattr_opt(intern!(py, ATTR)) {
        Ok(Some(b)) => Some(b),
        _ => weak_bridges(py)?.call_method1(intern!(py, "get"), (event_loop,)).ok().filter(|b| !b.is_none()),
    };
    if let Some(bridge) = found {
        if let Ok(bridge) = bridge.cast::<Bridge>() {
            let bridge = bridge.get();
            if bridge.forks == forks {
                return Ok(bridge.shared.clone());
            }
        }
    }
    let shared = create(py, event_loop)?;
    let bridge = Bridge { shared: shared.clone(), forks };
    if event_loop.setattr(intern!(py, ATTR), Bound::new(py, bridge)?).is_err() {
        let bridge = Bridge { shared: shared.clone(), forks };
        weak_bridges(py)?.set_item(event_loop, Bound::new(py, bridge)?)?;
    }
    Ok(shared)
}

#[cfg(target_os = "linux")]
fn wake_fds() -> std::io::Result<(i32, i32)> {
    // SAFETY: plain syscall; the descriptor is owned by the bridge from here on.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((fd, fd))
}

#[cfg(all(unix, not(target_os = "linux")))]
fn wake_fds() -> std::io::Result<(i32, i32)> {
    let mut fds = [0i32; 2];
    // SAFETY: plain syscalls on descriptors we own.
    unsafe {
        if libc::pipe(fds.as_mut_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        for fd in fds {
            libc::fcntl(fd, libc::F_SETFL, libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK);
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
    Ok((fds[0], fds[1]))
}

fn create(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> PyResult<Arc<Shared>> {
    watch_forks();
    #[cfg(unix)]
    {
        let (read, write) = wake_fds()?;
        let shared = Arc::new(Shared { queue: Mutex::new(Vec::new()), wake: Wake::Fd { read, write } });
        let drain = Bound::new(py, Drain { shared: shared.clone() })?;
        match event_loop.call_method1(intern!(py, "add_reader"), (read, drain)) {
            Ok(_) => return Ok(shared),
            Err(e) if e.is_instance_of::<PyNotImplementedError>(py) => {} // falls back below
            Err(e) => return Err(e),
        }
    }
    let event_loop = event_loop.cast::<PyAny>()?;
    let weak = PyWeakrefReference::new(event_loop)?.unbind();
    Ok(Arc::new(Shared { queue: Mutex::new(Vec::new()), wake: Wake::Threadsafe { event_loop: weak } }))
}

/// A future that turns a panic into an error outcome instead of unwinding through the runtime.
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Panic>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match catch_unwind(AssertUnwindSafe(|| self.0.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

/// Aborts a call that may wait (`aacquire`) when its asyncio future is cancelled, so it stops
/// waiting (and cannot take a slot nobody will release).
#[pyclass(frozen, module = "ratekeeper._ratekeeper")]
struct AbortOnCancel {
    handle: tokio::task::AbortHandle,
}

#[pymethods]
impl AbortOnCancel {
    fn __call__(&self, future: &Bound<'_, PyAny>) {
        if future.call_method0(intern!(future.py(), "cancelled")).and_then(|c| c.is_truthy()).unwrap_or(false) {
            self.handle.abort();
        }
    }
}

/// Runs `future` for the running event loop and returns an asyncio future of its result.
/// `remote`: the call goes to Redis (spawned at once); otherwise it is polled once inline first.
/// `may_wait`: cancelling the asyncio future aborts the call.
pub(crate) fn run<'py, F>(py: Python<'py>, remote: bool, may_wait: bool, future: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = CoreResult> + Send + 'static,
{
    // The loop is looked up before the call runs: without one nothing is consumed.
    let event_loop = running_loop(py)?;
    let mut future = CatchUnwind(Box::pin(future));
    if !remote {
        let polled = {
            let _runtime = ratekeeper::runtime().enter();
            Pin::new(&mut future).poll(&mut Context::from_waker(Waker::noop()))
        };
        if let Poll::Ready(outcome) = polled {
            return completed(py, &event_loop, outcome);
        }
    }
    let shared = bridge(py, &event_loop)?;
    let py_future = event_loop.call_method0(intern!(py, "create_future"))?;
    let handle = py_future.clone().unbind();
    let task = ratekeeper::runtime().spawn(async move {
        let outcome = future.await;
        complete(&shared, handle, outcome);
    });
    if may_wait {
        let abort = Bound::new(py, AbortOnCancel { handle: task.abort_handle() })?;
        py_future.call_method1(intern!(py, "add_done_callback"), (abort,))?;
    }
    Ok(py_future)
}

/// An asyncio future of `call`, made for a call that an in-process backend decides at once
/// (`acheck`, `apeek` on memory): `call` runs now, on this thread, as the sync form would, with
/// no future of the core's to build, box and poll; its result or error is set on a fresh future
/// (which has no callbacks and cannot have been cancelled). The loop is looked up first:
/// without one, `call` does not run.
pub(crate) fn decided<'py, T>(
    py: Python<'py>,
    call: impl FnOnce() -> Result<T, ratekeeper::Error>,
) -> PyResult<Bound<'py, PyAny>>
where
    T: IntoPyObject<'py>,
{
    let event_loop = running_loop(py)?;
    let py_future = event_loop.call_method0(intern!(py, "create_future"))?;
    match catch_unwind(AssertUnwindSafe(call)) {
        Ok(Ok(value)) => py_future.call_method1(intern!(py, "set_result"), (value.into_bound_py_any(py)?,))?,
        Ok(Err(e)) => py_future.call_method1(intern!(py, "set_exception"), (to_py_err(py, e).into_value(py),))?,
        Err(panic) => {
            py_future.call_method1(intern!(py, "set_exception"), (panic_to_py_err(py, panic).into_value(py),))?
        }
    };
    Ok(py_future)
}

/// An asyncio future already holding `outcome`, for a call decided in process: awaiting it
/// returns at once, without a turn of the event loop, and nothing of the bridge (its queue, its
/// wake-up descriptor) is touched. A fresh future has no callbacks and cannot have been
/// cancelled, so it takes the result without the checks `resolve` makes.
fn completed<'py>(py: Python<'py>, event_loop: &Bound<'py, PyAny>, outcome: Outcome) -> PyResult<Bound<'py, PyAny>> {
    let py_future = event_loop.call_method0(intern!(py, "create_future"))?;
    match outcome {
        Ok(Ok(payload)) => py_future.call_method1(intern!(py, "set_result"), (payload.into_py(py)?,))?,
        Ok(Err(e)) => py_future.call_method1(intern!(py, "set_exception"), (to_py_err(py, e).into_value(py),))?,
        Err(panic) => {
            py_future.call_method1(intern!(py, "set_exception"), (panic_to_py_err(py, panic).into_value(py),))?
        }
    };
    Ok(py_future)
}
