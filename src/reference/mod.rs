//! Reference pages generated from the code, so they cannot drift from it: every scenario key
//! (from the JSON Schema derived on the raw scenario types), every policy with its options
//! (from the catalogue `sim policies` prints), and the schema itself for editors; and the
//! generated blocks of the hand-written pages ([`blocks`]: counts, the policy table, the
//! command tables).
//!
//! Owns: the rendering of `docs/reference/` and of the generated blocks. Sees: the raw
//! scenario schema ([`crate::scenario::ScenarioFile`]), the policy catalogue and the CLI's
//! command tree; never a run. Invariant: the output is a pure function of the code (no
//! clock, no paths, no hash-map order), so `tests/it/reference.rs` can compare the committed
//! files byte for byte.

pub mod blocks;

use schemars::schema_for;
use serde_json::Value;

use crate::scenario::ScenarioFile;

/// File name of the scenario key table.
pub const SCENARIO_KEYS: &str = "scenario-keys.md";
/// File name of the policy reference.
pub const POLICIES: &str = "policies.md";
/// File name of the scenario JSON Schema.
pub const SCHEMA: &str = "scenario.schema.json";
/// The one command that regenerates the committed reference pages and the generated blocks
/// of README.md and the guide (run at the repository's root).
pub const REGENERATE: &str = "cargo run --release -- reference --root .";
/// Where the reference pages live in the repository.
pub const DIR: &str = "docs/reference";

/// The scenario file's JSON Schema (draft 2020-12), with each key's doc comment and default.
pub fn schema() -> Value {
    let mut v = schema_for!(ScenarioFile).to_value();
    if let Some(o) = v.as_object_mut() {
        o.insert("title".into(), Value::String("fleetsim scenario".into()));
    }
    v
}

/// The schema as the committed `scenario.schema.json` text.
pub fn schema_text() -> String {
    let mut s = serde_json::to_string_pretty(&schema()).expect("a JSON value serialises");
    s.push('\n');
    s
}

/// Every generated file: (name, text), in a fixed order.
pub fn files() -> Vec<(&'static str, String)> {
    vec![
        (SCENARIO_KEYS, scenario_keys()),
        (POLICIES, policies()),
        (SCHEMA, schema_text()),
    ]
}

/// One row of the key table.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyRow {
    /// Dotted path; `[]` marks an array of tables (`workload.groups[].name`).
    pub path: String,
    /// TOML type.
    pub ty: String,
    /// Default, `required`, or empty when unset means "not given".
    pub default: String,
    /// First paragraph of the key's doc comment.
    pub meaning: String,
}

/// Every key path of the scenario file, in declaration order, depth first.
pub fn key_rows() -> Vec<KeyRow> {
    let root = schema();
    let mut rows = Vec::new();
    walk(&root, &root, "", &mut rows);
    rows
}

fn resolve<'a>(root: &'a Value, node: &'a Value) -> &'a Value {
    match node.get("$ref").and_then(Value::as_str) {
        Some(r) => r
            .strip_prefix("#/$defs/")
            .and_then(|name| root.get("$defs").and_then(|d| d.get(name)))
            .map_or(node, |n| resolve(root, n)),
        None => node,
    }
}

/// The non-null alternative of an `Option<T>` schema.
fn unwrap_option<'a>(root: &'a Value, node: &'a Value) -> &'a Value {
    for key in ["anyOf", "oneOf"] {
        if let Some(alts) = node.get(key).and_then(Value::as_array) {
            let some: Vec<&Value> = alts
                .iter()
                .filter(|a| a.get("type").and_then(Value::as_str) != Some("null"))
                .collect();
            if some.len() == 1 {
                return resolve(root, some[0]);
            }
        }
    }
    resolve(root, node)
}

fn type_name(root: &Value, node: &Value) -> String {
    let n = unwrap_option(root, node);
    let types: Vec<&str> = match n.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).filter(|t| *t != "null").collect(),
        _ => vec![],
    };
    if types.is_empty() {
        return "any".into();
    }
    types
        .iter()
        .map(|t| match *t {
            "object" => "table".to_string(),
            "array" => match n.get("items") {
                Some(items) if unwrap_option(root, items).get("properties").is_some() => "array of tables".into(),
                Some(items) => format!("array of {}", type_name(root, items)),
                None => "array".into(),
            },
            "number" => "float".into(),
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" or ")
}

fn default_text(v: &Value) -> String {
    match v {
        Value::String(s) => format!("`\"{s}\"`"),
        Value::Number(_) | Value::Bool(_) => format!("`{v}`"),
        Value::Array(a) if a.is_empty() => "`[]`".into(),
        _ => String::new(),
    }
}

