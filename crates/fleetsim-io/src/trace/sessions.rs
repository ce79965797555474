//! Which requests of a trace belong to one session, and in what order.
//!
//! * `trace`: the trace's own session ids (native format); turns ordered by `turn`, then
//!   arrival.
//! * `infer`: for traces with prefix blocks but no session ids (Mooncake). A request whose
//!   block list *strictly extends* the complete blocks of an earlier request (sharing at
//!   least `min_shared_blocks`, within `max_gap_s`) is a later turn of that request's
//!   session. Complete blocks: `floor(input / block_tokens)` of them; a later turn re-hashes
//!   the earlier turn's partial last block, so only the complete ones can match. The longest
//!   matching prefix wins; among equal prefixes, the most recent request. Sessions are
//!   chains: the first request extending a parent continues its session; a further one
//!   (a *branch*, e.g. a regenerated answer) opens a session of its own, up to `max_fanout`
//!   extenders per parent, after which more are left unlinked. A request links only if its
//!   input is also at least `min_growth_tokens` (default 1) longer than its parent's: a
//!   sibling that re-sends the same context (a retry, a parallel sample) is not a later
//!   turn; such rejected links are counted (`rejected_no_growth`).
//! * `synthesize`: for traces without prefix data (Azure, BurstGPT). In arrival order, a
//!   request opens a new session with probability `1 / mean_turns` (or when none is open);
//!   otherwise it is the next turn of a session drawn uniformly from the `max_open` most
//!   recently opened ones. Seeded; turn `k + 1`'s prompt extends turn `k`'s context.
//! * `none`: every request is a one-turn session.

use rustc_hash::FxHashMap;

use super::model::{NO_SESSION, Trace, prefix_chain};
use fleetsim_core::rng::SimRng;

/// Session reconstruction settings.
#[derive(Clone, Debug, PartialEq)]
pub struct InferConfig {
    /// Fewest shared blocks that link two requests.
    pub min_shared_blocks: u32,
    /// Most later requests one request may be extended by.
    pub max_fanout: u32,
    /// Longest gap between a request and its extender, ns (`None`: any).
    pub max_gap_ns: Option<u64>,
    /// Fewest tokens a request's input must exceed its parent's by.
    pub min_growth_tokens: u32,
}

impl Default for InferConfig {
    fn default() -> Self {
        InferConfig {
            min_shared_blocks: 2,
            max_fanout: 8,
            max_gap_ns: None,
            min_growth_tokens: 1,
        }
    }
}

/// Session synthesis settings.
#[derive(Clone, Debug, PartialEq)]
pub struct SynthConfig {
    /// Mean turns per session (>= 1).
    pub mean_turns: f64,
    /// Sessions a request may continue: the most recently opened ones.
    pub max_open: u32,
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            mean_turns: 4.0,
            max_open: 64,
        }
    }
}

/// Sessions as lists of row indices (compressed: session `i` is
/// `order[starts[i]..starts[i + 1]]`), in order of their first request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sessions {
    /// Row indices grouped by session, turns in order.
    pub order: Vec<u32>,
    /// Start of each session in `order`, plus a final `order.len()`.
    pub starts: Vec<u32>,
}

impl Sessions {
    /// Number of sessions.
    pub fn len(&self) -> usize {
        self.starts.len().saturating_sub(1)
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rows of session `i`.
    pub fn session(&self, i: usize) -> &[u32] {
        &self.order[self.starts[i] as usize..self.starts[i + 1] as usize]
    }

    /// Builds from a session label per row (rows listed in arrival order).
    fn from_labels(rows_in_order: &[u32], label: &[u32], n_sessions: usize) -> Sessions {
        let mut count = vec![0u32; n_sessions + 1];
        for &r in rows_in_order {
            count[label[r as usize] as usize + 1] += 1;
        }
        for i in 1..count.len() {
            count[i] += count[i - 1];
        }
        let starts = count.clone();
        let mut order = vec![0u32; rows_in_order.len()];
        for &r in rows_in_order {
            let s = label[r as usize] as usize;
            order[count[s] as usize] = r;
            count[s] += 1;
        }
        Sessions { order, starts }
    }
}

/// What inference found.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct InferStats {
    /// Sessions.
    pub sessions: u64,
    /// Sessions of two or more turns (chains).
    pub chains: u64,
    /// Requests linked to an earlier one as a later turn.
    pub linked: u64,
    /// Requests extending an already-extended request (opened their own session).
    pub branches: u64,
    /// Requests left unlinked because their parent reached `max_fanout`.
    pub fanout_limited: u64,
    /// Requests not linked to a parent whose blocks they extend because their input did
    /// not grow by `min_growth_tokens` over it.
    pub rejected_no_growth: u64,
    /// Longest chain (turns).
    pub longest_chain: u64,
    /// Mean turns per session.
    pub mean_turns: f64,
}

