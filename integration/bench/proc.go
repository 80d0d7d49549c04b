package main

// Reading the CPU and memory of processes from /proc.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// procCPU returns utime+stime of pid from /proc/PID/stat.
func procCPU(pid int) time.Duration {
	st, _ := readProcStat(pid)
	return st.cpu
}

// procStat is what /proc/PID/stat says of a process's CPU time.
type procStat struct {
	ppid     int
	cpu      time.Duration // utime + stime
	children time.Duration // cutime + cstime: of the children it waited for
}

// readProcStat reads /proc/PID/stat; false when the process is gone.
func readProcStat(pid int) (procStat, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return procStat{}, false
	}
	tick := func(k int) time.Duration {
		n, _ := strconv.ParseInt(f[k], 10, 64)
		return time.Duration(n) * time.Second / 100 // USER_HZ = 100 on Linux
	}
	ppid, _ := strconv.Atoi(f[1])
	return procStat{ppid: ppid, cpu: tick(11) + tick(12), children: tick(13) + tick(14)}, true
}

// cpuSample is the machine's CPU time from /proc/stat.
type cpuSample struct{ busy, total int64 }

func sampleCPU() cpuSample {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuSample{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var s cpuSample
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		s.total += n
		if i != 3 && i != 4 { // idle, iowait
			s.busy += n
		}
	}
	return s
}

// busy returns the share of the machine's CPU time that was busy between a and b.
func busy(a, b cpuSample) float64 {
	if b.total == a.total {
		return 0
	}
	return float64(b.busy-a.busy) / float64(b.total-a.total)
}

// selfCPU returns the bench process's own CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
