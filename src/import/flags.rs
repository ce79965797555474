//! Command-line flags as argparse reads them: `--flag value`, `--flag=value`, switches
//! without a value, positionals. Each tool's flags are a table of names and arities; a
//! flag not in the table is an error naming it, or (with `--allow-unknown`) kept as
//! ignored.

/// Whether a flag takes a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    /// `--flag VALUE`.
    Value,
    /// `--flag` alone.
    Switch,
}

/// One flag occurrence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flag {
    /// Canonical name (`--max-num-seqs`).
    pub name: String,
    /// Its value (`None` for a switch).
    pub value: Option<String>,
    /// How it was written (`--max-num-seqs 4`), for comments.
    pub written: String,
    /// Where it was given, the start of its errors: the command line and the flag
    /// (``--vllm-args: `--max-num-seqs` ``), or the Helm file and key path
    /// (`values.yaml: servingEngineSpec.modelSpec[0].vllmConfig.maxNumSeqs`).
    pub at: String,
}

impl Flag {
    /// An error about this flag: `AT: message`.
    pub fn err(&self, message: &str) -> String {
        format!("{}: {message}", crate::quote::escape(&self.at))
    }
}

/// The parse of one command line.
#[derive(Debug, Default)]
pub struct Parsed {
    /// Known flags, in order.
    pub flags: Vec<Flag>,
    /// Positional arguments.
    pub positionals: Vec<String>,
    /// Unknown flags kept under `--allow-unknown`.
    pub unknown: Vec<String>,
    /// Positional words after the first flag (the command's own words come before it).
    pub stray: Vec<String>,
}

impl Parsed {
    /// The last occurrence of a flag (argparse: the last one wins).
    pub fn get(&self, name: &str) -> Option<&Flag> {
        self.flags.iter().rev().find(|f| f.name == name)
    }
}

/// Parses `line` (shell quoting) against `table`. `what` names the command line in
/// errors (`--router-args`); `underscores` accepts `--a_b` for `--a-b` (vLLM does, the
/// production-stack router's plain argparse does not).
pub fn parse(
    line: &str,
    table: &[(&str, Arity)],
    what: &str,
    underscores: bool,
    allow_unknown: bool,
) -> Result<Parsed, String> {
    let words =
        shlex::split(line).ok_or_else(|| format!("{what}: unbalanced quotes in {}", crate::quote::quote(line)))?;
    let grammar = Grammar {
        table,
        what,
        underscores,
        allow_unknown,
    };
    let mut out = Parsed::default();
    let mut i = 0;
    let mut seen_flag = false;
    while i < words.len() {
        let w = &words[i];
        if !w.starts_with('-') || w == "-" {
            if seen_flag {
                out.stray.push(w.clone());
            }
            out.positionals.push(w.clone());
            i += 1;
            continue;
        }
        seen_flag = true;
        i = grammar.flag(&words, i, &mut out)?;
    }
    Ok(out)
}

/// How a command line is read: its flags, its name in errors and what it tolerates.
struct Grammar<'a> {
    table: &'a [(&'a str, Arity)],
    what: &'a str,
    underscores: bool,
    allow_unknown: bool,
}

impl Grammar<'_> {
    /// Reads the flag `words[at]` (with its value, inline or the next word) into `out`;
    /// returns the index of the word after it.
    fn flag(&self, words: &[String], at: usize, out: &mut Parsed) -> Result<usize, String> {
        let w = &words[at];
        let mut i = at + 1;
        let what = self.what;
        let flag = crate::quote::quote(w.split_once('=').map_or(w.as_str(), |(k, _)| k));
        let at = format!("{what}: {flag}");
        let (raw, inline) = match w.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            None => (w.clone(), None),
        };
        let name = if self.underscores && raw.starts_with("--") {
            format!("--{}", raw[2..].replace('_', "-"))
        } else {
            raw.clone()
        };
        match self.table.iter().find(|(n, _)| *n == name) {
            Some((_, Arity::Switch)) => {
                if inline.is_some() {
                    return Err(format!("{at} takes no value"));
                }
                out.flags.push(Flag {
                    name,
                    value: None,
                    written: raw,
                    at,
                });
            }
            Some((_, Arity::Value)) => {
                let value = match inline {
                    Some(v) => v,
                    None => {
                        let v = words
                            .get(i)
                            .filter(|v| !v.starts_with("--"))
                            .ok_or_else(|| format!("{at} needs a value"))?;
                        i += 1;
                        v.clone()
                    }
                };
                out.flags.push(Flag {
                    written: format!("{raw} {value}"),
                    name,
                    value: Some(value),
                    at,
                });
            }
            None if self.allow_unknown => {
                // Take a following non-flag word as its value.
                let mut written = w.clone();
                if inline.is_none()
                    && let Some(v) = words.get(i).filter(|v| !v.starts_with('-'))
                {
                    written = format!("{w} {v}");
                    i += 1;
                }
                out.unknown.push(written);
            }
            None => {
                return Err(format!(
                    "{what}: unknown flag {flag} (pass --allow-unknown to list it as ignored)"
                ));
            }
        }
        Ok(i)
    }
}

/// A flag's value as a number, or an error naming the flag.
pub fn number<T: std::str::FromStr>(f: &Flag) -> Result<T, String> {
    let v = f.value.as_deref().unwrap_or("");
    v.trim()
        .parse()
        .map_err(|_| f.err(&format!("expects a number, got {}", crate::quote::quote(v))))
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &[(&str, Arity)] = &[("--a-b", Arity::Value), ("--on", Arity::Switch)];

    #[test]
    fn forms_and_errors() {
        let p = parse("serve m --a-b 3 --on --a_b=4 'x y'", T, "t", true, false).unwrap();
        assert_eq!(p.positionals, ["serve", "m", "x y"]);
        assert_eq!(p.get("--a-b").unwrap().value.as_deref(), Some("4"));
        assert_eq!(p.get("--a-b").unwrap().written, "--a_b 4");
        assert!(p.get("--on").unwrap().value.is_none());
        assert!(
            parse("--a_b 3", T, "t", false, false)
                .unwrap_err()
                .contains("unknown flag `--a_b`")
        );
        assert!(
            parse("--zz 1", T, "t", true, false)
                .unwrap_err()
                .contains("--allow-unknown")
        );
        assert_eq!(parse("--zz 1 --on", T, "t", true, true).unwrap().unknown, ["--zz 1"]);
        assert!(
            parse("--a-b", T, "t", true, false)
                .unwrap_err()
                .contains("needs a value")
        );
        assert!(
            parse("--on=1", T, "t", true, false)
                .unwrap_err()
                .contains("takes no value")
        );
        assert!(parse("--a-b 'x", T, "t", true, false).unwrap_err().contains("quotes"));
    }
}
