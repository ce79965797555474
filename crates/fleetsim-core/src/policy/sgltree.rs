//! SGLang's approximate multi-tenant radix tree with its LRU eviction (classic sgl-router
//! `sgl-router/src/tree.rs`, read at sgl-project/sglang `0e6ed14d` and `8613c481`; the
//! eviction thread is in `sgl-router/src/policies/cache_aware.rs` @ `b6f20641`).
//!
//! Upstream stores raw request characters; here the text is a sequence of fixed-size
//! character chunks (`RequestInfo::prompt_chunks`, the last one possibly partial), so a node
//! splits at a chunk boundary instead of at the exact diverging character. Everything else
//! follows upstream:
//!
//! * one tree shared by all workers ("tenants"); every node records, per tenant, the last
//!   access time in milliseconds; `tenant_char_count` holds, per tenant, the characters of
//!   all nodes carrying it;
//! * `insert(text, tenant)`: walk from the root, splitting a node where the text diverges
//!   (the new prefix node copies the split node's tenants), creating a leaf for the rest;
//!   the tenant is added to (or refreshed on) every node on the path, and its count grows
//!   by the characters of each node it newly joins;
//! * `prefix_match(text)`: walk while the text follows the tree; a partial match inside a
//!   node counts character-wise and ends the walk on that node;
//! * `evict_tenant_by_size(max)`: a min-heap of (last access, tenant, leaf) over every
//!   node that is a leaf *for that tenant* (it carries the tenant and no child does); pop in
//!   increasing time; skip tenants already at or below `max`; otherwise remove the tenant
//!   from the node (count minus the node's characters), drop the node if it has neither
//!   children nor tenants, and push its parent if it has just become a leaf for the tenant.
//!
//! Upstream's heap orders by timestamp only, so equal timestamps pop in an unspecified
//! order; here ties break by tenant, then node id (deterministic).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

const NIL: u32 = u32::MAX;
/// The root's id.
pub const ROOT: u32 = 0;

struct Node {
    parent: u32,
    /// This node's text, as chunk hashes.
    units: Vec<u64>,
    /// Characters of this node's text.
    chars: u64,
    children: SmallVec<[u32; 2]>,
    /// (tenant, last access in ms), in order of first arrival.
    tenants: SmallVec<[(u16, u64); 4]>,
}

impl Node {
    fn ts(&self, t: u16) -> Option<u64> {
        self.tenants.iter().find(|e| e.0 == t).map(|e| e.1)
    }

    fn has(&self, t: u16) -> bool {
        self.tenants.iter().any(|e| e.0 == t)
    }

    /// Sets `t`'s access time; true if `t` was not on the node yet.
    fn touch(&mut self, t: u16, ms: u64) -> bool {
        match self.tenants.iter_mut().find(|e| e.0 == t) {
            Some(e) => {
                e.1 = ms;
                false
            }
            None => {
                self.tenants.push((t, ms));
                true
            }
        }
    }
}

/// The tree.
pub struct SglTree {
    nodes: Vec<Node>,
    /// (parent, first chunk of the child's text) -> child. Looked up, never iterated.
    child: FxHashMap<(u32, u64), u32>,
    /// Freed node slots, reused by later nodes.
    free: Vec<u32>,
    /// `tenant_char_count`, indexed by tenant.
    char_count: Vec<u64>,
}

impl Default for SglTree {
    fn default() -> Self {
        Self::new()
    }
}

impl SglTree {
    /// A tree with just the (empty) root.
    pub fn new() -> SglTree {
        SglTree {
            nodes: vec![Node {
                parent: NIL,
                units: Vec::new(),
                chars: 0,
                children: SmallVec::new(),
                tenants: SmallVec::new(),
            }],
            child: FxHashMap::default(),
            free: Vec::new(),
            char_count: Vec::new(),
        }
    }