fn meaning(root: &Value, prop: &Value) -> String {
    let d = prop
        .get("description")
        .or_else(|| unwrap_option(root, prop).get("description"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let first = d.split("\n\n").next().unwrap_or("");
    first
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

fn walk(root: &Value, node: &Value, prefix: &str, rows: &mut Vec<KeyRow>) {
    let node = unwrap_option(root, node);
    let Some(props) = node.get("properties").and_then(Value::as_object) else {
        return;
    };
    let required: Vec<&str> = node
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (key, prop) in props {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        let default = match prop.get("default") {
            Some(v) => default_text(v),
            None if required.contains(&key.as_str()) => "required".into(),
            None => String::new(),
        };
        rows.push(KeyRow {
            path: path.clone(),
            ty: type_name(root, prop),
            default,
            meaning: meaning(root, prop),
        });
        let inner = unwrap_option(root, prop);
        if inner.get("properties").is_some() {
            walk(root, inner, &path, rows);
        } else if let Some(items) = inner.get("items") {
            walk(root, items, &format!("{path}[]"), rows);
        }
    }
}

/// `scenario-keys.md`.
pub fn scenario_keys() -> String {
    let mut s = String::from(
        "# Scenario keys\n\n\
         Every key a scenario file accepts, with its type, default and meaning. Generated from the\n\
         scenario types' doc comments (`crates/fleetsim-io/src/scenario/schema.rs` and\n\
         `backends.rs` beside it) by `sim reference --root .`; do not edit by hand. `[]` marks an array of tables\n\
         (`[[workload.groups]]`). The options of each `router.policy` kind are in\n\
         [policies.md](policies.md); the `[sweep]` and `[expect]` tables belong to `sim sweep` and\n\
         `sim check`. Editors can validate a scenario against\n\
         [scenario.schema.json](scenario.schema.json) (JSON Schema of the TOML's data model).\n\n\
         | key | type | default | meaning |\n|---|---|---|---|\n",
    );
    for r in key_rows() {
        s.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            r.path, r.ty, r.default, r.meaning
        ));
    }
    s
}

fn cell(v: Option<&Value>) -> String {
    v.and_then(Value::as_str)
        .unwrap_or("")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// `policies.md`, from the catalogue `sim policies --json` prints.
pub fn policies() -> String {
    let list: Vec<Value> = serde_json::from_str(&crate::policy::catalogue::to_json()).expect("the catalogue is JSON");
    let mut s = String::from(
        "# Routing policies\n\n\
         Every `router.policy` kind, its options with their upstream defaults, the signals it reads\n\
         and the upstream code it reproduces. Generated from the policy catalogue (`sim policies\n\
         --json`) by `sim reference --root .`; do not edit by hand.\n\n\
         | kind | reproduces |\n|---|---|\n",
    );
    for p in &list {
        let kind = cell(p.get("kind"));
        s.push_str(&format!("| [`{kind}`](#{kind}) | {} |\n", cell(p.get("source"))));
    }
    for p in &list {
        s.push_str(&format!("\n## {}\n\n", cell(p.get("kind"))));
        s.push_str(&format!("- Reproduces: {}\n", cell(p.get("source"))));
        s.push_str(&format!("- Decides: {}\n", cell(p.get("decision"))));
        s.push_str(&format!("- Reads: {}\n\n", cell(p.get("signals"))));
        let params = p.get("params").and_then(Value::as_array).cloned().unwrap_or_default();
        if params.is_empty() {
            s.push_str("No options besides `kind`.\n");
            continue;
        }
        s.push_str("| option | default | meaning |\n|---|---|---|\n");
        for q in &params {
            s.push_str(&format!(
                "| `{}` | `{}` | {} |\n",
                cell(q.get("key")),
                cell(q.get("default")),
                cell(q.get("meaning"))
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_cover_nested_tables_and_arrays_of_tables() {
        let rows = key_rows();
        let find = |p: &str| {
            rows.iter()
                .find(|r| r.path == p)
                .unwrap_or_else(|| panic!("no row {p}"))
        };
        assert_eq!(find("seed").default, "`1`");
        assert_eq!(find("router.engine_stats_interval_s").ty, "float");
        assert_eq!(find("workload.groups").ty, "array of tables");
        assert!(rows.iter().any(|r| r.path.starts_with("workload.groups[].")));
        assert!(rows.iter().any(|r| r.path == "backends.groups"));
        assert!(rows.iter().any(|r| r.path == "backends.max_num_seqs"));
        assert_eq!(find("workload").default, "required");
        assert!(
            rows.iter().all(|r| !r.meaning.is_empty()),
            "every key has a doc comment"
        );
    }

    #[test]
    fn output_is_a_pure_function_of_the_code() {
        assert_eq!(files(), files());
    }
}
