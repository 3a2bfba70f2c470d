//! C API (placeholder until the C API lands).
