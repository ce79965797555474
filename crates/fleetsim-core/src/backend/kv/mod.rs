//! The KV cache of one engine: blocks, the free queue in eviction order, and the prefix
//! cache, after vLLM v1's `BlockPool` and `KVCacheManager`.
//!
//! Two implementations with the same observable behaviour:
//!
//! * [`BlockPool`] (`blocks`) keeps a record per block, as vLLM does: one free-queue entry
//!   and one index operation per block. The reference engine mode uses it.
//! * [`RunPool`] (`runs`) keeps the same state per *run*: the blocks of one request's hash
//!   chain that it cached in a row. A run is allocated, looked up, evicted and freed in
//!   O(1) index work, plus a sequential pass over its hashes. The fast engine mode uses it.
//!
//! Block ids are never observable (a router sees hashes in KV events, a gauge sees
//! counts), so the two only have to agree on what is: which hashes each lookup finds and
//! how many of them are unreferenced, the free and used counts, the order of `BlockStored`
//! and `BlockRemoved` events, and the references held. `cache::KvCache` puts either behind
//! one interface for the engine, and `runs`' tests drive both through random operations
//! and compare them after each one.

mod blocks;
mod cache;
mod runs;

pub use blocks::BlockPool;
pub use cache::KvCache;
pub use runs::RunPool;

/// Request slot `t`'s entry of a table indexed by slot, added (empty) if the table is
/// shorter: slots come from the engine, which reuses them.
fn slot_entry<T: Default>(tables: &mut Vec<T>, t: u32) -> &mut T {
    let t = t as usize;
    if tables.len() <= t {
        tables.resize_with(t + 1, T::default);
    }
    &mut tables[t]
}

pub use crate::view::KvEvent;
