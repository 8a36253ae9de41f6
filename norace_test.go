//go:build !race

package ctoken

const raceEnabled = false
