package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/route"
)

// Every sample event in testdata/events, produced to a running gate, arrives on the
// topic the router picks for it (internal/route's tests pin those choices, file by file),
// once, with its value unchanged.
func TestServeRoutesSampleEvents(t *testing.T) {
	t.Parallel()
	const fileHeader = "test-file"
	dir := filepath.Join("..", "..", "testdata", "events")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The expected topic of each file, from the router with the gate's default settings.
	cfg, err := config.Load(getenvFrom(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := limit.New(cfg.LimitConfig(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := route.New(cfg.RouteConfig(), lim, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{} // file -> topic
	values := map[string][]byte{}
	var in []*kgo.Record
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		v, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		rec := &kgo.Record{Topic: cfg.InputTopic, Value: v, Headers: []kgo.RecordHeader{{Key: fileHeader, Value: []byte(e.Name())}}}
		out, _ := r.Route(time.Now(), rec, nil)
		want[e.Name()], values[e.Name()] = out.Topic, v
		in = append(in, rec)
	}
	seen := map[string]bool{}
	for _, topic := range want {
		seen[topic] = true
	}
	if len(seen) != 2 {
		t.Fatalf("the sample events go to %v: want accepted and dead letter", seen)
	}

	rs := redistest.Start(t)
	kc, kenv := kafkaEnv(t)
	startGate(t, withEnv(kenv, map[string]string{"GATE_REDIS_URLS": rs.URL(), "GATE_HTTP_ADDR": "127.0.0.1:0"}))
	prod, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if err := prod.ProduceSync(t.Context(), in...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.FetchMaxWait(100*time.Millisecond),
		kgo.ConsumeTopics(cfg.AcceptedTopic, cfg.OverflowTopic, cfg.DeadLetterTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	got := map[string][]*kgo.Record{}
	n := 0
	waitFor(t, 20*time.Second, "every sample event on an output topic", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		cons.PollFetches(ctx).EachRecord(func(rec *kgo.Record) {
			for _, h := range rec.Headers {
				if h.Key == fileHeader {
					got[string(h.Value)] = append(got[string(h.Value)], rec)
					n++
				}
			}
		})
		return n >= len(in)
	})
	for file, topic := range want {
		recs := got[file]
		if len(recs) != 1 || recs[0].Topic != topic || string(recs[0].Value) != string(values[file]) {
			var topics []string
			for _, rec := range recs {
				topics = append(topics, rec.Topic)
			}
			t.Errorf("%s: arrived on %v, want once on %s with its value", file, topics, topic)
		}
	}
}
