//go:build !linux

package consume

import "errors"

var errNoPinning = errors.New("binding threads to a CPU is implemented on Linux only")

type cpuMask struct{}

func pinProcess(int) (cpuMask, error) { return cpuMask{}, errNoPinning }
func unpinProcess(cpuMask) error      { return errNoPinning }
func pinOther(int, int) error         { return errNoPinning }
func usableCPUs() ([]int, error)      { return nil, errNoPinning }
