//! AIBrix gateway `prefix-cache-preble` (Preble-style prefix + load routing), as upstream
//! implements it:
//!
//! * `pkg/plugins/gateway/algorithms/prefix_cache_preble.go` (vllm-project/aibrix, read at
//!   `0338af7d` and `6ae9628b`, and at zhangjyr/aibrix `c05557c2` / `f8bf0ee0`, which carry
//!   the `readyPodsByName` / `PostRouteUpdate` refactor PR #2382 patches);
//! * the radix tree `pkg/utils/prefixcacheindexer/tree.go` (`LPRadixCache`, read at
//!   `c679e611` and `073f657f`);
//! * the load gate of PR #2382 (vllm-project/aibrix, merged as `f8a74b09`; its diff was not
//!   available, its description and review thread were), reusing
//!   `getTargetPodListOnLoadImbalance` from `prefix_cache.go`.
//!
//! Per request, at time `now`:
//!
//! 1. **Background loop** (`evictionLoop`, every `eviction_loop_interval_s` = 1 s from router
//!    start): tree nodes not accessed for more than `node_ttl_s` (hard-coded 5 min upstream)
//!    are evicted with their subtrees, *and the evicted nodes' pods are deleted from every
//!    ancestor up to the root* (`evictNode`); their histogram entries are dropped; then
//!    histogram entries older than `histogram_window_s` (3 min) expire. Run lazily here: the
//!    last tick due by `now` runs before the decision (nothing changes between two decisions,
//!    so this equals running every tick on time).
//! 2. **Tree insert first** (`AddPrefix(tokens, model, "")`): the whole prompt goes into the
//!    shared radix tree (no pod yet), splitting nodes where it diverges (the new prefix node
//!    copies the split node's pods); `matched` = tokens that were already in the tree, from
//!    *any* prompt, whatever pods hold them; every node on the path is touched.
//! 3. **Load gate (PR #2382)**: if `max - min` of the gateway's realtime running requests
//!    (`RealtimeNumRequestsRunning`, router-local in-flight, missing = 0) over ready pods is
//!    `> imbalance_abs_count` (8, env `AIBRIX_PREFIX_CACHE_POD_RUNNING_REQUEST_IMBALANCE_ABS_COUNT`),
//!    the candidates are only the pods at the minimum; the prefix and cost steps below see
//!    only those.
//! 4. **Prefix step**: if `matched / tokens > match_ratio_threshold` (0.5, hard-coded
//!    upstream): walk from the request's node to the root; on the deepest node listing a
//!    candidate pod, pick the candidate with the least *histogram load*. Histogram load of a
//!    pod = the number of requests routed in the last `histogram_window_s` whose prompt ends
//!    on a tree node that currently lists the pod (`getPodLoad` sums `nodeToCount` over such
//!    nodes). It is routing history, not in-flight work: a request that finished long ago
//!    still counts for 3 minutes, and a node that later gained another pod counts for both.
//! 5. **Cost step** (no candidate on the path, or ratio not above the threshold): the
//!    candidate with the least Preble cost, strict `<` in list order. Cost of a pod =
//!    Σ over windowed nodes listing it of `prefill + decode`, where
//!    `prefill = miss_rate x requests x prefill_time / models` with `miss_rate = 1 - hit/prompt`
//!    tokens accumulated per node (`hit += context - node tokens` per request),
//!    `prefill_time = (linear(n) + attention(1, context, n) + quad(n)) / 0.9` from the
//!    Mistral-7B analytic model of the target GPU (`AIBRIX_ROUTER_PREBLE_TARGET_GPU`,
//!    default V100; A6000 also known), `n` = the node's own tokens, `context` = tokens from
//!    the root through the node, `models` = 1 here; and
//!    `decode = decoding_length x time_per_token` per node (not per request): the output
//!    length is never known to the gateway, upstream uses the constant
//!    `AIBRIX_ROUTER_PREBLE_DECODING_LENGTH` = 45 tokens, and the per-pod time-per-token
//!    median falls back to 0.15 because nothing ever records a measurement
//!    (`avgTimePerTokenPerPod` has no writer).
//! 6. **After the pick** (`PostRouteUpdate`): the pod is added to every node from the
//!    request's node to the root; the histogram records (now, node) with the node's context
//!    length and its current own tokens.
//!
//! Signals: only gateway-local state (in-flight counts, the tree, the routing history); no
//! engine metric is read, so nothing is stale, but the "load" of steps 4–5 is history.
//!
//! Divergences, stated:
//! * Tokens: upstream tokenizes the request text (for chat, the JSON of the `messages`
//!   array) with tiktoken `cl100k_base`; here the tree's unit is a chunk of
//!   `tree_chunk_chars` characters of the simulated prompt, by default
//!   `router.chars_per_token`, i.e. one simulated token, so shared prefixes have the same
//!   structure and lengths count prompt tokens (without the JSON syntax).
//! * Go map iteration order (the pods of a node, the gated pod list) is randomised upstream:
//!   ties on the prefix step are broken uniformly at random, and on the cost step under the
//!   gate too; without the gate, cost ties go to the first in discovery order, as upstream
//!   (`tie = "first"`, the default; `tie = "random"` makes them uniform, a what-if).
//! * Evicting a subtree removes the union of its pods from the surviving ancestors (the
//!   outcome of upstream's map-ordered loop when descendants are visited first).
//! * `updatePodSet` (ready-pod set changes) is not modelled: a pod that leaves the fleet
//!   (`[[fleet_events]]`) keeps its tree entries, but only listed endpoints are candidates.
//! * PR #2382's diff was not available: the gate is taken to narrow the candidate list after
//!   the tree insert and before `readyPodsByName`, as its description and review excerpt say.
//!   Later upstream work (PR #2365) moves a relative gate into the gateway for every
//!   strategy; that is not modelled.

