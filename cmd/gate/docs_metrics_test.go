package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// metricDocs are the texts that name the gate's metrics to an operator: the docs, the
// chart's README, values and templates (the alert rules among them), the compose stack's
// alert rules, the README and the variables' descriptions (gate env), as globs from the
// repository's root. A new doc in docs/ is checked without an edit here.
var metricDocs = []string{
	"README.md", "docs/*.md",
	"deploy/helm/capture-gate/README.md", "deploy/helm/capture-gate/values.yaml",
	"deploy/helm/capture-gate/templates/*.yaml", "deploy/helm/capture-gate/templates/NOTES.txt",
	"deploy/compose/alerts.yml",
	"internal/config/*.go",
}

// metricMention is a metric name in a doc: gate_ and lower-case words, not inside a
// longer word, a path or a link's anchor (#event-time-gate_clockevent); then a * or a
// trailing _ for a family (gate_kafka_*), and the {labels} of a selector or a table row,
// if any.
var metricMention = regexp.MustCompile(`(?:^|[^\w#/-])(gate_[a-z0-9_]+)(\*)?(\{[^{}\n]*\})?`)

// TestDocsNameExportedMetrics: every metric a doc names is one the gate exports, and every
// label name it gives one of that metric's, so that a renamed or invented metric in a
// runbook (an alert nobody can write, a query that finds nothing) fails here.
//
// The names are read from the gate's source rather than from a running gate's registry,
// which holds some metrics only in some modes (rules, TLS files, sentinel): every
// prometheus.New{Counter,Gauge,Histogram,Summary}[Vec|Func] and prometheus.NewDesc call in
// the non-test files of internal/ and cmd/gate gives a name, with a histogram's _bucket,
// _sum and _count and a summary's _sum and _count, and its label names (variable labels,
// and constant ones given as a literal or a local variable holding one). Labels added by
// prometheus.WrapRegistererWith (limit, rule) are allowed on every metric, as are a scrape
// target's (targetLabels). A name the parse cannot read (not a string literal) fails the
// test rather than being skipped. franz-go's metrics (kprom.NewMetrics' namespace,
// gate_kafka_) are not in the source: a doc's name of one is checked against
// deploy/helm/testdata/metrics.txt, which TestMetricNamesFile holds to a running gate.
// That file also checks the parse: each of the gate's own names it lists must be found
// here.
func TestDocsNameExportedMetrics(t *testing.T) {
	src := sourceMetrics(t)
	if len(src.metrics) < 50 {
		t.Fatalf("found %d metric names in the source; has the way metrics are made changed?", len(src.metrics))
	}
	listed := listedMetricNames(t)
	for n := range listed {
		if strings.HasPrefix(n, "gate_") && !src.kafka(n) && src.metrics[n] == nil {
			t.Errorf("%s lists %s, which the source parse did not find: teach sourceMetrics how it is made", metricNamesFile, n)
		}
	}

	root := filepath.Join("..", "..")
	mentions := 0
	for _, glob := range metricDocs {
		files, err := filepath.Glob(filepath.Join(root, glob))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s matches no file (%v)", glob, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel(root, f)
			text := string(b)
			for _, m := range metricMention.FindAllStringSubmatchIndex(text, -1) {
				mentions++
				name, labels := text[m[2]:m[3]], ""
				if m[6] >= 0 {
					labels = text[m[6]:m[7]]
				}
				where := rel + ":" + strconv.Itoa(1+strings.Count(text[:m[2]], "\n"))
				if m[4] >= 0 || strings.HasSuffix(name, "_") {
					if !src.family(name, listed) {
						t.Errorf("%s: %s*: the gate exports no metric named so", where, name)
					}
					continue
				}
				if src.kafka(name) {
					if !listed[name] {
						t.Errorf("%s: %s: franz-go's metrics a gate exports (%s) do not include it", where, name, metricNamesFile)
					}
					continue
				}
				mi := src.metrics[name]
				if mi == nil {
					t.Errorf("%s: %s: the gate exports no such metric", where, name)
					continue
				}
				for _, l := range selectorLabels(labels) {
					if !mi.anyLabel && !mi.labels[l] && !src.wrapLabels[l] && !targetLabels[l] {
						t.Errorf("%s: %s%s: %s has no label %q (its labels: %v)", where, name, labels, name, l, slices.Sorted(maps.Keys(mi.labels)))
					}
				}
			}
		}
	}
	if mentions < 100 {
		t.Errorf("found %d metric names in the docs; has metricMention stopped matching them?", mentions)
	}
}

