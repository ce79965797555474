//! Command-line interface: parse and dispatch, one file per subcommand.
//!
//! * `sim run`: one scenario, its summary and result files (`run.rs`);
//! * `sim sweep`: a grid of variants x seeds in parallel (`sweep.rs`);
//! * `sim merge`: the shards of a sweep into one sweep's files (`merge.rs`);
//! * `sim check`: `[expect]` bounds, `--determinism`, `--invariants`, JUnit (`check.rs`);
//! * `sim compare`: two runs, goldens or sweeps, metric by metric (`compare.rs`);
//! * `sim load`: a scenario's workload sent in real time to an OpenAI-compatible endpoint
//!   (`load.rs`, logic in `crate::live::load`);
//! * `sim explain`: a run's stranded capacity and its counterfactuals (`explain.rs`);
//! * `sim report`: a results folder as one self-contained HTML page (`report.rs`, markup in
//!   `crate::html`);
//! * `sim family`: candidate rules judged over a random family of fleets (`family.rs`, logic
//!   in `crate::family`);
//! * `sim policies`: the policy catalogue (`policies.rs`);
//! * `sim bench`: simulator speed on a scenario (`bench.rs`);
//! * `sim trace inspect | convert | bench`: request traces (`trace.rs`);
//! * `sim tune`: a routing configuration for a fleet and its traffic (`crate::tune::cli`);
//! * `sim profiles`: the model/GPU/TP profiles (`profiles.rs`);
//! * `sim import`: a scenario from router flags, Helm values and `vllm serve` flags
//!   (`crate::import`);
//! * `sim reference`: the reference pages and the guide's blocks generated from the code
//!   (`reference.rs`);
//! * `sim calibrate`, `sim validate`: a profile fitted to a real engine's series, and its
//!   error on per-request latencies (`calibrate.rs`, logic in `crate::calibrate`);
//! * `sim schema`: the scenario file's JSON Schema (`reference.rs`);
//! * `sim alerts`: Prometheus rules on vLLM's series and their promtool proof on a run
//!   (`alerts.rs`, logic in `crate::alerts`);
//! * `sim observe`: the stranding figures on a real fleet's series (`observe.rs`, logic in
//!   `crate::observe`, fetching in `crate::live::fetch`);
//! * `sim serve`: the fleet as vLLM servers over HTTP (`serve.rs`, logic in
//!   `crate::live::serve`);
//! * `sim conform`: real routers against the models that claim their policies
//!   (`conform.rs`, logic in `crate::live::conform`).
//!
//! Exit codes: 0 success; 1 a check failed (an invariant under `--invariants`, or in any
//! sweep run); 2 bad input or any other error (one line on stderr naming the file, key path
//! and line).

pub mod out;

mod alerts;
mod bench;
mod calibrate;
mod check;
mod compare;
mod conform;
mod explain;
mod family;
mod load;
mod merge;
mod observe;
mod policies;
mod profiles;
mod reference;
mod report;
mod run;
mod serve;
mod shared;
mod sweep;
mod trace;

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

pub use shared::default_out;

