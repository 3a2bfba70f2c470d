//! Python binding (placeholder).
