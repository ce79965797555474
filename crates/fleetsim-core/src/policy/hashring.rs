//! A consistent hash ring bit-compatible with `uhashring.HashRing()` defaults (the ring
//! production-stack's `SessionRouter` uses): per node, 160 virtual nodes (weight 1) at
//! `int(md5(f"{node}-{w}").hexdigest(), 16)`; a key maps to the first point strictly
//! greater than `int(md5(str(key)).hexdigest(), 16)` (`bisect_right`), wrapping to the
//! first point. A later node overwrites an earlier one on a (practically impossible)
//! point collision, as the Python dict does.

use md5::{Digest, Md5};

/// Virtual nodes per node (uhashring default `vnodes=160`, weight 1).
pub const VNODES: u32 = 160;

/// The ring over node indices.
#[derive(Clone, Debug, Default)]
pub struct HashRing {
    /// Sorted (point, node index).
    points: Vec<(u128, usize)>,
}

/// `int(md5(s).hexdigest(), 16)`: the digest read as a big-endian integer.
pub fn md5_int(s: &str) -> u128 {
    let d = Md5::digest(s.as_bytes());
    u128::from_be_bytes(d.into())
}

impl HashRing {
    /// A ring over `nodes` (by name); node `i` of the slice is reported as `i`.
    pub fn new<S: AsRef<str>>(nodes: &[S]) -> HashRing {
        let mut map = std::collections::BTreeMap::new();
        for (i, n) in nodes.iter().enumerate() {
            for w in 0..VNODES {
                map.insert(md5_int(&format!("{}-{w}", n.as_ref())), i);
            }
        }
        HashRing {
            points: map.into_iter().collect(),
        }
    }

    /// The node owning `key`, or `None` on an empty ring.
    pub fn get(&self, key: &str) -> Option<usize> {
        if self.points.is_empty() {
            return None;
        }
        let h = md5_int(key);
        let p = self.points.partition_point(|(pt, _)| *pt <= h);
        let p = if p == self.points.len() { 0 } else { p };
        Some(self.points[p].1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Golden values from Python `uhashring` 2.x (`HashRing(nodes=...)`, `get_node`).
    #[test]
    fn matches_uhashring() {
        let three = [
            "http://backend-0:8000",
            "http://backend-1:8000",
            "http://backend-2:8000",
        ];
        let r = HashRing::new(&three);
        let expect3 = [
            ("session-0", 2),
            ("session-1", 2),
            ("session-2", 2),
            ("session-3", 2),
            ("agents-0", 2),
            ("agents-1", 1),
            ("agents-7", 0),
            ("chat-0", 1),
            ("x", 2),
        ];
        for (k, n) in expect3 {
            assert_eq!(r.get(k), Some(n), "key {k}");
        }
        let r2 = HashRing::new(&three[..2]);
        let expect2 = [
            ("session-0", 0),
            ("session-1", 1),
            ("session-2", 1),
            ("session-3", 0),
            ("agents-0", 0),
            ("agents-1", 1),
            ("agents-7", 0),
            ("chat-0", 1),
            ("x", 0),
        ];
        for (k, n) in expect2 {
            assert_eq!(r2.get(k), Some(n), "key {k}");
        }
        // Distribution of agents-0..999 over three nodes, from uhashring: 338 / 324 / 338.
        let mut c = [0; 3];
        for i in 0..1000 {
            c[r.get(&format!("agents-{i}")).unwrap()] += 1;
        }
        assert_eq!(c, [338, 324, 338]);
    }

    #[test]
    fn empty_ring() {
        assert_eq!(HashRing::new::<&str>(&[]).get("a"), None);
    }
}
