//! `[router.policy]`: the table's `kind` picks a registry entry
//! ([`fleetsim_core::policy::REGISTRY`]), which parses and validates the rest; this module
//! only converts the TOML table and puts the entry's errors under `router.policy`.

use super::{FieldError, Res, tag, without};
use fleetsim_core::policy::kind::Fleet;
use fleetsim_core::policy::params::ParamValue;
use fleetsim_core::policy::registry::find;
use fleetsim_core::policy::{PolicyConfig, policy_kinds};

pub(super) fn policy(t: Option<&toml::Table>, fleet: Fleet) -> Res<PolicyConfig> {
    let path = "router.policy";
    let Some(t) = t else {
        return Err(FieldError::new(
            path,
            format!("missing [router.policy] table with `kind` (one of {})", policy_kinds()),
        ));
    };
    let kind = tag(t, "kind", path, &policy_kinds())?;
    let Some(entry) = find(kind) else {
        return Err(FieldError::new(
            format!("{path}.kind"),
            format!(
                "unknown policy `{kind}`; expected one of {}{}",
                policy_kinds(),
                super::suggest::hint(
                    kind,
                    &fleetsim_core::policy::registry::REGISTRY
                        .iter()
                        .map(|e| e.kind())
                        .collect::<Vec<_>>()
                )
            ),
        ));
    };
    entry.parse(param_value(&without(t, "kind")), &fleet).map_err(|e| {
        let at = if e.key.is_empty() {
            path.to_string()
        } else if e.key.starts_with('[') {
            format!("{path}{}", e.key)
        } else {
            format!("{path}.{}", e.key)
        };
        FieldError::new(at, super::suggest::unknown_field(&e.message))
    })
}

/// A TOML value as the core's policy parameters take it (datetimes as their text).
fn param_value(v: &toml::Value) -> ParamValue {
    match v {
        toml::Value::Boolean(b) => ParamValue::Bool(*b),
        toml::Value::Integer(i) => ParamValue::Int(*i),
        toml::Value::Float(f) => ParamValue::Float(*f),
        toml::Value::String(s) => ParamValue::Str(s.clone()),
        toml::Value::Datetime(d) => ParamValue::Str(d.to_string()),
        toml::Value::Array(a) => ParamValue::Array(a.iter().map(param_value).collect()),
        toml::Value::Table(t) => ParamValue::Table(t.iter().map(|(k, v)| (k.clone(), param_value(v))).collect()),
    }
}