use std::collections::{BTreeMap, VecDeque};

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use super::kind::{Doc, Fleet, PolicyKind, Upstream, param};
use super::leastrequest::local_loads;
use super::params::{ParamError, count, non_negative, secs, tie_first, tie_suffix_first, unit};
use super::{Branch, Decision, RequestInfo, RouterView, RoutingPolicy};
use crate::dist::uniform_index;
use crate::rng::SimRng;
use crate::time::{SimDuration, SimTime};

/// The GPU of upstream's analytic prefill model (`AIBRIX_ROUTER_PREBLE_TARGET_GPU`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetGpu {
    /// Default (also upstream's fallback for unknown values).
    V100,
    /// The model the V100 one was scaled from.
    A6000,
}

impl TargetGpu {
    /// Name as written in scenarios (and in the env var upstream).
    pub fn as_str(self) -> &'static str {
        match self {
            TargetGpu::V100 => "V100",
            TargetGpu::A6000 => "A6000",
        }
    }
}

/// Parameters (upstream defaults in [`AibrixPrebleParams::default`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AibrixPrebleParams {
    /// `AIBRIX_PREFIX_CACHE_POD_RUNNING_REQUEST_IMBALANCE_ABS_COUNT` (PR #2382 gate).
    pub imbalance_abs_count: u64,
    /// `prefixRoutingThreshold` (hard-coded 0.5).
    pub match_ratio_threshold: f64,
    /// `AIBRIX_ROUTER_PREBLE_TARGET_GPU`.
    pub target_gpu: TargetGpu,
    /// `AIBRIX_ROUTER_PREBLE_DECODING_LENGTH`, tokens.
    pub decoding_length_tokens: u32,
    /// The time-per-token default of `getNodeCost` (never replaced by a measurement).
    pub time_per_token_s: f64,
    /// `AIBRIX_ROUTER_PREBLE_SLIDING_WINDOW_PERIOD`.
    pub histogram_window: SimDuration,
    /// `AIBRIX_ROUTER_PREBLE_EVICTION_LOOP_INTERVAL`.
    pub eviction_loop_interval: SimDuration,
    /// `evictionDuration` of the tree (hard-coded 5 min).
    pub node_ttl: SimDuration,
    /// Characters per tree unit (default: `router.chars_per_token`, one token).
    pub tree_chunk_chars: u32,
    /// Ties of the ungated cost step (upstream: first in discovery order).
    pub tie: super::leastrequest::Tie,
}

impl Default for AibrixPrebleParams {
    fn default() -> Self {
        AibrixPrebleParams {
            imbalance_abs_count: 8,
            match_ratio_threshold: 0.5,
            target_gpu: TargetGpu::V100,
            decoding_length_tokens: 45,
            time_per_token_s: 0.15,
            histogram_window: SimDuration(180_000_000_000),
            eviction_loop_interval: SimDuration(1_000_000_000),
            node_ttl: SimDuration(300_000_000_000),
            tree_chunk_chars: 4,
            tie: super::leastrequest::Tie::First,
        }
    }
}

// ---------------------------------------------------------------------------------------
// The analytic prefill model (Mistral-7B; seconds).
// ---------------------------------------------------------------------------------------

/// `mistral7B{A6000,V100}LinearTime(numBatchedTokens)`.
fn linear_time(gpu: TargetGpu, n: i64) -> f64 {
    let x = n as f64;
    let ms = match gpu {
        TargetGpu::A6000 if n >= 384 => 0.10842571 * x + 4.209777054806409,
        TargetGpu::A6000 if n >= 192 => -118.0 + 1.25 * x - 2.56e-3 * (x * x),
        TargetGpu::A6000 => 22.0,
        TargetGpu::V100 if n >= 384 => 0.27106428 * x + 10.52444263,
        TargetGpu::V100 if n >= 192 => -295.0 + 3.125 * x - 6.4e-3 * (x * x),
        TargetGpu::V100 => 55.0,
    };
    ms / 1000.0
}

/// `mistral7B{A6000,V100}AttentionTime(numReqs, totalContext, numUniqueKV)`.
fn attention_time(gpu: TargetGpu, reqs: i64, context: i64, unique_kv: i64) -> f64 {
    let unique_kv = if unique_kv == 0 { context } else { unique_kv };
    let (short, slope, base) = match gpu {
        TargetGpu::A6000 => (0.32, 1.86e-4, 0.159),
        TargetGpu::V100 => (0.80, 4.65e-4, 0.398),
    };
    let ms = if context <= 1024 {
        short
    } else {
        let mut t = slope * context as f64 + base;
        if unique_kv as f64 / reqs as f64 <= 1024.0 && reqs * unique_kv <= 32 * 256 * 2048 {
            t /= 2.0;
        }
        t
    };
    ms / 1000.0
}

/// `calculateAttnQuad{A6000,V100}(numTokens, nil)`.
fn attn_quad(gpu: TargetGpu, n: i64) -> f64 {
    if n < 4096 {
        return 0.0;
    }
    let x = n as f64;
    let ms = match gpu {
        TargetGpu::A6000 => -7.37 + 3.86e-3 * x + 2.16e-6 * (x * x),
        TargetGpu::V100 => -18.425 + 9.65e-3 * x + 5.4e-6 * (x * x),
    };
    ms / 1000.0
}

/// `(baseTime + attnQuad) / 0.9` for a node of `n` own tokens at `context` tokens.
pub fn prefill_time(gpu: TargetGpu, n: i64, context: i64) -> f64 {
    (linear_time(gpu, n) + attention_time(gpu, 1, context, n) + attn_quad(gpu, n)) / 0.9
}

// ---------------------------------------------------------------------------------------
// LPRadixCache
// ---------------------------------------------------------------------------------------

const NIL: u32 = u32::MAX;
const ROOT: u32 = 0;

struct PNode {
    parent: u32,
    /// The node's key (tree units).
    key: Vec<u64>,
    /// Characters of the key.
    chars: u64,
    /// Characters from the root through this node (`contextLength`).
    ctx_chars: u64,
    children: SmallVec<[u32; 2]>,
    /// `modelToPods` of the one model: pods (backend indices), in order of arrival.
    pods: SmallVec<[u16; 4]>,
    last_access: SimTime,
    alive: bool,
}

