//! `--set dotted.path=value` overrides, applied to the parsed TOML before validation (so an
//! override is checked exactly like a key written in the file).
//!
//! Paths are dotted keys; array elements are addressed as `groups[0]` or `groups.0`. The
//! value is parsed as a TOML value (`10`, `0.5`, `true`, `"x"`, `{ dist = "exponential",
//! mean = 2 }`, `[1, 2]`); anything that does not parse is taken as a bare string, so
//! `--set router.policy.fallback=leastinflight` works without quotes. Missing tables on the
//! path are created; a misspelt key is then rejected by validation with its full path.

/// Splits `KEY=VALUE` (for clap).
pub fn parse_set(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("expected KEY=VALUE, got `{s}`"))?;
    let k = k.trim();
    if k.is_empty() {
        return Err(format!("empty key in `{s}`"));
    }
    Ok((k.to_string(), v.trim().to_string()))
}

/// One component of a key path.
pub(super) enum Seg {
    Key(String),
    Index(usize),
}

/// Parses `a.b[0].c` (or `a.b.0.c`) into components.
pub(super) fn segments(path: &str) -> Result<Vec<Seg>, String> {
    let mut out = Vec::new();
    for part in path.split('.') {
        if part.is_empty() {
            return Err(format!("empty component in key path `{path}`"));
        }
        let (key, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !key.is_empty() {
            match key.parse::<usize>() {
                Ok(i) if !out.is_empty() => out.push(Seg::Index(i)),
                _ => out.push(Seg::Key(key.to_string())),
            }
        }
        while !rest.is_empty() {
            let inner = rest
                .strip_prefix('[')
                .ok_or_else(|| format!("unexpected `{rest}` in `{path}`"))?;
            let end = inner.find(']').ok_or_else(|| format!("unclosed `[` in `{path}`"))?;
            let idx = inner[..end]
                .parse()
                .map_err(|_| format!("bad index `{}` in `{path}`", &inner[..end]))?;
            out.push(Seg::Index(idx));
            rest = &inner[end + 1..];
        }
    }
    Ok(out)
}

/// The canonical spelling of a path (`a.b[0].c`), as validation errors print it.
pub fn normalize(path: &str) -> String {
    let mut s = String::new();
    for seg in segments(path).unwrap_or_default() {
        match seg {
            Seg::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(&k);
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

fn parse_value(raw: &str) -> toml::Value {
    match toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        Ok(mut t) => t.remove("v").unwrap_or_else(|| toml::Value::String(raw.to_string())),
        Err(_) => toml::Value::String(raw.to_string()),
    }
}

/// Sets `path` to `raw` in `root` (all or nothing).
pub fn apply(root: &mut toml::Table, path: &str, raw: &str) -> Result<(), String> {
    let segs = segments(path)?;
    let mut work = toml::Value::Table(root.clone());
    set_in(&mut work, &segs, parse_value(raw))?;
    if let toml::Value::Table(t) = work {
        *root = t;
    }
    Ok(())
}

fn set_in(node: &mut toml::Value, segs: &[Seg], value: toml::Value) -> Result<(), String> {
    let (first, rest) = segs.split_first().ok_or("empty key path")?;
    let slot = match first {
        Seg::Key(k) => {
            let t = node
                .as_table_mut()
                .ok_or_else(|| format!("`{k}` is inside a value that is not a table"))?;
            if rest.is_empty() {
                t.insert(k.clone(), value);
                return Ok(());
            }
            t.entry(k.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()))
        }
        Seg::Index(i) => {
            let a = node
                .as_array_mut()
                .ok_or_else(|| format!("[{i}] indexes a value that is not an array"))?;
            let len = a.len();
            a.get_mut(*i)
                .ok_or_else(|| format!("index {i} is out of range (the array has {len} entries)"))?
        }
    };
    if rest.is_empty() {
        *slot = value;
        Ok(())
    } else {
        set_in(slot, rest, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(s: &str) -> toml::Table {
        toml::from_str(s).unwrap()
    }

    #[test]
    fn sets_scalars_tables_and_array_entries() {
        let mut t = table("[router]\nx = 1\n[[workload.groups]]\nname = \"a\"\n[[workload.groups]]\nname = \"b\"\n");
        apply(&mut t, "router.x", "2.5").unwrap();
        apply(&mut t, "router.policy.fallback", "leastinflight").unwrap();
        apply(
            &mut t,
            "workload.groups[1].turns",
            "{ dist = \"uniform\", min = 1, max = 3 }",
        )
        .unwrap();
        apply(&mut t, "workload.groups.0.name", "\"z\"").unwrap();
        assert_eq!(t["router"]["x"].as_float(), Some(2.5));
        assert_eq!(t["router"]["policy"]["fallback"].as_str(), Some("leastinflight"));
        assert_eq!(t["workload"]["groups"][1]["turns"]["max"].as_integer(), Some(3));
        assert_eq!(t["workload"]["groups"][0]["name"].as_str(), Some("z"));
    }

    #[test]
    fn bad_paths_say_why() {
        let mut t = table("a = 1\nb = [1]\n");
        assert!(apply(&mut t, "a.c", "1").unwrap_err().contains("not a table"));
        assert!(apply(&mut t, "b[3]", "1").unwrap_err().contains("out of range"));
        assert!(apply(&mut t, "x..y", "1").unwrap_err().contains("empty component"));
        assert_eq!(
            t["a"].as_integer(),
            Some(1),
            "a failed override leaves the table intact"
        );
        assert_eq!(parse_set("a.b=c"), Ok(("a.b".into(), "c".into())));
        assert!(parse_set("novalue").is_err());
        assert_eq!(normalize("workload.groups.0.turns"), "workload.groups[0].turns");
        // Malformed brackets (including multi-byte characters after them) are errors.
        assert!(apply(&mut t, "b[0]]", "1").unwrap_err().contains("unexpected"));
        assert!(apply(&mut t, "b[0]é", "1").unwrap_err().contains("unexpected"));
        assert!(apply(&mut t, "b[x]", "1").unwrap_err().contains("bad index"));
    }
}
