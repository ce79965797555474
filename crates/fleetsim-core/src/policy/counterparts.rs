//! Which real router policy each catalogue model claims to be: one row per policy that a
//! router installable from PyPI ships for plain vLLM workers (and production-stack's router,
//! installed from source), with the router's version,
//! the flag that selects it, and the catalogue model (`[router.policy]` table) that stands
//! for it. `sim policies --json` lists each kind's rows; `sim conform` runs each row's real
//! router against its model. Rows without a model are the policies nothing in the catalogue
//! reproduces yet: `sim conform` still measures them, and says so.
//!
//! The semantics cited per row were read in each router's source distribution at that
//! version (the PyPI sdist carries the full Rust source): vllm-project/router 0.1.17,
//! sgl-project/sglang `sgl-model-gateway` 0.3.2, lightseekorg/smg 1.13.0.

/// One real router policy and the model that claims it.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Counterpart {
    /// The router's name as installed (the PyPI distribution).
    pub router: &'static str,
    /// Its version (pinned).
    pub version: &'static str,
    /// The router's own name for the policy.
    pub policy: &'static str,
    /// The command-line flags that select it.
    pub flag: &'static str,
    /// The catalogue model's `router.policy.kind`; `None`: not modelled.
    pub kind: Option<&'static str>,
    /// The model's other parameters, as TOML key-value pairs (`load = "scraped"`).
    pub params: &'static str,
    /// The router polls every worker on this wall-clock interval (seconds, its default):
    /// the model reads scraped stats at this interval times the speed it was run at.
    pub poll_interval_s: Option<f64>,
    /// The model hashes the worker URLs: it must be given the live URLs.
    pub hashes_urls: bool,
    /// The router reads vLLM's KV-cache events: the workers must publish them
    /// (`sim serve --kv-events`) and the router be given each worker's endpoint.
    pub kv_events: bool,
    /// Why this model, in one sentence, with the router's file.
    pub why: &'static str,
}

impl Counterpart {
    /// The model as a `[router.policy]` inline table, if there is one.
    pub fn model_toml(&self) -> Option<String> {
        self.kind.map(|k| {
            if self.params.is_empty() {
                format!("{{ kind = \"{k}\" }}")
            } else {
                format!("{{ kind = \"{k}\", {} }}", self.params)
            }
        })
    }
}

const VLLM_ROUTER: &str = "vllm-router";
const VLLM_ROUTER_VERSION: &str = "0.1.17";
const SGLANG_ROUTER: &str = "sglang-router";
const SGLANG_ROUTER_VERSION: &str = "0.3.2";
const SMG: &str = "smg";
const SMG_VERSION: &str = "1.13.0";
const PRODUCTION_STACK: &str = "production-stack";
/// production-stack's router is installed from a source checkout (its PyPI name belongs to
/// vllm-project/router): the commit its models were read at.
const PRODUCTION_STACK_VERSION: &str = "a6c01db";

/// A row with the defaults of most: no parameters, no poll, no URL hashing.
const fn row(
    router: &'static str,
    version: &'static str,
    policy: &'static str,
    flag: &'static str,
    kind: Option<&'static str>,
    why: &'static str,
) -> Counterpart {
    Counterpart {
        router,
        version,
        policy,
        flag,
        kind,
        params: "",
        poll_interval_s: None,
        hashes_urls: false,
        kv_events: false,
        why,
    }
}

