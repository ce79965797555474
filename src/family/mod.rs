//! `sim family`: candidate routing rules judged over a random family of fleets and traffic
//! rather than over hand-picked setups.
//!
//! [`setup::Setup::draw`] draws N members from a seeded distribution (2-16 backends, equal or
//! mixed slots at ratios up to 6, agent bursts / waves / Poisson arrivals, background chat
//! users, 2-40 turns, 1-30 s scrapes with the arrivals anywhere in the window, shared
//! prefixes around the threshold). Every candidate ([`candidates`]) runs every member on the
//! same seeds (common random numbers); per member each metric's mean over the seeds is
//! compared with the best candidate's on that member (the regret), and the regrets'
//! distribution over the family is what ranks the candidates.
//!
//! Owns: the family's distribution, its candidates, its regret tables and plot. May not
//! see: simulation internals (each run is a `run::at_seed` of a validated scenario). Invariant:
//! the output is a pure function of (family seed, N, seeds, candidates): byte-identical for
//! any `--jobs`.

pub mod centre;
pub mod plot;
pub mod setup;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};

use crate::run::Failure;
use crate::scenario::{Scenario, Source};
use crate::sim::RunOptions;
use crate::trace::TraceCache;
use setup::{Setup, THRESHOLD_CHARS};

/// A candidate rule: a label and its `[router.policy]` inline table (`{T}` stands for the
/// member's threshold in characters).
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// Short label used in tables and plots.
    pub label: String,
    /// The policy table, `{T}` for the threshold.
    pub policy: String,
    /// Upstream status (or where a user's candidate came from), one phrase.
    pub upstream: String,
}

/// One member of a family: a runnable scenario and what the tables say of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    /// Index in the family (its random stream).
    pub index: u64,
    /// Scenario name, and the stem of its file under `members/`.
    pub name: String,
    /// One line on its fleet and traffic.
    pub description: String,
    /// True if its backends are not all alike.
    pub mixed: bool,
    /// Backends.
    pub backends: u32,
    /// The prefix-aware threshold, characters, that `{T}` stands for in its candidates.
    pub threshold_chars: u64,
    /// The scenario file's text.
    pub text: String,
}

impl From<&Setup> for Member {
    fn from(s: &Setup) -> Member {
        Member {
            index: s.index,
            name: s.name(),
            description: s.describe(),
            mixed: s.mixed(),
            backends: s.backends(),
            threshold_chars: THRESHOLD_CHARS,
            text: s.scenario().to_string(),
        }
    }
}

const PA: &str = "kind = \"prefixaware\", prefix_min_match_length = {T}";