/// The tree. Node ids are never reused (the histogram is keyed by them, as upstream keys it
/// by node pointer).
struct LpRadix {
    nodes: Vec<PNode>,
    /// (parent, first unit of the child's key) -> child. Looked up, never iterated.
    child: FxHashMap<(u32, u64), u32>,
    /// A lower bound on the last access of every live non-root node.
    oldest: SimTime,
}

impl LpRadix {
    fn new() -> LpRadix {
        LpRadix {
            nodes: vec![PNode {
                parent: NIL,
                key: Vec::new(),
                chars: 0,
                ctx_chars: 0,
                children: SmallVec::new(),
                pods: SmallVec::new(),
                last_access: SimTime::ZERO,
                alive: true,
            }],
            child: FxHashMap::default(),
            oldest: SimTime::ZERO,
        }
    }

    fn push(&mut self, node: PNode) -> u32 {
        self.nodes.push(node);
        (self.nodes.len() - 1) as u32
    }

    /// `AddPrefix(tokens, model, "")` (`insertHelper`): returns (the node the prompt ends
    /// on, units that were already in the tree).
    fn insert(&mut self, units: &[u64], chunk: u64, total: u64, now: SimTime) -> (u32, usize) {
        let mut node = ROOT;
        let mut idx = 0;
        self.nodes[ROOT as usize].last_access = now;
        loop {
            if idx == units.len() {
                return (node, idx);
            }
            let Some(c) = self.child.get(&(node, units[idx])).copied() else {
                let chars = total.min(units.len() as u64 * chunk) - (idx as u64 * chunk).min(total);
                let ctx = self.nodes[node as usize].ctx_chars + chars;
                let id = self.push(PNode {
                    parent: node,
                    key: units[idx..].to_vec(),
                    chars,
                    ctx_chars: ctx,
                    children: SmallVec::new(),
                    pods: SmallVec::new(),
                    last_access: now,
                    alive: true,
                });
                self.nodes[node as usize].children.push(id);
                self.child.insert((node, units[idx]), id);
                return (id, idx);
            };
            let l = common_prefix(&self.nodes[c as usize].key, &units[idx..]);
            if l == self.nodes[c as usize].key.len() {
                self.nodes[c as usize].last_access = now;
                node = c;
            } else {
                node = self.split(node, c, l, chunk, now);
            }
            idx += l;
        }
    }

    /// `splitNode`: `[parent] -> [c]` becomes `[parent] -> [new: c.key[..l]] -> [c.key[l..]]`;
    /// the new node copies `c`'s pods. The shared part is whole units (only a prompt's last
    /// unit can be partial, and it ends every path it is on).
    fn split(&mut self, parent: u32, c: u32, l: usize, chunk: u64, now: SimTime) -> u32 {
        let head_chars = l as u64 * chunk;
        let (head, tail) = {
            let k = &self.nodes[c as usize].key;
            (k[..l].to_vec(), k[l..].to_vec())
        };
        let first = head[0];
        let mut children = SmallVec::new();
        children.push(c);
        let pods = self.nodes[c as usize].pods.clone();
        let ctx = self.nodes[parent as usize].ctx_chars + head_chars;
        let new = self.push(PNode {
            parent,
            key: head,
            chars: head_chars,
            ctx_chars: ctx,
            children,
            pods,
            last_access: now,
            alive: true,
        });
        let ch = &mut self.nodes[parent as usize].children;
        let at = ch.iter().position(|&x| x == c).expect("child listed");
        ch[at] = new;
        self.child.insert((parent, first), new);
        self.child.insert((new, tail[0]), c);
        let cn = &mut self.nodes[c as usize];
        cn.key = tail;
        cn.chars -= head_chars;
        cn.parent = new;
        new
    }

    /// `AddOrUpdatePodForModel` from `node` to the root.
    fn add_pod(&mut self, node: u32, pod: u16) {
        let mut n = node;
        while n != NIL {
            let pods = &mut self.nodes[n as usize].pods;
            if !pods.contains(&pod) {
                pods.push(pod);
            }
            n = self.nodes[n as usize].parent;
        }
    }

    /// `Evict(now)`: every non-root node idle for more than `ttl`, with its subtree. Returns
    /// the evicted node ids.
    fn evict(&mut self, now: SimTime, ttl: SimDuration) -> Vec<u32> {
        if now.0.saturating_sub(self.oldest.0) <= ttl.0 {
            return Vec::new();
        }
        let expired = |n: &PNode| now.0.saturating_sub(n.last_access.0) > ttl.0;
        // Topmost expired nodes (an ancestor is accessed whenever a descendant is, so the
        // subtree below an expired node is expired too).
        let tops: Vec<u32> = (1..self.nodes.len() as u32)
            .filter(|&i| {
                let n = &self.nodes[i as usize];
                n.alive && expired(n) && (n.parent == ROOT || !expired(&self.nodes[n.parent as usize]))
            })
            .collect();
        let mut evicted = Vec::new();
        for top in tops {
            let mut subtree = vec![top];
            let mut i = 0;
            while i < subtree.len() {
                let n = subtree[i];
                subtree.extend(self.nodes[n as usize].children.iter().copied());
                i += 1;
            }
            let mut gone: SmallVec<[u16; 8]> = SmallVec::new();
            for &n in &subtree {
                for &p in &self.nodes[n as usize].pods {
                    if !gone.contains(&p) {
                        gone.push(p);
                    }
                }
            }
            let parent = self.nodes[top as usize].parent;
            let mut a = parent;
            while a != NIL {
                self.nodes[a as usize].pods.retain(|p| !gone.contains(p));
                a = self.nodes[a as usize].parent;
            }
            let first = self.nodes[top as usize].key[0];
            self.child.remove(&(parent, first));
            self.nodes[parent as usize].children.retain(|&mut x| x != top);
            for &n in &subtree[1..] {
                let node = &self.nodes[n as usize];
                self.child.remove(&(node.parent, node.key[0]));
            }
            for &n in &subtree {
                let node = &mut self.nodes[n as usize];
                node.alive = false;
                node.key = Vec::new();
                node.children = SmallVec::new();
                node.pods = SmallVec::new();
            }
            evicted.extend(subtree);
        }
        self.oldest = (1..self.nodes.len())
            .filter(|&i| self.nodes[i].alive)
            .map(|i| self.nodes[i].last_access)
            .min()
            .unwrap_or(now);
        evicted
    }
}

