package pgstore

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// procAttr runs a server as cred's user, in a process group of its own,
// killed when the test binary dies (a test timeout skips TestMain's
// cleanup; the backends follow their postmaster).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred, Pdeathsig: syscall.SIGKILL}
}

// children lists the processes whose parent is pid, from /proc.
func children(pid int) []int {
	var kids []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		fields := statFields(f) // state ppid ...
		if len(fields) < 2 || fields[1] != strconv.Itoa(pid) {
			continue
		}
		if c, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil {
			kids = append(kids, c)
		}
	}
	return kids
}

// statFields returns the fields of the /proc stat file at path after
// "pid (comm)" (comm may hold spaces, so they start after the last ")"),
// or nil.
func statFields(path string) []string {
	b, err := os.ReadFile(path)
	i := strings.LastIndexByte(string(b), ')')
	if err != nil || i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// procCPU returns the CPU time (user and system) process pid has used, or
// -1 if /proc cannot tell.
func procCPU(pid int) time.Duration {
	// After "pid (comm)": state is field 3; utime and stime are fields 14
	// and 15, in clock ticks (USER_HZ, 100 on Linux).
	fields := statFields("/proc/" + strconv.Itoa(pid) + "/stat")
	if len(fields) < 13 {
		return -1
	}
	u, err1 := strconv.ParseInt(fields[11], 10, 64)
	s, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(u+s) * 10 * time.Millisecond
}

// selfCPU returns the CPU time (user and system) of this process, all
// threads, or -1.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// selfUserCPU returns the user CPU time of this process, all threads
// (the Go code's, the runtime's: not the kernel's), or -1.
func selfUserCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano())
}

// pause sleeps d in nanosleep: time.Sleep rounds a pause under a
// millisecond up to one when the runtime waits in epoll.
func pause(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	syscall.Nanosleep(&ts, nil)
}