/// The default candidates: production-stack main and PR #1089, the count-based fixes, the
/// capacity-aware rules with and without `follow` / `replace`, and the catalogue's routers.
pub fn candidates() -> Vec<Candidate> {
    let c = |label: &str, policy: &str, upstream: &str| Candidate {
        label: label.into(),
        policy: policy.into(),
        upstream: upstream.into(),
    };
    vec![
        c("qps (main)", "{PA, fallback = \"qps\"}", "production-stack main"),
        c(
            "#1089 band 1",
            "{PA, fallback = \"leastinflight\", band = 1}",
            "open PR #1089",
        ),
        c(
            "own in-flight",
            "{PA, fallback = \"local_inflight\", band = 0, tie = \"first\"}",
            "proposed (no flag)",
        ),
        c(
            "own in-flight + follow",
            "{PA, fallback = \"local_inflight\", band = 0, tie = \"first\", follow = true}",
            "proposed (no flag)",
        ),
        c(
            "scrape + sent",
            "{PA, fallback = \"scraped_plus_sent\", band = 0, tie = \"first\"}",
            "proposed (no flag)",
        ),
        c(
            "own/slots",
            "{PA, fallback = \"local_slots\", band = 0, tie = \"first\"}",
            "proposed: needs --static-max-num-seqs",
        ),
        c(
            "own/slots + follow",
            "{PA, fallback = \"local_slots\", band = 0, tie = \"first\", follow = true}",
            "proposed: needs --static-max-num-seqs",
        ),
        c(
            "own/slots + replace",
            "{PA, fallback = \"local_slots\", band = 0, tie = \"first\", replace = true}",
            "proposed: needs --static-max-num-seqs",
        ),
        c(
            "own/slots + follow + replace",
            "{PA, fallback = \"local_slots\", band = 0, tie = \"first\", follow = true, replace = true}",
            "proposed: needs --static-max-num-seqs",
        ),
        c(
            "(scrape + sent)/slots",
            "{PA, fallback = \"slots\", band = 0, tie = \"first\"}",
            "proposed: needs --static-max-num-seqs",
        ),
        c(
            "own/slots p2c",
            "{PA, fallback = \"local_slots\", band = 0, tie = \"first\", sample = 2}",
            "proposed: needs --static-max-num-seqs",
        ),
        c(
            "KV headroom",
            "{PA, fallback = \"kv_headroom\", band = 0, tie = \"first\"}",
            "proposed (scraped, no flag)",
        ),
        c(
            "least_slots (no prefix)",
            "{kind = \"least_slots\"}",
            "proposed: needs --static-max-num-seqs",
        ),
        c("least_request", "{kind = \"least_request\"}", "SGLang / AIBrix"),
        c("dynamo", "{kind = \"dynamo\"}", "Dynamo KV router"),
        c("llmd", "{kind = \"llmd\"}", "llm-d EPP scorers"),
        c("aibrix prefix-cache", "{kind = \"aibrix_prefix_cache\"}", "AIBrix"),
    ]
}

impl Candidate {
    /// The policy table for threshold `t` characters.
    pub fn table(&self, t: u64) -> String {
        self.policy.replace("PA", PA).replace("{T}", &t.to_string())
    }
}

/// The metrics the family judges, in report order.
pub const METRICS: [&str; 3] = ["idle_while_queued_s", "ttft_p99_s", "prefix_cache_hit_rate"];

/// Seconds added to both sides of an idle-while-queued ratio, so that a member where the
/// best candidate strands nothing compares in seconds, not as a division by zero.
pub const IDLE_FLOOR_S: f64 = 1.0;

/// One candidate on one member: means over the seeds.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    /// Mean of each of [`METRICS`].
    pub mean: [f64; 3],
}

/// The family's results.
#[derive(Clone, Debug)]
pub struct Family {
    /// Family seed.
    pub seed: u64,
    /// Run seeds per member (1..=seeds).
    pub seeds: u64,
    /// The centre's scenario file, when the members vary a user's scenario (else the
    /// built-in distribution).
    pub centre: Option<String>,
    /// Members.
    pub setups: Vec<Member>,
    /// Candidates.
    pub candidates: Vec<Candidate>,
    /// `cells[setup][candidate]`.
    pub cells: Vec<Vec<Cell>>,
    /// Simulated runs.
    pub runs: u64,
    /// The runs' summed wall time on their worker threads, seconds (about the CPU time;
    /// printed, never written to a file, which stays byte-identical).
    pub run_s: f64,
}

/// Draws members `0..n` of family `seed`.
pub fn draw(seed: u64, n: u64) -> Vec<Setup> {
    (0..n).map(|i| Setup::draw(seed, i)).collect()
}

/// The scenario source of `member` under `cand` (not yet validated).
pub fn source(member: &Member, cand: &Candidate) -> Result<Source> {
    let mut src = Source::parse(&member.text, &format!("{}.toml", member.name), &member.name)?;
    src.apply(
        &[("router.policy".into(), cand.table(member.threshold_chars))],
        &cand.label,
    )?;
    Ok(src)
}

