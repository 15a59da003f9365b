// Package tests holds crowdlog's end-to-end, fault, chaos and scale tests:
// each builds the real binary (cmd/crowdlog) or runs the in-process runner
// against the real parts — embedded NATS, a Kafka-protocol broker (kfake
// with a data dir) and a local ClickHouse server — and compares what is
// released with the release computed directly from the raw log
// (tests/truth). Shared helpers (cluster, processes, subsets of the bundled
// log) live in the test files beside the tests that use them.
package tests
