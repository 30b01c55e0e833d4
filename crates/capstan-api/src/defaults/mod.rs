//! Defaulting of core/v1 objects, as upstream's `pkg/apis/core/v1` defaulters (generated and
//! hand-written) apply them when a request body is decoded.
