// Command report reads `go test -bench` output (the text `make bench` tees to
// bench/raw.txt) from the files named on the command line, or stdin, extracts the
// figures issue 6 asks for, and writes bench/results.json (a flat JSON object of numbers)
// and bench/RESULTS.md (each figure beside its goal, plus the machine). It prints the
// table to stdout too.
//
//	go run ./bench/report < bench/raw.txt
//	go run ./bench/report -json out.json -md out.md raw1.txt raw2.txt
//
// It also rewrites the headline table in README.md (-readme-file), between its markers;
// -readme prints that table from bench/results.json without reading any benchmark output:
//
//	go run ./bench/report -readme
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
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
	res := Results(p)
	if len(res) == 0 {
		fatal(fmt.Errorf("no benchmark figures found in the input"))
	}
	js, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		fatal(err)
	}
	if err := os.WriteFile(*jsonPath, append(js, '\n'), 0o644); err != nil {
		fatal(err)
	}
	m := machine(p.CPU)
	m.Parts = p.Parts
	if err := os.WriteFile(*mdPath, []byte(Markdown(res, m)), 0o644); err != nil {
		fatal(err)
	}
	if len(p.Series) > 0 {
		if err := drawFidelity(p.Series, *svgPath); err != nil {
			fatal(err)
		}
		fmt.Printf("drew %s\n", *svgPath)
	}
	fmt.Print(Table(res))
	fmt.Printf("wrote %s and %s\n", *jsonPath, *mdPath)
	if ok, err := updateReadme(*readmePath, res, readRun(*mdPath)); err != nil {
		fatal(err)
	} else if ok {
		fmt.Printf("updated the headline table in %s\n", *readmePath)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "report:", err)
	os.Exit(1)
}
