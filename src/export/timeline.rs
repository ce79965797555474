//! `timeline.json`: the requests' life on each backend in Chrome trace event format
//! (<https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU>),
//! which Perfetto UI (ui.perfetto.dev) and `chrome://tracing` open.
//!
//! One process per backend (named after it), one thread ("lane") per request in flight at
//! once, so slices never overlap on a lane; per request up to three complete (`"ph": "X"`)
//! slices: `queued` (engine arrival to first scheduled), `prefill` (scheduled to first
//! token) and `decode` (first token to last token), or cut at the failure time. Times are
//! microseconds of simulated time.

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use serde_json::json;

use crate::metrics::RequestRec;
use crate::sim::RunResult;
use crate::time::SimTime;

fn us(t: SimTime) -> f64 {
    t.0 as f64 / 1000.0
}

/// `(name, start, end)` of a request's phases, cut at its failure time.
fn phases(r: &RequestRec) -> Vec<(&'static str, SimTime, SimTime)> {
    let Some(arrive) = r.t_engine else { return Vec::new() };
    let end = r.t_finish_engine.or(r.t_failed);
    let marks = [
        ("queued", Some(arrive)),
        ("prefill", r.t_admit),
        ("decode", r.t_first_token),
    ];
    let mut out = Vec::new();
    for (i, (name, start)) in marks.iter().enumerate() {
        let Some(start) = *start else { break };
        let next = marks.get(i + 1).and_then(|m| m.1).or(end);
        match next {
            Some(stop) if stop >= start => out.push((*name, start, stop)),
            _ => break,
        }
    }
    out
}

/// Assigns lanes: per backend, requests in order of engine arrival take the lowest lane
/// free at their arrival. Returns each request's lane (`None` when it never reached an
/// engine) and the lanes each backend needed.
fn lanes(res: &RunResult, n_backends: usize) -> (Vec<Option<u32>>, Vec<u32>) {
    let mut order: Vec<usize> = (0..res.requests.len())
        .filter(|&i| res.requests[i].t_engine.is_some())
        .collect();
    order.sort_by_key(|&i| (res.requests[i].t_engine, i));
    let mut busy_until: Vec<Vec<SimTime>> = vec![Vec::new(); n_backends];
    let mut lane = vec![None; res.requests.len()];
    for i in order {
        let r = &res.requests[i];
        let ph = phases(r);
        let (Some(first), Some(last)) = (ph.first(), ph.last()) else {
            continue;
        };
        let ends = &mut busy_until[r.backend.index()];
        let k = match ends.iter().position(|&e| e <= first.1) {
            Some(k) => k,
            None => {
                ends.push(SimTime(0));
                ends.len() - 1
            }
        };
        ends[k] = last.2;
        lane[i] = Some(k as u32);
    }
    (lane, busy_until.iter().map(|e| e.len() as u32).collect())
}

/// Writes the trace to `p`.
pub fn write(p: &Path, res: &RunResult) -> Result<()> {
    let mut out = crate::atomic::Hashed::create(p)?;
    write_to(&mut out, res)?;
    out.finish()?;
    Ok(())
}

/// The trace as bytes written to `out`.
pub fn write_to(out: &mut impl Write, res: &RunResult) -> Result<()> {
    write_highlighted(out, res, None)
}

