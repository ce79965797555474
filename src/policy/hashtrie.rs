//! production-stack's `prefix/hashtrie.py`: a trie over per-chunk hashes of the prompt.
//!
//! * `insert(prompt, url)`: add the endpoint to the root, then walk/create the child of each
//!   chunk hash, adding the endpoint to every node on the path. No eviction, no TTL, no
//!   removal: the trie grows forever and dead endpoints are masked only by intersecting
//!   with the available set.
//! * `longest_prefix_match(prompt, available)`: start with `selected = available`; for each
//!   chunk descend; stop at a missing child or an empty intersection with `selected`;
//!   otherwise narrow `selected` and count one chunk. The root's own set is never consulted,
//!   so with no match at all the answer is *all* available endpoints.

use rustc_hash::FxHashMap;

use crate::ids::BackendId;

/// Endpoints of a node: backends 0..63 are bits of the node's mask (one AND per node when
/// matching); any others (fleets of more than 64) are listed in [`HashTrie::high`]. Sets are
/// only tested for membership, never iterated, so nothing depends on their internal order.
#[inline]
fn bit(b: BackendId) -> Option<u64> {
    (b.0 < 64).then(|| 1u64 << b.0)
}

const NIL: u32 = u32::MAX;

/// One trie node. Most nodes have a single child (a session's prompt is a chain), so the
/// first child is stored inline and only further children go to the shared map; nodes of
/// one chain are created consecutively, which keeps a walk cache-friendly.
struct Node {
    /// Endpoints 0..63 (see [`bit`]).
    low: u64,
    first_hash: u64,
    first_child: u32,
}

/// The trie.
pub struct HashTrie {
    /// Node 0 is the root.
    nodes: Vec<Node>,
    /// (parent, chunk hash) -> child, for children after the first. Looked up only, never
    /// iterated.
    more: FxHashMap<(u32, u64), u32>,
    /// Endpoints 64 and up, per node (large fleets only). Looked up only, never iterated.
    high: FxHashMap<u32, Vec<BackendId>>,
    /// Scratch: nodes on the last walked path.
    path: Vec<u32>,
    /// Nodes (root excluded) that gained the endpoint in the last insert.
    last_added: usize,
}

impl Default for HashTrie {
    fn default() -> Self {
        Self::new()
    }
}

impl HashTrie {
    /// An empty trie (just the root).
    pub fn new() -> HashTrie {
        HashTrie {
            nodes: vec![Node {
                low: 0,
                first_hash: 0,
                first_child: NIL,
            }],
            more: FxHashMap::default(),
            high: FxHashMap::default(),
            path: Vec::new(),
            last_added: 0,
        }
    }

    /// Number of nodes, root included.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True if only the root exists.
    pub fn is_empty(&self) -> bool {
        self.nodes.len() == 1
    }

    #[inline]
    fn child(&self, node: u32, h: u64) -> Option<u32> {
        let n = &self.nodes[node as usize];
        if n.first_child != NIL && n.first_hash == h {
            return Some(n.first_child);
        }
        if n.first_child == NIL {
            return None;
        }
        self.more.get(&(node, h)).copied()
    }

    fn new_child(&mut self, parent: u32, h: u64) -> u32 {
        let id = self.nodes.len() as u32;
        self.nodes.push(Node {
            low: 0,
            first_hash: 0,
            first_child: NIL,
        });
        let p = &mut self.nodes[parent as usize];
        if p.first_child == NIL {
            p.first_hash = h;
            p.first_child = id;
        } else {
            self.more.insert((parent, h), id);
        }
        id
    }

    /// Adds endpoint `b` to `node`; true if it was not there.
    #[inline]
    fn add(&mut self, node: u32, b: BackendId) -> bool {
        match bit(b) {
            Some(m) => {
                let n = &mut self.nodes[node as usize];
                let new = n.low & m == 0;
                n.low |= m;
                new
            }
            None => {
                let h = self.high.entry(node).or_default();
                let new = !h.contains(&b);
                if new {
                    h.push(b);
                }
                new
            }
        }
    }

    /// True if `node` holds endpoint `b`.
    #[inline]
    fn holds(&self, node: u32, b: BackendId) -> bool {
        match bit(b) {
            Some(m) => self.nodes[node as usize].low & m != 0,
            None => self.high.get(&node).is_some_and(|h| h.contains(&b)),
        }
    }

    /// Nodes (root excluded) that gained the endpoint in the last insert: the characters
    /// the insert added to that endpoint's share of the tree, in chunks.
    pub fn last_insert_added(&self) -> usize {
        self.last_added
    }

    /// Records that `endpoint` served a prompt with these chunk hashes.
    pub fn insert(&mut self, chunks: &[u64], endpoint: BackendId) {
        self.walk(chunks);
        self.insert_walked(chunks, endpoint);
    }

    /// Walks the existing path of `chunks` into `self.path`.
    fn walk(&mut self, chunks: &[u64]) {
        let mut path = std::mem::take(&mut self.path);
        path.clear();
        let mut node = 0u32;
        for &h in chunks {
            match self.child(node, h) {
                Some(c) => {
                    path.push(c);
                    node = c;
                }
                None => break,
            }
        }
        self.path = path;
    }