fn common_prefix(a: &[u64], b: &[u64]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

// ---------------------------------------------------------------------------------------
// SlidingWindowHistogram
// ---------------------------------------------------------------------------------------

/// Per-node sums of the requests in the window (`histogram`, `nodeToCount`, `hitTokens`,
/// `promptTokens`, `decodingSize`).
#[derive(Default, Clone, Copy, Debug)]
struct NodeStats {
    context: i64,
    count: i64,
    hit: i64,
    prompt: i64,
    decoding: i64,
}

#[derive(Default)]
struct Histogram {
    /// (routed at, node), in time order.
    entries: VecDeque<(SimTime, u32)>,
    /// By node id: iterated in id order (deterministic sums).
    stats: BTreeMap<u32, NodeStats>,
}

/// The policy state.
pub struct AibrixPreble {
    params: AibrixPrebleParams,
    tree: LpRadix,
    hist: Histogram,
    /// Router start (the eviction loop's ticker starts here).
    start: SimTime,
    /// Ticks run so far (k of the last one, at start + k x interval).
    ticks: u64,
    /// Characters per token, learned from the requests.
    chars_per_token: f64,
}

impl AibrixPreble {
    /// An empty tree and histogram.
    pub fn new(params: AibrixPrebleParams) -> Self {
        AibrixPreble {
            params,
            tree: LpRadix::new(),
            hist: Histogram::default(),
            start: SimTime::ZERO,
            ticks: 0,
            chars_per_token: 4.0,
        }
    }

    fn tokens(&self, chars: u64) -> i64 {
        (chars as f64 / self.chars_per_token).round() as i64
    }

    /// `NumTokens()` and `ContextLength()` of a node.
    fn node_tokens(&self, n: u32) -> (i64, i64) {
        let node = &self.tree.nodes[n as usize];
        (self.tokens(node.chars), self.tokens(node.ctx_chars))
    }

    /// The eviction loop's tick due by `now`, if any since the last one.
    fn tick_due(&mut self, now: SimTime) {
        let iv = self.params.eviction_loop_interval.0;
        let k = now.0.saturating_sub(self.start.0) / iv;
        if k <= self.ticks {
            return;
        }
        self.ticks = k;
        let t = SimTime(self.start.0 + k * iv);
        // `Evict`, then `removeEvictedNodes`, then `removeOldEntries`.
        let evicted = self.tree.evict(t, self.params.node_ttl);
        if !evicted.is_empty() {
            let tree = &self.tree;
            self.hist.entries.retain(|&(_, n)| tree.nodes[n as usize].alive);
            for n in evicted {
                self.hist.stats.remove(&n);
            }
        }
        let w = self.params.histogram_window.0;
        if t.0 < w {
            return;
        }
        let window_start = t.0 - w;
        while let Some(&(at, n)) = self.hist.entries.front() {
            if at.0 > window_start {
                break;
            }
            self.hist.entries.pop_front();
            let (own, ctx) = self.node_tokens(n);
            let s = self.hist.stats.entry(n).or_default();
            s.context -= ctx;
            s.count -= 1;
            // The node's own tokens *now*: a split since the request shortened them, so
            // the hit sum does not return to where it was (as upstream).
            s.hit -= ctx - own;
            s.prompt -= ctx;
            if s.context <= 0 {
                self.hist.stats.remove(&n);
            }
        }
    }

    /// `getPodLoad`: windowed requests on nodes listing `pod`.
    pub fn histogram_load(&self, pod: u16) -> i64 {
        self.hist
            .stats
            .iter()
            .filter(|(n, _)| self.tree.nodes[**n as usize].pods.contains(&pod))
            .map(|(_, s)| s.count)
            .sum()
    }

    /// `getCurrentAllocationCostPerPod` for pods `0..pods`.
    pub fn costs(&self, pods: usize) -> Vec<f64> {
        let p = self.params;
        let mut cost = vec![0.0; pods];
        for (&n, s) in &self.hist.stats {
            let node = &self.tree.nodes[n as usize];
            if node.pods.is_empty() {
                continue;
            }
            let miss = if s.prompt > 0 {
                1.0 - s.hit as f64 / s.prompt as f64
            } else {
                1.0
            };
            let (own, ctx) = self.node_tokens(n);
            // `/ numPods`, where `numPods = GetModelToPodCount()` counts *models*: 1 here.
            let prefill = miss * s.count as f64 * prefill_time(p.target_gpu, own, ctx);
            let decode = s.decoding as f64 * p.time_per_token_s;
            for &pod in &node.pods {
                if let Some(c) = cost.get_mut(usize::from(pod)) {
                    *c += prefill + decode;
                }
            }
        }
        cost
    }
}

impl RoutingPolicy for AibrixPreble {
    fn prompt_chunk_chars(&self) -> Option<u32> {
        Some(self.params.tree_chunk_chars)
    }

    fn on_router_start(&mut self, now: SimTime) {
        self.start = now;
        self.ticks = 0;
        self.tree.oldest = now;
    }

    fn route(&mut self, req: &RequestInfo, view: &RouterView, rng: &mut SimRng) -> Decision {
        if req.prompt_tokens > 0 {
            self.chars_per_token = req.prompt_chars as f64 / f64::from(req.prompt_tokens);
        }
        self.tick_due(view.now);
        let n = view.endpoints.len();
        let pod_of = |i: usize| view.endpoints[i].backend.index() as u16;
        let p = self.params;
        let chunk = u64::from(req.chunk_chars);

        let (leaf, matched) = self.tree.insert(req.prompt_chunks, chunk, req.prompt_chars, view.now);
        let matched_chars = (matched as u64 * chunk).min(req.prompt_chars);
        let ratio = if req.prompt_chars == 0 {
            0.0
        } else {
            matched_chars as f64 / req.prompt_chars as f64
        };

        // PR #2382: restrict to the least-loaded pods when the spread exceeds the count.
        let loads = local_loads(view);
        let (min, max) = (*loads.iter().min().expect("n > 0"), *loads.iter().max().expect("n > 0"));
        let gated = max - min > p.imbalance_abs_count;
        let candidates: Vec<usize> = (0..n).filter(|&i| !gated || loads[i] == min).collect();

        let matched_pick = if ratio > p.match_ratio_threshold {
            self.least_loaded_holder(leaf, &candidates, view, rng)
        } else {
            None
        };
        let (pos, hit) = match matched_pick {
            Some(pos) => (pos, true),
            None => (self.least_cost(&candidates, gated, view, rng), false),
        };
        self.post_route_update(leaf, pod_of(pos), view.now);
        let branch = match (gated, hit) {
            (false, true) => Branch::AibrixPrebleHit,
            (false, false) => Branch::AibrixPrebleCost,
            (true, true) => Branch::AibrixPrebleGatedHit,
            (true, false) => Branch::AibrixPrebleGatedCost,
        };
        Decision {
            pos,
            branch,
            match_chars: matched_chars,
        }
    }
}

impl AibrixPreble {
    /// The matched branch: from the request's leaf up, the first node some candidate holds,
    /// and among its candidates the least loaded by the histogram (ties uniform, as Go's
    /// map order over the node's pods); `None` when no ancestor is on a candidate.
    fn least_loaded_holder(
        &self,
        leaf: u32,
        candidates: &[usize],
        view: &RouterView,
        rng: &mut SimRng,
    ) -> Option<usize> {
        let pod_of = |i: usize| view.endpoints[i].backend.index() as u16;
        let mut node = leaf;
        while node != NIL {
            let pods = &self.tree.nodes[node as usize].pods;
            let on: Vec<usize> = candidates
                .iter()
                .copied()
                .filter(|&i| pods.contains(&pod_of(i)))
                .collect();
            if !on.is_empty() {
                let load: Vec<i64> = on.iter().map(|&i| self.histogram_load(pod_of(i))).collect();
                let least = *load.iter().min().expect("non-empty");
                let tied: Vec<usize> = (0..on.len()).filter(|&k| load[k] == least).collect();
                let k = if tied.len() > 1 {
                    tied[uniform_index(rng, tied.len())]
                } else {
                    tied[0]
                };
                return Some(on[k]);
            }
            node = self.tree.nodes[node as usize].parent;
        }
        None
    }

    /// The cost branch: the candidate of least allocation cost; ties uniform when gated (the
    /// candidate list is then in Go map order) or with `tie = "random"`, else the first.
    fn least_cost(&self, candidates: &[usize], gated: bool, view: &RouterView, rng: &mut SimRng) -> usize {
        let pod_of = |i: usize| view.endpoints[i].backend.index() as u16;
        let costs = self.costs(view.endpoints.iter().map(|e| e.backend.index() + 1).max().unwrap_or(0));
        let cost = |i: usize| costs[usize::from(pod_of(i))];
        let least = candidates.iter().map(|&i| cost(i)).fold(f64::INFINITY, f64::min);
        let tied: Vec<usize> = candidates.iter().copied().filter(|&i| cost(i) == least).collect();
        let random = gated || self.params.tie == super::leastrequest::Tie::Random;
        if random && tied.len() > 1 {
            tied[uniform_index(rng, tied.len())]
        } else {
            tied[0]
        }
    }

    /// `PostRouteUpdate`: the leaf is on `pod` now, and the request enters the histogram.
    fn post_route_update(&mut self, leaf: u32, pod: u16, now: SimTime) {
        self.tree.add_pod(leaf, pod);
        let (own, ctx) = self.node_tokens(leaf);
        self.hist.entries.push_back((now, leaf));
        let s = self.hist.stats.entry(leaf).or_default();
        s.context += ctx;
        s.count += 1;
        s.decoding = i64::from(self.params.decoding_length_tokens);
        s.hit += ctx - own;
        s.prompt += ctx;
    }
}

/// This policy's registry entry ([`super::registry`]).
pub struct Kind;

/// `[router.policy]` of this policy (unset keys: [`AibrixPrebleParams::default`], the tree
/// unit one token).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    imbalance_abs_count: Option<i64>,
    match_ratio_threshold: Option<f64>,
    target_gpu: Option<String>,
    decoding_length_tokens: Option<i64>,
    time_per_token_s: Option<f64>,
    histogram_window_s: Option<f64>,
    eviction_loop_interval_s: Option<f64>,
    node_ttl_s: Option<f64>,
    tree_chunk_chars: Option<i64>,
    tie: Option<String>,
}

