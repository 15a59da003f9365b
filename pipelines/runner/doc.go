// Package runner runs the whole pipeline in one process for `crowdlog run`
// and `crowdlog pdd`: it starts local servers when no addresses are given
// and wires each role's own constructor (randomness.New, relays.New,
// aggregator.New, stage.New, …) exactly as the per-role subcommands do, so
// one machine and a cluster share one code path.
package runner
