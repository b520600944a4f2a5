//! dcp's integration tests, in one test binary.
//!
//! `support` builds sessions and sandboxes; each other module covers one layer of the data
//! flow, from the host adapters to the CLI.

mod bill;
mod cli;
mod compress;
mod concurrency;
mod config;
mod context_text;
mod crash;
mod doctor;
mod e2e;
mod engine;
mod first_half_hour;
mod gen;
mod holdout;
mod host;
mod hostile;
mod import;
mod index;
mod keep;
mod masking;
mod newer_state;
mod node;
mod offer;
mod package;
mod persistence;
mod protocol;
mod proxy;
mod proxy_abuse;
mod proxy_guard;
mod proxy_pipeline;
mod proxy_resume;
mod proxy_state;
mod proxy_upstreams;
mod ranges_shown;
mod replay;
mod replay_misses;
mod savings;
mod sidecar;
mod sidecar_compress;
mod slim;
mod spend;
mod state_store;
mod storage_failures;
mod stream;
mod stripped;
mod support;
mod tokens;
mod usage;
mod views;