// targetLabels are the labels Prometheus gives every sample of a scrape target (job,
// instance) and the Kubernetes ones a PodMonitor or ServiceMonitor adds: a query may select
// on them whatever the metric.
var targetLabels = map[string]bool{"job": true, "instance": true, "namespace": true, "pod": true,
	"container": true, "service": true, "endpoint": true}

// selectorLabels returns the label names of a {...} after a metric's name: a selector's
// (route="overflow", cause=~"a|b") or a table's list (route,reason); templating such as a
// chart's %s is skipped.
func selectorLabels(braces string) []string {
	if braces == "" {
		return nil
	}
	inner := regexp.MustCompile(`"[^"]*"`).ReplaceAllString(braces[1:len(braces)-1], "")
	ident := regexp.MustCompile(`^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:$|=|!=|=~|!~)`)
	var out []string
	for _, part := range strings.Split(inner, ",") {
		if m := ident.FindStringSubmatch(part); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

// listedMetricNames reads deploy/helm/testdata/metrics.txt (TestMetricNamesFile).
func listedMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(metricNamesFile)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out[l] = true
		}
	}
	return out
}

// metricInfo is one exported sample name's label names; anyLabel when the source gives
// them in a form the parse does not read.
type metricInfo struct {
	labels   map[string]bool
	anyLabel bool
}

// srcMetrics is what sourceMetrics found.
type srcMetrics struct {
	metrics    map[string]*metricInfo // by sample name
	kprom      []string               // kprom namespaces, with their trailing _
	wrapLabels map[string]bool        // labels prometheus.WrapRegistererWith adds
}

