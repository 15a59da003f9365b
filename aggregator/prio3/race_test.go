//go:build race

package prio3

// raceEnabled: the race detector slows Prio3 arithmetic ~10×; the truth
// test cuts its population under it.
const raceEnabled = true
