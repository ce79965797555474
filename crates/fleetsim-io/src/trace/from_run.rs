//! `sim trace convert --from-run DIR`: a run's own requests as a `sessions` trace, plus a
//! scenario replaying them closed-loop on the same fleet and router.
//!
//! Mapping (requests.csv → sessions CSV): `session` → `session`, `turn` → `turn`,
//! `t_router_s` → `start_s`, `t_done_s` → `end_s`, `prompt_tokens` → `input_tokens`,
//! `output_tokens` → `output_tokens`, and the session's group's `system_prompt` name →
//! `model` (its `system_prompt_tokens` become `shared_prefix_tokens` for that name, so
//! groups sharing a prompt share it in the replay too). Times are copied as written (ns).
//! Requests that did not complete are left out (their retries are separate rows).
//! Replaying the result reproduces every arrival of the run exactly as long as the policy
//! does not hash the session key (the replay names sessions `run-<n>`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// Converts `dir`; writes the calls to `out` and the scenario to `out` with `.toml`.
/// Returns the calls written and the scenario's path.
pub fn convert(dir: &Path, out: &Path) -> Result<(usize, PathBuf)> {
    let (scen_path, mut table) = run_scenario(dir)?;
    let prompts = group_prompts(&table, &scen_path)?;
    let (mut rdr, req_path, cols) = open_requests(dir)?;
    let file_name = out
        .file_name()
        .and_then(|s| s.to_str())
        .context("--out names no file")?
        .to_string();
    let mut n = 0;
    let mut shared: BTreeMap<String, i64> = BTreeMap::new();
    // Whole or absent: written to a temporary sibling and renamed.
    crate::atomic::write_with(out, |tmp| {
        let f = std::fs::File::create(tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
        let mut w = csv::Writer::from_writer(std::io::BufWriter::new(f));
        copy_rows(&mut rdr, &mut w, &req_path, &prompts, cols, &mut n, &mut shared)?;
        w.flush()?;
        Ok(())
    })?;
    replay_scenario(&mut table, file_name, shared);
    let scen = out.with_extension("toml");
    let body = format!(
        "# Replays the requests of {} closed-loop (sim trace convert --from-run).\n{}",
        crate::quote::path(dir),
        toml::to_string(&table)?
    );
    crate::atomic::write_file(&scen, body.as_bytes()).with_context(|| format!("cannot write {}", scen.display()))?;
    Ok((n, scen))
}

/// The run's scenario (its path and table). The folder must hold one whole run (a
/// truncated requests.csv would convert to a shorter replay; an edited or missing manifest
/// is not a run).
fn run_scenario(dir: &Path) -> Result<(PathBuf, toml::Table)> {
    crate::atomic::verify(dir)?;
    let scen_path = dir.join("scenario.toml");
    let text = crate::atomic::read_text(&scen_path, crate::scenario::MAX_SCENARIO_BYTES, "the scenario")
        .map_err(|(_, m)| anyhow::anyhow!("{}: {m}", scen_path.display()))?;
    let table: toml::Table = toml::from_str(&text).with_context(|| format!("parsing {}", scen_path.display()))?;
    Ok((scen_path, table))
}

/// Each group's shared prompt: group name -> (prompt name, tokens). A run of traces has no
/// groups to convert.
fn group_prompts(table: &toml::Table, scen_path: &Path) -> Result<BTreeMap<String, (String, i64)>> {
    let workload = table.get("workload").and_then(toml::Value::as_table);
    if workload.and_then(|w| w.get("traces")).is_some() {
        bail!(
            "{}: the run replays traces; --from-run converts runs of [[workload.groups]] only",
            scen_path.display()
        );
    }
    let mut prompts = BTreeMap::new();
    for g in workload
        .and_then(|w| w.get("groups"))
        .and_then(toml::Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = g
            .get("name")
            .and_then(toml::Value::as_str)
            .unwrap_or_default()
            .to_string();
        let tokens = g
            .get("system_prompt_tokens")
            .and_then(toml::Value::as_integer)
            .unwrap_or(0);
        let prompt = g
            .get("system_prompt")
            .and_then(toml::Value::as_str)
            .map_or_else(|| name.clone(), str::to_string);
        prompts.insert(name, (prompt, tokens));
    }
    Ok(prompts)
}

/// The run's requests.csv, its path, and where its columns session, turn, t_router_s,
/// t_done_s, prompt_tokens and output_tokens stand.
fn open_requests(dir: &Path) -> Result<(csv::Reader<super::lines::Capped<std::fs::File>>, PathBuf, [usize; 6])> {
    let req_path = dir.join("requests.csv");
    if !req_path.exists() && dir.join("requests.parquet").exists() {
        bail!(
            "{}: --from-run reads requests.csv, and this run was written with --format parquet; run `sim run` again without it",
            dir.display()
        );
    }
    let req_file = std::fs::File::open(&req_path).with_context(|| format!("{}: cannot read", req_path.display()))?;
    let mut rdr = csv::ReaderBuilder::new()
        .flexible(false)
        .from_reader(super::lines::Capped::new(req_file));
    let header = rdr
        .headers()
        .with_context(|| format!("{}: cannot read the header", req_path.display()))?
        .clone();
    let col = |n: &str| {
        header
            .iter()
            .position(|h| h == n)
            .with_context(|| format!("{}: no column `{n}`", req_path.display()))
    };
    let cols = [
        col("session")?,
        col("turn")?,
        col("t_router_s")?,
        col("t_done_s")?,
        col("prompt_tokens")?,
        col("output_tokens")?,
    ];
    Ok((rdr, req_path, cols))
}

/// The run's scenario turned into the replay's: named `<name>-replay`, its workload one
/// closed-loop `sessions` trace of `file_name` (each group's shared prompt as a
/// `shared_prefix_tokens` entry), its tool tables dropped.
fn replay_scenario(table: &mut toml::Table, file_name: String, shared: BTreeMap<String, i64>) {
    let name = table
        .get("name")
        .and_then(toml::Value::as_str)
        .unwrap_or("run")
        .to_string();
    table.insert("name".into(), toml::Value::String(format!("{name}-replay")));
    for k in ["workload", "expect", "sweep"] {
        table.remove(k);
    }
    let mut columns = toml::Table::new();
    for (k, v) in [
        ("session", "session"),
        ("turn", "turn"),
        ("start_s", "start_s"),
        ("end_s", "end_s"),
        ("input_tokens", "input_tokens"),
        ("output_tokens", "output_tokens"),
        ("model", "model"),
    ] {
        columns.insert(k.into(), toml::Value::String(v.into()));
    }
    let mut t = toml::Table::new();
    t.insert("file".into(), toml::Value::String(file_name));
    t.insert("name".into(), toml::Value::String("run".into()));
    t.insert("format".into(), toml::Value::String("sessions".into()));
    t.insert("mode".into(), toml::Value::String("closed".into()));
    t.insert("columns".into(), toml::Value::Table(columns));
    if !shared.is_empty() {
        let sp: toml::Table = shared.into_iter().map(|(k, v)| (k, toml::Value::Integer(v))).collect();
        t.insert("shared_prefix_tokens".into(), toml::Value::Table(sp));
    }
    let mut wl = toml::Table::new();
    wl.insert("traces".into(), toml::Value::Array(vec![toml::Value::Table(t)]));
    table.insert("workload".into(), toml::Value::Table(wl));
}

/// Copies the completed requests of `rdr` as sessions rows (`c`: the columns session,
/// turn, t_router_s, t_done_s, prompt_tokens, output_tokens).
#[allow(clippy::too_many_arguments)]
fn copy_rows<R: std::io::Read, W: std::io::Write>(
    rdr: &mut csv::Reader<R>,
    w: &mut csv::Writer<W>,
    req_path: &Path,
    prompts: &BTreeMap<String, (String, i64)>,
    c: [usize; 6],
    n: &mut usize,
    shared: &mut BTreeMap<String, i64>,
) -> Result<()> {
    let [cs, ct, cr, cd, cp, co] = c;
    w.write_record([
        "session",
        "turn",
        "start_s",
        "end_s",
        "input_tokens",
        "output_tokens",
        "model",
    ])?;
    for rec in rdr.records() {
        let rec = rec.with_context(|| format!("{}: malformed row", req_path.display()))?;
        if rec[cd].is_empty() {
            continue;
        }
        let session = &rec[cs];
        let group = session.rsplit_once('-').map_or(session, |(g, _)| g);
        let model = match prompts.get(group) {
            Some((p, t)) if *t > 0 => {
                shared.insert(p.clone(), *t);
                p.as_str()
            }
            _ => "",
        };
        w.write_record([session, &rec[ct], &rec[cr], &rec[cd], &rec[cp], &rec[co], model])?;
        *n += 1;
    }
    Ok(())
}
