// Package testflags sets a test binary's flags to what its package's tests are tuned for,
// where the command line does not say otherwise.
//
// It guarantees that a flag given on the command line (go test -parallel 2, say) is
// never overridden: only a flag left at its default is set.
package testflags

import (
	"flag"
	"strconv"
)

// Parallel makes n the number of parallel tests run at a time (-test.parallel), unless
// the command line set it; go test's default is GOMAXPROCS. It is for a TestMain (it
// parses the command line if the TestMain has not), in a package whose parallel tests
// mostly wait (on brokers, sessions, timeouts, a process they started): n of them at a
// time overlap their waits where GOMAXPROCS's two, on a CI machine, would leave the
// cores idle.
func Parallel(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(n))
	}
}
