//! What `sim tune` searches: candidate routing configurations, from a space file
//! (`[[policy]]` entries whose lists expand to a Cartesian product) or from the default
//! space (`scenarios/tune/default-space.toml`, compiled in), plus the scenario's own
//! configuration, which is always candidate 0.

use crate::policy::registry::find;
use crate::scenario::Source;

/// The default space, compiled in so `sim tune` needs no file at run time.
pub const DEFAULT_SPACE: &str = include_str!("../../scenarios/tune/default-space.toml");

/// Label of the scenario's own configuration.
pub const OWN: &str = "scenario";

/// Most candidates a space may expand to: each needs at least two runs, so a larger space
/// cannot be tuned within [`super::halving::MAX_BUDGET`]; counted before anything is
/// expanded.
pub const MAX_CANDIDATES: usize = 10_000;

/// One routing configuration to try.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// Unique, human-readable: `leastinflight band=0 engine_stats_interval_s=1`.
    pub label: String,
    /// Overrides that turn the scenario into this candidate (empty for the scenario's own).
    pub sets: Vec<(String, String)>,
    /// `[router.policy]` as the candidate writes it (`kind` plus the parameters it sets;
    /// the rest keep their upstream defaults).
    pub policy: toml::Table,
    /// `[router]` keys the candidate sets.
    pub router: toml::Table,
}

impl Candidate {
    /// The policy kind.
    pub fn kind(&self) -> &str {
        self.policy.get("kind").and_then(toml::Value::as_str).unwrap_or("?")
    }

