//! `sim alerts`: Prometheus rules for a scenario's fleet (or given pools), and with
//! `--test-out` a promtool unit test proving them on the scenario's run.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Args;

use super::out::outln;
use super::shared::{ScenarioArgs, load_scenario};
use crate::alerts::proof::{ALERTS, expected, promtool_test};
use crate::alerts::{AlertConfig, Pool, RuleFile, promql_duration, rules, to_yaml};
use crate::export::openmetrics::{instance_of, sample};
use crate::sim::{EngineMode, RunOptions};
use crate::time::SimDuration;

#[derive(Args, Debug)]
pub(super) struct AlertsArgs {
    /// Scenario whose fleet gives the pools (slots per backend group) and whose router's
    /// engine-stats interval sets the split alert's hold.
    scenario: Option<PathBuf>,
    /// Override the scenario's master seed.
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=i64::MAX as u64))]
    seed: Option<u64>,
    /// Override any scenario key: --set router.engine_stats_interval_s=10 (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE", value_parser = crate::scenario::parse_set)]
    sets: Vec<(String, String)>,
    /// Rules file to write (default: standard output).
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// A pool of equal backends: NAME=SLOTS, or NAME=SLOTS:INSTANCE,INSTANCE (repeatable;
    /// replaces the scenario's pools). Without instances the pool is every instance.
    #[arg(long = "pool", value_name = "NAME=SLOTS[:INSTANCES]")]
    pools: Vec<String>,
    /// PromQL label matchers for the vLLM series, e.g. 'job="vllm"'.
    #[arg(long, default_value = "")]
    selector: String,
    /// Prometheus's scrape interval for the engines, seconds (the rules' evaluation interval).
    #[arg(long, default_value_t = 15.0)]
    scrape_interval: f64,
    /// Hold of the split alert, seconds (default: 6 engine-stats intervals, at least 60).
    #[arg(long)]
    split_for: Option<f64>,
    /// Also run the scenario and write a promtool unit test (`promtool test rules FILE`) of
    /// the rules on its series; needs --output.
    #[arg(long, value_name = "FILE")]
    test_out: Option<PathBuf>,
}

/// Writes `text` to `p`, creating its folder.
fn write(p: &Path, text: &str) -> Result<()> {
    if let Some(d) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    crate::atomic::write_file(p, text.as_bytes()).with_context(|| format!("writing {}", p.display()))
}

fn secs(flag: &str, s: f64) -> Result<SimDuration> {
    if !(0.001..=1e7).contains(&s) {
        bail!("{flag} {s}: expected seconds between 0.001 and 1e7");
    }
    Ok(SimDuration((s * 1000.0).round() as u64 * 1_000_000))
}