/// fleetsim: deterministic simulator of vLLM fleets behind a router with a stale view.
#[derive(Parser, Debug)]
#[command(name = "sim", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one scenario and write out/<scenario>/{summary.json, requests.csv, ...}.
    ///
    /// Example: sim run scenarios/burst8.toml --set router.policy.fallback=leastinflight
    Run(run::RunArgs),
    /// Run a grid of scenario variants x seeds in parallel; write sweep.csv, sweep.json,
    /// aggregate.csv, aggregate.md and heatmap/line plots.
    ///
    /// Axes come from the scenario's [sweep] table and from -L/-P (which replace file axes
    /// of the same name). Points are the Cartesian product, first axis slowest; seeds vary
    /// fastest. Output is byte-identical for any --jobs and for --shard + sim merge.
    ///
    /// Example: sim sweep scenarios/burst8.toml -L router.policy.fallback qps,leastinflight
    ///          -P router.engine_stats_interval_s 1 10 -D 1 --seeds 20
    Sweep(Box<sweep::SweepArgs>),
    /// Combine `sim sweep --shard K/N` outputs into the files one unsharded sweep writes.
    ///
    /// Example: sim merge out/sweep-scrape-band/shards/*.json
    Merge(merge::MergeArgs),
    /// Run scenarios and evaluate their [expect] bounds; print a pass/fail table, write
    /// JUnit XML; exit 1 if any bound fails, 2 on bad input.
    ///
    /// Example: sim check scenarios/ --determinism
    Check(check::CheckArgs),
    /// Compare two results (golden files, summary.json files, run folders, or sweep folders
    /// and sweep.json files point by point) metric by metric; exit 1 if any differs beyond
    /// the tolerance.
    ///
    /// A served or loaded run (`sim serve --out`, `sim load --out`) beside a simulated one
    /// is shown side by side instead: request share per backend, prefix hit rate,
    /// idle-while-queued, TTFT and end-to-end percentiles.
    ///
    /// Example: sim compare out/golden/burst8.json out/burst8 --rel-tol 0.01
    Compare(compare::CompareArgs),
    /// Replay the scenario's workload in real time against an OpenAI-compatible endpoint (a
    /// real router in front of `sim serve`, or any server): streaming requests, each
    /// session's prompts growing as the content model says; writes requests.csv (send,
    /// first token, last token, serving backend) and summary.json; exit 1 if a request did
    /// not finish, 2 if the target cannot be reached.
    ///
    /// Example: sim load scenarios/burst8.toml --target http://127.0.0.1:8000 --speed 4
    Load(Box<load::LoadArgs>),
    /// Run real routers (vllm-router, sglang-router, smg, production-stack's) between
    /// `sim serve` and `sim load`, policy by policy, beside the catalogue model that claims
    /// each policy over N seeds; writes conform.json and conform.md with a verdict per pair;
    /// exit 1 if a pair disagrees or failed.
    ///
    /// Example: sim conform scenarios/compare-agent-burst.toml --router vllm-router=venv/bin/vllm-router --speed 4
    Conform(Box<conform::ConformArgs>),
    /// Explain a run's stranded capacity in plain language: each worst episode (who idled,
    /// who queued), the decisions that caused it (branch, view and its age, truth), the
    /// sessions that stayed latched, and counterfactual re-runs on the same seed.
    ///
    /// The run is reproduced from RESULTS_DIR/scenario.toml (byte-identical by construction)
    /// and checked against RESULTS_DIR/summary.json; writes explain.md and explain.json there.
    ///
    /// Example: sim explain out/burst8 --policy '{ kind = "leastinflight", band = 0 }'
    Explain(explain::ExplainArgs),
    /// Write one self-contained HTML page of a results folder: the summary and hints, the
    /// time series with zoom, every figure, the explanation with its worst episode and the
    /// scenario; readable offline (data, figures and script inline).
    ///
    /// Example: sim report out/burst8 -o out/burst8.html
    Report(Box<report::ReportArgs>),
    /// List every routing policy: parameters with upstream defaults, the signals it reads
    /// and their freshness, and the upstream code it reproduces.
    Policies(policies::PoliciesArgs),
    /// Judge candidate routing rules over a random family of fleets and traffic: regret
    /// against each member's best candidate.
    Family(Box<family::FamilyArgs>),
    /// Measure simulator speed (events/s, requests/s) on a scenario; writes nothing unless
    /// --json is given.
    ///
    /// Example: sim bench scenarios/bench-10k.toml --runs 5
    Bench(bench::BenchArgs),
    /// Inspect or convert request traces in every format fleetsim reads: native CSV,
    /// Mooncake JSONL, Azure 2023 CSV, BurstGPT CSV, Dynamo agent JSONL
    /// (dynamo.request.trace.v1), OpenTelemetry GenAI spans (OTLP/JSON) and any per-call
    /// CSV or JSONL through a column mapping (sessions).
    ///
    /// Example: sim trace inspect traces/mooncake_conversation_sample.jsonl --json
    #[command(subcommand)]
    Trace(trace::TraceCommand),
    /// Recommend a routing configuration for the scenario's fleet and traffic: successive
    /// halving over a space of policies and parameters on common seeds, a ranked table
    /// with 95% intervals, why the winner wins, the Pareto front, and the winner as TOML
    /// and router flags (docs/tune.md).
    ///
    /// Example: sim tune scenarios/burst8.toml --budget 400 --out out/tune-burst8
    Tune(Box<crate::tune::cli::TuneArgs>),
    /// List the model/GPU/TP profiles (`profile = "..."` in [[backends.groups]]): step-time
    /// coefficients, KV capacity derived as vLLM does, and each one's source and commit.
    ///
    /// Example: sim profiles --json
    Profiles(profiles::ProfilesArgs),
    /// Write a commented scenario from a deployment's production-stack router flags, Helm
    /// values and `vllm serve` flags; each value's comment names the flag or key it came from.
    ///
    /// Example: sim import --router-args "--routing-logic prefixaware --static-backends
    ///          http://a:8000,http://b:8000 --static-models m,m" -o out/mine.toml
    Import(Box<crate::import::ImportArgs>),
    /// Write the reference pages generated from the code (every scenario key, every policy
    /// with its options, the scenario JSON Schema) and the generated blocks of the guide.
    ///
    /// The blocks are the counts, the policy table and the command tables of README.md and
    /// docs/**/*.md, between `<!-- generated: NAME -->` and `<!-- /generated -->`.
    ///
    /// Example: sim reference --root .
    Reference(reference::ReferenceArgs),
    /// Write Prometheus recording and alerting rules that detect, from vLLM's series alone,
    /// the failures fleetsim models (a free slot while another backend queues, request-share
    /// skew, all-zero engine stats, a stale scrape); with --test-out, a promtool unit test
    /// proving them on the scenario's run (docs/alerts-and-observe.md).
    ///
    /// Example: sim alerts scenarios/burst8.toml -o rules.yml --test-out rules.test.yml
    Alerts(Box<alerts::AlertsArgs>),
    /// Report `sim run`'s stranding figures (idle_while_queued_s, stranded_slot_s, the worst
    /// moment, request shares, the plot) on a real fleet's vLLM series: from a Prometheus
    /// server, a saved query_range answer, or the engines' /metrics.
    ///
    /// Example: sim observe --prometheus http://127.0.0.1:9090 --from 1700000000
    ///          --to 1700003600 --step 15 --slots 8
    Observe(Box<observe::ObserveArgs>),
    /// Fit a profile's step-time coefficients to a real vLLM engine's own series by
    /// replaying its measured requests through the engine model (Nelder-Mead); write the
    /// profile file scenarios name as `profile = "file:PATH"` (docs/validation.md).
    ///
    /// Example: sim calibrate traces/vllm-runs/RTX4090_Llama-3.1-8B -o out/rtx4090.toml
    Calibrate(Box<calibrate::CalibrateArgs>),
    /// Replay a measurement's requests with a profile and report measured vs simulated
    /// TTFT, TPOT, E2E and running/waiting, with a plot; --check bounds exit 1 when broken.
    ///
    /// Example: sim validate traces/vllm-runs/RTX4090_Llama-3.1-8B --profile out/rtx4090.toml
    Validate(Box<calibrate::ValidateArgs>),
    /// Print the scenario file's JSON Schema (editors can validate scenarios against it).
    ///
    /// Example: sim schema > scenario.schema.json
    Schema,
    /// Print a shell completion script for sim (bash, zsh, fish, elvish, powershell).
    ///
    /// Example: sim completions bash > ~/.local/share/bash-completion/completions/sim
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Serve the scenario's fleet as vLLM servers over HTTP, one loopback port per backend,
    /// each with the engine model of `sim run` behind it, on a clock --speed times faster
    /// than real time; point a real router at the URLs (docs/serve.md).
    ///
    /// Example: sim serve scenarios/burst8.toml --speed 10 --out out/burst8-served
    Serve(Box<serve::ServeArgs>),
}

