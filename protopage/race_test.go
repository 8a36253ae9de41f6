//go:build race

package protopage_test

// raceEnabled: the race detector makes sync.Pool drop items at random,
// so allocation figures are not meaningful under -race.
const raceEnabled = true