    /// Characters stored for `tenant` (`tenant_char_count`; 0 for one never seen).
    pub fn char_count(&self, tenant: u16) -> u64 {
        self.char_count.get(usize::from(tenant)).copied().unwrap_or(0)
    }

    /// Number of live nodes, root included.
    pub fn live_nodes(&self) -> usize {
        self.nodes.len() - self.free.len()
    }

    /// True if `tenant` is on `node`.
    pub fn node_has(&self, node: u32, tenant: u16) -> bool {
        self.nodes[node as usize].has(tenant)
    }

    fn count_mut(&mut self, t: u16) -> &mut u64 {
        let i = usize::from(t);
        if self.char_count.len() <= i {
            self.char_count.resize(i + 1, 0);
        }
        &mut self.char_count[i]
    }

    fn alloc(&mut self, node: Node) -> u32 {
        match self.free.pop() {
            Some(id) => {
                self.nodes[id as usize] = node;
                id
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        }
    }

    /// Characters of units `from..to` of a text of `total` characters cut in `chunk`s.
    fn span_chars(from: usize, to: usize, chunk: u64, total: u64) -> u64 {
        (to as u64 * chunk).min(total) - (from as u64 * chunk).min(total)
    }

    /// `insert(text, tenant)` at time `ms`: `units` are the text's chunks of `chunk`
    /// characters (the last possibly partial), `total` its characters.
    pub fn insert(&mut self, units: &[u64], chunk: u64, total: u64, tenant: u16, ms: u64) {
        self.nodes[ROOT as usize].touch(tenant, ms);
        self.count_mut(tenant);
        let mut prev = ROOT;
        let mut idx = 0;
        while idx < units.len() {
            let curr = prev;
            match self.child.get(&(curr, units[idx])).copied() {
                None => {
                    let chars = Self::span_chars(idx, units.len(), chunk, total);
                    let mut tenants = SmallVec::new();
                    tenants.push((tenant, ms));
                    let id = self.alloc(Node {
                        parent: curr,
                        units: units[idx..].to_vec(),
                        chars,
                        children: SmallVec::new(),
                        tenants,
                    });
                    self.nodes[curr as usize].children.push(id);
                    self.child.insert((curr, units[idx]), id);
                    *self.count_mut(tenant) += chars;
                    prev = id;
                    idx = units.len();
                }
                Some(m) => {
                    let shared = common_prefix(&self.nodes[m as usize].units, &units[idx..]);
                    let m_len = self.nodes[m as usize].units.len();
                    if shared < m_len {
                        // Split: [curr] -> [new] -> [contracted m]. Only the last chunk of a
                        // text can be partial and it ends every path it is on, so the shared
                        // part is whole chunks.
                        let shared_chars = shared as u64 * chunk;
                        let (head, tail) = {
                            let mu = &self.nodes[m as usize].units;
                            (mu[..shared].to_vec(), mu[shared..].to_vec())
                        };
                        let tenants = self.nodes[m as usize].tenants.clone();
                        let mut children = SmallVec::new();
                        children.push(m);
                        let new = self.alloc(Node {
                            parent: curr,
                            units: head,
                            chars: shared_chars,
                            children,
                            tenants,
                        });
                        let c = &mut self.nodes[curr as usize].children;
                        let at = c.iter().position(|&x| x == m).expect("child listed");
                        c[at] = new;
                        self.child.insert((curr, units[idx]), new);
                        let first_tail = tail[0];
                        let mn = &mut self.nodes[m as usize];
                        mn.units = tail;
                        mn.chars -= shared_chars;
                        mn.parent = new;
                        self.child.insert((new, first_tail), m);
                        prev = new;
                    } else {
                        prev = m;
                    }
                    if self.nodes[prev as usize].touch(tenant, ms) {
                        let c = self.nodes[prev as usize].chars;
                        *self.count_mut(tenant) += c;
                    }
                    idx += shared;
                }
            }
        }
    }

    /// `prefix_match(text)` without the timestamp refresh: (matched chunks, deepest node
    /// reached, which is the partially matched node when the match ends inside one).
    pub fn prefix_match(&self, units: &[u64]) -> (usize, u32) {
        let mut prev = ROOT;
        let mut idx = 0;
        while idx < units.len() {
            let Some(m) = self.child.get(&(prev, units[idx])).copied() else {
                break;
            };
            let node_units = &self.nodes[m as usize].units;
            let shared = common_prefix(node_units, &units[idx..]);
            idx += shared;
            prev = m;
            if shared < node_units.len() {
                break;
            }
        }
        (idx, prev)
    }

    /// Tenants on `node`, in order of arrival.
    pub fn tenants(&self, node: u32) -> impl Iterator<Item = u16> + '_ {
        self.nodes[node as usize].tenants.iter().map(|e| e.0)
    }

