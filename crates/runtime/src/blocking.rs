//! A thread that blocks in the runtime gives its `require` allocation back.
//!
//! Poli-C's rule (allot-client's `require` module): a thread that waits
//! releases what it holds until it runs again, so scopes cannot deadlock on
//! each other and a waiting thread's CPUs serve someone else meanwhile. The
//! runtime's two blocking points — a worker parking on its doorbell and a
//! thread blocking on an [`crate::Event`] — hold a [`Blocked`] guard across
//! the block: it gives the allocation back when made and retakes it (waiting
//! if it must) when dropped.
//!
//! Costs one atomic load when the process never entered a `require` scope,
//! and nothing under loom (the models check the wake-up protocol alone).

#[cfg(not(loom))]
use allot_require::Blocks;

/// Held while the calling thread is blocked.
pub(crate) struct Blocked {
    #[cfg(not(loom))]
    rt: Option<&'static Blocks>,
}

impl Blocked {
    /// The calling thread is about to block.
    pub(crate) fn begin() -> Blocked {
        #[cfg(not(loom))]
        {
            let rt = Blocks::global_if_started();
            if let Some(rt) = rt {
                rt.block_current();
            }
            Blocked { rt }
        }
        #[cfg(loom)]
        Blocked {}
    }
}

impl Drop for Blocked {
    fn drop(&mut self) {
        #[cfg(not(loom))]
        if let Some(rt) = self.rt {
            rt.unblock_current();
        }
    }
}