impl PolicyKind for Kind {
    const KIND: &'static str = "aibrix_preble";
    const DOC: Doc = Doc {
        source: "AIBrix gateway prefix-cache-preble (pkg/plugins/gateway/algorithms/prefix_cache_preble.go, \
                 pkg/utils/prefixcacheindexer/tree.go) with the load gate of PR #2382",
        decision: "gate max - min > 8: only the least loaded pods; matched tokens / prompt > 0.5: least \
                   histogram load among the pods of the longest matching tree node; else least Preble cost, \
                   ties: first in list",
        signals: "gateway in-flight requests (router-local, fresh) for the gate; a router-local radix tree of prompt \
                  tokens (5-min idle TTL) and the history of routed requests in a 3-min window (histogram load and \
                  Preble cost); no engine metric, output lengths never known (a constant stands in)",
        params: &[
            param(
                "imbalance_abs_count",
                "8",
                "max - min in-flight above this: only the least-loaded pods are candidates (PR #2382)",
            ),
            param(
                "match_ratio_threshold",
                "0.5",
                "matched / prompt tokens above this: least histogram load on the longest matching node",
            ),
            param(
                "target_gpu",
                "\"V100\"",
                "prefill cost model: \"V100\" or \"A6000\" (Mistral-7B fits)",
            ),
            param(
                "decoding_length_tokens",
                "45",
                "assumed output tokens per node in the decode cost",
            ),
            param(
                "time_per_token_s",
                "0.15",
                "decode cost per token (upstream's unmeasured default)",
            ),
            param("histogram_window_s", "180", "routing history window"),
            param(
                "eviction_loop_interval_s",
                "1",
                "period of the eviction / window loop, from router start",
            ),
            param(
                "node_ttl_s",
                "300",
                "tree nodes idle longer than this are evicted with their subtree",
            ),
            param(
                "tree_chunk_chars",
                "(auto)",
                "characters per tree unit; default router.chars_per_token (one token)",
            ),
        ],
    };
    type Params = Params;
    type Config = AibrixPrebleParams;
    fn validate(f: Params, fleet: &Fleet) -> Result<AibrixPrebleParams, ParamError> {
        let d = AibrixPrebleParams::default();
        let target_gpu = match f.target_gpu.as_deref() {
            None => d.target_gpu,
            Some(v) => [TargetGpu::V100, TargetGpu::A6000]
                .into_iter()
                .find(|g| g.as_str() == v)
                .ok_or_else(|| {
                    ParamError::new(
                        "target_gpu",
                        format!(
                            "unknown target GPU `{v}`; expected `V100` (upstream default) or `A6000` \
                             (upstream silently uses V100 for any other value)"
                        ),
                    )
                })?,
        };
        let tpt = f.time_per_token_s.unwrap_or(d.time_per_token_s);
        if !tpt.is_finite() || tpt < 0.0 {
            return Err(ParamError::new(
                "time_per_token_s",
                format!("must be a finite number of seconds >= 0, got {tpt}"),
            ));
        }
        Ok(AibrixPrebleParams {
            imbalance_abs_count: non_negative(
                f.imbalance_abs_count.unwrap_or(d.imbalance_abs_count as i64),
                "imbalance_abs_count",
                "requests",
            )?,
            match_ratio_threshold: unit(
                f.match_ratio_threshold.unwrap_or(d.match_ratio_threshold),
                "match_ratio_threshold",
            )?,
            target_gpu,
            decoding_length_tokens: count(
                f.decoding_length_tokens.unwrap_or(i64::from(d.decoding_length_tokens)),
                "decoding_length_tokens",
                0,
            )?,
            time_per_token_s: tpt,
            histogram_window: secs(
                f.histogram_window_s.unwrap_or(d.histogram_window.as_secs_f64()),
                "histogram_window_s",
                false,
            )?,
            eviction_loop_interval: secs(
                f.eviction_loop_interval_s
                    .unwrap_or(d.eviction_loop_interval.as_secs_f64()),
                "eviction_loop_interval_s",
                false,
            )?,
            node_ttl: secs(f.node_ttl_s.unwrap_or(d.node_ttl.as_secs_f64()), "node_ttl_s", false)?,
            // One token per unit by default, like upstream's tokenised tree.
            tree_chunk_chars: count(
                f.tree_chunk_chars.unwrap_or(i64::from(fleet.chars_per_token)),
                "tree_chunk_chars",
                1,
            )?,
            tie: tie_first(f.tie.as_deref(), "tie", "upstream's strict `<` in list order")?,
        })
    }
    fn describe(p: &AibrixPrebleParams) -> String {
        format!(
            "imbalance_abs_count = {}, match_ratio_threshold = {}, target_gpu = {}, histogram_window_s = {}{}",
            p.imbalance_abs_count,
            p.match_ratio_threshold,
            p.target_gpu.as_str(),
            p.histogram_window.as_secs_f64(),
            tie_suffix_first(p.tie)
        )
    }
    fn build(p: &AibrixPrebleParams) -> Box<dyn RoutingPolicy> {
        Box::new(AibrixPreble::new(*p))
    }
    fn upstream(_: &AibrixPrebleParams, _: &[&str]) -> Option<Upstream> {
        Upstream::new("AIBrix gateway", "routing-strategy prefix-cache-preble")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testkit::{ViewFixture, req_chars};
    use crate::rng::stream;

    /// A prompt of `units` one-token units (4 characters each).
    fn prompt(units: &[u64]) -> RequestInfo<'_> {
        req_chars(units, 4, units.len() as u64 * 4)
    }

