//go:build !race

package prio3

const raceEnabled = false