fn parse_pool(spec: &str) -> Result<Pool> {
    let Some((name, rest)) = spec.split_once('=') else {
        bail!("--pool {spec}: expected NAME=SLOTS or NAME=SLOTS:INSTANCE,...");
    };
    if name.trim().is_empty() {
        bail!("--pool {spec}: the pool needs a name before `=`");
    }
    let (slots, inst) = rest.split_once(':').map_or((rest, None), |(s, i)| (s, Some(i)));
    let slots = match slots.trim().parse::<u32>() {
        Ok(n) if n > 0 => n,
        _ => bail!("--pool {spec}: slots must be a whole number of at least 1"),
    };
    let instances: Vec<String> = inst
        .map(|i| {
            i.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default();
    if inst.is_some() && instances.is_empty() {
        bail!("--pool {spec}: no instance after `:` (leave out `:` for every instance)");
    }
    Ok(Pool {
        name: name.trim().to_string(),
        slots,
        instances,
    })
}

/// A path as the file system resolves it: the file itself when it exists (symbolic links
/// followed), else its existing folder's, with the name appended.
fn resolved(p: &Path) -> PathBuf {
    if let Ok(c) = std::fs::canonicalize(p) {
        return c;
    }
    let folder = |p: &Path| -> PathBuf {
        p.parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf()
    };
    // A link to a file not written yet: where it points (a few links deep at most).
    let mut p = p.to_path_buf();
    for _ in 0..8 {
        match std::fs::read_link(&p) {
            Ok(t) => p = folder(&p).join(t),
            Err(_) => break,
        }
    }
    match (std::fs::canonicalize(folder(&p)), p.file_name()) {
        (Ok(d), Some(f)) => d.join(f),
        _ => p,
    }
}

/// Refuses a test file that is the rules file (by any path to it).
fn distinct_outputs(rules: Option<&Path>, test: Option<&Path>) -> Result<()> {
    if let (Some(o), Some(t)) = (rules, test)
        && resolved(o) == resolved(t)
    {
        bail!(
            "--test-out {} is the rules file --output {} names: the test would overwrite the rules",
            t.display(),
            o.display()
        );
    }
    Ok(())
}

/// A path as the test file reaches it: its file name when they share a folder.
fn relative_to(rules: &Path, test: &Path) -> String {
    let dir = |p: &Path| p.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir(rules) == dir(test) {
        rules
            .file_name()
            .map_or_else(String::new, |f| f.to_string_lossy().into_owned())
    } else {
        std::fs::canonicalize(rules)
            .unwrap_or(rules.to_path_buf())
            .display()
            .to_string()
    }
}

pub(super) fn cmd_alerts(a: AlertsArgs) -> Result<ExitCode> {
    let scrape = secs("--scrape-interval", a.scrape_interval)?;
    let mut pools: Vec<Pool> = a.pools.iter().map(|p| parse_pool(p)).collect::<Result<_>>()?;
    if a.test_out.is_some() && (a.scenario.is_none() || a.output.is_none()) {
        bail!("--test-out needs a scenario and --output");
    }
    distinct_outputs(a.output.as_deref(), a.test_out.as_deref())?;
    let loaded = match &a.scenario {
        Some(p) => Some(load_scenario(&ScenarioArgs {
            scenario: p.clone(),
            seed: a.seed,
            sets: a.sets.clone(),
        })?),
        None => None,
    };
    let mut interval = None;
    if let Some((sc, _, _)) = &loaded {
        interval = Some(sc.sim.router.engine_stats_interval);
        if pools.is_empty() {
            pools = scenario_pools(sc);
        }
    }
    let mut c = AlertConfig::new(scrape, interval, pools);
    c.selector = a.selector.clone();
    if let Some(s) = a.split_for {
        c.split_for = secs("--split-for", s)?;
    }
    c.validate()?;
    let file = rules(&c);
    let header = match &a.scenario {
        Some(p) => format!(
            "Written by `sim alerts {}`: fleetsim's rules on vLLM's series.",
            p.display()
        ),
        None => "Written by `sim alerts`: fleetsim's rules on vLLM's series.".to_string(),
    };
    let yaml = to_yaml(&file, &c, &header)?;
    match &a.output {
        Some(p) => write(p, &yaml)?,
        None => {
            super::out::out!("{yaml}")?;
            return Ok(ExitCode::SUCCESS);
        }
    }
    outln!("wrote {}", a.output.as_ref().expect("checked").display())?;
    if let (Some(test), Some((sc, wl, _))) = (&a.test_out, &loaded) {
        write_test(&a, test, sc, wl, &c, &file)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// One pool per (group, slots) of the scenario's backends: equal backends, as the skew
/// alert compares.
fn scenario_pools(sc: &crate::scenario::Scenario) -> Vec<Pool> {
    let mut pools: Vec<Pool> = Vec::new();
    let slots: Vec<u32> = sc.sim.models.iter().map(model_slots).collect();
    for (i, (_, url)) in sc.sim.backends.iter().enumerate() {
        let group = sc.sim.labels.get(i).map(|l| l.group.clone()).unwrap_or_default();
        let name = if group.is_empty() { "default".to_string() } else { group };
        let name = if pools.iter().any(|p| p.name == name && p.slots != slots[i]) {
            format!("{name}-{}", slots[i])
        } else {
            name
        };
        match pools.iter_mut().find(|p| p.name == name) {
            Some(p) => p.instances.push(instance_of(url)),
            None => pools.push(Pool {
                name,
                slots: slots[i],
                instances: vec![instance_of(url)],
            }),
        }
    }
    pools
}

/// `--test-out`: runs the scenario, samples its series at the scrape interval as vLLM
/// exports them, and writes to `test` the promtool test of the rules `file` (as written to
/// `--output`) on them; says when each alert fires.
fn write_test(
    a: &AlertsArgs,
    test: &Path,
    sc: &crate::scenario::Scenario,
    wl: &crate::workload::Workload,
    c: &AlertConfig,
    file: &RuleFile,
) -> Result<()> {
    let scrape = c.scrape_interval;
    let name = a.scenario.as_ref().expect("checked").display().to_string();
    let opts = RunOptions {
        record_series: true,
        record_decisions: false,
        check_invariants: false,
        record_event_log: false,
    };
    let (res, _) =
        crate::run::simulate(sc.sim.clone(), wl, opts, EngineMode::Fast).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    let s = sample(&res, &sc.sim, scrape.0);
    let exp = expected(&s, c);
    let rules_path = relative_to(a.output.as_ref().expect("checked"), test);
    let t = promtool_test(&s, c, file, &exp, &rules_path)?;
    write(test, &t)?;
    outln!("wrote {} (promtool test rules {})", test.display(), test.display())?;
    outln!(
        "{name}: idle_while_queued_s {}, run {} s, sampled every {}",
        res.summary.idle_while_queued_s,
        res.summary.sim_time_s,
        promql_duration(scrape)
    )?;
    for al in ALERTS {
        let st = exp.stretches(al);
        let text = if st.is_empty() {
            "never fires".to_string()
        } else {
            let parts: Vec<String> = st.iter().map(|(a, b)| format!("{a} s to {b} s")).collect();
            format!("fires {}", parts.join(", "))
        };
        outln!("  {al}: {text}")?;
    }
    Ok(())
}

fn model_slots(m: &crate::sim::BackendModel) -> u32 {
    match m {
        crate::sim::BackendModel::Vllm(v) => v.max_num_seqs,
        crate::sim::BackendModel::Queueing { slots } => *slots,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_parse_or_name_the_flag() {
        let p = parse_pool("h100=8:a:1,b:2").unwrap();
        assert_eq!((p.name.as_str(), p.slots, p.instances.len()), ("h100", 8, 2));
        assert!(parse_pool("x=8").unwrap().instances.is_empty());
        assert!(parse_pool("x").unwrap_err().to_string().contains("--pool x"));
        assert!(parse_pool("x=0").is_err());
        assert!(parse_pool("=4").unwrap_err().to_string().contains("needs a name"));
        assert!(parse_pool("x=4:").unwrap_err().to_string().contains("no instance"));
        assert!(secs("--scrape-interval", 0.0).is_err());
        assert_eq!(secs("--split-for", 1.5).unwrap(), SimDuration(1_500_000_000));
    }
}