    /// Insert after [`HashTrie::walk`] on the same chunks: the existing path is reused.
    fn insert_walked(&mut self, chunks: &[u64], endpoint: BackendId) {
        self.add(0, endpoint);
        let path = std::mem::take(&mut self.path);
        let mut added = 0;
        for &n in &path {
            added += usize::from(self.add(n, endpoint));
        }
        let mut node = path.last().copied().unwrap_or(0);
        for &h in &chunks[path.len()..] {
            node = self.new_child(node, h);
            self.add(node, endpoint);
            added += 1;
        }
        self.last_added = added;
        self.path = path;
    }

    /// Longest matched prefix: `(matched chunks, endpoints sharing it)`, the endpoints in
    /// the order of `available`.
    pub fn longest_prefix_match(&mut self, chunks: &[u64], available: &[BackendId]) -> (usize, Vec<BackendId>) {
        self.walk(chunks);
        self.match_walked(available)
    }

    fn match_walked(&self, available: &[BackendId]) -> (usize, Vec<BackendId>) {
        // `selected` starts as `available` and is narrowed node by node; it is kept as a
        // mask (backends below 64) plus a list of the others in `available` order, and
        // turned back into a list in `available` order at the end.
        let mut low = 0u64;
        let mut high: Vec<BackendId> = Vec::new();
        for &b in available {
            match bit(b) {
                Some(m) => low |= m,
                None => high.push(b),
            }
        }
        let mut matched = 0;
        for &n in &self.path {
            let l = low & self.nodes[n as usize].low;
            let keeps_high = !high.is_empty() && high.iter().any(|&b| self.holds(n, b));
            if l == 0 && !keeps_high {
                break;
            }
            low = l;
            if !high.is_empty() {
                high.retain(|&b| self.holds(n, b));
            }
            matched += 1;
        }
        let selected = available
            .iter()
            .copied()
            .filter(|&b| {
                if b.0 < 64 {
                    low & (1 << b.0) != 0
                } else {
                    high.contains(&b)
                }
            })
            .collect();
        (matched, selected)
    }

    /// `longest_prefix_match`, then `insert` of whatever `choose` picks, with one walk:
    /// the result is the same as upstream's two separate calls.
    pub fn match_then_insert<T>(
        &mut self,
        chunks: &[u64],
        available: &[BackendId],
        choose: impl FnOnce(usize, &[BackendId]) -> (BackendId, T),
    ) -> T {
        self.walk(chunks);
        let (matched, selected) = self.match_walked(available);
        let (endpoint, out) = choose(matched, &selected);
        self.insert_walked(chunks, endpoint);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: BackendId = BackendId(0);
    const B: BackendId = BackendId(1);
    const C: BackendId = BackendId(2);

    #[test]
    fn no_match_returns_all_available() {
        let mut t = HashTrie::new();
        assert_eq!(t.longest_prefix_match(&[1, 2], &[A, B, C]), (0, vec![A, B, C]));
    }

    #[test]
    fn large_fleets_match_like_small_ones() {
        // Backends beyond 64 use the spilled list; results keep `available` order.
        let (x, y, z) = (BackendId(70), BackendId(3), BackendId(100));
        let mut t = HashTrie::new();
        t.insert(&[1, 2, 3], x);
        t.insert(&[1, 2], y);
        t.insert(&[1, 9], z);
        assert_eq!(t.longest_prefix_match(&[1, 2, 3, 4], &[z, y, x]), (3, vec![x]));
        assert_eq!(t.longest_prefix_match(&[1, 2, 7], &[z, x, y]), (2, vec![x, y]));
        assert_eq!(t.longest_prefix_match(&[1], &[x, z, y]), (1, vec![x, z, y]));
        assert_eq!(t.longest_prefix_match(&[1, 2, 3], &[z, y]), (2, vec![y]));
        assert_eq!(t.longest_prefix_match(&[1, 9], &[y, z]), (2, vec![z]));
    }

    #[test]
    fn longest_match_narrows_the_set() {
        let mut t = HashTrie::new();
        t.insert(&[1, 2, 3], A);
        t.insert(&[1, 2], B);
        t.insert(&[1, 9], C);
        assert_eq!(t.longest_prefix_match(&[1, 2, 3, 4], &[A, B, C]), (3, vec![A]));
        assert_eq!(t.longest_prefix_match(&[1, 2, 7], &[A, B, C]), (2, vec![A, B]));
        assert_eq!(t.longest_prefix_match(&[1], &[A, B, C]), (1, vec![A, B, C]));
        // A unavailable: the match stops where no available endpoint holds the chunk.
        assert_eq!(t.longest_prefix_match(&[1, 2, 3], &[B, C]), (2, vec![B]));
        assert_eq!(t.longest_prefix_match(&[5], &[A]), (0, vec![A]));
        assert_eq!(t.len(), 5); // root, [1], [1,2], [1,2,3], [1,9]
    }
}
