package main

import (
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestResultsFromCommittedRaw: the committed bench/results.json is what the report
// derives from the committed bench/raw.txt.gz, the raw output of the make bench that
// wrote it. raw.txt.gz is committed: without it there is nothing to hold results.json to,
// which fails here rather than passing unchecked.
func TestResultsFromCommittedRaw(t *testing.T) {
	const gz, js = "../raw.txt.gz", "../results.json"
	if _, err := os.Stat(gz); err != nil {
		t.Fatalf("bench/raw.txt.gz: %v: bench/results.json cannot be re-derived, so it is not checked (make bench writes raw.txt.gz; commit it with the results)", err)
	}
	if err := checkRederived(gz, js); err != nil {
		t.Errorf("%v\nre-derive it: zcat bench/raw.txt.gz | go run ./bench/report", err)
	}
}

// checkRederived passes a results.json the report wrote from the raw output, and fails
// one that differs from it in a figure, or lacks one.
func TestCheckRederived(t *testing.T) {
	dir := t.TempDir()
	gz := filepath.Join(dir, "raw.txt.gz")
	f, err := os.Create(gz)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	if _, err := zw.Write([]byte(fullRaw(t))); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	p, err := Parse(strings.NewReader(fullRaw(t)))
	if err != nil {
		t.Fatal(err)
	}
	res := Results(p)
	write := func(res map[string]float64) string {
		js, err := resultsJSON(res)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "results.json")
		if err := os.WriteFile(path, js, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	if err := checkRederived(gz, write(res)); err != nil {
		t.Errorf("the report's own results.json: %v", err)
	}
	res["hotpath_vs_map_ratio"] = 1.1
	delete(res, "bytes_per_entity")
	err = checkRederived(gz, write(res))
	if err == nil {
		t.Fatal("a results.json that differs passed")
	}
	for _, s := range []string{
		"bytes_per_entity: " + gz + " derives 92.2, " + filepath.Join(dir, "results.json") + " has none",
		"hotpath_vs_map_ratio: " + gz + " derives 1.2497, " + filepath.Join(dir, "results.json") + " has 1.1",
	} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error lacks %q:\n%v", s, err)
		}
	}
}