/// Runs every candidate on every member on seeds `1..=seeds`, on `jobs` threads; `centre`
/// names the scenario the members vary, if any.
pub fn execute(
    seed: u64,
    centre: Option<String>,
    setups: Vec<Member>,
    cands: Vec<Candidate>,
    seeds: u64,
    jobs: usize,
) -> Result<Family> {
    if seeds == 0 || setups.is_empty() || cands.is_empty() {
        return Err(anyhow!(
            "the family needs at least one member, one candidate and one seed"
        ));
    }
    let scenarios = validated(&setups, &cands)?;
    // Member x candidate in order, each on seeds 1..=seeds.
    let runs: Vec<(usize, u64)> = (0..scenarios.len())
        .flat_map(|k| (1..=seeds).map(move |s| (k, s)))
        .collect();
    let traces = TraceCache::new();
    let rows = crate::run::parallel(jobs, &runs, |&(k, s)| measure(&scenarios[k], s, &traces))?;
    let rows: Vec<([f64; 3], f64)> = rows.into_iter().collect::<Result<_>>()?;
    Ok(Family {
        seed,
        centre,
        seeds,
        cells: means(&rows, setups.len(), cands.len(), seeds as usize),
        setups,
        candidates: cands,
        runs: runs.len() as u64,
        run_s: rows.iter().map(|r| r.1).sum(),
    })
}

/// Each (member, candidate) validated once, up front, in that order: a bad one fails
/// before any run.
fn validated(setups: &[Member], cands: &[Candidate]) -> Result<Vec<Scenario>> {
    let mut scenarios = Vec::with_capacity(setups.len() * cands.len());
    for s in setups {
        for c in cands {
            let sc = source(s, c)
                .and_then(|src| Ok(src.scenario()?))
                .with_context(|| format!("member {} under `{}` ({})", s.index, c.label, c.upstream))?;
            scenarios.push(sc);
        }
    }
    Ok(scenarios)
}

/// One run of `scenario` at `seed`: the metrics the family judges (see [`METRICS`]) and
/// the run's wall time on its thread, seconds.
fn measure(scenario: &Scenario, seed: u64, traces: &TraceCache) -> Result<([f64; 3], f64)> {
    let t0 = std::time::Instant::now();
    let res = crate::run::at_seed(scenario, seed, traces, RunOptions::summary_only()).map_err(|f| match f {
        Failure::Workload(e) => anyhow!("{}: {}", scenario.sim.name, e.message),
        Failure::Sim(e) => anyhow!("{e}"),
    })?;
    let s = &res.summary;
    Ok((
        [s.idle_while_queued_s, s.ttft_s.p99, s.prefix_cache_hit_rate],
        t0.elapsed().as_secs_f64(),
    ))
}

/// `cells[member][candidate]`: the means over the seeds of `rows` (member x candidate x
/// seed, in that order).
fn means(rows: &[([f64; 3], f64)], members: usize, candidates: usize, per: usize) -> Vec<Vec<Cell>> {
    (0..members)
        .map(|si| {
            (0..candidates)
                .map(|ci| {
                    let k = si * candidates + ci;
                    let mut mean = [0.0; 3];
                    for (r, _) in &rows[k * per..(k + 1) * per] {
                        for m in 0..3 {
                            mean[m] += r[m];
                        }
                    }
                    Cell {
                        mean: mean.map(|v| v / per as f64),
                    }
                })
                .collect()
        })
        .collect()
}

/// Regret of `x` against the member's best `best` for metric `m` (1 = the best; higher is
/// worse): idle-while-queued `(x + 1 s) / (best + 1 s)`, TTFT p99 `x / best`, hit rate
/// `best / x`.
pub fn regret(m: usize, x: f64, best: f64) -> f64 {
    match m {
        0 => (x + IDLE_FLOOR_S) / (best + IDLE_FLOOR_S),
        1 => x / best.max(1e-9),
        _ => best / x.max(1e-9),
    }
}

impl Family {
    /// The best mean of metric `m` on member `s`.
    pub fn best(&self, s: usize, m: usize) -> f64 {
        let it = self.cells[s].iter().map(|c| c.mean[m]);
        if m == 2 {
            it.fold(f64::NEG_INFINITY, f64::max)
        } else {
            it.fold(f64::INFINITY, f64::min)
        }
    }

