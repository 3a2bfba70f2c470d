#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| postbox_fuzz_harness::typed_body::run(data));