    /// `prefix_match`'s refresh: `tenant`'s access time on `node` and every ancestor.
    pub fn refresh(&mut self, node: u32, tenant: u16, ms: u64) {
        let mut n = node;
        while n != NIL {
            // The tenant is on every ancestor of a node it is on (inserts cover the whole
            // path, evictions remove leaves first), so this never adds it anywhere.
            self.nodes[n as usize].touch(tenant, ms);
            n = self.nodes[n as usize].parent;
        }
    }

    fn is_leaf_for(&self, node: u32, t: u16) -> bool {
        let n = &self.nodes[node as usize];
        n.has(t) && !n.children.iter().any(|&c| self.nodes[c as usize].has(t))
    }

    /// `evict_tenant_by_size(max)`.
    pub fn evict_tenant_by_size(&mut self, max: u64) {
        let mut heap: BinaryHeap<Reverse<(u64, u16, u32)>> = BinaryHeap::new();
        let mut stack = vec![ROOT];
        while let Some(n) = stack.pop() {
            stack.extend(self.nodes[n as usize].children.iter().copied());
            for &(t, ms) in &self.nodes[n as usize].tenants {
                if self.is_leaf_for(n, t) {
                    heap.push(Reverse((ms, t, n)));
                }
            }
        }
        while let Some(Reverse((_, t, n))) = heap.pop() {
            if self.char_count(t) <= max {
                continue;
            }
            let node = &mut self.nodes[n as usize];
            if let Some(at) = node.tenants.iter().position(|e| e.0 == t) {
                node.tenants.remove(at);
                let c = node.chars;
                let count = self.count_mut(t);
                *count = count.saturating_sub(c);
            }
            let node = &self.nodes[n as usize];
            let parent = node.parent;
            if node.children.is_empty() && node.tenants.is_empty() && parent != NIL {
                let first = node.units[0];
                self.child.remove(&(parent, first));
                let c = &mut self.nodes[parent as usize].children;
                let at = c.iter().position(|&x| x == n).expect("child listed");
                c.remove(at);
                let dead = &mut self.nodes[n as usize];
                dead.units = Vec::new();
                dead.parent = NIL;
                self.free.push(n);
            }
            if parent != NIL && self.is_leaf_for(parent, t) {
                let ms = self.nodes[parent as usize].ts(t).expect("leaf carries the tenant");
                heap.push(Reverse((ms, t, parent)));
            }
        }
    }
}

