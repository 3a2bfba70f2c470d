#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| postbox_fuzz_harness::records::run(data));