// kafka reports whether name is franz-go's (kprom's namespace).
func (s *srcMetrics) kafka(name string) bool {
	for _, p := range s.kprom {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// family reports whether some exported metric's name starts with prefix: one of the
// gate's own, one of franz-go's a gate exports, or kprom's namespace itself (gate_kafka_*).
func (s *srcMetrics) family(prefix string, listed map[string]bool) bool {
	for n := range s.metrics {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	for n := range listed {
		if s.kafka(n) && strings.HasPrefix(n, prefix) {
			return true
		}
	}
	for _, p := range s.kprom {
		if strings.HasPrefix(p, prefix) {
			return true
		}
	}
	return false
}

// sourceMetrics parses the non-test Go files of internal/ and cmd/gate for the metrics
// they make (see TestDocsNameExportedMetrics).
func sourceMetrics(t *testing.T) *srcMetrics {
	t.Helper()
	s := &srcMetrics{metrics: map[string]*metricInfo{}, wrapLabels: map[string]bool{}}
	fset := token.NewFileSet()
	root := filepath.Join("..", "..")
	for _, dir := range []string{"internal", filepath.Join("cmd", "gate")} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			vars := fileLiterals(f)
			ast.Inspect(f, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok {
					s.call(t, fset, vars, call)
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// call records the metric call makes, if it makes one.
func (s *srcMetrics) call(t *testing.T, fset *token.FileSet, vars map[string][]ast.Expr, call *ast.CallExpr) {
	t.Helper()
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return
	}
	pkg, ok := sel.X.(*ast.Ident)
	if !ok {
		return
	}
	fn := sel.Sel.Name
	bad := func(what string) { t.Errorf("%s: %s.%s: %s", fset.Position(call.Pos()), pkg.Name, fn, what) }
	switch {
	case pkg.Name == "kprom" && fn == "NewMetrics":
		ns, ok := stringLit(call.Args[0])
		if !ok {
			bad("cannot read the namespace")
			return
		}
		s.kprom = append(s.kprom, ns+"_")
		return
	case pkg.Name != "prometheus":
		return
	case fn == "WrapRegistererWith":
		keys, ok := literalKeys(vars, call.Args[0])
		if !ok {
			bad("cannot read the labels")
			return
		}
		for _, k := range keys {
			s.wrapLabels[k] = true
		}
		return
	}
	var name string
	mi := &metricInfo{labels: map[string]bool{}}
	addKeys := func(e ast.Expr) {
		if id, ok := e.(*ast.Ident); ok && id.Name == "nil" {
			return
		}
		keys, ok := literalKeys(vars, e)
		if !ok {
			mi.anyLabel = true
		}
		for _, k := range keys {
			mi.labels[k] = true
		}
	}
	kind := ""
	switch fn {
	case "NewDesc":
		n, ok := stringLit(call.Args[0])
		if !ok {
			bad("cannot read the name")
			return
		}
		name = n
		addKeys(call.Args[2])
		addKeys(call.Args[3])
	case "NewCounter", "NewCounterVec", "NewCounterFunc", "NewGauge", "NewGaugeVec", "NewGaugeFunc",
		"NewUntypedFunc", "NewHistogram", "NewHistogramVec", "NewSummary", "NewSummaryVec":
		opts, ok := call.Args[0].(*ast.CompositeLit)
		if !ok {
			bad("cannot read the options: give them as a literal")
			return
		}
		for _, el := range opts.Elts {
			kv, ok := el.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			switch key := kv.Key.(*ast.Ident).Name; key {
			case "Name":
				if name, ok = stringLit(kv.Value); !ok {
					bad("cannot read the name")
					return
				}
			case "Namespace", "Subsystem":
				bad("a " + key + ": give the whole name in Name, or teach this test")
				return
			case "ConstLabels":
				addKeys(kv.Value)
			}
		}
		if strings.HasSuffix(fn, "Vec") {
			addKeys(call.Args[1])
		}
		if strings.Contains(fn, "Histogram") {
			kind = "histogram"
		} else if strings.Contains(fn, "Summary") {
			kind = "summary"
		}
	default:
		return
	}
	if name == "" {
		bad("no name")
		return
	}
	with := func(extra string) *metricInfo {
		c := &metricInfo{labels: map[string]bool{extra: true}, anyLabel: mi.anyLabel}
		for k := range mi.labels {
			c.labels[k] = true
		}
		return c
	}
	switch kind {
	case "histogram":
		s.metrics[name+"_bucket"], s.metrics[name+"_sum"], s.metrics[name+"_count"] = with("le"), mi, mi
		// The name alone, as docs write it for the histogram as a whole.
		s.metrics[name] = with("le")
	case "summary":
		s.metrics[name], s.metrics[name+"_sum"], s.metrics[name+"_count"] = with("quantile"), mi, mi
	default:
		s.metrics[name] = mi
	}
}

// stringLit is e's value when it is a string literal.
func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	v, err := strconv.Unquote(lit.Value)
	return v, err == nil
}

// fileLiterals maps each name a file assigns a composite literal to (labels :=
// prometheus.Labels{...}, var x = []string{...}) to those literals.
func fileLiterals(f *ast.File) map[string][]ast.Expr {
	out := map[string][]ast.Expr{}
	ast.Inspect(f, func(n ast.Node) bool {
		var names []*ast.Ident
		var values []ast.Expr
		switch d := n.(type) {
		case *ast.AssignStmt:
			values = d.Rhs
			for _, l := range d.Lhs {
				id, _ := l.(*ast.Ident)
				names = append(names, id)
			}
		case *ast.ValueSpec:
			names, values = d.Names, d.Values
		default:
			return true
		}
		if len(names) != len(values) {
			return true
		}
		for i, id := range names {
			if lit, ok := values[i].(*ast.CompositeLit); ok && id != nil {
				out[id.Name] = append(out[id.Name], lit)
			}
		}
		return true
	})
	return out
}

// literalKeys reads label names: a []string{"a", "b"} literal's elements, a
// prometheus.Labels{"a": ...} literal's keys, or, for a name, those of the one literal
// its file assigns it (labels := prometheus.Labels{...}). ok is false for anything else,
// a name assigned several literals among them.
func literalKeys(vars map[string][]ast.Expr, e ast.Expr) (keys []string, ok bool) {
	if id, isIdent := e.(*ast.Ident); isIdent {
		if lits := vars[id.Name]; len(lits) == 1 {
			return literalKeys(nil, lits[0])
		}
		return nil, false
	}
	lit, isLit := e.(*ast.CompositeLit)
	if !isLit {
		return nil, false
	}
	for _, el := range lit.Elts {
		if kv, isKV := el.(*ast.KeyValueExpr); isKV {
			el = kv.Key
		}
		k, isStr := stringLit(el)
		if !isStr {
			return nil, false
		}
		keys = append(keys, k)
	}
	return keys, true
}
