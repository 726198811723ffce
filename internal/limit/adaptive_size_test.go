package limit

import (
	"os"
	"regexp"
	"strconv"
	"testing"
	"unsafe"

	"github.com/capturegate/gate/internal/spike"
)

// TestDesignStatesLearnedSizes keeps docs/design.md's sizes of a gate's learned state per
// team and of the stored profile equal to the types': stated by hand, they drifted (224
// and 64 bytes were written when the state was 240 and the profile 128).
func TestDesignStatesLearnedSizes(t *testing.T) {
	doc, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		re   string
		want uintptr
	}{
		{`the last three windows \((\d+) bytes`, unsafe.Sizeof(learned{})},
		{`holding\s+the (\d+)-byte ` + "`spike.Profile`", unsafe.Sizeof(spike.Profile{})},
		{`the profile \((\d+) bytes\)`, unsafe.Sizeof(spike.Profile{})},
	} {
		m := regexp.MustCompile(c.re).FindSubmatch(doc)
		if m == nil {
			t.Errorf("docs/design.md has no %q", c.re)
			continue
		}
		if n, _ := strconv.Atoi(string(m[1])); uintptr(n) != c.want {
			t.Errorf("docs/design.md says %s bytes (%q), the type is %d", m[1], m[0], c.want)
		}
	}
}
