//! `[router.policy]`: the policy table's `kind` dispatch and the production-stack policies'
//! options (the other kinds are in [`super::policy_tables`]).

use super::schema::{LeastInflightFile, NoParams, PrefixAwareFile};
use super::{FieldError, Res, count, from_value, policy_tables, tag, without};
use fleetsim_core::policy::{Fallback, POLICY_KINDS, PolicyConfig};

/// The tie rules of the least-in-flight choices, for messages.
pub(super) const TIES: &str = "`random` (PR #1089) or `first` (Python `min()`: first in discovery order)";

pub(super) fn policy(t: Option<&toml::Table>, fleet: policy_tables::Fleet) -> Res<PolicyConfig> {
    let path = "router.policy";
    let Some(t) = t else {
        return Err(FieldError::new(
            path,
            format!("missing [router.policy] table with `kind` (one of {POLICY_KINDS})"),
        ));
    };
    let kind = tag(t, "kind", path, POLICY_KINDS)?;
    let rest = without(t, "kind");
    match kind {
        "roundrobin" => {
            from_value::<NoParams>(&rest, path)?;
            Ok(PolicyConfig::RoundRobin)
        }
        "session" => {
            from_value::<NoParams>(&rest, path)?;
            Ok(PolicyConfig::Session)
        }
        "prefixaware" => {
            let p: PrefixAwareFile = from_value(&rest, path)?;
            let fallback = match p.fallback.as_str() {
                "qps" => Fallback::Qps,
                "leastinflight" => Fallback::LeastInflight,
                "local_inflight" => Fallback::LocalInflight,
                "scraped_plus_sent" => Fallback::ScrapedPlusSent,
                other => {
                    return Err(FieldError::new(
                        format!("{path}.fallback"),
                        format!(
                            "unknown fallback `{other}`; expected `qps` (upstream), `leastinflight` (PR #1089), `local_inflight` or `scraped_plus_sent`"
                        ),
                    ));
                }
            };
            if p.prefix_min_match_length < 0 {
                return Err(FieldError::new(
                    format!("{path}.prefix_min_match_length"),
                    format!("must be >= 0 characters, got {}", p.prefix_min_match_length),
                ));
            }
            let insert = policy_tables::insertion(p.insert.as_deref(), &format!("{path}.insert"))?;
            if p.follow && insert != fleetsim_core::policy::prefixaware::Insertion::AtPick {
                return Err(FieldError::new(
                    format!("{path}.follow"),
                    "`follow = true` and `insert = \"second_turn\"` both decide the second turn; choose one",
                ));
            }
            Ok(PolicyConfig::PrefixAware {
                prefix_min_match_length: p.prefix_min_match_length as u64,
                fallback,
                band: count(p.band, &format!("{path}.band"), 0)?,
                tie: policy_tables::tie(&p.tie, &format!("{path}.tie"), TIES)?,
                sample: count(p.sample, &format!("{path}.sample"), 0)?,
                insert,
                follow: p.follow,
            })
        }
        "leastinflight" => {
            let p: LeastInflightFile = from_value(&rest, path)?;
            Ok(PolicyConfig::LeastInflight {
                band: count(p.band, &format!("{path}.band"), 0)?,
                tie: policy_tables::tie(&p.tie, &format!("{path}.tie"), TIES)?,
            })
        }
        other => policy_tables::parse(other, &rest, path, fleet).unwrap_or_else(|| {
            Err(FieldError::new(
                format!("{path}.kind"),
                format!("unknown policy `{other}`; expected one of {POLICY_KINDS}"),
            ))
        }),
    }
}
