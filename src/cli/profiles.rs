//! `sim profiles`: the shipped latency profiles as a table or JSON, profile files `sim
//! calibrate` wrote, and what auto profiles are derived from (`--gpus`, `--models`,
//! `--physics`).

use std::path::PathBuf;

use anyhow::anyhow;

use super::out::{out, outln};
use crate::profiles;
use crate::profiles::file::ProfileFile;

/// `sim profiles` arguments.
#[derive(clap::Args, Debug)]
pub struct ProfilesArgs {
    /// Print JSON (one object per profile, with source repository and commit).
    #[arg(long)]
    pub json: bool,
    /// List the GPU datasheets `profile = "auto"` and `--gpu NAME` know, with sources.
    #[arg(long, conflicts_with_all = ["models", "physics", "files"])]
    pub gpus: bool,
    /// List the model shapes `profile = "auto"` and `--model NAME` know, with sources.
    #[arg(long, conflicts_with_all = ["physics", "files"])]
    pub models: bool,
    /// List the physics model's shipped global coefficients.
    #[arg(long, conflicts_with_all = ["files"])]
    pub physics: bool,
    /// Profile files (`sim calibrate -o FILE`) to list after the shipped profiles.
    pub files: Vec<PathBuf>,
}

/// A table `sim profiles` can list: asked for, its text, its JSON.
type Table = (bool, fn() -> String, fn() -> serde_json::Value);

/// Runs `sim profiles`.
pub fn cli(a: &ProfilesArgs) -> anyhow::Result<std::process::ExitCode> {
    let tables: [Table; 3] = [
        (a.gpus, profiles::gpus::table, profiles::gpus::json),
        (a.models, profiles::models::table, profiles::models::json),
        (a.physics, physics_table, physics_json),
    ];
    if let Some((_, table, json)) = tables.iter().find(|t| t.0) {
        if a.json {
            outln!("{}", serde_json::to_string_pretty(&json())?)?;
        } else {
            out!("{}", table())?;
        }
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let files = a
        .files
        .iter()
        .map(|p| {
            ProfileFile::read(p)
                .map(|f| (p.display().to_string(), f))
                .map_err(|e| anyhow!("{e}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    if a.json {
        let mut rows = match profiles::json() {
            serde_json::Value::Array(v) => v,
            _ => Vec::new(),
        };
        for (path, f) in &files {
            let mut v = serde_json::to_value(f)?;
            if let Some(o) = v.as_object_mut() {
                o.insert("id".into(), format!("{}{path}", profiles::file::FILE_PREFIX).into());
                o.insert("kind".into(), "calibrated".into());
            }
            rows.push(v);
        }
        outln!("{}", serde_json::to_string_pretty(&serde_json::Value::Array(rows))?)?;
    } else {
        out!("{}", profiles::table())?;
        if !files.is_empty() {
            let rows = files.iter().map(|(path, f)| {
                let s = &f.step_time;
                vec![
                    format!("{}{path}", profiles::file::FILE_PREFIX),
                    f.profile.model.clone().unwrap_or_else(|| "-".into()),
                    f.profile.gpu.clone().unwrap_or_else(|| "-".into()),
                    f.profile.tensor_parallel_size.map_or("-".into(), |t| t.to_string()),
                    f.engine.kv_blocks.to_string(),
                    format!("{:.2}", s.beta0_us),
                    format!("{:.2}", s.beta1_us),
                    format!("{:.2}", s.beta2_us),
                    format!("{:.4}", s.beta3_us),
                    format!("{:.4}", f.fit.loss),
                    format!(
                        "sim calibrate on {} (vLLM {}, {})",
                        f.profile.source,
                        f.profile.vllm_version.as_deref().unwrap_or("?"),
                        f.profile.measured_at.as_deref().unwrap_or("undated")
                    ),
                ]
            });
            outln!()?;
            out!(
                "{}",
                crate::output::render(
                    &[
                        "profile file",
                        "model",
                        "gpu",
                        "tp",
                        "kv_blocks",
                        "beta0_us",
                        "beta1_us",
                        "beta2_us",
                        "beta3_us",
                        "fit loss",
                        "source",
                    ],
                    rows,
                    &[3, 4, 5, 6, 7, 8, 9],
                )
            )?;
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// The shipped coefficients and the error they come with on runs they were not fitted to.
fn physics_table() -> String {
    format!(
        "{}\n{}\n",
        profiles::auto::table().trim_end(),
        crate::calibrate::physics::HELD_OUT.band()
    )
}

fn physics_json() -> serde_json::Value {
    serde_json::Value::Object(
        profiles::auto::SHIPPED
            .named()
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
            .collect(),
    )
}
