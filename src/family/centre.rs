//! A family around the user's own scenario (`sim family --center SCENARIO`), and the
//! user's own candidate rules (`--candidate`, `--candidates FILE`).
//!
//! Member 0 is the scenario as written; member `i` varies it from the named stream
//! `family-centre` (instance `i`) of the family seed: each backend group's count by -1, 0
//! or +1 (a group keeps at least one backend), every synthetic workload group's sessions by
//! one factor of 0.50 to 1.50, the scrape interval by 0.5x, 1x or 2x and its phase by
//! eighths. Trace replays keep their trace (the run seeds vary their dispatch); a key the
//! scenario does not write is not varied. A member is an ordinary scenario file, written
//! under `members/` as the built-in family's are.
//!
//! Owns: the variations around a centre, the candidate specs and files. Invariant: a member
//! depends only on (the centre, the family seed, its index).

use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};

use super::setup::THRESHOLD_CHARS;
use super::{Candidate, Member};
use crate::dist::uniform_index;
use crate::rng::{SimRng, stream};
use crate::scenario::{Scenario, Source};

/// Longest candidate label (it heads a table row and a plot panel).
const MAX_LABEL_CHARS: usize = 40;

/// Largest candidates file read.
const MAX_CANDIDATES_BYTES: u64 = 1 << 20;

/// Members `0..n` around `centre` (overrides applied), for family `seed`.
pub fn around(centre: &Source, seed: u64, n: u64) -> Result<Vec<Member>> {
    (0..n).map(|i| member(centre, seed, i)).collect()
}

/// Member `i`: the centre varied (or as written, for 0), renamed `<name>-NNN`; a variation
/// the scenario refuses (a fleet size its autoscaler bounds forbid, say) is left out.
fn member(centre: &Source, seed: u64, i: u64) -> Result<Member> {
    let base = centre.scenario()?;
    let name = format!("{}-{i:03}", base.sim.name);
    let mut r = stream(seed, "family-centre", i);
    let drawn = if i == 0 {
        Variation::default()
    } else {
        Variation::draw(&centre.table, &base, &mut r)
    };
    let mut last = None;
    for v in [drawn.clone(), drawn.without_fleet()] {
        let mut src = centre.clone();
        let mut sets = v.sets.clone();
        sets.push(("name".into(), format!("\"{name}\"")));
        src.apply(&sets, &format!("family member {i}"))?;
        match src.scenario() {
            Ok(sc) => return Ok(described(i, &name, &sc, &src, &v)),
            Err(e) => last = Some(e),
        }
    }
    Err(anyhow!(
        "family member {i} around {}: {}",
        centre.file,
        last.map_or_else(String::new, |e| e.to_string())
    ))
}

/// The member built from its validated scenario.
fn described(i: u64, name: &str, sc: &Scenario, src: &Source, v: &Variation) -> Member {
    let mut groups: Vec<&str> = sc.sim.labels.iter().map(|l| l.group.as_str()).collect();
    groups.dedup();
    let scrape_s = sc.sim.router.engine_stats_interval.as_secs_f64();
    let what = if v.notes.is_empty() {
        vec![format!("the centre as written, scrape {scrape_s} s")]
    } else {
        v.notes.clone()
    };
    Member {
        index: i,
        name: name.to_string(),
        description: format!("{}; {} backends", what.join(", "), sc.sim.backends.len()),
        mixed: groups.len() > 1,
        backends: sc.sim.backends.len() as u32,
        threshold_chars: threshold(&src.table),
        text: src.effective(),
    }
}

/// The centre's prefix-aware threshold in characters (what `{T}` stands for in the built-in
/// candidates), or the built-in family's when it has none.
fn threshold(table: &toml::Table) -> u64 {
    table
        .get("router")
        .and_then(|r| r.get("policy"))
        .and_then(|p| p.get("prefix_min_match_length"))
        .and_then(toml::Value::as_integer)
        .map_or(THRESHOLD_CHARS, |t| t.max(0) as u64)
}

/// One member's overrides, and what they changed in words.
#[derive(Clone, Debug, Default)]
struct Variation {
    sets: Vec<(String, String)>,
    notes: Vec<String>,
    /// How many of `sets` (the first) change the fleet.
    fleet: usize,
}

