//! Helpers shared by the integration tests (each test file includes this with `mod common;`):
//! the workspace's test kit.

#![allow(unused_imports)]

pub use postbox_testkit::*;