    /// `regrets[candidate][setup]` of metric `m`.
    pub fn regrets(&self, m: usize) -> Vec<Vec<f64>> {
        (0..self.candidates.len())
            .map(|c| {
                (0..self.setups.len())
                    .map(|s| regret(m, self.cells[s][c].mean[m], self.best(s, m)))
                    .collect()
            })
            .collect()
    }

    /// The member indices of one hardware kind.
    pub fn members(&self, mixed: Option<bool>) -> Vec<usize> {
        (0..self.setups.len())
            .filter(|&s| mixed.is_none_or(|m| self.setups[s].mixed == m))
            .collect()
    }
}

/// The `q`-quantile of `v` (nearest rank on the sorted values; `NaN` when empty).
pub fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let k = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1;
    s[k]
}

fn fmt_ratio(x: f64) -> String {
    if x.is_nan() {
        "-".into()
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

/// Index of the reference candidate (`own in-flight`), if present.
fn reference(f: &Family) -> Option<usize> {
    f.candidates.iter().position(|c| c.label == "own in-flight")
}

/// `regret.md`: the regret table, the targets per candidate, and each candidate's
/// worst members.
pub fn write_regret_md(o: &mut Vec<u8>, f: &Family) -> Result<()> {
    let mut s = String::new();
    let eq = f.members(Some(false));
    let mx = f.members(Some(true));
    let _ = writeln!(
        s,
        "# Family regret\n\nFamily seed {}, {} members ({} equal, {} mixed hardware), {} candidates, seeds 1-{} per member (common random numbers), {} runs.\n",
        f.seed,
        f.setups.len(),
        eq.len(),
        mx.len(),
        f.candidates.len(),
        f.seeds,
        f.runs,
    );
    if let Some(c) = &f.centre {
        let _ = writeln!(
            s,
            "Centre: `{}`; member 0 is it as written, the others vary its fleet size, its traffic and its scrape (see `members/`).\n",
            crate::quote::one_line(c)
        );
    }
    let _ = writeln!(
        s,
        "Regret per member = the candidate's mean over the seeds against the best candidate's on that member \
         (1 = the best): idle-while-queued (x + {IDLE_FLOOR_S} s) / (best + {IDLE_FLOOR_S} s), TTFT p99 x / best, \
         prefix hit rate best / x. Median, 90th percentile and worst over the members.\n"
    );
    let regs: Vec<Vec<Vec<f64>>> = (0..3).map(|m| f.regrets(m)).collect();
    regret_table(&mut s, f, &regs, &eq, &mx);
    if let Some(r) = reference(f) {
        against_own(&mut s, f, &regs, r, &eq, &mx);
    }
    worst_members(&mut s, f, &regs);
    o.extend_from_slice(s.as_bytes());
    Ok(())
}

/// The regret table: per candidate, the median, 90th percentile and worst regret over the
/// members (`regs[metric][candidate][member]`), and the idle median on `eq`ual and `mx`ed
/// hardware.
fn regret_table(s: &mut String, f: &Family, regs: &[Vec<Vec<f64>>], eq: &[usize], mx: &[usize]) {
    let _ = writeln!(
        s,
        "| candidate | upstream | idle p50 | idle p90 | idle max | TTFT p99 p50 | TTFT p99 p90 | hit p50 | hit p90 | idle p50 equal | idle p50 mixed |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|");
    let pick = |v: &[f64], idx: &[usize]| -> Vec<f64> { idx.iter().map(|&i| v[i]).collect() };
    for (c, cand) in f.candidates.iter().enumerate() {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            cand.label,
            cand.upstream,
            fmt_ratio(quantile(&regs[0][c], 0.5)),
            fmt_ratio(quantile(&regs[0][c], 0.9)),
            fmt_ratio(quantile(&regs[0][c], 1.0)),
            fmt_ratio(quantile(&regs[1][c], 0.5)),
            fmt_ratio(quantile(&regs[1][c], 0.9)),
            fmt_ratio(quantile(&regs[2][c], 0.5)),
            fmt_ratio(quantile(&regs[2][c], 0.9)),
            fmt_ratio(quantile(&pick(&regs[0][c], eq), 0.5)),
            fmt_ratio(quantile(&pick(&regs[0][c], mx), 0.5)),
        );
    }
}

/// Each candidate against the reference `r` (`own in-flight`) per member, and whether its
/// idle-while-queued regret meets the targets.
fn against_own(s: &mut String, f: &Family, regs: &[Vec<Vec<f64>>], r: usize, eq: &[usize], mx: &[usize]) {
    let _ = writeln!(
        s,
        "\n## Against the router's own in-flight count\n\nPer member, the candidate's mean over the mean of `own in-flight` \
         (median over the members of each kind): idle-while-queued on mixed hardware (target <= 0.5) and TTFT p99 on equal \
         hardware (target <= 1), idle as (x + {IDLE_FLOOR_S} s) / (ref + {IDLE_FLOOR_S} s); and whether the \
         candidate's idle-while-queued regret over the whole family meets the issue's target (p50 <= 1.1, p90 <= 2).\n"
    );
    let _ = writeln!(
        s,
        "| candidate | idle mixed / own (p50) | idle mixed / own (p90) | TTFT p99 equal / own (p50) | TTFT p99 equal / own (p90) | idle regret p50 <= 1.1 and p90 <= 2 |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    for (c, cand) in f.candidates.iter().enumerate() {
        let idle: Vec<f64> = mx
            .iter()
            .map(|&i| (f.cells[i][c].mean[0] + IDLE_FLOOR_S) / (f.cells[i][r].mean[0] + IDLE_FLOOR_S))
            .collect();
        let ttft: Vec<f64> = eq
            .iter()
            .map(|&i| f.cells[i][c].mean[1] / f.cells[i][r].mean[1].max(1e-9))
            .collect();
        let meets = quantile(&regs[0][c], 0.5) <= 1.1 && quantile(&regs[0][c], 0.9) <= 2.0;
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} |",
            cand.label,
            fmt_ratio(quantile(&idle, 0.5)),
            fmt_ratio(quantile(&idle, 0.9)),
            fmt_ratio(quantile(&ttft, 0.5)),
            fmt_ratio(quantile(&ttft, 0.9)),
            if meets { "yes" } else { "no" }
        );
    }
}

