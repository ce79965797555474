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
use smallvec::SmallVec;

use crate::ids::BackendId;

type EndpointSet = SmallVec<[BackendId; 4]>;

const NIL: u32 = u32::MAX;

/// One trie node. Most nodes have a single child (a session's prompt is a chain), so the
/// first child is stored inline and only further children go to the shared map; nodes of
/// one chain are created consecutively, which keeps a walk cache-friendly.
struct Node {
    endpoints: EndpointSet,
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
                endpoints: EndpointSet::new(),
                first_hash: 0,
                first_child: NIL,
            }],
            more: FxHashMap::default(),
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
            endpoints: EndpointSet::new(),
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

    fn add(set: &mut EndpointSet, b: BackendId) -> bool {
        if set.contains(&b) {
            false
        } else {
            set.push(b);
            true
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
        Self::add(&mut self.nodes[0].endpoints, endpoint);
        let path = std::mem::take(&mut self.path);
        let mut added = 0;
        for &n in &path {
            added += usize::from(Self::add(&mut self.nodes[n as usize].endpoints, endpoint));
        }
        let mut node = path.last().copied().unwrap_or(0);
        for &h in &chunks[path.len()..] {
            node = self.new_child(node, h);
            self.nodes[node as usize].endpoints.push(endpoint);
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
        let mut selected: Vec<BackendId> = available.to_vec();
        let mut inter: Vec<BackendId> = Vec::with_capacity(available.len());
        let mut matched = 0;
        for &n in &self.path {
            let set = &self.nodes[n as usize].endpoints;
            inter.clear();
            inter.extend(selected.iter().copied().filter(|b| set.contains(b)));
            if inter.is_empty() {
                break;
            }
            std::mem::swap(&mut selected, &mut inter);
            matched += 1;
        }
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
