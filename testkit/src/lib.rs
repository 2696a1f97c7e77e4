//! testkit placeholder