/// Every real policy for plain vLLM workers, grouped by router.
pub static COUNTERPARTS: &[Counterpart] = &[
    row(
        VLLM_ROUTER,
        VLLM_ROUTER_VERSION,
        "round_robin",
        "--policy round_robin",
        Some("roundrobin"),
        "one global counter over the healthy workers (src/policies/round_robin.rs); the split is exact whatever their order",
    ),
    row(
        VLLM_ROUTER,
        VLLM_ROUTER_VERSION,
        "random",
        "--policy random",
        Some("random"),
        "uniform over the healthy workers (src/policies/random.rs)",
    ),
    Counterpart {
        params: "load = \"scraped\"",
        poll_interval_s: Some(30.0),
        ..row(
            VLLM_ROUTER,
            VLLM_ROUTER_VERSION,
            "power_of_two",
            "--policy power_of_two",
            Some("power_of_d"),
            "two random workers, the lower polled GET /get_load wins (ties: the first drawn); the poll, every --worker-startup-check-interval (30 s), replaces the router's in-flight count (src/policies/power_of_two.rs, src/routers/http/router.rs)",
        )
    },
    Counterpart {
        params: "low_match = \"least_load\", hit = \"least_load\"",
        ..row(
            VLLM_ROUTER,
            VLLM_ROUTER_VERSION,
            "cache_aware",
            "--policy cache_aware",
            Some("sglang_cache_aware"),
            "the match rate above 0.3 follows the tree, else the least in-flight worker, ties to the first in the router's random worker order (src/policies/cache_aware.rs); it matches per worker on tokens from /render where the model matches text",
        )
    },
    Counterpart {
        kv_events: true,
        ..row(
            VLLM_ROUTER,
            VLLM_ROUTER_VERSION,
            "kv_aware",
            "--policy kv_aware",
            Some("vllm_router_kv_aware"),
            "the least (prompt - cached device prefix + booked prefill) x (in-flight + 1), the prefix from each worker's vLLM KV events over ZMQ (--kv-event-source URL=tcp://...), ties to the first in the router's random worker order (src/policies/kv_aware.rs, src/kv_index/subscriber.rs)",
        )
    },
    Counterpart {
        hashes_urls: true,
        ..row(
            VLLM_ROUTER,
            VLLM_ROUTER_VERSION,
            "consistent_hash",
            "--policy consistent_hash",
            Some("consistent_hash"),
            "160 virtual nodes per worker URL on an FBI/furc hash ring, keyed by header:x-session-id:<key>, key-less chat by the one key \"request:\" (src/policies/consistent_hash.rs, hash_key.rs): the model hashes the live URLs",
        )
    },
    Counterpart {
        hashes_urls: true,
        ..row(
            VLLM_ROUTER,
            VLLM_ROUTER_VERSION,
            "sticky_least_loaded",
            "--policy sticky_least_loaded",
            Some("sticky_least_loaded"),
            "a session sticks to the worker with the fewest active sessions at its first turn, ties by the FBI/furc hash of session and URL (src/policies/sticky_least_loaded.rs): the model hashes the live URLs",
        )
    },
    row(
        SGLANG_ROUTER,
        SGLANG_ROUTER_VERSION,
        "round_robin",
        "--policy round_robin",
        Some("roundrobin"),
        "one global counter over the available workers (src/policies/round_robin.rs)",
    ),
    row(
        SGLANG_ROUTER,
        SGLANG_ROUTER_VERSION,
        "random",
        "--policy random",
        Some("random"),
        "uniform over the available workers (src/policies/random.rs)",
    ),
    row(
        SGLANG_ROUTER,
        SGLANG_ROUTER_VERSION,
        "power_of_two",
        "--policy power_of_two",
        Some("random"),
        "the load monitor stores -1 for vLLM workers (no SGLang /get_load array) and the in-flight counter moves only for cache_aware and manual, so every comparison ties: uniform random (src/policies/power_of_two.rs, src/core/worker_manager.rs, src/routers/http/router.rs)",
    ),
    Counterpart {
        params: "low_match = \"least_load\", hit = \"first\", eviction_interval_secs = 60",
        ..row(
            SGLANG_ROUTER,
            SGLANG_ROUTER_VERSION,
            "cache_aware",
            "--policy cache_aware",
            Some("sglang_cache_aware"),
            "the match rate above 0.3 follows the matched node's tenant, else the least in-flight worker (sglang #14650, since 0.2.4), eviction every 60 s (src/policies/cache_aware.rs, router_args.py)",
        )
    },
    row(
        SGLANG_ROUTER,
        SGLANG_ROUTER_VERSION,
        "manual",
        "--policy manual",
        Some("random"),
        "sticky only on the x-smg-routing-key header, which fleetsim's traffic does not send; without it the default assignment mode is random (src/policies/manual.rs)",
    ),
    row(
        SMG,
        SMG_VERSION,
        "round_robin",
        "--policy round_robin",
        Some("roundrobin"),
        "one rotation per available worker set (policies/round_robin.rs); the overload veto can change the set",
    ),
    row(
        SMG,
        SMG_VERSION,
        "random",
        "--policy random",
        Some("random"),
        "uniform over the available workers (policies/random.rs)",
    ),
    Counterpart {
        params: "load = \"smg\", kv_pressure_weight_s = 0.15",
        poll_interval_s: Some(10.0),
        ..row(
            SMG,
            SMG_VERSION,
            "power_of_two",
            "--policy power_of_two",
            Some("power_of_d"),
            "two random workers, the lower expected wait wins: max(scraped running + waiting + own dispatches since the poll, own in-flight) plus 0.15 s x k / (1 - k) of KV usage k, from /metrics every 10 s, workers with 8 waiting or KV usage 0.8 vetoed, ties random (policies/power_of_two.rs, policies/least_load.rs, worker/expected_wait.rs, worker/monitor.rs)",
        )
    },
    Counterpart {
        params: "low_match = \"least_load\", spill_gate = true, tie = \"random\", eviction_interval_secs = 60, score = \"smg\"",
        poll_interval_s: Some(10.0),
        ..row(
            SMG,
            SMG_VERSION,
            "cache_aware",
            "--policy cache_aware",
            Some("sglang_cache_aware"),
            "the string tree's holders unless one spills (in-flight > 1.5 mean and > mean + a margin), the least expected wait among the rest and on a miss, from /metrics every 10 s, overload-vetoed workers skipped (policies/cache_aware.rs, policies/least_load.rs)",
        )
    },
    Counterpart {
        params: "load = \"smg\", d = 1000, kv_pressure_weight_s = 0.15",
        poll_interval_s: Some(10.0),
        ..row(
            SMG,
            SMG_VERSION,
            "least_load",
            "--policy least_load",
            Some("power_of_d"),
            "the least expected wait over every available worker, the same score as power_of_two (policies/least_load.rs); d at least the fleet size samples them all",
        )
    },
    row(
        SMG,
        SMG_VERSION,
        "manual",
        "--policy manual",
        Some("random"),
        "sticky only on the x-smg-routing-key header; without it random (policies/manual.rs)",
    ),
    row(
        SMG,
        SMG_VERSION,
        "consistent_hashing",
        "--policy consistent_hashing",
        Some("random"),
        "the ring is keyed by x-smg-routing-key, x-forwarded-for or a cookie, none of which fleetsim's traffic sends: random (policies/consistent_hashing.rs)",
    ),
    Counterpart {
        poll_interval_s: Some(10.0),
        hashes_urls: true,
        ..row(
            SMG,
            SMG_VERSION,
            "prefix_hash",
            "--policy prefix_hash",
            Some("prefix_hash"),
            "the first 1024 characters on a blake3 ring of worker URLs (150 virtual nodes), bounded by max(1.25 mean, mean + 10) in-flight, overload-vetoed workers skipped (policies/prefix_hash.rs, worker/hash_ring.rs): the model's ring is the live URLs', its key the content's hash of those characters",
        )
    },
    row(
        PRODUCTION_STACK,
        PRODUCTION_STACK_VERSION,
        "roundrobin",
        "--routing-logic roundrobin",
        Some("roundrobin"),
        "one counter over the URL-sorted endpoints (src/vllm_router/routers/routing_logic.py, RoundRobinRouter)",
    ),
    Counterpart {
        hashes_urls: true,
        ..row(
            PRODUCTION_STACK,
            PRODUCTION_STACK_VERSION,
            "session",
            "--routing-logic session --session-key x-user-id",
            Some("session"),
            "uhashring over the endpoint URLs keyed by the session header (routing_logic.py, SessionRouter): the model hashes the live URLs",
        )
    },
    Counterpart {
        params: "prefix_min_match_length = 16384, fallback = \"qps\"",
        poll_interval_s: Some(30.0),
        ..row(
            PRODUCTION_STACK,
            PRODUCTION_STACK_VERSION,
            "prefixaware",
            "--routing-logic prefixaware --prefix-min-match-length 16384",
            Some("prefixaware"),
            "the longest 128-character-chunk trie match above the threshold, else _qps_routing on the request-stats window (routing_logic.py, PrefixAwareRouter; PR #990)",
        )
    },
];