    fn seq(from: u64, len: u64) -> Vec<u64> {
        (from..from + len).collect()
    }

    fn cat(a: &[u64], b: &[u64]) -> Vec<u64> {
        [a, b].concat()
    }

    #[test]
    fn analytic_model_matches_upstream_formulas() {
        // V100, a 2000-token node at context 2000: linear 0.27106428*2000 + 10.52444263 ms,
        // attention (4.65e-4*2000 + 0.398) ms (not halved: 2000 unique KV > 1024), no quad.
        let want = ((0.27106428 * 2000.0 + 10.52444263) + (4.65e-4 * 2000.0 + 0.398)) / 1000.0 / 0.9;
        assert!((prefill_time(TargetGpu::V100, 2000, 2000) - want).abs() < 1e-12);
        // 500 own tokens on a 3000-token context: attention halved (500 <= 1024).
        let want = ((0.27106428 * 500.0 + 10.52444263) + (4.65e-4 * 3000.0 + 0.398) / 2.0) / 1000.0 / 0.9;
        assert!((prefill_time(TargetGpu::V100, 500, 3000) - want).abs() < 1e-12);
        // Short: 100 tokens, flat 55 ms + 0.8 ms.
        assert!((prefill_time(TargetGpu::V100, 100, 100) - (55.8 / 1000.0 / 0.9)).abs() < 1e-12);
        // Quadratic term from 4096 tokens; A6000 coefficients.
        let x: f64 = 5000.0;
        let want =
            ((0.10842571 * x + 4.209777054806409) + (1.86e-4 * x + 0.159) + (-7.37 + 3.86e-3 * x + 2.16e-6 * x * x))
                / 1000.0
                / 0.9;
        assert!((prefill_time(TargetGpu::A6000, 5000, 5000) - want).abs() < 1e-12);
        // Middle band (192..384) is quadratic in the batch.
        let x: f64 = 200.0;
        let want = ((-295.0 + 3.125 * x - 6.4e-3 * x * x) + 0.8) / 1000.0 / 0.9;
        assert!((prefill_time(TargetGpu::V100, 200, 200) - want).abs() < 1e-12);
    }

