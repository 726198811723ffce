package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// make bench keeps its raw output, bench/raw.txt, as bench/raw.txt.gz (gzip -n: the same
// bytes for the same output), committed with the results it gives, so that results.json
// can be re-derived from what was measured:
//
//	zcat bench/raw.txt.gz | go run ./bench/report -json /tmp/results.json -md /tmp/RESULTS.md -svg /tmp/fidelity.svg -readme-file /dev/null
//
// TestResultsFromCommittedRaw holds the committed results.json to it.

// resultsJSON is results.json's bytes for res.
func resultsJSON(res map[string]float64) ([]byte, error) {
	js, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(js, '\n'), nil
}

// rederive is the results.json the report derives from the gzipped raw output at gzPath.
func rederive(gzPath string) ([]byte, error) {
	f, err := os.Open(gzPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", gzPath, err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", gzPath, err)
	}
	p, err := Parse(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", gzPath, err)
	}
	return resultsJSON(Results(p))
}

// checkRederived reports whether the results.json at jsonPath is what the report derives
// from the raw output at gzPath: nil when byte for byte, else an error naming each key
// that differs.
func checkRederived(gzPath, jsonPath string) error {
	want, err := rederive(gzPath)
	if err != nil {
		return err
	}
	got, err := os.ReadFile(jsonPath)
	if err != nil {
		return err
	}
	if bytes.Equal(got, want) {
		return nil
	}
	var g, w map[string]float64
	if err := json.Unmarshal(got, &g); err != nil {
		return fmt.Errorf("%s: %w", jsonPath, err)
	}
	_ = json.Unmarshal(want, &w)
	var diffs []string
	for k, v := range w {
		if gv, ok := g[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: %s derives %v, %s has none", k, gzPath, v, jsonPath))
		} else if gv != v {
			diffs = append(diffs, fmt.Sprintf("%s: %s derives %v, %s has %v", k, gzPath, v, jsonPath, gv))
		}
	}
	for k, v := range g {
		if _, ok := w[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: %s has %v, %s derives none", k, jsonPath, v, gzPath))
		}
	}
	slices.Sort(diffs)
	if len(diffs) == 0 {
		diffs = []string{"the same figures, written otherwise (not as the report writes them)"}
	}
	return fmt.Errorf("%s is not what the report derives from %s:\n%s", jsonPath, gzPath, strings.Join(diffs, "\n"))
}
