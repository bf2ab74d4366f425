//! Wrapping a store. A wrapper (the server's metering) implements [`Layer`], implements
//! the domains it changes itself, and passes every other domain through to the store it
//! wraps with that domain's marker, e.g. `impl<S: Store> PassSessions for Metered<S> {}`:
//! no forwarding method to write, and a method added to a passed domain reaches the
//! wrapped store by itself.

use crate::Store;

/// A store that wraps another.
pub trait Layer: Send + Sync {
    type Inner: Store;

    /// The wrapped store.
    fn layer_inner(&self) -> &Self::Inner;
}
