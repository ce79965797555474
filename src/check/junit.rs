//! JUnit XML for CI systems (GitLab, Jenkins, GitHub test reporters): one `<testsuite>`
//! per scenario, one `<testcase>` per check, a `<failure>` with the measured value when a
//! bound fails, `<skipped>` for a scenario without `[expect]`.

use std::time::Duration;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite, XmlString};

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

fn case(o: &Outcome, class: &str) -> TestCase {
    let status = if o.pass {
        TestCaseStatus::success()
    } else {
        let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
        let m = message(o);
        s.set_type("bound").set_description(m.as_str()).set_message(m);
        s
    };
    let mut c = TestCase::new(o.name.as_str(), status);
    c.set_classname(class);
    if o.pass {
        c.set_system_out(match o.value {
            Some(v) => format!("{} = {}", o.detail, crate::sweep::table::fmt_stat(v)),
            None => o.detail.clone(),
        });
    }
    c
}

/// The XML document.
pub fn to_xml(reports: &[ScenarioReport]) -> std::io::Result<Vec<u8>> {
    let mut report = Report::new("sim check");
    report.set_time(Duration::from_secs_f64(reports.iter().map(|r| r.wall_s).sum()));
    for r in reports {
        let class = format!("fleetsim.{}", r.name);
        let mut suite = TestSuite::new(r.name.as_str());
        suite.extra.insert(XmlString::new("file"), XmlString::new(&r.file));
        suite.set_time(Duration::from_secs_f64(r.wall_s));
        if r.outcomes.is_empty() {
            let mut skip = TestCaseStatus::skipped();
            skip.set_message("no [expect] table");
            let mut c = TestCase::new("expectations", skip);
            c.set_classname(class.as_str());
            suite.add_test_case(c);
        }
        suite.add_test_cases(r.outcomes.iter().map(|o| case(o, &class)));
        report.add_test_suite(suite);
    }
    let mut out = Vec::new();
    report.serialize(&mut out).map_err(std::io::Error::other)?;
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
            x.contains(r#"<testsuites name="sim check" tests="3" skipped="1" failures="1" errors="0""#),
            "{x}"
        );
        assert!(
            x.contains(r#"<testcase name="mean(x) &lt; 1 &amp; y" classname="fleetsim.a">"#),
            "{x}"
        );
        assert!(x.contains("<failure message=\"measured 2 (3 seeds)"), "{x}");
        assert!(x.contains(r#"<skipped message="no [expect] table"/>"#), "{x}");
        assert!(x.contains(r#"time="0.500" file="a.toml">"#), "{x}");
        assert!(x.contains("<system-out>ok</system-out>"), "{x}");
    }
}