    #[test]
    fn cold_start_cost_goes_first_in_list_order_then_spreads() {
        let mut p = AibrixPreble::new(AibrixPrebleParams::default());
        let f = ViewFixture::new(3);
        let mut rng = stream(1, "t", 0);
        // Unrelated prompts: no match, cost branch. All costs 0: the first pod; then the
        // pods without history (cost 0) before the used one.
        let picks: Vec<(usize, Branch)> = (0..3)
            .map(|k| {
                let d = p.route(&prompt(&seq(1000 * (k + 1), 10)), &f.view(), &mut rng);
                (d.pos, d.branch)
            })
            .collect();
        assert_eq!(
            picks,
            [
                (0, Branch::AibrixPrebleCost),
                (1, Branch::AibrixPrebleCost),
                (2, Branch::AibrixPrebleCost)
            ]
        );
        // All three now carry one node each of equal size: the cost tie goes to the first.
        let d = p.route(&prompt(&seq(9000, 10)), &f.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (0, Branch::AibrixPrebleCost));
        // Each node costs prefill (miss rate 1, one request, 10 tokens) + 45 x 0.15.
        let node = prefill_time(TargetGpu::V100, 10, 10) + 45.0 * 0.15;
        let c = p.costs(3);
        assert!((c[0] - 2.0 * node).abs() < 1e-9 && (c[1] - node).abs() < 1e-9, "{c:?}");
    }

    #[test]
    fn ratio_threshold_both_sides() {
        let sys = seq(1, 6);
        let mut p = AibrixPreble::new(AibrixPrebleParams::default());
        let f = ViewFixture::new(2);
        let mut rng = stream(2, "t", 0);
        // Pod 0 gets the first prompt (cost tie -> first); pod 1 an unrelated one.
        let a = cat(&sys, &seq(100, 4));
        assert_eq!(p.route(&prompt(&a), &f.view(), &mut rng).pos, 0);
        assert_eq!(p.route(&prompt(&seq(500, 10)), &f.view(), &mut rng).pos, 1);
        // 6 of 12 units shared: a ratio of exactly 0.5 is not above 0.5 -> cost branch.
        let half = cat(&sys, &seq(200, 6));
        let d = p.route(&prompt(&half), &f.view(), &mut rng);
        assert_eq!((d.branch, d.match_chars), (Branch::AibrixPrebleCost, 24));
        // 6 of 10 shared (0.6 > 0.5): the prefix step, on the node holding `sys`.
        let more = cat(&sys, &seq(300, 4));
        let d = p.route(&prompt(&more), &f.view(), &mut rng);
        assert_eq!((d.branch, d.match_chars), (Branch::AibrixPrebleHit, 24));
        // The threshold is a parameter: at 0.7 the same kind of prompt is costed.
        let mut q = AibrixPreble::new(AibrixPrebleParams {
            match_ratio_threshold: 0.7,
            ..AibrixPrebleParams::default()
        });
        q.route(&prompt(&a), &f.view(), &mut rng);
        let d = q.route(&prompt(&more), &f.view(), &mut rng);
        assert_eq!(d.branch, Branch::AibrixPrebleCost);
    }

    #[test]
    fn prefix_step_takes_least_histogram_load_on_the_longest_node() {
        let sys = seq(1, 8);
        let mut p = AibrixPreble::new(AibrixPrebleParams::default());
        let f = ViewFixture::new(3);
        let mut rng = stream(3, "t", 0);
        // Pod 0: the shared prefix + x; pod 1: unrelated, twice (histogram load 2 on pod 1).
        assert_eq!(p.route(&prompt(&cat(&sys, &[70, 71])), &f.view(), &mut rng).pos, 0);
        assert_eq!(p.route(&prompt(&seq(500, 10)), &f.view(), &mut rng).pos, 1);
        assert_eq!(p.route(&prompt(&seq(500, 10)), &f.view(), &mut rng).pos, 1);
        // Pod 2 takes a prompt sharing `sys` only below the threshold (8 of 20)...
        let long = cat(&sys, &seq(800, 12));
        assert_eq!(p.route(&prompt(&long), &f.view(), &mut rng).pos, 2);
        // ... so the `sys` node now lists pods 0 and 2, each with histogram load 1.
        assert_eq!(p.histogram_load(0), 1);
        assert_eq!(p.histogram_load(2), 1);
        assert_eq!(p.histogram_load(1), 2);
        // A prompt sharing `sys` above the threshold: the longest node with pods is `sys`
        // (its own new leaf has none): pods {0, 2} tie at load 1 -> either, never pod 1.
        let mut seen = [false; 3];
        for k in 0..20 {
            let mut q = AibrixPreble::new(AibrixPrebleParams::default());
            let mut r = stream(30 + k, "t", 0);
            q.route(&prompt(&cat(&sys, &[70, 71])), &f.view(), &mut r);
            q.route(&prompt(&seq(500, 10)), &f.view(), &mut r);
            q.route(&prompt(&seq(500, 10)), &f.view(), &mut r);
            q.route(&prompt(&long), &f.view(), &mut r);
            let d = q.route(&prompt(&cat(&sys, &[90, 91])), &f.view(), &mut r);
            assert_eq!(d.branch, Branch::AibrixPrebleHit);
            seen[d.pos] = true;
        }
        assert_eq!(seen, [true, false, true], "uniform among equal loads, only on the node");
        // Pod 0's own branch is longer for a continuation of its prompt: pod 0 only.
        let d = p.route(&prompt(&cat(&cat(&sys, &[70, 71]), &[5])), &f.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (0, Branch::AibrixPrebleHit));
    }

