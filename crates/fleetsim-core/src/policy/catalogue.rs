//! What `sim policies` prints: every policy with its parameters, upstream defaults, the
//! signals it reads and how fresh they are, and where its semantics come from.

/// One parameter.
#[derive(serde::Serialize)]
pub struct ParamDoc {
    /// Key under `[router.policy]`.
    pub key: &'static str,
    /// Default as written in TOML.
    /// Default as written in TOML; `(required)` when there is none, `(auto)` when it is
    /// derived from the fleet.
    pub default: &'static str,
    /// What it does.
    pub meaning: &'static str,
}

/// One policy.
#[derive(serde::Serialize)]
pub struct PolicyDoc {
    /// `router.policy.kind`.
    pub kind: &'static str,
    /// The router and code it reproduces.
    pub source: &'static str,
    /// Signals read, with their freshness.
    pub signals: &'static str,
    /// Parameters.
    pub params: &'static [ParamDoc],
}

const fn p(key: &'static str, default: &'static str, meaning: &'static str) -> ParamDoc {
    ParamDoc { key, default, meaning }
}

/// Every policy, in `POLICY_KINDS` order.
pub const CATALOGUE: &[PolicyDoc] = &[
    PolicyDoc {
        kind: "roundrobin",
        source: "vLLM production-stack RoundRobinRouter (src/vllm_router/routers/routing_logic.py)",
        signals: "none (a counter over the URL-sorted endpoint list)",
        params: &[],
    },
    PolicyDoc {
        kind: "session",
        source: "production-stack SessionRouter: uhashring consistent hash of the session header",
        signals: "session key; without one, _qps_routing on router-local request stats",
        params: &[],
    },
    PolicyDoc {
        kind: "prefixaware",
        source: "production-stack PrefixAwareRouter + HashTrie (PR #990); fallback leastinflight = PR #1089",
        signals: "router-local trie of 128-char chunks (zero staleness); below the threshold: _qps_routing \
                  (request stats, window 60 s) or scraped engine stats (router.engine_stats_interval_s, 30 s)",
        params: &[
            p(
                "prefix_min_match_length",
                "0",
                "characters of trie match needed to follow the trie",
            ),
            p(
                "fallback",
                "\"qps\"",
                "below the threshold: \"qps\" (upstream), \"leastinflight\" (PR #1089, scraped), \
                 \"local_inflight\" (router's own in-flight, fresh) or \"scraped_plus_sent\" (scrape + own dispatches since)",
            ),
            p("band", "1", "load-based fallbacks: candidates are loads <= min + band"),
            p(
                "tie",
                "\"random\"",
                "load-based fallbacks: \"random\" among candidates (PR #1089) or \"first\" in discovery order",
            ),
            p(
                "sample",
                "0",
                "load-based fallbacks: endpoints drawn per pick (0: all; 2: power-of-two; not upstream)",
            ),
            p(
                "insert",
                "\"at_pick\"",
                "when a fallback pick enters the trie: \"at_pick\" (PR #990) or \"second_turn\" (not upstream)",
            ),
            p(
                "follow",
                "false",
                "true: a below-threshold continuation of a below-threshold prompt goes where it went (not upstream)",
            ),
        ],
    },
    PolicyDoc {
        kind: "leastinflight",
        source: "PR #1089's least-in-flight rule on every request",
        signals: "scraped running + waiting (router.engine_stats_interval_s, 30 s); missing stats -> _qps_routing",
        params: &[
            p("band", "1", "candidates: loads <= min + band"),
            p(
                "tie",
                "\"random\"",
                "\"random\" among candidates (PR #1089) or \"first\" in discovery order (band 0: strict argmin)",
            ),
        ],
    },
    PolicyDoc {
        kind: "random",
        source: "SGLang random, AIBrix random",
        signals: "none",
        params: &[],
    },
    PolicyDoc {
        kind: "least_request",
        source: "AIBrix least-request (gateway realtime_num_requests_running); SGLang shortest queue with tie = first",
        signals: "router-local in-flight requests (zero staleness, this router's traffic only)",
        params: &[p(
            "tie",
            "\"random\"",
            "\"random\" (AIBrix) or \"first\" in discovery order (SGLang min_by_key)",
        )],
    },
    PolicyDoc {
        kind: "power_of_d",
        source: "SGLang power_of_two / AIBrix power-of-two generalised to d samples (tie -> first sampled)",
        signals: "load = \"local\" (router in-flight, fresh), \"scraped\" (running + waiting, \
                  router.engine_stats_interval_s), or \"sglang_monitor\" (GET /get_load every 10 s, which vLLM \
                  does not serve: -1 everywhere, so uniform random)",
        params: &[
            p("d", "2", "endpoints sampled per decision"),
            p("load", "\"local\"", "\"local\", \"scraped\" or \"sglang_monitor\""),
        ],
    },
    PolicyDoc {
        kind: "sglang_cache_aware",
        source: "SGLang classic sgl-router cache_aware (src/policies/cache_aware.rs, tree.rs; PR #2114), RouterArgs defaults",
        signals: "router-local in-flight (fresh) and a router-local approximate radix tree of request text, LRU-evicted \
                  per tenant by a background pass every eviction_interval_secs from router start",
        params: &[
            p(
                "cache_threshold",
                "0.3",
                "match rate above which the request follows the tree",
            ),
            p("balance_abs_threshold", "64", "imbalanced iff max - min > this ..."),
            p(
                "balance_rel_threshold",
                "1.5",
                "... and max > min x this: then shortest queue",
            ),
            p("tree_chunk_chars", "16", "tree granularity (upstream: 1 character)"),
            p(
                "eviction_interval_secs",
                "120",
                "seconds between eviction passes, from router start (0: never evict)",
            ),
            p(
                "max_tree_size",
                "67108864",
                "characters per worker a pass keeps (least recently used leaves go first)",
            ),
        ],
    },
    PolicyDoc {
        kind: "llmd",
        source: "llm-d / Gateway API Inference Extension EPP default profile (pkg/epp/config/loader/defaults.go)",
        signals: "scraped waiting and kv_cache_usage_perc every 50 ms (--refresh-metrics-interval, the default \
                  router.engine_stats_interval_s for this policy); router-local approximate prefix index",
        params: &[
            p("queue_weight", "2", "queue-scorer weight"),
            p("kv_cache_utilization_weight", "2", "kv-cache-utilization-scorer weight"),
            p("prefix_cache_weight", "3", "prefix-cache-scorer weight"),
            p(
                "load_aware_weight",
                "0",
                "load-aware-scorer weight (scraped waiting; not in the default profile)",
            ),
            p("load_aware_threshold", "128", "load-aware-scorer queue threshold"),
            p(
                "active_request_weight",
                "0",
                "active-request-scorer weight (router-local in-flight)",
            ),
            p(
                "block_size_tokens",
                "16",
                "index block = block_size_tokens x 4 characters",
            ),
            p("max_prefix_blocks", "256", "maxPrefixBlocksToMatch"),
            p(
                "lru_capacity_per_pod",
                "(auto)",
                "index entries per pod; default: backends.kv_blocks (upstream's auto-tune; 31,250 without it)",
            ),
        ],
    },
    PolicyDoc {
        kind: "aibrix_prefix_cache",
        source: "AIBrix gateway prefix-cache (pkg/plugins/gateway/algorithms/prefix_cache.go) with the load gates of PR #933 / #1906",
        signals: "gateway in-flight requests (router-local, fresh) and a router-local LRU index of 4-byte prompt blocks",
        params: &[
            p(
                "block_chars",
                "4",
                "AIBRIX_PREFIX_CACHE_BLOCK_SIZE (character tokenizer)",
            ),
            p("max_blocks", "200000", "blocks in the index LRU"),
            p("block_ttl_s", "1200", "entries idle longer than this are evicted"),
            p(
                "imbalance_abs_count",
                "8",
                "max - min in-flight above this: only the least-loaded pods are candidates",
            ),
            p(
                "std_dev_factor",
                "1",
                "a matched pod must run <= mean + factor x stddev",
            ),
        ],
    },
    PolicyDoc {
        kind: "aibrix_preble",
        source: "AIBrix gateway prefix-cache-preble (pkg/plugins/gateway/algorithms/prefix_cache_preble.go, \
                 pkg/utils/prefixcacheindexer/tree.go) with the load gate of PR #2382",
        signals: "gateway in-flight requests (router-local, fresh) for the gate; a router-local radix tree of prompt \
                  tokens (5-min idle TTL) and the history of routed requests in a 3-min window (histogram load and \
                  Preble cost); no engine metric, output lengths never known (a constant stands in)",
        params: &[
            p(
                "imbalance_abs_count",
                "8",
                "max - min in-flight above this: only the least-loaded pods are candidates (PR #2382)",
            ),
            p(
                "match_ratio_threshold",
                "0.5",
                "matched / prompt tokens above this: least histogram load on the longest matching node",
            ),
            p(
                "target_gpu",
                "\"V100\"",
                "prefill cost model: \"V100\" or \"A6000\" (Mistral-7B fits)",
            ),
            p(
                "decoding_length_tokens",
                "45",
                "assumed output tokens per node in the decode cost",
            ),
            p(
                "time_per_token_s",
                "0.15",
                "decode cost per token (upstream's unmeasured default)",
            ),
            p("histogram_window_s", "180", "routing history window"),
            p(
                "eviction_loop_interval_s",
                "1",
                "period of the eviction / window loop, from router start",
            ),
            p(
                "node_ttl_s",
                "300",
                "tree nodes idle longer than this are evicted with their subtree",
            ),
            p(
                "tree_chunk_chars",
                "(auto)",
                "characters per tree unit; default router.chars_per_token (one token)",
            ),
        ],
    },
    PolicyDoc {
        kind: "kvaware",
        source: "production-stack KvawareRouter (LMCache controller lookup)",
        signals: "cached prefix per engine from KV events (router.kv_event_lag_s, 10 ms) standing in for the LMCache \
                  controller; no load at all; fallback: session ring, else _qps_routing",
        params: &[p(
            "kv_aware_threshold",
            "2000",
            "route to the holder unless more than this many prompt tokens are uncached",
        )],
    },
    PolicyDoc {
        kind: "load_balanced_kvaware",
        source: "production-stack PR #884 LoadBalancedKvawareRouter",
        signals: "as kvaware, plus scraped running + waiting (router.engine_stats_interval_s, 30 s; missing = 0)",
        params: &[
            p("kv_aware_threshold", "2000", "as kvaware"),
            p(
                "imbalanced_threshold",
                "(required)",
                "float >= 0; max - min scraped load >= this: argmin, first in list order (upstream default +inf = kvaware)",
            ),
        ],
    },
    PolicyDoc {
        kind: "loadaware",
        source: "production-stack PR #1035 LoadAwareRouter",
        signals: "cached prefix from KV events (10 ms) and router-local in-flight (fresh)",
        params: &[p(
            "beta",
            "1.0",
            "score = hit fraction - beta x (load - mean) / max(1, mean)",
        )],
    },
    PolicyDoc {
        kind: "dynamo",
        source: "NVIDIA Dynamo KV router (lib/llm/src/kv_router), KvRouterConfig defaults",
        signals: "overlap from engine KV events (router.kv_event_lag_s, 10 ms); router-tracked active prompt tokens and \
                  KV blocks (fresh, per replica)",
        params: &[
            p(
                "overlap_score_weight",
                "1.0",
                "cost = weight x prefill blocks + decode blocks",
            ),
            p(
                "router_temperature",
                "0.0",
                "0: argmin (ties: smaller tree, then random); > 0: softmax sampling",
            ),
        ],
    },
];

