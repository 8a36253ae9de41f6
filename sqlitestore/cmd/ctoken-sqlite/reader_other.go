//go:build !(linux || darwin || freebsd)

package main

// heldWAL is not read on this platform.
func heldWAL(string) string { return "" }
