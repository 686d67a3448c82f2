//! Runs every golden file in `crates/controller/golden/` (issue 3: golden-case runner over TOML
//! files) and fails if any case fails; also pins the minimum number of cases (at least 40).

use std::fs;
use std::path::Path;

#[test]
fn every_golden_case_passes() {
    // issue 3: "A golden-case runner over TOML files ... Ship at least 40 cases."
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("golden");
    let mut paths: Vec<_> = fs::read_dir(&dir)
        .expect("golden directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    paths.sort();
    let mut total = 0;
    let mut failures = Vec::new();
    for path in &paths {
        let text = fs::read_to_string(path).expect("readable golden file");
        let report = keel_controller::golden::run(&text);
        println!("== {}\n{report}", path.display());
        total += report.cases.len();
        if !report.passed() {
            failures.push(format!("{}:\n{report}", path.display()));
        }
    }
    assert!(
        failures.is_empty(),
        "golden failures:\n{}",
        failures.join("\n")
    );
    assert!(total >= 40, "only {total} golden cases");
}

#[test]
fn a_failing_case_is_reported_with_its_mismatch() {
    // issue 3: the runner prints each case's result; a wrong expectation must fail, not pass.
    let report = keel_controller::golden::run(
        r#"
[[case]]
name = "wrong on purpose"
min_isr = 2
[case.before]
replicas = [1, 2, 3]
isr = [1, 2, 3]
leader = 1
[[case.step]]
event = { kind = "fence", broker = 1 }
expect = { leader = 3 }
"#,
    );
    assert!(!report.passed());
    let text = report.to_string();
    assert!(text.contains("FAIL  wrong on purpose"), "{text}");
    assert!(text.contains("leader: expected 3, got 2"), "{text}");
    assert!(text.contains("0 passed, 1 failed"), "{text}");
}

#[test]
fn unknown_fields_and_bad_toml_are_errors() {
    // A typo must not silently skip a check.
    let report = keel_controller::golden::run(
        r#"
[[case]]
name = "typo"
min_isr = 2
[case.before]
replicas = [1, 2]
isr = [1, 2]
leader = 1
[[case.step]]
event = { kind = "fence", broker = 1 }
expect = { leeder = 2 }
"#,
    );
    assert!(!report.passed());
    assert!(report.parse_error.is_some());
    assert!(!keel_controller::golden::run("not toml [").passed());
    assert!(!keel_controller::golden::run("").passed());
}
