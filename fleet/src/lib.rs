//! Gradless on several GPU hosts. Device workers (`gradless worker`, one process per
//! device) and device-less fronts (`gradless serve --nats ...`) meet in NATS JetStream:
//! jobs wait in a work-queue stream per worker, each job's events go to a stream any front
//! can replay, and workers announce themselves in a key-value bucket with a heartbeat.
//!
//! [`bus`] owns the names and the messages; [`host`] a worker host's loop;
//! [`front`] what a front needs beyond the single-process server (submitting, relaying,
//! watching workers, recording); [`metrics`] the Prometheus registry all roles serve.
//! The engine knows nothing of this crate; the server uses it for its fleet mode.

pub mod bus;
pub mod front;
pub mod metrics;
pub mod host;
