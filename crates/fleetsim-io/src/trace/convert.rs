//! `sim trace convert`: any supported trace to the native CSV.
//!
//! Columns: `arrival_s` (seconds from the first request, exact to the nanosecond),
//! `session_id` (empty: a one-request session), `turn` (0-based within the session),
//! `input_tokens` (the whole prompt), `output_tokens`, `block_ids` (space-separated prefix
//! block ids, as in the source). Rows are written in arrival order.

use std::io::Write;

use super::model::{NO_SESSION, Trace};
use super::replay::{SessionMode, arrival_order, group_sessions};
use super::sessions::{InferConfig, SynthConfig};

/// Seconds with up to 9 decimals, no trailing zeros.
pub fn fmt_secs(ns: u64) -> String {
    let (s, f) = (ns / 1_000_000_000, ns % 1_000_000_000);
    if f == 0 {
        return s.to_string();
    }
    let frac = format!("{f:09}");
    format!("{s}.{}", frac.trim_end_matches('0'))
}

/// Writes `trace` as native CSV, grouping sessions per `mode` (`None` keeps the trace's
/// own ids, or leaves sessions empty when it has none). Returns the number of rows.
pub fn write_native(
    trace: &Trace,
    mode: Option<SessionMode>,
    infer: &InferConfig,
    synth: &SynthConfig,
    block_tokens: u32,
    seed: u64,
    out: &mut impl Write,
) -> std::io::Result<u64> {
    let order = arrival_order(trace);
    let t0 = order.first().map_or(0, |&r| trace.rows[r as usize].t_ns);
    // Session label and turn per row.
    let mut label = vec![(u32::MAX, u32::MAX); trace.rows.len()];
    let keep_ids = mode.is_none() && trace.has_sessions();
    if let Some(m) = mode.or(keep_ids.then_some(SessionMode::Auto)) {
        let mut rng = fleetsim_core::rng::stream(seed, "trace/convert/synthesize", 0);
        let (s, _, _) = group_sessions(trace, &order, m, infer, synth, block_tokens, &mut rng);
        for i in 0..s.len() {
            let rows = s.session(i);
            if rows.len() == 1 && m == SessionMode::None {
                continue;
            }
            for (k, &r) in rows.iter().enumerate() {
                label[r as usize] = (i as u32, k as u32);
            }
        }
    }
    let mut w = csv::WriterBuilder::new().from_writer(out);
    w.write_record(super::requests::NATIVE_COLUMNS)?;
    let mut blocks = String::new();
    for &r in &order {
        let row = &trace.rows[r as usize];
        let (s, k) = label[r as usize];
        let (sid, turn) = if s == u32::MAX {
            (String::new(), String::new())
        } else if keep_ids && row.session != NO_SESSION {
            (trace.session_names[row.session as usize].clone(), k.to_string())
        } else {
            (format!("s{s}"), k.to_string())
        };
        blocks.clear();
        for (i, &b) in row.blocks(&trace.blocks).iter().enumerate() {
            if i > 0 {
                blocks.push(' ');
            }
            blocks.push_str(&trace.raw_blocks[b as usize].to_string());
        }
        w.write_record([
            fmt_secs(row.t_ns - t0).as_str(),
            sid.as_str(),
            turn.as_str(),
            row.input.to_string().as_str(),
            row.output.to_string().as_str(),
            blocks.as_str(),
        ])?;
    }
    w.flush()?;
    Ok(order.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::model::Format;
    use crate::trace::reader::read_from;

    #[test]
    fn seconds_format() {
        assert_eq!(fmt_secs(0), "0");
        assert_eq!(fmt_secs(1_500_000_000), "1.5");
        assert_eq!(fmt_secs(3_600_000_000_001), "3600.000000001");
    }

    #[test]
    fn mooncake_round_trip() {
        let text = "{\"timestamp\": 0, \"input_length\": 1100, \"output_length\": 5, \"hash_ids\": [10, 11, 12]}\n\
                    {\"timestamp\": 1234, \"input_length\": 1800, \"output_length\": 6, \"hash_ids\": [10, 11, 13, 14]}\n\
                    {\"timestamp\": 2000, \"input_length\": 100, \"output_length\": 7, \"hash_ids\": [99]}\n";
        let t = read_from(text.as_bytes(), "m", Format::Mooncake, false).unwrap();
        let mut out = Vec::new();
        let n = write_native(
            &t,
            None,
            &InferConfig::default(),
            &SynthConfig::default(),
            512,
            1,
            &mut out,
        )
        .unwrap();
        assert_eq!(n, 3);
        let csv = String::from_utf8(out).unwrap();
        assert_eq!(
            csv,
            "arrival_s,session_id,turn,input_tokens,output_tokens,block_ids\n0,,,1100,5,10 11 12\n1.234,,,1800,6,10 11 13 14\n2,,,100,7,99\n"
        );
        let back = read_from(csv.as_bytes(), "n", Format::Native, false).unwrap();
        assert_eq!(back.blocks, t.blocks);
        assert_eq!(back.raw_blocks, t.raw_blocks);
        for (a, b) in back.rows.iter().zip(&t.rows) {
            assert_eq!(
                (a.t_ns, a.input, a.output, a.blocks_len),
                (b.t_ns, b.input, b.output, b.blocks_len)
            );
        }
        // With inferred sessions, rows 0 and 1 become one session.
        let mut out = Vec::new();
        write_native(
            &t,
            Some(SessionMode::Infer),
            &InferConfig::default(),
            &SynthConfig::default(),
            512,
            1,
            &mut out,
        )
        .unwrap();
        let csv = String::from_utf8(out).unwrap();
        assert!(csv.contains("\n0,s0,0,1100"), "{csv}");
        assert!(csv.contains("\n1.234,s0,1,1800"), "{csv}");
        assert!(csv.contains("\n2,s1,0,100"), "{csv}");
        // Converting the native file again is the identity.
        let again = read_from(csv.as_bytes(), "n", Format::Native, false).unwrap();
        let mut out2 = Vec::new();
        write_native(
            &again,
            None,
            &InferConfig::default(),
            &SynthConfig::default(),
            512,
            1,
            &mut out2,
        )
        .unwrap();
        assert_eq!(String::from_utf8(out2).unwrap(), csv);
    }
}
