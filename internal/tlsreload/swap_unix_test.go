//go:build unix

package tlsreload

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A Secret volume swapped while the files are being read: the certificate is read from
// the directory before the swap and the key from the one after, a pair that does not
// match. The files as they are once the swap is done are good: they are put in use, with
// no warning and no count of gate_tls_reload_errors_total (the alert the docs suggest).
// The read is held between the certificate and the key by making the certificate of the
// directory read first a FIFO, the swap done while the reader waits on it.
func TestSecretVolumeSwappedMidRead(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	v := newSecretVolume(t, map[string][]byte{"ca.crt": f.serverCA.pem, "tls.crt": f.c1.certPEM, "tls.key": f.c1.keyPEM})
	r, err := New(files(v.dir), f.options())
	if err != nil {
		t.Fatal(err)
	}
	// A directory holding client-1's files, its certificate a FIFO, swapped in by hand.
	gen := "..2026_11_24_13_00_00.fifo"
	if err := os.Mkdir(filepath.Join(v.dir, gen), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(v.dir, gen, "ca.crt"), f.serverCA.pem)
	write(t, filepath.Join(v.dir, gen, "tls.key"), f.c1.keyPEM)
	fifo := filepath.Join(v.dir, gen, "tls.crt")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	swap := func(to string) {
		t.Helper()
		tmp := filepath.Join(v.dir, "..data_tmp"+strconv.Itoa(v.gen))
		if err := os.Symlink(to, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	swap(gen)

	f.clk.Advance(time.Second)
	done := make(chan *material)
	go func() { done <- r.current() }()
	// The reader has read ca.crt and waits on tls.crt: give it client-1's certificate,
	// and swap to client-2's files before it reads the key.
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(f.c1.certPEM); err != nil {
		t.Fatal(err)
	}
	v.update(map[string][]byte{"ca.crt": f.serverCA.pem, "tls.crt": f.c2.certPEM, "tls.key": f.c2.keyPEM})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	m := <-done
	if n := testutil.ToFloat64(r.failures); n != 0 || f.log.count(warning) != 0 {
		t.Errorf("a read across a good swap: gate_tls_reload_errors_total = %v, logs:\n%s", n, f.log.buf.String())
	}
	if got := m.cert.Leaf.Subject.CommonName; got != "client-2" {
		t.Errorf("in use after the swap: %s, want client-2", got)
	}
}
