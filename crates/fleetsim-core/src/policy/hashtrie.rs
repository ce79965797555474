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
//!
//! Walks may start from a session's memoised path (`PathMemo`) instead of the root: a
//! speed-up only, every answer is upstream's.

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use crate::ids::BackendId;

/// `HashTrie` chunk size in characters (hard-coded upstream; production-stack issue #957
/// asked for a flag).
pub const CHUNK_CHARS: u32 = 128;

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
    /// The chunk hash that leads here from the parent (root: 0). Kept in the child rather
    /// than as the parent's "first child's hash": a walk loads the child anyway, and a
    /// memoised path can then be checked against a prompt's chunks with independent loads.
    hash: u64,
    first_child: u32,
}

/// The trie.
pub struct HashTrie {
    /// Node 0 is the root.
    nodes: Vec<Node>,
    /// Endpoints 0..63 of each node (see [`bit`]), beside `nodes` rather than in them: a
    /// match reads only these, and a path's masks then share cache lines 8 to a line.
    low: Vec<u64>,
    /// (parent, chunk hash) -> child, for children after the first. Looked up only, never
    /// iterated.
    more: FxHashMap<(u32, u64), u32>,
    /// Endpoints 64 and up, per node (large fleets only). Looked up only, never iterated.
    high: FxHashMap<u32, Vec<BackendId>>,
    /// Scratch: nodes on the last walked path.
    path: Vec<u32>,
    /// Nodes (root excluded) that gained the endpoint in the last insert.
    last_added: usize,
    /// The latest path walked for each session (see [`PathMemo`]).
    memo: PathMemo,
}

/// Sessions' latest walked paths, so that a session's next prompt, which re-sends the
/// previous one, restarts its walk where that path ends instead of chasing one node per
/// chunk from the root (a dependent load each: the walk was a quarter of a long-session
/// run). Exact because the trie only grows: a child, once created, is never replaced or
/// removed, so the node a chunk prefix leads to never changes. Direct-mapped by session
/// hash, [`PathMemo::SLOTS`] sessions at most: a session mapped to a taken slot replaces
/// the holder, which only costs its next walk the chase. Never iterated.
#[derive(Default)]
struct PathMemo {
    slots: Vec<MemoPath>,
}

#[derive(Default)]
struct MemoPath {
    session: Option<u64>,
    /// `path[i]`: the node the walked chunks `..=i` led to (a walk that stopped at a
    /// missing child leaves a path shorter than its prompt).
    path: Vec<u32>,
}

impl PathMemo {
    const SLOTS: usize = 4096;

    fn slot(session: u64) -> usize {
        (session as usize) % Self::SLOTS
    }

    /// Nodes of `chunks`' path that `session`'s memoised walk already found: its path
    /// while each node is reached by the same chunk hash (node `path[i]` is then the node
    /// of `chunks[..=i]`, because `path[i - 1]` is that of `chunks[..i]`).
    fn known(&self, session: u64, chunks: &[u64], nodes: &[Node], out: &mut Vec<u32>) {
        let Some(m) = self.slots.get(Self::slot(session)) else {
            return;
        };
        if m.session != Some(session) {
            return;
        }
        let same = m
            .path
            .iter()
            .zip(chunks)
            .take_while(|&(&n, &h)| nodes[n as usize].hash == h)
            .count();
        out.extend_from_slice(&m.path[..same]);
    }

