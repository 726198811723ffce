// Command report reads `go test -bench` output (the text `make bench` tees to
// bench/raw.txt) from the files named on the command line, or stdin, extracts the
// figures issue 6 asks for, and writes bench/results.json (a flat JSON object of numbers)
// and bench/RESULTS.md (each figure beside its goal, plus the machine). It prints the
// table to stdout too.
//
//	go run ./bench/report < bench/raw.txt
//	go run ./bench/report -json out.json -md out.md raw1.txt raw2.txt
//
// It is make bench's gate: having written its files, it exits 3, naming each problem on
// stderr, when a goal is missed (judged on the unrounded figure), a figure with a goal was
// not measured, a benchmark was skipped or failed, a part of bench/run.sh failed, or a
// figure came from a fallback (gate.go). 1 is an error.
//
// It also rewrites the headline table in README.md (-readme-file), between its markers;
// -readme prints that table from bench/results.json without reading any benchmark output:
//
//	go run ./bench/report -readme
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

func main() {
	jsonPath := flag.String("json", "bench/results.json", "where to write the flat JSON figures")
	mdPath := flag.String("md", "bench/RESULTS.md", "where to write the Markdown report")
	svgPath := flag.String("svg", "bench/fidelity.svg", "where to draw the fidelity chart")
	readmePath := flag.String("readme-file", "README.md", "README whose headline table is rewritten from the new figures (if it has the markers)")
	readme := flag.Bool("readme", false, "print the README's headline table from the -json file and exit; reads no benchmark output")
	flag.Parse()
	if *readme {
		res, err := readResults(*jsonPath)
		if err != nil {
			fatal(err)
		}
		fmt.Print(ReadmeTable(res, readRun(*mdPath)))
		return
	}
	var in io.Reader = os.Stdin
	if flag.NArg() > 0 {
		var all bytes.Buffer
		for _, f := range flag.Args() {
			b, err := os.ReadFile(f)
			if err != nil {
				fatal(err)
			}
			all.Write(b)
			all.WriteByte('\n')
		}
		in = &all
	}
	p, err := Parse(in)
	if err != nil {
		fatal(err)
	}
	fig := Measure(p)
	res := fig.Rounded()
	if len(res) == 0 {
		fatal(fmt.Errorf("no benchmark figures found in the input"))
	}
	js, err := resultsJSON(res)
	if err != nil {
		fatal(err)
	}
	if err := os.WriteFile(*jsonPath, js, 0o644); err != nil {
		fatal(err)
	}
	run := Run{Fallbacks: fig.Fallbacks, Problems: RunProblems(p, fig), Input: p}
	if len(p.Series) > 0 {
		if err := drawFidelity(p.Series, *svgPath); err != nil {
			fatal(err)
		}
		fmt.Printf("drew %s\n", *svgPath)
		run.Chart = relativeTo(*mdPath, *svgPath)
	}
	m := machine(p)
	m.Parts = p.Parts
	if err := os.WriteFile(*mdPath, []byte(Markdown(res, m, run)), 0o644); err != nil {
		fatal(err)
	}
	fmt.Print(Table(res))
	fmt.Printf("wrote %s and %s\n", *jsonPath, *mdPath)
	if ok, err := updateReadme(*readmePath, res, readRun(*mdPath)); err != nil {
		fatal(err)
	} else if ok {
		fmt.Printf("updated the headline table in %s\n", *readmePath)
	}
	// make bench is a gate (gate.go): the files are written; the status says whether the
	// run stands.
	if problems := Problems(p, fig); len(problems) > 0 {
		for _, l := range problems {
			fmt.Fprintln(os.Stderr, "report:", l)
		}
		fmt.Fprintf(os.Stderr, "report: %d problem(s): the run does not pass (figures written to %s and %s)\n", len(problems), *jsonPath, *mdPath)
		os.Exit(gateStatus)
	}
}

// relativeTo is path as a link from the file at from: relative to its directory, or path
// itself when there is no such relative path.
func relativeTo(from, path string) string {
	if rel, err := filepath.Rel(filepath.Dir(from), path); err == nil {
		return filepath.ToSlash(rel)
	}
	return path
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "report:", err)
	os.Exit(1)
}
