//! Sensitivity: each seeded fault must make a check fail.
