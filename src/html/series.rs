//! The data of the report's interactive time series, read from a results folder's
//! `timeseries.csv` (running and waiting per backend at each change) and `summary.json`
//! (names, slots, length), with the stretches where some backend had a free slot while
//! another queued, found from the same rows.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};

/// One backend's steps.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Track {
    /// Backend name.
    pub name: String,
    /// `max_num_seqs` (0: unknown).
    pub slots: u32,
    /// Change times, seconds.
    pub t_s: Vec<f64>,
    /// Running requests from each change on.
    pub running: Vec<u32>,
    /// Waiting requests from each change on.
    pub waiting: Vec<u32>,
}

/// The chart's data.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SeriesData {
    /// What the page calls it.
    pub title: String,
    /// The run's length, seconds.
    pub end_s: f64,
    /// Per backend, in the summary's order.
    pub tracks: Vec<Track>,
    /// Idle-while-queued stretches, `(from_s, until_s)`, in time order.
    pub stranded: Vec<(f64, f64)>,
}

impl SeriesData {
    /// From `dir/timeseries.csv` and `dir/summary.json`; `None` when the folder has no
    /// time series.
    pub fn read(dir: &Path) -> Result<Option<SeriesData>> {
        let csv_path = dir.join("timeseries.csv");
        if !csv_path.exists() {
            return Ok(None);
        }
        let sp = dir.join("summary.json");
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&sp).with_context(|| format!("reading {}", sp.display()))?)
                .with_context(|| format!("{}: not JSON", sp.display()))?;
        let mut tracks: Vec<Track> = summary["backends"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|b| Track {
                        name: b["name"].as_str().unwrap_or("").to_string(),
                        slots: b["slots"].as_u64().unwrap_or(0).min(u64::from(u32::MAX)) as u32,
                        ..Track::default()
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut rdr = csv::Reader::from_path(&csv_path).with_context(|| format!("reading {}", csv_path.display()))?;
        let h = rdr
            .headers()
            .with_context(|| format!("{}: no header", csv_path.display()))?
            .clone();
        let col = |n: &str| {
            h.iter()
                .position(|x| x == n)
                .with_context(|| format!("{}: no `{n}` column", csv_path.display()))
        };
        let (ct, cb, cr, cw) = (col("t_s")?, col("backend")?, col("running")?, col("waiting")?);
        let mut end_s = summary["sim_time_s"].as_f64().unwrap_or(0.0);
        for (i, row) in rdr.records().enumerate() {
            let row = row.with_context(|| format!("{}: row {}", csv_path.display(), i + 2))?;
            let bad = || format!("{}: row {}: not a number", csv_path.display(), i + 2);
            let num = |c: usize| row.get(c).unwrap_or("").trim().parse::<f64>().ok();
            let (Some(t), Some(r), Some(w)) = (num(ct), num(cr), num(cw)) else {
                anyhow::bail!(bad());
            };
            let b = row.get(cb).unwrap_or("");
            let k = match b.parse::<usize>() {
                Ok(k) => k,
                Err(_) => match tracks.iter().position(|x| x.name == b) {
                    Some(k) => k,
                    None => {
                        tracks.push(Track {
                            name: b.to_string(),
                            ..Track::default()
                        });
                        tracks.len() - 1
                    }
                },
            };
            while tracks.len() <= k {
                tracks.push(Track {
                    name: format!("backend-{}", tracks.len()),
                    ..Track::default()
                });
            }
            let tr = &mut tracks[k];
            tr.t_s.push(t);
            tr.running.push(r.max(0.0) as u32);
            tr.waiting.push(w.max(0.0) as u32);
            end_s = end_s.max(t);
        }
        let stranded = stranded(&tracks);
        let title = summary["scenario"].as_str().unwrap_or("run").to_string();
        Ok(Some(SeriesData {
            title,
            end_s,
            tracks,
            stranded,
        }))
    }

    /// The JSON the page's script reads.
    pub fn to_json(&self) -> serde_json::Value {
        let backends: Vec<serde_json::Value> = self
            .tracks
            .iter()
            .map(|t| {
                serde_json::json!({
                    "name": t.name, "slots": t.slots, "t": t.t_s,
                    "running": t.running, "waiting": t.waiting,
                })
            })
            .collect();
        serde_json::json!({
            "title": self.title,
            "end_s": self.end_s,
            "x_desc": "simulated time",
            "backends": backends,
            "stranded": self.stranded.iter().map(|&(a, b)| [a, b]).collect::<Vec<_>>(),
        })
    }
}

/// Stretches where some backend had a free slot (running below its slots) while another
/// had a waiting request, from the tracks' changes taken together in time order.
fn stranded(tracks: &[Track]) -> Vec<(f64, f64)> {
    // Every change, by time (f64 bits order positive times correctly).
    let mut at: BTreeMap<u64, Vec<(usize, usize)>> = BTreeMap::new();
    for (b, tr) in tracks.iter().enumerate() {
        for (i, t) in tr.t_s.iter().enumerate() {
            at.entry(t.max(0.0).to_bits()).or_default().push((b, i));
        }
    }
    let mut state: Vec<(u32, u32)> = vec![(0, 0); tracks.len()];
    let mut out = Vec::new();
    let mut open: Option<f64> = None;
    for (bits, changes) in at {
        let t = f64::from_bits(bits);
        for (b, i) in changes {
            state[b] = (tracks[b].running[i], tracks[b].waiting[i]);
        }
        let free: Vec<usize> = (0..tracks.len())
            .filter(|&b| tracks[b].slots > 0 && state[b].0 < tracks[b].slots)
            .collect();
        let now = (0..tracks.len()).any(|c| state[c].1 > 0 && free.iter().any(|&b| b != c));
        match (open, now) {
            (None, true) => open = Some(t),
            (Some(s), false) => {
                out.push((s, t));
                open = None;
            }
            _ => {}
        }
    }
    if let Some(s) = open {
        let end = tracks.iter().filter_map(|t| t.t_s.last()).fold(s, |a, &b| a.max(b));
        out.push((s, end));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn track(slots: u32, pts: &[(f64, u32, u32)]) -> Track {
        Track {
            name: String::new(),
            slots,
            t_s: pts.iter().map(|p| p.0).collect(),
            running: pts.iter().map(|p| p.1).collect(),
            waiting: pts.iter().map(|p| p.2).collect(),
        }
    }

    #[test]
    fn stranded_while_one_queues_and_another_has_a_free_slot() {
        let a = track(2, &[(0.0, 0, 0), (5.0, 1, 0), (9.0, 2, 0)]);
        let b = track(2, &[(0.0, 2, 0), (3.0, 2, 1), (7.0, 2, 0)]);
        // b queues from 3 to 7; a has a free slot until 9: stranded 3..7.
        assert_eq!(stranded(&[a.clone(), b]), vec![(3.0, 7.0)]);
        // A backend queueing with its own free slot is not stranding on its own.
        let c = track(2, &[(0.0, 1, 1), (4.0, 0, 0)]);
        assert_eq!(stranded(&[c]), vec![]);
        let d = track(2, &[(0.0, 2, 3)]);
        assert_eq!(stranded(&[a, d]), vec![(0.0, 9.0)]);
    }
}
