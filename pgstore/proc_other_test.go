//go:build !linux

package pgstore

import (
	"syscall"
	"time"
)

// procAttr runs a server as cred's user, in a process group of its own.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}

// children is not known without /proc: signals reach the postmaster only,
// so the pause and crash tests are weaker off Linux (CI runs on Linux).
func children(pid int) []int { return nil }

// procCPU is not known without /proc.
func procCPU(pid int) time.Duration { return -1 }

// selfCPU is not measured off Linux.
func selfCPU() time.Duration { return -1 }

// selfUserCPU is not measured off Linux.
func selfUserCPU() time.Duration { return -1 }

// pause sleeps d.
func pause(d time.Duration) { time.Sleep(d) }