    /// The scenario's own configuration: its `[router.policy]` and `[router]` as written.
    pub fn own(src: &Source) -> Candidate {
        let router = src.table.get("router").and_then(toml::Value::as_table);
        let policy = router
            .and_then(|r| r.get("policy"))
            .and_then(toml::Value::as_table)
            .cloned()
            .unwrap_or_default();
        let router: toml::Table = router
            .map(|r| {
                r.iter()
                    .filter(|(k, _)| *k != "policy")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        Candidate {
            label: OWN.to_string(),
            sets: Vec::new(),
            policy,
            router,
        }
    }
}

/// A value as a label fragment: strings without quotes.
fn show(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn is_scalar(v: &toml::Value) -> bool {
    !matches!(v, toml::Value::Array(_) | toml::Value::Table(_))
}

/// `(key, values)` of one dimension; a scalar is a one-value list.
fn levels(src: &Source, at: &str, v: &toml::Value) -> Result<Vec<toml::Value>, String> {
    let list = match v {
        toml::Value::Array(a) => a.clone(),
        other => vec![other.clone()],
    };
    if list.is_empty() {
        return Err(src.message(at, "an empty list: give at least one value"));
    }
    if let Some(bad) = list.iter().find(|x| !is_scalar(x)) {
        return Err(src.message(
            at,
            &format!("`{bad}`: values are numbers, strings or booleans (a list of them is a range to try)"),
        ));
    }
    Ok(list)
}

/// One dimension of a space entry: whether it is a `[router]` key, the key, its values.
type Dim = (bool, String, Vec<toml::Value>);

/// Parses a space file. Errors are one line naming the file, the key path and its line.
pub fn parse(text: &str, file: &str) -> Result<Vec<Candidate>, String> {
    let src = Source::parse(text, file, "space").map_err(|e| e.to_string())?;
    if let Some(k) = src.table.keys().find(|k| *k != "policy") {
        return Err(src.message(k, "unknown key; a space file holds [[policy]] entries only"));
    }
    let entries = match src.table.get("policy") {
        Some(toml::Value::Array(a)) if !a.is_empty() => a,
        _ => return Err(format!("{file}: no [[policy]] entries")),
    };
    let mut out: Vec<Candidate> = Vec::new();
    let mut labels: std::collections::HashSet<String> = std::collections::HashSet::new();
    for (i, e) in entries.iter().enumerate() {
        let at = format!("policy[{i}]");
        let (kind, dims) = entry(&src, &at, e)?;
        // The entry's size, checked before a single candidate is built.
        let total = dims
            .iter()
            .try_fold(1usize, |acc, d| acc.checked_mul(d.2.len()))
            .filter(|&t| t <= MAX_CANDIDATES - out.len().min(MAX_CANDIDATES))
            .ok_or_else(|| {
                let sizes: Vec<String> = dims.iter().map(|d| format!("{} {}", d.2.len(), d.1)).collect();
                src.message(
                    &at,
                    &format!(
                        "expands to more candidates ({}) than the {MAX_CANDIDATES} a space may hold (with the {} before it); shorten its lists",
                        sizes.join(" x "),
                        out.len()
                    ),
                )
            })?;
        for n in 0..total {
            let c = candidate(kind, &dims, n);
            if c.label == OWN || !labels.insert(c.label.clone()) {
                return Err(src.message(
                    &at,
                    &format!("candidate {} is listed twice", crate::quote::quote(&c.label)),
                ));
            }
            out.push(c);
        }
    }
    Ok(out)
}

/// One `[[policy]]` entry (`at`): its kind and its dimensions in order, policy parameters
/// then router keys (each sorted by name).
fn entry<'a>(src: &Source, at: &str, e: &'a toml::Value) -> Result<(&'a str, Vec<Dim>), String> {
    let t = e
        .as_table()
        .ok_or_else(|| src.message(at, "expected a table ([[policy]])"))?;
    let kind = t
        .get("kind")
        .and_then(toml::Value::as_str)
        .ok_or_else(|| src.message(at, "needs `kind = \"...\"` (see `sim policies`)"))?;
    let doc = find(kind)
        .ok_or_else(|| {
            src.message(
                &format!("{at}.kind"),
                &format!(
                    "unknown policy `{kind}`; expected one of {}",
                    crate::policy::policy_kinds()
                ),
            )
        })?
        .doc();
    let mut dims: Vec<Dim> = Vec::new();
    for (k, v) in t {
        match k.as_str() {
            "kind" => {}
            "router" => {
                let r = v
                    .as_table()
                    .ok_or_else(|| src.message(&format!("{at}.router"), "expected a table of [router] keys"))?;
                for (rk, rv) in r {
                    if rk == "policy" {
                        return Err(src.message(
                            &format!("{at}.router.policy"),
                            "set policy parameters at the top of the entry, not under `router`",
                        ));
                    }
                    dims.push((true, rk.clone(), levels(src, &format!("{at}.router.{rk}"), rv)?));
                }
            }
            _ => {
                if !doc.params.iter().any(|p| p.key == k) {
                    let known: Vec<&str> = doc.params.iter().map(|p| p.key).collect();
                    let hint = if known.is_empty() {
                        "it has none".to_string()
                    } else {
                        format!("parameters: {}", known.join(", "))
                    };
                    return Err(src.message(&format!("{at}.{k}"), &format!("not a parameter of {kind} ({hint})")));
                }
                dims.push((false, k.clone(), levels(src, &format!("{at}.{k}"), v)?));
            }
        }
    }
    dims.sort_by_key(|(router, _, _)| *router);
    Ok((kind, dims))
}

/// Candidate `n` of an entry of `kind` over `dims` (the last dimension varying fastest).
fn candidate(kind: &str, dims: &[Dim], n: usize) -> Candidate {
    let mut rest = n;
    let mut pick = vec![0; dims.len()];
    for (j, d) in dims.iter().enumerate().rev() {
        pick[j] = rest % d.2.len();
        rest /= d.2.len();
    }
    let mut policy = toml::Table::new();
    policy.insert("kind".into(), toml::Value::String(kind.to_string()));
    let mut router = toml::Table::new();
    let mut label = kind.to_string();
    for ((is_router, k, vals), &j) in dims.iter().zip(&pick) {
        let v = vals[j].clone();
        label.push_str(&format!(" {k}={}", show(&v)));
        if *is_router {
            router.insert(k.clone(), v);
        } else {
            policy.insert(k.clone(), v);
        }
    }
    let mut sets = vec![(
        "router.policy".to_string(),
        toml::Value::Table(policy.clone()).to_string(),
    )];
    sets.extend(router.iter().map(|(k, v)| (format!("router.{k}"), v.to_string())));
    Candidate {
        label,
        sets,
        policy,
        router,
    }
}

/// The default space.
pub fn default_space() -> Vec<Candidate> {
    parse(DEFAULT_SPACE, "scenarios/tune/default-space.toml").expect("the default space parses")
}

/// Why a candidate was left out of the search.
#[derive(Clone, Debug, PartialEq)]
pub struct Dropped {
    /// The candidate.
    pub label: String,
    /// The reason.
    pub reason: String,
}

/// The candidates to search: the scenario's own configuration first, then the space's
/// entries that the scenario accepts and that differ from every earlier one (a candidate
/// that resolves to the same router configuration as an earlier one would only tie with
/// it). With `strict` (a user's space file), an entry the scenario rejects is an error.
pub fn resolve(src: &Source, space: Vec<Candidate>, strict: bool) -> Result<(Vec<Candidate>, Vec<Dropped>), String> {
    let own = src.scenario().map_err(|e| e.to_string())?;
    let mut seen = vec![own.sim.router.clone()];
    // Router configurations by their debug text, so a duplicate is found in O(1) (a linear
    // search made a space of 40,000 candidates take seconds); `==` decides within a bucket.
    let mut by_text: std::collections::HashMap<String, Vec<usize>> = std::collections::HashMap::new();
    by_text.entry(format!("{:?}", own.sim.router)).or_default().push(0);
    let mut kept = vec![Candidate::own(src)];
    let mut dropped = Vec::new();
    for c in space {
        let mut alt = src.clone();
        let checked = alt
            .apply(&c.sets, &format!("tune candidate {}", c.label))
            .and_then(|_| alt.scenario());
        match checked {
            Err(e) if strict => return Err(e.to_string()),
            Err(e) => dropped.push(Dropped {
                label: c.label,
                reason: e.message,
            }),
            Ok(sc) => {
                let bucket = by_text.entry(format!("{:?}", sc.sim.router)).or_default();
                if let Some(&j) = bucket.iter().find(|&&j| seen[j] == sc.sim.router) {
                    dropped.push(Dropped {
                        label: c.label,
                        reason: format!("the same router configuration as `{}`", kept[j].label),
                    });
                } else {
                    bucket.push(seen.len());
                    seen.push(sc.sim.router);
                    kept.push(c);
                }
            }
        }
    }
    Ok((kept, dropped))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_expand_policy_keys_first_then_router_keys() {
        let text = r#"
[[policy]]
kind = "leastinflight"
band = [0, 1]
router = { engine_stats_interval_s = [1, 10] }
[[policy]]
kind = "random"
"#;
        let c = parse(text, "s.toml").unwrap();
        let labels: Vec<&str> = c.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "leastinflight band=0 engine_stats_interval_s=1",
                "leastinflight band=0 engine_stats_interval_s=10",
                "leastinflight band=1 engine_stats_interval_s=1",
                "leastinflight band=1 engine_stats_interval_s=10",
                "random",
            ]
        );
        assert_eq!(
            c[1].sets,
            [
                (
                    "router.policy".to_string(),
                    "{ band = 0, kind = \"leastinflight\" }".to_string()
                ),
                ("router.engine_stats_interval_s".to_string(), "10".to_string()),
            ]
        );
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let e = parse("[[policy]]\nkind = \"leastinflight\"\nbnad = 1\n", "s.toml").unwrap_err();
        assert!(
            e.starts_with("s.toml:3:1: policy[0].bnad: not a parameter of leastinflight"),
            "{e}"
        );
        let e = parse("[[policy]]\nkind = \"nope\"\n", "s.toml").unwrap_err();
        assert!(e.contains("policy[0].kind: unknown policy `nope`"), "{e}");
        let e = parse(
            "[[policy]]\nkind = \"random\"\n[[policy]]\nkind = \"random\"\n",
            "s.toml",
        )
        .unwrap_err();
        assert!(e.contains("listed twice"), "{e}");
        let e = parse("[[policy]]\nkind = \"leastinflight\"\nband = []\n", "s.toml").unwrap_err();
        assert!(e.contains("policy[0].band: an empty list"), "{e}");
        assert!(parse("x = 1\n", "s.toml").unwrap_err().contains("unknown key"));
        assert!(parse("", "s.toml").unwrap_err().contains("no [[policy]]"));
    }

