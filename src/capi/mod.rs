//! capi