/// Each candidate's three worst members by idle-while-queued regret.
fn worst_members(s: &mut String, f: &Family, regs: &[Vec<Vec<f64>>]) {
    let _ = writeln!(
        s,
        "\n## Worst members per candidate (idle-while-queued regret)\n\n| candidate | member | regret | idle s | best idle s (by) | setup |\n|---|---|---|---|---|---|"
    );
    for (c, cand) in f.candidates.iter().enumerate() {
        let mut order: Vec<usize> = (0..f.setups.len()).collect();
        order.sort_by(|&a, &b| regs[0][c][b].total_cmp(&regs[0][c][a]).then(a.cmp(&b)));
        for &i in order.iter().take(3) {
            let best = f.best(i, 0);
            let by = (0..f.candidates.len())
                .find(|&k| f.cells[i][k].mean[0] == best)
                .map_or("", |k| f.candidates[k].label.as_str());
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.1} | {:.1} ({}) | {} |",
                cand.label,
                f.setups[i].index,
                fmt_ratio(regs[0][c][i]),
                f.cells[i][c].mean[0],
                best,
                by,
                f.setups[i].description
            );
        }
    }
}

/// `family.csv`: one row per member x candidate, means and regrets.
pub fn write_csv(o: &mut Vec<u8>, f: &Family) -> Result<()> {
    let mut w = csv::Writer::from_writer(o);
    w.write_record([
        "member",
        "mixed",
        "backends",
        "candidate",
        "idle_while_queued_s",
        "ttft_p99_s",
        "prefix_cache_hit_rate",
        "regret_idle",
        "regret_ttft_p99",
        "regret_hit_rate",
        "setup",
    ])?;
    let regs: Vec<Vec<Vec<f64>>> = (0..3).map(|m| f.regrets(m)).collect();
    for (s, setup) in f.setups.iter().enumerate() {
        for (c, cand) in f.candidates.iter().enumerate() {
            let m = &f.cells[s][c].mean;
            w.write_record([
                setup.index.to_string(),
                setup.mixed.to_string(),
                setup.backends.to_string(),
                cand.label.clone(),
                format!("{:.4}", m[0]),
                format!("{:.4}", m[1]),
                format!("{:.5}", m[2]),
                format!("{:.4}", regs[0][c][s]),
                format!("{:.4}", regs[1][c][s]),
                format!("{:.4}", regs[2][c][s]),
                setup.description.clone(),
            ])?;
        }
    }
    w.flush()?;
    Ok(())
}

