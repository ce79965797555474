//! `sim trace inspect|convert|bench`: read a request trace and summarise, convert or time it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Subcommand};

use super::out::{out, outln};

#[derive(Subcommand, Debug)]
pub(super) enum TraceCommand {
    /// Counts, span, rate, token distributions (p50/p90/p99/max), prefix sharing, inferred
    /// sessions and burstiness (most arrivals in any 1 s window); a table, or JSON.
    Inspect(TraceInspectArgs),
    /// Convert a trace to the native CSV (arrival_s,session_id,turn,input_tokens,
    /// output_tokens,block_ids), with sessions as the trace gives them or as inferred.
    ///
    /// Example: sim trace convert mooncake.jsonl --out trace.csv --sessions infer
    Convert(TraceConvertArgs),
    /// Parse a trace repeatedly and print the reader's throughput (rows/s).
    Bench(TraceBenchArgs),
}

#[derive(Args, Debug)]
pub(super) struct TraceReadArgs {
    /// Trace file.
    pub(super) file: PathBuf,
    /// Format: native, mooncake, azure, burstgpt, dynamo, otel or sessions (default:
    /// detected from the first line; sessions when --columns is given).
    #[arg(long)]
    pub(super) format: Option<String>,
    /// Count and report malformed rows instead of failing on the first.
    #[arg(long)]
    pub(super) skip_bad_rows: bool,
    /// Tokens per prefix block id (default: the trace's, Dynamo 16; else 512, Mooncake's).
    #[arg(long)]
    pub(super) block_tokens: Option<u32>,
    /// Column mapping of a `sessions` log: KEY=COLUMN,... with the scenario's `columns`
    /// keys (e.g. session=conv,start_s=t,latency_s=dur,input_tokens=in,output_tokens=out).
    #[arg(long)]
    pub(super) columns: Option<String>,
    /// OTel span attribute naming the session (repeatable; default gen_ai.conversation.id,
    /// then session.id, then the trace id).
    #[arg(long = "session-attribute")]
    pub(super) session_attributes: Vec<String>,
}

#[derive(Args, Debug)]
pub(super) struct TraceInspectArgs {
    #[command(flatten)]
    pub(super) read: TraceReadArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(super) json: bool,
}

#[derive(Args, Debug)]
pub(super) struct TraceConvertArgs {
    #[command(flatten)]
    pub(super) read: TraceReadArgs,
    /// Output CSV file.
    #[arg(long)]
    pub(super) out: PathBuf,
    /// Treat the trace argument as a results folder of `sim run` (requests.csv and
    /// scenario.toml): write its calls as a `sessions` CSV to --out and, next to it, a
    /// scenario (`<out stem>.toml`) that replays them closed-loop on the same fleet and router.
    #[arg(long)]
    pub(super) from_run: bool,
    /// Sessions to write: auto (the trace's ids, else inferred from prefix blocks, else
    /// none), infer, none, synthesize (default: the trace's own ids, else none).
    #[arg(long)]
    pub(super) sessions: Option<String>,
    /// Seed for --sessions synthesize.
    #[arg(long, default_value_t = 1)]
    pub(super) seed: u64,
}

#[derive(Args, Debug)]
pub(super) struct TraceBenchArgs {
    #[command(flatten)]
    pub(super) read: TraceReadArgs,
    /// Timed parses (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub(super) runs: u32,
}

pub(super) fn read_trace(a: &TraceReadArgs) -> Result<crate::trace::Trace> {
    let format = match &a.format {
        Some(f) => Some(crate::trace::Format::parse(f).map_err(|m| anyhow::anyhow!("--format: {m}"))?),
        None => None,
    };
    anyhow::ensure!(a.block_tokens != Some(0), "--block-tokens must be at least 1");
    let agent = crate::trace::agent_cfg::cli_read_options(a.columns.as_deref(), &a.session_attributes)
        .map_err(|m| anyhow::anyhow!("{m}"))?;
    let t = crate::trace::reader::read_with(
        &a.file,
        crate::trace::ReadOptions {
            format,
            skip_bad_rows: a.skip_bad_rows,
        },
        &agent,
    )?;
    for n in t.notes() {
        eprintln!("note: {n}");
    }
    Ok(t)
}

/// Tokens per block id: the flag, else what the trace says, else its format's default.
pub(super) fn block_tokens_of(a: &TraceReadArgs, t: &crate::trace::Trace) -> u32 {
    a.block_tokens.unwrap_or_else(|| crate::trace::model::block_tokens(t))
}

pub(super) fn cmd_trace(t: TraceCommand) -> Result<ExitCode> {
    use crate::trace::sessions::{InferConfig, SynthConfig};
    match t {
        TraceCommand::Inspect(a) => {
            let tr = read_trace(&a.read)?;
            let x = crate::trace::inspect::inspect(&tr, block_tokens_of(&a.read, &tr), &InferConfig::default());
            if a.json {
                outln!("{}", serde_json::to_string_pretty(&x)?)?;
            } else {
                out!("{}", crate::trace::inspect::render(&x))?;
            }
        }
        TraceCommand::Convert(a) if a.from_run => {
            let (n, scen) = crate::trace::from_run::convert(&a.read.file, &a.out)?;
            eprintln!(
                "wrote {n} calls to {} and the replay scenario {}",
                a.out.display(),
                scen.display()
            );
        }
        TraceCommand::Convert(a) => {
            let tr = read_trace(&a.read)?;
            let block_tokens = block_tokens_of(&a.read, &tr);
            let mode = match &a.sessions {
                Some(m) => Some(crate::trace::SessionMode::parse(m).map_err(|e| anyhow::anyhow!("--sessions: {e}"))?),
                None => None,
            };
            let mut n = 0;
            crate::atomic::write_with(&a.out, |tmp| {
                let mut w = std::io::BufWriter::new(std::fs::File::create(tmp)?);
                n = crate::trace::convert::write_native(
                    &tr,
                    mode,
                    &InferConfig::default(),
                    &SynthConfig::default(),
                    block_tokens,
                    a.seed,
                    &mut w,
                )?;
                std::io::Write::flush(&mut w)?;
                Ok(())
            })?;
            eprintln!("wrote {n} rows to {}", a.out.display());
        }
        TraceCommand::Bench(a) => {
            let mut times = Vec::new();
            let mut rows = 0;
            let bytes = std::fs::metadata(&a.read.file).map_or(0, |m| m.len());
            for _ in 0..a.runs.max(1) {
                let t0 = std::time::Instant::now();
                let tr = read_trace(&a.read)?;
                times.push(t0.elapsed().as_secs_f64());
                rows = tr.rows.len();
            }
            times.sort_by(f64::total_cmp);
            let med = times[times.len() / 2].max(1e-9);
            outln!(
                "{}: {rows} rows, {:.1} MB in {:.4} s (median of {}): {:.0} rows/s, {:.1} MB/s",
                a.read.file.display(),
                bytes as f64 / 1e6,
                med,
                times.len(),
                rows as f64 / med,
                bytes as f64 / 1e6 / med
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