/// Parses arguments and runs; never panics on user input.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return usage_error(&e),
    };
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            if is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            // One line whatever the message holds (user text is quoted with crate::quote at
            // its source; this is the net under it).
            eprintln!("error: {}", crate::quote::one_line(&format!("{e:#}")));
            // A scenario file with several mistakes: the others, one line each, in file order.
            if let Some(s) = e
                .chain()
                .find_map(|c| c.downcast_ref::<crate::scenario::ScenarioError>())
            {
                for line in s.lines().iter().skip(1) {
                    eprintln!("error: {}", crate::quote::one_line(line));
                }
            }
            ExitCode::from(2)
        }
    }
}

/// Help and version go to stdout (exit 0); a usage error is its first line alone on stderr
/// (exit 2), like every other bad input, without clap's usage block.
fn usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
        || e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    {
        let _ = e.print();
        return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        };
    }
    let text = e.render().to_string();
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("error: invalid arguments");
    eprintln!("{} (see --help)", line.trim_end());
    ExitCode::from(2)
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn dispatch(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Run(a) => run::cmd_run(a),
        Command::Sweep(a) => sweep::cmd_sweep(*a),
        Command::Merge(a) => merge::cmd_merge(a),
        Command::Check(a) => check::cmd_check(a),
        Command::Policies(a) => policies::cmd_policies(a),
        Command::Family(a) => family::cmd_family(*a),
        Command::Compare(a) => compare::cmd_compare(a),
        Command::Explain(a) => explain::cmd_explain(a),
        Command::Report(a) => report::cmd_report(*a),
        Command::Load(a) => load::cmd_load(*a),
        Command::Conform(a) => conform::cmd_conform(*a),
        Command::Bench(a) => bench::cmd_bench(a),
        Command::Trace(t) => trace::cmd_trace(t),
        Command::Tune(a) => crate::tune::cli::cmd_tune(*a),
        Command::Profiles(a) => profiles::cli(&a),
        Command::Import(a) => crate::import::run(*a),
        Command::Reference(a) => reference::cmd_reference(a),
        Command::Alerts(a) => alerts::cmd_alerts(*a),
        Command::Observe(a) => observe::cmd_observe(*a),
        Command::Calibrate(a) => calibrate::cmd_calibrate(*a),
        Command::Validate(a) => calibrate::cmd_validate(*a),
        Command::Schema => reference::cmd_schema(),
        Command::Completions { shell } => {
            use clap::CommandFactory as _;
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "sim", &mut buf);
            fleetsim_io::out!("{}", String::from_utf8_lossy(&buf))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve(a) => serve::cmd_serve(*a),
    }
}