    #[test]
    fn gate_restricts_to_the_least_running_before_prefix_and_cost() {
        let sys = seq(1, 8);
        let mut p = AibrixPreble::new(AibrixPrebleParams::default());
        let mut rng = stream(4, "t", 0);
        let f = ViewFixture::new(3);
        assert_eq!(p.route(&prompt(&cat(&sys, &[70])), &f.view(), &mut rng).pos, 0);
        // The holder runs 9, the others 0 and (never used, missing) 0: 9 - 0 > 8.
        let f = ViewFixture::new(3).in_flight(&[Some(9), Some(0), None]);
        let d = p.route(&prompt(&cat(&sys, &[71])), &f.view(), &mut rng);
        assert_eq!(d.branch, Branch::AibrixPrebleGatedCost, "no gated pod on the path");
        assert_ne!(d.pos, 0);
        let gated_pick = d.pos;
        // Gated again, now a gated pod is on the `sys` node: the prefix step takes it.
        let d = p.route(&prompt(&cat(&sys, &[72])), &f.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (gated_pick, Branch::AibrixPrebleGatedHit));
        // A gap of exactly 8 does not gate (strict >): the prefix step sees every pod and the
        // `sys` node lists 0 and the gated pick.
        let f = ViewFixture::new(3).in_flight(&[Some(8), Some(0), Some(0)]);
        let d = p.route(&prompt(&cat(&sys, &[73])), &f.view(), &mut rng);
        assert_eq!(d.branch, Branch::AibrixPrebleHit);
        assert!(d.pos == 0 || d.pos == gated_pick);
        // Threshold 0 with equal loads: no gate.
        let mut q = AibrixPreble::new(AibrixPrebleParams {
            imbalance_abs_count: 0,
            ..AibrixPrebleParams::default()
        });
        let f = ViewFixture::new(2).in_flight(&[Some(1), Some(1)]);
        assert_eq!(
            q.route(&prompt(&seq(5, 5)), &f.view(), &mut rng).branch,
            Branch::AibrixPrebleCost
        );
        let f = ViewFixture::new(2).in_flight(&[Some(2), Some(1)]);
        let d = q.route(&prompt(&seq(5, 5)), &f.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (1, Branch::AibrixPrebleGatedCost));
    }

    #[test]
    fn histogram_window_and_node_ttl_expire_history() {
        let mut p = AibrixPreble::new(AibrixPrebleParams::default());
        let mut rng = stream(5, "t", 0);
        let a = seq(1, 10);
        let f = ViewFixture::new(2).at(0.5);
        assert_eq!(p.route(&prompt(&a), &f.view(), &mut rng).pos, 0);
        assert_eq!(p.histogram_load(0), 1);
        // 2 minutes later the request is still in the 3-minute window; the exact prompt
        // again follows the tree to pod 0 (ratio 1).
        let f = ViewFixture::new(2).at(120.5);
        let d = p.route(&prompt(&a), &f.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (0, Branch::AibrixPrebleHit));
        assert_eq!(p.histogram_load(0), 2);
        // At 181 s the first entry (0.5 s) has left the window (tick at 181 s: 0.5 <= 1).
        let f = ViewFixture::new(2).at(181.2);
        p.route(&prompt(&seq(100, 10)), &f.view(), &mut rng);
        assert_eq!(p.histogram_load(0), 1);
        // Node TTL 300 s: at 421.5 s the `a` node was last touched at 120.5 s (301 s ago) and
        // is evicted, its pods removed up to the root: the prompt no longer matches.
        let f = ViewFixture::new(2).at(421.6);
        let d = p.route(&prompt(&a), &f.view(), &mut rng);
        assert_eq!((d.branch, d.match_chars), (Branch::AibrixPrebleCost, 0));
    }

    #[test]
    fn eviction_strips_the_evicted_pods_from_surviving_ancestors() {
        // Upstream's evictNode deletes the evicted node's pods from every ancestor, even if
        // a live sibling branch still carries them.
        let sys = seq(1, 8);
        let mut p = AibrixPreble::new(AibrixPrebleParams::default());
        let mut rng = stream(6, "t", 0);
        let f = ViewFixture::new(2).at(1.0);
        assert_eq!(p.route(&prompt(&cat(&sys, &[50])), &f.view(), &mut rng).pos, 0);
        // Second branch on the same `sys` (ratio 8/9): pod 0 again, at 200 s.
        let f = ViewFixture::new(2).at(200.0);
        let d = p.route(&prompt(&cat(&sys, &[60])), &f.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (0, Branch::AibrixPrebleHit));
        // At 302 s the first branch's leaf (last touched at 1 s) is evicted; `sys` (touched
        // at 200 s) survives but loses pod 0, and so does the root. The second branch still
        // lists pod 0, so a continuation of it follows pod 0; a new branch off `sys` finds
        // no pod on `sys` or the root and is costed.
        let f = ViewFixture::new(2).at(302.0);
        let d = p.route(&prompt(&cat(&sys, &[70])), &f.view(), &mut rng);
        assert_eq!((d.branch, d.match_chars), (Branch::AibrixPrebleCost, 32));
        let d = p.route(&prompt(&cat(&cat(&sys, &[60]), &[61])), &f.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (0, Branch::AibrixPrebleHit));
    }

    #[test]
    fn restart_anchors_the_ticker() {
        let mut p = AibrixPreble::new(AibrixPrebleParams::default());
        p.on_router_start(SimTime(10_400_000_000));
        let mut rng = stream(7, "t", 0);
        let f = ViewFixture::new(1).at(11.0);
        p.route(&prompt(&seq(1, 4)), &f.view(), &mut rng);
        assert_eq!(p.ticks, 0, "first tick at 11.4 s");
        let f = ViewFixture::new(1).at(13.5);
        p.route(&prompt(&seq(1, 4)), &f.view(), &mut rng);
        assert_eq!(p.ticks, 3);
    }
}
