//! The dashboard: one HTML file with its style and script, compiled into the binary so that
//! serving it needs no files and no build step. It polls `/api/overview` every second.

/// The page served at `/`.
pub const HTML: &str = include_str!("dashboard.html");
