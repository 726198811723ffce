package testflags

import (
	"flag"
	"testing"
)

// Parallel sets -test.parallel when nothing set it, and never overrides a value set
// before it (the command line's, or an earlier call's).
func TestParallelSetsOnlyWhatIsUnset(t *testing.T) {
	f := flag.Lookup("test.parallel")
	if f == nil {
		t.Fatal("no -test.parallel flag")
	}
	given := false
	flag.Visit(func(v *flag.Flag) { given = given || v.Name == "test.parallel" })
	want := "7"
	if given { // go test -parallel N: it stays N
		want = f.Value.String()
	}
	Parallel(7)
	if got := f.Value.String(); got != want {
		t.Fatalf("-test.parallel %s after Parallel(7) (given on the command line: %v), want %s", got, given, want)
	}
	Parallel(3)
	if got := f.Value.String(); got != want {
		t.Errorf("-test.parallel %s after Parallel(3) once it was set, want %s kept", got, want)
	}
}
