//! Replays every input under `fuzz/regressions/<target>/` through its target's logic, on stable
//! and without libFuzzer: each file is an input that once crashed a target (or covers a case
//! worth keeping), named after what it found.

use std::path::Path;

type Target = fn(&[u8]);

const TARGETS: &[(&str, Target)] = &[
    ("records", postbox_fuzz_harness::records::run),
    ("open_store", postbox_fuzz_harness::open_store::run),
    ("queue_model", postbox_fuzz_harness::queue_model::run),
    ("c_api", postbox_fuzz_harness::c_api::run),
    ("typed_body", postbox_fuzz_harness::typed_body::run),
];

#[test]
fn fuzz_regressions() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../regressions");
    let mut replayed = 0;
    for (name, run) in TARGETS {
        let dir = root.join(name);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<_> = entries
            .map(|e| e.expect("a directory entry").path())
            .collect();
        files.sort();
        for file in files {
            let data = std::fs::read(&file).expect("a regression input");
            eprintln!("{name}: {}", file.display());
            run(&data);
            replayed += 1;
        }
    }
    eprintln!("{replayed} regression inputs replayed");
}

/// Empty and tiny inputs reach every target's early exits and its smallest valid run.
#[test]
fn tiny_inputs() {
    for (_, run) in TARGETS {
        for data in [&[][..], &[0], &[1, 2, 3], &[0xFF; 40]] {
            run(data);
        }
    }
}
