//! `counts.md`: for metrics that take a few discrete values per run (a split such as
//! `peak_backend_sessions`, a count of latched sessions), how many seeds of each point gave
//! each value. A mean hides a bimodal outcome (4/4 on half the seeds and 8/0 on the
//! other half averages to 6/2, which never happens); the distribution does not.
//! Configured with `[sweep] counts = ["metric", ...]`; absent, no file is written.

use std::io::Write;

use anyhow::Result;
use serde_json::Value;

use super::table::{Meta, RunRow, md_point_cells, point_runs, write_md_head, write_md_preamble};

/// One cell: `value: seeds (percent)` for each value seen, ascending by value.
fn cell(xs: &[f64]) -> String {
    let mut sorted = xs.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mut parts = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let n = sorted[i..].iter().take_while(|&&x| x == sorted[i]).count();
        parts.push(format!(
            "{}: {n} ({:.0}%)",
            sorted[i],
            100.0 * n as f64 / xs.len() as f64
        ));
        i += n;
    }
    parts.join(", ")
}

/// Writes `counts.md` for `meta.plan.counts` (rows in run order).
pub fn write_counts_md(out: &mut Vec<u8>, meta: &Meta, rows: &[RunRow]) -> Result<()> {
    let plan = &meta.plan;
    write_md_preamble(
        out,
        meta,
        &format!("{} seeds", plan.seeds.len()),
        "value: seeds (share of the point's seeds).",
    )?;
    let mut head: Vec<String> = plan.axes.iter().map(|a| a.name.clone()).collect();
    head.push("seeds".into());
    head.extend(plan.counts.iter().cloned());
    write_md_head(out, &head)?;
    for (p, run) in point_runs(rows) {
        let mut cells = md_point_cells(plan, p);
        cells.push(run.len().to_string());
        for m in &plan.counts {
            let xs: Vec<f64> = rows[run.clone()]
                .iter()
                .filter_map(|r| r.metrics.get(m).and_then(Value::as_f64))
                .collect();
            cells.push(if xs.is_empty() { "n/a".into() } else { cell(&xs) });
        }
        writeln!(out, "| {} |", cells.join(" | "))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_count_each_value_in_order() {
        assert_eq!(cell(&[5.0, 4.0, 4.0, 8.0]), "4: 2 (50%), 5: 1 (25%), 8: 1 (25%)");
        assert_eq!(cell(&[0.5, -1.0]), "-1: 1 (50%), 0.5: 1 (50%)");
    }
}
