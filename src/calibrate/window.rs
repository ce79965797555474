//! `--window A:B`: a span of a run, in seconds from its first request's arrival, either
//! end open (`:B`, `A:`). `sim calibrate` fits to the engine series inside it and `sim
//! validate` scores the requests that arrive inside it; both replay the whole run, so
//! the engine reaches the window in the state the earlier requests left it in.

use anyhow::{Result, bail};

/// A half-open span `[from, to)` of a run, s from its first arrival.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Window {
    /// Start (inclusive), s; `None`: the run's start.
    pub from_s: Option<f64>,
    /// End (exclusive), s; `None`: the run's end.
    pub to_s: Option<f64>,
}

impl Window {
    /// The whole run.
    pub const ALL: Window = Window {
        from_s: None,
        to_s: None,
    };

    /// Parses `A:B`, `A:` or `:B` (seconds, `A < B`).
    pub fn parse(s: &str) -> Result<Window> {
        let Some((a, b)) = s.split_once(':') else {
            bail!(
                "--window {}: expected A:B, A: or :B (seconds from the run's first arrival)",
                crate::quote::quote(s)
            );
        };
        let end = |x: &str| -> Result<Option<f64>> {
            let x = x.trim();
            if x.is_empty() {
                return Ok(None);
            }
            match x.parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => Ok(Some(v)),
                _ => bail!(
                    "--window {}: {} is not a number of seconds (0 or more)",
                    crate::quote::quote(s),
                    crate::quote::quote(x)
                ),
            }
        };
        let w = Window {
            from_s: end(a)?,
            to_s: end(b)?,
        };
        if let (Some(a), Some(b)) = (w.from_s, w.to_s)
            && a >= b
        {
            bail!("--window {}: the start must be before the end", crate::quote::quote(s));
        }
        Ok(w)
    }

    /// True for the whole run.
    pub fn is_all(&self) -> bool {
        self.from_s.is_none() && self.to_s.is_none()
    }

    /// Whether `t_s` (s from the first arrival) is inside.
    pub fn contains(&self, t_s: f64) -> bool {
        self.from_s.is_none_or(|a| t_s >= a) && self.to_s.is_none_or(|b| t_s < b)
    }

    /// As written on the command line (`A:B`, empty ends open).
    pub fn text(&self) -> String {
        let f = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v}"));
        format!("{}:{}", f(self.from_s), f(self.to_s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_parse_with_open_ends() {
        let w = Window::parse("10:20.5").unwrap();
        assert_eq!((w.from_s, w.to_s), (Some(10.0), Some(20.5)));
        assert!(w.contains(10.0) && !w.contains(20.5) && !w.contains(9.9));
        assert!(Window::parse(":14.5").unwrap().contains(0.0));
        assert!(Window::parse("14.5:").unwrap().contains(1e9));
        assert!(Window::parse(":").unwrap().is_all());
        assert_eq!(Window::parse(":14.5").unwrap().text(), ":14.5");
        for bad in ["10", "a:b", "20:10", "-1:3", "5:5"] {
            assert!(Window::parse(bad).is_err(), "{bad}");
        }
    }
}
