//! A router configuration as production-stack's own command line (`vllm-router` flags,
//! `src/vllm_router/parsers/parser.py`), so a recommendation can be pasted into a
//! deployment. `sim import` (the reverse direction) lives elsewhere; this module only
//! writes flags.
//!
//! Upstream `--routing-logic` choices on main: roundrobin, session, kvaware, prefixaware.
//! `load_balanced_kvaware` (`--imbalanced-threshold`) is PR #884 and `loadaware` (beta via
//! `LOADAWARE_BETA`) is PR #1035; the least-in-flight fallback is PR #1089, which adds no
//! flag. `--engine-stats-interval` and `--request-stats-window` are whole seconds (> 0).

use crate::router::RouterConfig;

/// Flags and what they cannot express.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Flags {
    /// The arguments, in parser order.
    pub args: Vec<String>,
    /// Caveats: settings with no flag, PRs they need, rounding.
    pub notes: Vec<String>,
}

impl Flags {
    /// `--a b --c d` on one line.
    pub fn line(&self) -> String {
        self.args.join(" ")
    }
}

/// Whole seconds for an int-seconds flag; a note when the value is not one.
fn whole_seconds(flag: &str, s: f64, notes: &mut Vec<String>) -> String {
    let r = s.round().max(1.0);
    if (r - s).abs() > 1e-9 {
        notes.push(format!("{flag} takes whole seconds > 0: {s} s is written as {r}"));
    }
    format!("{r}")
}

/// The production-stack command line for `r`, or `None` if its policy is not one of
/// production-stack's routers (SGLang, llm-d, AIBrix and Dynamo policies have their own
/// configuration, which this tool does not write). Each policy declares its own flags
/// ([`crate::policy::kind::PolicyKind::production_stack`]); the routing logic is its
/// kind name, and the scrape and window flags follow what it reads.
pub fn production_stack(r: &RouterConfig) -> Option<Flags> {
    let own = r.policy.production_stack()?;
    let mut f = Flags {
        args: vec!["--routing-logic".into(), r.policy.kind().into()],
        notes: own.notes,
    };
    f.args.extend(own.args);
    if own.reads_engine_stats {
        let s = whole_seconds(
            "--engine-stats-interval",
            r.engine_stats_interval.as_secs_f64(),
            &mut f.notes,
        );
        f.args.extend(["--engine-stats-interval".into(), s]);
    }
    if own.reads_request_stats {
        let w = r.request_stats_window.as_secs_f64();
        if (w - 60.0).abs() > 1e-9 {
            let s = whole_seconds("--request-stats-window", w, &mut f.notes);
            f.args.extend(["--request-stats-window".into(), s]);
        }
    }
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(policy: &str, extra: &str) -> RouterConfig {
        let text = include_str!("../../scenarios/burst8.toml");
        let cut = text.find("[router.policy]").unwrap();
        let end = text[cut..].find("\n\n").unwrap() + cut;
        let t = format!("{}[router.policy]\n{policy}\n{}", &text[..cut], &text[end..]);
        let sets: Vec<(String, String)> = extra
            .split(';')
            .filter(|s| !s.is_empty())
            .map(|s| {
                let (k, v) = s.split_once('=').unwrap();
                (k.to_string(), v.to_string())
            })
            .collect();
        crate::scenario::load_str(&t, "t.toml", "t", &sets)
            .unwrap()
            .0
            .sim
            .router
    }

    #[test]
    fn prefixaware_with_the_pr_1089_fallback() {
        let r = router(
            "kind = \"prefixaware\"\nprefix_min_match_length = 4096\nfallback = \"leastinflight\"\nband = 0",
            "router.engine_stats_interval_s=1",
        );
        let f = production_stack(&r).unwrap();
        assert_eq!(
            f.line(),
            "--routing-logic prefixaware --prefix-min-match-length 4096 --engine-stats-interval 1"
        );
        assert!(f.notes.iter().any(|n| n.contains("PR #1089")));
        assert!(f.notes.iter().any(|n| n.contains("band = 0")));
    }

    #[test]
    fn kvaware_variants_and_rounding() {
        let r = router("kind = \"kvaware\"", "");
        assert_eq!(
            production_stack(&r).unwrap().line(),
            "--routing-logic kvaware --kv-aware-threshold 2000"
        );
        let r = router(
            "kind = \"load_balanced_kvaware\"\nimbalanced_threshold = 8",
            "router.engine_stats_interval_s=2.5",
        );
        let f = production_stack(&r).unwrap();
        assert_eq!(
            f.line(),
            "--routing-logic load_balanced_kvaware --kv-aware-threshold 2000 --imbalanced-threshold 8 --engine-stats-interval 3"
        );
        assert!(f.notes.iter().any(|n| n.contains("2.5 s is written as 3")));
        assert!(production_stack(&router("kind = \"dynamo\"", "")).is_none());
        assert_eq!(
            production_stack(&router("kind = \"roundrobin\"", "")).unwrap().line(),
            "--routing-logic roundrobin"
        );
    }
}
