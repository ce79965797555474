//! Which router configurations upstream routers ship today, and how each is switched on:
//! the basis of `sim tune --upstream-only` and of the `upstream` tie-break. A configuration
//! is upstream-ready when a released router runs it with its own flags or settings, no
//! patch or open pull request needed. The rules follow each policy's source notes
//! (`sim policies`); production-stack configurations take their flags from
//! [`super::flags::production_stack`], and any of its notes naming a PR or a patch makes the
//! configuration not upstream-ready.

use super::flags::production_stack;
use crate::router::RouterConfig;

/// An upstream router that runs a configuration, and how.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Upstream {
    /// The router (`production-stack`, `SGLang router`, ...).
    pub router: &'static str,
    /// Its flags or settings for this configuration.
    pub how: String,
}

fn num(t: &toml::Table, k: &str) -> Option<String> {
    t.get(k).map(|v| match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

fn is(t: &toml::Table, k: &str, default: &str) -> bool {
    num(t, k).is_none_or(|v| v == default)
}

/// How an upstream router runs the policy table `policy` (kind and the parameters a
/// candidate writes; the rest at their upstream defaults) under `router`, or `None` when
/// no released router does.
pub fn upstream(policy: &toml::Table, router: &RouterConfig) -> Option<Upstream> {
    let kind = policy.get("kind").and_then(toml::Value::as_str)?;
    let with = |router: &'static str, how: String| Some(Upstream { router, how });
    match kind {
        "roundrobin" | "session" | "kvaware" | "prefixaware" => {
            let f = production_stack(router)?;
            let patched = f.notes.iter().any(|n| n.contains("PR #") || n.contains("patch"));
            (!patched).then(|| Upstream {
                router: "production-stack",
                how: format!("vllm-router {}", f.line()),
            })
        }
        "random" => with(
            "SGLang router",
            "--policy random (AIBrix: routing-strategy random)".into(),
        ),
        "least_request" if is(policy, "tie", "random") => {
            with("AIBrix gateway", "routing-strategy least-request".into())
        }
        "power_of_d" if is(policy, "d", "2") => match num(policy, "load").as_deref() {
            Some("sglang_monitor") => with("SGLang router", "--policy power_of_two".into()),
            None | Some("local") => with("AIBrix gateway", "routing-strategy power-of-two".into()),
            _ => None,
        },
        "sglang_cache_aware" => {
            let mut how = "--policy cache_aware".to_string();
            for (k, flag) in [
                ("cache_threshold", "--cache-threshold"),
                ("balance_abs_threshold", "--balance-abs-threshold"),
                ("balance_rel_threshold", "--balance-rel-threshold"),
                ("eviction_interval_secs", "--eviction-interval"),
                ("max_tree_size", "--max-tree-size"),
            ] {
                if let Some(v) = num(policy, k) {
                    how.push_str(&format!(" {flag} {v}"));
                }
            }
            with("SGLang router", how)
        }
        "llmd" => {
            let w = num(policy, "prefix_cache_weight").unwrap_or_else(|| "3".into());
            with(
                "llm-d inference scheduler",
                format!("EPP default profile, prefix-cache-scorer weight {w}"),
            )
        }
        "aibrix_prefix_cache" => {
            let mut how = "routing-strategy prefix-cache".to_string();
            if let Some(v) = num(policy, "imbalance_abs_count") {
                how.push_str(&format!(
                    ", AIBRIX_PREFIX_CACHE_POD_RUNNING_REQUEST_IMBALANCE_ABS_COUNT={v}"
                ));
            }
            with("AIBrix gateway", how)
        }
        "aibrix_preble" => with("AIBrix gateway", "routing-strategy prefix-cache-preble".into()),
        "dynamo" => {
            let w = num(policy, "overlap_score_weight").unwrap_or_else(|| "1.0".into());
            with("Dynamo", format!("--router-mode kv --kv-overlap-score-weight {w}"))
        }
        // leastinflight (production-stack PR #1089), load_balanced_kvaware (PR #884),
        // loadaware (PR #1035) and every fleetsim candidate fix need a patch.
        _ => None,
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
    upstream(&policy, &sc.sim.router)
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
    }
}
