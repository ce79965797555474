//! Which router configurations upstream routers ship today, and how each is switched on:
//! the basis of `sim tune --upstream-only` and of the `upstream` tie-break. A configuration
//! is upstream-ready when a released router runs it with its own flags or settings, no
//! patch or open pull request needed. production-stack configurations take their flags from
//! [`super::flags::production_stack`], and any of its notes naming a PR or a patch makes the
//! configuration not upstream-ready; every other router is named by the policy's own
//! registry entry ([`crate::policy::kind::PolicyKind::upstream`]), so nothing here names a
//! kind.

use super::flags::production_stack;
pub use crate::policy::kind::Upstream;
use crate::router::RouterConfig;

/// How a released router runs `router`'s policy (the keys its table sets in `set`, the
/// rest at their upstream defaults), or `None` when no released router does: production-stack
/// with its own flags unless they need a PR or a patch, else the router the policy's
/// registry entry names.
pub fn upstream(router: &RouterConfig, set: &[&str]) -> Option<Upstream> {
    match production_stack(router) {
        Some(f) => {
            let patched = f.notes.iter().any(|n| n.contains("PR #") || n.contains("patch"));
            (!patched).then(|| Upstream {
                router: "production-stack",
                how: format!("vllm-router {}", f.line()),
            })
        }
        None => router.policy.upstream(set),
    }
}

/// How many settings a configuration changes from its policy's upstream defaults: the
/// `simple` tie-break prefers fewer.
pub fn settings_changed(policy: &toml::Table, router: &toml::Table) -> usize {
    policy.keys().filter(|k| *k != "kind").count() + router.keys().filter(|k| *k != "policy").count()
}

/// [`upstream`] for a candidate of `src` (its policy table and `[router]` applied).
pub fn of_candidate(src: &crate::scenario::Source, c: &super::space::Candidate) -> Option<Upstream> {
    let mut alt = src.clone();
    alt.apply(&c.sets, "tune").ok()?;
    let sc = alt.scenario().ok()?;
    let policy = alt
        .table
        .get("router")
        .and_then(|r| r.get("policy"))
        .and_then(toml::Value::as_table)
        .cloned()
        .unwrap_or_default();
    let set: Vec<&str> = policy.keys().map(String::as_str).filter(|k| *k != "kind").collect();
    upstream(&sc.sim.router, &set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Source;
    use crate::tune::space::{default_space, resolve};

    #[test]
    fn upstream_ready_configurations_and_their_flags() {
        let src = Source::parse(include_str!("../../scenarios/burst8.toml"), "b.toml", "b").unwrap();
        let (cands, _) = resolve(&src, default_space(), false).unwrap();
        let up = |label: &str| {
            let c = cands
                .iter()
                .find(|c| c.label == label)
                .unwrap_or_else(|| panic!("{label}"));
            of_candidate(&src, c)
        };
        // burst8's own: prefixaware with the QPS fallback, as production-stack main ships it.
        let own = up("scenario").unwrap();
        assert_eq!(own.router, "production-stack");
        assert!(
            own.how
                .contains("--routing-logic prefixaware --prefix-min-match-length 16384"),
            "{own:?}"
        );
        assert_eq!(
            up("dynamo overlap_score_weight=0.5").unwrap().how,
            "--router-mode kv --kv-overlap-score-weight 0.5"
        );
        // PR #1089's fallback and PR #1035's loadaware are not shipped; nor are fleetsim's fixes.
        assert!(up("loadaware beta=1.0").is_none());
        assert!(
            cands
                .iter()
                .filter(|c| c.kind() == "leastinflight")
                .all(|c| of_candidate(&src, c).is_none())
        );
        assert!(
            cands
                .iter()
                .filter(|c| c.label.contains("local_inflight"))
                .all(|c| of_candidate(&src, c).is_none())
        );
        assert_eq!(up("session").unwrap().router, "production-stack");
        // Other routers, as their registry entries name them: only the keys a candidate sets
        // become flags; a setting no released router has is not upstream.
        assert_eq!(
            up("sglang_cache_aware balance_abs_threshold=16 cache_threshold=0.5")
                .unwrap()
                .how,
            "--policy cache_aware --cache-threshold 0.5 --balance-abs-threshold 16"
        );
        assert_eq!(up("least_request tie=random").unwrap().router, "AIBrix gateway");
        assert!(up("least_request tie=first").is_none());
        assert!(
            up("power_of_d d=2 load=scraped engine_stats_interval_s=10").is_none(),
            "scraped power-of-two ships nowhere"
        );
        assert_eq!(
            up("llmd prefix_cache_weight=5 engine_stats_interval_s=0.05")
                .unwrap()
                .how,
            "EPP default profile, prefix-cache-scorer weight 5"
        );
    }
}
