//! Blocking work (file IO through `keel_log`'s storage) off the async tasks — or inline, on a
//! current-thread runtime.
//!
//! On the multi-threaded runtime a production broker uses, blocking work goes to tokio's
//! blocking pool so it does not stall the worker threads. A deterministic simulator drives the
//! node on a single-threaded runtime with paused time instead, and there the blocking pool
//! would break both guarantees it relies on: its threads run concurrently with the runtime (so
//! the interleaving, and the outcome of a run, would depend on the OS scheduler), and while a
//! task waits for a blocking-pool thread the runtime is not idle in the way paused time needs to
//! auto-advance. So on a current-thread runtime the work runs inline, on the runtime's own
//! thread. (Its storage is simulated there, so "blocking" calls return promptly.)

use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::task::JoinError;

/// Runs blocking `f`: inline when the current runtime is a current-thread runtime, otherwise
/// on tokio's blocking pool ([`tokio::task::spawn_blocking`]). The error is the blocking
/// task's failure (a panic); inline, a panic in `f` propagates to the caller instead.
///
/// # Panics
///
/// If called outside a tokio runtime.
pub async fn run_blocking<T, F>(f: F) -> Result<T, JoinError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    if Handle::current().runtime_flavor() == RuntimeFlavor::CurrentThread {
        Ok(f())
    } else {
        tokio::task::spawn_blocking(f).await
    }
}

#[cfg(test)]
mod tests {
    use super::run_blocking;

    #[tokio::test(flavor = "current_thread")]
    async fn inline_on_a_current_thread_runtime() {
        let here = std::thread::current().id();
        let there = run_blocking(move || std::thread::current().id())
            .await
            .unwrap();
        assert_eq!(here, there);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn on_the_blocking_pool_otherwise() {
        let here = std::thread::current().id();
        let there = run_blocking(move || std::thread::current().id())
            .await
            .unwrap();
        assert_ne!(here, there);
    }
}