impl Variation {
    /// Draws the variation of the keys `table` writes (`base` is the centre, validated).
    fn draw(table: &toml::Table, base: &Scenario, r: &mut SimRng) -> Variation {
        let mut v = Variation::default();
        v.fleet_size(table, r);
        v.fleet = v.sets.len();
        let factor = (50 + 5 * uniform_index(r, 21)) as f64 / 100.0;
        let groups = table
            .get("workload")
            .and_then(|w| w.get("groups"))
            .and_then(toml::Value::as_array);
        let mut scaled = false;
        for (k, g) in groups.into_iter().flatten().enumerate() {
            if let Some(n) = g.get("sessions").and_then(toml::Value::as_integer) {
                let to = ((n as f64 * factor).round() as i64).max(1);
                v.sets.push((format!("workload.groups[{k}].sessions"), to.to_string()));
                scaled = true;
            }
        }
        if scaled {
            v.notes.push(format!("sessions x{factor:.2}"));
        }
        let interval_s = base.sim.router.engine_stats_interval.as_secs_f64();
        if interval_s > 0.0 {
            let times = [0.5, 1.0, 2.0][uniform_index(r, 3)];
            let phase = uniform_index(r, 8) as f64 / 8.0;
            v.sets.push((
                "router.engine_stats_interval_s".into(),
                (interval_s * times).to_string(),
            ));
            v.sets.push(("router.engine_stats_phase".into(), phase.to_string()));
            v.notes.push(format!("scrape {} s @{phase:.3}", interval_s * times));
        }
        v
    }

    /// Each backend group's count (or the fleet's `count`) by -1, 0 or +1, at least 1.
    fn fleet_size(&mut self, table: &toml::Table, r: &mut SimRng) {
        let backends = table.get("backends");
        let mut counts: Vec<(String, i64)> = Vec::new();
        if let Some(n) = backends.and_then(|b| b.get("count")).and_then(toml::Value::as_integer) {
            counts.push(("backends.count".into(), n));
        }
        let groups = backends.and_then(|b| b.get("groups")).and_then(toml::Value::as_array);
        for (k, g) in groups.into_iter().flatten().enumerate() {
            if let Some(n) = g.get("count").and_then(toml::Value::as_integer) {
                counts.push((format!("backends.groups[{k}].count"), n));
            }
        }
        let mut changed = Vec::new();
        for (key, n) in counts {
            let to = (n + uniform_index(r, 3) as i64 - 1).max(1);
            if to != n {
                changed.push(format!("{} {n}->{to}", key.trim_end_matches(".count")));
                self.sets.push((key, to.to_string()));
            }
        }
        if !changed.is_empty() {
            self.notes.push(changed.join(", "));
        }
    }

    /// The variation with the fleet as written.
    fn without_fleet(&self) -> Variation {
        Variation {
            sets: self.sets[self.fleet..].to_vec(),
            notes: self
                .notes
                .iter()
                .filter(|n| !n.starts_with("backends"))
                .cloned()
                .collect(),
            fleet: 0,
        }
    }
}

/// The centre's own policy as a candidate (`as written`), so every other candidate is
/// judged against what the user runs today.
pub fn as_written(centre: &Source) -> Candidate {
    let policy = centre
        .table
        .get("router")
        .and_then(|r| r.get("policy"))
        .map_or_else(|| "{}".to_string(), |p| p.to_string());
    Candidate {
        label: "as written".into(),
        policy,
        upstream: format!("the centre's own ({})", file_name(&centre.file)),
    }
}

/// A `--candidate LABEL={ TABLE }` spec.
pub fn parse_candidate(spec: &str) -> Result<Candidate> {
    let shown = crate::quote::one_line(spec);
    let Some((label, policy)) = spec.split_once('=') else {
        bail!("--candidate `{shown}`: expected LABEL={{ kind = \"...\", ... }}");
    };
    let (label, policy) = (label.trim(), policy.trim());
    check_label(label).map_err(|m| anyhow!("--candidate `{shown}`: {m}"))?;
    if !(policy.starts_with('{') && policy.ends_with('}')) {
        bail!("--candidate `{shown}`: the policy is an inline TOML table, {{ kind = \"...\", ... }}");
    }
    Ok(Candidate {
        label: label.into(),
        policy: policy.into(),
        upstream: "yours (--candidate)".into(),
    })
}

/// The candidates of a TOML file: `[[candidate]]` tables with `label`, `policy` (an inline
/// table) and an optional `upstream` note; errors name the file and key path.
pub fn read_candidates(path: &Path) -> Result<Vec<Candidate>> {
    let file = path.display().to_string();
    let text = crate::atomic::read_text(path, MAX_CANDIDATES_BYTES, "the candidates file")
        .map_err(|(_, m)| anyhow!("{file}: {m}"))?;
    let doc: toml::Table =
        toml::from_str(&text).map_err(|e| anyhow!("{file}: invalid TOML: {}", e.message().trim()))?;
    if let Some(k) = doc.keys().find(|k| *k != "candidate") {
        bail!(
            "{file}: {}: unknown key; expected [[candidate]] tables",
            crate::quote::one_line(k)
        );
    }
    let Some(list) = doc
        .get("candidate")
        .and_then(toml::Value::as_array)
        .filter(|l| !l.is_empty())
    else {
        bail!("{file}: no [[candidate]] table (label = \"...\", policy = {{ kind = \"...\" }})");
    };
    list.iter()
        .enumerate()
        .map(|(i, c)| one_candidate(c, &format!("{file}: candidate[{i}]"), &file))
        .collect()
}