impl InferStats {
    /// Session statistics of any grouping.
    pub fn of(s: &Sessions) -> InferStats {
        let n = s.len() as u64;
        let mut st = InferStats {
            sessions: n,
            ..InferStats::default()
        };
        for i in 0..s.len() {
            let l = s.session(i).len() as u64;
            if l >= 2 {
                st.chains += 1;
            }
            st.linked += l.saturating_sub(1);
            st.longest_chain = st.longest_chain.max(l);
        }
        st.mean_turns = if n == 0 { 0.0 } else { s.order.len() as f64 / n as f64 };
        st
    }
}

/// Every request on its own.
pub fn none(rows_in_order: &[u32]) -> Sessions {
    Sessions {
        order: rows_in_order.to_vec(),
        starts: (0..=rows_in_order.len() as u32).collect(),
    }
}

/// The trace's own session ids; rows without one are one-turn sessions.
pub fn from_ids(trace: &Trace, rows_in_order: &[u32]) -> Sessions {
    let mut label = vec![0u32; trace.rows.len()];
    let mut by_name: Vec<u32> = vec![u32::MAX; trace.session_names.len()];
    let mut n = 0u32;
    for &r in rows_in_order {
        let row = &trace.rows[r as usize];
        label[r as usize] = if row.session == NO_SESSION {
            n += 1;
            n - 1
        } else {
            let s = &mut by_name[row.session as usize];
            if *s == u32::MAX {
                *s = n;
                n += 1;
            }
            *s
        };
    }
    let mut s = Sessions::from_labels(rows_in_order, &label, n as usize);
    // Within a session: by written turn number, then arrival (a stable sort keeps it).
    for i in 0..s.len() {
        let (a, b) = (s.starts[i] as usize, s.starts[i + 1] as usize);
        s.order[a..b].sort_by_key(|&r| trace.rows[r as usize].turn);
    }
    s
}

/// Infers sessions from block-list extension (see the module doc).
pub fn infer(trace: &Trace, rows_in_order: &[u32], block_tokens: u32, cfg: &InferConfig) -> (Sessions, InferStats) {
    let n = trace.rows.len();
    let mut label = vec![u32::MAX; n];
    let mut children = vec![0u32; n];
    // Hash of a complete-block list -> the latest request whose complete blocks are exactly it.
    let mut by_prefix: FxHashMap<u64, u32> = FxHashMap::default();
    let mut prefix = Vec::new();
    let mut sessions = 0u32;
    let (mut branches, mut limited, mut no_growth) = (0u64, 0u64, 0u64);
    let min = cfg.min_shared_blocks.max(1) as usize;
    for &r in rows_in_order {
        let row = &trace.rows[r as usize];
        let blocks = row.blocks(&trace.blocks);
        prefix.clear();
        prefix.extend(prefix_chain(blocks));
        let mut parent = None;
        let mut hit_limit = false;
        let mut not_grown = false;
        // Longest proper prefix first.
        for k in (min..blocks.len()).rev() {
            let Some(&p) = by_prefix.get(&prefix[k - 1]) else {
                continue;
            };
            let pr = &trace.rows[p as usize];
            if cfg.max_gap_ns.is_some_and(|g| row.t_ns.saturating_sub(pr.t_ns) > g) {
                continue;
            }
            if u64::from(row.input) < u64::from(pr.input) + u64::from(cfg.min_growth_tokens) {
                not_grown = true;
                continue;
            }
            if children[p as usize] >= cfg.max_fanout {
                hit_limit = true;
                continue;
            }
            parent = Some(p);
            break;
        }
        if not_grown && parent.is_none() {
            no_growth += 1;
        }
        label[r as usize] = match parent {
            Some(p) => {
                children[p as usize] += 1;
                if children[p as usize] == 1 {
                    label[p as usize]
                } else {
                    branches += 1;
                    sessions += 1;
                    sessions - 1
                }
            }
            None => {
                if hit_limit {
                    limited += 1;
                }
                sessions += 1;
                sessions - 1
            }
        };
        let whole = (blocks.len()).min((row.input / block_tokens.max(1)) as usize);
        if whole >= min {
            by_prefix.insert(prefix[whole - 1], r);
        }
    }
    let s = Sessions::from_labels(rows_in_order, &label, sessions as usize);
    let mut st = InferStats::of(&s);
    st.branches = branches;
    st.fanout_limited = limited;
    st.rejected_no_growth = no_growth;
    (s, st)
}

