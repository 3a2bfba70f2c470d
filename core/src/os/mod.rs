//! What differs between operating systems, one small module per concern, each with a `cfg`
//! per platform inside it and nowhere else: the rest of the crate calls these functions and
//! never `std::os::*` or `libc` directly (`docs/design.md` § Layers).
//!
//! The only `unsafe` code of the crate lives here, each block with its reason.

pub mod space;
