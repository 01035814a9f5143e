//! Kernel builder: emits NEFFs in the real container layout from a small Rust API
