//go:build linux

package consume

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// cpuMask is a set of CPUs a thread may run on.
type cpuMask = unix.CPUSet

// pinProcess binds every thread of this process to cpu, and those it starts after (a new
// thread inherits its creator's mask). It returns the mask the process had, for
// unpinProcess. Threads are listed from /proc/self/task until a pass finds none it has
// not bound: one started during a pass by a thread not yet bound would otherwise keep
// the old mask.
func pinProcess(cpu int) (cpuMask, error) {
	var old, set cpuMask
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return old, fmt.Errorf("reading this process's CPU mask: %w", err)
	}
	set.Set(cpu)
	return old, setProcessAffinity(&set)
}

// unpinProcess gives every thread of this process the mask old back.
func unpinProcess(old cpuMask) error { return setProcessAffinity(&old) }

// pinOther binds every thread of another process, pid, to cpu, as pinProcess does this
// one's (the end-to-end benches' redis-server, which redistest starts).
func pinOther(pid, cpu int) error {
	var set cpuMask
	set.Set(cpu)
	return setAffinity(fmt.Sprintf("/proc/%d/task", pid), &set)
}

func setProcessAffinity(set *cpuMask) error { return setAffinity("/proc/self/task", set) }

// setAffinity binds every thread listed in tasks, a /proc/PID/task directory, to set.
func setAffinity(tasks string, set *cpuMask) error {
	done := map[int]bool{}
	for {
		ents, err := os.ReadDir(tasks)
		if err != nil {
			return fmt.Errorf("listing the threads in %s: %w", tasks, err)
		}
		fresh := 0
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			fresh++
			if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH { // ESRCH: the thread ended
				return fmt.Errorf("setting thread %d's CPU mask: %w", tid, err)
			}
			done[tid] = true
		}
		if fresh == 0 {
			return nil
		}
	}
}

// usableCPUs lists the CPUs this process may run on.
func usableCPUs() ([]int, error) {
	var set cpuMask
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("reading this process's CPU mask: %w", err)
	}
	var cpus []int
	for c, n := 0, set.Count(); len(cpus) < n; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}
