package redistest

import (
	"strings"
	"testing"
)

// TestRefuseWrites: each refusal fails writes with its own error while reads still answer,
// and AcceptWrites brings writes back; on a server with a password too (RefuseWrites'
// own client had none: NOAUTH).
func TestRefuseWrites(t *testing.T) {
	t.Parallel()
	type refusal struct {
		how  Refusal
		opts Options
	}
	cases := []refusal{{RefuseOOM, Options{}}, {RefuseReadOnly, Options{}}, {RefuseMisconf, Options{}}, {RefuseNoReplicas, Options{}},
		{RefuseOOM, Options{Password: "pw"}}, {RefuseReadOnly, Options{Password: "pw"}}}
	for _, tc := range cases {
		how, opts, name := tc.how, tc.opts, tc.how.String()
		if opts.Password != "" {
			name += "/password"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := StartWith(t, opts)
			c := s.Client(t)
			ctx := ctxTimeout(t, topologyTimeout)
			s.RefuseWrites(t, how)
			err := c.IncrBy(ctx, "k", 5).Err()
			if err == nil || !strings.HasPrefix(err.Error(), how.errPrefix()) {
				t.Fatalf("INCRBY while refusing: %v, want an error starting %q", err, how.errPrefix())
			}
			if v, err := c.MGet(ctx, "k", "j").Result(); err != nil || len(v) != 2 || v[0] != nil {
				t.Fatalf("MGET while refusing writes = %v, %v; want [nil nil], no error", v, err)
			}
			s.AcceptWrites(t)
			if n, err := c.IncrBy(ctx, "k", 5).Result(); err != nil || n != 5 {
				t.Fatalf("INCRBY after AcceptWrites = %d, %v; want 5", n, err)
			}
			if n := c.Exists(ctx, "redistest:probe").Val(); n != 0 {
				t.Errorf("the probe key was left behind")
			}
			s.AcceptWrites(t) // a second one does nothing
		})
	}
}