/// Writes `regret.md`, `family.csv`, `members/*.toml` and (with `dpi`) the regret plot;
/// returns the paths.
pub fn write_outputs(dir: &Path, f: &Family, dpi: Option<u32>) -> Result<Vec<PathBuf>> {
    let members = dir.join("members");
    std::fs::create_dir_all(&members).with_context(|| format!("creating {}", members.display()))?;
    let mut out = Vec::new();
    let mut put = |p: PathBuf, f: &dyn Fn(&mut Vec<u8>) -> Result<()>| -> Result<()> {
        crate::atomic::write_atomic(&p, f)?;
        out.push(p);
        Ok(())
    };
    put(dir.join("regret.md"), &|o| write_regret_md(o, f))?;
    put(dir.join("family.csv"), &|o| write_csv(o, f))?;
    for s in &f.setups {
        put(members.join(format!("{}.toml", s.name)), &|o| {
            o.extend_from_slice(s.text.as_bytes());
            Ok(())
        })?;
    }
    if let Some(dpi) = dpi {
        out.extend(plot::write(dir, f, dpi)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_valid_scenarios_under_every_candidate() {
        let cands = candidates();
        for (i, s) in draw(7, 300).into_iter().chain(draw(1, 100)).enumerate() {
            assert!((2..=16).contains(&s.backends()), "{s:?}");
            assert!(s.agents >= 2 && s.turns.0 >= 2 && s.turns.1 <= 40 && s.turns.0 <= s.turns.1);
            assert!([1, 2, 5, 10, 15, 20, 30].contains(&s.scrape_s));
            if s.mixed() {
                let r = f64::from(s.groups[0].slots) / f64::from(s.groups[1].slots);
                assert!(r > 1.0 && r <= 6.0, "{s:?}");
            }
            // Every member under the first candidate, the first 40 under all of them.
            for c in cands.iter().take(if i < 40 { cands.len() } else { 1 }) {
                let sc = source(&Member::from(&s), c)
                    .and_then(|src| Ok(src.scenario()?))
                    .unwrap_or_else(|e| panic!("member {} under {}: {e:#}", s.index, c.label));
                sc.workload().unwrap();
            }
        }
    }

    #[test]
    fn a_member_depends_only_on_the_family_seed_and_its_index() {
        assert_eq!(draw(3, 10)[4], Setup::draw(3, 4));
        assert_ne!(Setup::draw(3, 4), Setup::draw(4, 4));
        let all = draw(1, 200);
        assert!(all.iter().any(Setup::mixed) && all.iter().any(|s| !s.mixed()));
        assert!(all.iter().any(|s| s.system_prompt_tokens >= setup::THRESHOLD_TOKENS));
        assert!(all.iter().any(|s| s.system_prompt_tokens < setup::THRESHOLD_TOKENS));
    }

    #[test]
    fn regret_is_one_for_the_best_and_grows_with_distance() {
        assert_eq!(regret(0, 0.0, 0.0), 1.0);
        assert_eq!(regret(0, 9.0, 4.0), 2.0);
        assert_eq!(regret(1, 3.0, 1.5), 2.0);
        assert_eq!(regret(2, 0.45, 0.9), 2.0);
        assert_eq!(quantile(&[3.0, 1.0, 2.0], 0.5), 2.0);
        assert_eq!(quantile(&[3.0, 1.0, 2.0, 4.0], 0.9), 4.0);
        assert!(quantile(&[], 0.5).is_nan());
    }
}