/// The trace with session `highlight` (an index into `res.session_keys`) picked out: its
/// slices on the backends' tracks are named `PHASE (SESSION)` (Perfetto colours slices by
/// name, so they stand apart) and carry `"cname": "terrible"` (red in `chrome://tracing`),
/// and a first track, `session SESSION`, holds one slice per turn from router arrival to
/// completion (named after the backend and branch) with its phases nested inside.
pub fn write_highlighted(out: &mut impl Write, res: &RunResult, highlight: Option<usize>) -> Result<()> {
    let names: Vec<&str> = res.summary.backends.iter().map(|b| b.name.as_str()).collect();
    let (lane, used) = lanes(res, names.len());
    out.write_all(b"{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n")?;
    let mut ev = Events { out, first: true };
    for (b, name) in names.iter().enumerate() {
        ev.emit(json!({"ph": "M", "name": "process_name", "pid": b, "args": {"name": name}}))?;
        ev.emit(json!({"ph": "M", "name": "process_sort_index", "pid": b, "args": {"sort_index": b}}))?;
        for l in 0..used[b] {
            ev.emit(
                json!({"ph": "M", "name": "thread_name", "pid": b, "tid": l, "args": {"name": format!("lane {l}")}}),
            )?;
        }
    }
    let tracks = Tracks {
        names,
        lane,
        session: highlight,
    };
    if let Some(s) = highlight {
        let track = tracks.names.len();
        let label = format!("session {}", res.session_keys[s]);
        ev.emit(json!({"ph": "M", "name": "process_name", "pid": track, "args": {"name": label}}))?;
        ev.emit(json!({"ph": "M", "name": "process_sort_index", "pid": track, "args": {"sort_index": -1}}))?;
        ev.emit(json!({"ph": "M", "name": "thread_name", "pid": track, "tid": 0, "args": {"name": "turns"}}))?;
    }
    for (i, r) in res.requests.iter().enumerate() {
        tracks.request(&mut ev, res, i, r)?;
    }
    ev.out.write_all(b"\n]}\n")?;
    Ok(())
}

/// Trace events written one after another, comma-separated.
struct Events<'a, W: Write> {
    out: &'a mut W,
    first: bool,
}

impl<W: Write> Events<'_, W> {
    fn emit(&mut self, v: serde_json::Value) -> Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        serde_json::to_writer(&mut *self.out, &v)?;
        Ok(())
    }
}

/// Where a request's slices go: the backends' names, each request's lane on its backend
/// (`None`: no free lane, drawn on the session track only), and the highlighted session.
struct Tracks<'a> {
    names: Vec<&'a str>,
    lane: Vec<Option<u32>>,
    /// The highlighted session (an index into the run's session keys).
    session: Option<usize>,
}

impl Tracks<'_> {
    /// Request `i`'s slices: its phases on its backend's lane, and for the highlighted
    /// session its turn and phases again on the session track, picked out.
    fn request<W: Write>(&self, ev: &mut Events<'_, W>, res: &RunResult, i: usize, r: &RequestRec) -> Result<()> {
        let names = &self.names;
        let track = names.len();
        let key = |r: &RequestRec| res.session_keys[r.session.index()].as_str();
        let mine = self.session == Some(r.session.index());
        let args = json!({
            "request_id": i,
            "session": key(r),
            "turn": r.turn,
            "branch": r.branch.as_str(),
            "prompt_tokens": r.prompt_tokens,
            "cached_tokens": r.cached_tokens,
            "output_tokens": r.output_tokens,
        });
        if mine {
            let end = r.t_done.or(r.t_failed).unwrap_or(r.t_router);
            let mut a = args.clone();
            a["backend"] = json!(names[r.backend.index()]);
            ev.emit(json!({
                "ph": "X",
                "name": format!("turn {} -> {} ({})", r.turn, names[r.backend.index()], r.branch.as_str()),
                "cat": "session",
                "pid": track,
                "tid": 0,
                "ts": us(r.t_router),
                "dur": us(end) - us(r.t_router),
                "cname": "terrible",
                "args": a,
            }))?;
        }
        for (phase, start, stop) in phases(r) {
            let mut e = json!({
                "ph": "X",
                "name": phase,
                "cat": "request",
                "pid": r.backend.index(),
                "tid": self.lane[i],
                "ts": us(start),
                "dur": us(stop) - us(start),
                "args": args,
            });
            if mine {
                e["name"] = json!(format!("{phase} ({})", key(r)));
                e["cname"] = json!("terrible");
                let mut nested = e.clone();
                nested["pid"] = json!(track);
                nested["tid"] = json!(0);
                ev.emit(nested)?;
            }
            if self.lane[i].is_some() {
                ev.emit(e)?;
            }
        }
        Ok(())
    }
}
