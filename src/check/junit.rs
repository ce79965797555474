//! JUnit XML for CI systems (GitLab, Jenkins, GitHub test reporters): one `<testsuite>`
//! per scenario, one `<testcase>` per check, a `<failure>` with the measured value when a
//! bound fails, `<skipped>` for a scenario without `[expect]`.

use quick_xml::Writer;
use quick_xml::events::{BytesDecl, BytesText, Event};

use super::{Outcome, ScenarioReport};

fn message(o: &Outcome) -> String {
    match o.value {
        Some(v) => format!(
            "measured {} ({}): bound `{}` does not hold",
            crate::sweep::table::fmt_stat(v),
            o.detail,
            o.name
        ),
        None => o.detail.clone(),
    }
}

/// The XML document.
pub fn to_xml(reports: &[ScenarioReport]) -> std::io::Result<Vec<u8>> {
    let mut w = Writer::new_with_indent(Vec::new(), b' ', 2);
    w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
    let tests: usize = reports.iter().map(|r| r.outcomes.len().max(1)).sum();
    let failures: usize = reports.iter().flat_map(|r| &r.outcomes).filter(|o| !o.pass).count();
    let time: f64 = reports.iter().map(|r| r.wall_s).sum();
    w.create_element("testsuites")
        .with_attributes([
            ("name", "sim check"),
            ("tests", tests.to_string().as_str()),
            ("failures", failures.to_string().as_str()),
            ("time", format!("{time:.3}").as_str()),
        ])
        .write_inner_content(|w| {
            for r in reports {
                let fails = r.outcomes.iter().filter(|o| !o.pass).count();
                let skipped = usize::from(r.outcomes.is_empty());
                w.create_element("testsuite")
                    .with_attributes([
                        ("name", r.name.as_str()),
                        ("file", r.file.as_str()),
                        ("tests", r.outcomes.len().max(1).to_string().as_str()),
                        ("failures", fails.to_string().as_str()),
                        ("skipped", skipped.to_string().as_str()),
                        ("time", format!("{:.3}", r.wall_s).as_str()),
                    ])
                    .write_inner_content(|w| {
                        let class = format!("fleetsim.{}", r.name);
                        if r.outcomes.is_empty() {
                            w.create_element("testcase")
                                .with_attributes([("name", "expectations"), ("classname", class.as_str())])
                                .write_inner_content(|w| {
                                    w.create_element("skipped")
                                        .with_attribute(("message", "no [expect] table"))
                                        .write_empty()?;
                                    Ok(())
                                })?;
                        }
                        for o in &r.outcomes {
                            let el = w
                                .create_element("testcase")
                                .with_attributes([("name", o.name.as_str()), ("classname", class.as_str())]);
                            if o.pass {
                                el.write_inner_content(|w| {
                                    w.create_element("system-out").write_text_content(BytesText::new(
                                        &match o.value {
                                            Some(v) => format!("{} = {}", o.detail, crate::sweep::table::fmt_stat(v)),
                                            None => o.detail.clone(),
                                        },
                                    ))?;
                                    Ok(())
                                })?;
                            } else {
                                el.write_inner_content(|w| {
                                    let m = message(o);
                                    w.create_element("failure")
                                        .with_attributes([("message", m.as_str()), ("type", "bound")])
                                        .write_text_content(BytesText::new(&m))?;
                                    Ok(())
                                })?;
                            }
                        }
                        Ok(())
                    })?;
            }
            Ok(())
        })?;
    let mut out = w.into_inner();
    out.push(b'\n');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_and_skips_are_marked_and_escaped() {
        let reports = vec![
            ScenarioReport {
                file: "a.toml".into(),
                name: "a".into(),
                outcomes: vec![
                    Outcome {
                        name: "mean(x) < 1 & y".into(),
                        value: Some(2.0),
                        pass: false,
                        detail: "3 seeds".into(),
                    },
                    Outcome {
                        name: "determinism".into(),
                        value: None,
                        pass: true,
                        detail: "ok".into(),
                    },
                ],
                wall_s: 0.5,
            },
            ScenarioReport {
                file: "b.toml".into(),
                name: "b".into(),
                outcomes: vec![],
                wall_s: 0.1,
            },
        ];
        let x = String::from_utf8(to_xml(&reports).unwrap()).unwrap();
        assert!(
            x.contains(r#"<testsuites name="sim check" tests="3" failures="1""#),
            "{x}"
        );
        assert!(
            x.contains(r#"<testcase name="mean(x) &lt; 1 &amp; y" classname="fleetsim.a">"#),
            "{x}"
        );
        assert!(x.contains("<failure message=\"measured 2 (3 seeds)"), "{x}");
        assert!(x.contains(r#"<skipped message="no [expect] table"/>"#), "{x}");
    }
}
