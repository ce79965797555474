//! A router configuration as production-stack's own command line (`vllm-router` flags,
//! `src/vllm_router/parsers/parser.py`), so a recommendation can be pasted into a
//! deployment. `sim import` (the reverse direction) lives elsewhere; this module only
//! writes flags.
//!
//! Upstream `--routing-logic` choices on main: roundrobin, session, kvaware, prefixaware.
//! `load_balanced_kvaware` (`--imbalanced-threshold`) is PR #884 and `loadaware` (beta via
//! `LOADAWARE_BETA`) is PR #1035; the least-in-flight fallback is PR #1089, which adds no
//! flag. `--engine-stats-interval` and `--request-stats-window` are whole seconds (> 0).

use crate::policy::leastrequest::Tie;
use crate::policy::{Fallback, PolicyConfig};
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
/// configuration, which this tool does not write).
pub fn production_stack(r: &RouterConfig) -> Option<Flags> {
    let mut f = Flags::default();
    let logic = match &r.policy {
        PolicyConfig::RoundRobin => "roundrobin",
        PolicyConfig::Session => "session",
        PolicyConfig::PrefixAware { .. } => "prefixaware",
        PolicyConfig::KvAware {
            imbalanced_threshold: None,
            ..
        } => "kvaware",
        PolicyConfig::KvAware { .. } => "load_balanced_kvaware",
        PolicyConfig::LoadAware { .. } => "loadaware",
        _ => return None,
    };
    f.args.extend(["--routing-logic".into(), logic.into()]);
    let mut reads_scrape = false;
    let mut reads_request_stats = true;
    match &r.policy {
        PolicyConfig::Session => {
            f.args.extend(["--session-key".into(), "<header>".into()]);
            f.notes
                .push("--session-key: the request header that carries your session id".into());
        }
        PolicyConfig::PrefixAware {
            prefix_min_match_length,
            fallback,
            band,
            tie,
            sample,
            insert,
            follow,
        } => {
            if *sample > 0 || *insert != crate::policy::prefixaware::Insertion::AtPick || *follow {
                f.notes.push(format!(
                    "sample = {sample}, insert = {}, follow = {follow}: fleetsim candidate fixes of the sub-threshold fallback (docs/burst8-atlas.md); no upstream flag, this needs a patch",
                    insert.as_str()
                ));
            }
            f.args
                .extend(["--prefix-min-match-length".into(), prefix_min_match_length.to_string()]);
            match fallback {
                Fallback::Qps => {}
                Fallback::LeastInflight => {
                    reads_scrape = true;
                    f.notes.push(
                        "the least-in-flight fallback is production-stack PR #1089 (no flag: it replaces the QPS fallback)"
                            .into(),
                    );
                    if *band != 1 || *tie != Tie::Random {
                        f.notes.push(format!(
                            "band = {band}, tie = {}: PR #1089 picks at random within +1 of the minimum; this needs a patch",
                            tie.as_str()
                        ));
                    }
                }
                Fallback::LocalInflight | Fallback::ScrapedPlusSent => {
                    reads_scrape = *fallback == Fallback::ScrapedPlusSent;
                    f.notes.push(format!(
                        "fallback = {}: a fleetsim candidate fix for the sub-threshold fallback (docs/burst8-atlas.md); no upstream flag, this needs a patch",
                        fallback.as_str()
                    ));
                }
            }
        }
        PolicyConfig::KvAware {
            threshold_tokens,
            imbalanced_threshold,
            ..
        } => {
            f.args
                .extend(["--kv-aware-threshold".into(), threshold_tokens.to_string()]);
            if let Some(t) = imbalanced_threshold {
                reads_scrape = true;
                f.args.extend(["--imbalanced-threshold".into(), t.to_string()]);
                f.notes
                    .push("load_balanced_kvaware and --imbalanced-threshold are production-stack PR #884".into());
            }
        }
        PolicyConfig::LoadAware { beta, .. } => {
            reads_request_stats = true;
            f.notes.push(format!(
                "loadaware is production-stack PR #1035; beta = {beta} is set with the environment variable LOADAWARE_BETA={beta}"
            ));
        }
        _ => {}
    }
    if reads_scrape {
        let s = whole_seconds(
            "--engine-stats-interval",
            r.engine_stats_interval.as_secs_f64(),
            &mut f.notes,
        );
        f.args.extend(["--engine-stats-interval".into(), s]);
    }
    if reads_request_stats && !matches!(r.policy, PolicyConfig::RoundRobin) {
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
