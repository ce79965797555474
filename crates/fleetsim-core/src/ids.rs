//! Typed indices. All simulation state lives in `Vec`s indexed by these, never in
//! reference-counted graphs, so a whole simulation is `Send` and cheap to run in parallel.
//!
//! Owns: the index newtypes. Invariant: an index is valid for the run that made it.

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub u32);

        impl $name {
            /// Position in the owning `Vec`.
            #[inline]
            pub fn index(self) -> usize {
                self.0 as usize
            }

            /// Id for position `i`; panics if `i` does not fit (a bug: sizes are validated).
            #[inline]
            pub fn from_index(i: usize) -> Self {
                $name(u32::try_from(i).expect(concat!(stringify!($name), " overflow")))
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

id_type!(
    /// A backend (one vLLM engine / endpoint), in discovery order.
    BackendId
);
id_type!(
    /// A request: one turn of one session.
    RequestId
);
id_type!(
    /// A client session (a multi-turn conversation or agent loop).
    SessionId
);
id_type!(
    /// A router replica (`router.replicas`), in the order the front balancer counts them.
    ReplicaId
);
id_type!(
    /// A position in a router replica's scrape pass (the pass reads its endpoints in
    /// order, one slot after another).
    ScrapeSlot
);
