//! What `sim policies` prints: every policy with its parameters, upstream defaults, the
//! signals it reads and how fresh they are, and where its semantics come from. Each entry is
//! declared with its policy ([`super::kind::PolicyKind::DOC`]); this module renders
//! the registry.

use super::counterparts::{Counterpart, of_kind};
use super::kind::{Doc, ParamDoc};
use super::registry::REGISTRY;

/// One policy as `sim policies --json` lists it.
#[derive(serde::Serialize)]
pub struct PolicyDoc {
    /// `router.policy.kind`.
    pub kind: &'static str,
    /// The router and code it reproduces.
    pub source: &'static str,
    /// How it picks an endpoint.
    pub decision: &'static str,
    /// Signals read, with their freshness.
    pub signals: &'static str,
    /// Parameters.
    pub params: &'static [ParamDoc],
    /// The real router policies it claims to be (router, version, flag), from
    /// [`super::counterparts::COUNTERPARTS`].
    pub counterparts: Vec<Counterpart>,
}

/// Every policy, in registry order.
pub fn catalogue() -> Vec<PolicyDoc> {
    REGISTRY
        .iter()
        .map(|e| {
            let Doc {
                source,
                decision,
                signals,
                params,
            } = e.doc();
            PolicyDoc {
                kind: e.kind(),
                source,
                decision,
                signals,
                params,
                counterparts: of_kind(e.kind()),
            }
        })
        .collect()
}

/// The catalogue as text.
pub fn render() -> String {
    let mut out = String::new();
    for d in catalogue() {
        out.push_str(&format!(
            "{}\n  source:  {}\n  decides: {}\n  signals: {}\n",
            d.kind, d.source, d.decision, d.signals
        ));
        if d.params.is_empty() {
            out.push_str("  params:  none\n");
        }
        for prm in d.params {
            out.push_str(&format!("  {} = {}  ({})\n", prm.key, prm.default, prm.meaning));
        }
        for c in &d.counterparts {
            let with = if c.params.is_empty() {
                String::new()
            } else {
                format!(" with {}", c.params)
            };
            out.push_str(&format!("  claims:  {} {} {}{with}\n", c.router, c.version, c.flag));
        }
        out.push('\n');
    }
    out.push_str("Set with [router.policy] kind = \"...\" plus the parameters above; defaults are upstream's.\n");
    out
}

/// The catalogue as JSON (`sim policies --json`): a list of `{kind, source, decision, signals,
/// params: [{key, default, meaning}], counterparts: [{router, version, policy, flag, kind,
/// params, poll_interval_s, hashes_urls, why}]}`, defaults as written in TOML.
pub fn to_json() -> String {
    serde_json::to_string_pretty(&catalogue()).expect("the catalogue serializes") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lists_every_policy_with_its_parameters() {
        let v: serde_json::Value = serde_json::from_str(&to_json()).unwrap();
        let list = v.as_array().unwrap();
        let all = catalogue();
        assert_eq!(list.len(), all.len());
        for (j, d) in list.iter().zip(&all) {
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