    #[test]
    fn the_size_of_a_space_is_checked_before_it_is_expanded() {
        // 9 million candidates took minutes to list (and memory to hold) when counted after.
        let list = |n: usize| (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(", ");
        let text = format!(
            "[[policy]]\nkind = \"leastinflight\"\nband = [{}]\nrouter = {{ engine_stats_interval_s = [{}] }}\n",
            list(3000),
            list(3000)
        );
        let t = std::time::Instant::now();
        let e = parse(&text, "s.toml").unwrap_err();
        assert!(
            e.contains(
                "policy[0]: expands to more candidates (3000 band x 3000 engine_stats_interval_s) than the 10000"
            ),
            "{e}"
        );
        assert!(t.elapsed().as_secs_f64() < 5.0);
        // 10,000 is allowed, and parses quickly (duplicates found by hashing).
        let text = format!("[[policy]]\nkind = \"leastinflight\"\nband = [{}]\n", list(10_000));
        let t = std::time::Instant::now();
        assert_eq!(parse(&text, "s.toml").unwrap().len(), 10_000);
        assert!(t.elapsed().as_secs_f64() < 5.0);
    }

    #[test]
    fn default_space_covers_every_catalogue_policy() {
        let space = default_space();
        for e in crate::policy::REGISTRY {
            assert!(space.iter().any(|c| c.kind() == e.kind()), "{} is missing", e.kind());
        }
    }

    #[test]
    fn resolve_puts_the_scenario_first_and_drops_duplicates() {
        let src = Source::parse(include_str!("../../scenarios/burst8.toml"), "b.toml", "b").unwrap();
        let (kept, dropped) = resolve(&src, default_space(), false).unwrap();
        assert_eq!(kept[0].label, OWN);
        assert_eq!(kept[0].kind(), "prefixaware");
        // burst8 sets prefixaware qps 16384 band 1 with a 10 s interval: the space's
        // `prefixaware fallback=qps prefix_min_match_length=16384` is the same router.
        assert!(
            dropped
                .iter()
                .any(|d| d.label == "prefixaware fallback=qps prefix_min_match_length=16384"),
            "{dropped:?}"
        );
        assert!(kept.len() > 40);
    }
}