/// The catalogue as text.
pub fn render() -> String {
    let mut out = String::new();
    for d in CATALOGUE {
        out.push_str(&format!(
            "{}\n  source:  {}\n  signals: {}\n",
            d.kind, d.source, d.signals
        ));
        if d.params.is_empty() {
            out.push_str("  params:  none\n");
        }
        for prm in d.params {
            out.push_str(&format!("  {} = {}  ({})\n", prm.key, prm.default, prm.meaning));
        }
        out.push('\n');
    }
    out.push_str("Set with [router.policy] kind = \"...\" plus the parameters above; defaults are upstream's.\n");
    out
}

/// The catalogue as JSON (`sim policies --json`): a list of `{kind, source, signals,
/// params: [{key, default, meaning}]}`, defaults as written in TOML.
pub fn to_json() -> String {
    serde_json::to_string_pretty(CATALOGUE).expect("the catalogue serializes") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lists_every_policy_with_its_parameters() {
        let v: serde_json::Value = serde_json::from_str(&to_json()).unwrap();
        let list = v.as_array().unwrap();
        assert_eq!(list.len(), CATALOGUE.len());
        for (j, d) in list.iter().zip(CATALOGUE) {
            assert_eq!(j["kind"], d.kind);
            assert_eq!(j["params"].as_array().unwrap().len(), d.params.len());
            for (jp, p) in j["params"].as_array().unwrap().iter().zip(d.params) {
                assert_eq!(
                    (jp["key"].as_str(), jp["default"].as_str()),
                    (Some(p.key), Some(p.default))
                );
            }
        }
    }
}
