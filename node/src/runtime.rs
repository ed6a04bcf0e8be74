//! The core's one runtime drives every Promise: it is registered with napi as its async runtime,
//! so the process holds a single Tokio runtime (`ratekeeper::runtime()`), whatever the number of
//! Node environments (main thread, `worker_threads`).
//!
//! The binding spawns its calls on this runtime itself (see `bridge`); registering it with napi
//! makes sure napi never starts a runtime of its own.

use std::future::Future;
use std::pin::Pin;

use napi::bindgen_prelude::{AsyncRuntime, AsyncRuntimeGuard, AsyncRuntimeRejection, AsyncRuntimeTask};

/// napi's async runtime: the core's process-wide runtime.
///
/// The runtime is shared by every binding in the process and lives as long as the process, so
/// `shutdown` (called by napi when the last Node environment of the addon exits) does not stop
/// it: its threads stay bounded (2 to 4 workers plus blocking threads that exit when idle)
/// however many environments come and go. The addon image is pinned in memory (see
/// `module_init`), so those threads never run unmapped code.
pub(crate) struct CoreRuntime;

struct Entered(#[allow(dead_code)] tokio::runtime::EnterGuard<'static>);

impl AsyncRuntimeGuard for Entered {}

// SAFETY: the runtime never stops, and the addon image is pinned for the life of the process
// (`retain_current_module_for_unload_safety` in `module_init`), so no thread of it can run code
// from an unloaded image.
unsafe impl AsyncRuntime for CoreRuntime {
    fn spawn(&self, task: AsyncRuntimeTask) -> Result<(), AsyncRuntimeRejection<AsyncRuntimeTask>> {
        ratekeeper::runtime().spawn(task);
        Ok(())
    }

    fn block_on(&self, future: Pin<&mut dyn Future<Output = ()>>) -> napi::Result<()> {
        ratekeeper::block_on(future);
        Ok(())
    }

    fn enter(&self) -> napi::Result<Box<dyn AsyncRuntimeGuard + '_>> {
        Ok(Box::new(Entered(ratekeeper::runtime().enter())))
    }

    fn shutdown(&self) -> napi::Result<()> {
        Ok(())
    }

    fn spawn_blocking(
        &self,
        work: Box<dyn FnOnce() + Send + 'static>,
    ) -> Result<(), AsyncRuntimeRejection<Box<dyn FnOnce() + Send + 'static>>> {
        ratekeeper::runtime().spawn_blocking(work);
        Ok(())
    }
}

/// A core result.
pub type CoreResult<T> = Result<T, ratekeeper::Error>;
