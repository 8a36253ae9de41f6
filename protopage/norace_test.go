//go:build !race

package protopage_test

const raceEnabled = false