/// The rows whose model is `kind`.
pub fn of_kind(kind: &str) -> Vec<Counterpart> {
    COUNTERPARTS.iter().filter(|c| c.kind == Some(kind)).copied().collect()
}

/// The routers the table covers, in table order, with their versions.
pub fn routers() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for c in COUNTERPARTS {
        if !out.iter().any(|(r, _)| *r == c.router) {
            out.push((c.router, c.version));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_model_is_a_registered_kind_and_rows_are_unique() {
        for c in COUNTERPARTS {
            if let Some(k) = c.kind {
                assert!(super::super::registry::find(k).is_some(), "{}: {k}", c.policy);
            }
            let same = COUNTERPARTS
                .iter()
                .filter(|d| d.router == c.router && d.policy == c.policy)
                .count();
            assert_eq!(same, 1, "{} {} twice", c.router, c.policy);
        }
        assert_eq!(
            routers(),
            vec![
                ("vllm-router", "0.1.17"),
                ("sglang-router", "0.3.2"),
                ("smg", "1.13.0"),
                ("production-stack", "a6c01db")
            ]
        );
        assert_eq!(
            COUNTERPARTS[2].model_toml().as_deref(),
            Some("{ kind = \"power_of_d\", load = \"scraped\" }")
        );
    }
}
