//! The policy registry: [`REGISTRY`] lists every policy, one line each, as the
//! [`PolicyKind`](super::kind::PolicyKind) its module implements. Scenario parsing,
//! `sim policies`, `sim tune` and the reference pages all read it; no other code spells a
//! kind name.

use super::kind::{Entry, Registered};

/// Every policy, in the order `sim policies` lists them.
pub static REGISTRY: &[&dyn Entry] = &[
    &Registered::<super::roundrobin::Kind>::ENTRY,
    &Registered::<super::session::Kind>::ENTRY,
    &Registered::<super::prefixaware::Kind>::ENTRY,
    &Registered::<super::leastinflight::Kind>::ENTRY,
    &Registered::<super::random::Kind>::ENTRY,
    &Registered::<super::leastrequest::Kind>::ENTRY,
    &Registered::<super::powerofd::Kind>::ENTRY,
    &Registered::<super::cacheaware::Kind>::ENTRY,
    &Registered::<super::llmd::Kind>::ENTRY,
    &Registered::<super::aibrix::Kind>::ENTRY,
    &Registered::<super::aibrix_preble::Kind>::ENTRY,
    &Registered::<super::kvaware::Kind>::ENTRY,
    &Registered::<super::kvaware::LoadBalancedKind>::ENTRY,
    &Registered::<super::loadaware::Kind>::ENTRY,
    &Registered::<super::dynamo::Kind>::ENTRY,
    &Registered::<super::capacity::Kind>::ENTRY,
    &Registered::<super::consistent_hash::Kind>::ENTRY,
    &Registered::<super::sticky::Kind>::ENTRY,
    &Registered::<super::prefix_hash::Kind>::ENTRY,
    &Registered::<super::vllm_kv_aware::Kind>::ENTRY,
];

/// The entry of `kind`, if there is one.
pub fn find(kind: &str) -> Option<&'static dyn Entry> {
    REGISTRY.iter().copied().find(|e| e.kind() == kind)
}

/// production-stack's routing logics (`vllm-router --routing-logic`), in registry order,
/// those on main first, then those of open pull requests.
pub fn routing_logics() -> Vec<(&'static dyn Entry, super::kind::RoutingLogic)> {
    let mut all: Vec<_> = REGISTRY
        .iter()
        .filter_map(|e| e.routing_logic().map(|l| (*e, l)))
        .collect();
    all.sort_by_key(|(_, l)| l.pr.is_some());
    all
}

/// Valid `router.policy.kind` values, comma-separated, in registry order.
pub fn policy_kinds() -> String {
    REGISTRY.iter().map(|e| e.kind()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_unique_and_found() {
        let mut kinds: Vec<&str> = REGISTRY.iter().map(|e| e.kind()).collect();
        let n = kinds.len();
        kinds.sort_unstable();
        kinds.dedup();
        assert_eq!(kinds.len(), n, "a kind is registered twice");
        for e in REGISTRY {
            assert_eq!(find(e.kind()).map(|f| f.kind()), Some(e.kind()));
        }
        assert!(find("nope").is_none());
        assert!(policy_kinds().starts_with("roundrobin, session, prefixaware, leastinflight, "));
    }
}