/// One `[[candidate]]` table; `at` names it in errors.
fn one_candidate(c: &toml::Value, at: &str, file: &str) -> Result<Candidate> {
    let t = c.as_table().ok_or_else(|| anyhow!("{at}: expected a table"))?;
    if let Some(k) = t
        .keys()
        .find(|k| !["label", "policy", "upstream"].contains(&k.as_str()))
    {
        bail!(
            "{at}.{}: unknown key; expected label, policy, upstream",
            crate::quote::one_line(k)
        );
    }
    let label = t
        .get("label")
        .and_then(toml::Value::as_str)
        .ok_or_else(|| anyhow!("{at}.label: expected a string"))?;
    check_label(label).map_err(|m| anyhow!("{at}.label: {m}"))?;
    let policy = t
        .get("policy")
        .filter(|p| p.is_table())
        .ok_or_else(|| anyhow!("{at}.policy: expected a table, {{ kind = \"...\", ... }}"))?;
    let upstream = match t.get("upstream") {
        None => format!("yours ({})", file_name(file)),
        Some(u) => {
            let u = u.as_str().ok_or_else(|| anyhow!("{at}.upstream: expected a string"))?;
            check_label(u).map_err(|m| anyhow!("{at}.upstream: {m}"))?;
            u.to_string()
        }
    };
    Ok(Candidate {
        label: label.into(),
        policy: policy.to_string(),
        upstream,
    })
}

/// A label the tables and the plot can show as it is: one line of at most
/// [`MAX_LABEL_CHARS`], none of the characters that would break a Markdown table.
fn check_label(label: &str) -> Result<(), String> {
    if label.is_empty() {
        return Err("the label is empty".into());
    }
    if label.chars().count() > MAX_LABEL_CHARS {
        return Err(format!("the label is longer than {MAX_LABEL_CHARS} characters"));
    }
    if let Some(c) = label
        .chars()
        .find(|c| c.is_control() || matches!(c, '|' | '`' | '<' | '>'))
    {
        return Err(format!(
            "the label may not contain {}",
            crate::quote::one_line(&c.to_string())
        ));
    }
    Ok(())
}

/// Refuses two candidates with one label (the tables and the CSV key on it).
pub fn check_unique(cands: &[Candidate]) -> Result<()> {
    for (i, c) in cands.iter().enumerate() {
        if let Some(o) = cands[..i].iter().find(|o| o.label == c.label) {
            bail!(
                "two candidates are labelled `{}` ({} and {}); give each its own label",
                c.label,
                o.upstream,
                c.upstream
            );
        }
    }
    Ok(())
}

/// The file's name without its folder (the tables name it so; its path is the user's).
fn file_name(file: &str) -> String {
    Path::new(file)
        .file_name()
        .map_or_else(|| file.to_string(), |n| n.to_string_lossy().into_owned())
}

/// Reads the centre with its overrides.
pub fn read_centre(path: &Path, sets: &[(String, String)]) -> Result<Source> {
    let mut src = Source::read(path)?;
    src.apply(sets, "--set")?;
    src.scenario().with_context(|| format!("--center {}", path.display()))?;
    Ok(src)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn burst8() -> Source {
        Source::read(Path::new("scenarios/burst8.toml")).unwrap()
    }

    #[test]
    fn member_zero_is_the_centre_and_the_others_vary_it_deterministically() {
        let c = burst8();
        let m = around(&c, 3, 6).unwrap();
        assert_eq!(m[0].description, "the centre as written, scrape 10 s; 2 backends");
        assert_eq!(m[0].threshold_chars, 16_384);
        assert_eq!(m, around(&c, 3, 6).unwrap());
        assert_ne!(m[1..], around(&c, 4, 6).unwrap()[1..]);
        for x in &m {
            let src = Source::parse(&x.text, "m.toml", "m").unwrap();
            let sc = src.scenario().unwrap();
            assert_eq!(sc.sim.name, x.name);
            assert!((1..=3).contains(&sc.sim.backends.len()), "{}", x.description);
        }
        assert!(m[1..].iter().any(|x| x.description.contains("sessions x")), "{m:?}");
    }

    #[test]
    fn candidates_parse_and_bad_ones_are_named() {
        let c = parse_candidate("rr = { kind = \"roundrobin\" }").unwrap();
        assert_eq!(
            (c.label.as_str(), c.policy.as_str()),
            ("rr", "{ kind = \"roundrobin\" }")
        );
        for (spec, needle) in [
            ("rr", "expected LABEL="),
            ("= {}", "the label is empty"),
            ("a|b = {}", "may not contain |"),
            ("rr = roundrobin", "inline TOML table"),
        ] {
            let e = parse_candidate(spec).unwrap_err().to_string();
            assert!(e.contains(needle), "{spec}: {e}");
        }
        let two = [c.clone(), c];
        assert!(
            check_unique(&two)
                .unwrap_err()
                .to_string()
                .contains("two candidates are labelled `rr`")
        );
        assert_eq!(as_written(&burst8()).label, "as written");
        assert!(as_written(&burst8()).policy.contains("prefixaware"));
    }
}