/// Synthesises sessions (see the module doc).
pub fn synthesize(trace: &Trace, rows_in_order: &[u32], cfg: &SynthConfig, rng: &mut SimRng) -> Sessions {
    let mut label = vec![0u32; trace.rows.len()];
    let mut open: std::collections::VecDeque<u32> = std::collections::VecDeque::new();
    let mut n = 0u32;
    let p_new = 1.0 / cfg.mean_turns.max(1.0);
    for &r in rows_in_order {
        let u: f64 = rand::RngExt::random(rng);
        let s = if open.is_empty() || u < p_new {
            n += 1;
            open.push_back(n - 1);
            if open.len() > cfg.max_open.max(1) as usize {
                open.pop_front();
            }
            n - 1
        } else {
            open[fleetsim_core::dist::uniform_index(rng, open.len())]
        };
        label[r as usize] = s;
    }
    Sessions::from_labels(rows_in_order, &label, n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::model::Format;
    use crate::trace::reader::read_from;

    fn mooncake(rows: &[(u64, u32, &[u64])]) -> Trace {
        let text: String = rows
            .iter()
            .map(|(t, input, h)| {
                format!(
                    "{{\"timestamp\": {t}, \"input_length\": {input}, \"output_length\": 10, \"hash_ids\": {h:?}}}\n"
                )
            })
            .collect();
        read_from(text.as_bytes(), "m", Format::Mooncake, false).unwrap()
    }

    fn all(t: &Trace) -> Vec<u32> {
        (0..t.rows.len() as u32).collect()
    }

    #[test]
    fn infers_chains_from_complete_blocks() {
        // Row 0: blocks [0,1,2] with 1100 tokens: complete blocks [0,1] (the third is partial).
        // Row 1 re-hashes the partial block: [0,1,5,6] extends [0,1]: a later turn.
        // Row 2 shares only the system block [0]: a new session.
        // Row 3 extends row 1's complete blocks [0,1,5] (1600 tokens: 3 complete).
        let t = mooncake(&[
            (0, 1100, &[0, 1, 2]),
            (1000, 1800, &[0, 1, 5, 6]),
            (2000, 900, &[0, 9]),
            (3000, 2100, &[0, 1, 5, 6, 7]),
        ]);
        let (s, st) = infer(&t, &all(&t), 512, &InferConfig::default());
        assert_eq!(s.len(), 2);
        assert_eq!(s.session(0), &[0, 1, 3]);
        assert_eq!(s.session(1), &[2]);
        assert_eq!(st.chains, 1);
        assert_eq!(st.linked, 2);
        assert_eq!(st.longest_chain, 3);
        // With min_shared_blocks = 3 row 1 shares only 2: no links until row 3 (shares 4 with row 1).
        let cfg = InferConfig {
            min_shared_blocks: 3,
            ..InferConfig::default()
        };
        let (s, _) = infer(&t, &all(&t), 512, &cfg);
        assert_eq!(s.len(), 3);
        assert_eq!(s.session(1), &[1, 3]);
    }

    #[test]
    fn links_need_growth() {
        // Row 1 extends row 0's complete blocks but re-sends a shorter prompt: not a later
        // turn. Row 2 extends both (the most recent, row 1, wins) and grows: linked.
        let t = mooncake(&[(0, 1100, &[0, 1, 2]), (1, 1050, &[0, 1, 3]), (2, 1600, &[0, 1, 4, 5])]);
        let (s, st) = infer(&t, &all(&t), 512, &InferConfig::default());
        assert_eq!((s.session(0), s.session(1)), (&[0][..], &[1, 2][..]));
        assert_eq!(st.rejected_no_growth, 1);
        // Without the growth rule (min_growth_tokens = 0 still needs input >= parent's):
        // 1050 < 1100 stays unlinked; at 1100 it links.
        let t = mooncake(&[(0, 1100, &[0, 1, 2]), (1, 1100, &[0, 1, 3])]);
        let (s, st) = infer(&t, &all(&t), 512, &InferConfig::default());
        assert_eq!((s.len(), st.rejected_no_growth), (2, 1));
        let cfg = InferConfig {
            min_growth_tokens: 0,
            ..InferConfig::default()
        };
        let (s, st) = infer(&t, &all(&t), 512, &cfg);
        assert_eq!((s.len(), st.rejected_no_growth), (1, 0));
    }

    #[test]
    fn fanout_limit_and_branches() {
        // Four requests extend the same parent: the first continues, the next are branches
        // up to max_fanout = 2, the rest unlinked.
        let t = mooncake(&[
            (0, 1024, &[0, 1]),
            (1, 2000, &[0, 1, 2, 3]),
            (2, 2000, &[0, 1, 4, 5]),
            (3, 2000, &[0, 1, 6, 7]),
            (4, 2000, &[0, 1, 8, 9]),
        ]);
        let cfg = InferConfig {
            max_fanout: 2,
            ..InferConfig::default()
        };
        let (s, st) = infer(&t, &all(&t), 512, &cfg);
        assert_eq!(s.session(0), &[0, 1]);
        assert_eq!(s.len(), 4);
        assert_eq!(st.branches, 1);
        assert_eq!(st.fanout_limited, 2);
        // A gap limit unlinks everything 1 ms apart or more.
        let cfg = InferConfig {
            max_gap_ns: Some(500_000),
            ..InferConfig::default()
        };
        let (s, _) = infer(&t, &all(&t), 512, &cfg);
        assert_eq!(s.len(), 5);
    }

    #[test]
    fn synthesize_is_deterministic_and_near_mean() {
        let text: String = (0..4000).map(|i| format!("{i},5,5\n")).collect();
        let t = read_from(
            format!("arrival_s,input_tokens,output_tokens\n{text}").as_bytes(),
            "n",
            Format::Native,
            false,
        )
        .unwrap();
        let cfg = SynthConfig::default();
        let a = synthesize(&t, &all(&t), &cfg, &mut fleetsim_core::rng::stream(1, "x", 0));
        let b = synthesize(&t, &all(&t), &cfg, &mut fleetsim_core::rng::stream(1, "x", 0));
        assert_eq!(a, b);
        let mean = InferStats::of(&a).mean_turns;
        assert!((3.6..4.4).contains(&mean), "{mean}");
        let c = synthesize(&t, &all(&t), &cfg, &mut fleetsim_core::rng::stream(2, "x", 0));
        assert_ne!(a, c);
    }

    #[test]
    fn sessions_from_ids_order_turns() {
        let t = read_from(
            "arrival_s,session_id,turn,input_tokens,output_tokens\n0,a,1,5,5\n1,b,0,5,5\n2,a,0,5,5\n3,,,5,5\n"
                .as_bytes(),
            "n",
            Format::Native,
            false,
        )
        .unwrap();
        let s = from_ids(&t, &all(&t));
        assert_eq!(s.len(), 3);
        assert_eq!(s.session(0), &[2, 0]);
        assert_eq!(s.session(1), &[1]);
        assert_eq!(s.session(2), &[3]);
    }
}