fn common_prefix(a: &[u64], b: &[u64]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recomputes every tenant's characters from the nodes (upstream's
    /// `get_used_size_per_tenant`), to check the maintained counts.
    fn used(t: &SglTree, tenant: u16) -> u64 {
        let mut sum = 0;
        let mut stack = vec![ROOT];
        while let Some(n) = stack.pop() {
            let node = &t.nodes[n as usize];
            if node.has(tenant) {
                sum += node.chars;
            }
            stack.extend(node.children.iter().copied());
        }
        sum
    }

    #[test]
    fn counts_follow_inserts_and_splits() {
        // Chunks of 4 characters; text lengths in characters.
        let mut t = SglTree::new();
        t.insert(&[1, 2, 3], 4, 10, 0, 1); // 3 chunks, the last one 2 chars
        assert_eq!(t.char_count(0), 10);
        t.insert(&[1, 2, 7, 8], 4, 16, 1, 2); // splits [1,2,3] after 2 chunks
        assert_eq!((t.char_count(0), t.char_count(1)), (10, 16));
        assert_eq!((used(&t, 0), used(&t, 1)), (10, 16));
        assert_eq!(t.prefix_match(&[1, 2, 3]).0, 3);
        let (m, node) = t.prefix_match(&[1, 2, 9]);
        assert_eq!(m, 2);
        assert_eq!(
            t.tenants(node).collect::<Vec<_>>(),
            [0, 1],
            "the split node carries both"
        );
        // Same text again for tenant 0: nothing new.
        t.insert(&[1, 2, 3], 4, 10, 0, 3);
        assert_eq!(t.char_count(0), 10);
        // Tenant 0 joins tenant 1's branch.
        t.insert(&[1, 2, 7, 8], 4, 16, 0, 4);
        assert_eq!((t.char_count(0), used(&t, 0)), (18, 18));
    }

    #[test]
    fn eviction_pops_least_recent_leaves_until_at_or_below_the_limit() {
        let mut t = SglTree::new();
        // Tenant 0: an old text and a recent one sharing the first chunk.
        t.insert(&[1, 2, 3], 4, 12, 0, 10);
        t.insert(&[1, 5, 6], 4, 12, 0, 20);
        // Tenant 1: small, below any limit used here.
        t.insert(&[9], 4, 4, 1, 5);
        assert_eq!(t.char_count(0), 20); // [1] + [2,3] + [5,6]
        t.evict_tenant_by_size(12);
        // The least recently used leaf ([2,3], time 10) goes: 20 - 8 = 12 <= 12, stop.
        assert_eq!(t.char_count(0), 12);
        assert_eq!(t.prefix_match(&[1, 2, 3]).0, 1, "old branch gone");
        assert_eq!(t.prefix_match(&[1, 5, 6]).0, 3, "recent branch kept");
        assert_eq!(t.char_count(1), 4, "tenant at or below the limit untouched");
        assert_eq!(used(&t, 0), 12);
        // A limit of 0 strips the tenant entirely; nodes nobody carries are dropped.
        t.evict_tenant_by_size(0);
        assert_eq!((t.char_count(0), t.char_count(1)), (0, 0));
        assert_eq!(t.prefix_match(&[1, 5, 6]).0, 0);
        assert_eq!(t.live_nodes(), 1, "only the root is left");
        // Freed slots are reused.
        t.insert(&[4, 4], 4, 8, 2, 30);
        assert_eq!(t.live_nodes(), 2);
        assert_eq!(t.prefix_match(&[4, 4]).0, 2);
    }

    #[test]
    fn eviction_removes_one_tenant_and_keeps_the_node_for_the_other() {
        let mut t = SglTree::new();
        t.insert(&[1, 2], 4, 8, 0, 1);
        t.insert(&[1, 2], 4, 8, 1, 2);
        t.evict_tenant_by_size(4);
        // Both are at 8 > 4: each loses the shared node, which then has no tenant.
        assert_eq!((t.char_count(0), t.char_count(1)), (0, 0));
        assert_eq!(t.live_nodes(), 1);
        let mut t = SglTree::new();
        t.insert(&[1, 2], 4, 8, 0, 1);
        t.insert(&[1, 2], 4, 8, 1, 2);
        t.insert(&[3], 4, 4, 1, 3);
        t.evict_tenant_by_size(8);
        // Tenant 1 (12) loses its least recent leaf, the shared node; tenant 0 keeps it.
        assert_eq!((t.char_count(0), t.char_count(1)), (8, 4));
        let (m, node) = t.prefix_match(&[1, 2]);
        assert_eq!(m, 2);
        assert_eq!(t.tenants(node).collect::<Vec<_>>(), [0]);
    }
}
