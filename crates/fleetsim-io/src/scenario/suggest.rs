//! "Did you mean" hints for unknown names: a policy kind written as its router's own name or
//! as a label copied from the README's tables (`least-request`, `prefixaware+qps`,
//! `sglang-cache`), and a mistyped key (`max_num_seq`).

/// README and upstream labels that are not edit-distance neighbours of their kind.
const ALIASES: &[(&str, &str)] = &[
    ("sglang-cache", "sglang_cache_aware"),
    ("cache_aware", "sglang_cache_aware"),
    ("lb-kvaware", "load_balanced_kvaware"),
    ("aibrix-prefix", "aibrix_prefix_cache"),
    ("prefix-cache", "aibrix_prefix_cache"),
    ("aibrix-preble", "aibrix_preble"),
    ("prefix-cache-preble", "aibrix_preble"),
    ("p2c-local", "power_of_d"),
    ("sglang-p2c", "power_of_d"),
    ("power_of_two", "power_of_d"),
    ("power-of-two", "power_of_d"),
    ("shortest_queue", "least_request"),
    ("kv", "dynamo"),
];

fn normal(s: &str) -> String {
    s.trim().to_ascii_lowercase().replace(['-', ' '], "_")
}

/// The known name closest to `got`, if one is close enough to be what was meant.
pub fn closest<'a>(got: &str, known: &[&'a str]) -> Option<&'a str> {
    let g = normal(got);
    // A README label: `prefixaware+qps` is prefixaware with a fallback.
    let base = g.split('+').next().unwrap_or(&g).to_string();
    for (alias, kind) in ALIASES {
        if normal(alias) == base
            && let Some(k) = known.iter().find(|k| *k == kind)
        {
            return Some(k);
        }
    }
    if let Some(k) = known.iter().find(|k| normal(k) == base) {
        return Some(k);
    }
    known
        .iter()
        .map(|k| (strsim::levenshtein(&base, &normal(k)), *k))
        .filter(|(d, k)| *d <= (k.len() / 3).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// `; did you mean `x`?`, or nothing.
pub fn hint(got: &str, known: &[&str]) -> String {
    closest(got, known).map_or_else(String::new, |k| format!("; did you mean `{k}`?"))
}

/// serde's `unknown field `x`, expected one of `a`, `b`` with a hint appended.
pub fn unknown_field(message: &str) -> String {
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return message.to_string();
    };
    let Some((got, tail)) = rest.split_once('`') else {
        return message.to_string();
    };
    let known: Vec<&str> = tail.split('`').skip(1).step_by(2).collect();
    format!("{message}{}", hint(got, &known))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readme_labels_and_upstream_names_find_their_kind() {
        let kinds = [
            "least_request",
            "prefixaware",
            "sglang_cache_aware",
            "load_balanced_kvaware",
            "power_of_d",
            "dynamo",
        ];
        assert_eq!(closest("least-request", &kinds), Some("least_request"));
        assert_eq!(closest("prefixaware+qps", &kinds), Some("prefixaware"));
        assert_eq!(closest("sglang-cache", &kinds), Some("sglang_cache_aware"));
        assert_eq!(closest("lb-kvaware", &kinds), Some("load_balanced_kvaware"));
        assert_eq!(closest("prefix_aware", &kinds), Some("prefixaware"));
        assert_eq!(closest("banana", &kinds), None);
        assert_eq!(
            unknown_field("unknown field `max_num_seq`, expected one of `count`, `max_num_seqs`"),
            "unknown field `max_num_seq`, expected one of `count`, `max_num_seqs`; did you mean `max_num_seqs`?"
        );
    }
}