    fn remember(&mut self, session: u64, path: &[u32]) {
        if self.slots.is_empty() {
            self.slots.resize_with(Self::SLOTS, MemoPath::default);
        }
        let m = &mut self.slots[Self::slot(session)];
        m.session = Some(session);
        m.path.clear();
        m.path.extend_from_slice(path);
    }
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
                hash: 0,
                first_child: NIL,
            }],
            low: vec![0],
            more: FxHashMap::default(),
            high: FxHashMap::default(),
            path: Vec::new(),
            last_added: 0,
            memo: PathMemo::default(),
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
        let first = self.nodes[node as usize].first_child;
        if first == NIL {
            return None;
        }
        if self.nodes[first as usize].hash == h {
            return Some(first);
        }
        self.more.get(&(node, h)).copied()
    }

    fn new_child(&mut self, parent: u32, h: u64) -> u32 {
        let id = self.nodes.len() as u32;
        self.nodes.push(Node {
            hash: h,
            first_child: NIL,
        });
        self.low.push(0);
        let p = &mut self.nodes[parent as usize];
        if p.first_child == NIL {
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
                let n = &mut self.low[node as usize];
                let new = *n & m == 0;
                *n |= m;
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
            Some(m) => self.low[node as usize] & m != 0,
            None => self.high.get(&node).is_some_and(|h| h.contains(&b)),
        }
    }

    /// Nodes (root excluded) that gained the endpoint in the last insert: the characters
    /// the insert added to that endpoint's share of the tree, in chunks.
    pub fn last_insert_added(&self) -> usize {
        self.last_added
    }

    /// Records that `endpoint` served a prompt with these chunk hashes. `session` (a hash of
    /// the session's key, if known) only lets the walk start from that session's last path:
    /// it never changes a result.
    pub fn insert(&mut self, chunks: &[u64], endpoint: BackendId, session: Option<u64>) {
        self.walk(chunks, session);
        self.insert_walked(chunks, endpoint);
        self.remember(session);
    }

    /// Walks the existing path of `chunks` into `self.path`, from the end of the part
    /// `session`'s memoised path already covers.
    fn walk(&mut self, chunks: &[u64], session: Option<u64>) {
        let mut path = std::mem::take(&mut self.path);
        path.clear();
        if let Some(s) = session {
            self.memo.known(s, chunks, &self.nodes, &mut path);
        }
        let mut node = path.last().copied().unwrap_or(0);
        for &h in &chunks[path.len()..] {
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

    /// Keeps the last walked (and inserted) path as `session`'s.
    fn remember(&mut self, session: Option<u64>) {
        if let Some(s) = session {
            self.memo.remember(s, &self.path);
        }
    }

    /// Insert after [`HashTrie::walk`] on the same chunks: the existing path is reused and
    /// extended by the nodes created, so it is then the whole path of `chunks`.
    fn insert_walked(&mut self, chunks: &[u64], endpoint: BackendId) {
        self.add(0, endpoint);
        let mut path = std::mem::take(&mut self.path);
        let mut added = 0;
        for &n in &path {
            added += usize::from(self.add(n, endpoint));
        }
        let mut node = path.last().copied().unwrap_or(0);
        for &h in &chunks[path.len()..] {
            node = self.new_child(node, h);
            self.add(node, endpoint);
            path.push(node);
            added += 1;
        }
        self.last_added = added;
        self.path = path;
    }

    /// Longest matched prefix: `(matched chunks, endpoints sharing it)`, the endpoints in
    /// the order of `available`. `session` as in [`HashTrie::insert`].
    pub fn longest_prefix_match(
        &mut self,
        chunks: &[u64],
        available: &[BackendId],
        session: Option<u64>,
    ) -> (usize, Vec<BackendId>) {
        self.walk(chunks, session);
        let (matched, selected) = self.match_walked(available);
        self.remember(session);
        (matched, selected.into_vec())
    }

    /// The match of the walked path; the endpoints inline (no allocation per request on
    /// fleets of up to 32 endpoints).
    fn match_walked(&self, available: &[BackendId]) -> (usize, SmallVec<[BackendId; 32]>) {
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
            let l = low & self.low[n as usize];
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
        session: Option<u64>,
        choose: impl FnOnce(usize, &[BackendId]) -> (BackendId, T),
    ) -> T {
        self.walk(chunks, session);
        let (matched, selected) = self.match_walked(available);
        let (endpoint, out) = choose(matched, &selected);
        self.insert_walked(chunks, endpoint);
        self.remember(session);
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
        assert_eq!(t.longest_prefix_match(&[1, 2], &[A, B, C], None), (0, vec![A, B, C]));
    }

    #[test]
    fn large_fleets_match_like_small_ones() {
        // Backends beyond 64 use the spilled list; results keep `available` order.
        let (x, y, z) = (BackendId(70), BackendId(3), BackendId(100));
        let mut t = HashTrie::new();
        t.insert(&[1, 2, 3], x, None);
        t.insert(&[1, 2], y, None);
        t.insert(&[1, 9], z, None);
        assert_eq!(t.longest_prefix_match(&[1, 2, 3, 4], &[z, y, x], None), (3, vec![x]));
        assert_eq!(t.longest_prefix_match(&[1, 2, 7], &[z, x, y], None), (2, vec![x, y]));
        assert_eq!(t.longest_prefix_match(&[1], &[x, z, y], None), (1, vec![x, z, y]));
        assert_eq!(t.longest_prefix_match(&[1, 2, 3], &[z, y], None), (2, vec![y]));
        assert_eq!(t.longest_prefix_match(&[1, 9], &[y, z], None), (2, vec![z]));
    }

    #[test]
    fn a_match_wider_than_the_inline_set_keeps_every_endpoint_in_order() {
        // 40 matched endpoints: more than the 32 kept inline, some beyond the 64-bit mask.
        let all: Vec<BackendId> = (0..40)
            .map(|i| BackendId(if i % 2 == 0 { i } else { 100 + i }))
            .collect();
        let mut t = HashTrie::new();
        for &b in all.iter().rev() {
            t.insert(&[5, 6], b, None);
        }
        let mut chosen = None;
        let d = t.match_then_insert(&[5, 6, 7], &all, None, |chunks, matched| {
            chosen = Some((chunks, matched.to_vec()));
            (all[3], 0)
        });
        assert_eq!(d, 0);
        assert_eq!(chosen, Some((2, all.clone())));
        assert_eq!(t.longest_prefix_match(&[5, 6, 7], &all, None), (3, vec![all[3]]));
    }

    proptest::proptest! {
        /// Walks started from a session's memoised path give exactly what walks from the
        /// root give: sessions' prompts grow, shrink and diverge, sessions share prefixes
        /// and memo slots (keys 0 and 1024 collide), and some calls carry no session.
        #[test]
        fn memoised_walks_change_nothing(
            ops in proptest::collection::vec(
                (0u8..3, 0u8..4, 0usize..12, 0u64..3, 1usize..12, 0u8..4, 0u64..70),
                1..80,
            ),
        ) {
            let (mut memo, mut plain) = (HashTrie::new(), HashTrie::new());
            // Each session's latest prompt; the next one mostly extends it.
            let mut prompts: Vec<Vec<u64>> = vec![Vec::new(); 4];
            for (kind, s, keep, salt, grow, key_pick, ep) in ops {
                let p = &mut prompts[s as usize];
                p.truncate(keep.min(p.len()));
                // Shared first chunks (a system prompt), then the session's own.
                for i in p.len()..p.len() + grow {
                    p.push(if i < 2 { 7 + i as u64 } else { (u64::from(s) << 32) ^ (salt << 16) ^ i as u64 });
                }
                let session = [Some(u64::from(s)), Some(u64::from(s) * 1024), None, Some(5)][key_pick as usize];
                let available: Vec<BackendId> = (0..3).map(|i| BackendId(((ep + i) % 70) as u32)).collect();
                let b = BackendId(ep as u32);
                match kind {
                    0 => {
                        memo.insert(p, b, session);
                        plain.insert(p, b, None);
                        proptest::prop_assert_eq!(memo.last_insert_added(), plain.last_insert_added());
                    }
                    1 => proptest::prop_assert_eq!(
                        memo.longest_prefix_match(p, &available, session),
                        plain.longest_prefix_match(p, &available, None)
                    ),
                    _ => {
                        let pick = |_: usize, m: &[BackendId]| {
                            let e = m.first().copied().unwrap_or(b);
                            (e, e)
                        };
                        let got = memo.match_then_insert(p, &available, session, pick);
                        let want = plain.match_then_insert(p, &available, None, pick);
                        proptest::prop_assert_eq!(got, want);
                        proptest::prop_assert_eq!(memo.last_insert_added(), plain.last_insert_added());
                    }
                }
                proptest::prop_assert_eq!(memo.len(), plain.len());
            }
        }
    }

    #[test]
    fn a_session_walk_starts_at_its_memoised_path() {
        let mut t = HashTrie::new();
        t.insert(&[1, 2, 3], A, Some(9));
        assert_eq!(t.memo.slots[PathMemo::slot(9)].path, vec![1, 2, 3]);
        // Corrupt the memo: the next walk of session 9 follows it, so a use shows.
        t.memo.slots[PathMemo::slot(9)].path[1] = 0;
        let mut path = Vec::new();
        t.memo.known(9, &[1, 2, 4], &t.nodes, &mut path);
        assert_eq!(
            path,
            vec![1],
            "node 0 is not reached by chunk 2: the corrupt entry ends it"
        );
        t.memo.slots[PathMemo::slot(9)].path[1] = 2;
        path.clear();
        t.memo.known(9, &[1, 2, 4], &t.nodes, &mut path);
        assert_eq!(path, vec![1, 2], "two chunks in common");
        // Another session, or none, walks from the root.
        assert_eq!(t.longest_prefix_match(&[1, 2, 3], &[A, B], Some(10)), (3, vec![A]));
        assert_eq!(t.longest_prefix_match(&[1, 2, 3], &[A, B], None), (3, vec![A]));
    }

    #[test]
    fn longest_match_narrows_the_set() {
        let mut t = HashTrie::new();
        t.insert(&[1, 2, 3], A, None);
        t.insert(&[1, 2], B, None);
        t.insert(&[1, 9], C, None);
        assert_eq!(t.longest_prefix_match(&[1, 2, 3, 4], &[A, B, C], None), (3, vec![A]));
        assert_eq!(t.longest_prefix_match(&[1, 2, 7], &[A, B, C], None), (2, vec![A, B]));
        assert_eq!(t.longest_prefix_match(&[1], &[A, B, C], None), (1, vec![A, B, C]));
        // A unavailable: the match stops where no available endpoint holds the chunk.
        assert_eq!(t.longest_prefix_match(&[1, 2, 3], &[B, C], None), (2, vec![B]));
        assert_eq!(t.longest_prefix_match(&[5], &[A], None), (0, vec![A]));
        assert_eq!(t.len(), 5); // root, [1], [1,2], [1,2,3], [1,9]
    }
}
